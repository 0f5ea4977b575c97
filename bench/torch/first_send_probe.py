"""Where a process pair's first send goes (issue 43): a trainer process
exports 68 allocations of 24 MiB from its default pool (export_many: one
export), a rollout process opens them (vpmm.ipc.Handle.open), three times,
each time new allocations. Per send it prints one JSON line: the trainer's
export_many ms, the rollout's default_pool ms, its open ms and the C import
inside it (open_descriptor), and put-to-reply ms. With `pre` the rollout
makes its default pool before the first send, to tell the pool's creation
from the import's first-time cost. Each run is one fresh pair:

    VPMM_LIBRARY=build/libvpmm.so.1 PYTHONPATH=bindings/python \
        python3 bench/torch/first_send_probe.py cold|pre

Needs PyTorch with CUDA (both processes initialise CUDA first, as a trainer
and a rollout have). bench/results/h100.md, "Session of 2026-12-02", has
its numbers.
"""
import json
import multiprocessing as mp
import os
import sys
import time

N_ALLOCS, ALLOC_BYTES, SENDS = 68, 24 << 20, 3


def rollout(inbox, outbox, pool_first):
    import torch
    torch.cuda.set_device(0)
    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    import vpmm
    import vpmm.ipc as ipc
    if pool_first:
        t = time.perf_counter()
        vpmm.default_pool(0)
        outbox.put({"pool_first_ms": 1e3 * (time.perf_counter() - t)})
    outbox.put("ready")
    open_descriptor = ipc.open_descriptor
    for i in range(SENDS):
        handle = inbox.get()
        t0 = time.perf_counter()
        pool = vpmm.default_pool(0)
        t1 = time.perf_counter()
        inner = {}

        def timed_open_descriptor(p, desc, fds):
            a = time.perf_counter()
            imp = open_descriptor(p, desc, fds)
            inner["c_import_ms"] = 1e3 * (time.perf_counter() - a)
            return imp
        ipc.open_descriptor = timed_open_descriptor  # Handle.open calls it by its module name
        imp = handle.open(pool)
        t2 = time.perf_counter()
        ipc.open_descriptor = open_descriptor
        outbox.put({"send": i, "pool_ms": 1e3 * (t1 - t0), "open_ms": 1e3 * (t2 - t1), **inner})
        imp.close()


def main(pool_first):
    os.environ["VPMM_EXPORTABLE"] = "1"  # before the default pool exists
    import torch
    torch.cuda.set_device(0)
    torch.zeros(1, device="cuda")
    import vpmm
    import vpmm.ipc  # noqa: F401 (what install_reductions() has imported by the first send)
    ctx = mp.get_context("spawn")
    inbox, outbox = ctx.Queue(), ctx.Queue()
    peer = ctx.Process(target=rollout, args=(inbox, outbox, pool_first))
    peer.start()
    said = outbox.get()
    if said != "ready":
        print(json.dumps(said), flush=True)
        outbox.get()
    pool = vpmm.default_pool(0)
    for _ in range(SENDS):
        ptrs = [pool.malloc(ALLOC_BYTES) for _ in range(N_ALLOCS)]
        t0 = time.perf_counter()
        export = pool.export_many(ptrs)
        t1 = time.perf_counter()
        handle = export.handle()
        t2 = time.perf_counter()
        inbox.put(handle)
        got = outbox.get()
        t3 = time.perf_counter()
        row = {"pool_first": pool_first, "export_ms": 1e3 * (t1 - t0), "handle_ms": 1e3 * (t2 - t1),
               "put_to_reply_ms": 1e3 * (t3 - t2), **got}
        print(json.dumps({k: round(v, 2) if isinstance(v, float) else v for k, v in row.items()}), flush=True)
        export.close()
        for p in ptrs:
            pool.free(p)
    peer.join(30)


if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in ("cold", "pre"):
        sys.exit("usage: first_send_probe.py cold|pre")
    main(sys.argv[1] == "pre")
