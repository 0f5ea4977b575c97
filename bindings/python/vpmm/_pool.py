"""Pools, reservations and allocation scopes over the C API."""
from __future__ import annotations

import contextlib
import ctypes
import os
import threading
import time
from concurrent.futures import Future
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Union

from . import _library as L
from .errors import InvalidArgument, OutOfMemory, Timeout, Unsupported

__all__ = ["Pool", "Reservation", "region", "default_pool", "BACKENDS", "REGION_KINDS",
           "ALLOC_HOST_BACKUP", "BACKUP_STORES"]

def _backend_kinds() -> Dict[str, int]:
    """The library's table of the backend kinds (vpmm_backend_kind_name)."""
    kinds: Dict[str, int] = {}
    while True:
        name = L.backend_kind_name(len(kinds))
        if not name:
            return kinds
        kinds[name.decode()] = len(kinds)


def _backup_stores() -> Dict[str, int]:
    """The library's table of the backup stores and their allocation flags
    (vpmm_backup_store_name), the default store first."""
    stores: Dict[str, int] = {}
    flag = ctypes.c_uint32(0)
    while True:
        name = L.backup_store_name(len(stores), ctypes.byref(flag))
        if not name:
            return stores
        stores[name.decode()] = flag.value


#: vpmm_config.backend values by name.
BACKENDS: Dict[str, int] = _backend_kinds()
#: vpmm_region_info.kind values and their names.
REGION_KINDS: Dict[int, str] = {1: "live", 2: "free", 3: "hole", 4: "zombie", 5: "small", 6: "paused", 7: "lent"}
#: VPMM_ALLOC_HOST_BACKUP: pause keeps the bytes in host memory, resume restores them.
ALLOC_HOST_BACKUP = 1
#: Where a backup lives (vpmm.h, "Backup stores"): page-locked memory cached
#: across pauses (the default), pageable memory given back to the OS at
#: resume, or a file per allocation in a directory.
_STORE_FLAGS: Dict[str, int] = _backup_stores()  # name -> VPMM_ALLOC_BACKUP_* (0: the default)
BACKUP_STORES: Tuple[str, ...] = tuple(_STORE_FLAGS)
_ALLOC_RETAIN_BACKUP = 8
_PAUSE_BACKUP_UNCHANGED = 1
_RESUME_RETAIN_BACKUP = 1
PathArg = Union[str, bytes, "os.PathLike[str]", "os.PathLike[bytes]"]
_RESERVE_MODES = {"try": 0, "block": 1, "upto": 2}
_OVERDRAFT = {None: 0, "fail": 0, "ignore": 0x10, "grow": 0x20}
_NO_TIMEOUT = (1 << 64) - 1
_RESERVE_SLICE_S = 0.05  # a blocking reserve's wait between looks at close()

# Observers of tag scopes and pauses, for vpmm.torch's memory history
# (vpmm/_snapshot.py registers them; nothing else does). A scope observer is
# called with (tag, backup store or None) when vpmm.region opens a scope and
# returns what to call when it closes; a pause observer is called with
# (pool, "pause" or "resume", tag) before the call and returns what to call
# with its result (whether anything changed) after it succeeded.
scope_observers: List[Callable[[Optional[str], Optional[str]], Callable[[], None]]] = []
pause_observers: List[Callable[[Any, str, Optional[str]], Callable[[bool], None]]] = []

Stream = Optional[int]
"""A stream handle as an integer (cudaStream_t, torch.cuda.Stream.cuda_stream,
a host stream); None or 0 is the backend's default stream."""


def _bytes_arg(what: str, value: Any, allow_zero: bool = True) -> int:
    """A byte count for a uint64_t/size_t parameter. ctypes would wrap -1 to
    2**64-1 and 2**64 to 0, and reject "1M" with an ArgumentError that names
    no parameter: each gets a message naming the parameter instead."""
    if isinstance(value, bool) or not hasattr(type(value), "__index__"):
        hint = " (sizes are ints: 1 << 20 for 1 MiB)" if isinstance(value, (str, bytes, float)) else ""
        raise TypeError(f"{what} must be an int number of bytes, not {type(value).__name__} "
                        f"{value!r}{hint}")
    n = value.__index__()
    if n < 0 or (n == 0 and not allow_zero):
        raise InvalidArgument(1, f"{what} must be {'>= 0' if allow_zero else '> 0'}, got {n}")
    if n >= 1 << 64:
        raise InvalidArgument(1, f"{what} {n} does not fit in 64 bits")
    return n


def _dir_arg(what: str, path: PathArg) -> bytes:
    """A directory argument as the library takes it: absolute (the working
    directory may change before the pause that writes there), encoded as the
    file system encodes it."""
    try:
        p = os.fsencode(os.path.abspath(os.fsdecode(os.fspath(path))))
    except TypeError:
        raise TypeError(f"{what} must be a path (str, bytes or os.PathLike), not "
                        f"{type(path).__name__}") from None
    if not os.fsdecode(os.fspath(path)):
        raise InvalidArgument(1, f"{what} is empty")
    return p


def _backup_attrs(who: str, tag: Optional[str], host_backup: bool, backup_store: Optional[str],
                  backup_dir: Optional[PathArg], retain_backup: bool) -> Tuple[int, Optional[bytes]]:
    """(VPMM_ALLOC_* flags, backup directory) of the backup keywords, checked
    here so that a mistake names the keyword rather than a flag bit."""
    if not host_backup:
        extra = [k for k, v in (("backup_store", backup_store is not None),
                                ("backup_dir", backup_dir is not None),
                                ("retain_backup", bool(retain_backup))) if v]
        if extra:
            what = ", ".join(extra)
            raise InvalidArgument(1, f"{who}: {what} {'needs' if len(extra) == 1 else 'need'} host_backup=True "
                                     f"(without a backup, a pause discards the bytes)")
        return 0, None
    if not tag:
        raise InvalidArgument(1, "host_backup needs a tag (only tagged allocations pause)")
    store = "pinned" if backup_store is None else backup_store
    if store not in _STORE_FLAGS:
        raise InvalidArgument(1, f"{who}: backup_store {backup_store!r} is not one of {BACKUP_STORES}")
    if backup_dir is not None and store != "disk":
        raise InvalidArgument(1, f"{who}: backup_dir is only used by backup_store='disk' "
                                 f"(backup_store is {store!r})")
    flags = ALLOC_HOST_BACKUP | _STORE_FLAGS[store] | (_ALLOC_RETAIN_BACKUP if retain_backup else 0)
    return flags, _dir_arg(f"{who}: backup_dir", backup_dir) if backup_dir is not None else None


def _needs(fn: Any, what: str) -> Any:
    if fn is None:
        raise NotImplementedError(f"the loaded libvpmm ({L.path}) predates {what}")
    return fn



_get_ident = threading.get_ident
_pool_free = L.pool_free
_pool_malloc_ex = L.pool_malloc_ex


def _pool_closed() -> InvalidArgument:
    return InvalidArgument(1, "the pool is closed")


def _in_background(work: Callable[[], int], name: str) -> "Future[int]":
    """Runs work() on a daemon thread started now; its result or exception
    goes to the returned Future."""
    fut: "Future[int]" = Future()
    fut.set_running_or_notify_cancel()

    def run() -> None:
        try:
            fut.set_result(work())
        except BaseException as e:  # noqa: BLE001 - handed to the Future
            fut.set_exception(e)

    threading.Thread(target=run, name=name, daemon=True).start()
    return fut

def _tag(tag: Optional[str]) -> Optional[bytes]:
    if tag is None or tag == "":
        return None
    if not isinstance(tag, str):
        raise TypeError(f"tag must be a str or None, not {type(tag).__name__}")
    return tag.encode()


class Reservation:
    """Bytes of a pool's capacity promised to one owner (vpmm_pool_reserve).

    Pass it to :meth:`Pool.malloc` (``reservation=``) to charge allocations
    to it. Release it with :meth:`release` or by leaving a ``with`` block;
    allocations still charged stay valid and count as unreserved."""

    def __init__(self, pool: "Pool", handle: int) -> None:
        self._pool = pool
        self._h: Optional[int] = handle
        self._guard = L.Guard(lambda: InvalidArgument(1, "the reservation is released"))

    @property
    def handle(self) -> int:
        """The vpmm_reservation* as an integer (0 once released)."""
        return self._h or 0

    def info(self) -> Tuple[int, int]:
        """(size, used): bytes reserved and bytes currently charged."""
        size, used = L.u64(), L.u64()
        with self._guard:
            self._pool._call(L.reservation_info, self._h, ctypes.byref(size), ctypes.byref(used))
        return size.value, used.value

    @property
    def size(self) -> int:
        """Bytes reserved."""
        return self.info()[0]

    @property
    def used(self) -> int:
        """Bytes of live allocations charged to the reservation."""
        return self.info()[1]

    def release(self) -> None:
        """Give the bytes back (idempotent; waits for info() calls in flight)."""
        def release() -> None:
            h, self._h = self._h, None
            self._pool._call(L.reservation_release, h)
        self._guard.close(release)

    def __enter__(self) -> "Reservation":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"<vpmm.Reservation {'released' if not self._h else hex(self._h)}>"


class Pool:
    """A libvpmm pool.

    ``Pool(backend, use_env=True, **fields)`` creates a pool that this object
    owns (destroyed by :meth:`close` or at the end of a ``with`` block; never
    implicitly, since live tensors may point into it). Keyword arguments are
    vpmm_config fields (page_size, va_size, host_capacity, memory_limit, ...).
    With ``use_env=False`` the VPMM_* environment variables are ignored.

    :func:`default_pool` returns a non-owning Pool over the library's
    process-wide pool of a device, the one the PyTorch and CuPy hooks use.

    Every method may be called from any thread (the pool serialises
    internally), :meth:`close` included: it waits for the calls other
    threads are making on the pool and for the background calls this
    binding started on it, and every call that starts after it raises
    :class:`vpmm.InvalidArgument` "the pool is closed". Failures raise the
    :class:`vpmm.VpmmError` subclass of the status.
    """

    def __init__(self, backend: str = "auto", use_env: bool = True, **fields: Any) -> None:
        if backend not in BACKENDS:
            raise InvalidArgument(1, f"unknown backend {backend!r} (one of {', '.join(BACKENDS)})")
        cfg = L.Config()
        if L.config_init_sized:  # the library writes no more than this binding's struct
            L.check(L.config_init_sized(ctypes.byref(cfg), ctypes.sizeof(cfg),
                                        0 if use_env else L.CONFIG_DEFAULTS_ONLY))
        else:
            (L.config_init if use_env else L.config_init_defaults)(ctypes.byref(cfg))
        cfg.backend = BACKENDS[backend]
        for k, v in fields.items():
            if k not in L.field_names(L.Config):
                raise TypeError(f"unknown vpmm_config field {k!r}")
            if isinstance(v, (str, bytes)) and dict(L.Config._fields_)[k] is L.vp:
                # A text field (ledger="name"): parsed by the library, which
                # keeps the copy the struct points at ("" = none).
                if L.option_parse is None:
                    raise TypeError(f"this libvpmm cannot set the text field {k!r}")
                L.check(L.option_parse(k.encode(), v.encode() if isinstance(v, str) else v, ctypes.byref(cfg)))
                continue
            setattr(cfg, k, v)
        h = L.vp()
        L.check(L.pool_create(ctypes.byref(cfg), ctypes.byref(h)))
        self._init(h.value, True)
        if cfg.exportable:
            # A pool made to share imports vpmm.ipc now, not in its first
            # export: that import is most of a first export's time on the
            # host backend (12-30 ms of 67 allocations' first export_many,
            # 0.5-1.1 ms for the next one).
            from . import ipc  # noqa: F401

    def _init(self, handle: int, owned: bool) -> None:
        self._h: Optional[int] = handle
        # The handle's value for calls that accept a destroyed pool
        # (vpmm_export_close, vpmm_import_close: its shell outlives it).
        self._raw = handle
        self._owned = owned
        self._guard = L.Guard(_pool_closed)
        self._callbacks: Dict[str, Any] = {}
        # Every callback ever installed stays referenced until the pool is
        # destroyed: a call in flight on another thread may still be inside
        # the one a set_*_callback just replaced.
        self._callbacks_kept: List[Any] = []
        self._background: List["Future[int]"] = []  # what _start_background started
        self._background_lock = threading.Lock()

    @classmethod
    def _wrap(cls, handle: int) -> "Pool":
        p = cls.__new__(cls)
        p._init(handle, False)
        return p

    def _handle(self) -> int:
        """The handle for a call made outside the pool's guard (by a caller
        that holds ``with pool._guard`` itself)."""
        if not self._h or self._guard.closing:
            raise _pool_closed()
        return self._h

    def _call(self, fn: Callable[..., int], *args: Any) -> None:
        """fn(pool, *args), refused once the pool is closing, waited for by
        close(); raises the status's exception."""
        with self._guard:
            L.check(fn(self._h, *args))

    def _start_background(self, work: Callable[[], int], name: str) -> "Future[int]":
        """_in_background, remembered so that close() waits for it."""
        with self._background_lock:
            if self._guard.closing:
                raise _pool_closed()
            fut = _in_background(work, name)
            self._background = [f for f in self._background if not f.done()] + [fut]
        return fut

    # --- lifetime --------------------------------------------------------
    @property
    def handle(self) -> int:
        """The vpmm_pool* as an integer (for other bindings or ctypes calls)."""
        return self._handle()

    @property
    def owned(self) -> bool:
        """True if :meth:`close` destroys the pool (False for default pools)."""
        return self._owned

    def close(self) -> None:
        """Destroy an owned pool (every pointer into it becomes invalid).
        A no-op on a default pool, which lives as long as the process.
        Idempotent, and safe to call while other threads use the pool: it
        first waits for the background calls this binding started on it
        (:meth:`prepare_backups_in_background`,
        :meth:`prepare_export_in_background`, which ``vpmm.torch.resume``
        starts by itself), then refuses new calls ("the pool is closed")
        and waits for the calls in flight before destroying the pool. A
        call that blocks (a ``reserve(mode="block")`` waits for capacity in
        slices and gives up when the pool closes; a :meth:`synchronize` on
        a stream that never completes does not) keeps close() waiting.
        Called from inside a call of the pool on the same thread (an OOM or
        pressure callback, a signal handler), it destroys the pool when that
        call returns."""
        if not self._owned:
            return
        if not self._guard.closing:
            with self._background_lock:
                background = list(self._background)
            for fut in background:  # a background call still uses the pool
                fut.exception()
        # A future started after that list was taken is waited for by the
        # guard (or refused, if its call starts after the close began).
        self._guard.close(self._destroy)

    def _destroy(self) -> None:
        h, self._h = self._h, None
        try:
            L.check(L.pool_destroy(h))
        finally:
            self._callbacks.clear()
            self._callbacks_kept.clear()

    def __enter__(self) -> "Pool":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        try:
            backend = self.backend
        except InvalidArgument:
            return "<vpmm.Pool closed>"
        kind = "owned" if self._owned else "default"
        return f"<vpmm.Pool {backend} {kind} {hex(self._raw)}>"

    # --- configuration ---------------------------------------------------
    @property
    def backend(self) -> str:
        """"cuda", "hip" or "host"."""
        with self._guard:
            return L.pool_backend_name(self._h).decode()

    def config(self) -> Dict[str, Any]:
        """The effective vpmm_config (defaults resolved) as a dict; "backend"
        is the backend's name (the same as :attr:`backend`), "backend_id"
        the vpmm_config value (:data:`BACKENDS`)."""
        c = L.sized(L.Config)
        self._call(L.pool_get_config, ctypes.byref(c))
        out = {n: getattr(c, n) for n in L.field_names(L.Config)}
        types = dict(L.Config._fields_)
        for n in out:  # text fields (ledger): the string, None when unset
            if types[n] is L.vp:
                out[n] = ctypes.string_at(out[n]).decode() if out[n] else None
        if "backend" in out:
            names = {v: k for k, v in BACKENDS.items()}
            out["backend_id"] = out["backend"]
            out["backend"] = names.get(out["backend"], str(out["backend"]))
        return out

    # --- allocation ------------------------------------------------------
    def malloc(self, size: int, stream: Stream = None, tag: Optional[str] = None,
               host_backup: bool = False, reservation: Optional[Reservation] = None, *,
               backup_store: Optional[str] = None, backup_dir: Optional[PathArg] = None,
               retain_backup: bool = False) -> int:
        """Allocate `size` bytes usable on `stream`; returns the address.

        With neither tag, host_backup nor reservation the calling thread's
        :func:`region` scope applies. A tag makes the allocation pausable;
        host_backup keeps its bytes across a pause, in `backup_store`
        ("pinned", the default; "mmap"; "disk", in `backup_dir` or the
        pool's :meth:`set_backup_dir`); retain_backup keeps the backup after
        the resume (see :func:`region`)."""
        size = _bytes_arg("malloc: size", size)  # 0: the library says why not
        out = L.vp()
        flags, dir_bytes = _backup_attrs("malloc", tag, host_backup, backup_store, backup_dir, retain_backup)
        if tag is None and not host_backup and reservation is None:
            attrs = None
        else:
            attrs = L.sized(L.AllocAttrs)
            attrs.flags = flags
            t = _tag(tag)
            buf = ctypes.create_string_buffer(t) if t else None  # lives until the call returns
            attrs.tag = ctypes.addressof(buf) if buf is not None else None
            dbuf = ctypes.create_string_buffer(dir_bytes) if dir_bytes else None
            if dbuf is not None:
                if not hasattr(attrs, "backup_dir"):
                    raise NotImplementedError(f"the loaded libvpmm ({L.path}) predates backup_dir")
                attrs.backup_dir = ctypes.addressof(dbuf)
        if reservation is None:
            g, me = self._guard, _get_ident()  # `with self._guard`, inlined (see free)
            try:
                g._threads.append(me)
                if g._state:
                    raise _pool_closed()
                st = _pool_malloc_ex(self._h, size, stream, ctypes.byref(attrs) if attrs is not None else None,
                                     ctypes.byref(out))
            finally:
                try:
                    g._threads.remove(me)
                except ValueError:  # interrupted before the append
                    pass
                if g._state:
                    g._ended()
            if st:
                L.check(st)
        else:
            with reservation._guard:  # not released under the call
                attrs.reservation = reservation._h
                self._call(L.pool_malloc_ex, size, stream, ctypes.byref(attrs), ctypes.byref(out))
        return out.value

    def free(self, ptr: int, stream: Stream = None) -> None:
        """Free an address returned by :meth:`malloc`, in the order of `stream`."""
        # `with self._guard`, inlined on the two hottest calls (L.Guard).
        g, me = self._guard, _get_ident()
        try:
            g._threads.append(me)  # inside the try: see L.Guard.__enter__
            if g._state:
                raise _pool_closed()
            st = _pool_free(self._h, ptr, stream)
        finally:
            try:
                g._threads.remove(me)
            except ValueError:  # interrupted before the append
                pass
            if g._state:
                g._ended()
        if st:
            L.check(st)

    def lookup(self, ptr: int) -> Tuple[int, int]:
        """(base, size) of the allocation containing `ptr` (interior pointers allowed)."""
        base, size = L.vp(), L.u64()
        self._call(L.pool_lookup, ptr, ctypes.byref(base), ctypes.byref(size))
        return base.value or 0, size.value

    def synchronize(self, stream: Stream = None) -> None:
        """Block until the work queued on `stream` completed."""
        self._call(L.pool_stream_synchronize, stream)

    # --- pause and resume ------------------------------------------------
    def pause(self, tag: Optional[str] = None, unchanged: bool = False) -> bool:
        """Pause every live allocation with `tag` (None: every tagged one):
        backups copied to their store, physical memory released, addresses
        kept. Returns True if something was paused, False if nothing with
        that tag was active.

        unchanged=True declares that nothing of `tag` was written since its
        last resume (frozen weights between weight updates): allocations
        whose retained backup (retain_backup=True) holds the bytes of their
        last pause are released without copying, so the pause costs the
        unmaps only; the others are copied as usual. The declaration is not
        checked: bytes written since the resume are lost (vpmm_pool_pause_flags)."""
        n = L.u64()
        after = [o(self, "pause", tag) for o in pause_observers]
        if unchanged:
            fn = _needs(L.pool_pause_flags, "vpmm_pool_pause_flags (pause(unchanged=True))")
            self._call(fn, _tag(tag), _PAUSE_BACKUP_UNCHANGED, ctypes.byref(n))
        else:
            self._call(L.pool_pause_ex, _tag(tag), ctypes.byref(n))
        for a in after:
            a(n.value > 0)
        return n.value > 0

    def set_backup_dir(self, path: Optional[PathArg]) -> None:
        """The directory where disk-store backups (backup_store="disk")
        allocated from now on without a backup_dir of their own keep their
        files (None: none; then $VPMM_BACKUP_DIR applies, else such a malloc
        raises :class:`vpmm.InvalidArgument`). Allocations made before keep
        theirs. The directory must exist when a pause writes there."""
        fn = _needs(L.pool_set_backup_dir, "vpmm_pool_set_backup_dir")
        self._call(fn, _dir_arg("set_backup_dir: path", path) if path is not None else None)

    def resume(self, tag: Optional[str] = None, retain_backup: bool = False) -> bool:
        """Resume paused allocations with `tag` (None: all) at the same
        addresses, restoring backups. Returns True if something was resumed.
        Raises :class:`vpmm.OutOfMemory` when memory is short; what was not
        resumed stays paused with its backup, so the call can be retried.

        retain_backup=True keeps the backups of what this call resumes
        (torch_memory_saver's retain_cpu_backup): :meth:`backup` still finds
        them, the next pause writes into them, and pause(unchanged=True) then
        releases without copying. A later resume without it gives back the
        backups of allocations made without retain_backup
        (vpmm_pool_resume_flags)."""
        n = L.u64()
        after = [o(self, "resume", tag) for o in pause_observers]
        if retain_backup:
            fn = _needs(L.pool_resume_flags, "vpmm_pool_resume_flags (resume(retain_backup=True))")
            self._call(fn, _tag(tag), _RESUME_RETAIN_BACKUP, ctypes.byref(n))
        else:
            self._call(L.pool_resume_ex, _tag(tag), ctypes.byref(n))
        for a in after:
            a(n.value > 0)
        return n.value > 0

    def prepare_backups(self, tag: Optional[str] = None) -> int:
        """Pin now the host buffers a pause of `tag` (None: every tag) would
        back up into, so that the first pause runs at copy speed instead of
        pinning (vpmm_pool_prepare_backups). Returns the pinned bytes cached
        after the call. The pool stays usable from other threads while it
        pins (the GIL is released too); a pause started meanwhile waits for
        it and uses its buffers."""
        n = L.u64()
        self._call(L.pool_prepare_backups, _tag(tag), ctypes.byref(n))
        return n.value

    def prepare_backups_in_background(self, tag: Optional[str] = None) -> "Future[int]":
        """:meth:`prepare_backups` on a daemon thread, started now: call it
        right after allocating the tagged memory and go on working; the first
        pause then finds its buffers pinned (or waits for the pinning still
        running, which costs less than pinning again). Returns a
        ``concurrent.futures.Future`` whose result is the pinned bytes cached,
        or whose exception is the :class:`vpmm.VpmmError` of a failed pinning
        (the pause then pins, or backs up in pageable memory, what is left)."""
        return self._start_background(lambda: self.prepare_backups(tag), "vpmm-prepare-backups")

    def tag_stats(self, tag: Optional[str] = None) -> Dict[str, int]:
        """Byte and region counts of one tag (None: all tagged allocations):
        live_bytes, paused_bytes, backup_bytes, n_live, n_paused."""
        s = L.sized(L.TagStats)
        self._call(L.pool_tag_stats, _tag(tag), ctypes.byref(s))
        return {n: getattr(s, n) for n in L.field_names(L.TagStats)}

    def backup(self, ptr: int) -> Optional[Tuple[int, int]]:
        """(host address, bytes) of the host backup of the allocation
        containing `ptr`: of a paused allocation (valid until it is resumed
        or freed), or the retained backup of an active one (retain_backup:
        the bytes of its last pause, valid until it is paused or freed, and
        at the same address while paused). None when it has no such backup:
        active without a retained one, paused without a backup, or backed up
        to disk (a file has no host address). The buffer belongs to the pool."""
        if L.pool_backup_lookup is None:
            raise NotImplementedError("the loaded libvpmm predates vpmm_pool_backup_lookup")
        host, n = L.vp(), L.u64()
        with self._guard:
            st = L.pool_backup_lookup(self._h, ptr, ctypes.byref(host), ctypes.byref(n))
        if st in (4, 5):  # WRONG_STATE: no backup to show; UNSUPPORTED: a disk file
            return None
        L.check(st)
        return host.value or 0, n.value

    # --- memory ----------------------------------------------------------
    def trim(self, keep_bytes: int = 0) -> None:
        """Give cached free memory back to the driver until at most
        `keep_bytes` stay mapped in free regions (torch.cuda.empty_cache)."""
        self._call(L.pool_trim, _bytes_arg("trim: keep_bytes", keep_bytes))

    def set_limit(self, limit_bytes: int) -> None:
        """Change the hard cap on mapped bytes (0 = none). Raises
        :class:`vpmm.WrongState` when more than that is in use after trimming."""
        self._call(L.pool_set_limit, _bytes_arg("set_limit: limit_bytes", limit_bytes))

    @property
    def limit(self) -> int:
        """The capacity in force: the memory limit, else the device's memory."""
        return self.stats()["capacity_bytes"]

    @limit.setter
    def limit(self, limit_bytes: int) -> None:
        self.set_limit(limit_bytes)

    def reserve(self, nbytes: int, mode: str = "try", overdraft: Optional[str] = None,
                timeout: Optional[float] = None) -> Reservation:
        """Reserve `nbytes` of capacity. mode: "try" (fail at once with
        OutOfMemory), "block" (wait, up to `timeout` seconds, then
        :class:`vpmm.Timeout`), "upto" (whatever is available, at least 1
        byte). overdraft: what an allocation beyond the reservation does:
        None/"fail", "ignore" (counts as unreserved), "grow"."""
        if mode not in _RESERVE_MODES or overdraft not in _OVERDRAFT:
            raise InvalidArgument(1, f"reserve: mode {mode!r} / overdraft {overdraft!r} unknown")
        nbytes = _bytes_arg("reserve: nbytes", nbytes)
        flags = _RESERVE_MODES[mode] | _OVERDRAFT[overdraft]
        out = L.vp()
        if mode != "block":
            self._call(L.pool_reserve_ex, nbytes, flags, _NO_TIMEOUT, ctypes.byref(out))
            return Reservation(self, out.value)
        # A blocking wait runs in slices, so that close() (which refuses the
        # frees the wait is waiting for) ends it with "the pool is closed"
        # instead of waiting for it forever.
        deadline = None if timeout is None else time.monotonic() + max(0.0, timeout)
        while True:
            left = _RESERVE_SLICE_S if deadline is None else min(_RESERVE_SLICE_S, deadline - time.monotonic())
            try:
                self._call(L.pool_reserve_ex, nbytes, flags, max(0, int(left * 1e9)), ctypes.byref(out))
                return Reservation(self, out.value)
            except Timeout as e:
                if deadline is not None and time.monotonic() >= deadline:
                    raise Timeout(e.status, f"vpmm_pool_reserve_ex: {nbytes} bytes did not become available "
                                            f"within {timeout} s") from None
                if self._guard.closing:
                    raise _pool_closed() from None

    def set_oom_callback(self, fn: Optional[Callable[["Pool", int], bool]]) -> None:
        """Call fn(pool, bytes) when a malloc or resume runs out of memory;
        a true return asks for a retry (at most 8). None removes it. An
        exception in fn counts as False (it is printed, not raised)."""
        if fn is None:
            self._call(L.pool_set_oom_callback, L.OOM_FN(), None)
            self._callbacks.pop("oom", None)  # still in _callbacks_kept
            return

        def tramp(_p: int, nbytes: int, _u: int) -> int:
            try:
                return 1 if fn(self, nbytes) else 0
            except Exception:  # an exception cannot cross the C frame
                import traceback
                traceback.print_exc()
                return 0
        cb = L.OOM_FN(tramp)
        self._callbacks_kept.append(cb)  # the C side holds a raw pointer to it
        self._call(L.pool_set_oom_callback, cb, None)
        self._callbacks["oom"] = cb

    def set_pressure_callback(self, fn: Optional[Callable[["Pool", bool, int], None]]) -> None:
        """Call fn(pool, under_pressure, mapped_bytes) when the mapped bytes
        cross the trigger watermark up or the stop watermark down. None removes it."""
        if fn is None:
            self._call(L.pool_set_pressure_callback, L.PRESSURE_FN(), None)
            self._callbacks.pop("pressure", None)  # still in _callbacks_kept
            return

        def tramp(_p: int, under: int, mapped: int, _u: int) -> None:
            try:
                fn(self, bool(under), mapped)
            except Exception:
                import traceback
                traceback.print_exc()
        cb = L.PRESSURE_FN(tramp)
        self._callbacks_kept.append(cb)
        self._call(L.pool_set_pressure_callback, cb, None)
        self._callbacks["pressure"] = cb

    # --- sharing with other processes (vpmm.ipc, docs/ipc.md) -------------
    def export(self, ptr: int) -> Any:
        """Export the live allocation containing `ptr` to other processes
        (the pool must be exportable: ``Pool(exportable=1)`` or
        VPMM_EXPORTABLE=1). Returns a :class:`vpmm.ipc.Export`."""
        from . import ipc
        return ipc._export(self, ptr, None, False)

    def export_many(self, ptrs: Sequence[int]) -> Any:
        """Export the live allocations containing each of `ptrs` as one
        :class:`vpmm.ipc.Export` (vpmm_pool_export_many): one descriptor and
        one round trip for all of them, an entry per allocation."""
        from . import ipc
        return ipc._export_many(self, ptrs)

    def prepare_export(self, tag: Optional[str] = None) -> int:
        """Do now what exporting every handle of `tag`'s active allocations
        would pay the driver for (vpmm_pool_prepare_export: CUDA exports each
        handle once and keeps the descriptor), so that the next export of
        them costs a descriptor duplicate per handle. Runs without the pool's
        lock (and the GIL). Returns the handles prepared."""
        n = L.u64()
        if L.pool_prepare_export is None:
            raise Unsupported(5, f"vpmm: the loaded libvpmm ({L.path}) has no vpmm_pool_prepare_export")
        self._call(L.pool_prepare_export, _tag(tag), ctypes.byref(n))
        return n.value

    def prepare_export_in_background(self, tag: Optional[str] = None) -> "Future[int]":
        """:meth:`prepare_export` on a daemon thread, started now (after a
        resume, while the trainer trains); a ``concurrent.futures.Future`` of
        the handles prepared."""
        return self._start_background(lambda: self.prepare_export(tag), "vpmm-prepare-export")

    def export_tag(self, tag: Optional[str]) -> Any:
        """Export every active allocation with `tag` as one
        :class:`vpmm.ipc.Export`."""
        from . import ipc
        return ipc._export(self, None, tag, True)

    def import_(self, handle: Any, fds: Optional[List[int]] = None) -> Any:
        """Map an export into this process: a :class:`vpmm.ipc.Handle`, or
        descriptor bytes with their file descriptors (None: taken with
        pidfd_getfd). Returns a :class:`vpmm.ipc.Import`."""
        from . import ipc
        if isinstance(handle, ipc.Handle):
            return handle.open(self)
        return ipc.open_descriptor(self, bytes(handle), fds)

    def ipc_stats(self) -> Dict[str, int]:
        """The pool's exports and imports (vpmm_pool_ipc_stats) by field name."""
        from . import ipc
        return ipc.stats(self)

    # --- observability ---------------------------------------------------
    def stats(self) -> Dict[str, int]:
        """Every vpmm_stats counter of the loaded library, by field name."""
        s = L.sized(L.Stats)
        self._call(L.pool_stats, ctypes.byref(s))
        return {n: getattr(s, n) for n in L.field_names(L.Stats)}

    def mark_step(self) -> None:
        """The program finished one step of its loop (vpmm_pool_mark_step):
        stats() then reports the closed step's wall time and the driver time
        its mallocs and frees spent (``n_steps``, ``last_step_ns``,
        ``last_step_driver_ns``, ``steps_ns``, ``steps_driver_ns``). The
        first mark opens the first step. Changes no placement decision.
        Raises Unsupported with a library that predates it."""
        if L.pool_mark_step is None:
            raise Unsupported(5, f"vpmm: the loaded libvpmm ({L.path}) has no vpmm_pool_mark_step")
        self._call(L.pool_mark_step)

    def driver_profile(self) -> Dict[str, int]:
        """The backend's driver calls by kind over the pool's life
        (vpmm_pool_driver_profile): ``<kind>_calls`` and ``<kind>_ns`` for
        create, release, map, unmap, set_access, reserve, event_record,
        event_query, event_destroy and stream_wait. Subtract two snapshots
        for an interval. Raises Unsupported with a library that predates it."""
        if L.pool_driver_profile is None:
            raise Unsupported(5, f"vpmm: the loaded libvpmm ({L.path}) has no vpmm_pool_driver_profile")
        s = L.sized(L.DriverProfile)
        self._call(L.pool_driver_profile, ctypes.byref(s))
        return {n: getattr(s, n) for n in L.field_names(L.DriverProfile) if n not in ("struct_size", "reserved0")}

    def check(self) -> None:
        """Verify every invariant of the pool; raises InternalError if one fails."""
        self._call(L.pool_check)

    def regions(self) -> List[Dict[str, Any]]:
        """Every region in ascending VA order, as dicts of vpmm_region_info
        fields with ``kind`` as a name ("live", "free", "hole", "paused", ...)."""
        n = L.size_t()
        self._call(L.pool_dump, None, 0, ctypes.byref(n))
        while True:
            cap = max(n.value, 1)
            buf = (L.RegionInfo * cap)()
            buf[0].struct_size = ctypes.sizeof(L.RegionInfo)  # the stride the library writes with
            self._call(L.pool_dump, buf, cap, ctypes.byref(n))
            if n.value <= cap:
                break
        names = [f for f in L.field_names(L.RegionInfo) if f != "kind"]
        return [dict({"kind": REGION_KINDS.get(r.kind, r.kind)}, **{f: getattr(r, f) for f in names})
                for r in buf[:n.value]]

    def dump(self) -> str:
        """The stats and the region map in the seed notation (vpmm_pool_dump_text)."""
        need = L.size_t()
        with self._guard:  # one pool between the two calls
            L.check(L.pool_dump_text(self._h, None, 0, ctypes.byref(need)))
            buf = ctypes.create_string_buffer(need.value)
            L.check(L.pool_dump_text(self._h, buf, need.value, None))
        return buf.value.decode()

    def layout(self) -> str:
        """The regions in the seed notation on one line, e.g.
        ``"[4][*6][1][11][*42]"`` (sizes in pages; vpmm_pool_layout)."""
        need = L.size_t()
        self._call(L.pool_layout, None, 0, ctypes.byref(need))
        while True:  # the pool may change between the calls: retry until it fits
            cap = need.value + 64
            buf = ctypes.create_string_buffer(cap)
            self._call(L.pool_layout, buf, cap, ctypes.byref(need))
            if need.value <= cap:
                return buf.value.decode()


@contextlib.contextmanager
def region(tag: Optional[str], host_backup: bool = False, *, backup_store: Optional[str] = None,
           backup_dir: Optional[PathArg] = None, retain_backup: bool = False) -> Iterator[None]:
    """Tag every allocation the calling thread makes inside the block
    (vpmm_region_push / vpmm_region_pop): mallocs without attributes, the
    PyTorch and CuPy hooks. Scopes nest; tag None opens an untagged scope.

    host_backup keeps the bytes across a pause, in `backup_store`:

    * ``"pinned"`` (default): page-locked host memory, the fastest; the
      buffers stay cached (and resident) for the next pause;
    * ``"mmap"``: pageable memory given back to the OS at resume, so host
      memory returns to where it was (copies are staged: slower);
    * ``"disk"``: a file per allocation in `backup_dir` (made absolute now;
      None: the pool's :meth:`Pool.set_backup_dir`, else $VPMM_BACKUP_DIR),
      overwritten in place by every pause and removed when the allocation
      is freed.

    retain_backup keeps each backup after the resume, with the bytes of the
    last pause (:meth:`Pool.backup` still finds it); the next pause writes
    into it again, or skips the copy when declared unchanged
    (``pause(tag, unchanged=True)``).

    The scope is per OS thread: allocations other threads make meanwhile are
    not tagged (PyTorch's autograd runs backward on threads of its own)."""
    flags, dir_bytes = _backup_attrs("region", tag, host_backup, backup_store, backup_dir, retain_backup)
    if flags & ~ALLOC_HOST_BACKUP or dir_bytes is not None:
        attrs = L.sized(L.AllocAttrs)
        attrs.flags = flags
        t = _tag(tag)
        tbuf = ctypes.create_string_buffer(t) if t else None  # copied by the library
        attrs.tag = ctypes.addressof(tbuf) if tbuf is not None else None
        dbuf = ctypes.create_string_buffer(dir_bytes) if dir_bytes else None
        if dbuf is not None:
            attrs.backup_dir = ctypes.addressof(dbuf)
        L.check(_needs(L.tag_scope_push_ex, "vpmm_tag_scope_push_ex (backup stores)")(ctypes.byref(attrs)))
    else:
        L.check(L.region_push(_tag(tag), flags))
    store = (backup_store or "pinned") if host_backup else None
    closers = [o(tag, store) for o in scope_observers]
    try:
        yield
    finally:
        for close_scope in reversed(closers):
            close_scope()
        L.check(L.region_pop())


_defaults: Dict[int, Pool] = {}
_defaults_lock = threading.Lock()


def default_pool(device: int = 0) -> Pool:
    """The library's process-wide pool of `device` (vpmm_default_pool): the
    pool the PyTorch and CuPy hooks allocate from. Created on first use from
    the VPMM_* environment; owned by the library (close() is a no-op). The
    same Pool object is returned for a device every time."""
    with _defaults_lock:
        p = _defaults.get(device)
        if p is None:
            h = L.vp()
            L.check(L.default_pool(device, ctypes.byref(h)))
            p = _defaults[device] = Pool._wrap(h.value)
        return p
