"""TorchMemorySaver over vpmm.torch: regions are libvpmm tags routed through
torch.cuda.MemPool (PyTorch's pluggable-allocator path), pause/resume are
the default pool's."""
from __future__ import annotations

import contextlib
import ctypes
import logging
import os
from typing import Any, Dict, Iterator, Optional, Set

import vpmm
import vpmm.torch as vtorch  # first: without PyTorch it raises the ImportError that says so

import torch

logger = logging.getLogger(__name__)

__all__ = ["TorchMemorySaver", "configure_subprocess"]

_TAG_DEFAULT = "default"
_HOOK_MODES = ("torch", "preload")


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


class TorchMemorySaver:
    """torch_memory_saver's API on libvpmm (see the package docstring)."""

    def __init__(self) -> None:
        self._hook_mode = "torch"
        self._initialized = False
        self._margin = 0
        self._retain = _env_flag("TMS_RETAIN_CPU_BACKUP")
        # disable()'s plain-PyTorch MemPool per device, kept for the process:
        # a MemPool destroyed while its tensors live is released by PyTorch
        # later, at a moment it picks (possibly inside a graph capture, where
        # that release trips an internal assert).
        self._native_pools: Dict[int, Any] = {}
        self._devices: Set[int] = set()   # devices with memory in regions
        self._active: Dict[int, int] = {}  # thread id -> region depth (for disable())

    # --- configuration -----------------------------------------------------
    @property
    def enabled(self) -> bool:
        """Always True: libvpmm needs no LD_PRELOAD to be active."""
        return True

    @property
    def hook_mode(self) -> str:
        """"torch" (PyTorch's pluggable allocator in a MemPool). "preload" is
        accepted and served the same way: PyTorch's allocations inside a
        region are routed; raw cudaMalloc calls of other libraries are not
        intercepted (libvpmm does not replace cudaMalloc)."""
        return self._hook_mode

    @hook_mode.setter
    def hook_mode(self, mode: str) -> None:
        if mode not in _HOOK_MODES:
            raise ValueError(f"torch_memory_saver (libvpmm): hook_mode {mode!r} is not one of {_HOOK_MODES}")
        if self._initialized and mode != self._hook_mode:
            raise RuntimeError("torch_memory_saver (libvpmm): hook_mode cannot change after the first region")
        if mode == "preload":
            logger.info("torch_memory_saver (libvpmm): hook_mode='preload' is served through PyTorch's "
                        "pluggable allocator: only PyTorch allocations inside regions are pausable")
        self._hook_mode = mode

    @property
    def memory_margin_bytes(self) -> int:
        """Bytes that must stay free on the device after a resume; a resume
        that would leave less raises vpmm.OutOfMemory before touching anything."""
        return self._margin

    @memory_margin_bytes.setter
    def memory_margin_bytes(self, value: int) -> None:
        if value < 0:
            raise ValueError("memory_margin_bytes must be >= 0")
        self._margin = int(value)

    @property
    def retain_cpu_backup(self) -> bool:
        """Keep pinned backup buffers between pauses (TMS_RETAIN_CPU_BACKUP=1
        sets it at start). libvpmm always caches its pinned backup buffers
        (VPMM_BACKUP_CACHE_SIZE bounds the cache), so this flag changes
        nothing in how memory is kept; get_cpu_backup still needs the tensor
        to be paused."""
        return self._retain

    @retain_cpu_backup.setter
    def retain_cpu_backup(self, value: bool) -> None:
        self._retain = bool(value)

    # --- regions -------------------------------------------------------------
    def _ensure_initialized(self) -> None:
        if self._initialized:
            return
        if "expandable_segments:True" in os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""):
            raise RuntimeError("torch_memory_saver (libvpmm): PYTORCH_CUDA_ALLOC_CONF="
                               "expandable_segments:True is not supported with torch.cuda.MemPool "
                               "routing; unset it")
        self._initialized = True

    @contextlib.contextmanager
    def region(self, tag: str = _TAG_DEFAULT, enable_cpu_backup: bool = False, **unsupported: Any) -> Iterator[None]:
        """Tensors allocated inside (on this thread) are pausable under `tag`;
        with enable_cpu_backup their bytes survive a pause. With
        VPMM_TMS_PIN_AHEAD=1 (a libvpmm extension) their backup buffers are
        pinned on a background thread when the region ends, so that the first
        pause runs at copy speed."""
        self._reject(unsupported, "region")
        self._ensure_initialized()
        dev = torch.cuda.current_device()
        self._devices.add(dev)
        key = _thread_key()
        self._active[key] = self._active.get(key, 0) + 1
        try:
            pin_ahead = enable_cpu_backup and _env_flag("VPMM_TMS_PIN_AHEAD")
            with vtorch.pool(tag=tag or _TAG_DEFAULT, host_backup=enable_cpu_backup, device=dev,
                             pin_ahead=pin_ahead):
                yield
        finally:
            self._active[key] -= 1

    @contextlib.contextmanager
    def cuda_graph(self, cuda_graph: Any, pool: Any = None, stream: Any = None,
                   capture_error_mode: str = "global", tag: str = _TAG_DEFAULT,
                   enable_cpu_backup: bool = False, **unsupported: Any) -> Iterator[None]:
        """torch.cuda.graph(...) whose memory is pausable under `tag`. The
        graph replays after pause + resume (addresses are kept). An explicit
        `pool` makes the capture use that pool instead: its memory is then
        PyTorch's, not pausable."""
        self._reject(unsupported, "cuda_graph")
        self._ensure_initialized()
        dev = torch.cuda.current_device()
        self._devices.add(dev)
        if pool is not None:
            logger.warning("torch_memory_saver (libvpmm): cuda_graph(pool=...) captures into that pool; "
                           "its memory is not pausable")
            with torch.cuda.graph(cuda_graph, pool=pool, stream=stream,
                                  capture_error_mode=capture_error_mode):
                yield
            return
        with vtorch.graph(cuda_graph, tag=tag or _TAG_DEFAULT, host_backup=enable_cpu_backup,
                          stream=stream, capture_error_mode=capture_error_mode, device=dev):
            yield

    @contextlib.contextmanager
    def disable(self) -> Iterator[None]:
        """Inside a region: allocate with PyTorch's own allocator (not
        pausable) for the block, in a plain MemPool of this device (one per
        device, kept)."""
        self._ensure_initialized()
        if not self._active.get(_thread_key()):
            raise RuntimeError("torch_memory_saver (libvpmm): disable() is only meaningful inside region()")
        dev = torch.cuda.current_device()
        native = self._native_pools.get(dev)
        if native is None:
            native = self._native_pools.setdefault(dev, torch.cuda.MemPool())
        with torch.cuda.use_mem_pool(native):
            with vpmm.region(None):  # an untagged scope, should anything reach libvpmm
                yield

    # --- pause and resume ------------------------------------------------------
    def _pools(self, tag: Optional[str]) -> Any:
        """(device, pool) of every device whose pool knows `tag` (a tag used
        on one device only is not an error on the others)."""
        out = []
        for d in sorted(self._devices):
            pool = vpmm.default_pool(d)
            if tag is not None:
                try:
                    pool.tag_stats(tag)
                except vpmm.InvalidArgument:  # never used on this device
                    continue
            out.append((d, pool))
        return out

    def pause(self, tag: Optional[str] = None) -> None:
        """Release the GPU memory of `tag` (None: every region), keeping the
        bytes of regions with enable_cpu_backup in pinned host memory.
        Pausing what is already paused (or nothing) is a no-op."""
        self._ensure_initialized()
        for dev, pool in self._pools(tag):
            torch.cuda.synchronize(dev)
            pool.pause(tag)

    def resume(self, tag: Optional[str] = None) -> None:
        """Give `tag` (None: everything) its GPU memory back at the same
        addresses and restore backups. Raises vpmm.OutOfMemory (retry after
        freeing memory) rather than exiting; what was not resumed stays
        paused with its backup."""
        self._ensure_initialized()
        for dev, pool in self._pools(tag):
            if self._margin:
                need = pool.tag_stats(tag)["paused_bytes"]
                free, _total = torch.cuda.mem_get_info(dev)
                if need and free < need + self._margin:
                    raise vpmm.OutOfMemory(2, f"torch_memory_saver.resume(tag={tag!r}): {need} bytes to "
                                              f"resume on device {dev} would leave less than "
                                              f"memory_margin_bytes={self._margin} free ({free} free)")
            pool.resume(tag)

    # --- backups -----------------------------------------------------------------
    def get_cpu_backup(self, x: torch.Tensor, zero_copy: bool = False) -> Optional[torch.Tensor]:
        """A CPU tensor with the backed-up bytes of the paused tensor `x`
        (a copy; with zero_copy a view of the pool's pinned backup buffer,
        valid until `x` is resumed). None when `x` is not paused or has no
        backup."""
        if not (x.is_cuda and x.is_contiguous()):
            raise ValueError("get_cpu_backup needs a contiguous CUDA tensor")
        pool = vpmm.default_pool(x.device.index if x.device.index is not None else torch.cuda.current_device())
        nbytes = x.numel() * x.element_size()
        try:
            got = pool.backup(x.data_ptr())
        except vpmm.UnknownPointer:
            return None
        if got is None:
            return None
        host, avail = got
        if avail < nbytes:
            raise RuntimeError(f"get_cpu_backup: the backup holds {avail} bytes from the tensor's start, "
                               f"the tensor needs {nbytes}")
        if nbytes == 0:
            return torch.empty(x.shape, dtype=x.dtype)
        raw = (ctypes.c_uint8 * nbytes).from_address(host)
        flat = torch.frombuffer(raw, dtype=torch.uint8)
        out = flat.view(x.dtype).view(x.shape)
        return out if zero_copy else out.clone()

    @staticmethod
    def _reject(kwargs: Dict[str, Any], call: str) -> None:
        # Newer torch_memory_saver options, passed with their "off" value
        # (None/False) by callers that forward every argument, are fine.
        kwargs = {k: v for k, v in kwargs.items() if v not in (None, False)}
        if kwargs:
            raise TypeError(f"torch_memory_saver (libvpmm): {call}() does not support "
                            f"{', '.join(sorted(kwargs))} (see docs/torch_memory_saver.md)")


def _thread_key() -> int:
    import threading
    return threading.get_ident()


@contextlib.contextmanager
def configure_subprocess() -> Iterator[None]:
    """torch_memory_saver sets LD_PRELOAD here for child processes; libvpmm
    needs no preloading. The block exports VPMM_LIBRARY (the library this
    process loaded) so children load the same one, then restores it."""
    from .utils import change_env
    path = vpmm.library_path()
    with change_env("VPMM_LIBRARY", path if os.sep in path else os.environ.get("VPMM_LIBRARY")):
        yield
