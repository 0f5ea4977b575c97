#!/usr/bin/env python3
"""The first pause with host backup against a steady-state pause (what pinning
costs the first time), one fresh process per way of getting the backup buffers pinned.
Not a test: the lead runs it on the GPU and pastes the table into
bench/results/h100.md.

    VPMM_LIBRARY=build-gpu/libvpmm.so.1 python3 bench/python/bench_first_pause.py [--gib 16] [--tensors 64]

Modes (each: allocate GiB of tagged tensors with backup through
vpmm.torch.pool, fill them, then time the first pause, its resume and
--cycles steady pause/resume cycles; bytes are checked after the last):
  cold        nothing pinned ahead: the first pause pins as it copies;
  ahead       vpmm.torch.prepare_backups(tag) right after allocating, timed
              on its own (a synchronous pin-ahead, e.g. after loading weights);
  background  vpmm.torch.pool(..., pin_ahead=True): pinning runs on a
              background thread while the process trains a small MLP through
              libvpmm; reports the training steps done meanwhile and their
              median time against steps with nothing pinning, then pauses
              once the pinning is done.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path[:0] = [os.path.join(ROOT, "bindings", "python")]

MiB, GiB = 1 << 20, 1 << 30


def ms_since(t0):
    return (time.perf_counter() - t0) * 1e3


def one_mode(a):
    import torch
    import vpmm.torch as vt

    tag = "weights"
    each = int(a.gib * GiB) // a.tensors
    out = {"mode": a.mode, "gib": a.gib, "tensors": a.tensors}
    # A small training job on untagged libvpmm memory: it keeps running while
    # the background mode pins.
    with vt.pool("scratch"):
        w1 = torch.randn(4096, 4096, device="cuda", requires_grad=True)
        w2 = torch.randn(4096, 4096, device="cuda", requires_grad=True)

    def step():
        with vt.pool("scratch"):
            x = torch.randn(2048, 4096, device="cuda")
            loss = ((x @ w1).relu() @ w2).square().mean()
            loss.backward()
            w1.grad = None
            w2.grad = None
        torch.cuda.synchronize()

    for _ in range(5):
        step()
    base = []
    for _ in range(20):
        t0 = time.perf_counter()
        step()
        base.append(ms_since(t0))
    out["step_ms_idle"] = round(statistics.median(base), 3)

    with vt.pool(tag, host_backup=True, pin_ahead=(a.mode == "background")):
        ts = [torch.empty(each, dtype=torch.uint8, device="cuda") for _ in range(a.tensors)]
    t_alloc_done = time.perf_counter()
    for i, t in enumerate(ts):
        t.fill_(i & 0xFF)
    torch.cuda.synchronize()
    if a.mode == "ahead":
        t0 = time.perf_counter()
        vt.prepare_backups(tag)
        out["prepare_ms"] = round(ms_since(t0), 1)
    elif a.mode == "background":
        fut = vt.pinning_ahead[tag]
        during = []
        while not fut.done():
            t0 = time.perf_counter()
            step()
            during.append(ms_since(t0))
        out["pinned_bytes"] = fut.result()
        out["pinning_ms"] = round(ms_since(t_alloc_done), 1)
        out["steps_during_pinning"] = len(during)
        out["step_ms_during_pinning"] = round(statistics.median(during), 3) if during else None
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    vt.pause(tag)
    out["first_pause_ms"] = round(ms_since(t0), 1)
    t0 = time.perf_counter()
    vt.resume(tag)
    out["first_resume_ms"] = round(ms_since(t0), 1)
    ps, rs = [], []
    for _ in range(a.cycles):
        t0 = time.perf_counter()
        vt.pause(tag)
        ps.append(ms_since(t0))
        t0 = time.perf_counter()
        vt.resume(tag)
        rs.append(ms_since(t0))
    out["steady_pause_ms"] = round(statistics.median(ps), 1)
    out["steady_resume_ms"] = round(statistics.median(rs), 1)
    out["first_over_steady"] = round(out["first_pause_ms"] / out["steady_pause_ms"], 2)
    out["intact"] = all(int(t[:4096].sum().item()) == (i & 0xFF) * 4096 for i, t in enumerate(ts))
    print("FIRSTPAUSE " + json.dumps(out), flush=True)
    return 0 if out["intact"] else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gib", type=float, default=16.0)
    ap.add_argument("--tensors", type=int, default=64)
    ap.add_argument("--cycles", type=int, default=3)
    ap.add_argument("--mode", default=None, help="run one mode in this process (internal)")
    a = ap.parse_args()
    if a.mode:
        return one_mode(a)
    try:
        import torch
        if not torch.cuda.is_available():
            raise ImportError("no CUDA device")
    except ImportError as e:
        print(f"bench_first_pause: {e}")
        return 2
    rows, rc = [], 0
    for mode in ("cold", "ahead", "background"):
        r = subprocess.run([sys.executable, __file__, "--mode", mode, "--gib", str(a.gib),
                            "--tensors", str(a.tensors), "--cycles", str(a.cycles)],
                           capture_output=True, text=True, timeout=900)
        line = [l for l in r.stdout.splitlines() if l.startswith("FIRSTPAUSE ")]
        if r.returncode or not line:
            print(f"mode {mode}: exit {r.returncode}\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}")
            rc = 1
            continue
        print(line[0])
        rows.append(json.loads(line[0][len("FIRSTPAUSE "):]))
    print(f"\n## First pause with backup ({a.gib:g} GiB as {a.tensors} tensors; one process per mode)\n")
    print("| mode | pinning ahead ms | first pause ms | steady pause ms | first / steady | "
          "first resume ms | steady resume ms | train steps while pinning (ms, idle ms) | intact |")
    print("|---|---:|---:|---:|---:|---:|---:|---|---|")
    for o in rows:
        ahead = o.get("prepare_ms", o.get("pinning_ms", "-"))
        steps = (f"{o['steps_during_pinning']} ({o['step_ms_during_pinning']}, {o['step_ms_idle']})"
                 if "steps_during_pinning" in o else "-")
        print(f"| {o['mode']} | {ahead} | {o['first_pause_ms']} | {o['steady_pause_ms']} | "
              f"{o['first_over_steady']} | {o['first_resume_ms']} | {o['steady_resume_ms']} | {steps} | "
              f"{o['intact']} |")
    return rc


if __name__ == "__main__":
    sys.exit(main())
