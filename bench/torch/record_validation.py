"""Records training snapshots that placement changes are checked against
beside the shipped traces (a policy tuned on one trace must hold on others):

  llama        Hugging Face LlamaForCausalLM (12 layers, d=1536), bf16
               weights, fused AdamW, eight batch/sequence shapes
  gpt2         Hugging Face GPT2LMHeadModel (GPT-2 small), fp32 weights,
               bf16 autocast, AdamW, varying shapes
  moe_small    bench/torch/moe.py at another size (8 layers, d=768, 16
               experts) with its own seed and the shapes in another order
  gpt_ckpt     bench/torch/gpt.py with every block recomputed
               (torch.utils.checkpoint), variable-length batches
  resnet       torchvision ResNet-50, channels-last, bf16 autocast, SGD,
               batch sizes 32-160
  gpt2_random  GPT-2 small as above, a new random batch (4-24) and sequence
               length (128-1024) at every step: a loop that never repeats
               its shapes exactly

  python3 bench/torch/record_validation.py OUTDIR [name ...]

Each runs three cycles over its shapes under PyTorch's native allocator
with memory history on and writes OUTDIR/NAME.pickle.gz (vpmm replay reads
it). Names whose packages are missing are skipped with a message."""
import gzip
import os
import pickle
import random
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt  # noqa: E402
import moe  # noqa: E402

out_dir = sys.argv[1]
names = sys.argv[2:] or ["llama", "gpt2", "moe_small", "gpt_ckpt", "resnet", "gpt2_random"]
os.makedirs(out_dir, exist_ok=True)
CYCLES = 3


def record(name, step_fns):
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    torch.cuda.memory._record_memory_history(max_entries=3_000_000, context=None)
    try:
        setup = step_fns()
        for _ in range(CYCLES):
            for step in setup:
                step()
        torch.cuda.synchronize()
        snap = torch.cuda.memory._snapshot()
    finally:
        torch.cuda.memory._record_memory_history(enabled=None)
    path = os.path.join(out_dir, name + ".pickle.gz")
    with gzip.open(path, "wb", compresslevel=9) as f:
        pickle.dump(snap, f)
    n = sum(len(t) for t in snap["device_traces"])
    print(f"{path}: {n} events, {os.path.getsize(path)} bytes, peak allocated "
          f"{torch.cuda.max_memory_allocated() / 2**30:.2f} GiB, peak reserved "
          f"{torch.cuda.max_memory_reserved() / 2**30:.2f} GiB", flush=True)


def lm_steps(model, opt, shapes, vocab, autocast):
    gen = torch.Generator(device="cuda").manual_seed(3)

    def one(batch, seq):
        def step():
            idx = torch.randint(0, vocab, (batch, seq), device="cuda", generator=gen)
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
                out = model(input_ids=idx, labels=idx)
            out.loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        return step
    return [one(b, s) for b, s in shapes]


def llama():
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(vocab_size=32000, hidden_size=1536, intermediate_size=4096, num_hidden_layers=12,
                      num_attention_heads=12, num_key_value_heads=12, max_position_embeddings=4096)
    model = LlamaForCausalLM(cfg).cuda().to(torch.bfloat16)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    shapes = [(8, 512), (2, 2048), (16, 256), (4, 1024), (1, 4096), (12, 384), (6, 768), (3, 1536)]
    return lm_steps(model, opt, shapes, 32000, autocast=False)


def gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel
    model = GPT2LMHeadModel(GPT2Config(n_positions=1024)).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    shapes = [(16, 512), (8, 1024), (32, 256), (12, 640), (24, 384), (6, 1024)]
    return lm_steps(model, opt, shapes, 50257, autocast=True)


def gpt2_random():
    from transformers import GPT2Config, GPT2LMHeadModel
    model = GPT2LMHeadModel(GPT2Config(n_positions=1024)).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    rng = random.Random(11)
    # Eight steps a cycle, each with shapes drawn afresh (record() runs the
    # list CYCLES times, so every step of every cycle draws its own).
    gen = torch.Generator(device="cuda").manual_seed(5)

    def step():
        batch, seq = rng.randint(4, 24), rng.randint(128, 1024)
        idx = torch.randint(0, 50257, (batch, seq), device="cuda", generator=gen)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = model(input_ids=idx, labels=idx)
        out.loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return [step] * 8


def moe_small():
    torch.manual_seed(5)
    model = moe.MoE(d=768, layers=8, experts=16, hidden=1536).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    gen = torch.Generator(device="cuda").manual_seed(9)
    shapes = list(moe.SHAPES)
    random.Random(4).shuffle(shapes)
    return [lambda b=b, s=s: moe.train_step(model, opt, b, s, 32000, gen) for b, s in shapes]


def gpt_ckpt():
    from torch.utils.checkpoint import checkpoint
    torch.manual_seed(0)
    model = gpt.GPT(d=1024, layers=16, heads=16).cuda()
    for blk in model.blocks:
        fwd = blk.forward
        blk.forward = lambda x, past=None, fwd=fwd: checkpoint(fwd, x, past, use_reentrant=False)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    gen = torch.Generator(device="cuda").manual_seed(1)
    return [lambda b=b, s=s: gpt.train_step(model, opt, b, s, 32000, gen) for b, s in gpt.VARLEN_SHAPES]


def resnet():
    import torchvision
    model = torchvision.models.resnet50().cuda().to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    def one(batch):
        def step():
            x = torch.randn(batch, 3, 224, 224, device="cuda").to(memory_format=torch.channels_last)
            y = torch.randint(0, 1000, (batch,), device="cuda")
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        return step
    return [one(b) for b in (64, 160, 32, 128, 96, 48)]


for name in names:
    try:
        record(name, globals()[name])
    except ImportError as e:
        print(f"{name}: skipped ({e})", flush=True)
