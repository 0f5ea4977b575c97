"""vpmm.ledger (docs/ledger.md) from Python: a pool joins through VPMM_LEDGER
or its ledger option,
vpmm.ledger() lists it and a member in another process, set_ledger_budget
bounds them, and a killed member's share comes back (host backend)."""
import os
import signal
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import vpmm  # noqa: E402

MiB = 1 << 20
CHILD = """
import os, sys, vpmm
pool = vpmm.Pool(backend="host", page_size=64 << 10)
p = pool.malloc(8 << 20)
print("ready", flush=True)
sys.stdin.read()
"""


class LedgerTest(unittest.TestCase):
    def setUp(self) -> None:
        self.name = f"vt-py-ledger-{os.getpid()}"
        try:
            vpmm.remove_ledger(self.name)
        except vpmm.InvalidArgument:
            pass
        os.environ["VPMM_LEDGER"] = self.name

    def tearDown(self) -> None:
        os.environ.pop("VPMM_LEDGER", None)
        try:
            vpmm.remove_ledger(self.name)
        except vpmm.InvalidArgument:
            pass

    def test_the_ledger_option_joins_without_the_environment(self) -> None:
        os.environ.pop("VPMM_LEDGER", None)
        pool = vpmm.Pool(backend="host", use_env=False, page_size=64 << 10, ledger=self.name)
        self.assertEqual(pool.config()["ledger"], self.name)
        pool.malloc(2 * MiB)
        self.assertEqual(vpmm.ledger(self.name)["admitted_bytes"], 2 * MiB)
        pool.close()
        plain = vpmm.Pool(backend="host", use_env=False, page_size=64 << 10)
        self.assertIsNone(plain.config()["ledger"])
        plain.close()
        with self.assertRaises(vpmm.InvalidArgument):
            vpmm.Pool(backend="host", use_env=False, ledger="../etc")

    def test_members_budget_and_a_killed_member(self) -> None:
        pool = vpmm.Pool(backend="host", page_size=64 << 10)
        vpmm.set_ledger_budget(self.name, 0, 16 * MiB)
        pool.malloc(4 * MiB)
        info = vpmm.ledger(self.name)
        self.assertEqual(info["budget_bytes"], 16 * MiB)
        self.assertEqual(info["admitted_bytes"], 4 * MiB)
        self.assertEqual([m["pid"] for m in info["members"]], [os.getpid()])
        child = subprocess.Popen([sys.executable, "-c", CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 env=dict(os.environ, PYTHONPATH=os.path.dirname(os.path.abspath(__file__))))
        try:
            self.assertEqual(child.stdout.readline().strip(), b"ready")
            info = vpmm.ledger(self.name)
            self.assertEqual(sorted(m["pid"] for m in info["members"]), sorted([os.getpid(), child.pid]))
            self.assertEqual(info["admitted_bytes"], 12 * MiB)
            with self.assertRaises(vpmm.OutOfMemory) as e:
                pool.malloc(8 * MiB)
            self.assertIn(f"pid {child.pid}", str(e.exception))
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait()
            child.stdin.close()
            child.stdout.close()
        info = vpmm.ledger(self.name)  # reading is looking: the dead member is reclaimed
        self.assertEqual(len(info["members"]), 1)
        pool.malloc(8 * MiB)
        pool.close()
        self.assertEqual(vpmm.ledger(self.name)["admitted_bytes"], 0)

    def test_members_show_their_ordinal_and_the_device_identity(self) -> None:
        os.environ.pop("VPMM_LEDGER", None)
        # The host backend's identity is the boot id, its ordinal mixed in:
        # ordinals 0 and 2 are two devices (a GPU's UUID would be one).
        a = vpmm.Pool(backend="host", use_env=False, page_size=64 << 10, ledger=self.name)
        b = vpmm.Pool(backend="host", use_env=False, page_size=64 << 10, ledger=self.name, device=2)
        a.malloc(2 * MiB)
        info = vpmm.ledger(self.name)
        self.assertEqual([m["ordinal"] for m in info["members"]], [0, 2])
        self.assertEqual([m["device"] for m in info["members"]], [0, 1])
        ids = [m["device_id"] for m in info["members"]]
        self.assertNotIn(None, ids)
        self.assertNotEqual(ids[0], ids[1])
        self.assertEqual(info["device_id"], ids[0])
        self.assertEqual(info["n_devices"], 2)
        with open("/proc/sys/kernel/random/boot_id") as f:
            self.assertEqual(ids[0], f.read().strip())  # ordinal 0 leaves the boot id as it is
        self.assertEqual(vpmm.ledger(self.name, device=1)["device_id"], ids[1])
        self.assertIsNone(vpmm.ledger(self.name, device=5)["device_id"])
        tool = os.environ.get("VPMM_TOOL")
        if tool:
            # `vpmm ledger NAME`: the budget's line names the identity, each
            # member its ordinal and its device's identity.
            out = subprocess.run([tool, "ledger", self.name], capture_output=True, text=True, check=True).stdout
            lines = out.splitlines()
            self.assertIn(f"  device 0 ({ids[0]}) budget: ", out)
            header = next(l for l in lines if l.strip().startswith("slot"))
            self.assertIn(" ordinal ", header)
            self.assertTrue(header.endswith("device identity"))
            rows = [l.split() for l in lines[lines.index(header) + 1:]]
            self.assertEqual([(r[2], r[3], r[-1]) for r in rows], [("0", "0", ids[0]), ("1", "2", ids[1])])
        a.close()
        b.close()

    def test_errors(self) -> None:
        with self.assertRaises(vpmm.InvalidArgument):
            vpmm.ledger("no-such-ledger-" + str(os.getpid()))
        with self.assertRaises(vpmm.InvalidArgument):
            vpmm.ledger("../bad")


if __name__ == "__main__":
    unittest.main()
