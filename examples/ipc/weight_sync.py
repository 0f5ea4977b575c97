"""A colocated RL loop in two processes on one GPU, sharing weights the way
docs/ipc.md recommends: the trainer's parameters live in a libvpmm pool
(vpmm.torch.pool), each sync sends vpmm.torch.share() handles through a
torch.multiprocessing queue, and the rollout process opens them, copies
them into its own model and closes them. Between phases each side pauses
its tag, so the GPU holds one side's memory at a time.

    VPMM_EXPORTABLE=1 PYTHONPATH=bindings/python VPMM_LIBRARY=build/libvpmm.so.1 \\
        python3 examples/ipc/weight_sync.py --steps 5 --width 4096

Per step it prints the trainer's step, the sync (share, open + copy + close
in the rollout) and the memory each side holds, and checks that the rollout's
weights equal the trainer's after every sync.
"""
import argparse
import os
import time

os.environ.setdefault("VPMM_EXPORTABLE", "1")  # before the default pools exist

import torch  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

import vpmm.torch as vt  # noqa: E402

GiB = 1 << 30


def make_model(width, layers):
    return torch.nn.Sequential(*[torch.nn.Linear(width, width, bias=True) for _ in range(layers)])


def checksum(model):
    return sum(p.detach().double().sum().item() for p in model.parameters())


def rollout(args, inbox, outbox):
    """The rollout engine: its own model in its own tag, paused while the trainer trains."""
    torch.cuda.set_device(0)
    with vt.pool("rollout"):
        model = make_model(args.width, args.layers).cuda()
    params = list(model.parameters())
    outbox.put("ready")
    while True:
        msg = inbox.get()
        if msg is None:
            break
        vt.resume("rollout")
        t0 = time.perf_counter()
        # Open everything (tensors of one allocation share one import), copy,
        # wait once, close everything: the trainer may pause right after.
        opened = [vt.open(shared) for shared in msg["weights"]]
        with torch.no_grad():
            for p, w in zip(params, opened):
                p.copy_(w)
        torch.cuda.synchronize()
        for w in opened:
            vt.close(w)
        del opened
        sync = time.perf_counter() - t0
        with torch.no_grad():                  # "generate"
            x = torch.randn(args.batch, args.width, device="cuda")
            y = model(x)
        torch.cuda.synchronize()
        outbox.put({"sync_s": sync, "checksum": checksum(model), "out": y.float().norm().item()})
        vt.pause("rollout")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--width", type=int, default=4096)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--batch", type=int, default=64)
    args = ap.parse_args()
    torch.cuda.set_device(0)
    ctx = mp.get_context("spawn")
    inbox, outbox = ctx.Queue(), ctx.Queue()
    child = ctx.Process(target=rollout, args=(args, inbox, outbox))
    child.start()
    assert outbox.get(timeout=300) == "ready"

    with vt.pool("train", host_backup=True):   # weights and optimizer state: pausable, kept on pause
        model = make_model(args.width, args.layers).cuda()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    nbytes = sum(p.numel() * p.element_size() for p in model.parameters())
    print(f"model: {nbytes / GiB:.2f} GiB of weights in {len(list(model.parameters()))} tensors")
    for step in range(args.steps):
        if step:
            vt.resume("train")
        t0 = time.perf_counter()
        with vt.pool("train", host_backup=True):  # optimizer state made on the first step is tagged too
            x = torch.randn(args.batch, args.width, device="cuda")
            loss = model(x).float().pow(2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        train_s = time.perf_counter() - t0
        t1 = time.perf_counter()
        handles = [vt.share(p.detach()) for p in model.parameters()]
        inbox.put({"weights": handles})
        r = outbox.get(timeout=300)
        total_s = time.perf_counter() - t1
        want = checksum(model)
        same = abs(r["checksum"] - want) <= 1e-6 * max(1.0, abs(want))
        vt.release_shared()          # the rollout closed every opening: nothing left to keep
        vt.pause("train")            # the trainer's memory goes back to the driver until next step
        free = torch.cuda.mem_get_info()[0]
        print(f"step {step}: train {train_s * 1e3:.1f} ms, sync {total_s * 1e3:.1f} ms "
              f"(rollout open+copy {r['sync_s'] * 1e3:.1f} ms, {nbytes / r['sync_s'] / 1e9:.0f} GB/s), "
              f"weights equal: {same}, device free after pause {free / GiB:.1f} GiB")
        if not same:
            raise SystemExit("the rollout's weights differ from the trainer's")
    inbox.put(None)
    child.join(60)


if __name__ == "__main__":
    main()
