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
"""
from __future__ import annotations

import bisect
import ctypes
import os
import secrets
import socket
import threading
import weakref
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple, Union

from . import _library as L
from .errors import InvalidArgument, Unsupported, VpmmError, WrongState

__all__ = ["Export", "Import", "Handle", "Entry", "STATES", "recv", "send", "open_descriptor"]

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


# --- the exporter's descriptor server ------------------------------------------
class _FdServer:
    """A thread answering "send me the descriptors of export NONCE" on an
    abstract Unix socket, for importers that may not use pidfd_getfd."""

    def __init__(self) -> None:
        self.exports: "weakref.WeakValueDictionary[bytes, Export]" = weakref.WeakValueDictionary()
        self.address = b"\0vpmm-ipc-%d-%s" % (os.getpid(), secrets.token_hex(8).encode())
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
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        with conn:
            try:
                conn.settimeout(30)
                nonce = _read_exact(conn, 8)
                ex = self.exports.get(nonce)
                state = ex._state()[0] if ex is not None and ex._h else "closed"
                if state != "active":
                    msg = "the export is %s (process %d)" % (state, os.getpid())
                    conn.sendall(b"\x01" + msg.encode())
                    return
                conn.sendall(b"\x00")
                # A pause or free right now makes the send fail: the
                # connection then closes and the importer reports it.
                ex.send(conn)
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


def _read_exact(conn: socket.socket, n: int) -> bytes:
    b = b""
    while len(b) < n:
        part = conn.recv(n - len(b))
        if not part:
            raise OSError("vpmm.ipc: the peer closed the connection")
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
    memory ends it too (:attr:`state`). Thread safe."""
    _what = "export"

    def __init__(self, pool: Any, handle: int) -> None:
        self._pool = pool
        self._h: Optional[int] = handle
        self._lock = threading.RLock()
        self._entries = _entries(L.export_entry, handle)
        self._descriptor: Optional[bytes] = None
        # A dropped export is closed with the object, not leaked.
        self._finalizer = weakref.finalize(self, Export._close_handle, pool, handle, self._lock)

    @staticmethod
    def _close_handle(pool: Any, handle: int, lock: threading.RLock) -> None:
        with lock:
            try:
                L.export_close(pool._handle(), handle)
            except Exception:  # the pool is gone: nothing left to close
                pass

    def _state(self) -> Tuple[str, int, int]:
        s, n, total = L.i32(), L.u32(), L.u64()
        with self._lock:
            L.check(L.export_state(self._handle(), ctypes.byref(s), ctypes.byref(n), ctypes.byref(total)))
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
        is "active"."""
        size, n = L.size_t(), L.size_t()
        with self._lock:
            h = self._handle()
            L.check(L.export_descriptor(h, None, 0, ctypes.byref(size), None, 0, ctypes.byref(n)))
            buf = ctypes.create_string_buffer(size.value)
            fds = (ctypes.c_int * max(n.value, 1))()
            L.check(L.export_descriptor(h, buf, size.value, ctypes.byref(size), fds, n.value, ctypes.byref(n)))
        return buf.raw[:size.value], list(fds[:n.value])

    def send(self, sock: Union[socket.socket, int]) -> None:
        """Send the descriptor and its file descriptors over a connected Unix
        socket (the receiver calls :func:`recv`, or imports with
        :func:`open_descriptor`)."""
        fd = sock.fileno() if hasattr(sock, "fileno") else int(sock)
        with self._lock:
            L.check(L.export_send(self._handle(), fd))

    def handle(self) -> "Handle":
        """A picklable handle another process opens (:meth:`Handle.open`).
        Starts this process's descriptor server on first use."""
        with self._lock:
            if self._descriptor is None:
                self._descriptor = self.descriptor()[0]
            server = _fd_server()
            server.exports[_nonce(self._descriptor)] = self
            return Handle(self._descriptor, server.address, os.getpid())

    def close(self) -> None:
        """Close the export (idempotent): importers see "closed"; their
        mappings stay valid until they close them."""
        with self._lock:
            if self._h:
                self._finalizer.detach()
                h, self._h = self._h, None
                L.check(L.export_close(self._pool._handle(), h))

    def __enter__(self) -> "Export":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        if not self._h:
            return "<vpmm.ipc.Export closed>"
        return f"<vpmm.ipc.Export {len(self._entries)} allocation(s) {self.state}>"


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
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(30)
            try:
                s.connect(self.address)
            except OSError as e:
                raise WrongState(4, f"vpmm.ipc: the exporting process {self.pid} does not answer on its "
                                    f"descriptor socket ({e}): it exited, or is in another network "
                                    "namespace") from e
            s.sendall(self.nonce)
            status = _read_exact(s, 1)
            if status != b"\x00":
                raise WrongState(4, "vpmm.ipc: process %d: %s" % (self.pid, s.recv(4096).decode(errors="replace")))
            s.settimeout(None)
            try:
                desc, fds = recv(s)
            except VpmmError as e:
                raise WrongState(4, f"vpmm.ipc: process {self.pid} could not send the export's descriptors "
                                    f"(paused, freed or closed meanwhile?): {e}") from e
        try:
            return open_descriptor(pool, desc, fds)
        finally:
            for fd in fds:
                os.close(fd)

    def __repr__(self) -> str:
        return f"<vpmm.ipc.Handle of process {self.pid}, {len(self.descriptor)} bytes>"


class Import(_Entries):
    """An export mapped into this process (vpmm_pool_import). Close it (or
    leave the ``with`` block) once the device work using it completed."""

    _what = "import"

    def __init__(self, pool: Any, handle: int, nonce: bytes) -> None:
        self._pool = pool
        self._h: Optional[int] = handle
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
        L.check(L.import_state(self._handle(), ctypes.byref(s)))
        return STATES.get(s.value, str(s.value))

    @property
    def current(self) -> bool:
        """True while the import still shows the exporter's memory."""
        return self.state == "active"

    def close(self) -> None:
        """Unmap (idempotent). Synchronize the device work using it first."""
        if self._h:
            h, self._h = self._h, None
            L.check(L.import_close(self._pool._handle(), h))

    def __enter__(self) -> "Import":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        if not self._h:
            return "<vpmm.ipc.Import closed>"
        return f"<vpmm.ipc.Import {len(self._entries)} allocation(s) at {hex(self.ptr)} {self.state}>"


def open_descriptor(pool: Any, descriptor: bytes, fds: Optional[Sequence[int]]) -> Import:
    """Import a descriptor into `pool` with its file descriptors (which stay
    the caller's), or with None: taken from the exporter by pidfd_getfd."""
    _need()
    out = L.vp()
    if fds is None:
        L.check(L.pool_import(pool._handle(), descriptor, len(descriptor), None, 0, ctypes.byref(out)))
    else:
        arr = (ctypes.c_int * max(len(fds), 1))(*fds)
        L.check(L.pool_import(pool._handle(), descriptor, len(descriptor), arr, len(fds), ctypes.byref(out)))
    return Import(pool, out.value, _nonce(descriptor))


def send(sock: Union[socket.socket, int], descriptor: bytes, fds: Sequence[int]) -> None:
    """Send a descriptor and file descriptors (vpmm_ipc_send; they stay yours)."""
    _need()
    fd = sock.fileno() if hasattr(sock, "fileno") else int(sock)
    arr = (ctypes.c_int * max(len(fds), 1))(*fds)
    L.check(L.ipc_send(fd, descriptor, len(descriptor), arr, len(fds)))


def recv(sock: Union[socket.socket, int]) -> Tuple[bytes, List[int]]:
    """Receive what :meth:`Export.send` or :func:`send` sent: (descriptor,
    file descriptors). The file descriptors are the caller's to close."""
    _need()
    fd = sock.fileno() if hasattr(sock, "fileno") else int(sock)
    size, n = L.size_t(), L.size_t()
    L.check(L.ipc_recv(fd, None, 0, ctypes.byref(size), None, 0, ctypes.byref(n)))
    buf = ctypes.create_string_buffer(max(size.value, 1))
    fds = (ctypes.c_int * max(n.value, 1))()
    L.check(L.ipc_recv(fd, buf, size.value, ctypes.byref(size), fds, n.value, ctypes.byref(n)))
    return buf.raw[:size.value], list(fds[:n.value])


def _export(pool: Any, ptr: Optional[int], tag: Optional[str], by_tag: bool) -> Export:
    _need()
    out = L.vp()
    if by_tag:
        L.check(L.pool_export_tag(pool._handle(), tag.encode() if tag else None, ctypes.byref(out)))
    else:
        L.check(L.pool_export(pool._handle(), ptr, ctypes.byref(out)))
    return Export(pool, out.value)


def _export_many(pool: Any, ptrs: Sequence[int]) -> Export:
    _need()
    if L.pool_export_many is None:
        raise Unsupported(5, f"vpmm.ipc: the loaded libvpmm ({L.path}) has no vpmm_pool_export_many: it is "
                             "older than this binding")
    arr = (ctypes.c_void_p * max(len(ptrs), 1))(*ptrs)
    out = L.vp()
    L.check(L.pool_export_many(pool._handle(), arr, len(ptrs), ctypes.byref(out)))
    return Export(pool, out.value)


def stats(pool: Any) -> Dict[str, int]:
    """vpmm_pool_ipc_stats as a dict."""
    _need()
    s = L.sized(L.IpcStats)
    L.check(L.pool_ipc_stats(pool._handle(), ctypes.byref(s)))
    return {n: getattr(s, n) for n in L.field_names(L.IpcStats)}
