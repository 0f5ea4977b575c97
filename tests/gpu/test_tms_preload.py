"""The torch_memory_saver drop-in in hook mode "preload" on a real GPU: each
case runs in a process started inside configure_subprocess() (so under
libvpmm_preload.so, with VPMM_LIBRARY naming the same libvpmm), with the TMS
variables the case names.

  engine_paused_whole     TMS_INIT_ENABLE=1 + _CPU_BACKUP=1: a GPT with AdamW
                          trains, pause() releases >= 95% of what the process
                          held on the device (mem_get_info), disable() works
                          while paused and gives its memory back, resume(),
                          and the loss goes on bit-identically to a run never
                          paused
  nested_regions          TMS_INIT_ENABLE: a region without backup inside the
                          "default" one; weights kept, grad buffer not backed up
  disable_untagged        disable() inside a region: untagged, not paused, and
                          its memory back on the device when the block ends
  cuda_graph_tagged       cuda_graph(tag="graph"): the capture's memory
                          (a 4 GB intermediate) pauses with the tag; replays
  raw_cudamalloc_routed   cudaMalloc through ctypes (what NCCL or cuBLAS call)
                          inside a region is pausable; outside it is not
  empty_cache_gives_back  torch.cuda.empty_cache() returns the memory to the
                          device under the interposer
  rss_after_mmap_resume   cpu_backup_backend="mmap": RSS grows on pause and
                          shrinks on resume (libvpmm's backup stores), or a
                          clear NotImplementedError where vpmm has none
  multi_device_restore    regions on two devices, paused per device, resumed
                          from device 0 (skipped, and said so, with one GPU)

Exits 77 without torch, a CUDA device, or libvpmm_preload.so next to the
library."""
import os
import subprocess
import sys
import time
import traceback

import pyharness

MiB = 1 << 20
GiB = 1 << 30


def _used(dev=0):
    import torch
    torch.cuda.synchronize(dev)
    free, total = torch.cuda.mem_get_info(dev)
    return total - free


def _deterministic():
    import torch
    torch.use_deterministic_algorithms(True, warn_only=True)  # the loss comparison is the judge
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    for name in ("enable_flash_sdp", "enable_mem_efficient_sdp", "enable_cudnn_sdp"):
        if hasattr(torch.backends.cuda, name):
            getattr(torch.backends.cuda, name)(False)  # the math attention: deterministic backward


def _train(steps, seed=0, pause_after=None, tms=None, report=None):
    """Losses of a GPT+AdamW trained `steps` steps; with pause_after=k, the
    whole process is paused after step k (and resumed) through `tms`."""
    import torch
    import gpt
    vocab = 32000
    torch.manual_seed(seed)
    model = gpt.GPT(vocab=vocab, d=1536, layers=12, heads=12).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    gen = torch.Generator(device="cuda").manual_seed(seed + 1)
    losses = []
    for step in range(steps):
        losses.append(gpt.train_step(model, opt, 8, 512, vocab, gen).item())
        if pause_after is not None and step + 1 == pause_after:
            report(tms, model)
    del model, opt
    return losses


def engine_paused_whole():
    import torch
    from torch_memory_saver import torch_memory_saver as tms
    import vpmm
    assert tms.hook_mode == "preload", tms.hook_mode
    _deterministic()
    base = _used()  # the context alone
    numbers = {}

    def pause_and_check(tms, model):
        before = _used()
        held = before - base
        tms.pause()
        after = _used()
        numbers.update(held=held, released=before - after)
        assert before - after >= 0.95 * held, (
            f"pause released {(before - after) / GiB:.2f} GiB of the {held / GiB:.2f} GiB the process held "
            f"({(before - after) / held:.1%}); {vpmm.default_pool(0).stats()}")
        # Work goes on while paused, outside the tagged memory, and gives its
        # memory back when the block ends.
        with tms.disable():
            x = torch.full((GiB,), 53, dtype=torch.uint8, device="cuda")
            assert x.float().mean().item() == 53
            numbers["in_disable"] = _used() - after
            del x
        numbers["after_disable"] = _used() - after
        assert numbers["after_disable"] <= 16 * MiB, f"disable() kept {numbers['after_disable'] / MiB:.0f} MiB"
        tms.resume()
        numbers["resumed"] = _used() - after

    t0 = time.time()
    paused = _train(6, pause_after=3, tms=tms, report=pause_and_check)
    torch.cuda.empty_cache()
    straight = _train(6)
    print(f"losses paused   {paused}\nlosses straight {straight}")
    assert paused == straight, "the loss after pause/resume differs from the run never paused"
    print(f"held {numbers['held'] / GiB:.2f} GiB above the context; pause released "
          f"{numbers['released'] / GiB:.2f} GiB ({numbers['released'] / numbers['held']:.1%}); disable() used "
          f"{numbers['in_disable'] / GiB:.2f} GiB and left {numbers['after_disable'] / MiB:.1f} MiB; "
          f"resume took back {numbers['resumed'] / GiB:.2f} GiB; losses bit-identical ({time.time() - t0:.1f} s)")


def nested_regions():
    import torch
    import vpmm
    from torch_memory_saver import torch_memory_saver as tms
    pool = vpmm.default_pool(0)
    size = 10_000_000
    weight = torch.full((size,), 42.0, device="cuda")
    with tms.region(tag="grad_buffer", enable_cpu_backup=False):
        grad = torch.full((size,), 99.0, device="cuda")
    extra = torch.full((size,), 7.0, device="cuda")  # "default" again after the region
    before = _used()
    tms.pause()
    assert before - _used() >= size * 4, "pause released less than the grad buffer"
    assert pool.tag_stats("grad_buffer")["backup_bytes"] == 0
    assert pool.tag_stats("default")["backup_bytes"] >= 2 * size * 4
    tms.resume()
    assert weight.sum().item() == 42.0 * size and extra.sum().item() == 7.0 * size
    grad.fill_(0.0)
    assert grad.sum().item() == 0.0
    print("a region without backup nests in the default one; the default's bytes survive")


def disable_untagged():
    import torch
    import vpmm
    from torch_memory_saver import torch_memory_saver as tms
    pool = vpmm.default_pool(0)
    with tms.region(tag="w", enable_cpu_backup=True):
        w = torch.full((64 * MiB,), 3, dtype=torch.uint8, device="cuda")
        tagged = pool.tag_stats("w")["live_bytes"]
        base = _used()
        with tms.disable():
            kept = torch.full((8 * MiB,), 5, dtype=torch.uint8, device="cuda")
            scratch = torch.ones((GiB // 2,), device="cuda")  # 2 GiB
            del scratch
        assert pool.tag_stats("w")["live_bytes"] == tagged, "disable() allocations were tagged"
    tms.pause("w")
    assert int(kept[::MiB].sum().item()) == 5 * 8, "a disable() tensor was paused"
    tms.resume("w")
    assert int(w[::MiB].sum().item()) == 3 * 64
    del kept  # its pool was kept while it lived; the next block end drops it
    with tms.region(tag="w"):
        with tms.disable():
            pass
    left = _used() - base
    assert left <= 16 * MiB, f"disable() left {left / MiB:.0f} MiB on the device"
    print(f"disable(): untagged, not paused, {left / MiB:.1f} MiB left on the device afterwards")


def cuda_graph_tagged():
    import torch
    from torch_memory_saver import torch_memory_saver as tms
    with tms.region(tag="kv_cache"):
        kv = torch.full((5, 100_000_000), 1.0, device="cuda")  # 2 GB
    static_in = torch.zeros((5,), device="cuda")
    out = {}

    def fn():
        v = (static_in + kv.mean(dim=1)).mean()
        out["y"] = (torch.ones((1_000_000_000,), device="cuda") * v).mean()  # 4 GB inside the graph

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with tms.cuda_graph(g, tag="graph"):
        fn()
    static_in.fill_(100)
    g.replay()
    assert abs(out["y"].item() - 101) < 1e-3, out["y"].item()
    torch.cuda.empty_cache()
    m0 = _used()
    tms.pause("kv_cache")
    m1 = _used()
    tms.pause("graph")
    m2 = _used()
    assert m0 - m1 > 1.9e9 and m1 - m2 > 3.9e9, (m0 - m1, m1 - m2)
    other = torch.zeros((2_500_000_000,), dtype=torch.uint8, device="cuda")
    del other
    torch.cuda.empty_cache()
    tms.resume("graph")
    tms.resume("kv_cache")
    kv.fill_(2.0)
    static_in.fill_(200)
    g.replay()
    assert abs(out["y"].item() - 202) < 1e-3, out["y"].item()
    print(f"pause('kv_cache') released {(m0 - m1) / 1e9:.2f} GB, pause('graph') {(m1 - m2) / 1e9:.2f} GB; "
          f"the graph replays after resume")


def raw_cudamalloc_routed():
    import ctypes
    import torch
    import vpmm
    from torch_memory_saver import torch_memory_saver as tms
    torch.cuda.init()
    torch.empty(1, device="cuda")
    cuda = ctypes.CDLL(None)  # the interposer's cudaMalloc, as a library linked to libcudart gets it
    cuda.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
    cuda.cudaFree.argtypes = [ctypes.c_void_p]
    pool = vpmm.default_pool(0)
    inside, outside = ctypes.c_void_p(), ctypes.c_void_p()
    with tms.region(tag="raw"):
        assert cuda.cudaMalloc(ctypes.byref(inside), 256 * MiB) == 0
    tagged = pool.tag_stats(None)["live_bytes"]
    assert cuda.cudaMalloc(ctypes.byref(outside), 256 * MiB) == 0
    assert pool.tag_stats("raw")["live_bytes"] >= 256 * MiB
    assert pool.tag_stats(None)["live_bytes"] == tagged, "a cudaMalloc outside any region was tagged"
    m0 = _used()
    tms.pause("raw")
    released = m0 - _used()
    assert released >= 256 * MiB, f"pause released {released / MiB:.0f} MiB"
    tms.resume("raw")
    for p in (inside, outside):
        assert cuda.cudaFree(p) == 0
    print(f"a raw cudaMalloc in a region paused: {released / MiB:.0f} MiB released")


def empty_cache_gives_back():
    import torch
    # The fill kernel's module is loaded lazily at its first launch (tens of
    # MiB of device memory that are the context's, not the allocator's):
    # launch it once before measuring.
    torch.ones((1,), device="cuda")
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    base = _used()
    x = torch.ones((GiB // 2,), device="cuda")  # 2 GiB, untagged
    assert _used() - base >= 2 * GiB
    del x
    torch.cuda.empty_cache()
    left = _used() - base
    assert left <= 16 * MiB, f"{left / MiB:.0f} MiB stayed after empty_cache()"
    print(f"empty_cache(): {left / MiB:.1f} MiB left of 2 GiB")


def rss_after_mmap_resume():
    rss_after_mmap_resume_in(None)


def rss_after_mmap_resume_in(mode):
    import inspect
    import torch
    import vpmm
    from torch_memory_saver import torch_memory_saver as tms
    if mode:
        tms.hook_mode = mode

    def rss():
        with open("/proc/self/status") as f:
            return next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmRSS:"))

    has_stores = "backup_store" in inspect.signature(vpmm.region).parameters
    try:
        with tms.region(tag="m", enable_cpu_backup=True, cpu_backup_backend="mmap"):
            x = torch.full((GiB,), 7, dtype=torch.uint8, device="cuda")
    except NotImplementedError as e:
        assert not has_stores and "backup_store='mmap'" in str(e), e
        print(f"hook mode {tms.hook_mode}: cpu_backup_backend='mmap' refused clearly (no stores in vpmm): {e}")
        return
    assert has_stores
    torch.cuda.synchronize()
    r0 = rss()
    tms.pause("m")
    r1 = rss()
    tms.resume("m")
    r2 = rss()
    assert int(x[::MiB].sum().item()) == 7 * 1024
    assert r1 - r0 >= 0.75 * GiB, f"RSS grew {(r1 - r0) / GiB:.2f} GiB on pause"
    assert r1 - r2 >= 0.75 * GiB, f"RSS shrank {(r1 - r2) / GiB:.2f} GiB on resume"
    print(f"hook mode {tms.hook_mode}: RSS +{(r1 - r0) / GiB:.2f} GiB on pause, -{(r1 - r2) / GiB:.2f} GiB on resume")


def multi_device_restore():
    import torch
    from torch_memory_saver import torch_memory_saver as tms
    xs = []
    for d, v in ((0, 7), (1, 13)):
        torch.cuda.set_device(d)
        with tms.region(tag=f"d{d}", enable_cpu_backup=True):
            xs.append(torch.full((64 * MiB,), v, dtype=torch.uint8, device=f"cuda:{d}"))
    for d in (0, 1):
        torch.cuda.set_device(d)
        tms.pause(f"d{d}")
    torch.cuda.set_device(0)
    tms.resume()
    assert torch.cuda.current_device() == 0
    for x, v in zip(xs, (7, 13)):
        assert int(x[::MiB].sum().item()) == v * 64
    print("two devices paused one by one, resumed together from device 0")


# name -> (function, TMS variables of its process)
CASES = {
    "engine_paused_whole": (engine_paused_whole, {"TMS_INIT_ENABLE": "1", "TMS_INIT_ENABLE_CPU_BACKUP": "1",
                                                  "CUBLAS_WORKSPACE_CONFIG": ":4096:8"}),
    "nested_regions": (nested_regions, {"TMS_INIT_ENABLE": "1", "TMS_INIT_ENABLE_CPU_BACKUP": "1"}),
    "disable_untagged": (disable_untagged, {}),
    "cuda_graph_tagged": (cuda_graph_tagged, {}),
    "raw_cudamalloc_routed": (raw_cudamalloc_routed, {}),
    "empty_cache_gives_back": (empty_cache_gives_back, {}),
    "rss_after_mmap_resume": (rss_after_mmap_resume, {}),
    "multi_device_restore": (multi_device_restore, {}),
}


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--case":
        try:
            CASES[sys.argv[2]][0]()
        except BaseException:
            traceback.print_exc()
            return 1
        return 0
    reason = pyharness.skip_reason("torch")
    if reason:
        print(f"SKIP: {reason}")
        return 77
    import torch
    from torch_memory_saver import configure_subprocess
    try:
        with configure_subprocess():
            preload_env = {k: os.environ[k] for k in ("LD_PRELOAD", "VPMM_LIBRARY")}
    except FileNotFoundError as e:
        print(f"SKIP: {e}")
        return 77
    print(f"children run with {preload_env}")
    gpus = torch.cuda.device_count()
    only = os.environ.get("VPMM_TEST_CASE")
    passed = failed = 0
    for name, (_fn, tms_env) in CASES.items():
        if only and name != only:
            continue
        if name == "multi_device_restore" and gpus < 2:
            print(f"skip {name}: {gpus} GPU visible, it needs 2")
            continue
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([pyharness.BINDING, pyharness.COMPAT, pyharness.BENCH_TORCH] +
                                            ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
        env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
        env.update(preload_env)
        env.update(tms_env)
        t0 = time.time()
        try:
            p = subprocess.run([sys.executable, __file__, "--case", name], env=env, capture_output=True,
                               text=True, timeout=400)
            rc, out = p.returncode, p.stdout + p.stderr
        except subprocess.TimeoutExpired as e:
            rc, out = -1, f"timed out after 400 s\n{e.stdout or ''}{e.stderr or ''}"
        if rc == 0:
            passed += 1
            last = [l for l in out.splitlines() if l.strip() and not l.startswith("libvpmm_preload:")]
            print(f"ok   {name} ({time.time() - t0:.1f} s){': ' + last[-1] if last else ''}")
        else:
            failed += 1
            print(f"FAIL {name} (exit {rc}):\n    " + out[-4000:].replace("\n", "\n    "))
    print(f"{passed} passed, {failed} failed")
    return 1 if failed or not passed else 0


if __name__ == "__main__":
    sys.exit(main())
