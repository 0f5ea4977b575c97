"""jax.Arrays in libvpmm pool memory: zero-copy through DLPack, pausable by tag.

    import jax, numpy as np
    import vpmm.jax as vj

    kv = vj.zeros((layers, tokens, heads, dim), np.float16, tag="kv")           # no backup
    w = vj.asarray(np.load("weights.npy"), tag="weights", host_backup=True)
    y = jax.jit(step)(w, kv)             # ordinary jax.Arrays: jit, vmap, sharding of one device
    vj.pause("weights")                  # GPU memory released, bytes kept in pinned host memory
    ...                                  # the arrays must not be used while paused
    vj.resume("weights")                 # same addresses, same bytes: w is valid again

The memory comes from libvpmm's default pool of the array's device (the pool
the PyTorch hooks and libvpmm_preload.so use too), so vj.pause/resume and
vpmm's own tools see the same allocations. Each array is one pool allocation
made with the tag and the host-backup flag, exported to JAX with a DLPack
capsule that JAX consumes without copying (jax.dlpack.from_dlpack with
copy=False); unsafe_buffer_pointer() of the result is the pool address.

Ownership (who frees, and when):
  - JAX owns the array; libvpmm owns the memory. Nobody calls free by hand.
  - When JAX releases the buffer (the last jax.Array referring to it is
    garbage collected, or .delete() is called), JAX calls the DLPack deleter.
    The deleter only queues the pointer: it runs on whatever thread XLA
    frees on and must not call the driver. The queued allocations are given
    back to the pool, after a device synchronisation (XLA may still have
    kernels in flight that read them, on streams the pool does not know), by
    the next call of this module (asarray, zeros, empty, pause, resume) or an
    explicit collect().
  - Paused memory stays owned: an array deleted while paused is freed when it
    is collected (a paused allocation can be freed; its backup is dropped).
  - Never pass the memory of a pool array to another owner (jax.dlpack.to_dlpack
    of it into PyTorch, say, with take-ownership semantics).
  - The default pools live until the process exits; so does memory still
    referenced at exit.

Pause and resume: pause(tag) first synchronises the device (every stream of
the primary context: JAX's compute and copy streams included), so no kernel
reads the memory while it is released; while paused, touching the arrays
faults on the GPU (an illegal-address error that poisons the CUDA context):
resume before using them. Arrays made without host_backup come back with
undefined contents (the KV cache case: recomputed after resume).

Devices: device=None is JAX's default device. CUDA devices map to the
default pool of the same ordinal (pools on different devices share nothing).
With the host backend (VPMM_BACKEND=host), arrays are CPU arrays: the
pool's memory is host memory, exported as kDLCPU (for tests without a GPU).

Requires jax >= 0.4.31 (jax.dlpack.from_dlpack of objects with __dlpack__).
"""
import ctypes
import threading
from typing import Any, Optional, Sequence

try:
    import numpy as np
except ImportError as _e:  # the binding itself needs no framework
    raise ImportError(
        "vpmm.jax needs NumPy, which is not installed (import numpy failed: "
        f"{_e}). Install numpy (and jax), or use vpmm (Pool, default_pool, region) without it.") from _e

from . import library_path

__all__ = ["asarray", "zeros", "empty", "pause", "resume", "collect", "pointer", "pool_address"]

_lib = ctypes.CDLL(library_path())  # the same library instance as the package's (same file)
_vp, _u64, _i32, _u32 = ctypes.c_void_p, ctypes.c_uint64, ctypes.c_int32, ctypes.c_uint32


class _Attrs(ctypes.Structure):
    _fields_ = [("struct_size", _u32), ("flags", _u32), ("tag", ctypes.c_char_p), ("reservation", _vp)]


def _fn(name, res, *args):
    f = getattr(_lib, name)
    f.restype, f.argtypes = res, list(args)
    return f


_default_pool = _fn("vpmm_default_pool", _i32, _i32, ctypes.POINTER(_vp))
_malloc_ex = _fn("vpmm_pool_malloc_ex", _i32, _vp, _u64, _vp, ctypes.POINTER(_Attrs), ctypes.POINTER(_vp))
_free = _fn("vpmm_pool_free", _i32, _vp, _vp, _vp)
_pause_ex = _fn("vpmm_pool_pause_ex", _i32, _vp, ctypes.c_char_p, ctypes.POINTER(_u64))
_resume_ex = _fn("vpmm_pool_resume_ex", _i32, _vp, ctypes.c_char_p, ctypes.POINTER(_u64))
_backend_name = _fn("vpmm_pool_backend_name", ctypes.c_char_p, _vp)
_last_error = _fn("vpmm_last_error", ctypes.c_char_p)
_status_string = _fn("vpmm_status_string", ctypes.c_char_p, _i32)


class VpmmJaxError(RuntimeError):
    """A libvpmm or CUDA driver call made by vpmm.jax failed."""


def _ok(status, call):
    if status != 0:
        raise VpmmJaxError(f"{call}: {_status_string(status).decode()}: "
                           f"{_last_error().decode(errors='replace')}")


# ---------------------------------------------------------------------------
# The CUDA driver, for the few things JAX offers no API for: copying into a
# raw device pointer and synchronising the whole device. Loaded lazily: the
# host backend never needs it.
_cuda = None


def _driver():
    global _cuda
    if _cuda is None:
        try:
            lib = ctypes.CDLL("libcuda.so.1")
        except OSError as e:
            raise VpmmJaxError(f"vpmm.jax: the CUDA driver libcuda.so.1 cannot be loaded: {e}") from e
        for name, args in [("cuInit", [_u32]), ("cuDeviceGet", [ctypes.POINTER(_i32), _i32]),
                           ("cuDevicePrimaryCtxRetain", [ctypes.POINTER(_vp), _i32]),
                           ("cuCtxPushCurrent_v2", [_vp]), ("cuCtxPopCurrent_v2", [ctypes.POINTER(_vp)]),
                           ("cuCtxSynchronize", []),
                           ("cuMemcpyHtoD_v2", [_u64, _vp, ctypes.c_size_t]),
                           ("cuMemsetD8_v2", [_u64, ctypes.c_ubyte, ctypes.c_size_t])]:
            f = getattr(lib, name)
            f.restype, f.argtypes = ctypes.c_int, args
        _cuda_ok(lib.cuInit(0), "cuInit")
        _cuda = lib
    return _cuda


def _cuda_ok(r, call):
    if r != 0:
        raise VpmmJaxError(f"vpmm.jax: {call} failed with CUresult {r}")


_contexts = {}


def _in_context(ordinal, fn):
    """Run fn() with device `ordinal`'s primary context (the one JAX and
    libvpmm use) current on this thread."""
    cu = _driver()
    ctx = _contexts.get(ordinal)
    if ctx is None:
        dev, c = _i32(), _vp()
        _cuda_ok(cu.cuDeviceGet(ctypes.byref(dev), ordinal), "cuDeviceGet")
        _cuda_ok(cu.cuDevicePrimaryCtxRetain(ctypes.byref(c), dev.value), "cuDevicePrimaryCtxRetain")
        ctx = _contexts[ordinal] = c  # retained for the life of the process, like JAX's
    _cuda_ok(cu.cuCtxPushCurrent_v2(ctx), "cuCtxPushCurrent")
    try:
        return fn(cu)
    finally:
        cu.cuCtxPopCurrent_v2(ctypes.byref(_vp()))


# ---------------------------------------------------------------------------
# DLPack structs (dlpack.h, v1.0; the legacy DLManagedTensor too).
class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", _i32), ("device_id", _i32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", _vp), ("device", _DLDevice), ("ndim", _i32), ("dtype", _DLDataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", _u64)]


_Deleter = ctypes.CFUNCTYPE(None, _vp)


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", _vp), ("deleter", _Deleter)]


class _DLPackVersion(ctypes.Structure):
    _fields_ = [("major", _u32), ("minor", _u32)]


class _DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [("version", _DLPackVersion), ("manager_ctx", _vp), ("deleter", _Deleter),
                ("flags", _u64), ("dl_tensor", _DLTensor)]


_KDL_CPU, _KDL_CUDA = 1, 2
_DL_CODES = {"i": 0, "u": 1, "f": 2, "c": 5, "b": 6}
_CAPSULE_LEGACY, _CAPSULE_VERSIONED = b"dltensor", b"dltensor_versioned"

# The capsule functions as private prototypes (not ctypes.pythonapi's shared
# attributes, whose argtypes other modules may set differently). The
# destructor gets the raw PyObject*: the capsule is being deallocated, so it
# must not be turned into a Python reference again.
_PyCapsule_Destructor = ctypes.CFUNCTYPE(None, _vp)
_capsule_new = ctypes.PYFUNCTYPE(ctypes.py_object, _vp, ctypes.c_char_p, _PyCapsule_Destructor)(
    ("PyCapsule_New", ctypes.pythonapi))
_capsule_is_valid = ctypes.PYFUNCTYPE(ctypes.c_int, _vp, ctypes.c_char_p)(
    ("PyCapsule_IsValid", ctypes.pythonapi))
_capsule_pointer = ctypes.PYFUNCTYPE(_vp, _vp, ctypes.c_char_p)(("PyCapsule_GetPointer", ctypes.pythonapi))

_lock = threading.Lock()
_exported = {}   # key -> (_Allocation, managed tensor struct, shape/strides arrays): alive while JAX holds it
_to_free = []    # _Allocation released by JAX, given back to the pool by collect()
_next_key = [1]


class _Allocation:
    """One pool allocation; freed only through collect()."""

    def __init__(self, pool, ptr, nbytes, ordinal, cuda):
        self.pool, self.ptr, self.nbytes, self.ordinal, self.cuda = pool, ptr, nbytes, ordinal, cuda


@_Deleter
def _dl_deleter(managed):
    # Called by JAX (any thread, GIL taken by ctypes) once it no longer needs
    # the buffer, with the legacy or the versioned struct: both are found by
    # their address among the exported ones, so the layout never matters.
    # Only queues the allocation (see collect): no driver call on XLA's thread.
    with _lock:
        for key, entry in list(_exported.items()):
            if ctypes.addressof(entry[1]) == managed:
                del _exported[key]
                _to_free.append(entry[0])
                return


@_PyCapsule_Destructor
def _capsule_destructor(capsule):
    # A capsule nobody consumed (still carrying its original name) owns its
    # tensor: release it as JAX would have. A consumed one was renamed
    # ("used_dltensor") and belongs to the consumer.
    for name in (_CAPSULE_LEGACY, _CAPSULE_VERSIONED):
        if _capsule_is_valid(capsule, name):
            _dl_deleter(_capsule_pointer(capsule, name))
            return


class _Exporter:
    """The object handed to jax.dlpack.from_dlpack: __dlpack__ and __dlpack_device__."""

    def __init__(self, alloc, shape, dtype):
        self.alloc, self.shape, self.dtype = alloc, tuple(int(d) for d in shape), np.dtype(dtype)

    def __dlpack_device__(self):
        return (_KDL_CUDA if self.alloc.cuda else _KDL_CPU, self.alloc.ordinal)

    def __dlpack__(self, stream=None, *, max_version=None, dl_device=None, copy=None, **_ignored):
        # The bytes are ready when this is called (every write into them was
        # synchronous), so the consumer's stream needs no wait.
        if copy:
            raise BufferError("vpmm.jax exports pool memory without copying (copy=True asked)")
        if dl_device is not None and tuple(dl_device) != self.__dlpack_device__():
            raise BufferError(f"vpmm.jax: memory lives on {self.__dlpack_device__()}, not {dl_device}")
        versioned = max_version is not None and max_version[0] >= 1
        n = len(self.shape)
        shape = (ctypes.c_int64 * max(n, 1))(*self.shape)
        t = _DLTensor()
        t.data = self.alloc.ptr
        t.device = _DLDevice(*self.__dlpack_device__())
        t.ndim = n
        t.dtype = _DLDataType(_DL_CODES[self.dtype.kind] if self.dtype.name != "bfloat16" else 4,
                              self.dtype.itemsize * 8, 1)
        # Explicit compact row-major strides (in elements): DLPack allows NULL
        # for that, but newer consumers may insist on the array.
        st = [1] * n
        for i in range(n - 2, -1, -1):
            st[i] = st[i + 1] * self.shape[i + 1]
        strides = (ctypes.c_int64 * max(n, 1))(*st)
        t.shape = ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64))
        t.strides = ctypes.cast(strides, ctypes.POINTER(ctypes.c_int64))
        t.byte_offset = 0
        if versioned:
            m = _DLManagedTensorVersioned()
            m.version = _DLPackVersion(1, 0)
            m.flags = 0
        else:
            m = _DLManagedTensor()
        m.dl_tensor = t
        m.deleter = _dl_deleter
        with _lock:
            key = _next_key[0]
            _next_key[0] += 1
            m.manager_ctx = key
            _exported[key] = (self.alloc, m, shape, strides)
        return _capsule_new(ctypes.addressof(m), _CAPSULE_VERSIONED if versioned else _CAPSULE_LEGACY,
                            _capsule_destructor)


def _jax_device(device):
    """The jax.Device meant by `device`: None is JAX's default device; an int
    is taken as the pool's device ordinal as is (no JAX needed)."""
    if device is None or not isinstance(device, int):
        import jax
        return device if device is not None else jax.devices()[0]
    return device


def _pool_for(device):
    """(pool, ordinal, is_cuda) of the default pool behind a jax.Device (its
    platform must match the pool's backend) or a device ordinal."""
    if isinstance(device, int):
        ordinal, platform = device, None
    else:
        # The CUDA ordinal in this process (device.id is global across hosts).
        hw = getattr(device, "local_hardware_id", None)
        ordinal, platform = int(hw if hw is not None else device.id), device.platform
    pool = _vp()
    _ok(_default_pool(ordinal, ctypes.byref(pool)), "vpmm_default_pool")
    backend = _backend_name(pool).decode()
    cuda = backend == "cuda"
    if platform is not None and cuda != (platform in ("gpu", "cuda")):
        raise VpmmJaxError(f"vpmm.jax: the default pool of device {ordinal} is on the {backend} "
                           f"backend but the JAX device is {platform} "
                           "(set VPMM_BACKEND=host for CPU JAX, auto or cuda for GPU JAX)")
    return pool, ordinal, cuda


def collect() -> int:
    """Give the allocations JAX released back to the pool (after a device
    synchronisation: XLA may still have kernels in flight that read them).
    Returns how many were freed. Called by every other function here."""
    with _lock:
        pending, _to_free[:] = list(_to_free), []
    synced = set()
    for a in pending:
        if a.cuda and a.ordinal not in synced:
            _in_context(a.ordinal, lambda cu: _cuda_ok(cu.cuCtxSynchronize(), "cuCtxSynchronize"))
            synced.add(a.ordinal)
        _ok(_free(a.pool, a.ptr, None), "vpmm_pool_free")
    return len(pending)


def _export(shape, dtype, tag, host_backup, device, fill):
    """A pool allocation for an array of shape/dtype, filled by fill(alloc),
    wrapped in an exporter that has not been handed to anybody yet."""
    dtype = np.dtype(dtype)
    shape = tuple(int(d) for d in shape)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    pool, ordinal, cuda = _pool_for(device)
    attrs = _Attrs(ctypes.sizeof(_Attrs), 1 if host_backup else 0, tag.encode() if tag else None, None)
    ptr = _vp()
    _ok(_malloc_ex(pool, max(nbytes, 1), None, ctypes.byref(attrs), ctypes.byref(ptr)), "vpmm_pool_malloc_ex")
    alloc = _Allocation(pool, ptr.value, nbytes, ordinal, cuda)
    try:
        fill(alloc)
    except BaseException:
        _ok(_free(pool, alloc.ptr, None), "vpmm_pool_free")
        raise
    return _Exporter(alloc, shape, dtype)


def _allocate(shape, dtype, tag, host_backup, device, fill):
    import jax
    collect()
    exporter = _export(shape, dtype, tag, host_backup, _jax_device(device), fill)
    try:
        return jax.dlpack.from_dlpack(exporter, copy=False)
    except BaseException:
        # Not imported. If a capsule was made, its destructor (or JAX) queued
        # the allocation already; otherwise queue it here.
        with _lock:
            alloc = exporter.alloc
            if not any(e[0] is alloc for e in _exported.values()) and alloc not in _to_free:
                _to_free.append(alloc)
        collect()
        raise


def empty(shape: Sequence[int], dtype: Any, *, tag: Optional[str] = None, host_backup: bool = False,
          device: Any = None) -> Any:
    """A jax.Array of undefined contents in pool memory (for outputs written
    in place by custom calls, or KV caches filled later)."""
    return _allocate(shape, dtype, tag, host_backup, device, lambda a: None)


def zeros(shape: Sequence[int], dtype: Any, *, tag: Optional[str] = None, host_backup: bool = False,
          device: Any = None) -> Any:
    """A zero-filled jax.Array in pool memory."""
    def fill(a):
        if not a.nbytes:
            return
        if a.cuda:
            _in_context(a.ordinal, lambda cu: _cuda_ok(cu.cuMemsetD8_v2(a.ptr, 0, a.nbytes), "cuMemsetD8"))
        else:
            ctypes.memset(a.ptr, 0, a.nbytes)
    return _allocate(shape, dtype, tag, host_backup, device, fill)


def asarray(x: Any, dtype: Any = None, *, tag: Optional[str] = None, host_backup: bool = False,
            device: Any = None) -> Any:
    """A jax.Array in pool memory holding the values of x (a NumPy array, a
    jax.Array, anything np.asarray accepts): copied once into the pool
    allocation (through host memory), then exported without a copy."""
    host = np.ascontiguousarray(np.asarray(x, dtype=dtype))

    def fill(a):
        if not a.nbytes:
            return
        if a.cuda:
            _in_context(a.ordinal, lambda cu: _cuda_ok(
                cu.cuMemcpyHtoD_v2(a.ptr, host.ctypes.data, a.nbytes), "cuMemcpyHtoD"))
        else:
            ctypes.memmove(a.ptr, host.ctypes.data, a.nbytes)
    return _allocate(host.shape, host.dtype, tag, host_backup, device, fill)


def _tagged(call, fn, tag, device):
    collect()
    pool, ordinal, cuda = _pool_for(_jax_device(device))
    if cuda:  # no kernel of any stream may still read the memory
        _in_context(ordinal, lambda cu: _cuda_ok(cu.cuCtxSynchronize(), "cuCtxSynchronize"))
    n = _u64()
    _ok(fn(pool, tag.encode() if tag else None, ctypes.byref(n)), call)
    return n.value


def pause(tag: Optional[str] = None, *, device: Any = None) -> int:
    """Pause every pool allocation with `tag` (None: every tagged one) on the
    device's default pool; returns how many regions were paused. The arrays
    must not be used until resume()."""
    return _tagged("vpmm_pool_pause_ex", _pause_ex, tag, device)


def resume(tag: Optional[str] = None, *, device: Any = None) -> int:
    """Resume them at the same addresses (bytes restored where host_backup);
    returns how many regions were resumed."""
    return _tagged("vpmm_pool_resume_ex", _resume_ex, tag, device)


def pointer(array: Any) -> int:
    """The device address of a single-device jax.Array's buffer."""
    return array.unsafe_buffer_pointer()


def pool_address(array: Any, *, device: Any = None) -> bool:
    """True if the array's buffer is memory of the device's default pool."""
    pool, _, _ = _pool_for(_jax_device(device))
    lookup = _fn("vpmm_pool_lookup", _i32, _vp, _vp, ctypes.POINTER(_vp), ctypes.POINTER(_u64))
    base = _vp()
    return lookup(pool, pointer(array), ctypes.byref(base), None) == 0
