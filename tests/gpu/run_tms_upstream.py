"""torch_memory_saver's own example programs, unchanged, against the libvpmm
drop-in, run the way TMS's own harness runs them.

The upstream files are not part of this tree (we vendor nothing we did not
write): they are read from a directory laid out like TMS's repository
(default .tms_upstream/ at the root of the tree, git-ignored):
    test/test_examples.py    TMS's harness (pytest style)
    test/examples/*.py       the examples it imports
    examples/*.py            the old stand-alone example scripts (--root-examples)

Every run is one test function of test_examples.py with one of its
parametrised hook modes, called in a process of its own: the harness's own
code then does what it always does (change_env for TMS_INIT_ENABLE & co.,
configure_subprocess() around the spawn in hook mode "preload", a spawned
child running the example, success read from its queue or exit status).
This script only decides what not to run, and why:
  - skipped: the test's own skipif says so here (one GPU: every multi-device
    run; XPU-only runs);
  - left out: the example reaches into TMS's private implementation (its C
    library's symbols through torch_memory_saver._impl._binary_wrapper.cdll,
    or tms_* functions of the preloaded library), which no drop-in has;
  - not vendored: an example module the harness imports is missing.
PyTorch must be installed; pytest is optional (a stand-in records the marks
test_examples.py uses). The drop-in (bindings/python/compat) and the vpmm
package go on PYTHONPATH; VPMM_LIBRARY names the libvpmm to use, with
libvpmm_preload.so next to it.

Usage: run_tms_upstream.py [--upstream DIR] [--only SUBSTRING] [--timeout S]
                           [--deadline S] [--root-examples]
Prints one line per run and a table; exits 1 when a run that was run failed
for another reason than a known upstream defect, else 0; 77 when the
upstream files are missing."""
import argparse
import inspect
import json
import os
import re
import signal
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
BINDING = os.path.join(ROOT, "bindings", "python")
COMPAT = os.path.join(BINDING, "compat")

# Calls into TMS's private implementation: its C library's symbols (through
# _impl._binary_wrapper.cdll or dlsym of tms_* names) or its internal objects.
# (A string naming a tms_ function ends in a letter or digit; "tms_disk_backup_"
# is a temporary directory's prefix.)
PRIVATE = [re.compile(p) for p in (r"\._impl\b", r"_binary_wrapper", r"\bcdll\b",
                                   r"[\"']tms_\w*[A-Za-z0-9][\"']")]

# Failures that happen whatever the allocator, with the reason; a run that
# fails with this text is reported as such, not hidden.
UPSTREAM_DEFECTS = {
    "test_training_engine": ("could not infer output dtype",
                             "its last step calls mean() on a uint8 tensor, which PyTorch refuses "
                             "(and expects 42 after adding 1 to 42); every step before it ran"),
}


_PYTEST_STAND_IN = '''"""Written by run_tms_upstream.py where pytest is missing: the marks
test_examples.py uses, recorded on the function as pytest does."""


class Mark:
    def __init__(self, name, args, kwargs):
        self.name, self.args, self.kwargs = name, args, kwargs


class _MarkFactory:
    def __getattr__(self, name):
        def make(*args, **kwargs):
            def apply(fn):
                fn.pytestmark = getattr(fn, "pytestmark", []) + [Mark(name, args, kwargs)]
                return fn
            return apply
        return make


mark = _MarkFactory()
'''

_MISSING_EXAMPLE = '''"""Written by run_tms_upstream.py: examples/{name}.py is not in the upstream
directory; test_examples.py imports it with the others."""
not_vendored = True


def __getattr__(attr):
    def missing(*args, **kwargs):
        raise RuntimeError("examples.{name}." + attr + " is not vendored")
    missing.not_vendored = True
    missing.__module__ = __name__
    missing.__qualname__ = attr
    return missing
'''


def make_shim(upstream, shim):
    """A directory for the runs' PYTHONPATH: a pytest stand-in where pytest is
    missing, and a stand-in for every examples.NAME that test_examples.py
    imports but the upstream directory lacks (examples is a namespace
    package, so both directories make it up). Every process of a run, the
    harness's spawned child included, imports test_examples.py."""
    try:
        import pytest  # noqa: F401
    except ImportError:
        with open(os.path.join(shim, "pytest.py"), "w") as f:
            f.write(_PYTEST_STAND_IN)
    examples = os.path.join(upstream, "test", "examples")
    with open(os.path.join(upstream, "test", "test_examples.py")) as f:
        harness = f.read()
    m = re.search(r"from examples import \(?([\w\s,]+)\)?", harness)
    names = [n.strip() for n in m.group(1).split(",") if n.strip()] if m else []
    missing = [n for n in names if not os.path.exists(os.path.join(examples, n + ".py"))]
    if missing and os.path.exists(os.path.join(examples, "__init__.py")):
        print(f"note: examples/ is a regular package; {missing} cannot be stood in for")
        return missing
    os.makedirs(os.path.join(shim, "examples"), exist_ok=True)
    for n in missing:
        with open(os.path.join(shim, "examples", n + ".py"), "w") as f:
            f.write(_MISSING_EXAMPLE.replace("{name}", n))
    return missing


def load_harness(upstream):
    """test_examples.py imported as TMS's pytest run would (test/ on sys.path;
    the shim directory and the drop-in come with PYTHONPATH)."""
    test_dir = os.path.join(upstream, "test")
    if test_dir not in sys.path:
        sys.path.insert(0, test_dir)
    import importlib
    return importlib.import_module("test_examples")


def _marks(fn, name):
    return [m for m in getattr(fn, "pytestmark", []) if m.name == name]


def _example_of(test_fn):
    """The example function a harness test hands to _test_core."""
    src = inspect.getsource(test_fn)
    m = re.search(r"_test_core\(\s*(\w+)\.(\w+)", src)
    if not m:
        return None
    module = test_fn.__globals__.get(m.group(1))
    return getattr(module, m.group(2), None) if module is not None else None


def _reached_source(fn, seen=None):
    """The source of fn and of every function of its module it refers to."""
    seen = set() if seen is None else seen
    if fn in seen or not inspect.isfunction(fn):
        return ""
    seen.add(fn)
    try:
        out = inspect.getsource(fn)
    except (OSError, TypeError):
        return ""
    codes = [fn.__code__]
    while codes:
        code = codes.pop()
        for const in code.co_consts:
            if inspect.iscode(const):
                codes.append(const)
        for name in code.co_names:
            other = fn.__globals__.get(name)
            if inspect.isfunction(other) and other.__module__ == fn.__module__:
                out += _reached_source(other, seen)
    return out


def list_runs(harness):
    """Every (test, hook mode) run of the harness, with what decides it."""
    runs = []
    for name, fn in vars(harness).items():
        if not (name.startswith("test_") and inspect.isfunction(fn)):
            continue
        skip = next((m.kwargs.get("reason", "skipif") for m in _marks(fn, "skipif") if m.args and m.args[0]),
                    None)
        params = [None]
        for m in _marks(fn, "parametrize"):
            params = list(m.args[1])
        example = _example_of(fn)
        src = inspect.getsource(fn)
        env = dict(re.findall(r"change_env\(\s*\"(\w+)\"\s*,\s*\"([^\"]*)\"\s*\)", src))
        for p in params:
            fixed = re.search(r"hook_mode=\"(\w+)\"", src)
            mode = p or (fixed.group(1) if fixed else "?")
            run = {"id": f"{name}[{p}]" if p else name, "test": name, "param": p, "hook_mode": mode,
                   "example": f"{example.__module__}.{example.__qualname__}" if example else "?",
                   "env": env, "status": "run", "note": ""}
            if skip:
                run["status"], run["note"] = "skipped", skip
            elif example is None or getattr(example, "not_vendored", False):
                run["status"], run["note"] = "not vendored", f"{run['example']} is not in the upstream directory"
            else:
                hits = sorted({m.group(0) for pat in PRIVATE for m in pat.finditer(_reached_source(example))})
                if hits:
                    run["status"] = "left out"
                    run["note"] = "reaches TMS's private implementation: " + ", ".join(hits)
            runs.append(run)
    return runs


def run_one(harness, run_id):
    """Call one harness test as pytest would: the harness does the rest."""
    for run in list_runs(harness):
        if run["id"] == run_id:
            fn = getattr(harness, run["test"])
            fn(run["param"]) if run["param"] is not None else fn()
            return 0
    print(f"no run {run_id}")
    return 2


def _child_env(shim):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([COMPAT, BINDING, shim] +
                                        ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env["PYTHONUNBUFFERED"] = "1"
    env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    return env


def _spawned_children(session):
    """Pids of the harness's spawned example processes in a session."""
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read()
        except OSError:
            continue
        if int(fields[3]) == session and b"spawn_main" in cmdline:
            out.append(int(pid))
    return out


def _run_process(cmd, env, timeout, cwd=None):
    """(exit status, 'timeout' or 'orphaned', output). The process gets a
    session of its own, ended whole on timeout (the harness's spawned child
    included). In hook mode "torch" the harness waits on its child's queue
    with no timeout: when the child is gone and the harness still waits
    after a grace period, the run is ended as 'orphaned' rather than
    holding the GPU until the timeout."""
    with tempfile.TemporaryFile("w+") as log:
        p = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=log, stderr=subprocess.STDOUT, text=True,
                             start_new_session=True)
        deadline = time.time() + timeout
        seen_child, gone_since, status = False, None, None
        while p.poll() is None:
            if time.time() > deadline:
                status = "timeout"
                break
            alive = bool(_spawned_children(p.pid))
            seen_child |= alive
            if seen_child and not alive:
                gone_since = gone_since or time.time()
                if time.time() - gone_since > 15:
                    status = "orphaned"
                    break
            else:
                gone_since = None
            time.sleep(0.5)
        if status is not None:
            os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        log.seek(0)
        return (status or p.returncode), log.read()


def _root_example_runs(upstream):
    d = os.path.join(upstream, "examples")
    names = sorted(f for f in os.listdir(d) if f.endswith(".py")) if os.path.isdir(d) else []
    out = []
    for f in names:
        for mode in ("plain", "preloaded"):
            out.append({"id": f"examples/{f}[{mode}]", "test": f, "param": mode, "hook_mode": mode,
                        "example": f"examples/{f}", "env": {}, "status": "run", "note": "", "script": True})
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--upstream", default=os.path.join(ROOT, ".tms_upstream"))
    ap.add_argument("--only", default="")
    ap.add_argument("--timeout", type=float, default=240)
    ap.add_argument("--deadline", type=float, default=1e9, help="seconds for all runs together")
    ap.add_argument("--root-examples", action="store_true")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    ap.add_argument("--list-json", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    upstream = os.path.abspath(args.upstream)
    if not os.path.exists(os.path.join(upstream, "test", "test_examples.py")):
        print(f"SKIP: no TMS harness at {upstream}/test/test_examples.py")
        return 77
    if args.one:
        return run_one(load_harness(upstream), args.one)

    if args.list_json:
        print("RUNS " + json.dumps(list_runs(load_harness(upstream))))
        return 0
    shim = tempfile.mkdtemp(prefix="tms-upstream-shim-")
    try:
        return run_all(args, upstream, shim)
    finally:
        shutil.rmtree(shim, ignore_errors=True)


def run_all(args, upstream, shim):
    missing = make_shim(upstream, shim)
    if missing:
        print(f"not vendored: examples {', '.join(missing)} (their runs are reported as such)")
    env = _child_env(shim)
    # The listing imports PyTorch and the drop-in: a process of its own, so
    # this one stays free of both (and of any CUDA state).
    rc, out = _run_process([sys.executable, __file__, "--upstream", upstream, "--list-json"], env, 300)
    line = next((l for l in out.splitlines() if l.startswith("RUNS ")), None)
    if rc != 0 or line is None:
        print(f"FAIL: the harness could not be loaded (exit {rc}):\n{out[-4000:]}")
        return 1
    runs = json.loads(line[5:])
    if args.root_examples:
        runs += _root_example_runs(upstream)
    start = time.time()
    for run in runs:
        if args.only and args.only not in run["id"]:
            run["status"], run["note"] = "not selected", ""
            continue
        if run["status"] != "run":
            print(f"{run['status']:<12} {run['id']}: {run['note']}", flush=True)
            continue
        left = args.deadline - (time.time() - start)
        if left < 20:
            run["status"], run["note"] = "not run", "out of time (--deadline)"
            print(f"not run      {run['id']}: out of time", flush=True)
            continue
        t0 = time.time()
        if run.get("script"):
            script_env = dict(env)
            if run["param"] == "preloaded":
                # what configure_subprocess() gives a child
                code = ("import json, os, torch_memory_saver as t\n"
                        "with t.configure_subprocess():\n"
                        "    print('ENV ' + json.dumps({k: os.environ[k] for k in ('LD_PRELOAD', 'VPMM_LIBRARY')}))")
                r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
                line = next((l for l in r.stdout.splitlines() if l.startswith("ENV ")), None)
                if line is None:
                    run["status"], run["note"] = "FAIL", "configure_subprocess() failed: " + r.stderr[-300:]
                    print(f"FAIL         {run['id']}: {run['note']}", flush=True)
                    continue
                script_env.update(json.loads(line[4:]))
            rc, out = _run_process([sys.executable, os.path.join("examples", run["test"])], script_env,
                                   min(args.timeout, left), cwd=upstream)
        else:
            rc, out = _run_process([sys.executable, __file__, "--upstream", upstream, "--one", run["id"]], env,
                                   min(args.timeout, left))
        run["seconds"] = round(time.time() - t0, 1)
        if rc == 0:
            run["status"] = "pass"
        else:
            defect = UPSTREAM_DEFECTS.get(run["test"])
            if defect and defect[0] in out:
                run["status"], run["note"] = "upstream bug", defect[1]
            else:
                run["status"] = "FAIL"
                run["note"] = {"timeout": f"timed out after {args.timeout:.0f} s",
                               "orphaned": "the example's process ended without reporting to the harness"
                               }.get(rc, f"exit {rc}")
        print(f"{run['status']:<12} {run['id']} ({run['seconds']} s) {run['note']}", flush=True)
        if run["status"] != "pass":
            print("    " + "\n    ".join(out.strip().splitlines()[-40:]), flush=True)

    print("\n| run | hook mode | example | result | seconds | note |\n|---|---|---|---|---|---|")
    for run in runs:
        if run["status"] == "not selected":
            continue
        print(f"| {run['id']} | {run['hook_mode']} | {run['example']} | {run['status']} | "
              f"{run.get('seconds', '')} | {run['note']} |")
    counts = {}
    for run in runs:
        counts[run["status"]] = counts.get(run["status"], 0) + 1
    print("\n" + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())))
    return 1 if counts.get("FAIL") else 0


if __name__ == "__main__":
    sys.exit(main())
