"""vpmm.cupy on a real GPU: CuPy arrays allocated through libvpmm's CuPy
hooks, tagged by vpmm.region (and by a fixed-tag allocator), paused with and
without backups, resumed with their bytes; a failed allocation is an
exception, not a NULL pointer. Exits 77 without CuPy or a CUDA device."""
import sys

import pyharness

MiB = 1 << 20


def region_tags_and_pause():
    import cupy
    import vpmm
    import vpmm.cupy as vc
    vc.use_as_allocator()
    pool = vc.default_pool()
    plain = cupy.ones(4 * MiB, dtype=cupy.uint8)
    with vpmm.region("cp-weights", host_backup=True):
        w = cupy.arange(8 * MiB, dtype=cupy.float32)
    with vpmm.region("cp-kv"):
        kv = cupy.full(16 * MiB, 3, dtype=cupy.uint8)
    for a in (plain, w, kv):
        base, size = pool.lookup(a.data.ptr)
        assert base <= a.data.ptr and a.data.ptr + a.nbytes <= base + size
    assert pool.tag_stats("cp-weights")["n_live"] >= 1 and pool.tag_stats("cp-kv")["n_live"] >= 1
    expect = cupy.asnumpy(w)
    assert vc.pause("cp-weights") and vc.pause("cp-kv")
    ts = pool.tag_stats(None)
    assert ts["paused_bytes"] >= w.nbytes + kv.nbytes and ts["backup_bytes"] >= w.nbytes, ts
    assert int(plain.sum()) == 4 * MiB  # untagged memory is untouched by the pause
    assert vc.resume(None)
    assert (cupy.asnumpy(w) == expect).all(), "backed-up CuPy array changed across pause/resume"
    kv.fill(7)
    assert int(kv[:MiB].sum()) == 7 * MiB
    print("CuPy arrays tagged by vpmm.region paused and resumed, backup bytes equal")


def fixed_tag_allocator_and_errors():
    import cupy
    import vpmm
    import vpmm.cupy as vc
    pool = vc.default_pool()
    with cupy.cuda.using_allocator(vc.allocator("cp-fixed", host_backup=True)):
        a = cupy.full(2 * MiB, 5, dtype=cupy.int32)
    assert pool.tag_stats("cp-fixed")["n_live"] >= 1
    assert vc.pause("cp-fixed") and vc.resume("cp-fixed")
    assert int(a.sum()) == 10 * MiB
    vc.use_as_allocator()
    free, total = cupy.cuda.runtime.memGetInfo()
    try:
        cupy.empty(total * 2, dtype=cupy.uint8)
    except MemoryError as e:  # vpmm.OutOfMemory is a MemoryError
        assert isinstance(e, vpmm.OutOfMemory), type(e)
        print(f"oversized allocation raised: {e}")
    else:
        raise AssertionError("an allocation of twice the device memory succeeded")
    b = cupy.ones(MiB, dtype=cupy.uint8)  # the allocator still works afterwards
    assert int(b.sum()) == MiB
    del a, b
    print("fixed-tag allocator pauses; an impossible allocation raises vpmm.OutOfMemory")


CASES = {f.__name__: f for f in (region_tags_and_pause, fixed_tag_allocator_and_errors)}

if __name__ == "__main__":
    sys.exit(pyharness.main(__file__, CASES, needs="cupy"))
