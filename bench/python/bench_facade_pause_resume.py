#!/usr/bin/env python3
"""Pause/resume through the Python facades against the C calls, in one run,
on the same memory: what the facades cost over the C API. Not a test: the lead runs it on the
GPU and pastes the table into bench/results/h100.md.

    VPMM_LIBRARY=build-gpu/libvpmm.so.1 python3 bench/python/bench_facade_pause_resume.py \
        [--gib 16] [--tensors 64] [--cycles 5] [--c-bench build-gpu/bench/bench_pause_resume]

Layers, each timed on the same 16 GiB of tagged tensors (allocated through
vpmm.torch.pool, so the memory is real PyTorch tensors in libvpmm):
  c        vpmm_pool_pause_ex / vpmm_pool_resume_ex called through bare
           ctypes on the default pool's handle: the C cost (plus one foreign
           call, microseconds);
  pool     vpmm.default_pool(dev).pause / .resume (the Pool facade);
  torch    vpmm.torch.pause / .resume (adds torch.cuda.synchronize);
  tms      torch_memory_saver.pause / .resume (the drop-in).
Each cycle runs every layer in turn (so drift hits all alike); the table
gives medians and each facade's time as a ratio of the C layer's (the target
is <= 1.05). The first pause of the run (host buffers pinned then) is
reported on its own. With --c-bench the C benchmark bench_pause_resume runs
afterwards in a separate process and its lines are printed beside ours.
"""
import argparse
import ctypes
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path[:0] = [os.path.join(ROOT, "bindings", "python"), os.path.join(ROOT, "bindings", "python", "compat")]

MiB, GiB = 1 << 20, 1 << 30


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gib", type=float, default=16.0, help="GiB of tagged tensors (default 16)")
    ap.add_argument("--tensors", type=int, default=64, help="number of tensors (default 64)")
    ap.add_argument("--cycles", type=int, default=5, help="timed cycles per layer (default 5)")
    ap.add_argument("--no-backup", action="store_true", help="tensors without host backup")
    ap.add_argument("--c-bench", default=None, help="path of bench_pause_resume to run afterwards")
    a = ap.parse_args()
    try:
        import torch
    except ImportError:
        print("bench_facade_pause_resume: torch is not installed")
        return 2
    if not torch.cuda.is_available():
        print("bench_facade_pause_resume: no CUDA device")
        return 2
    import vpmm
    import vpmm._library as L
    import vpmm.torch as vt
    from torch_memory_saver import torch_memory_saver as tms

    dev = torch.cuda.current_device()
    tag, backup = "bench", not a.no_backup
    each = int(a.gib * GiB) // a.tensors
    # The drop-in's region is vpmm.torch.pool with its tag, so every layer
    # below pauses the same tensors.
    with tms.region(tag=tag, enable_cpu_backup=backup):
        ts = [torch.empty(each, dtype=torch.uint8, device="cuda") for _ in range(a.tensors)]
    for i, t in enumerate(ts):
        t.fill_(i & 0xFF)
    torch.cuda.synchronize()
    pool = vpmm.default_pool(dev)
    total = pool.tag_stats(tag)["live_bytes"]
    handle, ctag = pool.handle, tag.encode()
    n = L.u64()

    def c_pause():
        L.check(L.pool_pause_ex(handle, ctag, ctypes.byref(n)))

    def c_resume():
        L.check(L.pool_resume_ex(handle, ctag, ctypes.byref(n)))

    layers = {
        "c": (c_pause, c_resume),
        "pool": (lambda: pool.pause(tag), lambda: pool.resume(tag)),
        "torch": (lambda: vt.pause(tag), lambda: vt.resume(tag)),
        "tms": (lambda: tms.pause(tag), lambda: tms.resume(tag)),
    }

    def timed(fn):
        t0 = time.perf_counter()
        fn()
        return (time.perf_counter() - t0) * 1e3

    first_pause = timed(c_pause)  # pins the backup buffers (kept in the pool's cache afterwards)
    first_resume = timed(c_resume)
    res = {k: ([], []) for k in layers}
    for _ in range(a.cycles):
        for k, (p, r) in layers.items():
            torch.cuda.synchronize()
            res[k][0].append(timed(p))
            res[k][1].append(timed(r))
    ok = all(int(t[:4096].sum().item()) == (i & 0xFF) * 4096 for i, t in enumerate(ts)) if backup else True

    gb = total / 1e9
    print(f"\n## Python facade pause/resume ({a.gib:g} GiB as {a.tensors} x {each / MiB:.0f} MiB, "
          f"{'with' if backup else 'without'} backup; {torch.cuda.get_device_name(dev)}; "
          f"torch {torch.__version__}; medians of {a.cycles})\n")
    print(f"first pause {first_pause:.1f} ms, first resume {first_resume:.1f} ms "
          f"(C layer; host buffers pinned during the first pause)\n")
    print("| layer | pause ms | resume ms | pause GB/s | resume GB/s | pause / C | resume / C |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    cp, cr = statistics.median(res["c"][0]), statistics.median(res["c"][1])
    worst = 0.0
    for k, (ps, rs) in res.items():
        mp, mr = statistics.median(ps), statistics.median(rs)
        worst = max(worst, mp / cp, mr / cr) if k != "c" else worst
        print(f"| {k} | {mp:.2f} | {mr:.2f} | {gb / (mp / 1e3):.2f} | {gb / (mr / 1e3):.2f} | "
              f"{mp / cp:.3f} | {mr / cr:.3f} |")
    print(f"\nworst facade/C ratio {worst:.3f} (target <= 1.05); bytes intact after all cycles: {ok}")
    for k, (ps, rs) in res.items():
        print(f"FACADE {k}_pause_ms {' '.join(f'{x:.2f}' for x in ps)}")
        print(f"FACADE {k}_resume_ms {' '.join(f'{x:.2f}' for x in rs)}")
    del ts
    if a.c_bench:
        print(f"\n## {a.c_bench} (same machine, same run, separate process)\n")
        torch.cuda.synchronize()
        vt.empty_cache()
        r = subprocess.run([a.c_bench], capture_output=True, text=True, timeout=1800)
        print("\n".join(l for l in r.stdout.splitlines() if l.startswith(("PAUSE", "FATAL"))))
        if r.returncode:
            print(f"(exit {r.returncode}) {r.stderr[-2000:]}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
