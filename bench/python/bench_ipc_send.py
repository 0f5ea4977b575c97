#!/usr/bin/env python3
"""What sending a model's weights to another process costs in libvpmm itself,
without a GPU or PyTorch: the weights of a ~0.8B-parameter Llama (1.59 GiB of
bf16 in 147 tensors, laid out as PyTorch's caching allocator lays them into
segments: one segment per tensor over 1 MiB, the small ones packed into
2 MiB segments) in tagged, host-backed allocations of an exportable pool,
sent to a second process through a multiprocessing queue and mapped there.

    python3 bench/python/bench_ipc_send.py [--rounds 6] [--scale 16] [--backend host]

Ways to send, alternated within each round (the order rotates):
  per_alloc  what vpmm.torch.share did for each tensor before share_many:
             find the allocation, sweep the earlier exports, export it (or
             reuse its export), pickle a handle per tensor; the receiver
             opens each export it has not opened yet;
  many       one vpmm_pool_export_many for every tensor: one status page,
             one descriptor, one handle; the receiver opens it once.
Each way is timed for the first send (fresh exports) and for a re-send
after a pause/resume cycle of the weights' tag (the old exports ended: new
handles, new exports), from the sender's first call to the receiver
holding every tensor's address. Every round is printed, then the medians.
Sizes are divided by --scale (the count of allocations, what a send pays
for, stays): host memfds are sparse, but a pause copies every byte.
--strace runs one send of each way under `strace -f -c` and prints the
system calls per tensor.
"""
import argparse
import multiprocessing as mp
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "bindings", "python"))

import vpmm  # noqa: E402
from vpmm import ipc  # noqa: E402

MiB = 1 << 20


def llama_tensors(hidden=2048, inter=5632, layers=16, heads=32, kv_heads=8, vocab=32000):
    """Byte sizes of LlamaForCausalLM's parameters (bf16, untied head)."""
    kv = hidden // heads * kv_heads
    out = [vocab * hidden * 2]
    for _ in range(layers):
        out += [hidden * hidden * 2, hidden * kv * 2, hidden * kv * 2, hidden * hidden * 2,
                hidden * inter * 2, hidden * inter * 2, inter * hidden * 2, hidden * 2, hidden * 2]
    out += [hidden * 2, vocab * hidden * 2]
    return out


def layout(sizes, scale):
    """(segment sizes, [(segment index, offset)] per tensor): PyTorch's
    caching allocator's segments (decided on the real sizes), each large one
    scaled down to at least a page."""
    segs, where, small_left = [], [], 0
    for s in sizes:
        if s >= MiB:
            scaled = max(2 * MiB, s // scale)
            segs.append((scaled + 2 * MiB - 1) // (2 * MiB) * 2 * MiB)
            where.append((len(segs) - 1, 0))
        else:
            s = (s + 511) // 512 * 512
            if small_left < s:
                segs.append(2 * MiB)
                small_left = 2 * MiB
            where.append((len(segs) - 1, 2 * MiB - small_left))
            small_left -= s
    return segs, where


def make_pool(backend, total):
    return vpmm.Pool(backend=backend, exportable=1, page_size=2 * MiB,
                     host_capacity=2 * total + 64 * MiB, va_size=8 * total + 1024 * MiB)


# --- the receiver ----------------------------------------------------------------
def receiver(q_in, q_out, backend):
    pool = make_pool(backend, 64 * MiB)
    opened = {}
    while True:
        msg = q_in.get()
        if msg is None:
            return
        way, payload = msg
        ptrs = []
        if way == "per_alloc":
            for handle, exporter_ptr in payload:  # one handle per tensor
                imp = opened.get(handle.nonce)
                if imp is None:
                    imp = opened[handle.nonce] = handle.open(pool)
                ptrs.append(imp.translate(exporter_ptr))
        else:
            handle, exporter_ptrs = payload
            imp = opened[handle.nonce] = handle.open(pool)
            ptrs = [imp.translate(p) for p in exporter_ptrs]
        t = time.monotonic()
        q_out.put((t, len(ptrs)))
        # The rollout drops the previous weights once it has the new ones.
        for k in [k for k in opened if k not in ({handle.nonce} if way == "many" else
                                                 {h.nonce for h, _ in payload})]:
            opened.pop(k).close()


# --- the sender ------------------------------------------------------------------
class Sender:
    def __init__(self, backend, scale):
        sizes = llama_tensors()
        segs, self.where = layout(sizes, scale)
        self.total = sum(segs)
        self.pool = make_pool(backend, self.total)
        self.segs = [self.pool.malloc(s, tag="weights", host_backup=True) for s in segs]
        self.tensors = [self.segs[i] + off for i, off in self.where]
        self.sent = {}  # allocation -> export (per_alloc's reuse, as share() kept them)

    def sweep(self):
        for k in list(self.sent):
            e = self.sent[k]
            state, importers, imports = e._state()
            if state != "active" or (imports > 0 and importers == 0):
                del self.sent[k]
                e.close()

    def per_alloc(self):
        out = []
        for p in self.tensors:
            base, _ = self.pool.lookup(p)
            self.sweep()  # share() swept before every tensor
            e = self.sent.get(base)
            if e is None:
                e = self.sent[base] = self.pool.export(base)
            out.append((e.handle(), p))
        return out

    def many(self):
        for e in self.sent.values():
            e.close()
        self.sent.clear()
        e = self.pool.export_many(self.tensors)
        self.sent[0] = e
        return (e.handle(), list(self.tensors))


def one_send(sender, way, q_in, q_out):
    if way == "none":  # the baseline of --strace: everything but the send
        return 0.0
    t0 = time.monotonic()
    payload = getattr(sender, way)()
    q_in.put((way, payload))
    t1, n = q_out.get()
    assert n == len(sender.tensors), (n, len(sender.tensors))
    return (t1 - t0) * 1e3


def strace_counts(args):
    """System calls per tensor of one send of each way (strace -f -c), less
    those of a run that does everything but the sends."""
    base = None
    for way in ("none", "per_alloc", "many"):
        cmd = ["strace", "-f", "-c", "-o", "/dev/stdout", sys.executable, os.path.abspath(__file__),
               "--rounds", "1", "--scale", str(args.scale), "--backend", args.backend, "--only", way, "--quiet"]
        out = subprocess.run(cmd, capture_output=True, text=True).stdout
        total = [ln for ln in out.splitlines() if ln.strip().endswith("total")]
        calls = int(total[-1].split()[3]) if total else -1
        if way == "none":
            base = calls
            continue
        n = len(llama_tensors())
        print(f"strace {way}: {calls - base} system calls in 2 sends of {n} tensors: "
              f"{(calls - base) / 2 / n:.1f} per tensor per send")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--scale", type=int, default=16)
    ap.add_argument("--backend", default="host")
    ap.add_argument("--only", choices=("per_alloc", "many", "none"))
    ap.add_argument("--quiet", action="store_true")
    ap.add_argument("--strace", action="store_true")
    args = ap.parse_args()
    if args.strace:
        strace_counts(args)
        return
    ways = [args.only] if args.only else ["per_alloc", "many"]
    if "many" in ways and not hasattr(vpmm.Pool, "export_many"):
        ways.remove("many")
        print("this libvpmm binding has no Pool.export_many: per_alloc only")
    ctx = mp.get_context("spawn")
    q_in, q_out = ctx.Queue(), ctx.Queue()
    r = ctx.Process(target=receiver, args=(q_in, q_out, args.backend), daemon=True)
    r.start()
    s = Sender(args.backend, args.scale)
    if not args.quiet:
        print(f"{len(s.tensors)} tensors in {len(s.segs)} allocations, {s.total / MiB:.0f} MiB "
              f"(scale 1/{args.scale}), backend {args.backend}")
    res = {(w, k): [] for w in ways for k in ("first", "resend")}
    for rnd in range(args.rounds):
        order = ways[rnd % len(ways):] + ways[:rnd % len(ways)]
        line = []
        for way in order:
            for kind in ("first", "resend"):
                if kind == "resend":
                    s.pool.pause("weights")
                    s.pool.resume("weights")
                ms = one_send(s, way, q_in, q_out)
                res[(way, kind)].append(ms)
                line.append(f"{way}/{kind} {ms:7.2f} ms")
            # The next way starts from new exports, as a new sync would.
            s.pool.pause("weights")
            s.pool.resume("weights")
        if not args.quiet:
            print(f"round {rnd + 1}: " + "  ".join(line))
    q_in.put(None)
    r.join(10)
    if not args.quiet:
        for key, v in res.items():
            print(f"median {key[0]:9s} {key[1]:6s} {statistics.median(v):8.2f} ms "
                  f"({statistics.median(v) / len(s.tensors) * 1e3:.0f} us per tensor)")


if __name__ == "__main__":
    main()
