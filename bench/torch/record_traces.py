"""Records two real allocation traces as PyTorch memory snapshots (the pickle
of torch.cuda.memory._dump_snapshot, gzip-compressed), which `vpmm replay`
reads directly:

  training.pickle.gz   GPT-style model (16 layers, d=1024, AdamW, bf16
                       autocast), model creation and two rounds over six
                       batch/sequence shapes
  inference.pickle.gz  a serving pattern: bf16 weights, waves of requests of
                       variable batch size and prompt length, a KV cache that
                       grows by concatenation every decode step
  moe_training.pickle.gz  the hard client's model (bench/torch/moe.py: mixture
                       of experts with uneven routing, recompute, pinned
                       offload, side-stream gathers, eight shapes), model
                       creation and three cycles over the eight shapes

  python3 bench/torch/record_traces.py OUTDIR [training|inference|moe_training ...]

The native caching allocator serves the run (its segment events give
PyTorch's own reserved bytes, which the replay prints beside libvpmm's)."""
import gzip
import os
import pickle
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt  # noqa: E402
import moe  # noqa: E402

out_dir = sys.argv[1]
which = sys.argv[2:] or ["training", "inference"]
os.makedirs(out_dir, exist_ok=True)


def start():
    torch.cuda.memory._record_memory_history(max_entries=2_000_000, context=None, stacks="python")


def stop(name):
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    path = os.path.join(out_dir, name + ".pickle.gz")
    with gzip.open(path, "wb", compresslevel=9) as f:
        pickle.dump(snap, f)
    n = sum(len(t) for t in snap["device_traces"])
    print(f"{path}: {n} events, {os.path.getsize(path)} bytes, "
          f"peak allocated {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB, "
          f"peak reserved {torch.cuda.max_memory_reserved() / 2**30:.2f} GiB")
    for k in snap:
        print(f"  key {k}: {type(snap[k]).__name__}")
    if snap["device_traces"] and snap["device_traces"][0]:
        print("  first event:", {k: v for k, v in snap["device_traces"][0][0].items() if k != "frames"})


def training():
    torch.manual_seed(0)
    start()
    vocab = 32000
    model = gpt.GPT(vocab=vocab, d=1024, layers=16, heads=16).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    gen = torch.Generator(device="cuda").manual_seed(1)
    for _ in range(2):
        for batch, seq in gpt.SHAPES:
            gpt.train_step(model, opt, batch, seq, vocab, gen)
    torch.cuda.synchronize()
    stop("training")
    del model, opt
    torch.cuda.empty_cache()


@torch.no_grad()
def inference():
    torch.manual_seed(0)
    torch.cuda.reset_peak_memory_stats()
    start()
    vocab = 32000
    model = gpt.GPT(vocab=vocab, d=1024, layers=16, heads=16, max_seq=4096).cuda().to(torch.bfloat16).eval()
    gpt.serve_waves(model, vocab)
    torch.cuda.synchronize()
    stop("inference")


def moe_training(cycles=3):
    torch.manual_seed(0)
    torch.cuda.reset_peak_memory_stats()
    start()
    vocab = 32000
    model = moe.MoE(vocab=vocab).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    gen = torch.Generator(device="cuda").manual_seed(1)
    for _ in range(cycles):
        for batch, seq in moe.SHAPES:
            moe.train_step(model, opt, batch, seq, vocab, gen)
    torch.cuda.synchronize()
    stop("moe_training")
    del model, opt
    torch.cuda.empty_cache()


for w in which:
    {"training": training, "inference": inference, "moe_training": moe_training}[w]()
