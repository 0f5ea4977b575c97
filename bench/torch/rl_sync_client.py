"""The colocated RL weight sync, measured as a user would: a trainer process
and a rollout process on one GPU, the trainer's Llama (~0.8B parameters,
1.59 GiB of bf16: transformers' LlamaConfig, random weights) sent to the
rollout through an ordinary torch.multiprocessing queue, in the containers
RL code builds (--shapes):

  dict     {k: v.detach() for k, v in model.state_dict().items()}: a plain
           dict, as most RL stacks build their weight buckets;
  pairs    [(k, v.detach()) for ...]: a list of (name, tensor) pairs, as
           SGLang's update_weights_from_tensor takes them;
  ordered  model.state_dict() itself (an OrderedDict with _metadata);

mapped there with load_state_dict(assign=True), greedy tokens generated and
checked. The ways to send, each a trainer/rollout pair of its own, all in
one run, alternating, the order rotated every round:

  torch      PyTorch's CUDA IPC under its native caching allocator (what
             torch.multiprocessing does with CUDA tensors);
  vpmm       the weights in vpmm.torch.pool("weights", host_backup=True),
             vpmm.torch.install_reductions(): every container travels as
             one export (share_many) opened with one import (the exports
             counted per send and reported); the resume (vpmm.torch.resume,
             in a process that has shared before) prepares the re-send's
             exports in the background by itself, and the end of the pool
             block the model is built in prepares the first send's
             (vpmm.torch.pool's share_ahead, on once install_reductions()
             ran);
  vpmm_noahead  the same with pool(..., share_ahead=False): the first
             send exports its handles itself (the default before
             share_ahead);
  vpmm_prepared  the same, with vpmm.torch.prepare_share_in_background(
             "weights") also called after the model is built (and after
             each resume), so the first send's exports too run while the
             trainer computes (the time it took, and any wait for it, is
             reported apart).

Per round, way and shape: a fresh model (the same seed for every way), the
trainer's own greedy generation (standing in for a training step, the same
for every way), the first send, greedy generation in the rollout, then
(vpmm) a pause of the trainer's weights, which the rollout must see
(vpmm.torch.current() False), the rollout dropping its model, a resume, the
trainer's generation again, and the re-send of the same weights (new memory:
new exports) with generation again; torch re-sends after the rollout dropped
its model. A send is timed from the trainer's put() to the rollout holding
the weights (unpickled: every tensor mapped); the load_state_dict(assign=True)
after it is reported apart, and so is the sender's pickling inside it (the
queue's ForkingPickler.dumps, libvpmm's export included: "pickled"). Tokens
must equal the trainer's own greedy tokens, for every send of every way; so
is the rollout's unpickling (ForkingPickler.loads, every tensor mapped:
"unpickled"). Every round is printed, then the medians per shape and the
target: vpmm's first send and re-send <= torch's, in the same run, for every
shape.

    PYTHONPATH=bindings/python VPMM_LIBRARY=build/libvpmm.so.1 \\
        python3 bench/torch/rl_sync_client.py [--rounds 4] [--ways torch,vpmm] [--shapes dict,pairs,ordered] [--small]

Without transformers it says so and uses a built-in Llama of the same
parameter names and shapes (--small: a 2-layer model, for a quick check).
"""
import argparse
import json
import os
import statistics
import sys
import time

GiB = 1 << 30
PROMPT = list(range(1000, 1032))


# --- the model ---------------------------------------------------------------------
def llama_config(small):
    """transformers' LlamaConfig of a ~0.8B Llama (or a 2-layer one)."""
    kw = dict(hidden_size=2048, intermediate_size=5632, num_hidden_layers=2 if small else 16,
              num_attention_heads=32, num_key_value_heads=8, vocab_size=32000, max_position_embeddings=2048,
              tie_word_embeddings=False, rms_norm_eps=1e-5)
    try:
        from transformers import LlamaConfig
        return LlamaConfig(**kw), "transformers"
    except ImportError:
        return kw, "builtin"


def make_model(config, kind):
    import torch
    if kind == "transformers":
        from transformers import LlamaForCausalLM
        return LlamaForCausalLM(config).eval()
    return BuiltinLlama(config).eval()


def BuiltinLlama(c):  # noqa: N802 (a class factory: torch is imported late)
    """LlamaForCausalLM's parameters (names and shapes) and forward pass, for
    machines without transformers: RMSNorm, rotary embeddings, grouped-query
    attention, SiLU MLP."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class RMSNorm(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(d))

        def forward(self, x):
            v = x.float().pow(2).mean(-1, keepdim=True)
            return (x.float() * torch.rsqrt(v + c["rms_norm_eps"])).to(x.dtype) * self.weight

    class Attn(nn.Module):
        def __init__(self):
            super().__init__()
            h, nh, nkv = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"]
            self.hd, self.nh, self.nkv = h // nh, nh, nkv
            self.q_proj = nn.Linear(h, h, bias=False)
            self.k_proj = nn.Linear(h, nkv * self.hd, bias=False)
            self.v_proj = nn.Linear(h, nkv * self.hd, bias=False)
            self.o_proj = nn.Linear(h, h, bias=False)

        def forward(self, x, cos, sin):
            b, t, _ = x.shape
            q = self.q_proj(x).view(b, t, self.nh, self.hd).transpose(1, 2)
            k = self.k_proj(x).view(b, t, self.nkv, self.hd).transpose(1, 2)
            v = self.v_proj(x).view(b, t, self.nkv, self.hd).transpose(1, 2)

            def rot(u):
                u1, u2 = u[..., : self.hd // 2], u[..., self.hd // 2:]
                return u * cos + torch.cat((-u2, u1), -1) * sin
            q, k = rot(q), rot(k)
            k = k.repeat_interleave(self.nh // self.nkv, 1)
            v = v.repeat_interleave(self.nh // self.nkv, 1)
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.o_proj(o.transpose(1, 2).reshape(b, t, -1))

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            h, i = c["hidden_size"], c["intermediate_size"]
            self.gate_proj = nn.Linear(h, i, bias=False)
            self.up_proj = nn.Linear(h, i, bias=False)
            self.down_proj = nn.Linear(i, h, bias=False)

        def forward(self, x):
            return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.self_attn, self.mlp = Attn(), MLP()
            self.input_layernorm = RMSNorm(c["hidden_size"])
            self.post_attention_layernorm = RMSNorm(c["hidden_size"])

        def forward(self, x, cos, sin):
            x = x + self.self_attn(self.input_layernorm(x), cos, sin)
            return x + self.mlp(self.post_attention_layernorm(x))

    class Body(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed_tokens = nn.Embedding(c["vocab_size"], c["hidden_size"])
            self.layers = nn.ModuleList(Layer() for _ in range(c["num_hidden_layers"]))
            self.norm = RMSNorm(c["hidden_size"])

    class Out:
        def __init__(self, logits):
            self.logits = logits

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.model = Body()
            self.lm_head = nn.Linear(c["hidden_size"], c["vocab_size"], bias=False)
            for p in self.parameters():
                if p.dim() > 1:
                    nn.init.normal_(p, std=0.02)

        def forward(self, ids):
            hd = c["hidden_size"] // c["num_attention_heads"]
            t = ids.shape[1]
            inv = 1.0 / (10000.0 ** (torch.arange(0, hd, 2, device=ids.device).float() / hd))
            f = torch.outer(torch.arange(t, device=ids.device).float(), inv)
            emb = torch.cat((f, f), -1)
            x = self.model.embed_tokens(ids)
            cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
            for layer in self.model.layers:
                x = layer(x, cos, sin)
            return Out(self.lm_head(self.model.norm(x)))

    return Model()


def greedy(model, n_new):
    import torch
    ids = torch.tensor([PROMPT], device="cuda")
    with torch.no_grad():
        for _ in range(n_new):
            nxt = model(ids).logits[:, -1].argmax(-1, keepdim=True)
            ids = torch.cat([ids, nxt], 1)
    return ids[0, len(PROMPT):].tolist()


# --- the rollout ---------------------------------------------------------------------
def time_pickler(name, record):
    """Wraps ForkingPickler.<name> (dumps or loads) in this process:
    record(ms, result) after every call."""
    from multiprocessing.reduction import ForkingPickler
    inner = getattr(ForkingPickler, name)

    def timed(*a, **k):
        t = time.monotonic()
        out = inner(*a, **k)
        record((time.monotonic() - t) * 1e3, out)
        return out
    setattr(ForkingPickler, name, staticmethod(timed))


def rollout(way, small, inbox, outbox):
    """Receives state dicts, maps them into its model, generates."""
    import torch
    torch.cuda.set_device(0)
    if way != "torch":
        import vpmm.torch as vt  # the rebuild functions the pickles name
    config, kind = llama_config(small)
    # The skeleton, built once: its own weights are dropped at the first
    # load_state_dict(assign=True); its non-persistent buffers stay.
    torch.manual_seed(0)
    with torch.device("cuda"):
        torch.set_default_dtype(torch.bfloat16)
        model = make_model(config, kind)
        torch.set_default_dtype(torch.float32)
    # What "drop" loads: the right shapes over one element each, so the
    # trainer's memory is let go (a vpmm import closes with its last tensor).
    placeholders = {k: torch.zeros((), dtype=v.dtype, device="cuda").expand(v.shape)
                    for k, v in model.state_dict().items()}
    names = list(placeholders)
    unpickled = []  # ms of each ForkingPickler.loads
    time_pickler("loads", lambda ms, _: unpickled.append(ms))
    outbox.put("ready")
    while True:
        msg = inbox.get()
        if msg == "stop":
            return
        if msg == "drop":  # let go of the trainer's memory (closes vpmm imports)
            model.load_state_dict(placeholders, assign=True)
            torch.cuda.synchronize()
            import gc
            gc.collect()
            outbox.put("dropped")
            continue
        if msg == "current?":
            p = model.lm_head.weight
            outbox.put(vt.current(p) if way != "torch" else None)
            continue
        weights = msg  # the send itself: unpickled = every tensor mapped
        t_recv = time.monotonic()
        unpickle_ms = unpickled[-1] if unpickled else float("nan")
        sd = dict(weights) if isinstance(weights, list) else weights  # (name, tensor) pairs
        assert list(sd) == names, "the names or their order changed on the way"
        model.load_state_dict(sd, assign=True)
        t_loaded = time.monotonic()
        del sd, weights
        tokens = greedy(model, 16)
        outbox.put({"t_recv": t_recv, "t_loaded": t_loaded, "tokens": tokens, "unpickle_ms": unpickle_ms})


# --- the trainer ----------------------------------------------------------------------
def trainer(way, small, ctl_in, ctl_out):
    if way != "torch":
        os.environ["VPMM_EXPORTABLE"] = "1"  # before the default pools exist
    import torch
    import torch.multiprocessing as mp
    torch.cuda.set_device(0)
    vt = None
    if way != "torch":
        import vpmm.torch as vt
        vt.install_reductions()
    ctx = mp.get_context("spawn")
    # The sender's share of a send: the queue's feeder thread pickles the
    # message with ForkingPickler.dumps (libvpmm's exports included), timed
    # here; the rest of send_ms is the pipe and the rollout's unpickling.
    pickled = []  # (ms, bytes) of each ForkingPickler.dumps
    time_pickler("dumps", lambda ms, b: pickled.append((ms, len(b))))
    inbox, outbox = ctx.Queue(), ctx.Queue()
    r = ctx.Process(target=rollout, args=(way, small, inbox, outbox), daemon=True)
    r.start()
    assert outbox.get(timeout=600) == "ready"
    config, kind = llama_config(small)
    ctl_out.put({"ready": way, "model": kind})

    def payload(model, shape):
        """The weights as RL code hands them over."""
        if shape == "dict":
            return {k: v.detach() for k, v in model.state_dict().items()}
        if shape == "pairs":
            return [(k, v.detach()) for k, v in model.state_dict().items()]
        return model.state_dict()

    def exports():
        return vt.default_pool(0).ipc_stats()["n_exports"] if vt is not None else 0

    def send(model, shape):
        p = payload(model, shape)
        made = exports()
        pickled.clear()
        t0 = time.monotonic()
        inbox.put(p)
        got = outbox.get(timeout=600)
        pickle_ms, pickle_bytes = pickled[0] if pickled else (float("nan"), 0)
        return {"send_ms": (got["t_recv"] - t0) * 1e3, "load_ms": (got["t_loaded"] - got["t_recv"]) * 1e3,
                "pickle_ms": pickle_ms, "pickle_bytes": pickle_bytes, "unpickle_ms": got["unpickle_ms"],
                "tokens": got["tokens"], "exports": exports() - made}

    while True:
        cmd = ctl_in.get()
        if cmd == "stop":
            inbox.put("stop")
            r.join(60)
            return
        rnd, shape = cmd
        torch.manual_seed(1234)
        torch.set_default_dtype(torch.bfloat16)
        if vt is not None:
            ahead = False if way == "vpmm_noahead" else None  # None: vpmm.torch's default
            with vt.pool("weights", host_backup=True, share_ahead=ahead), torch.device("cuda"):
                model = make_model(config, kind)
        else:
            with torch.device("cuda"):
                model = make_model(config, kind)
        torch.set_default_dtype(torch.float32)
        torch.cuda.synchronize()

        def compute():
            """The trainer's work before a sync (its own greedy tokens), with
            the exports prepared meanwhile for vpmm_prepared."""
            fut = vt.prepare_share_in_background("weights") if way == "vpmm_prepared" else None
            t0 = time.monotonic()
            tokens = greedy(model, 16)
            t1 = time.monotonic()
            prep = {}
            if fut is not None:
                n = fut.result()
                prep = {"prepared_handles": n, "prepare_wait_ms": (time.monotonic() - t1) * 1e3,
                        "compute_ms": (t1 - t0) * 1e3}
            return tokens, prep

        want, prep = compute()
        res = {"way": way, "shape": shape, "params": sum(p.numel() for p in model.parameters()),
               "bytes": sum(p.numel() * p.element_size() for p in model.parameters())}
        if vt is not None:  # the pool block pins the weights' backups ahead (vpmm.torch's default)
            fut = vt.pinning_ahead.get("weights")
            res["pinning_ahead_done_at_send"] = fut.done() if fut is not None else None
            fut = vt.sharing_ahead.get("weights")
            res["sharing_ahead_done_at_send"] = fut.done() if fut is not None else None
        first = send(model, shape)
        first.update(prep)
        res["first"] = first
        paused_seen = None
        if vt is not None:
            assert vt.pause("weights")
            inbox.put("current?")
            paused_seen = outbox.get(timeout=60) is False
        inbox.put("drop")
        assert outbox.get(timeout=600) == "dropped"
        if vt is not None:
            assert vt.resume("weights")
            stats = vt.default_pool(0).ipc_stats()
            res["held_by_importers_bytes"] = stats["held_by_importers_bytes"]
        again, prep = compute()
        res["resend"] = send(model, shape)
        res["resend"].update(prep)
        res["resumed_ok"] = again == want
        res["pause_seen"] = paused_seen
        res["tokens_ok"] = first["tokens"] == want and res["resend"]["tokens"] == want and res["resumed_ok"]
        res["tokens"] = want
        inbox.put("drop")
        assert outbox.get(timeout=600) == "dropped"
        if vt is not None:
            res["exports"] = vt.default_pool(0).ipc_stats()["n_exports"]
        del model
        if vt is not None:
            vt.release_shared()
        import gc
        gc.collect()
        # Everything back to the driver, so the next round's model is new
        # memory (a first send of handles never exported) for every way.
        if vt is not None:
            vt.empty_cache()
        else:
            torch.cuda.empty_cache()
        ctl_out.put(res)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--ways", default="torch,vpmm")
    ap.add_argument("--shapes", default="dict,pairs,ordered")
    ap.add_argument("--small", action="store_true", help="a 2-layer model: a quick check")
    args = ap.parse_args()
    import torch.multiprocessing as mp
    ways = args.ways.split(",")
    shapes = args.shapes.split(",")
    ctx = mp.get_context("spawn")
    pairs = {}
    for w in ways:
        ci, co = ctx.Queue(), ctx.Queue()
        p = ctx.Process(target=trainer, args=(w, args.small, ci, co))
        p.start()
        pairs[w] = (p, ci, co)
    for w in ways:
        hello = pairs[w][2].get(timeout=900)
        print(f"{w}: ready ({hello['model']} model)", flush=True)
    res = {(w, sh): [] for w in ways for sh in shapes}
    tokens = {}
    for rnd in range(args.rounds):
        order = ways[rnd % len(ways):] + ways[:rnd % len(ways)]
        for sh in shapes:
            cells = []
            for w in order:
                pairs[w][1].put((rnd, sh))
                r = pairs[w][2].get(timeout=900)
                res[(w, sh)].append(r)
                tokens[w] = r["tokens"]
                prep = "".join(f" [prepared {r[k]['prepared_handles']} handles, waited {r[k]['prepare_wait_ms']:.1f} "
                               f"ms after {r[k]['compute_ms']:.0f} ms of compute]" for k in ("first", "resend")
                               if "prepared_handles" in r[k])
                ex = "" if w == "torch" else (f" exports {r['first']['exports']}/{r['resend']['exports']}"
                                              f"{'' if r['pinning_ahead_done_at_send'] is not False else ' (pinning ahead meanwhile)'}")
                cells.append(f"{w}: first {r['first']['send_ms']:.1f} (pickled {r['first']['pickle_ms']:.1f}, "
                             f"unpickled {r['first']['unpickle_ms']:.1f}, +load {r['first']['load_ms']:.1f}) "
                             f"resend {r['resend']['send_ms']:.1f} (pickled {r['resend']['pickle_ms']:.1f}, "
                             f"unpickled {r['resend']['unpickle_ms']:.1f}, +load {r['resend']['load_ms']:.1f}) ms{ex}{prep}"
                             f"{'' if r['tokens_ok'] else ' TOKENS DIFFER'}"
                             f"{'' if r['pause_seen'] in (None, True) else ' PAUSE NOT SEEN'}")
            print(f"round {rnd + 1} {sh:7s}: " + " | ".join(cells), flush=True)
    for w in ways:
        pairs[w][1].put("stop")
    for w in ways:
        pairs[w][0].join(120)
    first = res[(ways[0], shapes[0])][0]
    print(f"model: {first['params'] / 1e9:.3f} B parameters, {first['bytes'] / GiB:.2f} GiB")
    summary = {}
    for sh in shapes:
        for w in ways:
            rs = res[(w, sh)]
            f = statistics.median(r["first"]["send_ms"] for r in rs)
            s = statistics.median(r["resend"]["send_ms"] for r in rs)
            fl = statistics.median(r["first"]["send_ms"] + r["first"]["load_ms"] for r in rs)
            sl = statistics.median(r["resend"]["send_ms"] + r["resend"]["load_ms"] for r in rs)
            fp = statistics.median(r["first"]["pickle_ms"] for r in rs)
            sp = statistics.median(r["resend"]["pickle_ms"] for r in rs)
            nb = statistics.median(r["first"]["pickle_bytes"] for r in rs)
            fu = statistics.median(r["first"]["unpickle_ms"] for r in rs)
            su = statistics.median(r["resend"]["unpickle_ms"] for r in rs)
            ok = all(r["tokens_ok"] for r in rs) and all(r["pause_seen"] in (None, True) for r in rs)
            one = w == "torch" or all(r["first"]["exports"] == 1 and r["resend"]["exports"] == 1 for r in rs)
            summary[f"{w}/{sh}"] = {"first_ms": round(f, 2), "resend_ms": round(s, 2),
                                    "first_with_load_ms": round(fl, 2), "resend_with_load_ms": round(sl, 2),
                                    "first_pickle_ms": round(fp, 2), "resend_pickle_ms": round(sp, 2),
                                    "first_unpickle_ms": round(fu, 2), "resend_unpickle_ms": round(su, 2),
                                    "pickle_bytes": nb,
                                    "tokens_and_pause_ok": ok, "one_export_per_send": one}
            print(f"median {sh:7s} {w:13s} first {f:8.2f} ms (with load {fl:8.2f})  resend {s:8.2f} ms "
                  f"(with load {sl:8.2f})  pickled {fp:.2f} / {sp:.2f} ms, {nb / 1024:.0f} KiB, "
                  f"unpickled {fu:.2f} / {su:.2f} ms  tokens/pause {'ok' if ok else 'WRONG'}"
                  f"{'' if w == 'torch' else '  one export per send: ' + ('yes' if one else 'NO')}")
    same = len({tuple(t) for t in tokens.values()}) == 1
    print(f"greedy tokens identical across ways: {same}")
    for sh in shapes:
        for w in ("vpmm", "vpmm_noahead", "vpmm_prepared"):
            t, v = summary.get(f"torch/{sh}"), summary.get(f"{w}/{sh}")
            if t and v:
                met = v["first_ms"] <= t["first_ms"] and v["resend_ms"] <= t["resend_ms"]
                print(f"target ({sh}: {w} first and resend <= torch, same run): "
                      f"{'MET' if met else 'NOT MET'} (first {v['first_ms'] / t['first_ms']:.2f}x, "
                      f"resend {v['resend_ms'] / t['resend_ms']:.2f}x)")
    print("RESULT " + json.dumps({"summary": summary, "tokens_identical": same}))
    ok = same and all(s["tokens_and_pause_ok"] and s["one_export_per_send"] for s in summary.values())
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
