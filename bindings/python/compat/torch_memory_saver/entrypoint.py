"""TorchMemorySaver over libvpmm, in TMS's two hook modes.

"torch": a region is vpmm.torch.pool (a torch.cuda.MemPool over libvpmm's
pluggable-allocator hooks); only PyTorch's allocations inside region() are
pausable. "preload": the process runs under libvpmm_preload.so (started
inside configure_subprocess()), which routes every cudaMalloc of the process
(PyTorch's caching allocator, cuBLAS, NCCL, raw ctypes calls) into libvpmm;
a region is a libvpmm tag scope over a plain MemPool, so what is allocated
inside is tagged, what is allocated outside is not, and with
TMS_INIT_ENABLE=1 everything is tagged "default" from the process's start.
Pause and resume act on the default pools of the devices in either mode."""
from __future__ import annotations

import contextlib
import ctypes
import gc
import logging
import os
import threading
from typing import Any, Dict, Iterator, List, Optional, Set, Tuple

import vpmm
import vpmm.torch as vtorch  # first: without PyTorch it raises the ImportError that says so

import torch

from . import _env, _preload, _stores

logger = logging.getLogger(__name__)

__all__ = ["TorchMemorySaver", "configure_subprocess"]

_TAG_DEFAULT = "default"
_HOOK_MODES = ("torch", "preload")


class TorchMemorySaver:
    """torch_memory_saver's API on libvpmm (see the package docstring)."""

    def __init__(self) -> None:
        self._hook_mode: Optional[str] = None  # None: "preload" under the interposer, else "torch"
        self._initialized = False
        self._preload = False      # serving hook_mode "preload" (the interposer routes everything)
        self._interposed = False   # libvpmm_preload.so is in the process
        self._init_enable = False  # TMS_INIT_ENABLE: every allocation in a region from the start
        self._margin = 0
        self._retain = _env.flag("TMS_RETAIN_CPU_BACKUP")
        self._disk_dir: Optional[str] = None
        self._devices: Set[int] = set()   # devices with memory in regions
        self._active: Dict[int, int] = {}  # thread id -> region depth (for disable())
        # Preload mode: the plain MemPool of each (device, tag, backup) key, as
        # TMS keys its pools, so PyTorch never hands a block cached under one
        # tag to an allocation of another.
        self._native_pools: Dict[Tuple[Any, ...], Any] = {}
        # disable()'s MemPools that still held tensors when their block ended:
        # dropped once empty (dropping one with live tensors would have
        # PyTorch release it later, possibly inside a graph capture).
        self._parked: List[Any] = []

    # --- configuration -----------------------------------------------------
    @property
    def enabled(self) -> bool:
        """Always True: libvpmm needs no LD_PRELOAD to be active."""
        return True

    @property
    def hook_mode(self) -> str:
        """"preload" when the process runs under libvpmm_preload.so and no mode
        was chosen, else "torch", or the mode set. "preload" without the
        interposer is served as "torch" (only PyTorch's allocations inside
        regions are pausable), with a warning."""
        if self._hook_mode is not None:
            return self._hook_mode
        return "preload" if _preload.interposed() else "torch"

    @hook_mode.setter
    def hook_mode(self, mode: str) -> None:
        if mode not in _HOOK_MODES:
            raise ValueError(f"torch_memory_saver (libvpmm): hook_mode {mode!r} is not one of {_HOOK_MODES}")
        if self._initialized and mode != self.hook_mode:
            raise RuntimeError("torch_memory_saver (libvpmm): hook_mode cannot change after the first use")
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
        """Keep backups across resume (TMS_RETAIN_CPU_BACKUP=1 sets it at
        start): read at each resume, as TMS does. Needs libvpmm's retained
        backups; where the loaded libvpmm has none, a resume with it set
        raises NotImplementedError and resumes nothing."""
        return self._retain

    @retain_cpu_backup.setter
    def retain_cpu_backup(self, value: bool) -> None:
        self._retain = bool(value)

    def set_disk_backup_dir(self, path: str) -> None:
        """The directory of region(enable_disk_backup=True) backups that name
        none (created if needed; TMS_DISK_BACKUP_DIR is the default)."""
        os.makedirs(path, exist_ok=True)
        self._disk_dir = os.path.abspath(path)

    # --- initialisation ------------------------------------------------------
    def _ensure_initialized(self) -> None:
        if self._initialized:
            return
        if "expandable_segments:True" in os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""):
            raise RuntimeError("torch_memory_saver (libvpmm): PYTORCH_CUDA_ALLOC_CONF="
                               "expandable_segments:True is not supported (its segments bypass "
                               "cudaMalloc and MemPool routing); unset it")
        self._interposed = _preload.interposed()
        mode = self.hook_mode
        init_enable = _env.flag("TMS_INIT_ENABLE")
        if mode == "preload" and not self._interposed:
            if init_enable:
                raise RuntimeError("torch_memory_saver (libvpmm): TMS_INIT_ENABLE=1 needs the process to run "
                                   "under libvpmm_preload.so: start it inside configure_subprocess()")
            logger.warning("torch_memory_saver (libvpmm): hook_mode='preload' but %s is not loaded: "
                           "served through MemPool routing (only PyTorch allocations inside region() "
                           "are pausable); start the process inside configure_subprocess() for "
                           "whole-process routing", _preload.PRELOAD_NAME)
            mode = "torch"
        self._preload = mode == "preload"
        self._init_enable = self._preload and init_enable
        if self._init_enable and (_env.flag("TMS_INIT_ENABLE_CPU_BACKUP") or
                                  _env.flag("TMS_INIT_ENABLE_DISK_BACKUP")):
            # The interposer tags "default" with libvpmm's pinned host backup;
            # another store asked of TMS_INIT_* must be refused here, where it
            # can be, rather than only printed by the interposer.
            kwargs = _stores.region_kwargs(enable_cpu_backup=_env.flag("TMS_INIT_ENABLE_CPU_BACKUP"),
                                           enable_disk_backup=_env.flag("TMS_INIT_ENABLE_DISK_BACKUP"))
            if set(kwargs) != {"host_backup"}:
                raise NotImplementedError("torch_memory_saver (libvpmm): TMS_INIT_CPU_BACKUP_BACKEND / "
                                          "TMS_INIT_ENABLE_DISK_BACKUP ask for a backup store the "
                                          f"preload interposer cannot give the \"default\" tag ({kwargs})")
        self._initialized = True

    # --- regions -------------------------------------------------------------
    @contextlib.contextmanager
    def region(self, tag: str = _TAG_DEFAULT, enable_cpu_backup: bool = False,
               enable_disk_backup: bool = False, cpu_backup_backend: Optional[str] = None,
               disk_backup_dir: Optional[str] = None, **unsupported: Any) -> Iterator[None]:
        """Allocations made inside (on this thread) are pausable under `tag`;
        their bytes survive a pause with enable_cpu_backup (cpu_backup_backend
        "pinned" or "mmap") or enable_disk_backup. Regions nest (the innermost
        wins). A pinned backup's buffers are pinned on a background thread
        when the region ends, so that the first pause runs at copy speed
        (vpmm.torch's default, a libvpmm extension; VPMM_TMS_PIN_AHEAD=0 or
        VPMM_PIN_AHEAD=0 turns it off in hook mode "torch", VPMM_PIN_AHEAD=0
        in hook mode "preload")."""
        self._reject(unsupported, "region")
        kwargs = _stores.region_kwargs(enable_cpu_backup, cpu_backup_backend, enable_disk_backup,
                                       disk_backup_dir or self._disk_dir)
        self._ensure_initialized()
        tag = tag or _TAG_DEFAULT
        dev = torch.cuda.current_device()
        self._devices.add(dev)
        key = _thread_key()
        self._active[key] = self._active.get(key, 0) + 1
        try:
            if self._preload:
                _stores.require(vpmm.region, kwargs, "region()")
                pool = self._native_pool(dev, tag, kwargs)
                _preload.open_thread_scope()
                with torch.cuda.use_mem_pool(pool, device=dev):
                    with vpmm.region(tag, **kwargs):
                        yield
            else:
                _stores.require(vtorch.pool, kwargs, "region()")
                # Unset: vpmm.torch's default (a pinned backup is pinned ahead
                # when the region ends, unless VPMM_PIN_AHEAD=0); 1 or 0 decides.
                ahead = _env.flag("VPMM_TMS_PIN_AHEAD") if os.environ.get("VPMM_TMS_PIN_AHEAD", "").strip() \
                    else None
                pin_ahead = ahead if kwargs["host_backup"] and set(kwargs) == {"host_backup"} else False
                with vtorch.pool(tag=tag, device=dev, pin_ahead=pin_ahead, **kwargs):
                    yield
        finally:
            self._active[key] -= 1
            self._drop_empty_pools()  # what a disable() inside it parked, once no region is open

    def _native_pool(self, dev: int, tag: str, kwargs: Dict[str, Any]) -> Any:
        key = (dev, tag) + tuple(sorted(kwargs.items()))
        pool = self._native_pools.get(key)
        if pool is None:
            with torch.cuda.device(dev):
                pool = self._native_pools.setdefault(key, torch.cuda.MemPool())
        return pool

    @contextlib.contextmanager
    def cuda_graph(self, cuda_graph: Any, pool: Any = None, stream: Any = None,
                   capture_error_mode: str = "global", tag: str = _TAG_DEFAULT,
                   enable_cpu_backup: bool = False, cpu_backup_backend: Optional[str] = None,
                   **unsupported: Any) -> Iterator[None]:
        """torch.cuda.graph(...) whose memory is pausable under `tag`. The
        graph replays after pause + resume (addresses are kept). Hook mode
        "preload": every allocation of the capture, in `pool` too, is tagged.
        Hook mode "torch": the capture's private pool is a libvpmm MemPool with
        the tag; an explicit `pool` is PyTorch's and not pausable."""
        self._reject(unsupported, "cuda_graph")
        kwargs = _stores.region_kwargs(enable_cpu_backup, cpu_backup_backend)
        self._ensure_initialized()
        tag = tag or _TAG_DEFAULT
        dev = torch.cuda.current_device()
        self._devices.add(dev)
        if self._preload:
            _stores.require(vpmm.region, kwargs, "cuda_graph()")
            with self._graph_capture(dev):
                with vpmm.region(tag, **kwargs):
                    with torch.cuda.graph(cuda_graph, pool=pool, stream=stream,
                                          capture_error_mode=capture_error_mode):
                        yield
            return
        if pool is not None:
            logger.warning("torch_memory_saver (libvpmm): cuda_graph(pool=...) in hook mode 'torch' captures "
                           "into that pool; its memory is not pausable")
            with torch.cuda.graph(cuda_graph, pool=pool, stream=stream,
                                  capture_error_mode=capture_error_mode):
                yield
            return
        _stores.require(vtorch.graph, kwargs, "cuda_graph()")
        with vtorch.graph(cuda_graph, tag=tag, stream=stream, capture_error_mode=capture_error_mode,
                          device=dev, **kwargs):
            yield

    @contextlib.contextmanager
    def _graph_capture(self, dev: int) -> Iterator[None]:
        # A capture-time cudaMalloc must map fresh memory: reusing a region
        # freed on another stream could need a GPU-side wait on an event
        # recorded outside the capture, which invalidates it. With the device
        # idle and the cached memory given back, nothing is reused. No garbage
        # collection during the capture: a MemPool it destroyed would be
        # released by PyTorch inside the capture, which PyTorch forbids.
        torch.cuda.synchronize(dev)
        gc.collect()
        torch.cuda.empty_cache()
        vpmm.default_pool(dev).trim(0)
        gc_was_on = gc.isenabled()
        gc.disable()
        _preload.open_thread_scope()
        try:
            yield
        finally:
            if gc_was_on:
                gc.enable()

    @contextlib.contextmanager
    def disable(self) -> Iterator[None]:
        """Inside a region (or anywhere, with TMS_INIT_ENABLE in hook mode
        "preload"): allocate with PyTorch's own allocator in a fresh plain
        MemPool, neither tagged nor pausable. When the block ends, the pool's
        memory goes back to the device (once no tensor of it is left)."""
        self._ensure_initialized()
        if not (self._active.get(_thread_key()) or self._init_enable):
            raise RuntimeError("torch_memory_saver (libvpmm): disable() is only meaningful inside region()")
        dev = torch.cuda.current_device()
        with torch.cuda.device(dev):
            native = torch.cuda.MemPool()
        if self._preload:
            _preload.open_thread_scope()
        try:
            with torch.cuda.use_mem_pool(native, device=dev):
                with vpmm.region(None):  # untagged, whatever encloses it
                    yield
        finally:
            self._parked.append(native)
            del native
            self._drop_empty_pools()
            if self._interposed:
                vpmm.default_pool(dev).trim(0)

    def _drop_empty_pools(self) -> None:
        # Dropping the last reference makes PyTorch free the pool's cached
        # blocks (cudaFree: under the interposer, back to the device). Not
        # while any region's MemPool is in use: PyTorch 2.11 asserts
        # (captures_underway.empty() in synchronize_and_free_events) when a
        # pool is released during another pool's use_mem_pool; the region's
        # exit drops them instead.
        if self._parked and not torch.cuda.is_current_stream_capturing() and not any(self._active.values()):
            self._parked = [p for p in self._parked if not _mem_pool_is_empty(p)]

    # --- pause and resume ------------------------------------------------------
    def _pools(self, tag: Optional[str]) -> List[Tuple[int, vpmm.Pool]]:
        """(device, pool) of every device whose pool knows `tag` (a tag used
        on one device only is not an error on the others). Under the
        interposer every device with a CUDA context may hold tagged memory."""
        devices = set(self._devices)
        if self._interposed:
            devices |= _devices_with_context()
        out = []
        for d in sorted(devices):
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
        bytes of regions with a backup. Each device is synchronised first.
        Under the interposer the pools' cached free memory is given back too,
        so the device sees all of it free. Pausing what is already paused (or
        nothing) is a no-op."""
        self._ensure_initialized()
        pools = self._pools(tag)
        for dev, pool in pools:
            torch.cuda.synchronize(dev)
            pool.pause(tag)
        if self._interposed:
            self._drop_empty_pools()
            for _dev, pool in pools:
                pool.trim(0)

    def resume(self, tag: Optional[str] = None) -> None:
        """Give `tag` (None: everything) its GPU memory back at the same
        addresses and restore backups. Raises vpmm.OutOfMemory (retry after
        freeing memory) rather than exiting; what was not resumed stays
        paused with its backup."""
        self._ensure_initialized()
        kwargs = _stores.resume_kwargs(self._retain)
        for dev, pool in self._pools(tag):
            _stores.require(pool.resume, kwargs, "resume() with retain_cpu_backup=True",
                            instead="set retain_cpu_backup = False (get_cpu_backup answers while paused)")
            if self._margin:
                need = pool.tag_stats(tag)["paused_bytes"]
                free, _total = torch.cuda.mem_get_info(dev)
                if need and free < need + self._margin:
                    raise vpmm.OutOfMemory(2, f"torch_memory_saver.resume(tag={tag!r}): {need} bytes to "
                                              f"resume on device {dev} would leave less than "
                                              f"memory_margin_bytes={self._margin} free ({free} free)")
            pool.resume(tag, **kwargs)

    # --- backups -----------------------------------------------------------------
    def get_cpu_backup(self, x: torch.Tensor, zero_copy: bool = False) -> Optional[torch.Tensor]:
        """A CPU tensor with the backed-up bytes of the paused tensor `x`
        (a copy; with zero_copy a view of the pool's backup buffer, valid
        until `x` is resumed, or while the backup is retained). None when `x`
        has no backup now (active and not retained, not in a region, or paused
        without backup)."""
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
    return threading.get_ident()


def _devices_with_context() -> Set[int]:
    # The devices the interposer may have allocated on: a cudaMalloc needs
    # the device's primary context. Asking the driver creates none.
    has_context = getattr(torch._C, "_cuda_hasPrimaryContext", None)
    if has_context is None:
        return {torch.cuda.current_device()}
    return {d for d in range(torch.cuda.device_count()) if has_context(d)}


def _mem_pool_is_empty(pool: Any) -> bool:
    # True when no block of the MemPool holds a tensor (or awaits a stream):
    # dropping it then frees its memory at once. Without a snapshot to tell,
    # the pool is kept.
    snapshot = getattr(pool, "snapshot", None)
    if snapshot is None:
        return False
    try:
        segments = snapshot()
    except (RuntimeError, TypeError):
        return False
    return all(b.get("state") == "inactive" for s in segments for b in s.get("blocks", ()))


@contextlib.contextmanager
def configure_subprocess() -> Iterator[None]:
    """For the block, child processes start under libvpmm_preload.so (hook
    mode "preload"): LD_PRELOAD gets the interposer next to the libvpmm this
    process loaded (other entries are kept), VPMM_LIBRARY names that libvpmm.
    Both are restored afterwards. Raises FileNotFoundError when the
    interposer is not installed next to the library."""
    from .utils import change_env
    libvpmm = _preload.library_file(vpmm._library.lib) or vpmm.library_path()
    with contextlib.ExitStack() as stack:
        for key, value in _preload.child_environment(os.environ, libvpmm).items():
            stack.enter_context(change_env(key, value))
        yield
