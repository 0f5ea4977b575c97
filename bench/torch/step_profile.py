"""Where the hard client's step goes on the GPU, allocator by allocator
(issue 46: the 1-3% gap to native that driver time, call cost and moves do
not explain). A probe, like bench/probes: no assertion on times.

Each allocator (bench/torch/allocator.py's names, or lockstep.VARIANTS')
runs in a process of its own, the processes one after another, the order
rotated every round. A process trains bench/torch/moe.py's model for two
unprofiled cycles of its eight shapes, then one cycle under torch.profiler
(CUPTI's kernel, copy and memset records), the device synchronised around
each step. Per step, from the profile's own timeline:

  wall     the step's host time (its record_function range)
  busy     the union of the GPU's activity over all streams
  idle     wall - busy: the GPU waiting for the host (launches, syncs,
           allocations after a sync)
  kernel   kernel time summed (two streams at once count twice), and
  overlap  the sum of the streams' busy times - busy: work run side by side
  gaps     GPU idle stretches of 20 us or more: count and time, and the
           time by the innermost host op (any thread) running when each began
and over the cycle the kernels' time by name, so a kernel that runs slower
under one allocator's page layout shows in its own row, and the host ops'
self time by name (an allocation is its caller's self time).

    PYTHONPATH=bindings/python VPMM_LIBRARY=build/libvpmm.so.1 \\
        python3 bench/torch/step_profile.py [--allocs native,expandable,vpmm] [--rounds 2] [--out DIR]

Prints every round, then each figure's median with its ratio over native
and the kernels whose median time differs most from native's.
"""
import argparse
import bisect
import collections
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import lockstep  # noqa: E402

GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
GAP_US = 20.0


def union(intervals):
    """Sorted, merged [start, end) intervals."""
    out = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return out


def span(intervals):
    return sum(b - a for a, b in intervals)


def innermost_op(ops, starts, t):
    """The shortest host op (cpu_op or runtime call) on the stepping thread
    that covers time t; ops sorted by start, starts their starts."""
    best, j = None, bisect.bisect_right(starts, t)
    for i in range(j - 1, max(-1, j - 401), -1):  # ops begun shortly before t
        a, b, name = ops[i]
        if a <= t < b and (best is None or b - a < best[1] - best[0]):
            best = ops[i]
    return best[2] if best else "(no host op)"


def self_times(host):
    """Each host op's time less its children's (ops nest on their thread),
    summed by name: where the host's time goes, allocations included (an
    allocation is not an op: it is its caller's self time)."""
    out = collections.Counter()
    by_tid = collections.defaultdict(list)
    for e in host:
        by_tid[e.get("tid")].append(e)
    for es in by_tid.values():
        stack = []  # [end, name, self] of the ops open at this point
        for e in sorted(es, key=lambda e: (e["ts"], -e["dur"])):
            while stack and stack[-1][0] <= e["ts"]:
                end, name, own = stack.pop()
                out[name[:60]] += own
            if stack:
                stack[-1][2] -= e["dur"]
            stack.append([e["ts"] + e["dur"], e["name"], e["dur"]])
        for end, name, own in stack:
            out[name[:60]] += own
    return out


def analyse(trace):
    """Per-step figures and kernel time by name from a chrome trace's events."""
    ev = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    steps = sorted((e for e in ev if e.get("cat") == "user_annotation" and e["name"].startswith("vpmm_step")),
                   key=lambda e: e["ts"])
    gpu = sorted((e for e in ev if e.get("cat") in GPU_CATS), key=lambda e: e["ts"])
    gpu_ts = [e["ts"] for e in gpu]
    host = [e for e in ev if e.get("cat") in ("cpu_op", "cuda_runtime", "cuda_driver")]
    ops = sorted((e["ts"], e["ts"] + e["dur"], e["name"]) for e in host)
    starts = [o[0] for o in ops]
    per_step, by_kernel, gap_by_op = [], collections.Counter(), collections.Counter()
    self_by_op = self_times(host)
    for s in steps:
        a, b = s["ts"], s["ts"] + s["dur"]
        mine = gpu[bisect.bisect_left(gpu_ts, a):bisect.bisect_left(gpu_ts, b)]
        iv = [(e["ts"], e["ts"] + e["dur"]) for e in mine]
        busy = union(iv)
        by_stream = collections.defaultdict(list)
        for e in mine:
            by_stream[e["args"].get("stream")].append((e["ts"], e["ts"] + e["dur"]))
            if e["cat"] == "kernel":
                by_kernel[e["name"][:90]] += e["dur"]
        gaps, prev = [], a
        for x, y in busy + [[b, b]]:
            if x - prev >= GAP_US:
                gaps.append((prev, x))
            prev = max(prev, y)
        for g0, g1 in gaps:
            gap_by_op[innermost_op(ops, starts, g0 + 0.5)[:60]] += g1 - g0
        per_step.append({"wall_us": s["dur"], "busy_us": span(busy), "idle_us": s["dur"] - span(busy),
                         "kernel_us": sum(e["dur"] for e in mine if e["cat"] == "kernel"),
                         "copy_us": sum(e["dur"] for e in mine if e["cat"] != "kernel"),
                         "overlap_us": sum(span(union(v)) for v in by_stream.values()) - span(busy),
                         "gaps": len(gaps), "gap_us": sum(g1 - g0 for g0, g1 in gaps),
                         "kernels": sum(1 for e in mine if e["cat"] == "kernel"), "streams": len(by_stream)})
    return per_step, by_kernel, gap_by_op, self_by_op


def child(name, out_dir):
    import allocator
    os.environ.update(lockstep.VARIANTS.get(name, {}))
    allocator.choose("vpmm" if name in lockstep.VARIANTS else name)
    import torch
    import moe
    from torch.profiler import ProfilerActivity, profile, record_function
    torch.cuda.set_device(0)
    step = moe.trainer()
    for _ in range(2):
        for b, q in moe.SHAPES:
            step(b, q).item()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for i, (b, q) in enumerate(moe.SHAPES):
            torch.cuda.synchronize()
            with record_function(f"vpmm_step{i}"):
                loss = step(b, q)
                torch.cuda.synchronize()
            loss.item()
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "trace.json")
        prof.export_chrome_trace(path)
        with open(path) as f:
            trace = json.load(f)
    per_step, by_kernel, gap_by_op, self_by_op = analyse(trace)
    out = {"alloc": name, "steps": per_step, "kernel_us_by_name": dict(by_kernel.most_common(60)),
           "gap_us_by_op": dict(gap_by_op.most_common(12)), "self_us_by_op": dict(self_by_op.most_common(60))}
    if out_dir:
        with open(os.path.join(out_dir, f"step_profile-{name}-{os.getpid()}.json"), "w") as f:
            json.dump(out, f)
    print("RESULT " + json.dumps(out), flush=True)


FIGURES = ("wall_us", "busy_us", "idle_us", "kernel_us", "copy_us", "overlap_us", "gap_us", "gaps")


def totals(r):
    return {k: sum(s[k] for s in r["steps"]) for k in FIGURES}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--allocs", default="native,expandable,vpmm")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", help="a directory for each process's full result (JSON)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(args.child, args.out)
    names = args.allocs.split(",")
    got = {n: [] for n in names}
    for rnd in range(args.rounds):
        for n in names[rnd % len(names):] + names[:rnd % len(names)]:
            cmd = [sys.executable, __file__, "--child", n] + (["--out", args.out] if args.out else [])
            p = subprocess.run(cmd, capture_output=True, text=True)
            line = next((ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")), None)
            if line is None:
                print(f"round {rnd + 1} {n}: FAILED (exit {p.returncode})\n{p.stderr[-2000:]}", flush=True)
                continue
            r = json.loads(line[7:])
            got[n].append(r)
            t = totals(r)
            print(f"round {rnd + 1} {n:16s} " + " ".join(f"{k[:-3] if k.endswith('_us') else k}="
                                                        f"{v / 1000 if k.endswith('_us') else v:.1f}"
                                                        for k, v in t.items())
                  + " (ms a cycle) | gaps by host op " + json.dumps({k: round(v / 1000, 1) for k, v in
                                                                     list(r["gap_us_by_op"].items())[:6]}),
                  flush=True)
    med = {n: {k: statistics.median(totals(r)[k] for r in rs) for k in FIGURES} for n, rs in got.items() if rs}
    def by_name(key):
        return {n: {k: statistics.median(r[key].get(k, 0) for r in rs) for k in set().union(*(r[key] for r in rs))}
                for n, rs in got.items() if rs}
    kern, own = by_name("kernel_us_by_name"), by_name("self_us_by_op")
    base = med.get("native")
    for n, m in med.items():
        rel = ""
        if base and n != "native":
            rel = "  over native: " + ", ".join(f"{k[:-3]} {m[k] / base[k]:.4f}" for k in FIGURES[:4] if base[k])
        print(f"median {n:16s} " + " ".join(f"{k}={v / 1000:.2f}ms" if k.endswith("_us") else f"{k}={v:.0f}"
                                           for k, v in m.items()) + rel)
        if base and n != "native":
            for what, table in (("kernel", kern), ("host self", own)):
                diff = sorted(((table[n].get(k, 0) - v, k) for k, v in table["native"].items()),
                              key=lambda x: -abs(x[0]))[:8]
                for d, k in diff:
                    print(f"    {what} {d / 1000:+8.2f} ms a cycle ({table['native'][k] / 1000:.1f} under native): {k}")
    print("RESULT " + json.dumps({"median": med}))


if __name__ == "__main__":
    main()
