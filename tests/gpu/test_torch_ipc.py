"""Tensors in libvpmm pools shared between PyTorch processes (docs/ipc.md):
a probe of what PyTorch's own CUDA IPC does with libvpmm memory (under
vpmm.torch.pool() and under use_as_allocator()), vpmm.torch.share/open with
a pause and resume of the sender's tag, torch.multiprocessing queues with
vpmm.torch.install_reductions (vpmm tensors and ordinary ones in one queue),
a state dict through a queue as one export (share_many / open_many), and a
weight-sync loop of 100 updates against a copy in one process.
Each case runs in a process of its own (pyharness); receivers are spawned
processes. Exits 77 without torch or a CUDA device.

The probe cases measure what PyTorch does: pyharness reports their last
line, "PROBE ...", as INFO and counts them neither passed nor failed (they
fail only when they raise)."""
import os
import sys
import time

import pyharness

MiB = 1 << 20
GiB = 1 << 30


def _exportable():
    # The default pools read the environment when first used.
    os.environ["VPMM_EXPORTABLE"] = "1"


# --- receivers (spawned processes) -----------------------------------------------
def _receiver_share(q_in, q_out):
    import torch
    import vpmm.torch as vt
    torch.cuda.set_device(0)
    msg = q_in.get()
    t = vt.open(msg["w"])
    view = vt.open(msg["view"])
    ok = (abs(t.double().sum().item() - msg["sum"]) < 1e-3 * max(1.0, abs(msg["sum"]))
          and torch.equal(view.cpu(), msg["view_cpu"]))
    t.mul_(2)  # written back: the sender sees it
    torch.cuda.synchronize()
    q_out.put({"ok": ok, "current": vt.current(t)})
    q_in.get()  # the sender paused its tag
    old = t.double().sum().item()  # the old memory: still mapped here
    q_out.put({"current": vt.current(t), "old_sum": old})
    vt.close(t)
    vt.close(view)
    msg = q_in.get()  # resumed and shared again
    t2 = vt.open(msg["w"])
    q_out.put({"sum": t2.double().sum().item(), "current": vt.current(t2)})
    del t2
    q_in.get()


def _receiver_queue(q_in, q_out):
    import torch
    torch.cuda.set_device(0)
    import vpmm.torch  # noqa: F401  (the rebuild function lives there)
    mine, theirs = q_in.get()  # a vpmm tensor and a PyTorch-allocated one
    q_out.put({"mine": mine.double().sum().item(), "theirs": theirs.double().sum().item(),
               "mine_vpmm": vpmm.torch.owns(mine)})
    mine.fill_(3)
    torch.cuda.synchronize()
    q_out.put("written")
    q_in.get()


def _receiver_sync(q_in, q_out, n_updates):
    import torch
    import vpmm.torch as vt
    torch.cuda.set_device(0)
    w = vt.open(q_in.get())
    local = torch.empty_like(w)
    torch.cuda.synchronize()
    copy_s = 0.0
    bad = 0
    for u in range(n_updates):
        step = q_in.get()
        t0 = time.perf_counter()
        local.copy_(w)
        torch.cuda.synchronize()
        copy_s += time.perf_counter() - t0
        if (u + 1) % 10 == 0 and local[0].item() != float(step):
            bad += 1
        q_out.put(u)
    q_out.put({"copy_s": copy_s, "bad": bad})
    vt.close(w)


def _receiver_state_dict(q_in, q_out):
    import torch
    torch.cuda.set_device(0)
    import vpmm.torch as vt
    import gc
    for _ in range(2):  # the first send, then a send after a pause/resume of the sender
        sd = q_in.get()
        r = {"sums": {k: v.double().sum().item() for k, v in sd.items()}, "keys": list(sd.keys()),
             "metadata": getattr(sd, "_metadata", None) is not None,
             "imports": vt.default_pool(0).ipc_stats()["imports"]}
        del sd  # its import closes (after a device synchronisation) before the next send
        gc.collect()
        r["imports_after"] = vt.default_pool(0).ipc_stats()["imports"]
        q_out.put(r)
    shared, expected = q_in.get()  # share_many: views, dtypes, an empty tensor
    got = vt.open_many(shared)
    q_out.put([g.shape == e.shape and g.dtype == e.dtype and torch.equal(g.cpu(), e) for g, e in zip(got, expected)])
    del got
    q_in.get()


def _receiver_one_state_dict(q_in, q_out):
    import torch
    torch.cuda.set_device(0)
    import vpmm.torch as vt
    sd = q_in.get()
    q_out.put({"sums": {k: v.double().sum().item() for k, v in sd.items()},
               "imports": vt.default_pool(0).ipc_stats()["imports"]})
    del sd
    q_in.get()


def _spawn(target, *args):
    import torch.multiprocessing as mp
    ctx = mp.get_context("spawn")
    q_in, q_out = ctx.Queue(), ctx.Queue()
    p = ctx.Process(target=target, args=(q_in, q_out) + args)
    p.start()
    return p, q_in, q_out


# --- the probe -------------------------------------------------------------------
def _probe_reduce(t):
    """What PyTorch's own reducer does with t: "ok" (a handle was made), or
    the exception it raised."""
    from torch.multiprocessing.reductions import reduce_tensor
    try:
        reduce_tensor(t)
        return "ok"
    except Exception as e:  # the outcome is what is measured
        return f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"


def _receiver_native(q_in, q_out):
    import torch
    torch.cuda.set_device(0)
    try:
        t = q_in.get()
        q_out.put(f"rebuilt, sum {t.float().sum().item()}")
    except Exception as e:
        q_out.put(f"rebuild failed: {type(e).__name__}: {str(e).splitlines()[0][:160]}")


def probe_torch_reducer_mempool():
    import torch
    import vpmm.torch as vt
    with vt.pool("probe"):
        t = torch.ones(4 * MiB, device="cuda")
    out = _probe_reduce(t)
    if out == "ok":  # then see whether another process can use it
        p, q_in, q_out = _spawn(_receiver_native)
        q_in.put(t)
        out += "; " + q_out.get(timeout=120)
        p.join(60)
    print(f"PROBE torch reduce_tensor on vpmm.torch.pool() memory: {out}")


def probe_torch_reducer_pluggable():
    import torch
    import vpmm.torch as vt
    vt.use_as_allocator()
    t = torch.ones(4 * MiB, device="cuda")
    assert vt.owns(t)
    print(f"PROBE torch reduce_tensor under use_as_allocator(): {_probe_reduce(t)}")


# --- vpmm.torch.share / open ----------------------------------------------------
def share_open_pause_resume():
    _exportable()
    import torch
    import vpmm.torch as vt
    with vt.pool("weights", host_backup=True):
        w = torch.randn(32 * MiB, dtype=torch.bfloat16, device="cuda")  # 64 MiB
        m = torch.randn(256, 512, device="cuda")
    view = m.t()[3:100]  # not contiguous, not at the storage's start
    torch.cuda.synchronize()
    orig = w.double().sum().item()
    p, q_in, q_out = _spawn(_receiver_share)
    q_in.put({"w": vt.share(w), "view": vt.share(view), "sum": orig, "view_cpu": view.cpu()})
    r = q_out.get(timeout=120)
    assert r["ok"], r
    assert r["current"], r
    assert abs(w.double().sum().item() - 2 * orig) < 1e-3 * max(1.0, abs(orig)), "the receiver's write is not here"
    expected = w.double().sum().item()
    assert vt.pause("weights")
    q_in.put("paused")
    r = q_out.get(timeout=120)
    assert not r["current"], "after a pause the receiver's tensor must not be current"
    assert abs(r["old_sum"] - expected) < 1e-3 * max(1.0, abs(expected)), r
    assert vt.resume("weights")
    assert abs(w.double().sum().item() - expected) < 1e-3 * max(1.0, abs(expected)), "resume lost the bytes"
    q_in.put({"w": vt.share(w)})
    r = q_out.get(timeout=120)
    assert r["current"] and abs(r["sum"] - expected) < 1e-3 * max(1.0, abs(expected)), r
    q_in.put("done")
    p.join(60)
    assert p.exitcode == 0, p.exitcode
    vt.release_shared()
    print("shared, written back, paused (receiver not current, old bytes kept), resumed, shared again")


def multiprocessing_queue_with_reductions():
    _exportable()
    import torch
    import vpmm.torch as vt
    vt.install_reductions()
    with vt.pool("weights"):
        mine = torch.full((8 * MiB,), 2.0, device="cuda")
    theirs = torch.full((1 * MiB,), 5.0, device="cuda")  # PyTorch's own allocator
    assert vt.owns(mine) and not vt.owns(theirs)
    torch.cuda.synchronize()
    p, q_in, q_out = _spawn(_receiver_queue)
    q_in.put((mine, theirs))
    r = q_out.get(timeout=120)
    assert r["mine"] == 2.0 * 8 * MiB and r["theirs"] == 5.0 * MiB and r["mine_vpmm"] is False, r
    assert q_out.get(timeout=120) == "written"
    assert mine.double().sum().item() == 3.0 * 8 * MiB, "the receiver's write is not here"
    q_in.put("done")
    p.join(60)
    assert p.exitcode == 0, p.exitcode
    print("a vpmm tensor and a PyTorch tensor through one torch.multiprocessing queue")


def share_many_and_state_dicts():
    """A model's state dict through a torch.multiprocessing queue after
    install_reductions(): one export and one import for all its libvpmm
    tensors (not one per tensor), values and order intact, the other
    tensors (PyTorch's allocator) and _metadata beside them; share_many /
    open_many directly, views and dtypes included."""
    _exportable()
    import torch
    import vpmm.torch as vt
    vt.install_reductions()
    with vt.pool("weights", host_backup=True):
        model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 1024),
                                    torch.nn.LayerNorm(1024)).cuda().to(torch.bfloat16)
    extra = torch.arange(10.0, device="cuda")  # PyTorch's own allocator
    sd = model.state_dict()
    sd["extra"] = extra
    assert isinstance(sd, __import__("collections").OrderedDict) and hasattr(sd, "_metadata")
    want = {k: v.double().sum().item() for k, v in sd.items()}
    before = vt.default_pool(0).ipc_stats()["n_exports"]
    p, q_in, q_out = _spawn(_receiver_state_dict)
    for rnd in range(2):
        q_in.put(sd)
        r = q_out.get(timeout=120)
        assert r["keys"] == list(sd.keys()), r
        assert r["metadata"], "state_dict()'s _metadata was lost"
        for k, v in want.items():
            assert abs(r["sums"][k] - v) <= 1e-3 * max(1.0, abs(v)), (k, r["sums"][k], v)
        assert r["imports"] == 1, f"the receiver made {r['imports']} imports for one state dict"
        assert r["imports_after"] == 0, "the import outlived the state dict's tensors"
        if rnd == 0:
            assert vt.pause("weights") and vt.resume("weights")
            sd = model.state_dict()
            sd["extra"] = extra
    made = vt.default_pool(0).ipc_stats()["n_exports"] - before
    assert made == 2, f"{made} exports for two sends of a state dict"
    # share_many / open_many: dtypes, views, an empty tensor, in order.
    with vt.pool("weights"):
        a = torch.randn(300, 500, device="cuda")
        b = torch.arange(1000, dtype=torch.int64, device="cuda")
        c = torch.randn(77, dtype=torch.bfloat16, device="cuda")
    ts = [a, a.t()[5:50], b[3::7], torch.empty(0, device="cuda"), c[1:], a[1]]
    torch.cuda.synchronize()
    q_in.put((vt.share_many(ts), [t.cpu() for t in ts]))
    r = q_out.get(timeout=120)
    assert r == [True] * len(ts), r
    q_in.put("done")
    p.join(60)
    assert p.exitcode == 0, p.exitcode
    vt.release_shared()
    print(f"state dict of {len(want)} tensors: one export and one import per send, twice (after a "
          "pause/resume); share_many pickles")


def share_ahead_after_a_block():
    """Once the process will send (install_reductions()), a tagged
    vpmm.torch.pool block prepares its exports in the background when it
    ends (sharing_ahead), so the first send finds the handles exported;
    share_ahead=False prepares nothing; the send is intact either way."""
    _exportable()
    import torch
    import vpmm.torch as vt
    vt.install_reductions()
    with vt.pool("ahead", host_backup=True):
        model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.Linear(4096, 1024)).cuda()
    fut = vt.sharing_ahead.get("ahead")
    assert fut is not None, "the block's end prepared no exports after install_reductions()"
    prepared = fut.result(timeout=60)
    assert prepared > 0, f"{prepared} handles prepared"
    with vt.pool("not_ahead", share_ahead=False):
        other = torch.randn(1 << 20, device="cuda")
    assert "not_ahead" not in vt.sharing_ahead, "share_ahead=False prepared exports"
    sd = model.state_dict()
    want = {k: v.double().sum().item() for k, v in sd.items()}
    p, q_in, q_out = _spawn(_receiver_one_state_dict)
    q_in.put(sd)
    r = q_out.get(timeout=120)
    assert r["imports"] == 1, r
    for k, v in want.items():
        assert abs(r["sums"][k] - v) <= 1e-3 * max(1.0, abs(v)), (k, r["sums"][k], v)
    q_in.put("done")
    p.join(60)
    assert p.exitcode == 0, p.exitcode
    del other
    vt.release_shared()
    print(f"a block's end prepared {prepared} handles' exports; the send after it intact")


def weight_sync_loop():
    _exportable()
    import torch
    import vpmm.torch as vt
    n_updates = 100
    with vt.pool("weights"):
        w = torch.zeros(GiB // 2, dtype=torch.bfloat16, device="cuda")  # 1 GiB
    p, q_in, q_out = _spawn(_receiver_sync, n_updates)
    q_in.put(vt.share(w))
    for u in range(n_updates):
        w.fill_(float((u + 1) % 200))  # the trainer's step (values bf16 holds exactly)
        torch.cuda.synchronize()
        q_in.put((u + 1) % 200)
        assert q_out.get(timeout=120) == u
    r = q_out.get(timeout=120)
    p.join(60)
    assert r["bad"] == 0, r
    local = torch.empty_like(w)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(20):
        local.copy_(w)
    torch.cuda.synchronize()
    one_process = 20 * w.numel() * 2 / (time.perf_counter() - t0) / 1e9
    through_import = n_updates * w.numel() * 2 / r["copy_s"] / 1e9
    print(f"PROBE weight sync of 1 GiB, 100 updates: the receiver's copy through the import "
          f"{through_import:.0f} GB/s, a copy in one process {one_process:.0f} GB/s")


CASES = {
    "probe_torch_reducer_mempool": probe_torch_reducer_mempool,
    "probe_torch_reducer_pluggable": probe_torch_reducer_pluggable,
    "share_open_pause_resume": share_open_pause_resume,
    "multiprocessing_queue_with_reductions": multiprocessing_queue_with_reductions,
    "share_many_and_state_dicts": share_many_and_state_dicts,
    "share_ahead_after_a_block": share_ahead_after_a_block,
    "weight_sync_loop": weight_sync_loop,
}

if __name__ == "__main__":
    sys.exit(pyharness.main(__file__, CASES, needs="torch",
                            probes={"probe_torch_reducer_mempool", "probe_torch_reducer_pluggable"}))
