"""How much memory would libvpmm save on my PyTorch job?

    python3 -m vpmm.estimate [--plot OUT.svg] SCRIPT [ARGS...]
    python3 -m vpmm.estimate [--plot OUT.svg] --snapshot FILE.pickle[.gz]

Runs SCRIPT (as ``python3 SCRIPT ARGS...`` would, in this process) with
PyTorch's allocator history recording on
(``torch.cuda.memory._record_memory_history``), dumps the snapshot when the
script ends, exits, or gets SIGTERM/SIGINT
(``torch.cuda.memory._dump_snapshot``), replays every allocation of it
through libvpmm (``vpmm replay``, on the host backend: no GPU needed for
that part) and prints three peaks side by side: what PyTorch reserved under
the allocator settings the script ran with, what libvpmm would map, and the
live bytes (tensors alive at once). ``--plot`` draws the three over the run
as an SVG. ``--snapshot`` skips the run and estimates a snapshot recorded
before (by this module with ``--keep-snapshot``, or by your own call of
``_dump_snapshot``).

Recording is process-wide: allocations from every thread and stream of the
script are in the snapshot. Child processes (DataLoader workers touching
CUDA, torchrun ranks) record nothing; run the estimate in the process that
allocates.
"""
from __future__ import annotations

import argparse
import atexit
import os
import runpy
import signal
import subprocess
import sys
import tempfile
import threading
from typing import Any, List, Optional, TextIO

from ._cli import candidate_paths, tool_path

# Events kept by PyTorch's history ring (oldest dropped first). A training
# step of a mid-sized model makes tens of thousands; each costs a few hundred
# bytes of host memory without stack traces.
DEFAULT_MAX_ENTRIES = 1_000_000


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python3 -m vpmm.estimate",
        description="Run a PyTorch script with memory history recording and compare PyTorch's "
                    "reserved peak with what libvpmm would map, replaying the same allocations.",
        epilog="Everything after SCRIPT is passed to the script.")
    p.add_argument("--snapshot", metavar="FILE",
                   help="estimate a recorded snapshot (.pickle or .pickle.gz) instead of running a script")
    p.add_argument("--keep-snapshot", metavar="PATH",
                   help="write the recorded snapshot here (default: a temporary file, removed)")
    p.add_argument("--plot", metavar="OUT.svg", help="also draw the three curves over the run")
    p.add_argument("--max-entries", type=int, default=DEFAULT_MAX_ENTRIES,
                   help=f"events PyTorch's history ring keeps (default {DEFAULT_MAX_ENTRIES})")
    p.add_argument("--device", type=int, help="the device whose allocations to replay "
                   "(default: the one with the most events)")
    p.add_argument("script", nargs="?", metavar="SCRIPT", help="the PyTorch script to run")
    p.add_argument("args", nargs=argparse.REMAINDER, metavar="ARGS", help="its arguments")
    return p


def replay(snapshot: str, plot: Optional[str] = None, device: Optional[int] = None,
           out: Optional[TextIO] = None) -> int:
    """Replays `snapshot` with the `vpmm` command and prints the peaks table
    (and writes `plot`). Returns the command's exit status."""
    out = out or sys.stdout
    tool = tool_path()
    if tool is None:
        print("vpmm.estimate: the vpmm command is not installed with this package and no build "
              "directory has one (tried " + ", ".join(candidate_paths()) + "); install with "
              "`pip install .` at the root of the libvpmm source tree, or set VPMM_TOOL",
              file=sys.stderr)
        return 2
    cmd = [tool, "replay", "--backend", "host", "--summary"]
    if device is not None:
        cmd += ["--device", str(device)]
    tmpdir = tempfile.mkdtemp(prefix="vpmm-estimate-") if plot else None
    timeline = os.path.join(tmpdir, "timeline.csv") if tmpdir else None
    try:
        if timeline:
            cmd += ["--timeline", timeline]
        r = subprocess.run(cmd + [snapshot], stdout=subprocess.PIPE, text=True)
        out.write(r.stdout)
        out.flush()
        if r.returncode != 0 or not plot:
            return r.returncode
        r = subprocess.run([tool, "plot", timeline, "-o", plot])
        if r.returncode == 0:
            print(f"plot: {plot}", file=out)
        return r.returncode
    finally:
        if tmpdir:
            for f in os.listdir(tmpdir):
                os.unlink(os.path.join(tmpdir, f))
            os.rmdir(tmpdir)


class Recorder:
    """Turns recording on, and dumps the snapshot exactly once: at the end of
    the script, at interpreter exit, or at SIGTERM/SIGINT."""

    def __init__(self, torch: Any, path: str, max_entries: int) -> None:
        self.torch = torch
        self.path = path
        self.max_entries = max_entries
        self.dumped = False
        self.lock = threading.Lock()

    def start(self) -> None:
        """Recording on; the dump registered for exit and SIGTERM/SIGINT."""
        mem = self.torch.cuda.memory
        # The caching allocator applies the setting to the per-device
        # allocators it has: make them exist first (torch.cuda.init is
        # what the first CUDA call would do anyway).
        self.torch.cuda.init()
        try:
            # No stack traces: the replay needs sizes, addresses and streams
            # only, and capturing a stack per allocation slows the script.
            mem._record_memory_history(enabled="all", context=None, max_entries=self.max_entries)
        except TypeError:
            mem._record_memory_history(max_entries=self.max_entries)
        atexit.register(self.dump)
        for sig in (signal.SIGTERM, signal.SIGINT):
            if signal.getsignal(sig) in (signal.SIG_DFL, signal.default_int_handler):
                signal.signal(sig, self._on_signal)

    def _on_signal(self, signum, frame) -> None:
        # Unwinds the script on the main thread; run() dumps on the way out.
        raise SystemExit(128 + signum)

    def dump(self) -> bool:
        """Writes the snapshot and stops recording; False when done before."""
        with self.lock:
            if self.dumped:
                return False
            self.dumped = True
        try:
            self.torch.cuda.synchronize()
        except Exception:  # a failed device still has a history worth dumping
            pass
        self.torch.cuda.memory._dump_snapshot(self.path)
        try:
            self.torch.cuda.memory._record_memory_history(enabled=None)
        except Exception:
            pass
        return True


def _join_script_threads() -> None:
    # What the interpreter does before exiting: wait for non-daemon threads,
    # whose allocations belong to the run.
    me = threading.current_thread()
    for t in threading.enumerate():
        if t is not me and not t.daemon and t is not threading.main_thread():
            t.join()


def _events_per_device(path: str) -> List[int]:
    import pickle  # the file was written just now by this process's torch
    with open(path, "rb") as f:
        snap = pickle.load(f)
    return [len(t) for t in snap.get("device_traces", [])]


def run_script(script: str, args: List[str], snapshot: str, max_entries: int) -> int:
    """Runs the script with recording on and dumps `snapshot`. Returns the
    script's exit status."""
    try:
        import torch
    except ImportError as e:
        print(f"vpmm.estimate: running a script needs PyTorch ({e}); estimate a recorded snapshot "
              "with --snapshot FILE instead", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("vpmm.estimate: torch.cuda.is_available() is False: PyTorch's CUDA allocator, whose "
              "history this records, is not in use", file=sys.stderr)
        return 2
    rec = Recorder(torch, snapshot, max_entries)
    rec.start()
    status = 0
    saved_argv = sys.argv
    sys.argv = [script] + list(args)
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as e:
        status = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if e.code is not None and not isinstance(e.code, int):
            print(e.code, file=sys.stderr)
    except BaseException:
        import traceback
        traceback.print_exc()
        status = 1
    finally:
        sys.argv = saved_argv
        try:
            _join_script_threads()
        except KeyboardInterrupt:
            pass
        rec.dump()
    return status


def main(argv: Optional[List[str]] = None) -> int:
    """The command line (see the module's docstring); returns the exit status."""
    p = _parser()
    a = p.parse_args(argv)
    if bool(a.snapshot) == bool(a.script):
        p.error("give either SCRIPT [ARGS...] or --snapshot FILE")
    if a.max_entries <= 0:
        p.error("--max-entries wants a number > 0")
    if a.snapshot:
        if not os.path.isfile(a.snapshot):
            p.error(f"--snapshot {a.snapshot}: no such file")
        return replay(a.snapshot, a.plot, a.device)
    if not os.path.isfile(a.script):
        p.error(f"{a.script}: no such file")
    keep = a.keep_snapshot
    tmpdir = None
    if keep:
        snapshot = keep
    else:
        tmpdir = tempfile.mkdtemp(prefix="vpmm-estimate-")
        snapshot = os.path.join(tmpdir, "snapshot.pickle")
    try:
        status = run_script(a.script, a.args, snapshot, a.max_entries)
        if not os.path.exists(snapshot):
            return status or 2
        print(f"\n== vpmm.estimate: {a.script}" + (f" (exit status {status})" if status else ""))
        try:
            full = [n for n in _events_per_device(snapshot) if n >= a.max_entries]
        except Exception:
            full = []
        if full:
            print(f"  warning: PyTorch's history ring filled ({a.max_entries} events): the oldest were "
                  "dropped and count as live at the start; raise --max-entries")
        rc = replay(snapshot, a.plot, a.device)
        if keep:
            print(f"snapshot: {keep} (vpmm replay {keep})")
        return status or rc
    finally:
        if tmpdir:
            for f in os.listdir(tmpdir):
                os.unlink(os.path.join(tmpdir, f))
            os.rmdir(tmpdir)


if __name__ == "__main__":
    sys.exit(main())
