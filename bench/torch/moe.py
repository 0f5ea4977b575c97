"""A training workload of the kind that fragments caching allocators most,
written as a demanding user would write it, in plain PyTorch (nothing here
depends on libvpmm: the caller picks the allocator before the first CUDA
allocation):

- a decoder whose feed-forward is a mixture of experts with deliberately
  imbalanced routing: a router bias drawn afresh every step sends most
  tokens to a few experts, so every expert's token count (and so the size of
  its activations) changes from step to step;
- activation recompute (torch.utils.checkpoint) on a third of the blocks and
  activations offloaded to pinned host memory
  (torch.autograd.graph.save_on_cpu) on another third;
- an FSDP-style parameter "gather" buffer per block, allocated on a side
  stream, filled there, used on the main stream and freed there after
  record_stream (a recomputed block gathers again in backward);
- bf16 autocast, AdamW, and eight (batch, sequence) shapes in turn from
  2 x 4096 to 24 x 256 tokens."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

# Eight (batch, sequence) shapes, visited in this order every cycle.
SHAPES = [(2, 4096), (24, 256), (4, 2048), (12, 768), (8, 1024), (3, 3072), (16, 512), (6, 1536)]


class Experts(nn.Module):
    """Top-1 routing over n experts; a per-step router bias makes the load
    uneven and different every step (data-dependent activation sizes)."""

    def __init__(self, d, hidden, n):
        super().__init__()
        self.router = nn.Linear(d, n, bias=False)
        self.up = nn.ParameterList(nn.Parameter(torch.randn(d, hidden) / math.sqrt(d)) for _ in range(n))
        self.down = nn.ParameterList(nn.Parameter(torch.randn(hidden, d) / math.sqrt(hidden)) for _ in range(n))
        self.register_buffer("bias", torch.zeros(n), persistent=False)

    def forward(self, x):
        b, t, d = x.shape
        flat = x.reshape(-1, d)
        logits = self.router(flat).float() + self.bias
        weight, choice = logits.softmax(-1).max(-1)
        out = torch.zeros_like(flat)
        order = torch.argsort(choice)
        counts = torch.bincount(choice, minlength=len(self.up)).tolist()
        start = 0
        for e, n in enumerate(counts):
            if n == 0:
                continue
            idx = order[start:start + n]
            start += n
            h = F.gelu(flat.index_select(0, idx) @ self.up[e].to(flat.dtype))
            y = (h @ self.down[e].to(flat.dtype)) * weight.index_select(0, idx).unsqueeze(1).to(flat.dtype)
            out.index_add_(0, idx, y)
        return out.view(b, t, d)


class Block(nn.Module):
    def __init__(self, d, heads, hidden, experts, mode):
        super().__init__()
        self.heads = heads
        self.mode = mode  # "plain", "recompute" or "offload"
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.moe = Experts(d, hidden, experts)
        self.numel = sum(p.numel() for p in self.parameters())

    def gather(self, side):
        """What FSDP's all-gather does to the allocator: a buffer of the
        block's parameters made on a side stream, used on the main stream,
        freed there once record_stream covers the main stream's use."""
        main = torch.cuda.current_stream()
        side.wait_stream(main)
        with torch.cuda.stream(side):
            buf = torch.empty(self.numel, dtype=torch.bfloat16, device="cuda")
            off = 0
            for p in self.parameters():
                n = p.numel()
                buf[off:off + n].copy_(p.detach().reshape(-1))
                off += n
        main.wait_stream(side)
        buf.record_stream(main)
        checksum = buf[:: 4096].float().sum()
        del buf
        return checksum

    def body(self, x, side):
        b, t, d = x.shape
        checksum = self.gather(side)
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        shape = (b, t, self.heads, d // self.heads)
        q, k, v = (z.view(shape).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        # The gathered bytes reach the output (times zero), so no pass can skip them.
        return x + self.moe(self.ln2(x)) + 0.0 * checksum.to(x.dtype)

    def forward(self, x, side):
        if self.mode == "recompute":
            return checkpoint(self.body, x, side, use_reentrant=False)
        if self.mode == "offload":
            with torch.autograd.graph.save_on_cpu(pin_memory=True):
                return self.body(x, side)
        return self.body(x, side)


class MoE(nn.Module):
    def __init__(self, vocab=32000, d=1024, layers=12, heads=16, hidden=2048, experts=8, max_seq=4096):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(max_seq, d)
        modes = ("plain", "recompute", "offload")
        self.blocks = nn.ModuleList(Block(d, heads, hidden, experts, modes[i % 3]) for i in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.side = None

    def forward(self, idx):
        if self.side is None:
            self.side = torch.cuda.Stream()
        t = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(t, device=idx.device))
        for blk in self.blocks:
            x = blk(x, self.side)
        return self.head(self.ln(x))

    def route_unevenly(self, gen):
        """A new router bias per step: a few experts get most tokens, which
        ones and how many changes every step."""
        for blk in self.blocks:
            n = blk.moe.bias.numel()
            blk.moe.bias.copy_(torch.randn(n, device="cuda", generator=gen) * 3.0)


def train_step(model, opt, batch, seq, vocab, gen):
    model.route_unevenly(gen)
    idx = torch.randint(0, vocab, (batch, seq), device="cuda", generator=gen)
    tgt = torch.randint(0, vocab, (batch, seq), device="cuda", generator=gen)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits = model(idx)
        loss = F.cross_entropy(logits.float().view(-1, logits.shape[-1]), tgt.view(-1))
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss


def trainer(d=1024, layers=12, experts=8, vocab=32000):
    """The clients' training set-up, seeded alike under every allocator: the
    model, AdamW and the routing generator. Returns step(batch, seq) -> the
    step's loss tensor (train_step on them)."""
    torch.manual_seed(0)
    model = MoE(vocab=vocab, d=d, layers=layers, experts=experts).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    gen = torch.Generator(device="cuda").manual_seed(1)
    return lambda batch, seq: train_step(model, opt, batch, seq, vocab, gen)
