"""The serving client with its allocators taking turns wave by wave: one
process per allocator (bench/torch/serve_client.py --worker), all loaded at
once, each running wave i in a rotated order before any runs wave i+1.
Machine speed that drifts over tens of seconds (a lent VM's neighbours)
then lands on every allocator alike, where whole processes one after the
other compared seconds measured minutes apart. Prints one JSON line per
wave (each allocator's seconds) and a summary line: per allocator its
tokens/s over the waves after the first and its serve_client result line
(peak, live, pool work), and the geometric mean over those waves of
vpmm's time / the fastest PyTorch allocator's.

  python3 bench/torch/serve_lockstep.py [--allocs native,expandable,cudamallocasync,vpmm] [--waves 14] [--seconds S]

--seconds S starts no wave that the last wave's pace says would end after S
seconds from the start, and summarizes the waves that ran, so a time-boxed
call on a lent machine always gets its summary.

Run with PYTHONPATH and VPMM_LIBRARY as for serve_client.py (and
PASSTHROUGH_LIBRARY for pluggable-async); CUDA_VISIBLE_DEVICES picks the GPU."""
import argparse
import json
import os
import sys
import time

from lockstep import TORCH_ALLOCS, Workers, geomean

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--allocs", default="native,expandable,cudamallocasync,vpmm")
    ap.add_argument("--waves", type=int, default=14)
    ap.add_argument("--label", default="")
    ap.add_argument("--seconds", type=float, default=0, help="start no wave that would end past this (0: no limit)")
    args = ap.parse_args()
    started = time.monotonic()
    allocs = args.allocs.split(",")
    workers = Workers(allocs, lambda a, name: [sys.executable, os.path.join(HERE, "serve_client.py"), "--alloc", a,
                                               "--worker", "--waves", str(args.waves), "--label", name],
                      "serve_lockstep")
    seconds = {a: [] for a in allocs}
    tokens = []
    last_wave = 0.0
    for wave in range(args.waves):
        if args.seconds and time.monotonic() - started + 1.5 * last_wave > args.seconds:
            print(json.dumps({"stopped_before_wave": wave, "seconds": round(time.monotonic() - started, 1)}), flush=True)
            break
        wave_start = time.monotonic()
        order = workers.order(wave)
        row = {"wave": wave, "order": order}
        for a in order:
            got = workers.ask(a, wave)
            seconds[a].append(got["seconds"])
            row[a] = got["seconds"]
            n = got["tokens"]
        tokens.append(n)
        last_wave = time.monotonic() - wave_start
        print(json.dumps(row), flush=True)
    results = workers.finish()
    timed = range(1, len(tokens))  # the first wave warms every allocator up
    if not timed:
        sys.exit(f"serve_lockstep: {len(tokens)} wave(s) ran, none timed (the first warms up): give it more --seconds")
    summary = {"label": args.label, "waves_timed": len(timed),
               "tokens_per_s": {a: round(sum(tokens[i] for i in timed) / sum(seconds[a][i] for i in timed), 2)
                                for a in allocs}}
    torch_allocs = [a for a in allocs if a in TORCH_ALLOCS]
    for a in (a for a in allocs if a not in TORCH_ALLOCS):
        if torch_allocs:  # per wave: a's seconds / the fastest PyTorch allocator's
            ratios = [seconds[a][i] / min(seconds[t][i] for t in torch_allocs) for i in timed]
            summary[a + "_vs_fastest_gm"] = round(geomean(ratios), 4)
            summary[a + "_vs_fastest_by_wave"] = [round(r, 3) for r in ratios]
    if "vpmm" in allocs and "pluggable-async" in allocs:  # against the pluggable path's own floor
        summary["vpmm_vs_pluggable_async_gm"] = round(
            geomean([seconds["vpmm"][i] / seconds["pluggable-async"][i] for i in timed]), 4)
    summary["results"] = results
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
