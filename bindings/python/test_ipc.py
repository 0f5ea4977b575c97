"""vpmm.ipc on the host backend: a pickled handle opened in another Python
process (subprocess), over pidfd_getfd and over the exporter's socket;
bytes both ways; pause, free, close and a dropped export as the importer
sees them; Export.send / ipc.recv over a socket pair. No GPU, no framework."""
import ctypes
import json
import os
import pickle
import socket
import subprocess
import sys
import textwrap
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import vpmm  # noqa: E402
import vpmm.ipc as ipc  # noqa: E402

PAGE = 64 << 10
SIZE = 4 * PAGE

# The other process: one JSON command per line on stdin, one JSON answer per
# line on stdout. Its pool is a host pool of its own.
CHILD = textwrap.dedent(r"""
    import ctypes, json, os, pickle, socket, sys
    sys.path.insert(0, sys.argv[1])
    import vpmm, vpmm.ipc as ipc
    pool = vpmm.Pool("host", use_env=False, page_size=64 << 10, va_size=1024 << 16)
    imports = []
    for line in sys.stdin:
        c = json.loads(line)
        out = {}
        try:
            if c["op"] == "open":
                imports.append(pickle.loads(bytes.fromhex(c["handle"])).open(pool))
                out["index"] = len(imports) - 1
            elif c["op"] == "recv":
                s = socket.socket(fileno=os.dup(c["fd"]))
                desc, fds = ipc.recv(s)
                imports.append(ipc.open_descriptor(pool, desc, fds))
                for fd in fds:
                    os.close(fd)
                out["index"] = len(imports) - 1
            elif c["op"] == "read":
                imp = imports[c["index"]]
                out["bytes"] = ctypes.string_at(imp.ptr, imp.size).hex()
            elif c["op"] == "write":
                imp = imports[c["index"]]
                ctypes.memset(imp.ptr, c["value"], imp.size)
            elif c["op"] == "bytes_at":  # n bytes at the exporter's address p, through the import
                imp = imports[c["index"]]
                out["bytes"] = ctypes.string_at(imp.translate(c["ptr"]), c["n"]).hex()
                out["entries"] = len(imp.entries)
            elif c["op"] == "state":
                out["state"] = imports[c["index"]].state
            elif c["op"] == "close":
                imports[c["index"]].close()
        except vpmm.VpmmError as e:
            out["error"] = type(e).__name__
            out["message"] = str(e)
        print(json.dumps(out), flush=True)
""")


class Child:
    def __init__(self, env=None, pass_fds=()):
        e = dict(os.environ)
        e.update(env or {})
        self.p = subprocess.Popen([sys.executable, "-c", CHILD, HERE], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  text=True, env=e, pass_fds=pass_fds)

    def ask(self, **cmd):
        self.p.stdin.write(json.dumps(cmd) + "\n")
        self.p.stdin.flush()
        return json.loads(self.p.stdout.readline())

    def open(self, handle):
        return self.ask(op="open", handle=pickle.dumps(handle).hex())

    def close(self):
        self.p.stdin.close()
        self.p.wait(timeout=30)
        self.p.stdout.close()


def pattern(value):
    return bytes([value]) * SIZE


class IpcTest(unittest.TestCase):
    def setUp(self):
        self.pool = vpmm.Pool("host", use_env=False, exportable=1, page_size=PAGE, va_size=1024 * PAGE)

    def tearDown(self):
        self.pool.close()

    def weights(self, value=0x11):
        p = self.pool.malloc(SIZE, tag="w", host_backup=True)
        ctypes.memset(p, value, SIZE)
        return p

    def test_open_in_another_process_both_transports(self):
        p = self.weights()
        with self.pool.export(p) as ex:
            h = ex.handle()
            for transport in ("pidfd", "socket"):
                child = Child({"VPMM_IPC_TRANSPORT": transport})
                try:
                    r = child.open(h)
                    # pidfd_getfd of one's parent is allowed by Yama's default
                    # scope; a sandbox may still refuse it, and says so.
                    if transport == "pidfd" and r.get("error") == "Unsupported":
                        self.assertIn("pidfd", r["message"])
                        print(f"  pidfd_getfd refused here: {r['message']}")
                        continue
                    self.assertNotIn("error", r, r)
                    i = r["index"]
                    self.assertEqual(bytes.fromhex(child.ask(op="read", index=i)["bytes"]), pattern(0x11))
                    child.ask(op="write", index=i, value=0x22)
                    self.assertEqual(ctypes.string_at(p, SIZE), pattern(0x22))
                    ctypes.memset(p, 0x11, SIZE)
                    self.assertEqual(child.ask(op="state", index=i)["state"], "active")
                    self.assertEqual(ex.importers, 1)
                    child.ask(op="close", index=i)
                    self.assertEqual(ex.importers, 0)
                finally:
                    child.close()
            self.assertGreaterEqual(ex.imports, 1)
        self.pool.free(p)

    def test_pause_free_close_as_the_importer_sees_them(self):
        p = self.weights()
        ex = self.pool.export(p)
        child = Child({"VPMM_IPC_TRANSPORT": "socket"})
        try:
            i = child.open(ex.handle())["index"]
            self.assertTrue(self.pool.pause("w"))
            self.assertEqual(child.ask(op="state", index=i)["state"], "paused")
            self.assertEqual(ex.state, "paused")
            self.assertEqual(self.pool.ipc_stats()["held_by_importers_bytes"], SIZE)
            # The old memory stays readable there; the exporter's resumes elsewhere.
            self.assertEqual(bytes.fromhex(child.ask(op="read", index=i)["bytes"]), pattern(0x11))
            self.assertTrue(self.pool.resume("w"))
            ctypes.memset(p, 0x33, SIZE)
            self.assertEqual(bytes.fromhex(child.ask(op="read", index=i)["bytes"]), pattern(0x11))
            # A paused export no longer opens; a new export does.
            self.assertEqual(child.open(ex.handle())["error"], "WrongState")
            new = self.pool.export(p)
            r = child.open(new.handle())
            self.assertNotIn("error", r, r)
            self.assertEqual(bytes.fromhex(child.ask(op="read", index=r["index"])["bytes"]), pattern(0x33))
            child.ask(op="close", index=i)
            self.assertEqual(self.pool.ipc_stats()["held_by_importers_bytes"], 0)
            # Freeing the memory ends the new export too.
            self.pool.free(p)
            self.assertEqual(child.ask(op="state", index=r["index"])["state"], "freed")
            child.ask(op="close", index=r["index"])
            new.close()
        finally:
            child.close()
            ex.close()

    def test_closed_and_dropped_exports_do_not_open(self):
        p = self.weights()
        ex = self.pool.export(p)
        h = ex.handle()
        ex.close()
        child = Child({"VPMM_IPC_TRANSPORT": "socket"})
        try:
            self.assertEqual(child.open(h)["error"], "WrongState")
            ex2 = self.pool.export(p)
            h2 = ex2.handle()
            del ex2  # dropped: closed with the object
            self.assertEqual(child.open(h2)["error"], "WrongState")
            self.assertEqual(self.pool.ipc_stats()["exports"], 0)
        finally:
            child.close()
        self.pool.free(p)

    def test_send_and_recv_over_a_socket_pair(self):
        p = self.weights(0x44)
        a, b = socket.socketpair()
        child = Child(pass_fds=(b.fileno(),))
        try:
            with self.pool.export(p) as ex:
                ex.send(a)
                r = child.ask(op="recv", fd=b.fileno())
                self.assertNotIn("error", r, r)
                self.assertEqual(bytes.fromhex(child.ask(op="read", index=r["index"])["bytes"]), pattern(0x44))
                child.ask(op="close", index=r["index"])
        finally:
            child.close()
            a.close()
            b.close()
        self.pool.free(p)

    def test_export_many_one_handle_for_all(self):
        ps = [self.weights(0x50 + i) for i in range(3)]
        small = self.pool.malloc(3000)
        ctypes.memset(small, 0x77, 3000)
        # Two pointers into one allocation give one entry.
        ex = self.pool.export_many([ps[2], ps[0], ps[0] + 100, small, ps[1]])
        self.assertEqual(len(ex.entries), 4)
        self.assertEqual([e.exporter_ptr for e in ex.entries], sorted(ps + [small]))
        child = Child({"VPMM_IPC_TRANSPORT": "socket"})
        try:
            r = child.open(ex.handle())
            self.assertNotIn("error", r, r)
            for i, p in enumerate(ps):
                got = child.ask(op="bytes_at", index=r["index"], ptr=p + 8, n=64)
                self.assertEqual(bytes.fromhex(got["bytes"]), bytes([0x50 + i]) * 64)
                self.assertEqual(got["entries"], 4)
            got = child.ask(op="bytes_at", index=r["index"], ptr=small, n=3000)
            self.assertEqual(bytes.fromhex(got["bytes"]), b"\x77" * 3000)
            self.assertEqual(ex.imports, 1)
            self.pool.free(ps[1])  # any of them freed ends it
            self.assertEqual(child.ask(op="state", index=r["index"])["state"], "freed")
            child.ask(op="close", index=r["index"])
        finally:
            child.close()
            ex.close()
        with self.assertRaises(vpmm.UnknownPointer):
            self.pool.export_many([ps[0], 12345])

    def test_descriptor_server_survives_hostile_clients(self):
        """Peers of the exporter's descriptor socket that send garbage, send
        nothing, ask and never read, or hang up: honest importers are
        still served."""
        p = self.weights(0x66)
        with self.pool.export(p) as ex:
            h = ex.handle()
            peers = []
            for what in ("garbage", "silent", "no_read", "hang_up", "short"):
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.connect(h.address)
                if what == "garbage":
                    s.sendall(os.urandom(8))
                    self.assertEqual(s.recv(1), b"\x01")  # refused, says why
                elif what == "no_read":
                    s.sendall(h.nonce)  # answered into a socket nobody reads
                elif what == "short":
                    s.sendall(h.nonce[:3])
                elif what == "hang_up":
                    s.sendall(h.nonce)
                    s.close()
                    continue
                peers.append(s)
            child = Child({"VPMM_IPC_TRANSPORT": "socket"})
            try:
                r = child.open(h)
                self.assertNotIn("error", r, r)
                self.assertEqual(bytes.fromhex(child.ask(op="read", index=r["index"])["bytes"]), pattern(0x66))
                child.ask(op="close", index=r["index"])
            finally:
                child.close()
                for s in peers:
                    s.close()
        self.pool.free(p)

    def test_misuse(self):
        plain = vpmm.Pool("host", use_env=False, page_size=PAGE)
        try:
            q = plain.malloc(SIZE)
            with self.assertRaises(vpmm.Unsupported):
                plain.export(q)                      # not exportable
            with self.assertRaises(vpmm.UnknownPointer):
                self.pool.export(q)                  # another pool's memory
            with self.assertRaises(vpmm.InvalidArgument):
                plain.import_(b"not a descriptor", [])
            with self.assertRaises(vpmm.InvalidArgument):
                self.pool.export_tag("never-used")   # a tag this pool never saw
            p = self.weights()
            self.pool.pause("w")
            with self.assertRaises(vpmm.WrongState):
                self.pool.export_tag("w")            # nothing of it active
            with self.assertRaises(vpmm.WrongState):
                self.pool.export(p)                  # paused
        finally:
            plain.close()


if __name__ == "__main__":
    sys.exit(unittest.main(verbosity=2))
