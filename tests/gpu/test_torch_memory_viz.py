"""PyTorch's memory tools on libvpmm memory, pause-aware, on a real GPU
(docs/python.md, "Memory history and snapshots"). Two cases, each in a
process of its own (pyharness):

* global_allocator: a training client under vpmm.torch.use_as_allocator()
  (weights and optimizer state tagged, activations and gradients not)
  records its history with Python stacks, runs steps, pauses the optimizer
  and the weights, allocates a rollout's KV cache meanwhile, dumps a
  snapshot while paused, and torch.cuda._memory_viz renders it: the trace
  view (trace_plot) and the segment view (segment_plot) as HTML, the text
  views segsum and trace. Checked: what PyTorch's own recorder does under
  the pluggable allocator (the docs say it refuses; printed either way),
  the snapshot's keys, memory_viz's segment view walked back over every
  event, the paused tags (no segment, listed under "vpmm", their frees
  marked "vpmm paused"), the tags as categories, the HTML's embedded
  snapshot, `vpmm replay` of the file, and training going on after the
  resume with the weights intact.
* mempool: vpmm.torch.pool(tag) without use_as_allocator: PyTorch records
  its blocks itself, vpmm.torch adds the tags and the pause; the same
  renderings and checks.

Artifacts (snapshots and HTML pages) go to $VPMM_VIZ_OUT when set
(scripts/gpu-memory-viz.sh sets it). Skips (77) without torch or a GPU."""
import base64
import os
import pickle
import re
import subprocess
import sys
import tempfile
import unittest

import pyharness

MiB = 1 << 20


def _out_dir():
    d = os.environ.get("VPMM_VIZ_OUT") or tempfile.mkdtemp(prefix="vpmm-viz-")
    os.makedirs(d, exist_ok=True)
    return d


def _checks():
    # bindings/python/test_snapshot.py's format checks (the same ones the
    # host tests run), with a TestCase for their asserts.
    import test_snapshot
    return unittest.TestCase(), test_snapshot


def _render(snap, name):
    """torch.cuda._memory_viz on the snapshot: the trace and segment views
    as HTML files, and the text views. Returns the trace view's HTML."""
    from torch.cuda import _memory_viz as mv
    out = _out_dir()
    html = mv.trace_plot(snap)
    with open(os.path.join(out, f"{name}_trace.html"), "w") as f:
        f.write(html)
    seg_html = mv.segment_plot(snap)
    with open(os.path.join(out, f"{name}_segments.html"), "w") as f:
        f.write(seg_html)
    summary = mv.segsum(snap)  # asserts that every segment's blocks add up
    text = mv.trace(snap)
    with open(os.path.join(out, f"{name}_segsum.txt"), "w") as f:
        f.write(summary + "\n\n" + text)
    # The page embeds the snapshot (pickled, base64): the paused tag is in it.
    m = re.search(r'"base64": "([^"]+)"', html)
    assert m, "no embedded snapshot in the trace view"
    embedded = pickle.loads(base64.b64decode(m.group(1)).rstrip(b"\0"))
    assert embedded["vpmm"] == snap["vpmm"], "the embedded snapshot lost libvpmm's facts"
    print(f"rendered {name}: trace view {len(html)} B, segment view {len(seg_html)} B, "
          f"segsum {summary.splitlines()[-1] if summary else ''!r}")
    return html


def _replay(path):
    tool = os.environ.get("VPMM_TOOL")
    if not tool:
        return
    r = subprocess.run([tool, "replay", "--backend", "host", "--summary", path], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    print("vpmm replay:", r.stdout.strip().splitlines()[-1])


def _model(torch):
    return torch.nn.Sequential(torch.nn.Linear(2048, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 2048)).cuda()


def global_allocator():
    import torch
    import vpmm.torch as vt
    tc, ts = _checks()
    vt.use_as_allocator()
    # What PyTorch records itself under a pluggable allocator (docs/python.md
    # says: it refuses). Printed, so the GPU log keeps what this version does.
    for what, call in (("_record_memory_history", lambda: torch.cuda.memory._record_memory_history("all")),
                       ("_snapshot", lambda: torch.cuda.memory._snapshot())):
        try:
            call()
            print(f"PyTorch {torch.__version__}: {what} under the pluggable allocator: no error")
        except Exception as e:  # RuntimeError: CUDAPluggableAllocator does not yet support ...
            print(f"PyTorch {torch.__version__}: {what} under the pluggable allocator: "
                  f"{type(e).__name__}: {str(e).splitlines()[0][:120]}")
    vt.record_memory_history(stacks="python")
    torch.manual_seed(0)
    with vt.pool("weights", host_backup=True):
        model = _model(torch)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    x = torch.randn(256, 2048, device="cuda")

    def step(first=False):
        loss = model(x).square().mean()
        loss.backward()
        if first:  # Adam makes its state at the first step: tag it
            with vt.pool("optimizer", host_backup=True):
                opt.step()
        else:
            opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.item()

    step(first=True)
    for _ in range(2):
        step()
    with torch.no_grad():
        ref = model(x).clone()
    torch.cuda.synchronize()
    assert vt.pause("optimizer") and vt.pause("weights")
    kv = [torch.empty(64 * MiB, dtype=torch.uint8, device="cuda").fill_(1) for _ in range(3)]  # the rollout
    del kv
    path = vt.dump_snapshot(os.path.join(_out_dir(), "global_allocator.pickle"))
    snap = pickle.load(open(path, "rb"))
    ts.check_format(tc, snap)
    ts.viz_consistent(tc, snap, device=torch.cuda.current_device())
    dev = torch.cuda.current_device()
    paused = snap["vpmm"]["devices"][dev]["paused_at_dump"]
    tags = {p["tag"] for p in paused}
    assert tags == {"weights", "optimizer"}, tags
    assert all(s["vpmm_tag"] not in ("weights", "optimizer") for s in snap["segments"]), "a paused segment"
    trace = snap["device_traces"][dev]
    marked = [e for e in trace if e.get("vpmm_paused") and e["action"] == "free_completed"]
    assert marked and all("vpmm paused" in e["user_metadata"] for e in marked)
    cats = {e["category"] for e in trace if e["action"] == "alloc"}
    assert {"weights", "optimizer", "unknown"} <= cats, cats
    assert any(f["filename"].endswith(".py") for e in trace if e["action"] == "alloc" for f in e["frames"])
    print(f"{len(trace)} events, {len(paused)} paused allocations, categories {sorted(cats)}")
    _render(snap, "global_allocator")
    _replay(path)
    assert vt.resume("weights") and vt.resume("optimizer")
    with torch.no_grad():
        assert torch.allclose(model(x), ref, rtol=1e-6, atol=1e-6), "weights changed across pause/resume"
    step()
    vt.record_memory_history(None)


def mempool():
    import torch
    import vpmm.torch as vt
    tc, ts = _checks()
    vt.record_memory_history(stacks="python")  # PyTorch's recorder too: its blocks are its own
    torch.manual_seed(0)
    with vt.pool("weights", host_backup=True):
        model = _model(torch)
    x = torch.randn(256, 2048, device="cuda")
    for _ in range(2):
        model(x).square().mean().backward()
    torch.cuda.synchronize()
    assert vt.pause("weights") and vt.resume("weights") and vt.pause("weights")
    path = vt.dump_snapshot(os.path.join(_out_dir(), "mempool.pickle"))
    snap = pickle.load(open(path, "rb"))
    ts.check_format(tc, snap)
    dev = torch.cuda.current_device()
    ts.viz_consistent(tc, snap, device=dev)
    paused = snap["vpmm"]["devices"][dev].get("paused_at_dump", [])
    assert paused and all(p["tag"] == "weights" for p in paused), paused
    trace = snap["device_traces"][dev]
    notes = [e for e in trace if "vpmm paused" in (e.get("user_metadata") or "")]
    assert notes, "no pause in PyTorch's trace"
    assert any("vpmm resumed" in (e.get("user_metadata") or "") for e in trace)
    print(f"{len(trace)} events, {len(notes)} marked by the pauses, {len(paused)} segments paused at the dump")
    _render(snap, "mempool")
    _replay(path)
    assert vt.resume("weights")
    model(x).sum().item()
    vt.record_memory_history(None)


CASES = {"global_allocator": global_allocator, "mempool": mempool}

if __name__ == "__main__":
    sys.exit(pyharness.main(__file__, CASES, needs="torch"))
