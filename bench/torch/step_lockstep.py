"""The training clients with their allocators taking turns cycle by cycle:
one process per allocator (bench/torch/hard_client.py or train_client.py
--worker), all loaded at once, each running cycle i (one step of every
shape) in a rotated order before any runs cycle i+1; the first cycle is
the warm-up. Where gpu-placement.sh's rounds run one process after another
(minutes apart on a machine whose speed drifts), every measured step here
has a partner under each other allocator taken seconds away, so a few
percent can be told from the drift.

Prints one JSON line per cycle (each allocator's milliseconds for it, and
libvpmm's driver time and bytes remapped in it) and a summary line:
  - step_ms_median: each allocator's median step over the timed cycles;
  - paired_step_gm: for every pair "a/b", the geometric mean over the
    timed steps of a's time over b's at the same cycle and shape;
  - A_vs_fastest_gm / A_vs_median_gm for every allocator A outside
    PyTorch's three: per cycle, A's time over the fastest (the median) of
    native, expandable and cudaMallocAsync in that cycle, geometric mean
    over cycles (the least of three noisy times is biased against A; the
    paired figures are not);
  - results: every worker's own result line (peak, live peak, libvpmm's
    steady pool work over the timed cycles).

  python3 bench/torch/step_lockstep.py --client hard|train
      [--allocs native,expandable,cudamallocasync,vpmm] [--cycles 12] [--seconds S] [-- client args]

Arguments after "--" go to every worker (e.g. -- --batch-scale 2). Each
process holds its model and its allocator's memory the whole time, so the
allocators' peaks add up on one GPU. --seconds S starts no cycle that the
last cycle's pace says would end after S seconds from the start. Run with
PYTHONPATH and VPMM_LIBRARY as for the clients (and PASSTHROUGH_LIBRARY for
pluggable-async); CUDA_VISIBLE_DEVICES picks the GPU. vpmm-exact, vpmm-views,
vpmm-pending and vpmm-never run libvpmm's other configurations, as in
scripts/gpu-placement.sh.

Each worker waits idle while the others take their turn. libvpmm's driver
budget accrues credit on the wall clock, so here a libvpmm process comes
back to every cycle with a full bucket and moves pages that it would not
move alone (docs/handles.md, "The hard loop in lockstep"): its steady
driver figures in lockstep are not those of a process of its own."""
import argparse
import itertools
import json
import os
import statistics
import sys
import time

from lockstep import TORCH_ALLOCS, Workers, geomean

HERE = os.path.dirname(os.path.abspath(__file__))
CLIENTS = {"hard": "hard_client.py", "train": "train_client.py"}


def worker_command(client, extra):
    return lambda alloc, name: [sys.executable, os.path.join(HERE, CLIENTS[client]), "--alloc", alloc, "--worker",
                                "--label", name] + extra


def summarize(allocs, ms, timed):
    """ms[alloc][cycle] = that cycle's step times; timed: the cycles counted."""
    steps = {a: [t for c in timed for t in ms[a][c]] for a in allocs}
    out = {"cycles_timed": len(timed),
           "step_ms_median": {a: round(statistics.median(steps[a]), 2) for a in allocs},
           "paired_step_gm": {f"{a}/{b}": round(geomean([x / y for x, y in zip(steps[a], steps[b])]), 4)
                              for a, b in itertools.permutations(allocs, 2)
                              if a not in TORCH_ALLOCS or b in TORCH_ALLOCS}}
    torch_allocs = [a for a in allocs if a in TORCH_ALLOCS]
    if torch_allocs:
        cycle = {x: [sum(ms[x][c]) for c in timed] for x in allocs}
        for a in (a for a in allocs if a not in TORCH_ALLOCS):
            fastest = [cycle[a][i] / min(cycle[t][i] for t in torch_allocs) for i in range(len(timed))]
            median = [cycle[a][i] / statistics.median(cycle[t][i] for t in torch_allocs) for i in range(len(timed))]
            out[a + "_vs_fastest_gm"] = round(geomean(fastest), 4)
            out[a + "_vs_median_gm"] = round(geomean(median), 4)
            out[a + "_vs_fastest_by_cycle"] = [round(r, 3) for r in fastest]
    return out


def main():
    argv = sys.argv[1:]
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[:argv.index("--")] if "--" in argv else argv
    ap = argparse.ArgumentParser()
    ap.add_argument("--client", choices=sorted(CLIENTS), required=True)
    ap.add_argument("--allocs", default="native,expandable,cudamallocasync,vpmm")
    ap.add_argument("--cycles", type=int, default=12, help="cycles, the first of them the warm-up")
    ap.add_argument("--label", default="")
    ap.add_argument("--seconds", type=float, default=0, help="start no cycle that would end past this (0: no limit)")
    args = ap.parse_args(argv)
    started = time.monotonic()
    allocs = args.allocs.split(",")
    workers = Workers(allocs, worker_command(args.client, extra), "step_lockstep")
    print(json.dumps({"loaded_s": round(time.monotonic() - started, 1)}), flush=True)
    ms = {a: [] for a in allocs}
    last_cycle = 0.0
    for cycle in range(args.cycles):
        if args.seconds and time.monotonic() - started + 1.5 * last_cycle > args.seconds:
            print(json.dumps({"stopped_before_cycle": cycle, "seconds": round(time.monotonic() - started, 1)}),
                  flush=True)
            break
        cycle_start = time.monotonic()
        row = {"cycle": cycle, "order": workers.order(cycle)}
        for a in row["order"]:
            got = workers.ask(a, cycle)
            ms[a].append(got["ms"])
            row[a] = round(sum(got["ms"]), 1)
            if got.get("work"):
                row[a + "_driver_ms"] = round(got["work"].get("driver_ns", 0) / 1e6, 2)
                row[a + "_remapped_mb"] = round(got["work"].get("bytes_remapped", 0) / 2**20, 1)
        last_cycle = time.monotonic() - cycle_start
        print(json.dumps(row), flush=True)
    results = workers.finish()
    timed = range(1, len(ms[allocs[0]]))  # the first cycle warms every allocator up
    if not timed:
        sys.exit(f"step_lockstep: {len(ms[allocs[0]])} cycle(s) ran, none timed (the first warms up): "
                 "give it more --seconds")
    summary = {"label": args.label, "client": args.client, **summarize(allocs, ms, timed), "results": results}
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
