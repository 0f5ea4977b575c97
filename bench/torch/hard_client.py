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
environment picks the policy."""
import argparse
import json
import statistics
import sys
import time

import allocator

ap = argparse.ArgumentParser()
ap.add_argument("--alloc", required=True)
ap.add_argument("--cycles", type=int, default=3, help="cycles over the eight shapes; the first is warm-up")
ap.add_argument("--layers", type=int, default=12)
ap.add_argument("--d", type=int, default=1024)
ap.add_argument("--experts", type=int, default=8)
ap.add_argument("--label", default="")
ap.add_argument("--per-step", action="store_true", help="print each step's time and pool work (stderr)")
args = ap.parse_args()
held = allocator.choose(args.alloc)

import torch  # noqa: E402  (after the allocator is chosen)
import moe  # noqa: E402

torch.manual_seed(0)
vocab = 32000
model = moe.MoE(vocab=vocab, d=args.d, layers=args.layers, experts=args.experts).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
gen = torch.Generator(device="cuda").manual_seed(1)
times, losses = [], []
measured_start = {}
for c in range(args.cycles):
    for s, (batch, seq) in enumerate(moe.SHAPES):
        torch.cuda.synchronize()
        if c == 1 and s == 0:
            measured_start = allocator.pool_work(args.alloc)
        before = allocator.pool_work(args.alloc) if args.per_step else {}
        t0 = time.perf_counter()
        loss = moe.train_step(model, opt, batch, seq, vocab, gen)
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        if args.per_step:
            after = allocator.pool_work(args.alloc)
            print(json.dumps({"cycle": c, "batch": batch, "seq": seq, "ms": round(1000 * dt, 2),
                              **{k: after[k] - before[k] for k in after}}), file=sys.stderr)
        losses.append(round(loss.item(), 5))
        if c > 0:
            times.append(dt)
peak, cur = held()
live_peak, work = allocator.live_peak_and_work(args.alloc)
measured = {k: work[k] - measured_start[k] for k in measured_start} if measured_start else {}
steps = len(times)
out = {"client": "hard", "alloc": args.alloc, "label": args.label or args.alloc,
       "peak_bytes": peak, "peak_gib": round(peak / 2**30, 3), "live_peak_gib": round(live_peak / 2**30, 3),
       "peak_over_live": round(peak / live_peak, 4) if live_peak else None, "held_bytes": cur,
       "step_ms_median": round(1000 * statistics.median(times), 2) if times else None,
       "steps_timed": steps, "step_ms": [round(1000 * t, 1) for t in times], "losses": losses, **work}
if measured and steps:
    # The pool's work in the measured (steady-state) cycles, per step.
    out["steady_remapped_bytes"] = measured.get("bytes_remapped", 0)
    out["steady_handles_created"] = measured.get("handles_created", 0)
    if "driver_ns" in measured:
        step_ns = 1e9 * statistics.median(times)
        out["steady_driver_ms_per_step"] = round(measured["driver_ns"] / steps / 1e6, 3)
        out["steady_driver_share"] = round(measured["driver_ns"] / steps / step_ns, 5)
print(json.dumps(out))
sys.stdout.flush()
