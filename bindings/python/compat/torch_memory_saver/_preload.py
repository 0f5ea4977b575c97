"""libvpmm_preload.so seen from Python: whether this process runs under it,
which libvpmm it loaded, and the environment that puts a child under it.

No PyTorch here, and no import of vpmm: bind_library() must run before vpmm
loads its library, so that the Python side drives the libvpmm the
interposer loaded (one set of default pools and tag scopes, not two)."""
from __future__ import annotations

import ctypes
import os
import sys
from typing import Any, Dict, Mapping, MutableMapping, Optional

__all__ = ["PRELOAD_NAME", "interposed", "global_library", "library_file", "bind_library",
           "open_thread_scope", "preload_library", "child_environment"]

#: The interposer's file name; it is installed (and built) next to libvpmm.so.1.
PRELOAD_NAME = "libvpmm_preload.so"
# Exported by libvpmm_preload.so alone: its presence in the global scope
# says the interposer is loaded.
_SCOPE_SYMBOL = "vpmm_preload_open_scope"


class _DlInfo(ctypes.Structure):
    _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]


def _global_address(name: str) -> Optional[int]:
    # dlsym(RTLD_DEFAULT, name): the global scope, where LD_PRELOAD libraries
    # and their dependencies are, never a library ctypes opened RTLD_LOCAL.
    try:
        fn = getattr(ctypes.CDLL(None), name)
    except AttributeError:
        return None
    return ctypes.cast(fn, ctypes.c_void_p).value


def _file_of(address: int) -> Optional[str]:
    # dladdr lives in libc from glibc 2.34, in libdl before.
    for lib in (None, "libdl.so.2"):
        try:
            dladdr = ctypes.CDLL(lib).dladdr
        except (OSError, AttributeError):
            continue
        dladdr.argtypes = [ctypes.c_void_p, ctypes.POINTER(_DlInfo)]
        dladdr.restype = ctypes.c_int
        info = _DlInfo()
        if dladdr(address, ctypes.byref(info)) and info.dli_fname:
            return os.fsdecode(info.dli_fname)
    return None


def interposed() -> bool:
    """True when libvpmm_preload.so is loaded in this process (LD_PRELOAD)."""
    return _global_address(_SCOPE_SYMBOL) is not None


def global_library() -> Optional[str]:
    """The file of the libvpmm the interposer loaded (it sits in the global
    scope); None when the process does not run under the interposer."""
    if not interposed():
        return None
    address = _global_address("vpmm_get_api")
    return _file_of(address) if address else None


def library_file(cdll: Any) -> Optional[str]:
    """The file a ctypes.CDLL of libvpmm was loaded from (a loader name such
    as "libvpmm.so.1" resolved to its path)."""
    return _file_of(ctypes.cast(cdll.vpmm_get_api, ctypes.c_void_p).value)


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def bind_library(environ: Optional[MutableMapping[str, str]] = None,
                 modules: Optional[Mapping[str, Any]] = None) -> Optional[str]:
    """Under the interposer, make the vpmm package load the libvpmm the
    interposer loaded: VPMM_LIBRARY is set to that file when unset. Raises
    ImportError when VPMM_LIBRARY, or a vpmm already imported, names another
    file (two libraries would keep two sets of pools: what Python pauses
    would not be what the interposer allocated). Returns the file, or None
    when the process does not run under the interposer."""
    environ = os.environ if environ is None else environ
    modules = sys.modules if modules is None else modules
    path = global_library()
    if path is None:
        return None
    loaded = modules.get("vpmm._library")
    if loaded is not None:
        mine = library_file(loaded.lib)
        if not mine or not _same_file(mine, path):
            raise ImportError(f"torch_memory_saver (libvpmm): vpmm was imported with {mine or loaded.path}, "
                              f"but {PRELOAD_NAME} loaded {path}: import torch_memory_saver before vpmm, "
                              f"or set VPMM_LIBRARY={path}")
        return path
    wanted = environ.get("VPMM_LIBRARY")
    if not wanted:
        environ["VPMM_LIBRARY"] = path
    elif not _same_file(wanted, path):
        raise ImportError(f"torch_memory_saver (libvpmm): VPMM_LIBRARY={wanted} is not the library "
                          f"{PRELOAD_NAME} loaded ({path}); unset VPMM_LIBRARY or point it at that file "
                          f"(configure_subprocess() sets both)")
    return path


def open_thread_scope() -> None:
    """Open the interposer's environment scope (TMS_INIT_ENABLE's "default")
    on the calling thread before it pushes a scope of its own; a no-op
    without the interposer or when the thread has it already. Raises
    RuntimeError when the interposer could not open it (it printed why)."""
    address = _global_address(_SCOPE_SYMBOL)
    if address is None:
        return
    status = ctypes.CFUNCTYPE(ctypes.c_int)(address)()
    if status != 0:
        raise RuntimeError(f"torch_memory_saver (libvpmm): {_SCOPE_SYMBOL} failed with status {status} "
                           f"(the reason is on stderr)")


def preload_library(libvpmm: str) -> str:
    """The libvpmm_preload.so next to the libvpmm file `libvpmm` (where the
    build and every install put it; it finds that libvpmm through $ORIGIN).
    Raises FileNotFoundError naming the place looked at."""
    path = os.path.join(os.path.dirname(os.path.abspath(libvpmm)), PRELOAD_NAME)
    if not os.path.exists(path):
        raise FileNotFoundError(f"torch_memory_saver (libvpmm): {PRELOAD_NAME} is not next to {libvpmm} "
                                f"(looked for {path}); build or install libvpmm with it")
    return path


def child_environment(environ: Mapping[str, str], libvpmm: str) -> Dict[str, str]:
    """The variables a child process needs to run under the interposer with
    the libvpmm `libvpmm`: LD_PRELOAD with libvpmm_preload.so first (entries
    already there are kept, the interposer is not listed twice) and
    VPMM_LIBRARY naming that libvpmm for the child's vpmm package."""
    preload = preload_library(libvpmm)
    entries = [e for e in environ.get("LD_PRELOAD", "").replace(" ", ":").split(":") if e]
    others = [e for e in entries if not _same_file(e, preload)]
    return {"LD_PRELOAD": ":".join([preload] + others),
            "VPMM_LIBRARY": os.path.abspath(libvpmm)}
