"""The timed training loop the clients share: one step per (batch, seq) of
`shapes`, `cycles` times over them, the device synchronised around each step
so a step's time is its own. The first cycle is warm-up (every shape seen
once); the rest are measured. Under libvpmm the pool's work of the measured
cycles is reported too (bytes remapped, handles created, driver time, and
the driver's calls by kind per step: steady_driver_by_kind), and
with per_step each step's time and pool work go to stderr as JSON lines.
lockstep_worker runs the same loop a cycle at a time as
bench/torch/step_lockstep.py asks."""
import json
import statistics
import sys
import time

import allocator


def timed_cycles(alloc, cycles, shapes, step, per_step=False):
    """step(batch, seq) -> loss tensor. Returns a dict: step_ms_median,
    steps_timed, step_ms (every measured step), losses, and, under libvpmm,
    steady_* figures of the measured cycles."""
    import torch
    times, losses = [], []
    measured_start = {}
    for c in range(cycles):
        for s, (batch, seq) in enumerate(shapes):
            torch.cuda.synchronize()
            if c == 1 and s == 0:
                measured_start = allocator.pool_work(alloc)
            before = allocator.pool_work(alloc) if per_step else {}
            t0 = time.perf_counter()
            loss = step(batch, seq)
            torch.cuda.synchronize()
            dt = time.perf_counter() - t0
            if per_step:
                after = allocator.pool_work(alloc)
                print(json.dumps({"cycle": c, "batch": batch, "seq": seq, "ms": round(1000 * dt, 2),
                                  **{k: after[k] - before[k] for k in after}}), file=sys.stderr)
            losses.append(round(loss.item(), 5))
            if c > 0:
                times.append(dt)
    return summarize(alloc, times, losses, measured_start)


def summarize(alloc, times, losses, measured_start):
    """The result of measured steps `times` (seconds): their median, every
    step and the losses, and under libvpmm the pool's steady_* work since
    `measured_start` (pool_work at the first measured step)."""
    out = {"step_ms_median": round(1000 * statistics.median(times), 2) if times else None,
           "steps_timed": len(times), "step_ms": [round(1000 * t, 1) for t in times], "losses": losses}
    if measured_start and times:
        now = allocator.pool_work(alloc)
        out["steady_remapped_bytes"] = now.get("bytes_remapped", 0) - measured_start.get("bytes_remapped", 0)
        out["steady_handles_created"] = now.get("handles_created", 0) - measured_start.get("handles_created", 0)
        if "driver_ns" in now:
            ns = (now["driver_ns"] - measured_start["driver_ns"]) / len(times)
            out["steady_driver_ms_per_step"] = round(ns / 1e6, 3)
            out["steady_driver_share"] = round(ns / (1e9 * statistics.median(times)), 5)
        # By kind of call, per measured step: {"unmap": [calls, ms], ...}.
        kinds = sorted(k[4:-6] for k in now if k.startswith("drv_") and k.endswith("_calls"))
        if kinds:
            def per_step(key):
                return (now[key] - measured_start.get(key, 0)) / len(times)
            out["steady_driver_by_kind"] = {
                k: [round(per_step(f"drv_{k}_calls"), 1), round(per_step(f"drv_{k}_ns") / 1e6, 3)] for k in kinds}
    return out


def lockstep_worker(alloc, shapes, step):
    """The client as a worker of bench/torch/step_lockstep.py: prints
    {"ready": alloc}, then for each cycle number read on stdin runs one step
    of every shape (the device synchronised around each) and prints
    {"cycle", "ms": each step's time, "work": the pool's work over the
    cycle (libvpmm's counters, {} under another allocator)}; at "end"
    returns what timed_cycles returns, over every cycle after the first
    (the warm-up)."""
    import torch
    print(json.dumps({"ready": alloc}), flush=True)
    times, losses = [], []
    measured_start = {}
    for line in sys.stdin:
        if line.strip() == "end":
            break
        cycle = int(line)
        torch.cuda.synchronize()
        before = allocator.pool_work(alloc)
        if cycle == 1:
            measured_start = before
        ms = []
        for batch, seq in shapes:
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            loss = step(batch, seq)
            torch.cuda.synchronize()
            ms.append(round(1000 * (time.perf_counter() - t0), 3))
            losses.append(round(loss.item(), 5))
        after = allocator.pool_work(alloc)
        if cycle > 0:
            times += [m / 1000 for m in ms]
        print(json.dumps({"cycle": cycle, "ms": ms, "work": {k: after[k] - before.get(k, 0) for k in after}}),
              flush=True)
    return summarize(alloc, times, losses, measured_start)
