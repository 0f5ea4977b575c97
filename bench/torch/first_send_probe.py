"""Where a process pair's first send goes (issue 43): a trainer process
exports 68 allocations of 24 MiB from its default pool (export_many: one
export), a rollout process opens them (vpmm.ipc.Handle.open), three times,
each time new allocations. Per send it prints one JSON line: the trainer's
export_many ms, the rollout's default_pool ms, its open ms and the C import
inside it (open_descriptor), and put-to-reply ms. With `pre` the rollout
makes its default pool before the first send, to tell the pool's creation
from the import's first-time cost. Each run is one fresh pair:

    VPMM_LIBRARY=build/libvpmm.so.1 PYTHONPATH=bindings/python \
        python3 bench/torch/first_send_probe.py cold|pre [--fresh] [--warm SIDE] [--sends N]

--fresh keeps every send's allocations, so each send exports handles never
exported before (without it the pool reuses the first send's handles and
their exports). --warm trainer|rollout|both does one export (trainer) or an
export of its own opened in-process (rollout) of a single 2 MiB allocation
before the first send, to tell a once-per-process cost from a per-handle one;
--warm fdtable grows both processes' file descriptor tables to 4096 entries
first (each doubling of a threaded process's table waits for an RCU grace
period in the kernel).

Needs PyTorch with CUDA (both processes initialise CUDA first, as a trainer
and a rollout have). bench/results/h100.md, "Session of 2026-12-02", has
its numbers.
"""
import argparse
import json
import multiprocessing as mp
import os
import time

N_ALLOCS, ALLOC_BYTES = 68, 24 << 20


def warm_up(pool, self_open):
    """One export of one 2 MiB allocation (and its import back into this
    process when self_open); ms."""
    t = time.perf_counter()
    p = pool.malloc(2 << 20)
    export = pool.export_many([p])
    handle = export.handle()
    if self_open:
        handle.open(pool).close()
    export.close()
    pool.free(p)
    return 1e3 * (time.perf_counter() - t)


def grow_fd_table(entries=4096):
    """Makes this process's file descriptor table hold `entries` (within
    RLIMIT_NOFILE) with one dup2, then closes the copy; ms."""
    import resource
    t = time.perf_counter()
    target = min(entries, resource.getrlimit(resource.RLIMIT_NOFILE)[0]) - 1
    fd = os.open(os.devnull, os.O_RDONLY)
    os.dup2(fd, target)
    os.close(target)
    os.close(fd)
    return 1e3 * (time.perf_counter() - t)


def rollout(inbox, outbox, pool_first, warm, sends):
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
    if warm == "fdtable":
        outbox.put({"rollout_fd_table_ms": grow_fd_table()})
    elif warm:
        outbox.put({"rollout_warm_ms": warm_up(vpmm.default_pool(0), True)})
    outbox.put("ready")
    open_descriptor = ipc.open_descriptor
    for i in range(sends):
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


def main(pool_first, fresh, warm, sends):
    os.environ["VPMM_EXPORTABLE"] = "1"  # before the default pool exists
    import torch
    torch.cuda.set_device(0)
    torch.zeros(1, device="cuda")
    import vpmm
    import vpmm.ipc  # noqa: F401 (what install_reductions() has imported by the first send)
    ctx = mp.get_context("spawn")
    inbox, outbox = ctx.Queue(), ctx.Queue()
    peer = ctx.Process(target=rollout, args=(inbox, outbox, pool_first, "fdtable" if warm == "fdtable" else warm in ("rollout", "both"), sends))
    peer.start()
    pool = vpmm.default_pool(0)
    if warm in ("trainer", "both"):
        print(json.dumps({"trainer_warm_ms": round(warm_up(pool, False), 2)}), flush=True)
    elif warm == "fdtable":
        print(json.dumps({"trainer_fd_table_ms": round(grow_fd_table(), 2)}), flush=True)
    while True:
        said = outbox.get()
        if said == "ready":
            break
        print(json.dumps({k: round(v, 2) for k, v in said.items()}), flush=True)
    kept = []
    for _ in range(sends):
        ptrs = [pool.malloc(ALLOC_BYTES) for _ in range(N_ALLOCS)]
        t0 = time.perf_counter()
        export = pool.export_many(ptrs)
        t1 = time.perf_counter()
        handle = export.handle()
        t2 = time.perf_counter()
        inbox.put(handle)
        got = outbox.get()
        t3 = time.perf_counter()
        row = {"pool_first": pool_first, "fresh": fresh, "warm": warm, "export_ms": 1e3 * (t1 - t0), "handle_ms": 1e3 * (t2 - t1),
               "put_to_reply_ms": 1e3 * (t3 - t2), **got}
        print(json.dumps({k: round(v, 2) if isinstance(v, float) else v for k, v in row.items()}), flush=True)
        export.close()
        if fresh:
            kept.extend(ptrs)
        else:
            for p in ptrs:
                pool.free(p)
    peer.join(30)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=("cold", "pre"))
    ap.add_argument("--fresh", action="store_true")
    ap.add_argument("--warm", choices=("none", "trainer", "rollout", "both", "fdtable"), default="none")
    ap.add_argument("--sends", type=int, default=3)
    a = ap.parse_args()
    main(a.mode == "pre", a.fresh, a.warm, a.sends)
