"""PyTorch on libvpmm: all of PyTorch, or only the allocations made inside a
``with vpmm.torch.pool(tag):`` block, with pause/resume by tag.

Two ways to route memory, chosen per process:

* :func:`use_as_allocator` replaces PyTorch's CUDA allocator for the whole
  process (CUDAPluggableAllocator over vpmm_torch_malloc/vpmm_torch_free).
  Call it before the first CUDA allocation.
* :func:`pool` leaves PyTorch's caching allocator in charge and routes only
  what is allocated inside the block through libvpmm, into a
  ``torch.cuda.MemPool`` whose allocator is libvpmm (one MemPool per device,
  tag and host_backup). Everything else stays on PyTorch's own allocator.

Either way the memory comes from the default pool of the device
(:func:`default_pool`), and :func:`pause` / :func:`resume` release and
restore the physical memory of a tag while every tensor keeps its address,
so CUDA graphs captured over those tensors replay after a resume.

Sharing with other processes (docs/ipc.md): :func:`share` makes a tensor
in libvpmm memory openable in another process (:func:`open`, no copy),
:func:`share_many` / :func:`open_many` do it for many tensors in one export,
and :func:`install_reductions` routes such tensors (and state dicts, as one
export) through torch.multiprocessing queues; the default pools must be
exportable (VPMM_EXPORTABLE=1).

Thread rule: the tag reaches libvpmm through the calling thread's
vpmm_region_push scope, and ``torch.cuda.use_mem_pool`` routes the calling
thread only, so both hold for allocations made *on the thread that entered
the block*. Allocations PyTorch makes on other threads (autograd's backward
threads, DataLoader workers) are not routed or tagged; enter the block on
those threads too if they must be.
"""
from __future__ import annotations

import collections
import contextlib
import ctypes
import gc
import os
import threading
import warnings
from concurrent.futures import Future
from typing import Any, Deque, Dict, Iterator, Optional, Tuple

try:
    import torch as _torch
except ImportError as _e:  # the binding itself needs no framework
    raise ImportError(
        "vpmm.torch needs PyTorch, which is not installed (import torch failed: "
        f"{_e}). Install torch, or use vpmm (Pool, default_pool, region) without it.") from _e

from . import _pool as _pool_module
from ._pool import PathArg, Pool, _backup_attrs, default_pool as _default_pool, region
from ._torch_ipc import (SharedTensor, SharedTensors, close, current, has_shared, install_reductions, open,
                         open_many, opened, owns, release_shared, share, share_many)
from ._torch_history import dump_snapshot, memory_snapshot, record_memory_history
from . import _torch_history
from . import _torch_ipc as _ipc
from .errors import InvalidArgument, VpmmError

__all__ = ["use_as_allocator", "pluggable_allocator", "pool", "graph", "mem_pool", "pause",
           "resume", "empty_cache", "memory_stats", "default_pool", "synchronize", "mark_step",
           "prepare_backups", "prepare_backups_in_background", "pinning_ahead", "set_pin_ahead",
           "pin_ahead_enabled",
           # sharing tensors with other processes (docs/ipc.md)
           "SharedTensor", "SharedTensors", "share", "share_many", "open", "open_many", "opened", "close",
           "current", "release_shared", "install_reductions", "owns", "prepare_share",
           "prepare_share_in_background", "sharing_ahead",
           # memory history and snapshots in PyTorch's format (docs/python.md)
           "record_memory_history", "memory_snapshot", "dump_snapshot",
           # Tensor.record_stream under libvpmm
           "record_stream_supported"]

_lock = threading.Lock()
_global_allocator: Any = None
_pluggable: Any = None
# A MemPool per (device, tag, backup, for_graphs): PyTorch reuses a MemPool's
# freed blocks for later requests in it, so blocks of different backup stores,
# directories or retention must never share one. `backup` is the
# (VPMM_ALLOC_* flags, directory) pair of the keywords.
_Backup = Tuple[int, Optional[bytes]]
_Key = Tuple[int, Optional[str], _Backup, bool]
_mem_pools: Dict[_Key, Any] = {}
_in_use: Dict[_Key, int] = {}


def _device_index(device: Any = None) -> int:
    if device is None:
        return _torch.cuda.current_device()
    if isinstance(device, int):
        return device
    d = _torch.device(device)
    if d.type != "cuda":
        raise InvalidArgument(1, f"vpmm.torch: device {device!r} is not a CUDA device")
    return d.index if d.index is not None else _torch.cuda.current_device()


def pluggable_allocator() -> Any:
    """The CUDAPluggableAllocator over vpmm_torch_malloc / vpmm_torch_free
    (created once per process), through libvpmm_history.so's recording
    entry points where that library is there (:func:`record_memory_history`),
    with ``Tensor.record_stream`` routed to vpmm_torch_record_stream
    (:data:`record_stream_supported`)."""
    global _pluggable, record_stream_supported
    with _lock:
        if _pluggable is None:
            _pluggable = _torch.cuda.memory.CUDAPluggableAllocator(*_torch_history.entry_points())
            record_stream_supported = _route_record_stream(_pluggable)
        return _pluggable


#: Whether ``Tensor.record_stream`` reaches libvpmm in this process. PyTorch's
#: CUDAPluggableAllocator drops record_stream unless the allocator gives it a
#: function (``set_record_stream_fn``, not offered by every PyTorch): then a
#: tensor read on another stream could be handed out again on its own stream
#: while that stream's kernels still read it. When False, keep such tensors
#: alive until the other stream's work is done, or make their own stream wait
#: for it (``own.wait_stream(other)``) before dropping them.
record_stream_supported: bool = False


def _route_record_stream(pluggable: Any) -> bool:
    setter = getattr(pluggable.allocator(), "set_record_stream_fn", None)
    if setter is None:
        return False
    from . import _library
    setter(ctypes.cast(_library.lib.vpmm_torch_record_stream, ctypes.c_void_p).value)
    return True


def use_as_allocator(mark_steps: bool = True) -> Any:
    """Route every CUDA allocation of PyTorch through libvpmm's default pools.
    Global and final for the process (PyTorch cannot switch back); call it
    before the first CUDA allocation. Idempotent. Returns the
    CUDAPluggableAllocator.

    With ``mark_steps`` (the default) every optimizer step marks a step of
    the current device's pool (:func:`mark_step`), so that
    :func:`memory_stats` and the pool's stats report the driver time of the
    program's own steps (``n_steps``, ``last_step_ns``,
    ``last_step_driver_ns``, ``steps_ns``, ``steps_driver_ns``)."""
    global _global_allocator, _step_hook
    alloc = pluggable_allocator()
    with _lock:
        if mark_steps and _step_hook is None and _mark_step_supported():
            try:  # imported, not read off torch.optim: the package deletes its submodules' names
                from torch.optim.optimizer import register_optimizer_step_post_hook as register
            except ImportError:  # a PyTorch older than 2.0: no global step hooks
                register = None
            if register is not None:
                _step_hook = register(lambda _opt, _args, _kwargs: mark_step())
        if _global_allocator is None:
            _torch.cuda.memory.change_current_allocator(alloc)
            _global_allocator = alloc
            # Only here does a dropped record_stream matter: under a MemPool,
            # PyTorch's own caching allocator holds the blocks and honours
            # record_stream itself before it hands them back to libvpmm.
            if not record_stream_supported:
                warnings.warn("vpmm.torch: this PyTorch's pluggable allocator takes no record_stream function; "
                              "Tensor.record_stream does nothing under libvpmm "
                              "(vpmm.torch.record_stream_supported)", RuntimeWarning, stacklevel=2)
    return alloc


def _mark_step_supported() -> bool:
    from . import _library
    return _library.pool_mark_step is not None


#: The optimizer step hook's handle (use_as_allocator's mark_steps), or None.
_step_hook: Any = None


def mark_step(device: Any = None) -> None:
    """Mark the end of one step of the program's loop on the device's default
    pool (vpmm_pool_mark_step). :func:`use_as_allocator` marks every optimizer
    step itself; a loop without an optimizer (serving, evaluation) can call
    this once an iteration. Changes no placement decision."""
    default_pool(device).mark_step()


def is_global() -> bool:
    """True once :func:`use_as_allocator` replaced PyTorch's allocator."""
    return _global_allocator is not None


def mem_pool(tag: Optional[str] = None, host_backup: bool = False, device: Any = None,
             for_graphs: bool = False, *, backup_store: Optional[str] = None,
             backup_dir: Optional[PathArg] = None, retain_backup: bool = False) -> Any:
    """The torch.cuda.MemPool whose allocations come from libvpmm for (device,
    tag, host_backup and its backup_store, backup_dir, retain_backup),
    created on first use and kept until :func:`empty_cache` (PyTorch caches
    freed blocks in it for the next block with the same key). CUDA graphs get
    a MemPool of their own per key (``for_graphs``): blocks a graph uses
    between replays must never be handed to eager tensors."""
    if not hasattr(_torch.cuda, "MemPool"):
        raise ImportError(f"vpmm.torch.pool needs torch.cuda.MemPool (PyTorch >= 2.5); "
                          f"this is PyTorch {_torch.__version__}")
    backup = _backup_attrs("vpmm.torch.mem_pool", tag, host_backup, backup_store, backup_dir, retain_backup)
    key = (_device_index(device), tag or None, backup, bool(for_graphs))
    with _lock:
        mp = _mem_pools.get(key)
    if mp is None:
        alloc = pluggable_allocator().allocator()
        with _torch.cuda.device(key[0]):
            mp = _torch.cuda.MemPool(alloc)
        with _lock:
            mp = _mem_pools.setdefault(key, mp)
    return mp


@contextlib.contextmanager
def _using(key: _Key) -> Iterator[None]:
    # Counts the blocks in which a MemPool is entered, so that empty_cache
    # never drops one in use.
    with _lock:
        _in_use[key] = _in_use.get(key, 0) + 1
    try:
        yield
    finally:
        with _lock:
            _in_use[key] -= 1


@contextlib.contextmanager
def pool(tag: Optional[str] = None, host_backup: bool = False, device: Any = None,
         pin_ahead: Optional[bool] = None, *, backup_store: Optional[str] = None,
         backup_dir: Optional[PathArg] = None, retain_backup: bool = False,
         share_ahead: Optional[bool] = None) -> Iterator[Any]:
    """Route the CUDA allocations this thread makes inside the block through
    libvpmm, tagged `tag` (pausable with :func:`pause`), their bytes kept
    across a pause if host_backup. Yields the MemPool (None after
    :func:`use_as_allocator`, where everything goes through libvpmm already
    and only the tag scope is needed).

    backup_store chooses where the bytes live while paused: "pinned"
    (default: page-locked, cached for the next pause), "mmap" (pageable,
    given back to the OS at resume), "disk" (a file per allocation in
    backup_dir, or the pool's directory). retain_backup keeps the backups
    after the resume, so that ``pause(tag, unchanged=True)`` can release
    unchanged tensors (frozen weights) without copying them. See
    :func:`vpmm.region`.

    pin_ahead (default: on for host_backup in the pinned store, unless
    :func:`set_pin_ahead` or VPMM_PIN_AHEAD=0 turned it off): when the block
    ends, the host buffers a pause of `tag` will back up into are pinned on
    a background thread (vpmm_pool_prepare_backups), so that the first pause
    runs at copy speed instead of spending seconds pinning. Training and
    allocation go on meanwhile; a pause that comes before the pinning is
    done waits for it and uses its buffers (it never pins twice). The
    Future is kept in :data:`pinning_ahead` under the tag. pin_ahead=False
    pins nothing ahead; True asks for it even when turned off globally.

    share_ahead (default: on once this process will send, that is after
    :func:`install_reductions` or a first :func:`share`, when the pool is
    exportable): when a tagged block ends, its handles are exported on a
    background thread (:func:`prepare_share_in_background`, the Future in
    :data:`sharing_ahead`), so that the first send of the weights costs a
    descriptor duplicate per handle; not where the descriptors that holds
    (one a handle, until the handle goes) would leave less than half of
    the soft RLIMIT_NOFILE free. False never does; True asks for it.

    Tensors allocated inside keep coming from libvpmm after the block ends;
    PyTorch caches their freed blocks in the MemPool for the next block with
    the same tag and backup keywords (:func:`empty_cache` gives them back)."""
    if host_backup and not tag:
        raise InvalidArgument(1, "vpmm.torch.pool: host_backup needs a tag (only tagged memory pauses)")
    if pin_ahead and not host_backup:
        raise InvalidArgument(1, "vpmm.torch.pool: pin_ahead pins host backups: it needs host_backup=True")
    if pin_ahead and backup_store not in (None, "pinned"):
        raise InvalidArgument(1, f"vpmm.torch.pool: pin_ahead pins the pinned store's buffers; "
                                 f"backup_store={backup_store!r} pins nothing ahead")
    if pin_ahead is None:
        pin_ahead = host_backup and backup_store in (None, "pinned") and _pin_ahead_on
    backup = _backup_attrs("vpmm.torch.pool", tag, host_backup, backup_store, backup_dir, retain_backup)
    kw = {"backup_store": backup_store, "backup_dir": backup_dir, "retain_backup": retain_backup}
    if not host_backup:
        kw = {}  # _backup_attrs said they are unset
    idx = _device_index(device)
    if is_global():
        with _own_region(tag, host_backup, kw):
            yield None
    else:
        key = (idx, tag or None, backup, False)
        with _using(key):
            mp = mem_pool(tag, host_backup, idx, **kw)
            with _torch.cuda.use_mem_pool(mp, device=idx):
                with _own_region(tag, host_backup, kw):
                    yield mp
    if pin_ahead:
        pinning_ahead[tag] = _pinner.request(tag, idx)
    if tag and share_ahead is not False and (share_ahead or _sends_ahead(idx, tag)):
        sharing_ahead[tag] = prepare_share_in_background(tag, idx)


def _sends_ahead(idx: int, tag: str) -> bool:
    """Whether a block's end prepares its exports: the process said it will
    send (install_reductions(), or it has shared before), the device's pool
    can export, and the descriptors fit (:func:`_descriptor_room`). On the
    H200 exports prepared ahead made a first send of a Llama's state dict
    0.82-0.84x PyTorch's CUDA IPC, against 1.07x without (docs/ipc.md); the
    trainer's part of it, the handles' first export, then runs while the
    program goes on."""
    if not (_ipc.reductions_installed() or has_shared(idx)):
        return False
    try:
        p = default_pool(idx)
        return bool(p.config().get("exportable")) and _descriptor_room(p.tag_stats(tag)["n_live"])
    except VpmmError:
        return False


def _descriptor_room(handles: int) -> bool:
    """Whether `handles` more descriptors (a prepared export holds one per
    handle until the handle goes; a tagged allocation is at least one
    handle) leave half of the soft RLIMIT_NOFILE free: exporting ahead
    every tagged block of a sending process (an optimizer's state, a cache)
    must not take the descriptors a send or the program itself needs."""
    if handles <= 0:
        return False
    try:
        import resource
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        open_now = len(os.listdir("/proc/self/fd"))
    except (ImportError, OSError, ValueError):
        return False
    if soft == resource.RLIM_INFINITY:
        return True
    return open_now + handles <= soft // 2


#: The Futures of the background pinnings started when a block with a host
#: backup ended (:func:`pool`, ``vpmm.region`` with vpmm.torch imported), by
#: tag (the latest one per tag). Its result is the pinned bytes cached.
pinning_ahead: Dict[Optional[str], "Future[int]"] = {}

_pin_ahead_on = os.environ.get("VPMM_PIN_AHEAD", "1").strip().lower() not in ("0", "off", "false", "no")


def set_pin_ahead(on: bool) -> None:
    """Whether blocks with a host backup in the pinned store pin their
    backups ahead when they end (:func:`pool`, ``vpmm.region``), for this
    process from now on. Default on; VPMM_PIN_AHEAD=0 in the environment
    starts with it off. The pinned bytes are held from then on, as the
    first pause would hold them (stats: backup_cache_bytes until a pause
    uses them, backup_pinned_bytes), and never more than
    backup_pinned_limit (VPMM_BACKUP_PINNED_LIMIT): past it, nothing more
    is pinned ahead and a pause backs the rest up in pageable memory."""
    global _pin_ahead_on
    _pin_ahead_on = bool(on)


def pin_ahead_enabled() -> bool:
    """Whether :func:`set_pin_ahead` (or VPMM_PIN_AHEAD) has pinning ahead on."""
    return _pin_ahead_on


class _Pinner:
    """The background pinnings of blocks that ended: one daemon thread,
    started when there is work, running vpmm_pool_prepare_backups per
    (device, tag) in the order the blocks ended. A request for a (device,
    tag) already queued and not started is that one (it will see the new
    allocations too), so a block entered every step queues at most one
    pinning. One at a time: a pause waits for the buffer being pinned (the
    pinning then stops and the pause pins what it needs itself; the
    pinning is run once more after it), never for those queued, and the
    bytes pinned are the same either way."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queue: Deque[Tuple[Tuple[int, Optional[str]], "Future[int]"]] = collections.deque()
        self._queued: Dict[Tuple[int, Optional[str]], "Future[int]"] = {}
        self._running = False

    def request(self, tag: Optional[str], device: int) -> "Future[int]":
        key = (device, tag)
        with self._lock:
            fut = self._queued.get(key)
            if fut is not None:
                return fut
            fut = Future()
            self._queued[key] = fut
            self._queue.append((key, fut))
            if not self._running:
                self._running = True
                threading.Thread(target=self._run, name="vpmm-pin-ahead", daemon=True).start()
        return fut

    def _run(self) -> None:
        relaxed = False
        while True:
            with self._lock:
                if not self._queue:
                    self._running = False
                    return
                (device, tag), fut = self._queue.popleft()
                del self._queued[(device, tag)]
            fut.set_running_or_notify_cancel()
            if not relaxed:
                relaxed = _relax_capture_mode(device)
            try:
                pool = _default_pool(device)
                pauses = pool.stats().get("n_pause")
                n = pool.prepare_backups(tag)
                if pauses is not None and pool.stats()["n_pause"] != pauses:
                    # A pause came meanwhile and took over (the pinning stopped
                    # after its buffer in flight): pin what it left, once.
                    n = pool.prepare_backups(tag)
                fut.set_result(n)
            except InvalidArgument:
                fut.set_result(0)  # the tag has no allocation in this pool: nothing to pin
            except BaseException as e:  # noqa: BLE001 - handed to the Future
                fut.set_exception(e)
                warnings.warn(f"vpmm.torch: pinning the backups of tag {tag!r} ahead failed: {e} "
                              "(the first pause pins what is left itself)", RuntimeWarning, stacklevel=1)


def _relax_capture_mode(device: int) -> bool:
    """Puts this thread (the pinning one) in CUDA's relaxed stream-capture
    mode: pinning host memory is an "unsafe" call under a capture in the
    default global mode, so a pinning that overlapped a CUDA graph captured
    on another thread (a serving engine captures right after loading its
    weights) would fail and invalidate the capture. Relaxed, it is allowed
    and the capture is untouched (pinning queues no work on any stream), as
    PyTorch's own allocator does around its mallocs during capture."""
    try:
        if _default_pool(device).backend != "cuda":
            return True
        mode = ctypes.c_int(2)  # CU_STREAM_CAPTURE_MODE_RELAXED
        ctypes.CDLL("libcuda.so.1").cuThreadExchangeStreamCaptureMode(ctypes.byref(mode))
    except Exception:  # no driver library here: nothing can be captured either
        pass
    return True


_pinner = _Pinner()
# .skip_next: the vpmm.region that pool() enters next on this thread is
# pool()'s own, which pins (or not) for itself, on its own device.
_pin_scope = threading.local()


@contextlib.contextmanager
def _own_region(tag: Optional[str], host_backup: bool, kw: Dict[str, Any]) -> Iterator[None]:
    """pool()'s vpmm.region, which pins (or not) for itself on its device."""
    _pin_scope.skip_next = True
    try:
        with region(tag, host_backup, **kw):
            yield
    finally:
        _pin_scope.skip_next = False  # also if region() failed before its observers ran


def _region_observer(tag: Optional[str], store: Optional[str]) -> Any:
    """vpmm.region's scope observer: a tagged block (not pool()'s own) with
    a pinned-store host backup pins its backups ahead when it ends, on the
    current device (where the hooks allocated its memory), and prepares its
    exports where the process will send (pool()'s share_ahead)."""
    own = getattr(_pin_scope, "skip_next", False)
    _pin_scope.skip_next = False
    if own or not tag:
        return _nothing

    def ended() -> None:
        if not getattr(_torch.cuda, "is_initialized", lambda: True)():
            return  # nothing was allocated on a GPU
        dev = _torch.cuda.current_device()
        if store == "pinned" and _pin_ahead_on:
            pinning_ahead[tag] = _pinner.request(tag, dev)
        if _sends_ahead(dev, tag):  # as pool() does (see there)
            sharing_ahead[tag] = prepare_share_in_background(tag, dev)
    return ended


def _nothing() -> None:
    pass


_pool_module.scope_observers.append(_region_observer)


@contextlib.contextmanager
def graph(cuda_graph: Any, tag: Optional[str] = None, host_backup: bool = False, stream: Any = None,
          capture_error_mode: str = "global", device: Any = None, *, backup_store: Optional[str] = None,
          backup_dir: Optional[PathArg] = None, retain_backup: bool = False) -> Iterator[None]:
    """``torch.cuda.graph(cuda_graph, ...)`` whose memory (what the captured
    work allocates) comes from libvpmm with `tag`: pausing the tag releases
    it, and the graph replays after a resume (addresses are kept). The
    capture's private pool is the tag's MemPool, so graphs captured with the
    same tag (and backup keywords, as in :func:`pool`) share it."""
    backup = _backup_attrs("vpmm.torch.graph", tag, host_backup, backup_store, backup_dir, retain_backup)
    kw = {"backup_store": backup_store, "backup_dir": backup_dir, "retain_backup": retain_backup} \
        if host_backup else {}
    idx = _device_index(device)
    _quiesce_for_capture(idx)
    # No garbage collection during the capture: a MemPool it destroyed would
    # be released by PyTorch inside the capture, which PyTorch forbids.
    gc_was_on = gc.isenabled()
    gc.disable()
    try:
        if is_global():
            with region(tag, host_backup, **kw):
                with _torch.cuda.graph(cuda_graph, stream=stream, capture_error_mode=capture_error_mode):
                    yield
            return
        mp = mem_pool(tag, host_backup, idx, for_graphs=True, **kw)
        with _using((idx, tag or None, backup, True)):
            with region(tag, host_backup, **kw):
                with _torch.cuda.graph(cuda_graph, pool=mp.id, stream=stream,
                                       capture_error_mode=capture_error_mode):
                    yield
    finally:
        if gc_was_on:
            gc.enable()


def _quiesce_for_capture(idx: int) -> None:
    # A malloc during capture must not make libvpmm reuse memory freed on
    # another stream: that reuse may need a GPU-side wait on an event recorded
    # outside the capture, which invalidates it. With the device idle,
    # PyTorch's cached blocks given back and the pool's free regions released,
    # every capture-time malloc maps fresh memory (no event, no wait).
    _torch.cuda.synchronize(idx)
    gc.collect()  # MemPools waiting for the collector are released now, not mid-capture
    _torch.cuda.empty_cache()
    _default_pool(idx).trim(0)


def default_pool(device: Any = None) -> Pool:
    """The libvpmm default pool of a CUDA device (current device if None):
    where :func:`use_as_allocator` and :func:`pool` allocate from."""
    return _default_pool(_device_index(device))


def synchronize(device: Any = None) -> None:
    """torch.cuda.synchronize(device): pause waits for each allocation's own
    stream, but tensors used on other streams (record_stream) need this."""
    _torch.cuda.synchronize(_device_index(device))


def pause(tag: Optional[str] = None, device: Any = None, unchanged: bool = False) -> bool:
    """Synchronize the device, then pause every live allocation with `tag`
    (None: every tagged one) in its default pool. Returns True if something
    was paused. The tensors keep their addresses; touching them before
    :func:`resume` faults. unchanged=True declares the tensors of `tag`
    unwritten since their last resume: those with a retained backup
    (``pool(..., retain_backup=True)``) are released without copying
    (:meth:`vpmm.Pool.pause`)."""
    synchronize(device)
    return default_pool(device).pause(tag, unchanged=unchanged)


def resume(tag: Optional[str] = None, device: Any = None, prepare_share: Optional[bool] = None) -> bool:
    """Resume the paused allocations with `tag` (None: all) at their
    addresses, restoring host backups. Returns True if something was
    resumed. On :class:`vpmm.OutOfMemory` what was not resumed stays paused
    with its backup intact: free memory and call again.

    A pause ends the exports of what it pauses, so the next send of the
    resumed tensors exports their handles again (~75 us each on CUDA). When
    this process has shared memory of the device's pool before
    (:func:`share`, :func:`share_many`, a queue after
    :func:`install_reductions`), or prepare_share is True, the resume starts
    :func:`prepare_share_in_background` for `tag`: the exports run while the
    caller trains, and the weight sync after it finds them done (measured on
    an RL weight sync: docs/ipc.md). prepare_share=False never does. The
    Future is kept in :data:`sharing_ahead` under the tag."""
    idx = _device_index(device)
    resumed = default_pool(idx).resume(tag)
    if resumed and (prepare_share or (prepare_share is None and has_shared(idx))):
        sharing_ahead[tag] = prepare_share_in_background(tag, idx)
    return resumed


#: The Futures of the background export preparations started by
#: :func:`resume` and by the end of a tagged block (:func:`pool`'s
#: share_ahead), by tag (the latest one per tag).
sharing_ahead: Dict[Optional[str], "Future[int]"] = {}


def prepare_backups(tag: Optional[str] = None, device: Any = None) -> int:
    """Pin now the host buffers a pause of `tag` would use (after loading the
    weights, say), so that the first :func:`pause` runs at copy speed.
    Returns the pinned bytes cached in the device's default pool."""
    return default_pool(device).prepare_backups(tag)


def prepare_backups_in_background(tag: Optional[str] = None, device: Any = None) -> "Future[int]":
    """:func:`prepare_backups` on a daemon thread; returns its
    ``concurrent.futures.Future``. A failure is also reported as a warning
    (the first pause then pins what is left itself)."""
    fut = default_pool(device).prepare_backups_in_background(tag)

    def report(f: "Future[int]") -> None:
        if f.exception() is not None:
            warnings.warn(f"vpmm.torch: pinning backups of tag {tag!r} ahead failed: {f.exception()}",
                          RuntimeWarning, stacklevel=1)

    fut.add_done_callback(report)
    return fut


def prepare_share(tag: Optional[str] = None, device: Any = None) -> int:
    """Do now what sharing `tag`'s tensors would pay the driver for
    (vpmm_pool_prepare_export: each handle exported once, its descriptor kept
    until it is released), so that the next :func:`share_many` (or a state
    dict through a queue) of them costs a descriptor duplicate per handle.
    Returns the handles prepared."""
    return default_pool(device).prepare_export(tag)


def prepare_share_in_background(tag: Optional[str] = None, device: Any = None) -> "Future[int]":
    """:func:`prepare_share` on a daemon thread: call it after a resume and
    train meanwhile; the weight sync that follows then finds its handles
    exported. A failure is reported as a warning (the send then exports what
    is left itself)."""
    fut = default_pool(device).prepare_export_in_background(tag)

    def report(f: "Future[int]") -> None:
        if f.exception() is not None:
            warnings.warn(f"vpmm.torch: preparing the exports of tag {tag!r} failed: {f.exception()}",
                          RuntimeWarning, stacklevel=1)

    fut.add_done_callback(report)
    return fut


def empty_cache(device: Any = None) -> None:
    """Give cached memory back: PyTorch keeps freed blocks of a live MemPool
    cached (torch.cuda.empty_cache() does not touch them), so the MemPools
    of this device that no block is using are dropped (PyTorch then frees
    their cached blocks, and frees the rest as their tensors die; the next
    block makes a new MemPool), then torch.cuda.empty_cache(), then the
    libvpmm pool is trimmed to nothing cached."""
    idx = _device_index(device)
    with _lock:
        idle = [k for k in _mem_pools if k[0] == idx and not _in_use.get(k)]
        dropped = [_mem_pools.pop(k) for k in idle]
    del dropped
    gc.collect()
    _torch.cuda.empty_cache()
    default_pool(idx).trim(0)


# libvpmm counters under PyTorch's names where they mean the same thing
# (torch.cuda.memory_stats keys); everything else under "vpmm.<field>".
_TORCH_KEYS = {
    "allocated_bytes.all.current": "live_bytes",
    "allocated_bytes.all.peak": "peak_live_bytes",
    "reserved_bytes.all.current": "mapped_bytes",
    "reserved_bytes.all.peak": "peak_mapped_bytes",
    "requested_bytes.all.current": "requested_bytes",
    "allocation.all.current": "n_live",
    "allocation.all.allocated": "n_malloc",
    "allocation.all.freed": "n_free",
    "num_ooms": "n_oom",
}


def memory_stats(device: Any = None) -> Dict[str, int]:
    """The device's libvpmm default pool statistics as a flat dict: PyTorch's
    memory_stats key names where the meaning is the same (allocated_bytes,
    reserved_bytes, requested_bytes, allocation counts, num_ooms), every
    libvpmm counter also as "vpmm.<field>" (paused_bytes, backup_bytes, ...).
    Under :func:`pool` this is libvpmm's view: the segments PyTorch's caching
    allocator took from libvpmm, not the tensors inside them."""
    s = default_pool(device).stats()
    out = {k: s[v] for k, v in _TORCH_KEYS.items()}
    out.update({"vpmm." + k: v for k, v in s.items()})
    return out
