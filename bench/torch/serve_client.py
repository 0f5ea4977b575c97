"""The live serving client: the inference trace's pattern (bench/torch/
record_traces.py) run under one allocator per process: bf16 weights of the
16-layer GPT, waves of requests of variable batch and prompt length, a KV
cache that grows by concatenation every decode step. Prints one JSON line:
the allocator's peak device memory, the live peak, and the median time per
generated token over the waves after the first.

  python3 bench/torch/serve_client.py --alloc native|expandable|cudamallocasync|vpmm [--waves 14] [--batch-scale 1]

With --alloc vpmm the VPMM_* environment picks the policy. With --worker it
runs the waves one at a time as bench/torch/serve_lockstep.py asks on stdin
("WAVE" runs that wave and prints its seconds; "end" prints the JSON line),
so that several allocators' processes take turns wave by wave."""
import argparse
import json
import statistics
import sys
import time

import allocator

ap = argparse.ArgumentParser()
ap.add_argument("--alloc", required=True)
ap.add_argument("--waves", type=int, default=14)
ap.add_argument("--batch-scale", type=int, default=1, help="multiply every wave's batch")
ap.add_argument("--label", default="")
ap.add_argument("--worker", action="store_true", help="waves on request from stdin (serve_lockstep.py)")
args = ap.parse_args()
held = allocator.choose(args.alloc)

import torch  # noqa: E402  (after the allocator is chosen)
import gpt  # noqa: E402

torch.manual_seed(0)
vocab = 32000
model = gpt.GPT(vocab=vocab, d=1024, layers=16, heads=16, max_seq=4096).cuda().to(torch.bfloat16).eval()
per_token, waves = [], []
cpu_at = [time.process_time()]


def on_wave(wave, batch, prompt, gen_len, seconds):
    cpu = time.process_time()
    if wave > 0:
        per_token.append(seconds / gen_len)
        waves.append((batch * gen_len, seconds, cpu - cpu_at[0]))
    cpu_at[0] = cpu


if args.worker:
    specs = gpt.wave_specs(args.waves, batch_scale=args.batch_scale)
    print(json.dumps({"ready": args.alloc}), flush=True)
    for line in sys.stdin:
        if line.strip() == "end":
            break
        wave = int(line)
        cpu = time.process_time()
        seconds = gpt.run_wave(model, vocab, *specs[wave])
        print(json.dumps({"wave": wave, "seconds": round(seconds, 5), "tokens": specs[wave][0] * specs[wave][2],
                          "cpu_s": round(time.process_time() - cpu, 5)}), flush=True)
else:
    gpt.serve_waves(model, vocab, waves=args.waves, batch_scale=args.batch_scale, on_wave=on_wave)
peak, cur = held()
live_peak, extra = allocator.live_peak_and_work(args.alloc)
print(json.dumps({"client": "serve", "alloc": args.alloc, "label": args.label or args.alloc,
                  "batch_scale": args.batch_scale, "peak_bytes": peak, "peak_gib": round(peak / 2**30, 3),
                  "live_peak_gib": round(live_peak / 2**30, 3), "held_bytes": cur,
                  "ms_per_token_median": round(1000 * statistics.median(per_token), 3) if per_token else None,
                  "waves_timed": len(per_token),
                  # every wave after the first: tokens generated / seconds, and the
                  # process's CPU seconds over its wall seconds (CPU-bound near 1)
                  "tokens_per_s": round(sum(w[0] for w in waves) / sum(w[1] for w in waves), 2) if waves else None,
                  "cpu_per_wall": round(sum(w[2] for w in waves) / sum(w[1] for w in waves), 3) if waves else None,
                  "wave_s": [round(w[1], 4) for w in waves], **extra}))
sys.stdout.flush()
