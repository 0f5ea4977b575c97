#!/usr/bin/env python3
"""Makes docs/images/paused_step.png, the picture of a paused training step
in docs/python.md: a libvpmm memory history recorded on the host backend (no
GPU, no PyTorch: the hook entry points libvpmm_history.so gives PyTorch,
called as PyTorch's CUDAPluggableAllocator would call them), turned into a
snapshot by vpmm._snapshot, shown by PyTorch's memory_viz page in its
"Active Memory Timeline" view (what torch.cuda._memory_viz.trace_plot
writes) and photographed by headless Chromium.

The job: weights (tag "weights", pinned backup) and optimizer state (tag
"optimizer", mmap backup) made once; three training steps of activations
and gradients (untagged: "unknown" in memory_viz); after the second step
both tags pause while a rollout allocates its KV cache, then resume; a last
step.

Usage (from the source tree, after a build):
  VPMM_LIBRARY=build/libvpmm.so.1 VPMM_BACKEND=host python3 docs/images/make_paused_step.py OUT_DIR \\
      [--viz-js URL] [--d3 PATH] [--png]
Writes OUT_DIR/paused_step.pickle and OUT_DIR/paused_step.html (memory_viz's
page, importing MemoryViz.js from PyTorch's CDN as
torch.cuda._memory_viz does, or from --viz-js), and with --png
OUT_DIR/paused_step.png (chromium, over a local HTTP server). Offline, give
--viz-js a local copy of torch/utils/viz/MemoryViz.js whose d3 imports read
window.d3, and --d3 d3 v5's dist/d3.min.js: that is how the committed
picture was made (the machine could not reach the CDN)."""
import argparse
import base64
import functools
import http.server
import json
import os
import shutil
import subprocess
import sys
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "bindings", "python"))
import vpmm  # noqa: E402
from vpmm import _snapshot as S  # noqa: E402

MiB = 1 << 20
CDN = "https://cdn.jsdelivr.net/gh/pytorch/pytorch@main/torch/utils/viz/MemoryViz.js"
PAGE = """<!DOCTYPE html>
<html>
<head>
{head}</head>
<body>
<script type="module">
import {{add_local_files}} from "{viz}"
const local_files = {files}
add_local_files(local_files, {kind})
</script>
</body>
"""


def record():
    """The job's history, as a snapshot dict."""
    S.install_observers()
    h = S.history
    lib = h.require()
    malloc = lambda n: lib.vpmm_history_torch_malloc(n, 0, None)  # noqa: E731
    free = lambda p, n: lib.vpmm_history_torch_free(p, n, 0, None)  # noqa: E731
    h.start(100000)
    with vpmm.region("weights", host_backup=True):
        weights = [malloc(n * MiB) for n in (96, 96, 48, 24)]
    with vpmm.region("optimizer", host_backup=True, backup_store="mmap"):
        optimizer = [malloc(n * MiB) for n in (192, 96)]
    pool = vpmm.default_pool(0)
    for step in range(3):
        acts = [malloc((k % 4 + 2) * 12 * MiB) for k in range(10)]
        grads = [malloc(n * MiB) for n in (96, 96, 48, 24)]
        for a in reversed(acts):
            free(a, 0)
        for g in grads:
            free(g, 0)
        if step == 1:
            pool.pause("optimizer")
            pool.pause("weights")
            kv = [malloc(128 * MiB) for _ in range(4)]  # the rollout, while training sleeps
            for k in kv:
                free(k, 0)
            pool.resume("weights")
            pool.resume("optimizer")
    events, dropped = h.read()
    h.stop()
    del weights, optimizer
    return S.snapshot_from_history(events, h.strings(events), None, [0], dropped)


def page(snapshot, viz, d3=None, kind="Active Memory Timeline"):
    """memory_viz's page as torch.cuda._memory_viz._format_viz writes it."""
    import pickle
    buf = pickle.dumps(snapshot, protocol=4)
    buf += b"\0" * (3 - len(buf) % 3)
    files = json.dumps([{"name": "snapshot.pickle", "base64": base64.b64encode(buf).decode()}])
    head = f'<script src="{d3}"></script>\n' if d3 else ""
    return PAGE.format(head=head, viz=viz, files=files, kind=repr(kind))


def screenshot(out_dir, html_name, png):
    chromium = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if not chromium:
        sys.exit("no chromium: apt-get install chromium, or open the HTML page in a browser")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=out_dir)
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{httpd.server_address[1]}/{html_name}"
    try:
        subprocess.run([chromium, "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                        "--window-size=1200,760", "--virtual-time-budget=10000", f"--screenshot={png}", url],
                       check=True, capture_output=True, timeout=120)
    finally:
        httpd.shutdown()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir")
    ap.add_argument("--viz-js", default=CDN)
    ap.add_argument("--d3", default=None)
    ap.add_argument("--png", action="store_true")
    ap.add_argument("--kind", default="Active Memory Timeline",
                    help="memory_viz's view: 'Active Memory Timeline' (the default, trace_plot), "
                         "'Allocator State History' (segment_plot), 'Active Cached Segment Timeline'")
    a = ap.parse_args()
    os.makedirs(a.out_dir, exist_ok=True)
    snap = record()
    S.dump(snap, os.path.join(a.out_dir, "paused_step.pickle"))
    viz, d3 = a.viz_js, a.d3
    for src in (viz, d3):  # local files are served from out_dir
        if src and os.path.exists(src):
            shutil.copy(src, a.out_dir)
    if os.path.exists(viz):
        viz = "./" + os.path.basename(viz)
    if d3 and os.path.exists(d3):
        d3 = "./" + os.path.basename(d3)
    with open(os.path.join(a.out_dir, "paused_step.html"), "w") as f:
        f.write(page(snap, viz, d3, a.kind))
    print("wrote", os.path.join(a.out_dir, "paused_step.html"))
    if a.png:
        screenshot(a.out_dir, "paused_step.html", os.path.join(a.out_dir, "paused_step.png"))
        print("wrote", os.path.join(a.out_dir, "paused_step.png"))


if __name__ == "__main__":
    main()
