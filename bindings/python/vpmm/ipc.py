"""Sharing pool memory with other processes (docs/ipc.md).

An exportable pool (``Pool(exportable=1)``, or ``VPMM_EXPORTABLE=1`` for the
default pools) exports live allocations; another process imports them into a
pool of the same device and gets its own pointers to the same bytes::

    ex = pool.export(ptr)                   # or pool.export_tag("weights")
    h = ex.handle()                         # picklable: send it any way you like
    ...                                     # in the other process:
    with h.open(vpmm.default_pool(0)) as imp:
        use(imp.ptr, imp.size)              # imp.state: "active" until the exporter
                                            # pauses ("paused"), frees, closes or exits

A :class:`Handle` is bytes plus two ways to get the file descriptors that
cannot travel as bytes: the exporter's pid and descriptor numbers, taken with
``pidfd_getfd`` (Linux 5.6+, needs ptrace permission over the exporter,
which containers often refuse), else a Unix socket in the abstract namespace
served by a thread of the exporter (started by the first :meth:`Export.handle`),
which sends them with SCM_RIGHTS. ``VPMM_IPC_TRANSPORT=pidfd|socket``
forces one; the default tries pidfd_getfd, then the socket.

Without pickling, :meth:`Export.send` / :func:`recv` move a descriptor and its
file descriptors over a connected Unix socket you already have.

The sockets block (a descriptor of thousands of handles is larger than a
socket's buffer, and a message cut short cannot be resumed), each bounded
by a deadline that shuts the socket down when it passes: the descriptor
server gives a connection :data:`SERVE_DEADLINE_S` seconds, :meth:`Handle.open`
gives the exporter :data:`OPEN_DEADLINE_S`, and a socket object with a timeout
passed to :meth:`Export.send`, :func:`send` or :func:`recv` gets its timeout
as the deadline (:class:`vpmm.Timeout` when it passes). No lock is held
during socket I/O: a peer that does not read stalls its own send only.
"""
from __future__ import annotations

import bisect
import ctypes
import errno
import os
import socket
import threading
import weakref
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Set, Tuple, Union

from . import _library as L
from .errors import BackendError, InvalidArgument, Timeout, Unsupported, VpmmError, WrongState

__all__ = ["Export", "Import", "Handle", "Entry", "STATES", "recv", "send", "open_descriptor",
           "SERVE_DEADLINE_S", "OPEN_DEADLINE_S", "MAX_CONNECTIONS"]

#: Seconds the descriptor server gives one connection (reading the request,
#: sending the descriptors) before it shuts the connection down: a peer that
#: asks and never reads holds a thread and the export's descriptors no longer.
SERVE_DEADLINE_S = 30.0
#: Connections the descriptor server answers at once; more are refused at
#: once ("busy": :meth:`Handle.open` raises :class:`vpmm.WrongState` saying so).
MAX_CONNECTIONS = 64
#: Seconds :meth:`Handle.open` gives the exporter's descriptor server to
#: answer and send everything (then :class:`vpmm.Timeout`).
OPEN_DEADLINE_S = 30.0

#: vpmm_export_state / vpmm_import_state values by number.
STATES: Dict[int, str] = {1: "active", 2: "paused", 3: "freed", 4: "closed", 5: "exited"}


def _need() -> None:
    if L.pool_export is None:
        raise Unsupported(5, f"vpmm.ipc: the loaded libvpmm ({L.path}) has no vpmm_pool_export: it is older "
                             "than this binding")


class Entry(NamedTuple):
    """One allocation of an export: where it is here (``ptr``; the exporter's
    own address on the exporting side), its size, its address in the exporter."""
    ptr: int
    size: int
    exporter_ptr: int


def _entries(fn: Any, handle: int) -> List[Entry]:
    out: List[Entry] = []
    i, n = 0, 1
    while i < n:
        e = L.sized(L.IpcEntry)
        L.check(fn(handle, i, ctypes.byref(e)))
        out.append(Entry(e.ptr or 0, e.size, e.exporter_ptr))
        n = e.n_entries
        i += 1
    return out


def _nonce(descriptor: bytes) -> bytes:
    return descriptor[24:32]


# --- deadlines on blocking sockets --------------------------------------------
class _Deadline:
    """Shuts a socket down (both ways) if `seconds` pass before the block
    ends, or when :meth:`cut` is called: a send or receive blocked on it
    returns at once (EPIPE, end of file), and :attr:`expired` says whether
    the deadline was the reason. The shutdown and the end of the block are
    serialised, so the socket is never shut down after it was closed (its
    number may be another file's by then)."""

    def __init__(self, sock: socket.socket, seconds: float) -> None:
        self._sock = sock
        self._lock = threading.Lock()
        self._done = False
        self.expired = False
        self.cut_short = False
        self._timer = threading.Timer(max(0.0, seconds), self._expire)
        self._timer.daemon = True

    def __enter__(self) -> "_Deadline":
        self._timer.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        with self._lock:
            self._done = True
        self._timer.cancel()

    def _shutdown(self) -> bool:
        with self._lock:
            if self._done:
                return False
            try:
                self._sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            return True

    def _expire(self) -> None:
        with self._lock:
            if not self._done:
                self.expired = True
        self._shutdown()

    def cut(self) -> None:
        """Shut the socket down now (the export it serves was closed)."""
        with self._lock:
            if not self._done:
                self.cut_short = True
        self._shutdown()


def _blocking(what: str, sock: Union[socket.socket, int], fn: Callable[[int], int]) -> None:
    """fn(fd) (a C call that sends or receives a whole message) on a
    blocking socket: a socket object with a timeout (which makes its file
    descriptor non-blocking, so the C call would stop mid-message with
    EAGAIN) is made blocking for the call, its timeout the deadline. A
    socket without timeout, or a file descriptor, is used as it is (the C
    contract: a non-blocking one fails with EAGAIN, SO_SNDTIMEO bounds)."""
    timeout = sock.gettimeout() if isinstance(sock, socket.socket) else None
    if not timeout:  # None: blocking already; 0.0: non-blocking asked for; an int: as it is
        L.check(fn(sock.fileno() if hasattr(sock, "fileno") else int(sock)))
        return
    assert isinstance(sock, socket.socket)
    sock.settimeout(None)
    try:
        with _Deadline(sock, timeout) as d:
            st = fn(sock.fileno())
            err = L.last_error().decode(errors="replace") if st else ""
    finally:
        sock.settimeout(timeout)
    if st and d.expired:
        raise Timeout(8, f"vpmm.ipc: {what} did not complete within the socket's timeout of {timeout} s: "
                         f"the socket was shut down (a message cut short cannot be resumed); {err}")
    if st:
        raise L.error_for_status(st, err)


# --- the exporter's descriptor server ------------------------------------------
class _FdServer:
    """A thread answering "send me the descriptors of export NONCE" on an
    abstract Unix socket, for importers that may not use pidfd_getfd. Each
    connection is answered on a thread of its own, on a blocking socket
    with a deadline (:data:`SERVE_DEADLINE_S`), holding no lock of the
    export: an importer that never reads stalls its own answer only."""

    def __init__(self) -> None:
        self.exports: "weakref.WeakValueDictionary[bytes, Export]" = weakref.WeakValueDictionary()
        self.slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self.address = b"\0vpmm-ipc-%d-%s" % (os.getpid(), os.urandom(8).hex().encode())
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(self.address)
        self.sock.listen(64)
        threading.Thread(target=self._serve, name="vpmm-ipc-server", daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            if not self.slots.acquire(blocking=False):
                # Anyone on the host may connect (an abstract socket has no
                # permissions): a flood gets no thread, and honest importers
                # are answered again as the deadline frees slots.
                with conn:
                    try:
                        conn.setblocking(False)  # a fresh socket's buffer takes this at once
                        conn.send(b"\x01the descriptor server of process %d is busy (%d connections "
                                  b"in flight)" % (os.getpid(), MAX_CONNECTIONS))
                        conn.recv(64)  # the request if it came: closed unread, it would reset the answer
                    except OSError:
                        pass
                continue
            threading.Thread(target=self._answer, args=(conn,), name="vpmm-ipc-answer", daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        try:
            self._answer_one(conn)
        finally:
            self.slots.release()

    def _answer_one(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(None)  # blocking: the deadline below bounds it
            with _Deadline(conn, SERVE_DEADLINE_S) as deadline:
                try:
                    nonce = _read_exact(conn, 8)
                    ex = self.exports.get(nonce)
                    state = "closed"
                    if ex is not None:
                        try:
                            state = ex.state
                        except InvalidArgument:  # closed meanwhile
                            pass
                    if state != "active" or ex is None:
                        conn.sendall(b"\x01" + ("the export is %s (process %d)" % (state, os.getpid())).encode())
                        return
                    conn.sendall(b"\x00")
                    # A pause or free right now makes the send fail before it
                    # sends anything: the connection then closes, and the
                    # importer asks again to learn why.
                    ex._send_serving(conn, deadline)
                except (OSError, VpmmError):
                    pass


_server: Optional[_FdServer] = None
_server_pid = 0  # the process that started it: a forked child starts its own
_server_lock = threading.Lock()


def _fd_server() -> _FdServer:
    global _server
    with _server_lock:
        if _server is None or _server_pid != os.getpid():
            _start_server()
        assert _server is not None
        return _server


def _start_server() -> None:
    global _server, _server_pid
    _server = _FdServer()
    _server_pid = os.getpid()


def _read_rest(conn: socket.socket, limit: int = 4096) -> bytes:
    """What the peer sends until it closes (at most `limit` bytes). A peer
    that closed with bytes of ours unread resets the connection once its
    own bytes are read: that is its end too."""
    b = b""
    while len(b) < limit:
        try:
            part = conn.recv(limit - len(b))
        except ConnectionResetError:
            break
        if not part:
            break
        b += part
    return b


def _read_exact(conn: socket.socket, n: int) -> bytes:
    b = b""
    while len(b) < n:
        part = conn.recv(n - len(b))
        if not part:
            raise ConnectionResetError(errno.ECONNRESET, "vpmm.ipc: the peer closed the connection")
        b += part
    return b


# --- exports -----------------------------------------------------------------
class _Entries:
    """What an export and an import share: their entries (the allocations
    they cover), the first one's address and size, and the handle that a
    close turns into an error."""
    _what = "share"
    _h: Optional[int]
    _entries: List[Entry]

    def _handle(self) -> int:
        if not self._h:
            raise InvalidArgument(1, f"vpmm.ipc: the {self._what} is closed")
        return self._h

    @property
    def entries(self) -> List[Entry]:
        """The allocations shared, in address order (ptr: in this process)."""
        return list(self._entries)

    @property
    def ptr(self) -> int:
        """The first (or only) allocation's address in this process."""
        return self._entries[0].ptr

    @property
    def size(self) -> int:
        """The first (or only) allocation's size."""
        return self._entries[0].size


class Export(_Entries):
    """An export of live pool memory (vpmm_pool_export / _export_tag): made
    by :meth:`vpmm.Pool.export` or :meth:`vpmm.Pool.export_tag`. Close it
    (or leave the ``with`` block) when no new importer needs it; importers'
    mappings stay valid after the close. Freeing or pausing the exported
    memory ends it too (:attr:`state`).

    Thread safe, and no method holds a lock during socket I/O: a
    :meth:`send` blocked on a peer that does not read stalls nothing else
    (:attr:`state`, :meth:`handle`, :meth:`close`, the descriptor server's
    answers to other importers all go on). :meth:`close` refuses new calls
    at once and shuts down the descriptor server's connections sending this
    export; a :meth:`send` of yours still in flight keeps the export open
    until it returns (the export closes then), so bound it with the
    socket's timeout."""
    _what = "export"

    def __init__(self, pool: Any, handle: int) -> None:
        self._pool = pool
        self._h: Optional[int] = handle
        self._guard = L.Guard(lambda: InvalidArgument(1, "vpmm.ipc: the export is closed"))
        self._entries = _entries(L.export_entry, handle)
        self._descriptor: Optional[bytes] = None
        self._serving: Set[_Deadline] = set()  # the server's connections sending it now
        # A dropped export is closed with the object, not leaked (no call
        # can be in flight then: each holds a reference; at interpreter
        # exit one may be, and the close is left to it).
        self._finalizer = weakref.finalize(self, Export._close_handle, pool, handle, self._guard)

    @staticmethod
    def _close_handle(pool: Any, handle: int, guard: L.Guard) -> None:
        def release() -> None:
            try:
                _close_native(L.export_close, pool, handle)
            except Exception:  # noqa: BLE001 - nobody to report to
                pass
        guard.close(release, wait=False)

    def _state(self) -> Tuple[str, int, int]:
        s, n, total = L.i32(), L.u32(), L.u64()
        with self._guard:
            L.check(L.export_state(self._h, ctypes.byref(s), ctypes.byref(n), ctypes.byref(total)))
        return STATES.get(s.value, str(s.value)), n.value, total.value

    @property
    def state(self) -> str:
        """"active", "paused", "freed", "closed" (see docs/ipc.md)."""
        return self._state()[0]

    @property
    def importers(self) -> int:
        """Processes holding an import of this export now."""
        return self._state()[1]

    @property
    def imports(self) -> int:
        """Imports made so far."""
        return self._state()[2]

    def descriptor(self) -> Tuple[bytes, List[int]]:
        """(descriptor bytes, the export's file descriptors). The descriptors
        stay the export's: never close them; they are valid while the state
        is "active" (a pause or free on another thread may close them right
        after the call: :meth:`send` keeps them open while it sends)."""
        size, n = L.size_t(), L.size_t()
        with self._guard:
            h = self._h
            L.check(L.export_descriptor(h, None, 0, ctypes.byref(size), None, 0, ctypes.byref(n)))
            buf = ctypes.create_string_buffer(size.value)
            fds = (ctypes.c_int * max(n.value, 1))()
            L.check(L.export_descriptor(h, buf, size.value, ctypes.byref(size), fds, n.value, ctypes.byref(n)))
        return buf.raw[:size.value], list(fds[:n.value])

    def send(self, sock: Union[socket.socket, int]) -> None:
        """Send the descriptor and its file descriptors over a connected Unix
        socket (the receiver calls :func:`recv`, or imports with
        :func:`open_descriptor`). Blocks while the socket's buffer is full,
        holding no lock: a socket object with a timeout bounds it
        (:class:`vpmm.Timeout`; the socket is then shut down, since a
        message cut short cannot be resumed), as SO_SNDTIMEO on a file
        descriptor does (:class:`vpmm.BackendError`, EAGAIN)."""
        with self._guard:
            _blocking("Export.send", sock, lambda fd: L.export_send(self._h, fd))

    def _send_serving(self, conn: socket.socket, deadline: _Deadline) -> None:
        """send() for the descriptor server: the connection is cut when the
        export closes."""
        with self._guard:
            self._serving.add(deadline)
            try:
                if self._guard.closing:  # a close() that looked at _serving before the add
                    deadline.cut()
                L.check(L.export_send(self._h, conn.fileno()))
            finally:
                self._serving.discard(deadline)

    def handle(self) -> "Handle":
        """A picklable handle another process opens (:meth:`Handle.open`).
        Starts this process's descriptor server on first use."""
        desc = self._descriptor
        if desc is None:
            desc = self.descriptor()[0]
            self._descriptor = desc  # the same bytes whichever thread wins
        server = _fd_server()
        if self._guard.closing:
            raise self._guard.closed_error()
        server.exports[_nonce(desc)] = self
        return Handle(desc, server.address, os.getpid())

    def close(self) -> None:
        """Close the export (idempotent): importers see "closed"; their
        mappings stay valid until they close them. New calls are refused at
        once; the descriptor server's connections sending it are shut down;
        a :meth:`send` still in flight on another thread keeps the export
        open until it returns (the close then completes there)."""
        errors: List[Exception] = []

        def release() -> None:
            h, self._h = self._h, None
            try:
                _close_native(L.export_close, self._pool, h)
            except VpmmError as e:
                errors.append(e)
        self._finalizer.detach()
        if not self._guard.close(release, wait=False):
            return
        for d in list(self._serving):
            d.cut()
        if errors:
            raise errors[0]

    def __enter__(self) -> "Export":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        try:
            state = self.state
        except InvalidArgument:
            return "<vpmm.ipc.Export closed>"
        return f"<vpmm.ipc.Export {len(self._entries)} allocation(s) {state}>"


def _close_native(fn: Callable[[int, int], int], pool: Any, handle: int) -> None:
    """vpmm_export_close / vpmm_import_close of a handle of `pool`: before
    the pool's destroy (which then waits for it), or after it against the
    destroyed pool (the library frees the handle then), never during it."""
    entered = pool._guard.enter_unless_released()
    try:
        L.check(fn(pool._raw, handle))
    finally:
        if entered:
            pool._guard.__exit__(None, None, None)


# --- handles and imports --------------------------------------------------------
class Handle:
    """What an exporter hands to another process: the descriptor's bytes,
    the exporter's pid, and the address of its descriptor server. Pickles as
    plain data."""

    __slots__ = ("descriptor", "address", "pid")

    def __init__(self, descriptor: bytes, address: Optional[bytes], pid: int) -> None:
        self.descriptor = bytes(descriptor)
        self.address = address
        self.pid = int(pid)

    def __reduce__(self) -> Any:
        return (Handle, (self.descriptor, self.address, self.pid))

    @property
    def nonce(self) -> bytes:
        """8 bytes naming the export (an import of it per pool)."""
        return _nonce(self.descriptor)

    def open(self, pool: Any) -> "Import":
        """Import into `pool` (a :class:`vpmm.Pool` of the device the memory
        is on). Tries pidfd_getfd, then the exporter's socket (see the module
        docstring); raises :class:`vpmm.WrongState` when the export is no
        longer active or the exporter is gone."""
        _need()
        how = os.environ.get("VPMM_IPC_TRANSPORT", "auto").strip().lower()
        if how not in ("auto", "pidfd", "socket"):
            raise InvalidArgument(1, f"VPMM_IPC_TRANSPORT={how!r} is not auto, pidfd or socket")
        if how in ("auto", "pidfd") and self.pid != os.getpid():
            try:
                return open_descriptor(pool, self.descriptor, None)
            except Unsupported:
                if how == "pidfd" or not self.address:
                    raise
        if not self.address:
            raise Unsupported(5, "vpmm.ipc: the handle has no socket to fetch its descriptors from")
        desc, fds = self._fetch()
        try:
            return open_descriptor(pool, desc, fds)
        finally:
            for fd in fds:
                os.close(fd)

    def _ask(self, s: socket.socket) -> None:
        """Connects and asks for the export; raises WrongState when the
        server says it is not active (or nobody answers)."""
        try:
            s.connect(self.address)
        except OSError as e:
            raise WrongState(4, f"vpmm.ipc: the exporting process {self.pid} does not answer on its "
                                f"descriptor socket ({e}): it exited, or is in another network "
                                "namespace") from e
        try:
            s.sendall(self.nonce)
        except (BrokenPipeError, ConnectionResetError):
            pass  # refused before it read the request: its answer is there to read
        status = _read_exact(s, 1)
        if status != b"\x00":
            raise WrongState(4, "vpmm.ipc: process %d: %s" % (self.pid, _read_rest(s).decode(errors="replace")))

    def _fetch(self) -> Tuple[bytes, List[int]]:
        """The descriptor and its file descriptors from the exporter's
        server, on a blocking socket within :data:`OPEN_DEADLINE_S`."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            with _Deadline(s, OPEN_DEADLINE_S) as deadline:
                try:
                    self._ask(s)
                    return recv(s)
                except (OSError, BackendError) as e:
                    failure: Exception = e
            if deadline.expired:
                raise Timeout(8, f"vpmm.ipc: process {self.pid} did not send the export's descriptors within "
                                 f"{OPEN_DEADLINE_S} s (vpmm.ipc.OPEN_DEADLINE_S): {failure}") from failure
        # The exporter stopped mid-answer. Say why, as it says it now: the
        # export paused, freed or closed meanwhile (WrongState), or it is
        # still active and the transport failed (its server's deadline, a
        # process that is exiting: BackendError).
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                with _Deadline(s, OPEN_DEADLINE_S):
                    self._ask(s)
        except WrongState:
            raise
        except (OSError, VpmmError) as e:
            raise BackendError(6, f"vpmm.ipc: process {self.pid} stopped sending the export's descriptors "
                                  f"({failure}) and did not answer again ({e})") from failure
        raise BackendError(6, f"vpmm.ipc: process {self.pid} stopped sending the export's descriptors "
                              f"({failure}); the export is still active there: open the handle again") \
            from failure

    def __repr__(self) -> str:
        return f"<vpmm.ipc.Handle of process {self.pid}, {len(self.descriptor)} bytes>"


class Import(_Entries):
    """An export mapped into this process (vpmm_pool_import). Close it (or
    leave the ``with`` block) once the device work using it completed.
    Thread safe: :meth:`close` (or the pool's close) waits for the calls in
    flight on it, and later calls raise :class:`vpmm.InvalidArgument`."""

    _what = "import"

    def __init__(self, pool: Any, handle: int, nonce: bytes) -> None:
        self._pool = pool
        self._h: Optional[int] = handle
        self._guard = L.Guard(lambda: InvalidArgument(1, "vpmm.ipc: the import is closed"))
        self.nonce = nonce
        self._entries = _entries(L.import_entry, handle)
        self._starts = [e.exporter_ptr for e in self._entries]

    def translate(self, exporter_ptr: int) -> int:
        """This process's address of a byte the exporter knows as exporter_ptr."""
        # Entries are in the exporter's address order: a binary search.
        i = bisect.bisect_right(self._starts, exporter_ptr) - 1
        if i >= 0:
            e = self._entries[i]
            if exporter_ptr < e.exporter_ptr + e.size:
                return e.ptr + (exporter_ptr - e.exporter_ptr)
        raise InvalidArgument(1, f"vpmm.ipc: {hex(exporter_ptr)} is in no allocation of this import")

    @property
    def state(self) -> str:
        """"active" while the bytes are the exporter's; then "paused",
        "freed", "closed" or "exited" (docs/ipc.md says what each means)."""
        s = L.i32()
        with self._guard, self._pool._guard:  # the pool's destroy unmaps the import
            L.check(L.import_state(self._h, ctypes.byref(s)))
        return STATES.get(s.value, str(s.value))

    @property
    def current(self) -> bool:
        """True while the import still shows the exporter's memory."""
        return self.state == "active"

    def close(self) -> None:
        """Unmap (idempotent; waits for calls in flight on it). Synchronize
        the device work using it first. After the pool's close (which
        unmapped it) it only frees what is left of the handle."""
        def release() -> None:
            h, self._h = self._h, None
            _close_native(L.import_close, self._pool, h)
        self._guard.close(release)

    def __enter__(self) -> "Import":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        try:
            state = self.state
        except InvalidArgument:
            return "<vpmm.ipc.Import closed>"
        return f"<vpmm.ipc.Import {len(self._entries)} allocation(s) at {hex(self.ptr)} {state}>"


def open_descriptor(pool: Any, descriptor: bytes, fds: Optional[Sequence[int]]) -> Import:
    """Import a descriptor into `pool` with its file descriptors (which stay
    the caller's), or with None: taken from the exporter by pidfd_getfd."""
    _need()
    out = L.vp()
    if fds is None:
        pool._call(L.pool_import, descriptor, len(descriptor), None, 0, ctypes.byref(out))
    else:
        arr = (ctypes.c_int * max(len(fds), 1))(*fds)
        pool._call(L.pool_import, descriptor, len(descriptor), arr, len(fds), ctypes.byref(out))
    return Import(pool, out.value, _nonce(descriptor))


def send(sock: Union[socket.socket, int], descriptor: bytes, fds: Sequence[int]) -> None:
    """Send a descriptor and file descriptors (vpmm_ipc_send; they stay
    yours). Blocks while the socket's buffer is full; a socket object's
    timeout is the deadline (see :meth:`Export.send`)."""
    _need()
    arr = (ctypes.c_int * max(len(fds), 1))(*fds)
    _blocking("vpmm.ipc.send", sock, lambda fd: L.ipc_send(fd, descriptor, len(descriptor), arr, len(fds)))


def recv(sock: Union[socket.socket, int]) -> Tuple[bytes, List[int]]:
    """Receive what :meth:`Export.send` or :func:`send` sent: (descriptor,
    file descriptors). The file descriptors are the caller's to close.
    Blocks until the whole message arrived; a socket object's timeout is
    the deadline for all of it (:class:`vpmm.Timeout`)."""
    _need()
    size, n = L.size_t(), L.size_t()
    got: List[Any] = []

    def both(fd: int) -> int:
        st = L.ipc_recv(fd, None, 0, ctypes.byref(size), None, 0, ctypes.byref(n))
        if st:
            return st
        buf = ctypes.create_string_buffer(max(size.value, 1))
        fds = (ctypes.c_int * max(n.value, 1))()
        st = L.ipc_recv(fd, buf, size.value, ctypes.byref(size), fds, n.value, ctypes.byref(n))
        if not st:
            got.append((buf.raw[:size.value], list(fds[:n.value])))
        return st
    _blocking("vpmm.ipc.recv", sock, both)
    return got[0]


def _export(pool: Any, ptr: Optional[int], tag: Optional[str], by_tag: bool) -> Export:
    _need()
    out = L.vp()
    if by_tag:
        pool._call(L.pool_export_tag, tag.encode() if tag else None, ctypes.byref(out))
    else:
        pool._call(L.pool_export, ptr, ctypes.byref(out))
    return Export(pool, out.value)


def _export_many(pool: Any, ptrs: Sequence[int]) -> Export:
    _need()
    if L.pool_export_many is None:
        raise Unsupported(5, f"vpmm.ipc: the loaded libvpmm ({L.path}) has no vpmm_pool_export_many: it is "
                             "older than this binding")
    arr = (ctypes.c_void_p * max(len(ptrs), 1))(*ptrs)
    out = L.vp()
    pool._call(L.pool_export_many, arr, len(ptrs), ctypes.byref(out))
    return Export(pool, out.value)


def stats(pool: Any) -> Dict[str, int]:
    """vpmm_pool_ipc_stats as a dict."""
    _need()
    s = L.sized(L.IpcStats)
    pool._call(L.pool_ipc_stats, ctypes.byref(s))
    return {n: getattr(s, n) for n in L.field_names(L.IpcStats)}
