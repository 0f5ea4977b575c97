"""First allocation of 8 GiB and 32 GiB on an empty allocator, timed on the
CPU around torch.empty + synchronize, after emptying the cache each time.
One JSON line per size. Used for PyTorch native, expandable_segments and
cudaMallocAsync; libvpmm's growth is timed by bench_vpmm in the same run.

  python3 bench/torch/growth.py --alloc expandable [--reps 5]"""
import argparse
import json
import statistics
import time

import allocator

ap = argparse.ArgumentParser()
ap.add_argument("--alloc", required=True)
ap.add_argument("--reps", type=int, default=5)
args = ap.parse_args()
allocator.choose(args.alloc)
import torch  # noqa: E402

torch.empty(1, device="cuda")  # context and allocator set up outside the timing
for gib in (8, 32):
    ms = []
    for _ in range(args.reps + 1):
        torch.cuda.empty_cache()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        x = torch.empty(gib << 30, dtype=torch.uint8, device="cuda")
        torch.cuda.synchronize()
        ms.append(1000 * (time.perf_counter() - t0))
        del x
    ms = ms[1:]  # the first one pays one-time costs
    print(json.dumps({"client": "growth", "alloc": args.alloc, "gib": gib,
                      "ms_median": round(statistics.median(ms), 3), "ms_min": round(min(ms), 3)}))
