"""Finding and loading libvpmm.so.1, the C signatures, and the public structs
as ctypes classes built from the library's own layout facts
(vpmm_struct_layout / vpmm_struct_field), so the binding never carries a
copy of a struct that could drift from the library it loaded."""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import re
import threading
from typing import Any, Callable, Dict, List, Optional, Tuple, Type

from .errors import error_for_status

SONAME = "libvpmm.so.1"
_BUILD_DIRS = ("build", "build-ci", "build-gpu", "build-release")


def candidate_paths() -> List[str]:
    """Where :func:`library_path` looks, in order: $VPMM_LIBRARY; the copy
    installed inside this package (``pip install .`` of the source tree); the
    system loader's name for libvpmm (ld.so.cache, LD_LIBRARY_PATH at load
    time); the build directories of the source checkout this package sits in."""
    out: List[str] = []
    env = os.environ.get("VPMM_LIBRARY")
    if env:
        out.append(env)
    here = os.path.dirname(os.path.abspath(__file__))
    packaged = os.path.join(here, SONAME)
    # Only when present: a checkout's package directory has no library, and
    # listing a path that cannot exist would only lengthen the error.
    if os.path.exists(packaged):
        out.append(packaged)
    root = os.path.normpath(os.path.join(here, "..", "..", ".."))
    out.append(ctypes.util.find_library("vpmm") or SONAME)
    out.extend(os.path.join(root, b, SONAME) for b in _BUILD_DIRS)
    return out


def _load() -> Tuple[ctypes.CDLL, str]:
    errors = []
    env = os.environ.get("VPMM_LIBRARY")
    for path in candidate_paths():
        if os.sep in path and not os.path.exists(path):
            if path == env:
                # An explicit choice that does not exist is an error, not a
                # reason to pick some other library silently.
                raise ImportError(f"vpmm: VPMM_LIBRARY={env!r} does not exist")
            errors.append(f"{path}: not found")
            continue
        try:
            return ctypes.CDLL(path), path
        except OSError as e:
            if path == env:
                raise ImportError(f"vpmm: cannot load VPMM_LIBRARY={env!r}: {e}") from e
            errors.append(f"{path}: {e}")
    raise ImportError("vpmm: libvpmm.so.1 not found; install the package with the library inside "
                      "(pip install . at the root of the libvpmm source tree), set VPMM_LIBRARY to "
                      "its path, install it where the system loader finds it, or build it in the "
                      "source tree (meson setup build && ninja -C build). Tried: " + "; ".join(errors))


lib, path = _load()

u32, i32, u64, vp, cp, size_t = (ctypes.c_uint32, ctypes.c_int32, ctypes.c_uint64,
                                 ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t)


def sig(name: str, res: Any, *args: Any) -> Callable[..., Any]:
    """The library's function `name` with its ctypes signature set."""
    f = getattr(lib, name)
    f.restype, f.argtypes = res, list(args)
    return f


last_error = sig("vpmm_last_error", cp)
status_string = sig("vpmm_status_string", cp, i32)


def check(status: int) -> None:
    """Raise the exception of a failed status (VPMM_OK is the only success).
    The message is read right away, on the thread that made the call."""
    if status != 0:
        raise error_for_status(status, last_error().decode(errors="replace"))


# --- struct layouts from the library ---------------------------------------
class _FieldInfo(ctypes.Structure):
    # vpmm_field_info is the one struct the layout query itself needs; its
    # layout is fixed by ABI 1 (struct_size tells the library how much we read).
    _fields_ = [("struct_size", u32), ("kind", i32), ("name", cp), ("offset", u32), ("size", u32)]


_KINDS = {1: u32, 2: i32, 3: u64, 4: ctypes.c_double, 5: vp}
_layout = sig("vpmm_struct_layout", i32, cp, ctypes.POINTER(u32), ctypes.POINTER(u32))
_field = sig("vpmm_struct_field", i32, cp, u32, ctypes.POINTER(_FieldInfo))


def library_fields(struct: str) -> Tuple[int, List[Tuple[str, int, int, int]]]:
    """(sizeof, [(field, kind, offset, size)...]) of a public struct as the
    loaded library was built."""
    size, n = u32(), u32()
    check(_layout(struct.encode(), ctypes.byref(size), ctypes.byref(n)))
    fields = []
    for i in range(n.value):
        f = _FieldInfo()
        f.struct_size = ctypes.sizeof(_FieldInfo)
        check(_field(struct.encode(), i, ctypes.byref(f)))
        fields.append((f.name.decode(), f.kind, f.offset, f.size))
    return size.value, fields


def make_struct(struct: str, class_name: str) -> Type[ctypes.Structure]:
    """A ctypes.Structure with exactly the library's fields of `struct`, in
    order, checked field by field against the library's offsets and sizes
    (an unknown field kind or any disagreement is an ImportError: a binding
    that guessed would corrupt memory)."""
    size, fields = library_fields(struct)
    decl = []
    for name, kind, _off, _sz in fields:
        if kind not in _KINDS:
            raise ImportError(f"vpmm: {struct}.{name} has field kind {kind}, unknown to this binding")
        decl.append((name, _KINDS[kind]))
    cls = type(class_name, (ctypes.Structure,), {"_fields_": decl, "__doc__":
               f"{struct} as the loaded library lays it out (built from vpmm_struct_field)."})
    for name, _kind, off, sz in fields:
        d = getattr(cls, name)
        if (d.offset, d.size) != (off, sz):
            raise ImportError(f"vpmm: {struct}.{name} is at {off} ({sz} bytes) in the library, "
                              f"{d.offset} ({d.size} bytes) in ctypes")
    if ctypes.sizeof(cls) != size:
        raise ImportError(f"vpmm: sizeof({struct}) is {size} in the library, {ctypes.sizeof(cls)} in ctypes")
    return cls


Config = make_struct("vpmm_config", "Config")
Stats = make_struct("vpmm_stats", "Stats")
AllocAttrs = make_struct("vpmm_alloc_attrs", "AllocAttrs")
TagStats = make_struct("vpmm_tag_stats", "TagStats")
RegionInfo = make_struct("vpmm_region_info", "RegionInfo")


def field_names(cls: Type[ctypes.Structure]) -> List[str]:
    """The data fields of a struct class (struct_size and reservedN padding left out)."""
    return [n for n, _t in cls._fields_ if n != "struct_size" and not re.fullmatch(r"reserved\d+", n)]


def sized(cls: Type[ctypes.Structure]) -> Any:
    """A zeroed instance with struct_size set."""
    s = cls()
    s.struct_size = ctypes.sizeof(cls)
    return s


P = ctypes.POINTER
OOM_FN = ctypes.CFUNCTYPE(ctypes.c_int, vp, u64, vp)
PRESSURE_FN = ctypes.CFUNCTYPE(None, vp, ctypes.c_int, u64, vp)

version = sig("vpmm_version", cp)
abi_version = sig("vpmm_abi_version", i32)
config_init = sig("vpmm_config_init", None, P(Config))
config_init_defaults = sig("vpmm_config_init_defaults", None, P(Config))
# A configuration of this binding's size (libraries before it lack it: None).
config_init_sized: Optional[Callable[..., int]] = (
    sig("vpmm_config_init_sized", i32, P(Config), u32, u32) if hasattr(lib, "vpmm_config_init_sized") else None)
CONFIG_DEFAULTS_ONLY = 1
# An option's text into its config field (vpmm_config.ledger: the library
# keeps a copy of the name, so the struct never points at Python memory).
option_parse: Optional[Callable[..., int]] = (
    sig("vpmm_option_parse", i32, cp, cp, P(Config)) if hasattr(lib, "vpmm_option_parse") else None)
pool_create = sig("vpmm_pool_create", i32, P(Config), P(vp))
pool_destroy = sig("vpmm_pool_destroy", i32, vp)
pool_malloc_ex = sig("vpmm_pool_malloc_ex", i32, vp, u64, vp, P(AllocAttrs), P(vp))
pool_free = sig("vpmm_pool_free", i32, vp, vp, vp)
pool_lookup = sig("vpmm_pool_lookup", i32, vp, vp, P(vp), P(u64))
pool_stream_synchronize = sig("vpmm_pool_stream_synchronize", i32, vp, vp)
pool_stats = sig("vpmm_pool_stats", i32, vp, P(Stats))
pool_check = sig("vpmm_pool_check", i32, vp)
pool_pause_ex = sig("vpmm_pool_pause_ex", i32, vp, cp, P(u64))
pool_resume_ex = sig("vpmm_pool_resume_ex", i32, vp, cp, P(u64))
pool_prepare_backups = sig("vpmm_pool_prepare_backups", i32, vp, cp, P(u64))
pool_tag_stats = sig("vpmm_pool_tag_stats", i32, vp, cp, P(TagStats))
pool_trim = sig("vpmm_pool_trim", i32, vp, u64)
pool_dump = sig("vpmm_pool_dump", i32, vp, P(RegionInfo), size_t, P(size_t))
pool_dump_text = sig("vpmm_pool_dump_text", i32, vp, cp, size_t, P(size_t))
pool_layout = sig("vpmm_pool_layout", i32, vp, cp, size_t, P(size_t))
backend_info = sig("vpmm_backend_info", i32, i32, cp, size_t, P(size_t))
pool_get_config = sig("vpmm_pool_get_config", i32, vp, P(Config))
pool_backend_name = sig("vpmm_pool_backend_name", cp, vp)
backend_kind_name = sig("vpmm_backend_kind_name", cp, i32)
backup_store_name = sig("vpmm_backup_store_name", cp, u32, P(u32))
pool_set_limit = sig("vpmm_pool_set_limit", i32, vp, u64)
pool_reserve_ex = sig("vpmm_pool_reserve_ex", i32, vp, u64, u32, u64, P(vp))
reservation_info = sig("vpmm_reservation_info", i32, vp, vp, P(u64), P(u64))
reservation_release = sig("vpmm_reservation_release", i32, vp, vp)
pool_set_oom_callback = sig("vpmm_pool_set_oom_callback", i32, vp, OOM_FN, vp)
pool_set_pressure_callback = sig("vpmm_pool_set_pressure_callback", i32, vp, PRESSURE_FN, vp)
region_push = sig("vpmm_region_push", i32, cp, u32)
region_pop = sig("vpmm_region_pop", i32)
default_pool = sig("vpmm_default_pool", i32, i32, P(vp))
# Added after the first release of the ABI; absent from older libraries (then None).
pool_backup_lookup: Optional[Callable[..., int]] = (
    sig("vpmm_pool_backup_lookup", i32, vp, vp, P(vp), P(u64))
    if hasattr(lib, "vpmm_pool_backup_lookup") else None)
# Backup stores, retained backups, unchanged re-pause.
tag_scope_push_ex: Optional[Callable[..., int]] = (
    sig("vpmm_tag_scope_push_ex", i32, P(AllocAttrs)) if hasattr(lib, "vpmm_tag_scope_push_ex") else None)
pool_pause_flags: Optional[Callable[..., int]] = (
    sig("vpmm_pool_pause_flags", i32, vp, cp, u32, P(u64)) if hasattr(lib, "vpmm_pool_pause_flags") else None)
pool_set_backup_dir: Optional[Callable[..., int]] = (
    sig("vpmm_pool_set_backup_dir", i32, vp, cp) if hasattr(lib, "vpmm_pool_set_backup_dir") else None)
pool_resume_flags: Optional[Callable[..., int]] = (
    sig("vpmm_pool_resume_flags", i32, vp, cp, u32, P(u64)) if hasattr(lib, "vpmm_pool_resume_flags") else None)


def optional(name: str, res: Any, *args: Any) -> Optional[Callable[..., int]]:
    """`sig` for a function a library older than this binding may lack (None then)."""
    return sig(name, res, *args) if hasattr(lib, name) else None


# Sharing memory with other processes (vpmm.ipc); None in older libraries.
IpcEntry = make_struct("vpmm_ipc_entry", "IpcEntry") if hasattr(lib, "vpmm_pool_export") else None
IpcStats = make_struct("vpmm_ipc_stats", "IpcStats") if hasattr(lib, "vpmm_pool_export") else None
ip = ctypes.POINTER(ctypes.c_int)
pool_export = optional("vpmm_pool_export", i32, vp, vp, P(vp))
pool_export_tag = optional("vpmm_pool_export_tag", i32, vp, cp, P(vp))
export_entry = optional("vpmm_export_entry", i32, vp, size_t, vp)
export_descriptor = optional("vpmm_export_descriptor", i32, vp, vp, size_t, P(size_t), ip, size_t, P(size_t))
export_send = optional("vpmm_export_send", i32, vp, ctypes.c_int)
export_state = optional("vpmm_export_state", i32, vp, P(i32), P(u32), P(u64))
export_close = optional("vpmm_export_close", i32, vp, vp)
pool_import = optional("vpmm_pool_import", i32, vp, vp, size_t, ip, size_t, P(vp))
import_entry = optional("vpmm_import_entry", i32, vp, size_t, vp)
import_state = optional("vpmm_import_state", i32, vp, P(i32))
import_close = optional("vpmm_import_close", i32, vp, vp)
ipc_send = optional("vpmm_ipc_send", i32, ctypes.c_int, vp, size_t, ip, size_t)
ipc_recv = optional("vpmm_ipc_recv", i32, ctypes.c_int, vp, size_t, P(size_t), ip, size_t, P(size_t))
pool_ipc_stats = optional("vpmm_pool_ipc_stats", i32, vp, vp)
pool_export_many = optional("vpmm_pool_export_many", i32, vp, P(vp), size_t, P(vp))
pool_prepare_export = optional("vpmm_pool_prepare_export", i32, vp, cp, P(u64))

# The backend's calls by kind; None in older libraries.
DriverProfile = make_struct("vpmm_driver_profile", "DriverProfile") if hasattr(lib, "vpmm_pool_driver_profile") \
    else None
pool_driver_profile = optional("vpmm_pool_driver_profile", i32, vp, vp)
# Step marks (vpmm_pool_mark_step); None in older libraries.
pool_mark_step = optional("vpmm_pool_mark_step", i32, vp)



# --- lifetimes of the native handles the binding's objects own ---------------
_OPEN, _CLOSING, _RELEASING, _RELEASED = range(4)


class Guard:
    """Calls in flight on one native handle, and its close.

    A C handle must not be destroyed while another thread is inside a call
    on it (vpmm_pool_destroy racing vpmm_pool_free is a use-after-free), and
    a call that starts after the close must be refused, not sent to freed
    memory. Every native call runs inside ``with guard:``; :meth:`close`
    refuses new calls at once (raising ``closed_error()``), then releases
    the handle when the calls in flight have returned: it waits for them
    (``wait=True``), or leaves the release to the last of them
    (``wait=False``: for a call that may block on another process, such as
    a send to a peer that never reads). Calls the closing thread itself is
    inside (a callback, a signal handler) cannot be waited for: the release
    then runs when the outermost of them returns.

    The fast path takes no lock: a call first adds its thread to
    ``_threads`` and then reads ``_state``; close first sets ``_state`` and
    then reads ``_threads``. List operations are atomic (the GIL, or the
    list's own lock without it) and both sides touch the same list, so at
    least one of them sees the other: the call refuses itself, or close
    counts it. Only a call that ends while a close is pending takes the
    lock, to wake the close (or to run the release it left)."""

    __slots__ = ("_lock", "_idle", "_threads", "_state", "_release", "closed_error")

    def __init__(self, closed_error: Callable[[], Exception]) -> None:
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._threads: List[int] = []  # one entry per call in flight: its thread
        self._state = _OPEN
        self._release: Optional[Callable[[], None]] = None  # a release left to the last call out
        self.closed_error = closed_error

    @property
    def closing(self) -> bool:
        """True once close() started (new calls are refused)."""
        return self._state != _OPEN

    @property
    def released(self) -> bool:
        """True once the handle was released."""
        return self._state == _RELEASED

    def __enter__(self) -> "Guard":
        me = _get_ident()
        try:
            # An exception from a signal handler (KeyboardInterrupt) can land
            # right after the append: it must not leave the entry behind.
            self._threads.append(me)
            if self._state != _OPEN:
                raise self.closed_error()
        except BaseException:
            self._drop(me)
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        self._threads.remove(_get_ident())
        if self._state != _OPEN:
            self._ended()

    def _left(self) -> None:
        self._threads.remove(_get_ident())
        self._ended()

    def _drop(self, me: int) -> None:
        """Removes an entry of `me` if it is there (a call refused, or
        interrupted before its first instruction), then _ended."""
        try:
            self._threads.remove(me)
        except ValueError:
            return
        if self._state != _OPEN:
            self._ended()

    def _ended(self) -> None:
        """A call ended while a close is pending: wake it, or release."""
        with self._lock:
            self._idle.notify_all()
            if self._threads or self._release is None:
                return
            release, self._release = self._release, None
            self._state = _RELEASING
        self._run(release)

    def enter_unless_released(self) -> bool:
        """Enter even while a close waits for the calls in flight (it then
        waits for this one too): True, and the caller must ``__exit__``. A
        handle being released or released already: waits for the release to
        end and returns False, without entering. For what must reach the
        handle whatever its owner does (closing an export of a pool that is
        being destroyed: before the destroy, or after it against the dead
        pool, never during)."""
        with self._lock:
            while self._state == _RELEASING:
                self._idle.wait()
            if self._state == _RELEASED:
                return False
            me = _get_ident()
            try:
                self._threads.append(me)
            except BaseException:  # interrupted right after the append
                if me in self._threads:
                    self._threads.remove(me)
                raise
            return True

    def _run(self, release: Callable[[], None]) -> None:
        try:
            release()
        finally:
            with self._lock:
                self._state = _RELEASED
                self._idle.notify_all()

    def close(self, release: Callable[[], None], wait: bool = True) -> bool:
        """Refuse new calls, then run release() once no call is in flight
        (here, or in the last call to return). Returns False if the guard
        was closing or closed already (release is then not used; with
        `wait`, after the first close's release ended).
        release() runs exactly once; an exception from it propagates when
        it runs here."""
        me = _get_ident()
        with self._lock:
            if self._state != _OPEN:
                # Closed or closing on another thread: a waiting close
                # returns once the handle is released, as the first does
                # (unless this thread is inside a call the release waits for).
                while wait and self._state != _RELEASED and me not in self._threads:
                    self._idle.wait(0.05)
                return False
            self._state = _CLOSING
            if wait:
                # Woken by each call that ends; the timeout also rechecks in
                # case a call was interrupted (KeyboardInterrupt) between
                # leaving and waking us.
                while any(t != me for t in list(self._threads)):
                    self._idle.wait(0.05)
            if self._threads:
                self._release = release  # the last call out releases
                return True
            self._state = _RELEASING
        self._run(release)
        return True


_get_ident = threading.get_ident
