"""libvpmm from Python: GPU virtual-memory pools with pause and resume.

No third-party package is needed; PyTorch and CuPy support live in the
optional submodules :mod:`vpmm.torch` and :mod:`vpmm.cupy`.

    import vpmm
    pool = vpmm.Pool(backend="host")              # or "auto" / "cuda" / "hip"
    p = pool.malloc(1 << 20)
    with vpmm.region("weights", host_backup=True):
        w = pool.malloc(64 << 20)                 # tagged: pausable
    pool.pause("weights"); pool.resume("weights") # True: something changed
    print(pool.stats()["mapped_bytes"], pool.tag_stats("weights"))

    hooks = vpmm.default_pool(0)                  # the pool the framework hooks use
    hooks.pause("kv_cache")

The library is found through $VPMM_LIBRARY, then inside this package (where
``pip install .`` of the source tree puts it), then the system loader
(libvpmm.so.1), then the build directories of the source checkout this
package lives in (build/, build-ci/, build-gpu/).
"""
from __future__ import annotations

from typing import Any, Dict

from . import _library
from ._library import path as _path
from ._ledger import LEDGER_HOST, ledger, remove_ledger, set_ledger_budget  # docs/ledger.md
from ._pool import (ALLOC_HOST_BACKUP, BACKENDS, BACKUP_STORES, REGION_KINDS, Pool, Reservation,
                    default_pool, region)
from .errors import (BackendError, InternalError, InvalidArgument, OutOfMemory, Timeout,
                     UnknownPointer, Unsupported, VpmmError, WrongState)

# The ctypes structs, as built from the library's layout facts (also what
# tests/unit/test_binding_layout.py checks against vpmm_struct_field).
_Config = _library.Config
_Stats = _library.Stats
_AllocAttrs = _library.AllocAttrs
_TagStats = _library.TagStats
_RegionInfo = _library.RegionInfo

#: Former name of :class:`VpmmError`, kept for code written against it.
Error = VpmmError

__version__ = "0.1.0"

__all__ = ["Pool", "Reservation", "region", "default_pool", "library_path", "version",
           "abi_version", "use_as_torch_allocator", "default_pool_stats", "VpmmError", "Error",
           "InvalidArgument", "OutOfMemory", "UnknownPointer", "WrongState", "Unsupported",
           "BackendError", "InternalError", "Timeout", "BACKENDS", "REGION_KINDS",
           "ALLOC_HOST_BACKUP", "BACKUP_STORES", "backend_info", "ledger", "set_ledger_budget",
           "remove_ledger", "LEDGER_HOST"]


def library_path() -> str:
    """The path (or loader name) libvpmm was loaded from."""
    return _path


def version() -> str:
    """The loaded library's version, "MAJOR.MINOR.PATCH"."""
    return _library.version().decode()


def backend_info(backend: str) -> str:
    """One line about the driver a backend would use here ("hip": the HIP
    runtime's file and version and the ROCm paths it takes). Raises
    :class:`Unsupported` when the backend is not built in or has nothing to
    describe."""
    import ctypes
    buf = ctypes.create_string_buffer(1024)
    n = _library.size_t()
    _library.check(_library.backend_info(BACKENDS[backend], buf, len(buf), ctypes.byref(n)))
    return buf.value.decode(errors="replace")


def abi_version() -> int:
    """The loaded library's ABI version (the SONAME suffix)."""
    return int(_library.abi_version())


def use_as_torch_allocator() -> Any:
    """Route all of PyTorch's CUDA allocations through libvpmm's default
    pools; alias of :func:`vpmm.torch.use_as_allocator`. Call it before the
    first CUDA allocation. Returns the CUDAPluggableAllocator."""
    from . import torch as vtorch  # imports PyTorch only when asked
    return vtorch.use_as_allocator()


def default_pool_stats(device: int = 0) -> Dict[str, int]:
    """Statistics of the default pool of `device`; same as
    ``default_pool(device).stats()``."""
    return default_pool(device).stats()
