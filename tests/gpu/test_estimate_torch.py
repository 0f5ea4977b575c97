#!/usr/bin/env python3
"""`python3 -m vpmm.estimate` on a real PyTorch script on the GPU: the script
allocates from two threads on two streams with changing shapes (what a
caching allocator fragments on), the estimator records the snapshot, replays
it and prints PyTorch's reserved peak, libvpmm's mapped peak and the live
peak. Checked: the script's own output and exit status pass through, the
three peaks are there and ordered (live <= libvpmm mapped, live <= PyTorch
reserved), libvpmm maps at most what PyTorch reserved, and --plot writes an
SVG with the three lines. Skips (77) without torch or a GPU."""
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))

SCRIPT = r'''
import sys, threading, torch
torch.manual_seed(0)
def work(stream, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    with torch.cuda.stream(stream):
        keep = []
        for step in range(60):
            n = int(torch.randint(1, 64, (1,), generator=g, device="cuda").item())
            x = torch.empty(n * (1 << 18), device="cuda")  # 1..64 MiB
            x.fill_(1.0)
            keep.append(x)
            if len(keep) > 6:
                keep.pop(0)
        torch.cuda.current_stream().synchronize()
threads = [threading.Thread(target=work, args=(torch.cuda.Stream(), s)) for s in (1, 2)]
for t in threads: t.start()
for t in threads: t.join()
print("script done", sys.argv[1:])
sys.exit(3)
'''


def size_bytes(text):
    n, unit = float(text.split()[0]), text.split()[1]
    return n * {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}[unit]


def main():
    try:
        import torch
    except Exception as e:
        print(f"SKIP: PyTorch not importable: {e}")
        return 77
    if not torch.cuda.is_available():
        print("SKIP: no CUDA device")
        return 77
    with tempfile.TemporaryDirectory() as d:
        script = os.path.join(d, "job.py")
        with open(script, "w") as f:
            f.write(SCRIPT)
        svg = os.path.join(d, "peaks.svg")
        env = dict(os.environ)
        env["PYTHONPATH"] = os.path.join(ROOT, "bindings", "python") + os.pathsep + env.get("PYTHONPATH", "")
        r = subprocess.run([sys.executable, "-m", "vpmm.estimate", "--plot", svg, script, "a", "b"],
                           env=env, capture_output=True, text=True, timeout=600)
        out = r.stdout + r.stderr
        print(out)
        ok = True

        def check(cond, what):
            nonlocal ok
            print(("ok   " if cond else "FAIL ") + what)
            ok &= bool(cond)

        check(r.returncode == 3, f"the script's exit status passes through (got {r.returncode})")
        check("script done ['a', 'b']" in out, "the script ran with its arguments")
        peaks = {}
        for name in ("PyTorch reserved", "libvpmm mapped", "requested"):
            m = re.search(re.escape(name) + r"\s+([0-9.]+ [KMGT]?i?B)", out)
            check(m is not None, f"the estimate prints '{name}'")
            if m:
                peaks[name] = size_bytes(m.group(1))
        if len(peaks) == 3:
            live, mapped, reserved = peaks["requested"], peaks["libvpmm mapped"], peaks["PyTorch reserved"]
            print(f"  reserved {reserved / 2**20:.1f} MiB, libvpmm {mapped / 2**20:.1f} MiB, live {live / 2**20:.1f} MiB")
            check(live > 0 and live <= mapped * 1.001 and live <= reserved * 1.001, "live <= both allocators")
            check(mapped <= reserved * 1.001, "libvpmm maps no more than PyTorch reserved")
        check(os.path.isfile(svg) and os.path.getsize(svg) > 0, "--plot wrote an SVG")
        if os.path.isfile(svg):
            text = open(svg).read()
            check("PyTorch" in text, "the plot has a PyTorch reserved line")
        return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
