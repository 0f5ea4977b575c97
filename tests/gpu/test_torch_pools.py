"""vpmm.torch on a real GPU: partial routing through torch.cuda.MemPool,
pausing a real model's weights with backups (training continues), backups
pinned ahead in the background (pool(pin_ahead=True)), a
KV-cache-like buffer without backup, CUDA graphs replayed after pause and
resume, an out-of-memory resume recovered from Python, the global
allocator with tags, and Tensor.record_stream under the global allocator.
Exits 77 (meson: SKIP) without torch or a CUDA device. Each case runs in
its own process (pyharness)."""
import sys

import pyharness

MiB = 1 << 20


def _setup():
    import torch
    import vpmm
    import vpmm.torch as vt
    torch.manual_seed(0)
    return torch, vpmm, vt


def _owned_by_vpmm(pool, t):
    import vpmm
    try:
        base, size = pool.lookup(t.data_ptr())
    except vpmm.UnknownPointer:
        return False
    return base <= t.data_ptr() and t.data_ptr() + t.numel() * t.element_size() <= base + size


def partial_routing():
    torch, vpmm, vt = _setup()
    pool = vt.default_pool()
    before = torch.empty(8 * MiB, dtype=torch.uint8, device="cuda")
    with vt.pool(tag="routed") as mp:
        assert mp is not None, "MemPool routing expected (use_as_allocator was not called)"
        inside = [torch.full((n,), 7, dtype=torch.uint8, device="cuda") for n in (4 * MiB, 30 * MiB, 1000)]
    after = torch.empty(8 * MiB, dtype=torch.uint8, device="cuda")
    assert not _owned_by_vpmm(pool, before), "a tensor made before the block came from libvpmm"
    assert not _owned_by_vpmm(pool, after), "a tensor made after the block came from libvpmm"
    for t in inside:
        assert _owned_by_vpmm(pool, t), f"tensor of {t.numel()} bytes inside the block is not libvpmm memory"
    ts = pool.tag_stats("routed")
    assert ts["n_live"] >= 1 and ts["live_bytes"] >= 34 * MiB, ts
    st = vt.memory_stats()
    assert st["reserved_bytes.all.current"] == pool.stats()["mapped_bytes"] > 0, st
    assert st["vpmm.live_bytes"] >= 34 * MiB
    # Another thread's allocations are not routed (the documented thread rule).
    import threading
    other = {}
    with vt.pool(tag="routed"):
        th = threading.Thread(target=lambda: other.setdefault("t", torch.ones(4 * MiB, dtype=torch.uint8,
                                                                                device="cuda")))
        th.start()
        th.join()
    assert not _owned_by_vpmm(pool, other["t"]), "another thread's tensor was routed"
    # Freed blocks stay cached in the MemPool; empty_cache gives them back
    # (it drops the MemPool, so no reference to it may be kept here).
    del inside, mp, t  # t: the loop variable above still holds the last tensor
    vt.empty_cache()
    assert pool.tag_stats("routed")["n_live"] == 0, pool.tag_stats("routed")
    assert pool.stats()["free_bytes"] == 0
    assert vt.pause("routed") is False  # nothing left to pause: no error
    print("tensors inside the block are libvpmm's, the others PyTorch's")


def model_weights_backup_training_continues():
    torch, vpmm, vt = _setup()
    import gpt
    vocab = 4096
    with vt.pool(tag="weights", host_backup=True):
        model = gpt.GPT(vocab=vocab, d=512, layers=4, heads=8).cuda()
    pool = vt.default_pool()
    for name, p in model.named_parameters():
        assert _owned_by_vpmm(pool, p), f"parameter {name} is not in libvpmm"
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    gen = torch.Generator(device="cuda").manual_seed(1)
    losses = [gpt.train_step(model, opt, 4, 256, vocab, gen).item() for _ in range(3)]
    snap = {n: p.detach().clone().cpu() for n, p in model.named_parameters()}
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    mapped = pool.stats()["mapped_bytes"]
    free_before, _ = torch.cuda.mem_get_info()
    assert vt.pause("weights") is True
    ts = pool.tag_stats("weights")
    assert ts["n_live"] == 0 and ts["paused_bytes"] >= weight_bytes, (ts, weight_bytes)
    assert ts["backup_bytes"] >= weight_bytes, ts
    assert pool.stats()["mapped_bytes"] <= mapped - weight_bytes, "pause did not release the weights"
    free_paused, _ = torch.cuda.mem_get_info()
    assert free_paused >= free_before + weight_bytes // 2, (free_before, free_paused, weight_bytes)
    assert vt.pause("weights") is False
    assert vt.resume("weights") is True
    for n, p in model.named_parameters():
        assert torch.equal(p.detach().cpu(), snap[n]), f"parameter {n} changed across pause/resume"
    losses += [gpt.train_step(model, opt, 4, 256, vocab, gen).item() for _ in range(6)]
    assert all(l == l and l < 20 for l in losses), losses  # finite
    moved = any(not torch.equal(p.detach().cpu(), snap[n]) for n, p in model.named_parameters())
    assert moved, "training after resume did not update the weights"
    print(f"{weight_bytes / MiB:.1f} MiB of weights paused with backup, bytes equal after resume; "
          f"losses {losses[0]:.3f} -> {losses[-1]:.3f}")


def weights_pinned_ahead_in_background():
    # pool(pin_ahead=True): the backups are pinned on a background thread when
    # the block ends while the GPU keeps working; the pause then pins nothing.
    torch, vpmm, vt = _setup()
    with vt.pool(tag="ahead", host_backup=True, pin_ahead=True):
        ws = [torch.full((16 * MiB,), float(i), device="cuda") for i in range(4)]  # 4 x 64 MiB
    fut = vt.pinning_ahead["ahead"]
    x = torch.randn(2048, 2048, device="cuda")
    steps = 0
    while not fut.done():
        x = (x @ x).tanh()
        torch.cuda.synchronize()
        steps += 1
    pool = vt.default_pool()
    live = pool.tag_stats("ahead")["live_bytes"]
    assert fut.result() >= live, (fut.result(), live)
    st = pool.stats()
    pinned = st["backup_pinned_bytes"]
    assert st["backup_cache_bytes"] >= live, st
    assert vt.pause("ahead") is True
    st = pool.stats()
    assert st["backup_pinned_bytes"] == pinned, ("the pause pinned again", pinned, st["backup_pinned_bytes"])
    assert vt.resume("ahead") is True
    for i, w in enumerate(ws):
        assert float(w[::4096].sum().item()) == float(i) * (16 * MiB // 4096), f"tensor {i} changed"
    print(f"{live / MiB:.0f} MiB pinned ahead in the background ({steps} GPU steps meanwhile); "
          f"the pause took the pinned buffers, bytes equal after resume")


def kv_cache_without_backup():
    torch, vpmm, vt = _setup()
    pool = vt.default_pool()
    n = 512 * MiB
    with vt.pool(tag="kv"):
        kv = torch.empty(n, dtype=torch.uint8, device="cuda")
    kv.fill_(3)
    addr = kv.data_ptr()
    free0, _ = torch.cuda.mem_get_info()
    assert vt.pause("kv")
    free1, _ = torch.cuda.mem_get_info()
    ts = pool.tag_stats("kv")
    assert ts["paused_bytes"] >= n and ts["backup_bytes"] == 0, ts
    assert free1 - free0 >= n - 64 * MiB, f"only {(free1 - free0) / MiB:.0f} MiB came back"
    # The freed memory is usable by PyTorch while the cache sleeps.
    other = torch.ones(n // 2, dtype=torch.uint8, device="cuda")
    assert int(other.sum().item()) == n // 2
    del other
    torch.cuda.empty_cache()
    assert vt.resume("kv")
    assert kv.data_ptr() == addr
    kv.fill_(5)  # contents are undefined after a resume without backup: refill
    assert int(kv[:MiB].sum().item()) == 5 * MiB
    print(f"{n / MiB:.0f} MiB KV buffer paused without backup, {(free1 - free0) / MiB:.0f} MiB returned")


def cuda_graph_pause_resume_replay():
    torch, vpmm, vt = _setup()
    pool = vt.default_pool()
    n = 1 << 22
    with vt.pool(tag="graph", host_backup=True):
        static_in = torch.zeros(n, device="cuda")
        weight = torch.randn(n, device="cuda")

    def step():
        return torch.sin(static_in) * weight + 1.0

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # warm-up, as torch.cuda.graph requires
        for _ in range(2):
            step()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with vt.graph(g, tag="graph", host_backup=True):
        static_out = step()
    assert _owned_by_vpmm(pool, static_out), "memory allocated during capture is not libvpmm's"
    x = torch.randn(n, device="cuda")
    static_in.copy_(x)
    g.replay()
    torch.testing.assert_close(static_out, torch.sin(x) * weight + 1.0)
    w_snap = weight.clone()
    assert vt.pause("graph")
    assert pool.tag_stats("graph")["n_live"] == 0
    assert vt.resume("graph")
    torch.testing.assert_close(weight, w_snap, rtol=0, atol=0)
    x2 = torch.randn(n, device="cuda")
    static_in.copy_(x2)
    g.replay()
    torch.testing.assert_close(static_out, torch.sin(x2) * weight + 1.0)
    # And once more, pausing the graph's own buffers while something else runs.
    vt.pause("graph")
    tmp = torch.ones(64 * MiB, device="cuda").sum()
    vt.resume("graph")
    static_in.copy_(x)
    g.replay()
    torch.testing.assert_close(static_out, torch.sin(x) * weight + 1.0)
    assert tmp.item() == 64 * MiB
    print("graph captured over libvpmm memory replays correctly after two pause/resume cycles")


def resume_oom_recovered():
    torch, vpmm, vt = _setup()
    pool = vt.default_pool()
    n = 2048 * MiB
    with vt.pool(tag="big", host_backup=True):
        big = torch.empty(n, dtype=torch.uint8, device="cuda")
    big[:MiB].fill_(9)
    big[-MiB:].fill_(11)
    assert vt.pause("big")
    free, _ = torch.cuda.mem_get_info()
    filler = torch.empty(max(free - n // 2, 1), dtype=torch.uint8, device="cuda")  # leave < n free
    try:
        vt.resume("big")
    except vpmm.OutOfMemory as e:
        assert isinstance(e, MemoryError) and e.name == "VPMM_ERR_OUT_OF_MEMORY", e
        print(f"resume refused: {e}")
    else:
        raise AssertionError("resume succeeded with less free memory than the paused bytes")
    ts = pool.tag_stats("big")
    assert ts["n_paused"] >= 1 and ts["backup_bytes"] >= n, ts  # still paused, backup intact
    del filler
    torch.cuda.empty_cache()
    assert vt.resume("big") is True  # the retry succeeds
    assert int(big[:MiB].sum().item()) == 9 * MiB and int(big[-MiB:].sum().item()) == 11 * MiB
    print("resume OOM raised vpmm.OutOfMemory; retried after freeing memory, bytes intact")


def global_allocator_with_tags():
    import torch
    import vpmm
    vpmm.use_as_torch_allocator()  # the old name, an alias of vpmm.torch.use_as_allocator
    import vpmm.torch as vt
    assert vt.is_global()
    pool = vt.default_pool()
    a = torch.ones(4 * MiB, device="cuda")
    assert _owned_by_vpmm(pool, a), "use_as_allocator did not route an ordinary tensor"
    with vt.pool(tag="g", host_backup=True) as mp:
        assert mp is None
        w = torch.full((8 * MiB,), 2.0, device="cuda")
    assert pool.tag_stats("g")["n_live"] >= 1
    assert vt.pause("g") and vt.resume("g")
    assert float(w.sum().item()) == 16.0 * MiB
    assert float(a.sum().item()) == 4.0 * MiB
    print("global allocator: every tensor in libvpmm, tags from vpmm.torch.pool")


def record_stream_under_global_allocator():
    """A tensor read on a side stream (record_stream), dropped while that
    read is still queued behind a long kernel, and a new tensor of the same
    size filled on the main stream at once: the side stream must still read
    the old bytes. Without vpmm_torch_record_stream PyTorch's pluggable
    allocator drops the record and the new tensor could take the memory
    before the side stream's read runs."""
    import torch
    import vpmm.torch as vt
    vt.use_as_allocator()
    assert vt.record_stream_supported, "this PyTorch's pluggable allocator took no record_stream function"
    main = torch.cuda.current_stream()
    side = torch.cuda.Stream()
    n = 64 * MiB
    x = torch.ones(n, dtype=torch.uint8, device="cuda")
    side.wait_stream(main)
    with torch.cuda.stream(side):
        torch.cuda._sleep(300_000_000)  # ~0.15 s: the side stream's read stays queued
        total = x.sum(dtype=torch.int64)
    x.record_stream(side)
    del x  # PyTorch frees it on main, where it was made
    y = torch.full((n,), 7, dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize()
    assert int(total.item()) == n, f"the side stream read {int(total.item())}, not {n}: memory reused early"
    assert int(y[:MiB].sum().item()) == 7 * MiB
    print("record_stream: the side stream's queued read saw the old bytes")


CASES = {f.__name__: f for f in (partial_routing, model_weights_backup_training_continues,
                                 weights_pinned_ahead_in_background,
                                 kv_cache_without_backup, cuda_graph_pause_resume_replay,
                                 resume_oom_recovered, global_allocator_with_tags,
                                 record_stream_under_global_allocator)}

if __name__ == "__main__":
    sys.exit(pyharness.main(__file__, CASES, needs="torch"))
