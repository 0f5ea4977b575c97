"""vpmm.jax's DLPack export, without JAX: NumPy consumes the capsules (CPU,
host backend), which exercises what JAX relies on: the DLTensor fields, the
zero-copy address, the deleter that hands the memory back (collect), the
destructor of capsules nobody consumed, the versioned (DLPack 1.0) capsule,
and pause/resume of the exported memory at the same address.
Run with VPMM_BACKEND=host and VPMM_LIBRARY set (meson does)."""
import ctypes
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
try:
    import numpy as np
except ImportError:
    # Reported as SKIPPED (never passed); CI installs python3-numpy (scripts/deps.sh).
    # Debian's package serves /usr/bin/python3 only, and meson runs these
    # tests with the python3 first on PATH (pyenv's, say): name both.
    if os.path.realpath(sys.executable).startswith("/usr/bin/"):
        how = "apt-get install python3-numpy"
    else:
        how = (f"{sys.executable} -m pip install numpy, or reconfigure the build with /usr/bin first on PATH "
               f"so that the tests run under /usr/bin/python3, which Debian's python3-numpy serves")
    print(f"SKIP: NumPy is not importable by {sys.executable} (the python3 these tests run under): {how}")
    sys.exit(77)
import vpmm.jax as vj  # noqa: E402  (imports no JAX until an array is made)

passed = failed = 0


def check(cond, what):
    global passed, failed
    if cond:
        passed += 1
    else:
        failed += 1
        print("FAIL:", what)


def owned(ptr):
    pool, _, _ = vj._pool_for(0)
    lookup = vj._fn("vpmm_pool_lookup", vj._i32, vj._vp, vj._vp, ctypes.POINTER(vj._vp), ctypes.POINTER(vj._u64))
    return lookup(pool, ptr, None, None) == 0


values = np.arange(4 * 1024, dtype=np.float32).reshape(4, 1024)
exp = vj._export(values.shape, values.dtype, "dl", True, 0,
                 lambda a: ctypes.memmove(a.ptr, values.ctypes.data, a.nbytes))
ptr = exp.alloc.ptr
check(not exp.alloc.cuda and exp.__dlpack_device__() == (1, 0), "host pool exports kDLCPU device 0")

# Zero-copy import: the array's data is the pool allocation.
arr = np.from_dlpack(exp)
check(arr.ctypes.data == ptr, "numpy array shares the pool address")
check(arr.shape == (4, 1024) and arr.dtype == np.float32, "shape and dtype")
check(np.array_equal(arr, values), "values")

# Pause and resume with a host backup: same address, same bytes.
check(vj.pause("dl", device=0) == 1, "pause one region")
check(vj.resume("dl", device=0) == 1, "resume one region")
check(arr.ctypes.data == ptr and np.array_equal(arr, values), "bytes back at the same address")

# The consumer releases the tensor: the deleter queues it, collect() frees it.
del arr
check(owned(ptr), "memory stays allocated until collected")
check(vj.collect() == 1, "collect frees the released allocation")
check(not owned(ptr), "the pool no longer owns it")

# A capsule nobody consumed: its destructor releases the tensor.
exp2 = vj._export((16,), np.int32, None, False, 0, lambda a: None)
cap = exp2.__dlpack__()
del cap
check(vj.collect() == 1, "an unconsumed legacy capsule is released by its destructor")

# DLPack 1.0: a versioned capsule when the consumer announces max_version.
exp3 = vj._export((2, 3), np.int16, None, False, 0, lambda a: None)
cap = exp3.__dlpack__(max_version=(1, 0))
is_valid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(("PyCapsule_IsValid", ctypes.pythonapi))
get_ptr = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(("PyCapsule_GetPointer", ctypes.pythonapi))
check(is_valid(cap, b"dltensor_versioned") == 1, "versioned capsule name")
m = vj._DLManagedTensorVersioned.from_address(get_ptr(cap, b"dltensor_versioned"))
check((m.version.major, m.version.minor) == (1, 0), "DLPack version 1.0")
t = m.dl_tensor
check(t.data == exp3.alloc.ptr and t.ndim == 2 and [t.shape[0], t.shape[1]] == [2, 3], "tensor fields")
check((t.dtype.code, t.dtype.bits, t.dtype.lanes) == (0, 16, 1), "int16")
check([t.strides[0], t.strides[1]] == [3, 1], "compact row-major strides")
del cap, m, t
check(vj.collect() == 1, "an unconsumed versioned capsule is released by its destructor")

# No copy is ever made: a consumer asking for one is told so.
refusal = None
try:
    exp3.__dlpack__(copy=True)
except BufferError as e:
    refusal = str(e)
check(refusal is not None and "without copying" in refusal,
      f"copy=True raises BufferError saying no copy is made (got {refusal!r})")

print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
