"""What one allocation costs the CPU through PyTorch, allocator by allocator,
and what that is worth on the hard client's step (issue 46: the step gap to
native that the driver time does not explain).

Each allocator runs in a process of its own (bench/torch/allocator.py's
names), the processes one after another, the order rotated every round:

  pairs    ns per torch.empty(n, uint8, device="cuda") + del, n in 512 B,
           64 KiB, 2 MiB and 64 MiB (the best of 5 runs of 20000 pairs,
           after 2000 warm ones): PyTorch's dispatch plus the allocator
           (through CUDAPluggableAllocator for vpmm and pluggable-async)
  cross    the same pair with x.record_stream(side) before del (a free
           that must wait for another stream)
  step     the hard client's model (bench/torch/moe.py, its default size),
           one cycle of its eight shapes after a warm cycle: wall ms and
           CPU ms of the process per step, (under the allocators that
           count them) the allocations a step makes, and under vpmm-timed
           the time inside libvpmm's hooks a step, by call and duration
           (bench/torch/timed_hooks.c, built to TIMED_HOOKS_LIBRARY)

    PYTHONPATH=bindings/python VPMM_LIBRARY=build/libvpmm.so.1 \\
        python3 bench/torch/alloc_call_cost.py [--allocs native,expandable,vpmm] [--rounds 3]
                                               [--base-library OTHER/libvpmm.so.1]  (NAME-base: NAME over it)

Prints every round and the medians with each allocator over native; no
assertion on times (a probe, like bench/probes).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SIZES = [512, 64 << 10, 2 << 20, 64 << 20]


HOOK_BUCKETS = ("<250ns", "<1us", "<4us", "<16us", "<64us", "<1ms", ">=1ms")


def hook_counts(hooks):
    """timed_hooks.c's counts now (3 kinds x 9 values), [] without it."""
    if hooks is None:
        return []
    import ctypes
    buf = (ctypes.c_uint64 * 27)()
    hooks.timed_counts(buf)
    return list(buf)


def child(name):
    sys.path.insert(0, HERE)
    import allocator
    allocator.choose(name)
    import torch
    import moe
    torch.cuda.set_device(0)
    out = {"alloc": name, "pairs_ns": {}, "cross_ns": {}}

    def best_ns(n, cross, reps=20000, runs=5):
        side = torch.cuda.Stream() if cross else None
        for _ in range(2000):
            x = torch.empty(n, dtype=torch.uint8, device="cuda")
            if cross:
                x.record_stream(side)
            del x
        torch.cuda.synchronize()
        best = float("inf")
        for _ in range(runs):
            t = time.perf_counter_ns()
            for _ in range(reps):
                x = torch.empty(n, dtype=torch.uint8, device="cuda")
                if cross:
                    x.record_stream(side)
                del x
            best = min(best, (time.perf_counter_ns() - t) / reps)
            torch.cuda.synchronize()
        return round(best, 1)

    for n in SIZES:
        out["pairs_ns"][n] = best_ns(n, False)
    for n in (64 << 10, 2 << 20):
        out["cross_ns"][n] = best_ns(n, True, reps=5000)

    step = moe.trainer()
    counted = name in ("native", "expandable")
    hooks = None
    if name == "vpmm-timed":
        import ctypes
        hooks = ctypes.CDLL(os.environ["TIMED_HOOKS_LIBRARY"])
    wall, cpu, allocs, hook_steps = [], [], [], []
    for cycle in range(2):
        for b, q in moe.SHAPES:
            torch.cuda.synchronize()
            n0 = torch.cuda.memory_stats().get("allocation.all.allocated", 0) if counted else 0
            h0 = hook_counts(hooks)
            t0, c0 = time.perf_counter(), time.process_time()
            step(b, q)
            torch.cuda.synchronize()
            t1, c1 = time.perf_counter(), time.process_time()
            if cycle:
                wall.append((t1 - t0) * 1e3)
                cpu.append((c1 - c0) * 1e3)
                if counted:
                    allocs.append(torch.cuda.memory_stats()["allocation.all.allocated"] - n0)
                if hooks:
                    hook_steps.append([a - b for a, b in zip(hook_counts(hooks), h0)])
    out["step_wall_ms"] = round(sum(wall) / len(wall), 2)
    out["step_cpu_ms"] = round(sum(cpu) / len(cpu), 2)
    out["allocs_per_step"] = round(sum(allocs) / len(allocs)) if allocs else None
    if hook_steps:  # per step, by hook: calls, ms inside it, calls by duration (timed_hooks.c's buckets)
        per = [sum(col) / len(hook_steps) for col in zip(*hook_steps)]
        out["hooks_per_step"] = {kind: {"calls": round(per[i * 9]), "ms": round(per[i * 9 + 1] / 1e6, 3),
                                        "by_time": dict(zip(HOOK_BUCKETS, (round(x, 1) for x in per[i * 9 + 2:i * 9 + 9])))}
                                 for i, kind in enumerate(("malloc", "free", "record_stream"))}
    print("RESULT " + json.dumps(out), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--allocs", default="native,expandable,vpmm")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--base-library", metavar="PATH",
                    help="another build of libvpmm: an allocator named NAME-base runs NAME over it")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(args.child.removesuffix("-base"))
    names = args.allocs.split(",")
    got = {n: [] for n in names}
    for rnd in range(args.rounds):
        order = names[rnd % len(names):] + names[:rnd % len(names)]
        for n in order:
            env = dict(os.environ)
            if n.endswith("-base"):
                if not args.base_library:
                    sys.exit(f"{n} needs --base-library")
                env["VPMM_LIBRARY"] = args.base_library
            p = subprocess.run([sys.executable, __file__, "--child", n], capture_output=True, text=True, env=env)
            line = next((ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")), None)
            if line is None:
                print(f"round {rnd + 1} {n}: FAILED (exit {p.returncode})\n{p.stderr[-2000:]}", flush=True)
                continue
            r = json.loads(line[7:])
            got[n].append(r)
            pairs = " ".join(f"{int(k) >> 10 if int(k) >= 1024 else k}{'K' if int(k) >= 1024 else 'B'}"
                             f"={v}" for k, v in r["pairs_ns"].items())
            cross = " ".join(f"{int(k) >> 10}K={v}" for k, v in r["cross_ns"].items())
            print(f"round {rnd + 1} {n:16s} pairs ns {pairs} | record_stream pairs ns {cross} | step wall "
                  f"{r['step_wall_ms']} ms, cpu {r['step_cpu_ms']} ms, allocations {r['allocs_per_step']}"
                  + (f" | in the hooks a step {json.dumps(r['hooks_per_step'])}" if "hooks_per_step" in r else ""),
                  flush=True)
    med = {}
    for n in names:
        rs = got[n]
        if not rs:
            continue
        med[n] = {"pairs_ns": {k: statistics.median(r["pairs_ns"][k] for r in rs) for k in rs[0]["pairs_ns"]},
                  "cross_ns": {k: statistics.median(r["cross_ns"][k] for r in rs) for k in rs[0]["cross_ns"]},
                  "step_wall_ms": statistics.median(r["step_wall_ms"] for r in rs),
                  "step_cpu_ms": statistics.median(r["step_cpu_ms"] for r in rs),
                  "allocs_per_step": next((r["allocs_per_step"] for r in rs if r["allocs_per_step"]), None)}
    base = med.get("native")
    for n, m in med.items():
        rel = ""
        if base and n != "native":
            rel = (f"  over native: step wall {m['step_wall_ms'] / base['step_wall_ms']:.3f}, cpu "
                   f"{m['step_cpu_ms'] / base['step_cpu_ms']:.3f}, 2 MiB pair "
                   f"{m['pairs_ns']['2097152'] - base['pairs_ns']['2097152']:+.0f} ns")
        print(f"median {n:16s} {json.dumps(m)}{rel}")
    print("RESULT " + json.dumps(med))


if __name__ == "__main__":
    main()
