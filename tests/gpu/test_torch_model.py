"""A real PyTorch model under every libvpmm handle policy, checked against
PyTorch's own allocator: parameters copied in from pageable host memory
(model.cuda()), forward, backward and AdamW steps over changing shapes, a
large tensor round-tripped through pinned and pageable host memory; every
optimizer step marked on the pool (vpmm_pool_mark_step: one closed step per
step after the first, its driver time within its wall time). Each
configuration runs in its own process (the allocator is chosen once per
process); every vpmm run must reproduce the native run's losses and final
parameters.

Exits 77 (meson: SKIP) without torch or without a CUDA device."""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.join(HERE, "..", "..", "bench", "torch")
POLICIES = [("vpmm_default", None), ("vpmm_growth_handles", "unlimited"),
            ("vpmm_page_handles", "1p"), ("vpmm_cap_32MiB", "32M")]


def child(alloc):
    sys.path.insert(0, BENCH)
    import allocator
    allocator.choose(alloc)
    import torch
    import gpt
    torch.manual_seed(0)
    vocab = 4096
    model = gpt.GPT(vocab=vocab, d=512, layers=6, heads=8).cuda()  # pageable H2D copies
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    gen = torch.Generator(device="cuda").manual_seed(1)
    losses = []
    for batch, seq in gpt.SHAPES[:4] * 2:
        losses.append(gpt.train_step(model, opt, batch, seq // 2, vocab, gen).item())
    # A tensor across many handles: pinned -> device -> pageable and back.
    host = torch.arange(48 << 18, dtype=torch.float32).pin_memory()  # 48 MiB
    dev = host.to("cuda", non_blocking=True)
    twice = (dev * 2).cpu()
    round_trip_ok = bool(torch.equal(twice, host * 2))
    dev2 = twice.to("cuda")  # pageable H2D
    round_trip_ok &= bool(torch.equal(dev2.cpu(), host * 2))
    torch.cuda.synchronize()
    checksum = float(sum(p.detach().double().sum().item() for p in model.parameters()))
    out = {"losses": losses, "checksum": checksum, "round_trip_ok": round_trip_ok}
    if alloc == "vpmm":
        # use_as_allocator marks every optimizer step: the first opens a step,
        # each later one closes one, inside which the driver time lies.
        s = allocator_stats()
        out["steps_ok"] = (s["n_steps"] == len(losses) - 1 and s["last_step_ns"] >= s["last_step_driver_ns"] and
                           s["steps_ns"] >= s["steps_driver_ns"])
        out["steps"] = {k: s[k] for k in ("n_steps", "last_step_ns", "last_step_driver_ns", "steps_ns",
                                          "steps_driver_ns")}
    print(json.dumps(out))


def allocator_stats():
    import vpmm
    return vpmm.default_pool_stats()


def run(label, alloc, max_handle):
    env = dict(os.environ)
    env.pop("VPMM_MAX_HANDLE_SIZE", None)
    if max_handle:
        env["VPMM_MAX_HANDLE_SIZE"] = max_handle
    p = subprocess.run([sys.executable, __file__, "--child", alloc], env=env, capture_output=True,
                       text=True, timeout=300)
    if p.returncode != 0:
        return None, f"{label}: exit {p.returncode}\n{p.stderr[-3000:]}"
    return json.loads(p.stdout.strip().splitlines()[-1]), None


def close(a, b, rel=1e-3):
    return abs(a - b) <= rel * max(abs(a), abs(b), 1e-6)


def main():
    try:
        import torch
    except ImportError:
        print("SKIP: torch is not installed")
        return 77
    if not torch.cuda.is_available():
        print("SKIP: no CUDA device")
        return 77
    passed = failed = 0
    ref, err = run("native", "native", None)
    if err:
        print("FAIL native reference run:", err)
        return 1
    for label, mh in POLICIES:
        got, err = run(label, "vpmm", mh)
        ok = err is None and got["round_trip_ok"] and got.get("steps_ok") and \
            len(got["losses"]) == len(ref["losses"]) and \
            all(close(a, b) for a, b in zip(got["losses"], ref["losses"])) and \
            close(got["checksum"], ref["checksum"])
        if ok:
            passed += 1
            print(f"ok   {label}: losses and parameters match the native allocator "
                  f"(final loss {got['losses'][-1]:.5f}); optimizer steps marked: {json.dumps(got['steps'])}")
        else:
            failed += 1
            print(f"FAIL {label}: {err or json.dumps(got)[:2000]}\n     native: {json.dumps(ref)[:600]}")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        child(sys.argv[2])
    else:
        sys.exit(main())
