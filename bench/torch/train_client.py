"""The live training client: a GPT-style model (16 layers, d=1024, AdamW,
bf16 autocast) trained over six batch/sequence shapes in turn (or, with
--shapes varlen, eight variable-length batches of 2K-12K tokens), under one
allocator per process. Prints one JSON line: the allocator's peak device
memory, the median step time of the measured rounds and the losses.

  python3 bench/torch/train_client.py --alloc native|expandable|cudamallocasync|vpmm [--rounds 3] [--batch-scale 4]
                                      [--shapes six|varlen] [--per-step]

With --alloc vpmm the VPMM_* environment picks the policy (for instance
VPMM_MAX_HANDLE_SIZE=1p for page handles). With --worker it runs rounds one
at a time as bench/torch/step_lockstep.py asks on stdin."""
import argparse
import json
import sys

import allocator

ap = argparse.ArgumentParser()
ap.add_argument("--alloc", required=True)
ap.add_argument("--rounds", type=int, default=3, help="rounds over the shapes; the first is warm-up")
ap.add_argument("--layers", type=int, default=16)
ap.add_argument("--d", type=int, default=1024)
ap.add_argument("--label", default="")
ap.add_argument("--batch-scale", type=int, default=1,
                help="multiply every shape's batch (4: a ~24 GiB peak, the scale of the earlier training runs)")
ap.add_argument("--shapes", choices=("six", "varlen"), default="six",
                help="six: gpt.SHAPES, the earlier training runs' shapes; varlen: gpt.VARLEN_SHAPES, 2K-12K tokens a step")
ap.add_argument("--per-step", action="store_true",
                help="also print each step's time and, under libvpmm, the pool work it did (stderr)")
ap.add_argument("--worker", action="store_true",
                help="cycles on request from stdin (bench/torch/step_lockstep.py); --rounds is unused")
args = ap.parse_args()
held = allocator.choose(args.alloc)

import torch  # noqa: E402  (after the allocator is chosen)
import gpt  # noqa: E402
import steps  # noqa: E402

torch.manual_seed(0)
vocab = 32000
model = gpt.GPT(vocab=vocab, d=args.d, layers=args.layers, heads=16).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
gen = torch.Generator(device="cuda").manual_seed(1)
shapes = [(b * args.batch_scale, q) for b, q in (gpt.SHAPES if args.shapes == "six" else gpt.VARLEN_SHAPES)]


def step(b, q):
    return gpt.train_step(model, opt, b, q, vocab, gen)


result = (steps.lockstep_worker(args.alloc, shapes, step) if args.worker
          else steps.timed_cycles(args.alloc, args.rounds, shapes, step, args.per_step))
peak, cur = held()
live_peak, extra = allocator.live_peak_and_work(args.alloc)
print(json.dumps({"client": "train", "alloc": args.alloc, "label": args.label or args.alloc,
                  "batch_scale": args.batch_scale, "shapes": args.shapes, "peak_bytes": peak,
                  "peak_gib": round(peak / 2**30, 3), "live_peak_gib": round(live_peak / 2**30, 3),
                  "held_bytes": cur, **result, **extra}))
sys.stdout.flush()
