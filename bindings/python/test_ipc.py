"""vpmm.ipc on the host backend: a pickled handle opened in another Python
process (subprocess), over pidfd_getfd and over the exporter's socket;
bytes both ways; pause, free, close and a dropped export as the importer
sees them; Export.send / ipc.recv over a socket pair; descriptors larger
than a socket's buffer, late and stalled peers, the transport's deadlines
and its errors; close() racing calls. No GPU, no framework."""
import ctypes
import json
import os
import pickle
import platform
import resource
import select
import socket
import subprocess
import sys
import textwrap
import threading
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


# An importer that reads late: it asks the exporter's descriptor server for
# the export, waits until the answer has started to arrive, and then (unless
# the server hangs up first) reads only after a while. Then Handle.open.
LATE_IMPORTER = textwrap.dedent(r"""
    import ctypes, json, os, pickle, select, socket, sys
    sys.path.insert(0, sys.argv[1])
    import vpmm, vpmm.ipc as ipc
    c = json.loads(sys.stdin.read())
    h = pickle.loads(bytes.fromhex(c["handle"]))
    pool = vpmm.Pool("host", use_env=False, page_size=4096, va_size=4 * c["n"] * 4096)
    out = {"entries": [], "probes": []}
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.connect(h.address)
        s.sendall(h.nonce)
        assert s.recv(1) == b"\x00"
        poller = select.poll()
        poller.register(s, select.POLLIN)
        poller.poll()                      # the server is sending
        poller.register(s, select.POLLRDHUP)
        out["hung_up"] = poller.poll(300)  # ... and the importer is late
        desc, fds = ipc.recv(s)
    imp = ipc.open_descriptor(pool, desc, fds)
    for fd in fds:
        os.close(fd)
    out["entries"].append(len(imp.entries))
    out["probes"] = [ctypes.string_at(imp.translate(p), 4096).hex() for p in c["probes"]]
    imp.close()
    with h.open(pool) as imp:              # the same route through Handle.open
        out["entries"].append(len(imp.entries))
    print(json.dumps(out))
""")


def wmem_default():
    try:
        with open("/proc/sys/net/core/wmem_default") as f:
            return int(f.read())
    except (OSError, ValueError):
        return 212992


# sendmsg's number, to see a thread blocked in it (/proc/self/task/N/syscall).
SENDMSG = {"x86_64": 46, "aarch64": 211, "riscv64": 211, "ppc64le": 341, "s390x": 370}


def wait_blocked_in_sendmsg(thread):
    """Returns once `thread` is blocked in sendmsg (or, on an architecture
    whose number is not listed, in some system call)."""
    want = SENDMSG.get(platform.machine())
    while thread.native_id is None:  # still starting
        select.select([], [], [], 0.001)
    path = f"/proc/self/task/{thread.native_id}/syscall"
    while True:
        with open(path) as f:
            first = f.read().split()[0]
        if first.lstrip("-").isdigit() and (want is None or int(first) == want):
            return
        select.select([], [], [], 0.001)  # polling an observable state, not ordering by time


def fill(sock):
    """Fills sock's send buffer (the peer reads nothing)."""
    sock.setblocking(False)
    try:
        while True:
            sock.send(b"\0" * 65536)
    except BlockingIOError:
        pass
    sock.setblocking(True)


class FakeServer:
    """A descriptor server that answers the first request with the start of
    a message and hangs up (or sends nothing more: `stall`), and later ones
    with `then` (b"\\x00": "active", or b"\\x01" + why)."""

    def __init__(self, then, stall=False):
        self.address = b"\0vpmm-test-fake-%d-%d" % (os.getpid(), id(self))
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(self.address)
        self.sock.listen(8)
        self.then, self.stall, self.held = then, stall, []
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self):
        first = True
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            conn.recv(8)
            if first:
                # A valid header announcing 1000 bytes, then 10 of them.
                conn.sendall(b"\x00" + b"VPMI" + (1).to_bytes(4, "little") + (1000).to_bytes(8, "little")
                             + bytes(8) + bytes(10))
                first = False
                if self.stall:
                    self.held.append(conn)
                    continue
            else:
                conn.sendall(self.then)
            conn.close()

    def close(self):
        self.sock.close()
        for c in self.held:
            c.close()


class TransportTest(unittest.TestCase):
    """Defects of round 3: a descriptor larger than the socket's buffer
    (thousands of handles) to an importer that reads late; a send to a peer
    that never reads; what Handle.open says when the exporter stops
    mid-message; the deadlines."""

    def setUp(self):
        self.pool = vpmm.Pool("host", use_env=False, exportable=1, page_size=PAGE, va_size=1024 * PAGE)

    def tearDown(self):
        self.pool.close()

    def test_a_descriptor_larger_than_the_socket_buffer_reaches_a_late_importer(self):
        # Page-sized allocations of one tag: 56 bytes of descriptor each, so
        # the descriptor is 1.5 times the socket's default send buffer.
        n = max(4000, wmem_default() * 3 // 2 // 56)
        need = 2 * n + 512  # each side: the pool's (or received) handles and the export's (or import's)
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft < need:
            if hard != resource.RLIM_INFINITY and hard < need:
                self.skipTest(f"RLIMIT_NOFILE hard limit {hard} < {need} file descriptors for {n} handles")
            resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))  # the importer inherits it
        big = vpmm.Pool("host", use_env=False, exportable=1, page_size=4096, max_handle_size=4096,
                        small_size=0, va_size=4 * n * 4096)
        try:
            ptrs = [big.malloc(4096, tag="pages") for _ in range(n)]
            probes = [ptrs[0], ptrs[n // 2], ptrs[-1]]
            for i, q in enumerate(probes):
                ctypes.memset(q, 0x30 + i, 4096)
            ex = big.export_tag("pages")
            self.assertGreater(len(ex.descriptor()[0]), wmem_default())
            h = ex.handle()
            r = subprocess.run([sys.executable, "-c", LATE_IMPORTER, HERE], input=json.dumps(
                {"handle": pickle.dumps(h).hex(), "probes": probes, "n": n}), capture_output=True, text=True,
                timeout=120, env=dict(os.environ, VPMM_IPC_TRANSPORT="socket"))
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            got = json.loads(r.stdout)
            self.assertEqual(got["hung_up"], [], "the server hung up on a late importer")
            self.assertEqual(got["entries"], [n, n])
            self.assertEqual(got["probes"], [bytes([0x30 + i]).hex() * 4096 for i in range(3)])
            # A peer that asks and never reads is cut off at the deadline
            # (a real one: the server's socket blocks until then).
            old = ipc.SERVE_DEADLINE_S
            ipc.SERVE_DEADLINE_S = 0.2
            try:
                with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                    s.connect(h.address)
                    s.sendall(h.nonce)
                    poller = select.poll()
                    poller.register(s, select.POLLRDHUP)
                    self.assertNotEqual(poller.poll(30000), [], "the server never gave up on a silent peer")
            finally:
                ipc.SERVE_DEADLINE_S = old
            self.assertEqual(ex.state, "active")
            # close() does not wait for the server's send to a silent peer:
            # it cuts that connection, and the export closes when it ends.
            ipc.SERVE_DEADLINE_S = 600  # not what ends the send here
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                before = set(threading.enumerate())  # Thread objects: an ended thread's ident is reused
                s.connect(h.address)
                s.sendall(h.nonce)
                answer = None
                while answer is None:  # the server's thread for this connection
                    answer = next((t for t in threading.enumerate()
                                   if t.name == "vpmm-ipc-answer" and t not in before), None)
                    select.select([], [], [], 0.001)
                wait_blocked_in_sendmsg(answer)
                ex.close()
                poller = select.poll()
                poller.register(s, select.POLLRDHUP)
                self.assertNotEqual(poller.poll(30000), [], "close() left the server's send running")
                answer.join()
            ipc.SERVE_DEADLINE_S = old
            self.assertEqual(big.ipc_stats()["exports"], 0)
        finally:
            big.close()

    def test_a_flood_of_silent_connections_gets_no_thread_each(self):
        p = self.pool.malloc(SIZE, tag="w")
        ctypes.memset(p, 0x6B, SIZE)
        with self.pool.export(p) as ex:
            h = ex.handle()
            silent = []
            try:
                for _ in range(ipc.MAX_CONNECTIONS):
                    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                    s.connect(h.address)  # and says nothing: each holds an answer slot
                    silent.append(s)
                with self.assertRaises(vpmm.WrongState) as e:
                    h.open(vpmm.Pool("host", use_env=False, page_size=PAGE, va_size=64 * PAGE))
                self.assertIn("busy", str(e.exception))
            finally:
                for s in silent:
                    s.close()
            for t in threading.enumerate():  # the silent ones' answers end with their peers
                if t.name == "vpmm-ipc-answer":
                    t.join()
            other = vpmm.Pool("host", use_env=False, page_size=PAGE, va_size=64 * PAGE)
            try:
                with h.open(other) as imp:
                    self.assertEqual(ctypes.string_at(imp.ptr, SIZE), b"\x6b" * SIZE)
            finally:
                other.close()
        self.pool.free(p)

    def test_open_says_why_the_exporter_stopped_mid_message(self):
        desc = bytes(24) + b"NONCE123"
        for then, error, words in ((b"\x00", vpmm.BackendError, "still active"),
                                   (b"\x01the export is paused (process 1)", vpmm.WrongState, "paused")):
            fake = FakeServer(then)
            try:
                with self.assertRaises(error) as e:
                    ipc.Handle(desc, fake.address, os.getpid()).open(self.pool)
                self.assertIn(words, str(e.exception))
                self.assertNotIn("meanwhile?", str(e.exception))
            finally:
                fake.close()

    def test_open_gives_up_at_its_deadline(self):
        fake = FakeServer(b"\x00", stall=True)
        old = ipc.OPEN_DEADLINE_S
        ipc.OPEN_DEADLINE_S = 0.2
        try:
            with self.assertRaises(vpmm.Timeout) as e:
                ipc.Handle(bytes(24) + b"NONCE123", fake.address, os.getpid()).open(self.pool)
            self.assertIn("OPEN_DEADLINE_S", str(e.exception))
        finally:
            ipc.OPEN_DEADLINE_S = old
            fake.close()

    def test_a_socket_timeout_is_a_deadline_not_eagain(self):
        p = self.pool.malloc(SIZE, tag="w")
        with self.pool.export(p) as ex:
            a, b = socket.socketpair()
            try:
                fill(a)
                a.settimeout(0.2)  # Python's timeout: the file descriptor is non-blocking
                with self.assertRaises(vpmm.Timeout) as e:
                    ex.send(a)
                self.assertIn("timeout of 0.2 s", str(e.exception))
                self.assertEqual(a.gettimeout(), 0.2)  # given back as it was
            finally:
                a.close()
                b.close()
            # And a timeout with a reader that is merely late is no error.
            a, b = socket.socketpair()
            try:
                a.settimeout(30)
                b.settimeout(30)
                t = threading.Thread(target=ex.send, args=(a,))
                t.start()
                desc, fds = ipc.recv(b)
                t.join()
                for fd in fds:
                    os.close(fd)
                self.assertEqual(desc, ex.descriptor()[0])
            finally:
                a.close()
                b.close()
        self.pool.free(p)

    def test_a_send_to_a_peer_that_never_reads_stalls_nothing_else(self):
        p = self.pool.malloc(SIZE, tag="w")
        ctypes.memset(p, 0x5C, SIZE)
        ex = self.pool.export(p)
        h = ex.handle()
        a, b = socket.socketpair()
        fill(a)
        outcome = []

        def send():
            try:
                ex.send(a)
                outcome.append(None)
            except vpmm.VpmmError as e:
                outcome.append(e)
        t = threading.Thread(target=send)
        t.start()
        wait_blocked_in_sendmsg(t)
        # Everything else goes on while that send is blocked.
        self.assertEqual(ex.state, "active")
        self.assertEqual(ex.importers, 0)
        self.assertEqual(ex.handle().descriptor, h.descriptor)
        other = vpmm.Pool("host", use_env=False, page_size=PAGE, va_size=1024 * PAGE)
        try:
            with h.open(other) as imp:  # the descriptor server answers another importer
                self.assertEqual(ctypes.string_at(imp.ptr, SIZE), b"\x5c" * SIZE)
                self.assertEqual(ex.importers, 1)
        finally:
            other.close()
        # The server's thread that answered `other` may still be inside its
        # call on the export (the importer had its descriptor as soon as it
        # was written): wait until t's send is the only call in flight, so
        # that it is the one keeping the export below (an observable state).
        while ex._guard._threads != [t.ident]:
            select.select([], [], [], 0.001)
        ex.close()  # returns; the send in flight keeps the export until it ends
        with self.assertRaises(vpmm.InvalidArgument):
            ex.state
        self.assertEqual(self.pool.ipc_stats()["exports"], 1)
        b.close()  # the peer goes: the send fails, and the close completes
        t.join()
        self.assertIsInstance(outcome[0], vpmm.BackendError)
        self.assertEqual(self.pool.ipc_stats()["exports"], 0)
        a.close()
        self.pool.free(p)


class IpcCloseRaceTest(unittest.TestCase):
    """close() of an export, an import or their pool racing calls on them
    from several threads: no crash, and every call succeeds or raises the
    closed error."""

    ROUNDS = 60
    THREADS = 4

    def setUp(self):
        # Switch threads often: more interleavings per round, and a close
        # waiting for the GIL behind spinning workers gets it sooner.
        self.interval = sys.getswitchinterval()
        sys.setswitchinterval(1e-4)

    def tearDown(self):
        sys.setswitchinterval(self.interval)

    def race(self, make, ops, close):
        for _ in range(self.ROUNDS):
            obj = make()
            first_call = [threading.Event() for _ in range(self.THREADS)]
            errors = [None] * self.THREADS

            def worker(i):
                try:
                    while True:
                        ops[i % len(ops)](obj)
                        first_call[i].set()
                except BaseException as e:  # noqa: BLE001 - checked below
                    errors[i] = e
                finally:
                    first_call[i].set()
            threads = [threading.Thread(target=worker, args=(i,)) for i in range(self.THREADS)]
            for t in threads:
                t.start()
            for e in first_call:
                e.wait()
            close(obj)
            for t in threads:
                t.join()
            for e in errors:
                self.assertIsInstance(e, vpmm.InvalidArgument, repr(e))
                self.assertIn("is closed", str(e))

    def setup(self):
        pool = vpmm.Pool("host", use_env=False, exportable=1, page_size=PAGE, va_size=256 * PAGE)
        other = vpmm.Pool("host", use_env=False, page_size=PAGE, va_size=256 * PAGE)
        p = pool.malloc(SIZE, tag="w")
        ex = pool.export(p)
        desc, fds = ex.descriptor()
        imp = ipc.open_descriptor(other, desc, fds)
        return pool, other, ex, imp

    def test_export_close_races_its_calls(self):
        def make():
            self.objs = self.setup()
            return self.objs[2]
        try:
            self.race(make, [lambda ex: ex.state, lambda ex: ex.descriptor(), lambda ex: ex.handle(),
                             lambda ex: ex.imports], lambda ex: ex.close())
        finally:
            for o in self.objs[:2]:
                o.close()

    def test_import_and_pool_close_race_the_import_calls(self):
        made = []

        def make():
            made.append(self.setup())
            return made[-1]
        ops = [lambda o: o[3].state, lambda o: o[3].current, lambda o: o[2].state,
               lambda o: o[1].stats()]
        self.race(make, ops, lambda o: (o[3].close(), o[1].close(), o[2].close()))
        self.race(make, ops, lambda o: (o[1].close(), o[3].close(), o[2].close()))  # the pool first
        for o in made:
            o[0].close()



class ExportablePoolTest(unittest.TestCase):
    def test_an_exportable_pool_imports_ipc_when_made_not_in_its_first_export(self):
        # The import is most of a first export's time (docs/ipc.md): a pool
        # made to share pays it at creation; one that is not never does.
        code = textwrap.dedent("""
            import sys
            sys.path.insert(0, sys.argv[1])
            import vpmm
            assert "vpmm.ipc" not in sys.modules, "imported by import vpmm"
            p = vpmm.Pool(backend="host")
            assert "vpmm.ipc" not in sys.modules, "imported by a pool that does not share"
            p.close()
            q = vpmm.Pool(backend="host", exportable=1)
            assert "vpmm.ipc" in sys.modules, "not imported by an exportable pool"
            ptr = q.malloc(1 << 20)
            e = q.export_many([ptr])
            e.close()
            q.free(ptr)
            q.close()
            print("ok")
        """)
        env = {k: v for k, v in os.environ.items() if k != "VPMM_EXPORTABLE"}
        r = subprocess.run([sys.executable, "-c", code, HERE], env=env, capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.strip(), "ok")

if __name__ == "__main__":
    sys.exit(unittest.main(verbosity=2))
