"""vpmm.torch with the backup keywords on a real GPU: a model's weights in
each backup store (pinned, mmap, disk) survive pause and resume; the mmap
store gives host memory back at resume; disk files stay constant over
cycles and go with the tensors; retained weights re-pause without a copy
(pause(unchanged=True)) and keep training. Exits 77 (meson: SKIP) without
torch or a CUDA device. Each case runs in its own process (pyharness)."""
import os
import sys
import tempfile

import pyharness

MiB = 1 << 20


def _setup():
    import torch
    import vpmm
    import vpmm.torch as vt
    torch.manual_seed(0)
    return torch, vpmm, vt


def _rss():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) << 10
    return 0


def weights_in_each_store():
    torch, vpmm, vt = _setup()
    pool = vt.default_pool()
    with tempfile.TemporaryDirectory(prefix="vpmm-torch-disk-") as d:
        models = {}
        for store in vpmm.BACKUP_STORES:
            kw = {"backup_dir": d} if store == "disk" else {}
            with vt.pool(tag="w_" + store, host_backup=True, backup_store=store, **kw):
                models[store] = torch.nn.Linear(2048, 2048, device="cuda")
        x = torch.randn(64, 2048, device="cuda")
        want = {s: m(x).detach().clone() for s, m in models.items()}
        footprint = None
        for _cycle in range(3):
            for store in vpmm.BACKUP_STORES:
                assert vt.pause("w_" + store)
            size = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))
            footprint = footprint or size
            assert size == footprint and size > 0, (size, footprint)
            assert pool.stats()["backup_mmap_bytes"] > 0
            for store in vpmm.BACKUP_STORES:
                assert vt.resume("w_" + store)
            for s, m in models.items():
                assert torch.equal(m(x), want[s]), s
        del models
        vt.empty_cache()
        # The files go with the segments PyTorch gives back; the library and
        # the file system agree on what is left either way.
        left = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))
        assert left == pool.stats()["backup_disk_bytes"], (left, pool.stats()["backup_disk_bytes"])
    print(f"3 stores x 3 cycles bit-exact; disk footprint constant at {footprint} bytes; "
          f"{left} bytes of files left after empty_cache")


def mmap_store_gives_host_memory_back():
    torch, vpmm, vt = _setup()
    with vt.pool(tag="big", host_backup=True, backup_store="mmap"):
        w = torch.full((1024 * MiB,), 3, dtype=torch.uint8, device="cuda")  # 1 GiB
    assert vt.pause("big") and vt.resume("big")  # the process's steady state first
    before = _rss()
    assert vt.pause("big")
    paused = _rss()
    assert vt.resume("big")
    after = _rss()
    assert paused >= before + 900 * MiB, (before, paused)
    assert abs(after - before) <= before // 10, (before, after)
    assert int(w[123457].item()) == 3
    print(f"VmRSS {before >> 20} MiB before, {paused >> 20} paused, {after >> 20} after the resume")


def retained_weights_repause_without_copy():
    torch, vpmm, vt = _setup()
    pool = vt.default_pool()
    with vt.pool(tag="frozen", host_backup=True, retain_backup=True):
        model = torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.ReLU(),
                                    torch.nn.Linear(1024, 1024)).cuda()
    x = torch.randn(32, 1024, device="cuda")
    want = model(x).detach().clone()
    assert vt.pause("frozen") and vt.resume("frozen")  # the backups are retained from here on
    t = model[0].weight
    host, n = pool.backup(t.data_ptr())  # the last pause's bytes, after the resume
    cpu = torch.frombuffer((__import__("ctypes").c_uint8 * (t.numel() * 4)).from_address(host),
                           dtype=torch.float32).view(t.shape)
    assert torch.equal(cpu, t.detach().cpu())
    skipped = pool.stats()["backup_skipped_bytes"]
    for _ in range(3):
        assert vt.pause("frozen", unchanged=True)
        assert vt.resume("frozen")
        assert torch.equal(model(x), want)
    assert pool.stats()["backup_skipped_bytes"] > skipped
    # A weight update: the next pause is not declared unchanged, and copies.
    with torch.no_grad():
        model[0].weight.add_(1.0)
    want2 = model(x).detach().clone()
    assert vt.pause("frozen") and vt.resume("frozen")
    assert torch.equal(model(x), want2)
    print("3 unchanged re-pauses without copies, then an update kept by a copying pause")


CASES = {f.__name__: f for f in (weights_in_each_store, mmap_store_gives_host_memory_back,
                                 retained_weights_repause_without_copy)}

if __name__ == "__main__":
    sys.exit(pyharness.main(__file__, CASES, needs="torch"))
