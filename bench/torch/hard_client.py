"""The hard training client: bench/torch/moe.py's mixture-of-experts model
(uneven, data-dependent expert sizes, recompute, pinned offload, side-stream
gather buffers freed on the main stream, eight shapes) trained under one
allocator per process. Prints one JSON line: the allocator's peak device
memory, the live peak, the median step time of the measured cycles, the
losses and, under libvpmm, the pool's work (remapped bytes, handles created,
time in driver calls) over the measured cycles and per step.

  python3 bench/torch/hard_client.py --alloc native|expandable|cudamallocasync|vpmm [--cycles 3]
                                     [--layers 12] [--d 1024] [--per-step]

A cycle is one step of each of the eight shapes; the first cycle is warm-up
(every shape seen once), the rest are measured. With --alloc vpmm the VPMM_*
environment picks the policy. With --worker it runs cycles one at a time
as bench/torch/step_lockstep.py asks on stdin."""
import argparse
import json
import sys

import allocator

ap = argparse.ArgumentParser()
ap.add_argument("--alloc", required=True)
ap.add_argument("--cycles", type=int, default=3, help="cycles over the eight shapes; the first is warm-up")
ap.add_argument("--layers", type=int, default=12)
ap.add_argument("--d", type=int, default=1024)
ap.add_argument("--experts", type=int, default=8)
ap.add_argument("--label", default="")
ap.add_argument("--per-step", action="store_true", help="print each step's time and pool work (stderr)")
ap.add_argument("--record", metavar="PATH",
                help="record the allocation history of the whole run and dump it to PATH (a PyTorch-format "
                     "snapshot, gzip if PATH ends in .gz): PyTorch's recorder under its allocators, "
                     "vpmm.torch's under libvpmm (the sequence libvpmm saw live, for `vpmm replay`)")
ap.add_argument("--worker", action="store_true",
                help="cycles on request from stdin (bench/torch/step_lockstep.py); --cycles is unused")
args = ap.parse_args()
held = allocator.choose(args.alloc)

import torch  # noqa: E402  (after the allocator is chosen)
import moe  # noqa: E402
import steps  # noqa: E402

step = moe.trainer(d=args.d, layers=args.layers, experts=args.experts)
if args.record:
    if args.alloc == "vpmm":
        import vpmm.torch as vt  # noqa: E402
        vt.record_memory_history(max_entries=2_000_000)
    else:
        torch.cuda.memory._record_memory_history(max_entries=2_000_000)


result = (steps.lockstep_worker(args.alloc, moe.SHAPES, step) if args.worker
          else steps.timed_cycles(args.alloc, args.cycles, moe.SHAPES, step, args.per_step))
peak, cur = held()
live_peak, work = allocator.live_peak_and_work(args.alloc)
out = {"client": "hard", "alloc": args.alloc, "label": args.label or args.alloc,
       "peak_bytes": peak, "peak_gib": round(peak / 2**30, 3), "live_peak_gib": round(live_peak / 2**30, 3),
       "peak_over_live": round(peak / live_peak, 4) if live_peak else None, "held_bytes": cur,
       **result, **work}
if args.record:
    if args.alloc == "vpmm":
        vt.dump_snapshot(args.record)
    else:
        import gzip  # noqa: E402
        import pickle  # noqa: E402
        with (gzip.open if args.record.endswith(".gz") else open)(args.record, "wb") as f:
            pickle.dump(torch.cuda.memory._snapshot(), f)
    out["recorded"] = args.record
print(json.dumps(out))
sys.stdout.flush()
