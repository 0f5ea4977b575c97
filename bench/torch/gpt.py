"""A GPT-style decoder in plain PyTorch, shared by the live training client,
the trace recorder and the GPU model test. Nothing here depends on libvpmm:
which allocator serves the tensors is decided by the caller before the first
CUDA allocation."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.up = nn.Linear(d, 4 * d)
        self.down = nn.Linear(4 * d, d)

    def attend(self, x, past=None):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        shape = (b, t, self.heads, d // self.heads)
        q, k, v = (z.view(shape).transpose(1, 2) for z in (q, k, v))
        if past is not None:
            # A growing KV cache, the way simple serving code keeps one: every
            # decode step concatenates, so every step reallocates the cache.
            k = torch.cat([past[0], k], dim=2)
            v = torch.cat([past[1], v], dim=2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=past is None)
        return self.proj(y.transpose(1, 2).reshape(b, t, d)), (k, v)

    def forward(self, x, past=None):
        a, kv = self.attend(x, past)
        x = x + a
        x = x + self.down(F.gelu(self.up(self.ln2(x))))
        return x, kv


class GPT(nn.Module):
    def __init__(self, vocab=32000, d=1024, layers=16, heads=16, max_seq=2048):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(max_seq, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.normal_(p, std=0.02 / math.sqrt(2 * layers))

    def forward(self, idx, past=None, start=0):
        t = idx.shape[1]
        pos = torch.arange(start, start + t, device=idx.device)
        x = self.tok(idx) + self.pos(pos)
        new_past = []
        for i, blk in enumerate(self.blocks):
            x, kv = blk(x, None if past is None else past[i])
            new_past.append(kv)
        return self.head(self.ln(x)), new_past


# Six (batch, sequence) shapes in turn: what a training job with bucketed
# sequence lengths does, and what defeats an allocator that caches by size.
SHAPES = [(8, 512), (4, 1024), (16, 256), (2, 2048), (6, 768), (12, 384)]
# Variable-length batches (dynamic batching by token budget): 2K-12K tokens
# a step, in an order with no pattern, so the largest activations come and
# go and a segment-growing allocator keeps blocks sized for steps past.
VARLEN_SHAPES = [(8, 256), (24, 512), (4, 2048), (12, 1024), (16, 256), (6, 2048), (32, 256), (2, 1024)]


def train_step(model, opt, batch, seq, vocab, gen, device="cuda"):
    idx = torch.randint(0, vocab, (batch, seq), device=device, generator=gen)
    tgt = torch.randint(0, vocab, (batch, seq), device=device, generator=gen)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits, _ = model(idx)
        loss = F.cross_entropy(logits.float().view(-1, logits.shape[-1]), tgt.view(-1))
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss


@torch.no_grad()
def serve_waves(model, vocab, waves=14, seed=7, batch_scale=1, on_wave=None):
    """The serving pattern of the inference trace: waves of requests of
    variable batch size, prompt length and generation length; prefill, then
    one decode step at a time with a KV cache that grows by concatenation.
    on_wave(wave, batch, prompt, gen_len, seconds) is called after each wave."""
    for wave, (batch, prompt, gen_len) in enumerate(wave_specs(waves, seed, batch_scale)):
        seconds = run_wave(model, vocab, batch, prompt, gen_len, timed=on_wave is not None)
        if on_wave:
            on_wave(wave, batch, prompt, gen_len, seconds)


def wave_specs(waves, seed=7, batch_scale=1):
    """(batch, prompt, gen_len) of each wave of serve_waves."""
    import random
    rng = random.Random(seed)
    specs = []
    for _ in range(waves):
        batch = rng.choice([1, 2, 4, 8, 12, 16]) * batch_scale
        prompt = rng.choice([64, 128, 256, 384, 512, 1024])
        gen_len = rng.choice([16, 32, 64, 128, 192])
        specs.append((batch, prompt, gen_len))
    return specs


@torch.no_grad()
def run_wave(model, vocab, batch, prompt, gen_len, timed=True):
    """One wave: prefill, then gen_len decode steps; its seconds (after a
    synchronize) when timed, else None."""
    import time
    t0 = time.perf_counter()
    idx = torch.randint(0, vocab, (batch, prompt), device="cuda")
    logits, past = model(idx)  # prefill
    tok = logits[:, -1:].argmax(-1)
    for step in range(gen_len):
        logits, past = model(tok, past=past, start=prompt + step)
        tok = logits[:, -1:].argmax(-1)
    del logits, past, tok, idx
    if not timed:
        return None
    torch.cuda.synchronize()
    return time.perf_counter() - t0
