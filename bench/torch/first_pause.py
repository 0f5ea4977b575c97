"""The first pause of a tagged model against a later pause of the same tag
(issue 43, item 2): a Llama-sized set of bf16 weights (default 0.75 GiB in
the shapes of a ~0.4B Llama's 16 layers) built in a block with a pinned host
backup, "trained" (in-place updates) for a few steps, then paused and
resumed several times. Each case is a fresh process, so that every first
pause is a real first one:

  routing   global: vpmm.torch.use_as_allocator() and vpmm.region(...)
            pool:   vpmm.torch.pool(...) (PyTorch's caching allocator
                    in a libvpmm MemPool)
  pin       on:  the default: the block pins its backups ahead when it ends
            off: VPMM_PIN_AHEAD=0 (what every first pause paid before)
  gap       seconds between the end of the block and the first pause
            (0: right after; the training steps run inside the gap)

Per case: the first pause's time, the median of the later pauses, their
ratio, GB/s, and the pinned bytes. The targets: with pin on, a first pause
GAP_S (default 1) s or more after the block within 1.5x a later pause; with
pin on and gap 0, a first pause no slower than with pin off.

    PYTHONPATH=bindings/python VPMM_LIBRARY=build/libvpmm.so.1 \\
        python3 bench/torch/first_pause.py [--gib 0.75] [--gap 1] [--later 4] [--routing global,pool]

--host runs the same sequence on the host backend without PyTorch (the
pinning through Pool.prepare_backups_in_background, as vpmm.torch does it):
a check of the C path only, since host "pinned" buffers are plain mappings
that the first copy still has to fault in.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

GiB = 1 << 30


def shapes(total_bytes):
    """bf16 matrices of a Llama's layers (q, k, v, o, gate, up, down), as
    many layers as fit `total_bytes`, plus the norms."""
    h, kv, inter = 2048, 512, 5632
    layer = [(h, h), (kv, h), (kv, h), (h, h), (inter, h), (inter, h), (h, inter), (h,), (h,)]
    per = sum(2 * (a[0] * (a[1] if len(a) > 1 else 1)) for a in layer)
    n = max(1, total_bytes // per)
    return [s for _ in range(n) for s in layer]


def case_torch(routing, gap, later, gib):
    import torch
    import vpmm
    import vpmm.torch as vt
    if routing == "global":
        vt.use_as_allocator()
    torch.cuda.set_device(0)
    torch.ones(1, device="cuda")  # CUDA up before the clock starts
    sh = shapes(int(gib * GiB))
    block = vpmm.region("weights", host_backup=True) if routing == "global" else \
        vt.pool("weights", host_backup=True)
    with block:
        ws = [torch.randn(s, device="cuda", dtype=torch.bfloat16) for s in sh]
    t_closed = time.monotonic()
    nbytes = sum(w.numel() * w.element_size() for w in ws)
    for _ in range(16):  # the training steps: in-place updates of every weight
        for w in ws:
            w.mul_(0.999)
    torch.cuda.synchronize()
    left = gap - (time.monotonic() - t_closed)
    if left > 0:
        time.sleep(left)
    fut = vt.pinning_ahead.get("weights")
    pin_done = fut.done() if fut is not None else None
    gap_s = time.monotonic() - t_closed
    times = []
    for i in range(1 + later):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        assert vt.pause("weights")
        times.append(time.perf_counter() - t0)
        assert vt.resume("weights", prepare_share=False)
        if i == 0:
            check = ws[0].float().sum().item()  # the bytes are back
    stats = vt.default_pool(0).stats()
    return {"bytes": nbytes, "times": times, "gap_s": gap_s, "pin_done_at_pause": pin_done,
            "pinned_bytes": stats["backup_pinned_bytes"], "pageable_bytes": stats["backup_pageable_bytes"],
            "sum": check}


def case_host(gap, later, gib, pin):
    import vpmm
    pool = vpmm.Pool("host", use_env=False, host_capacity=int(gib * GiB * 1.25) + (64 << 20))
    sh = shapes(int(gib * GiB))
    ptrs = []
    for s in sh:
        n = 2 * s[0] * (s[1] if len(s) > 1 else 1)
        p = pool.malloc(n, tag="weights", host_backup=True)
        import ctypes
        ctypes.memset(p, 0x3c, n)
        ptrs.append((p, n))
    t_closed = time.monotonic()
    fut = pool.prepare_backups_in_background("weights") if pin else None
    left = gap - (time.monotonic() - t_closed)
    if left > 0:
        time.sleep(left)
    pin_done = fut.done() if fut is not None else None
    gap_s = time.monotonic() - t_closed
    times = []
    for _ in range(1 + later):
        t0 = time.perf_counter()
        assert pool.pause("weights")
        times.append(time.perf_counter() - t0)
        assert pool.resume("weights")
    stats = pool.stats()
    out = {"bytes": sum(n for _, n in ptrs), "times": times, "gap_s": gap_s, "pin_done_at_pause": pin_done,
           "pinned_bytes": stats["backup_pinned_bytes"], "pageable_bytes": stats["backup_pageable_bytes"]}
    for p, _ in ptrs:
        pool.free(p)
    pool.close()
    return out


def child(args):
    if args.host:
        r = case_host(args.gap_case, args.later, args.gib, args.pin_case == "on")
    else:
        r = case_torch(args.routing_case, args.gap_case, args.later, args.gib)
    print("CASE " + json.dumps(r), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gib", type=float, default=0.75, help="bytes of weights, in GiB")
    ap.add_argument("--gap", type=float, default=1.0, help="seconds from the block's end to the first pause")
    ap.add_argument("--later", type=int, default=4, help="later pauses timed")
    ap.add_argument("--routing", default="global,pool")
    ap.add_argument("--host", action="store_true", help="host backend, no PyTorch")
    ap.add_argument("--case", nargs=3, metavar=("ROUTING", "PIN", "GAP"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.case:
        args.routing_case, args.pin_case, args.gap_case = args.case[0], args.case[1], float(args.case[2])
        return child(args)
    routings = ["host"] if args.host else args.routing.split(",")
    rows = []
    ok = True
    for routing in routings:
        for pin, gap in (("off", 0.0), ("on", 0.0), ("off", args.gap), ("on", args.gap)):
            env = dict(os.environ, VPMM_PIN_AHEAD="1" if pin == "on" else "0")
            if args.host:
                env["VPMM_BACKEND"] = "host"
            cmd = [sys.executable, __file__, "--gib", str(args.gib), "--later", str(args.later)] + \
                (["--host"] if args.host else []) + ["--case", routing, pin, str(gap)]
            r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
            line = [x for x in r.stdout.splitlines() if x.startswith("CASE ")]
            if r.returncode != 0 or not line:
                print(f"{routing} pin={pin} gap={gap}: FAILED\n{r.stdout[-2000:]}{r.stderr[-4000:]}", flush=True)
                ok = False
                continue
            c = json.loads(line[0][5:])
            first, later = c["times"][0], statistics.median(c["times"][1:])
            row = {"routing": routing, "pin": pin, "gap": gap, "first_ms": round(first * 1e3, 1),
                   "later_ms": round(later * 1e3, 1), "ratio": round(first / later, 2),
                   "first_gbps": round(c["bytes"] / first / 1e9, 2), "later_gbps": round(c["bytes"] / later / 1e9, 2),
                   "gap_s": round(c["gap_s"], 2), "pinned_ahead_done": c["pin_done_at_pause"],
                   "pinned_gib": round(c["pinned_bytes"] / GiB, 3), "pageable_gib": round(c["pageable_bytes"] / GiB, 3),
                   "gib": round(c["bytes"] / GiB, 3)}
            rows.append(row)
            print(f"{routing:6s} pin={pin:3s} gap={c['gap_s']:.2f}s  first {row['first_ms']:8.1f} ms "
                  f"({row['first_gbps']:6.2f} GB/s)  later {row['later_ms']:8.1f} ms ({row['later_gbps']:6.2f} GB/s)  "
                  f"first/later {row['ratio']:.2f}  pinned ahead done: {c['pin_done_at_pause']}  "
                  f"pinned {row['pinned_gib']} GiB of {row['gib']} GiB", flush=True)
    for routing in routings:
        by = {(r["pin"], r["gap"]): r for r in rows if r["routing"] == routing}
        gapped, off0, on0 = by.get(("on", args.gap)), by.get(("off", 0.0)), by.get(("on", 0.0))
        if gapped:
            met = gapped["ratio"] <= 1.5
            print(f"target {routing}: first pause {args.gap:g} s after the block within 1.5x a later one: "
                  f"{'MET' if met else 'NOT MET'} ({gapped['ratio']:.2f}x)")
        if off0 and on0:
            met = on0["first_ms"] <= off0["first_ms"] * 1.05
            print(f"target {routing}: a pause right after the block no slower than without pinning ahead: "
                  f"{'MET' if met else 'NOT MET'} ({on0['first_ms']:.1f} vs {off0['first_ms']:.1f} ms)")
    print("RESULT " + json.dumps(rows))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
