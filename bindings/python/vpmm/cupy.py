"""CuPy on libvpmm: ``use_as_allocator()`` makes every CuPy allocation come
from libvpmm's default pool of its device, through
``cupy.cuda.memory.CFunctionAllocator`` over the C entry points
vpmm_cupy_malloc / vpmm_cupy_free. Tags come from :func:`vpmm.region` on
the allocating thread (or are fixed per allocator, see :func:`allocator`):

    import cupy, vpmm, vpmm.cupy
    vpmm.cupy.use_as_allocator()
    with vpmm.region("kv", host_backup=True):
        a = cupy.ones(1 << 20)
    vpmm.cupy.pause("kv"); vpmm.cupy.resume("kv")

CuPy hands the hooks no stream: libvpmm orders the memory on the legacy
default stream, which waits for CuPy's ordinary (blocking) streams. Work on
non-blocking streams must be synchronized before a pause or a free.
"""
from __future__ import annotations

import ctypes
from typing import Any, Callable, Dict, Optional

try:
    import cupy as _cupy
except ImportError as _e:
    raise ImportError(
        "vpmm.cupy needs CuPy, which is not installed (import cupy failed: "
        f"{_e}). Install cupy, or use vpmm (Pool, default_pool, region) without it.") from _e

from . import _library as L
from ._pool import ALLOC_HOST_BACKUP, Pool, default_pool as _default_pool
from .errors import InvalidArgument, OutOfMemory

__all__ = ["allocator", "use_as_allocator", "pause", "resume", "default_pool"]

_MALLOC = ctypes.cast(L.lib.vpmm_cupy_malloc, ctypes.c_void_p).value
_FREE = ctypes.cast(L.lib.vpmm_cupy_free, ctypes.c_void_p).value


class _FixedAttrs:
    """A vpmm_alloc_attrs that lives as long as the allocator using it."""

    def __init__(self, tag: str, host_backup: bool) -> None:
        self.tag_buf = ctypes.create_string_buffer(tag.encode())
        self.attrs = L.sized(L.AllocAttrs)
        self.attrs.flags = ALLOC_HOST_BACKUP if host_backup else 0
        self.attrs.tag = ctypes.addressof(self.tag_buf)


def allocator(tag: Optional[str] = None, host_backup: bool = False) -> Callable[[int], Any]:
    """A CuPy allocator (size -> MemoryPointer) over libvpmm, for
    ``cupy.cuda.set_allocator`` or ``cupy.cuda.using_allocator``. Without a
    tag the allocating thread's :func:`vpmm.region` scope applies; with one,
    every allocation through it carries that tag. A failed allocation raises
    :class:`vpmm.OutOfMemory` (a MemoryError) with libvpmm's reason."""
    if host_backup and not tag:
        raise InvalidArgument(1, "vpmm.cupy.allocator: host_backup needs a tag")
    fixed = _FixedAttrs(tag, host_backup) if tag else None
    param = ctypes.addressof(fixed.attrs) if fixed else 0
    c_alloc = _cupy.cuda.memory.CFunctionAllocator(param, _MALLOC, _FREE, fixed)

    def malloc(size: int) -> Any:
        mem = c_alloc.malloc(size)
        if size and not mem.ptr:
            # CuPy does not check the hook's NULL; the reason is this thread's last error.
            raise OutOfMemory(2, L.last_error().decode(errors="replace") or
                              f"vpmm_cupy_malloc: {size} bytes")
        return mem
    malloc.vpmm_allocator = c_alloc  # type: ignore[attr-defined]
    return malloc


_installed: Dict[str, Any] = {}


def use_as_allocator(tag: Optional[str] = None, host_backup: bool = False) -> Callable[[int], Any]:
    """Make libvpmm CuPy's allocator (cupy.cuda.set_allocator) for every
    device; returns the allocator. Arrays allocated before keep their memory."""
    a = allocator(tag, host_backup)
    _cupy.cuda.set_allocator(a)
    _installed["current"] = a
    return a


def _device(device: Optional[int]) -> int:
    return _cupy.cuda.Device().id if device is None else int(device)


def default_pool(device: Optional[int] = None) -> Pool:
    """The libvpmm default pool of a device (current CuPy device if None)."""
    return _default_pool(_device(device))


def pause(tag: Optional[str] = None, device: Optional[int] = None) -> bool:
    """Synchronize the device, then pause `tag` (None: every tag) in its
    default pool. Returns True if something was paused."""
    with _cupy.cuda.Device(_device(device)):
        _cupy.cuda.Device().synchronize()
    return default_pool(device).pause(tag)


def resume(tag: Optional[str] = None, device: Optional[int] = None) -> bool:
    """Resume `tag` (None: all) in the device's default pool; True if
    something was resumed. OutOfMemory leaves the rest paused: retry later."""
    return default_pool(device).resume(tag)
