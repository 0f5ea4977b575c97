"""The torch_memory_saver drop-in (bindings/python/compat) on a real GPU:
an RL-style sleep/wake loop (generate with the rollout model and its KV
cache, pause both, train a separate trainer, resume, load the new weights,
generate again), get_cpu_backup, disable(), cuda_graph, the memory margin,
an out-of-memory resume that raises and can be retried, nested regions,
retained backups and mmap backups (or their clear refusal where vpmm has no
backup stores), all in hook mode "torch" (test_tms_preload.py: "preload").
Code is written the way torch_memory_saver users write it. Exits 77 without
torch or a CUDA device."""
import sys

import pyharness

MiB = 1 << 20
GiB = 1 << 30


def rl_sleep_wake_loop():
    import torch
    from torch_memory_saver import torch_memory_saver
    import gpt
    torch_memory_saver.hook_mode = "torch"
    assert torch_memory_saver.enabled
    vocab, d = 2048, 256
    torch.manual_seed(0)
    with torch_memory_saver.region(tag="weights", enable_cpu_backup=True):
        rollout = gpt.GPT(vocab=vocab, d=d, layers=2, heads=4).cuda()
    with torch_memory_saver.region(tag="kv_cache"):
        kv = torch.zeros((64, 1024, d), device="cuda")  # 64 MiB, no backup: refilled each rollout
    trainer = gpt.GPT(vocab=vocab, d=d, layers=2, heads=4).cuda()  # PyTorch's own allocator
    trainer.load_state_dict(rollout.state_dict())
    opt = torch.optim.AdamW(trainer.parameters(), lr=1e-3)
    gen = torch.Generator(device="cuda").manual_seed(3)
    import vpmm
    pool = vpmm.default_pool(torch.cuda.current_device())
    for it in range(3):
        # generate
        with torch.no_grad():
            idx = torch.randint(0, vocab, (4, 64), device="cuda", generator=gen)
            logits, _past = rollout(idx)
            kv[:4, :64].copy_(logits[..., :d].float())  # the "cache" the rollout fills
            sample = logits.argmax(-1)
        torch.cuda.synchronize()
        before = {n: p.detach().clone() for n, p in rollout.named_parameters()}
        # sleep: release the rollout engine's memory
        free0, _ = torch.cuda.mem_get_info()
        torch_memory_saver.pause("kv_cache")
        torch_memory_saver.pause("weights")
        free1, _ = torch.cuda.mem_get_info()
        assert free1 - free0 >= 48 * MiB, f"pause freed only {(free1 - free0) / MiB:.1f} MiB"
        backup = torch_memory_saver.get_cpu_backup(rollout.head.weight)
        assert backup is not None and torch.equal(backup, before["head.weight"].cpu())
        assert torch_memory_saver.get_cpu_backup(kv) is None  # no backup for the KV cache
        # train
        loss = gpt.train_step(trainer, opt, 4, 64, vocab, gen)
        assert loss.item() == loss.item()
        # wake: resume, then load the trained weights
        torch_memory_saver.resume("weights")
        torch_memory_saver.resume("kv_cache")
        for n, p in rollout.named_parameters():
            assert torch.equal(p.detach(), before[n]), f"iteration {it}: {n} changed while asleep"
        with torch.no_grad():
            for (n, p), q in zip(rollout.named_parameters(), trainer.parameters()):
                p.copy_(q)
        kv.zero_()
        assert pool.tag_stats("weights")["n_paused"] == 0
        del sample
    print(f"3 generate/pause/train/resume iterations; last loss {loss.item():.3f}")


def disable_and_cuda_graph():
    import torch
    import vpmm
    from torch_memory_saver import torch_memory_saver
    pool = vpmm.default_pool(torch.cuda.current_device())
    with torch_memory_saver.region():
        inside = torch.ones(4 * MiB, device="cuda")
        with torch_memory_saver.disable():
            outside = torch.ones(4 * MiB, device="cuda")
    pool.lookup(inside.data_ptr())
    try:
        pool.lookup(outside.data_ptr())
        raise AssertionError("a tensor made under disable() came from libvpmm")
    except vpmm.UnknownPointer:
        pass
    try:
        with torch_memory_saver.disable():
            pass
        raise AssertionError("disable() outside a region was accepted")
    except RuntimeError:
        pass
    with torch_memory_saver.region(tag="graph_in", enable_cpu_backup=True):
        static_in = torch.zeros(1 << 20, device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        (static_in * 2 + 1).sum()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch_memory_saver.cuda_graph(g, tag="graph_mem"):
        static_out = static_in * 2 + 1
    pool.lookup(static_out.data_ptr())
    static_in.fill_(1)
    g.replay()
    assert float(static_out.sum().item()) == 3.0 * (1 << 20)
    torch_memory_saver.pause()
    torch_memory_saver.resume()
    static_in.fill_(2)
    g.replay()
    assert float(static_out.sum().item()) == 5.0 * (1 << 20)
    print("disable() bypasses libvpmm; a graph captured with cuda_graph() replays after pause/resume")


def resume_oom_is_an_exception():
    import torch
    import vpmm
    from torch_memory_saver import torch_memory_saver
    n = 2048 * MiB
    with torch_memory_saver.region(tag="big", enable_cpu_backup=True):
        big = torch.full((n,), 4, dtype=torch.uint8, device="cuda")
    torch_memory_saver.pause("big")
    torch_memory_saver.memory_margin_bytes = 1 << 50  # more than any GPU: resume must refuse up front
    try:
        torch_memory_saver.resume("big")
        raise AssertionError("resume ignored memory_margin_bytes")
    except vpmm.OutOfMemory as e:
        assert "memory_margin_bytes" in str(e)
    torch_memory_saver.memory_margin_bytes = 0
    free, _ = torch.cuda.mem_get_info()
    filler = torch.empty(max(free - n // 2, 1), dtype=torch.uint8, device="cuda")
    try:
        torch_memory_saver.resume("big")
        raise AssertionError("resume succeeded without the memory for it")
    except MemoryError as e:  # vpmm.OutOfMemory: the process lives on
        print(f"resume raised {type(e).__name__}: {str(e)[:120]}")
    del filler
    torch.cuda.empty_cache()
    torch_memory_saver.resume("big")
    assert int(big[:MiB].sum().item()) == 4 * MiB and int(big[-MiB:].sum().item()) == 4 * MiB
    print("OOM on resume raised; the retry restored the bytes")


def hook_mode_and_retain_flags():
    import os
    import torch
    import vpmm
    from torch_memory_saver import torch_memory_saver, configure_subprocess
    assert torch_memory_saver.hook_mode == "torch"  # not under libvpmm_preload.so
    torch_memory_saver.hook_mode = "preload"  # without the interposer: MemPool routing, with a warning
    assert torch_memory_saver.hook_mode == "preload"
    try:
        torch_memory_saver.hook_mode = "bogus"
        raise AssertionError("an unknown hook_mode was accepted")
    except ValueError:
        pass
    with torch_memory_saver.region(tag="r", enable_cpu_backup=True):
        r = torch.full((4 * MiB,), 6, dtype=torch.uint8, device="cuda")
    vpmm.default_pool(0).lookup(r.data_ptr())  # routed through the MemPool all the same
    assert torch_memory_saver.retain_cpu_backup is False
    torch_memory_saver.retain_cpu_backup = True
    assert torch_memory_saver.retain_cpu_backup is True
    torch_memory_saver.pause("r")
    try:
        torch_memory_saver.resume("r")  # the backup survives the resume (libvpmm's retained backups)
        assert torch_memory_saver.get_cpu_backup(r) is not None, "retained backup gone after resume"
    except NotImplementedError as e:  # a vpmm without retained backups: refused, nothing resumed
        assert "retain_cpu_backup" in str(e), e
        assert vpmm.default_pool(0).tag_stats("r")["n_paused"] >= 1
        torch_memory_saver.retain_cpu_backup = False
        torch_memory_saver.resume("r")
    assert int(r[::MiB].sum().item()) == 6 * 4
    before = os.environ.get("LD_PRELOAD")
    with configure_subprocess():
        assert os.environ["LD_PRELOAD"].split(":")[0].endswith("libvpmm_preload.so")
        assert os.path.samefile(os.environ["VPMM_LIBRARY"], vpmm.library_path())
    assert os.environ.get("LD_PRELOAD") == before
    print("hook_mode, retain_cpu_backup and configure_subprocess behave as documented")


def nested_regions_and_disable():
    # Hook mode "torch": regions nest (the innermost tag wins), disable()
    # inside them is plain PyTorch memory, given back to the device once the
    # block ended and its tensors are gone.
    import torch
    import vpmm
    from torch_memory_saver import torch_memory_saver
    pool = vpmm.default_pool(0)
    with torch_memory_saver.region(tag="outer", enable_cpu_backup=True):
        a = torch.full((8 * MiB,), 1, dtype=torch.uint8, device="cuda")
        with torch_memory_saver.region(tag="inner"):
            b = torch.full((8 * MiB,), 2, dtype=torch.uint8, device="cuda")
        c = torch.full((8 * MiB,), 3, dtype=torch.uint8, device="cuda")
        torch.cuda.synchronize()
        free0, _ = torch.cuda.mem_get_info()
        with torch_memory_saver.disable():
            d = torch.ones((GiB // 4,), device="cuda")  # 1 GiB of PyTorch's own memory
            try:
                pool.lookup(d.data_ptr())
                raise AssertionError("a disable() tensor came from libvpmm")
            except vpmm.UnknownPointer:
                pass
            del d
    torch.cuda.synchronize()
    free1, _ = torch.cuda.mem_get_info()
    assert free0 - free1 <= 16 * MiB, f"disable() kept {(free0 - free1) / MiB:.0f} MiB"
    assert pool.tag_stats("outer")["live_bytes"] >= 16 * MiB and pool.tag_stats("inner")["live_bytes"] >= 8 * MiB
    torch_memory_saver.pause("outer")
    assert int(b[::MiB].sum().item()) == 2 * 8  # inner is not paused with outer
    torch_memory_saver.resume("outer")
    assert int(a[::MiB].sum().item()) == 8 and int(c[::MiB].sum().item()) == 3 * 8
    print(f"nested tags kept apart; disable() left {(free0 - free1) / MiB:.1f} MiB")


def rss_after_mmap_resume():
    import sys
    sys.path.insert(0, __import__("os").path.dirname(__file__))
    import test_tms_preload
    test_tms_preload.rss_after_mmap_resume_in("torch")


def pin_ahead_extension():
    # VPMM_TMS_PIN_AHEAD=1: unchanged TMS code gets its backups pinned when the
    # region ends, and the first pause pins nothing.
    import os
    os.environ["VPMM_TMS_PIN_AHEAD"] = "1"
    import torch
    import vpmm.torch as vt
    from torch_memory_saver import torch_memory_saver
    with torch_memory_saver.region(tag="weights", enable_cpu_backup=True):
        w = torch.full((32 * MiB,), 3.0, device="cuda")  # 128 MiB
    assert "weights" in vt.pinning_ahead, "the region did not start pinning ahead"
    pinned_ahead = vt.pinning_ahead["weights"].result(timeout=120)
    pool = vt.default_pool()
    assert pinned_ahead >= pool.tag_stats("weights")["live_bytes"]
    pinned = pool.stats()["backup_pinned_bytes"]
    torch_memory_saver.pause("weights")
    assert pool.stats()["backup_pinned_bytes"] == pinned, "the first pause pinned again"
    torch_memory_saver.resume("weights")
    assert float(w[::1024].sum().item()) == 3.0 * (32 * MiB // 1024)
    print(f"{pinned_ahead / MiB:.0f} MiB pinned when the region ended; the first pause pinned nothing")


CASES = {f.__name__: f for f in (rl_sleep_wake_loop, disable_and_cuda_graph, resume_oom_is_an_exception,
                                 hook_mode_and_retain_flags, nested_regions_and_disable,
                                 rss_after_mmap_resume, pin_ahead_extension)}

if __name__ == "__main__":
    sys.exit(pyharness.main(__file__, CASES, needs="torch"))
