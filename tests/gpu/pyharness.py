"""Shared by the Python GPU tests: skip (exit 77) with a reason when the
framework or the device is missing, and run each case in a process of its
own (the allocator and the default pools are per process; an OOM case must
not leave memory behind for the next one). Usage, in a test file:

    CASES = {"name": function, ...}
    if __name__ == "__main__": sys.exit(pyharness.main(__file__, CASES, needs="torch"))

A case passes by returning; a failed assert or exception fails it. A probe
(named in main's `probes`) measures what a framework does rather than
asserting it: when it returns, its last line is reported as INFO and it is
not counted as passed; it still fails when it raises (its preconditions)."""
import os
import subprocess
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
BINDING = os.path.join(ROOT, "bindings", "python")
COMPAT = os.path.join(BINDING, "compat")
BENCH_TORCH = os.path.join(ROOT, "bench", "torch")
for p in (BINDING, COMPAT, BENCH_TORCH):
    if p not in sys.path:
        sys.path.insert(0, p)


def skip(reason):
    """Exit 77 (meson's SKIP) with the reason on stdout."""
    print("SKIP:", reason)
    sys.exit(77)


class Tally:
    """The pass/fail count of a script-style GPU test (one process, checks in
    order): check() counts a condition, ok() a step whose own assert passed,
    finish() prints "N passed, N failed" and exits 1 on any failure."""

    def __init__(self):
        self.passed = self.failed = 0

    def check(self, cond, what):
        if cond:
            self.passed += 1
        else:
            self.failed += 1
            print("FAIL:", what, flush=True)

    def ok(self):
        self.passed += 1

    def finish(self):
        print(f"{self.passed} passed, {self.failed} failed")
        sys.exit(1 if self.failed else 0)


def jax_gpus_or_skip():
    """JAX's GPU devices; exits 77 (SKIP) with the reason when NumPy or JAX
    cannot be imported or JAX has no GPU. Set XLA_PYTHON_CLIENT_PREALLOCATE
    before calling it if the test leaves the GPU to the pool."""
    try:
        import numpy  # noqa: F401
        import jax
    except ImportError as e:
        skip(f"JAX or NumPy not importable: {e}")
    try:
        gpus = jax.devices("gpu")
    except RuntimeError as e:
        skip(f"JAX has no GPU backend: {e}")
    if not gpus:
        skip("JAX sees no GPU")
    return gpus


def skip_reason(needs):
    """None when the GPU and the framework are usable, else why not."""
    if needs == "torch":
        try:
            import torch
        except ImportError as e:
            return f"torch is not installed ({e})"
        if not torch.cuda.is_available():
            return "no CUDA device visible to torch"
        if not hasattr(torch.cuda, "MemPool") or not hasattr(torch.cuda, "use_mem_pool"):
            return f"torch {torch.__version__} has no torch.cuda.MemPool/use_mem_pool (needs >= 2.5)"
        if torch.version.cuda is None:
            return "torch is not a CUDA build"
    elif needs == "cupy":
        try:
            import cupy
        except ImportError as e:
            return f"cupy is not installed ({e})"
        try:
            if cupy.cuda.runtime.getDeviceCount() < 1:
                return "no CUDA device visible to cupy"
        except Exception as e:  # CUDARuntimeError without a driver/device
            return f"no CUDA device visible to cupy ({e})"
    if not os.environ.get("VPMM_LIBRARY") and not os.path.exists(os.path.join(ROOT, "build", "libvpmm.so.1")):
        return "VPMM_LIBRARY is not set and there is no build/libvpmm.so.1"
    return None


def main(path, cases, needs, probes=()):
    if len(sys.argv) == 3 and sys.argv[1] == "--case":
        try:
            cases[sys.argv[2]]()
        except BaseException:
            traceback.print_exc()
            return 1
        return 0
    reason = skip_reason(needs)
    if reason:
        print(f"SKIP: {reason}")
        return 77
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([BINDING, COMPAT, BENCH_TORCH] +
                                        ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env.pop("PYTORCH_CUDA_ALLOC_CONF", None)  # expandable segments do not mix with MemPool routing
    only = os.environ.get("VPMM_TEST_CASE")
    failed = passed = informed = 0
    for name in cases:
        if only and name != only:
            continue
        t0 = time.time()
        try:
            p = subprocess.run([sys.executable, path, "--case", name], env=env, capture_output=True,
                               text=True, timeout=400)
            rc, out = p.returncode, p.stdout + p.stderr
        except subprocess.TimeoutExpired as e:
            rc, out = -1, f"timed out after 400 s\n{e.stdout or ''}{e.stderr or ''}"
        if rc == 0:
            last = [l for l in p.stdout.splitlines() if l.strip()]
            if name in probes:
                informed += 1
                print(f"INFO {name} ({time.time() - t0:.1f} s, a probe: not counted){': ' + last[-1] if last else ''}")
                continue
            passed += 1
            print(f"ok   {name} ({time.time() - t0:.1f} s){': ' + last[-1] if last else ''}")
        else:
            failed += 1
            print(f"FAIL {name} (exit {rc}):\n    " + out[-4000:].replace("\n", "\n    "))
    print(f"{passed} passed, {failed} failed" + (f" ({informed} probes reported as INFO)" if informed else ""))
    return 1 if failed or not passed else 0
