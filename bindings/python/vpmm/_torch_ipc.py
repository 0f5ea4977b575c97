"""Tensors in libvpmm pools sent to other processes (vpmm.torch.share /
open, and torch.multiprocessing through install_reductions); see
docs/ipc.md. Imported by vpmm.torch, which re-exports the public names.

PyTorch's own CUDA IPC (storage._share_cuda_, what torch.multiprocessing
and reduce_tensor use) does not work on libvpmm memory: under
use_as_allocator() the CUDAPluggableAllocator refuses shareIpcHandle, and
under pool() PyTorch's caching allocator asks cudaIpcGetMemHandle for a
block that libvpmm mapped with the VMM API, which the driver refuses.
Here the allocation holding the tensor is exported instead
(vpmm_pool_export), and the other process maps the same physical memory.

A send of many tensors (a state dict) is one export of every allocation
holding them (vpmm_pool_export_many: one status page, one descriptor, one
round trip, one import on the other side): share_many / open_many. After
install_reductions() every message ForkingPickler pickles is sent that way:
before the first libvpmm tensor of a message is reduced, the message's
containers (dicts of any kind, lists, tuples, sets, nested, a state dict's
_metadata) are walked once for every libvpmm tensor in them, which are
shared with one share_many per device; each tensor then pickles as a
reference into that batch (pickle writes the batch itself once), and the
receiver opens the batch with one open_many at its first tensor.
"""
from __future__ import annotations

import bisect
import contextlib
import copyreg
import functools
import threading
import types
import weakref
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import torch as _torch

from . import ipc
from ._pool import default_pool as _default_pool
from .errors import InvalidArgument, UnknownPointer

__all__ = ["SharedTensor", "SharedTensors", "share", "share_many", "open", "open_many", "opened", "close",
           "current", "release_shared", "install_reductions", "owns"]


class SharedTensor:
    """What :func:`share` returns: picklable, opened with :func:`open` in
    another process (or several). It names the allocation holding the tensor
    (an :class:`vpmm.ipc.Handle`) and the tensor's place in it."""

    __slots__ = ("handle", "exporter_ptr", "dtype", "shape", "stride")

    def __init__(self, handle: ipc.Handle, exporter_ptr: int, dtype: str, shape: Tuple[int, ...],
                 stride: Tuple[int, ...]) -> None:
        self.handle = handle
        self.exporter_ptr = int(exporter_ptr)
        self.dtype = dtype
        self.shape = tuple(int(s) for s in shape)
        self.stride = tuple(int(s) for s in stride)

    def __reduce__(self) -> Any:
        return (SharedTensor, (self.handle, self.exporter_ptr, self.dtype, self.shape, self.stride))

    def __repr__(self) -> str:
        return f"<vpmm.torch.SharedTensor {self.dtype} {list(self.shape)} of process {self.handle.pid}>"


class SharedTensors:
    """What :func:`share_many` returns: one export for all the tensors
    (one :class:`vpmm.ipc.Handle`) and each tensor's place in it, in the
    order given. Picklable; :func:`open_many` in another process returns
    the tensors in that order."""

    __slots__ = ("handle", "tensors", "_opened")

    def __init__(self, handle: ipc.Handle, tensors: Sequence[Tuple[int, str, Tuple[int, ...], Tuple[int, ...]]]) -> None:
        self.handle = handle
        # (exporter_ptr, dtype, shape, stride) per tensor; exporter_ptr 0: empty
        self.tensors = tuple((int(p), str(d), tuple(sh), tuple(st)) for p, d, sh, st in tensors)
        # A receiver's open_many of it, made at the first tensor of a batch
        # unpickled (_rebuild_batched); never pickled.
        self._opened: Optional[List[_torch.Tensor]] = None

    def __reduce__(self) -> Any:
        return (SharedTensors, (self.handle, self.tensors))

    def __len__(self) -> int:
        return len(self.tensors)

    def __repr__(self) -> str:
        return f"<vpmm.torch.SharedTensors {len(self.tensors)} tensors of process {self.handle.pid}>"


_dtypes: Dict[str, Tuple[_torch.dtype, int]] = {}


def _dtype_size(name: str) -> Tuple[_torch.dtype, int]:
    """The dtype a name gives and its element size (cached: a receiver
    rebuilds hundreds of tensors per send)."""
    got = _dtypes.get(name)
    if got is None:
        d = getattr(_torch, name.replace("torch.", ""), None)
        if not isinstance(d, _torch.dtype):
            raise InvalidArgument(1, f"vpmm.torch.open: unknown dtype {name!r}")
        got = _dtypes[name] = (d, _torch.empty((), dtype=d).element_size())
    return got


def _dtype(name: str) -> _torch.dtype:
    return _dtype_size(name)[0]


def _extent_bytes(shape: Tuple[int, ...], stride: Tuple[int, ...], itemsize: int) -> int:
    if any(s == 0 for s in shape):
        return 0
    return (1 + sum((n - 1) * st for n, st in zip(shape, stride))) * itemsize


# --- the sender's side ----------------------------------------------------------
class _Sent:
    """An export of one allocation and the storages it keeps alive for receivers."""

    def __init__(self, export: ipc.Export) -> None:
        self.export = export
        self.storages: Dict[int, Any] = {}


_lock = threading.Lock()
_sent: Dict[Tuple[int, Any], _Sent] = {}  # (device, allocation or export nonce) -> its export
_swept_at = 0  # len(_sent) after the last sweep


def owns(tensor: _torch.Tensor) -> bool:
    """True when the tensor's memory comes from libvpmm's default pool of
    its device (allocated under vpmm.torch.use_as_allocator() or pool())."""
    if not tensor.is_cuda or tensor.data_ptr() == 0:
        return False
    try:
        _default_pool(tensor.device.index).lookup(tensor.data_ptr())
        return True
    except UnknownPointer:
        return False


def _sweep_locked(force: bool = True) -> None:
    # An export is let go once it was imported and no importer holds it any
    # more, or once it is no longer active (paused, closed). Unforced (a
    # share() per tensor), only once the table doubled since the last sweep:
    # a sweep asks every export's state, and sweeping before each of n
    # tensors cost n^2 such calls.
    global _swept_at
    if not force and len(_sent) < max(16, 2 * _swept_at):
        return
    for key in list(_sent):
        s = _sent[key]
        try:
            state, importers, imports = s.export._state()
        except Exception:
            state, importers, imports = "closed", 0, 1
        if state != "active" or (imports > 0 and importers == 0):
            del _sent[key]
            _close_quietly(s)
    _swept_at = len(_sent)


def _still_active(s: "_Sent") -> bool:
    try:
        return s.export._state()[0] == "active"
    except Exception:
        return False


def _close_quietly(s: "_Sent") -> None:
    try:
        s.export.close()
    except Exception:
        pass


# The devices whose default pool this process has exported memory of
# (share, share_many, a queue after install_reductions): vpmm.torch.resume
# prepares their next send in the background (see there).
_shared_devices: set = set()


def has_shared(device: int) -> bool:
    """Whether this process has shared memory of `device`'s default pool."""
    return device in _shared_devices


def share(tensor: _torch.Tensor) -> SharedTensor:
    """Make `tensor` (in a libvpmm pool: vpmm.torch.use_as_allocator() or
    vpmm.torch.pool(), with an exportable default pool: VPMM_EXPORTABLE=1)
    openable in another process. The tensor's storage is kept alive until a
    receiver has opened it and every receiver closed it again (or until
    :func:`release_shared`); the export of its allocation is reused while
    it lasts. Raises :class:`vpmm.UnknownPointer` for a tensor libvpmm did
    not allocate, :class:`vpmm.Unsupported` when the pool is not exportable."""
    if not tensor.is_cuda:
        raise InvalidArgument(1, f"vpmm.torch.share: the tensor is on {tensor.device}, not a CUDA device")
    dev = tensor.device.index
    pool = _default_pool(dev)
    base, _size = pool.lookup(tensor.data_ptr())
    with _lock:
        _sweep_locked(force=False)
        s = _sent.get((dev, base))
        if s is not None and not _still_active(s):
            # Its allocation was paused (or the export closed) since: the
            # unforced sweep may not have looked yet, and a receiver could
            # not import the old export any more. A new one, of the memory
            # as it is now.
            del _sent[(dev, base)]
            _close_quietly(s)
            s = None
        if s is None:
            s = _sent[(dev, base)] = _Sent(pool.export(base))
            _shared_devices.add(dev)
        storage = tensor.untyped_storage()
        s.storages[storage.data_ptr()] = storage
        h = s.export.handle()
    return SharedTensor(h, tensor.data_ptr(), str(tensor.dtype), tuple(tensor.shape), tuple(tensor.stride()))


def share_many(tensors: Sequence[_torch.Tensor]) -> SharedTensors:
    """Make every tensor of `tensors` (CUDA tensors of one device in
    libvpmm pools, as for :func:`share`) openable in another process with
    one export: one descriptor and one round trip for all of them, each
    allocation's handles shared once (a state dict in one send).
    :func:`open_many` returns them in the same order. The storages are kept
    alive as :func:`share` keeps them. Raises :class:`vpmm.UnknownPointer`
    naming the first tensor libvpmm did not allocate."""
    tensors = list(tensors)
    devs = {t.device.index for t in tensors if t.is_cuda}
    if any(not t.is_cuda for t in tensors) or len(devs) > 1:
        raise InvalidArgument(1, "vpmm.torch.share_many: every tensor must be a CUDA tensor of one device "
                                 f"(got {sorted({str(t.device) for t in tensors})})")
    metas = []
    ptrs = []
    for t in tensors:
        p = t.data_ptr() if t.numel() else 0
        metas.append((p, str(t.dtype), tuple(t.shape), tuple(t.stride())))
        if p:
            ptrs.append(p)
    if not ptrs:
        raise InvalidArgument(1, "vpmm.torch.share_many: no tensor holds any memory")
    dev = devs.pop()
    pool = _default_pool(dev)
    with _lock:
        _sweep_locked()
        export = pool.export_many(ptrs)
        _shared_devices.add(dev)
        s = _Sent(export)
        for t in tensors:
            if t.numel():
                st = t.untyped_storage()
                s.storages[st.data_ptr()] = st
        h = export.handle()
        _sent[(dev, h.nonce)] = s
    return SharedTensors(h, metas)


def release_shared() -> None:
    """Close every export :func:`share` made and drop the storages it kept
    (receivers that opened them keep their mappings)."""
    with _lock:
        for s in _sent.values():
            try:
                s.export.close()
            except Exception:
                pass
        _sent.clear()


# --- the receiver's side ----------------------------------------------------------
class _Opening:
    """One import, shared by every tensor opened from it; closed when the
    last of them dies (or by close())."""

    def __init__(self, imp: ipc.Import, device: int) -> None:
        self.imp = imp
        self.device = device
        self.finalizer = weakref.finalize(self, _Opening._close, imp, device)

    @staticmethod
    def _close(imp: ipc.Import, device: int) -> None:
        try:
            _torch.cuda.synchronize(device)  # the driver does not wait for kernels at unmap
        except Exception:
            pass
        try:
            imp.close()
        except Exception:
            pass


class _CudaBytes:
    """__cuda_array_interface__ of n bytes at ptr: what torch.as_tensor wraps
    without copying. It keeps its _Opening alive for as long as the tensor lives."""

    def __init__(self, ptr: int, n: int, owner: _Opening) -> None:
        self.owner = owner
        self.__cuda_array_interface__ = {"shape": (n,), "typestr": "|u1", "data": (ptr, False), "version": 3,
                                         "strides": None}


_openings: Dict[Tuple[int, bytes], "weakref.ref[_Opening]"] = {}
_open_lock = threading.Lock()


def _opening(handle: ipc.Handle, device: int) -> _Opening:
    key = (device, handle.nonce)
    with _open_lock:
        ref = _openings.get(key)
        op = ref() if ref is not None else None
        if op is None or op.imp._h is None:
            op = _Opening(handle.open(_default_pool(device)), device)
            _openings[key] = weakref.ref(op)
        return op


def _device_index(device: Any) -> int:
    if device is None:
        return _torch.cuda.current_device()
    if isinstance(device, int):
        return device
    idx = _torch.device(device).index
    return _torch.cuda.current_device() if idx is None else idx


def open(shared: SharedTensor, device: Any = None) -> _torch.Tensor:  # noqa: A001 (the API's name)
    """The tensor `shared` names, mapped into this process on `device` (the
    same GPU as the sender's, in this process's numbering; default: the
    current device). No copy: writes are seen by both processes while the
    export is active. The import closes when the last tensor opened from
    it dies; :func:`close` closes it at once. Raises :class:`vpmm.WrongState`
    when the sender paused, freed or closed it, or exited."""
    idx = _device_index(device)
    dtype, itemsize = _dtype_size(shared.dtype)
    n = _extent_bytes(shared.shape, shared.stride, itemsize)
    if n == 0:
        return _torch.empty(shared.shape, dtype=dtype, device=f"cuda:{idx}")
    op = _opening(shared.handle, idx)
    ptr = op.imp.translate(shared.exporter_ptr)
    raw = _torch.as_tensor(_CudaBytes(ptr, n, op), device=f"cuda:{idx}")
    return raw.view(dtype).as_strided(shared.shape, shared.stride)


def open_many(shared: SharedTensors, device: Any = None) -> List[_torch.Tensor]:
    """The tensors :func:`share_many` shared, in its order, mapped into this
    process with one import (as :func:`open` maps one; the import closes
    when the last of them, or of their views, dies)."""
    idx = _device_index(device)
    dev = f"cuda:{idx}"
    op = _opening(shared.handle, idx)
    entries = op.imp.entries
    starts = [e.exporter_ptr for e in entries]
    bases: Dict[int, _torch.Tensor] = {}  # entry -> its bytes, one tensor each
    out = []
    for p, name, shape, stride in shared.tensors:
        dtype, itemsize = _dtype_size(name)
        n = _extent_bytes(shape, stride, itemsize)
        if n == 0 or p == 0:
            out.append(_torch.empty(shape, dtype=dtype, device=dev))
            continue
        i = bisect.bisect_right(starts, p) - 1
        if i < 0 or p + n > entries[i].exporter_ptr + entries[i].size:
            raise InvalidArgument(1, f"vpmm.torch.open_many: tensor at {hex(p)} lies outside the export")
        e = entries[i]
        off = p - e.exporter_ptr
        if off % itemsize or e.ptr % itemsize:  # not aligned for a dtype view of the entry's bytes
            raw = _torch.as_tensor(_CudaBytes(e.ptr + off, n, op), device=dev)
        else:
            base = bases.get(i)
            if base is None:
                base = bases[i] = _torch.as_tensor(_CudaBytes(e.ptr, e.size, op), device=dev)
            raw = base[off:off + n]
        out.append(raw.view(dtype).as_strided(shape, stride))
    return out


def _opening_of(tensor: _torch.Tensor) -> Optional[_Opening]:
    ptr = tensor.data_ptr()
    with _open_lock:
        ops = [r() for r in _openings.values()]
    for op in ops:
        if op is not None and op.imp._h is not None and any(e.ptr <= ptr < e.ptr + e.size for e in op.imp.entries):
            return op
    return None


def current(tensor: _torch.Tensor) -> bool:
    """For a tensor :func:`open` returned: True while the sender's memory is
    still what it shows (the export is "active"); False once the sender
    paused, freed or closed it, or exited: open a new share then."""
    op = _opening_of(tensor)
    if op is None:
        raise InvalidArgument(1, "vpmm.torch.current: the tensor was not opened with vpmm.torch.open (or is closed)")
    return op.imp.current


def close(tensor: _torch.Tensor) -> None:
    """Close the import behind a tensor :func:`open` returned, now (after
    synchronizing its device): every tensor opened from that import becomes
    invalid. A no-op for other tensors."""
    op = _opening_of(tensor)
    if op is not None:
        op.finalizer()


@contextlib.contextmanager
def opened(shared: SharedTensor, device: Any = None) -> Iterator[_torch.Tensor]:
    """``with vpmm.torch.opened(h) as t:`` :func:`open` for the block, then
    :func:`close` (do not keep views of `t` past the block)."""
    t = open(shared, device)
    try:
        yield t
    finally:
        close(t)


# --- torch.multiprocessing ---------------------------------------------------------
def _rebuild(shared: SharedTensor, parameter: bool, requires_grad: bool) -> _torch.Tensor:
    t = open(shared)
    if parameter:
        return _torch.nn.Parameter(t, requires_grad=requires_grad)
    return t.requires_grad_(requires_grad) if requires_grad else t


def _as_sent(t: _torch.Tensor, parameter: bool, requires_grad: bool) -> _torch.Tensor:
    if parameter:
        return _torch.nn.Parameter(t, requires_grad=requires_grad)
    return t.requires_grad_(True) if requires_grad else t


def _rebuild_batched(shared: SharedTensors, index: int, parameter: bool, requires_grad: bool) -> _torch.Tensor:
    """Tensor `index` of a batch: pickle memoizes `shared`, so every tensor
    of one message gets the same object, opened once (one import)."""
    opened = shared._opened
    if opened is None:
        opened = shared._opened = open_many(shared)
    return _as_sent(opened[index], parameter, requires_grad)


class _Batch:
    """The libvpmm tensors of one message being pickled: found by walking its
    containers when the first of them is reduced, shared with one
    share_many per device. `where` maps id(tensor) to its SharedTensors and
    index; the tensors themselves are held so that no id is reused while
    the message is pickled."""

    __slots__ = ("message", "walked", "where", "others", "held", "exports")

    def __init__(self, message: Any) -> None:
        self.message = message
        self.walked = False
        self.where: Dict[int, Tuple[SharedTensors, int]] = {}
        self.others: set = set()  # id() of the CUDA tensors the walk found that libvpmm did not allocate
        self.held: List[_torch.Tensor] = []
        self.exports: List[Tuple[int, SharedTensors]] = []  # (device, batch)

    def find(self, tensor: _torch.Tensor) -> Optional[Tuple[SharedTensors, int]]:
        if not self.walked:
            self.walked = True
            self.share(_vpmm_tensors(self.message, self.others))
            self.message = None  # the walk is done: do not keep the message alive longer
        return self.where.get(id(tensor))

    def share(self, tensors: List[_torch.Tensor]) -> None:
        by_dev: Dict[int, List[_torch.Tensor]] = {}
        for t in tensors:
            by_dev.setdefault(t.device.index, []).append(t)
        for dev, ts in by_dev.items():
            # share_many reads only pointers, dtypes, shapes, strides and
            # storages: the tensors as they are (a detach() each cost a new
            # tensor object per weight, on the sender's critical path).
            shared = share_many(ts)
            self.exports.append((dev, shared))
            for i, t in enumerate(ts):
                self.where[id(t)] = (shared, i)
            self.held.extend(ts)

    def abandon(self) -> None:
        """The pickling failed: no receiver will import these exports."""
        with _lock:
            for dev, shared in self.exports:
                s = _sent.pop((dev, shared.handle.nonce), None)
                if s is not None:
                    _close_quietly(s)


# Containers walked for libvpmm tensors: pickle saves these without a
# reducer of ours (dict, list and tuple never reach ForkingPickler's table),
# so the batch is gathered from the message before pickle reaches them.
_WALKED = (dict, list, tuple, set, frozenset)
_ATOMS = (int, float, complex, str, bytes, bytearray, bool, type(None))


def _pickled_state(o: Any) -> Optional[Dict[str, Any]]:
    """The __dict__ pickle saves for `o`: an object of a class that pickles
    the default way (no reducer of its own, here or in copyreg, no
    __reduce__, __reduce_ex__ or __getstate__ of its own): dataclasses,
    plain classes, nn.Module. None for every other object."""
    cls = type(o)
    d = getattr(o, "__dict__", None)
    if not isinstance(d, dict) or isinstance(o, _BY_NAME) or cls in _reducers() or cls in copyreg.dispatch_table:
        return None
    if cls.__reduce_ex__ is not object.__reduce_ex__ or cls.__reduce__ is not object.__reduce__:
        return None
    if getattr(cls, "__getstate__", _default_getstate) is not _default_getstate:
        return None
    return d


_default_getstate = getattr(object, "__getstate__", None)
# What pickle saves by name (or refuses), never by its __dict__.
_BY_NAME = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.MethodType)


def _reducers() -> Dict[type, Any]:
    from multiprocessing.reduction import ForkingPickler
    return ForkingPickler._extra_reducers


def _vpmm_tensors(message: Any, others: Optional[set] = None) -> List[_torch.Tensor]:
    """Every distinct libvpmm tensor holding memory that pickling `message`
    reaches through containers (at any depth: dicts of any kind, their keys
    and a dict subclass's __dict__ such as a state dict's _metadata, lists,
    tuples, sets) and through objects pickled by their __dict__
    (_pickled_state). Tensors inside objects with reducers of their own
    are not seen here; they travel one export each (share). The id() of
    every CUDA tensor found that libvpmm did not allocate goes into
    `others` (PyTorch's reduction sends those)."""
    found: List[_torch.Tensor] = []
    seen: set = set()
    stack = [message]
    mine = (_torch.Tensor, _torch.nn.parameter.Parameter)  # the classes _reduce is registered for
    while stack:
        o = stack.pop()
        cls = type(o)
        if cls in _ATOMS:
            continue
        if cls in mine:
            if id(o) not in seen:
                seen.add(id(o))
                try:
                    if o.is_cuda and o.numel():
                        if owns(o):
                            found.append(o)
                        elif others is not None:
                            others.add(id(o))
                except Exception:  # a tensor without memory of its own (meta, sparse): PyTorch's business
                    pass
            continue
        if id(o) in seen:
            continue
        seen.add(id(o))
        if isinstance(o, dict):
            extra = getattr(o, "__dict__", None)
            if extra:
                stack.append(extra)
            items: List[Any] = []
            for k, v in o.items():
                items.append(k)
                items.append(v)
            stack.extend(reversed(items))
        elif isinstance(o, _WALKED):
            stack.extend(reversed(list(o)))
        elif not isinstance(o, _torch.Tensor):
            state = _pickled_state(o)
            if state is not None:
                stack.append(state)
    return found


_batches = threading.local()  # .stack: the _Batch of each ForkingPickler.dump running on this thread


def _current_batch() -> Optional[_Batch]:
    stack = getattr(_batches, "stack", None)
    return stack[-1] if stack else None


def _reduce(tensor: _torch.Tensor, previous: Any = None) -> Any:
    # A CUDA tensor of a message being pickled is looked up in the message's
    # batch first: the walk that gathered the batch asked the pool about
    # each tensor once, and asking again here would cost a lookup through
    # ctypes per weight on the sender's critical path.
    batch = _current_batch() if tensor.is_cuda else None
    got = batch.find(tensor) if batch is not None else None
    if got is not None:
        shared, i = got
        return (_rebuild_batched, (shared, i, isinstance(tensor, _torch.nn.Parameter), tensor.requires_grad))
    if (batch is None or id(tensor) not in batch.others) and owns(tensor):
        return (_rebuild, (share(tensor.detach()), isinstance(tensor, _torch.nn.Parameter), tensor.requires_grad))
    if previous is not None:
        return previous(tensor)
    return tensor.__reduce_ex__(4)


def _batched_dump(pickler: Any, obj: Any) -> None:
    """ForkingPickler.dump after install_reductions(): pickle.Pickler.dump
    with this thread's batch of `obj` (gathered only if a libvpmm tensor is
    reduced). Every ForkingPickler pickling goes through it: Queue.put,
    Connection.send (ForkingPickler.dumps) and serializers that call
    ForkingPickler(buf).dump(obj) themselves."""
    stack = getattr(_batches, "stack", None)
    if stack is None:
        stack = _batches.stack = []
    batch = _Batch(obj)
    stack.append(batch)
    try:
        _pickler_dump(pickler, obj)
    except BaseException:
        batch.abandon()
        raise
    finally:
        stack.pop()


_installed = False


def install_reductions() -> None:
    """Send CUDA tensors that libvpmm allocated through
    multiprocessing.reduction.ForkingPickler (torch.multiprocessing queues
    and pipes, and serializers built on it, such as SGLang's
    MultiprocessingSerializer) with :func:`share` / :func:`open`; every
    other tensor keeps PyTorch's own reduction. Idempotent; call it in the
    sending process (the receiver needs vpmm importable). The receiver opens
    on its current device, which must be the sender's GPU.

    Every message is one :func:`share_many` per device: the libvpmm tensors
    anywhere in its containers (a state dict, a plain dict of detached
    tensors, a list of (name, tensor) pairs, nested dicts, lists, tuples and
    sets, objects pickled by their __dict__ such as dataclasses) are
    exported together when the first of them is pickled, and the receiver
    maps them with one import when it unpickles the first. A message
    without CUDA tensors costs nothing more; one whose CUDA tensors are
    all PyTorch's costs one walk of its containers (each tensor asked
    about once, as before); a tensor reached only
    through an object with a reducer of its own travels as one export of
    its own."""
    global _installed, _pickler_dump
    with _lock:
        if _installed:
            return
        import pickle
        import torch.multiprocessing  # noqa: F401  (registers PyTorch's reductions first)
        from multiprocessing.reduction import ForkingPickler
        for cls in (_torch.Tensor, _torch.nn.parameter.Parameter):
            previous = ForkingPickler._extra_reducers.get(cls)
            ForkingPickler.register(cls, functools.partial(_reduce, previous=previous))
        # ForkingPickler inherits dump from pickle.Pickler; a dump another
        # library set on it before is chained, not lost.
        _pickler_dump = ForkingPickler.__dict__.get("dump", pickle.Pickler.dump)
        ForkingPickler.dump = _batched_dump
        _installed = True
    # The process will send: its descriptor server (a socket and a thread)
    # starts now rather than inside the first send.
    ipc._fd_server()


_pickler_dump: Any = None  # the dump _batched_dump wraps


def reductions_installed() -> bool:
    """Whether :func:`install_reductions` ran in this process (it will send)."""
    return _installed
