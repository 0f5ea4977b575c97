"""python3 -m vpmm.estimate without a GPU: estimating recorded snapshots
(the shipped traces), and the run-a-script path against a stand-in `torch`
module that records what the estimator calls and "dumps" a shipped snapshot:
threads still running when the script returns, sys.exit, SIGTERM, a script
that raises, and PyTorch missing.

Environment (meson sets it): VPMM_LIBRARY, VPMM_TOOL (the vpmm command),
PYTHONPATH with bindings/python."""
import gzip
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
TRAINING = os.path.join(ROOT, "traces", "training.pickle.gz")
SYNTHETIC = os.path.join(ROOT, "tests", "data", "synthetic_snapshot.pickle.gz")

# A stand-in for the parts of torch the estimator uses. Each call is logged
# (one line in $FAKE_TORCH_LOG); _dump_snapshot writes the synthetic
# snapshot, so the replay after it is real.
FAKE_TORCH = '''
import os, threading
_log = os.environ["FAKE_TORCH_LOG"]
def _note(s):
    with open(_log, "a") as f:
        f.write(s + "\\n")
class _Memory:
    def _record_memory_history(self, enabled="all", context="all", stacks="all", max_entries=0):
        _note(f"record enabled={enabled} context={context} max_entries={max_entries}")
    def _dump_snapshot(self, path):
        import gzip, shutil
        _note(f"dump threads={threading.active_count()}")
        with gzip.open(os.environ["FAKE_TORCH_SNAPSHOT"], "rb") as src, open(path, "wb") as dst:
            shutil.copyfileobj(src, dst)
class _Cuda:
    memory = _Memory()
    def is_available(self):
        return os.environ.get("FAKE_TORCH_CUDA", "1") == "1"
    def synchronize(self):
        _note("synchronize")
    def init(self):
        _note("init")
cuda = _Cuda()
'''


class Estimate(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="vpmm-estimate-test-")
        self.log = os.path.join(self.tmp, "torch.log")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def run_estimate(self, *args, fake_torch=True, cuda=True, timeout=300):
        env = dict(os.environ)
        paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
        if fake_torch:
            d = os.path.join(self.tmp, "fake")
            os.makedirs(os.path.join(d, "torch"), exist_ok=True)
            with open(os.path.join(d, "torch", "__init__.py"), "w") as f:
                f.write(FAKE_TORCH)
            paths.insert(0, d)
        else:
            # A directory that shadows any real torch with an import error.
            d = os.path.join(self.tmp, "notorch")
            os.makedirs(os.path.join(d, "torch"), exist_ok=True)
            with open(os.path.join(d, "torch", "__init__.py"), "w") as f:
                f.write("raise ImportError('No module named torch (test)')\n")
            paths.insert(0, d)
        env["PYTHONPATH"] = os.pathsep.join(paths)
        env["FAKE_TORCH_LOG"] = self.log
        env["FAKE_TORCH_SNAPSHOT"] = SYNTHETIC
        env["FAKE_TORCH_CUDA"] = "1" if cuda else "0"
        return subprocess.run([sys.executable, "-m", "vpmm.estimate", *args], cwd=self.tmp, env=env,
                              capture_output=True, text=True, timeout=timeout)

    def script(self, body):
        path = os.path.join(self.tmp, "job.py")
        with open(path, "w") as f:
            f.write(textwrap.dedent(body))
        return path

    def calls(self):
        with open(self.log) as f:
            return f.read().splitlines()

    def assert_table(self, out):
        for row in ("PyTorch reserved", "libvpmm mapped", "requested"):
            self.assertIn(row, out)
        self.assertRegex(out, r"libvpmm would map .* (less|more) than PyTorch reserved at its peak")

    # -- recorded snapshots ------------------------------------------------

    def test_snapshot_table(self):
        r = self.run_estimate("--snapshot", TRAINING)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assert_table(r.stdout)
        # The figures of the shipped training run (host replay, the hooks' rounding).
        m = re.search(r"libvpmm mapped\s+\S+ \S+\s+([0-9.]+)x", r.stdout)
        self.assertIsNotNone(m, r.stdout)
        self.assertLess(float(m.group(1)), 0.9)
        self.assertIn("9.2 GiB", r.stdout)

    def test_snapshot_plot(self):
        svg = os.path.join(self.tmp, "out.svg")
        r = self.run_estimate("--snapshot", TRAINING, "--plot", svg)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(svg) as f:
            text = f.read()
        for label in ("PyTorch reserved (peak 9.2 GiB)", "mapped (peak", "live (peak"):
            self.assertIn(label, text)

    def test_snapshot_errors(self):
        r = self.run_estimate("--snapshot", os.path.join(self.tmp, "missing.pickle"))
        self.assertEqual(r.returncode, 2)
        self.assertIn("no such file", r.stderr)
        r = self.run_estimate()
        self.assertEqual(r.returncode, 2)
        self.assertIn("either SCRIPT", r.stderr)
        empty = os.path.join(self.tmp, "empty.pickle")
        open(empty, "wb").close()
        r = self.run_estimate("--snapshot", empty)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("vpmm replay", r.stderr)

    # -- running a script ----------------------------------------------------

    def test_script_with_threads(self):
        # Allocations of a non-daemon thread still running when the script's
        # main code returns belong to the run: the dump waits for the thread.
        job = self.script("""
            import sys, threading, time
            assert sys.argv[1:] == ["--steps", "3"], sys.argv
            def work():
                time.sleep(0.5)
                open("thread_done", "w").close()
            threading.Thread(target=work).start()
            print("job main done")
        """)
        r = self.run_estimate(job, "--steps", "3")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("job main done", r.stdout)
        self.assertTrue(os.path.exists(os.path.join(self.tmp, "thread_done")))
        calls = self.calls()
        self.assertEqual(calls[0], "init", calls)
        self.assertTrue(calls[1].startswith("record enabled=all context=None"), calls)
        dumps = [c for c in calls if c.startswith("dump")]
        self.assertEqual(dumps, ["dump threads=1"], calls)  # once, after the thread ended
        self.assertIn("== vpmm.estimate", r.stdout)
        self.assert_table(r.stdout)

    def test_script_exit_status_and_keep(self):
        job = self.script("""
            import sys
            sys.exit(3)
        """)
        keep = os.path.join(self.tmp, "kept.pickle")
        r = self.run_estimate("--keep-snapshot", keep, job)
        self.assertEqual(r.returncode, 3, r.stdout + r.stderr)
        self.assert_table(r.stdout)
        self.assertTrue(os.path.getsize(keep) > 0)
        self.assertEqual(len([c for c in self.calls() if c.startswith("dump")]), 1)

    def test_script_sigterm(self):
        job = self.script("""
            import os, signal, time
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(30)
            print("not reached")
        """)
        r = self.run_estimate(job)
        self.assertEqual(r.returncode, 128 + 15, r.stdout + r.stderr)
        self.assertNotIn("not reached", r.stdout)
        self.assertEqual(len([c for c in self.calls() if c.startswith("dump")]), 1)
        self.assert_table(r.stdout)

    def test_script_raises(self):
        job = self.script("""
            raise RuntimeError("boom")
        """)
        r = self.run_estimate(job)
        self.assertEqual(r.returncode, 1)
        self.assertIn("RuntimeError: boom", r.stderr)
        self.assert_table(r.stdout)

    def test_without_torch_or_cuda(self):
        job = self.script("print('x')\n")
        r = self.run_estimate(job, fake_torch=False)
        self.assertEqual(r.returncode, 2)
        self.assertIn("needs PyTorch", r.stderr)
        self.assertIn("--snapshot", r.stderr)
        r = self.run_estimate(job, cuda=False)
        self.assertEqual(r.returncode, 2)
        self.assertIn("is_available", r.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
