"""PyTorch, unmodified, under LD_PRELOAD=libvpmm_preload.so: its caching
allocator's cudaMalloc / cudaFree land in libvpmm's default pool (tagged by
VPMM_PRELOAD_TAG=torch with VPMM_PRELOAD_HOST_BACKUP=1, as meson sets), so
pausing the tag releases PyTorch's GPU memory and resuming brings back the
tensors' bytes at the same addresses. Exit 77 (SKIP) without PyTorch or a
CUDA device; FAIL when not run under the preload."""
import ctypes
import os
import sys

import pyharness  # noqa: E402  (also puts bindings/python on sys.path)

skip = pyharness.skip


try:
    import torch
except ImportError as e:
    skip(f"PyTorch not importable: {e}")
if not torch.cuda.is_available():
    skip("PyTorch sees no CUDA device")
if "libvpmm_preload" not in os.environ.get("LD_PRELOAD", ""):
    sys.exit("FAIL: run under LD_PRELOAD=libvpmm_preload.so (meson does)")
if os.environ.get("PYTORCH_CUDA_ALLOC_CONF"):
    print("note: PYTORCH_CUDA_ALLOC_CONF =", os.environ["PYTORCH_CUDA_ALLOC_CONF"])

import vpmm  # noqa: E402  (VPMM_LIBRARY: the same file the interposer loaded)

lib = ctypes.CDLL(vpmm.library_path())
lib.vpmm_default_pool.argtypes = [ctypes.c_int32, ctypes.POINTER(ctypes.c_void_p)]
for name in ("vpmm_pool_pause_ex", "vpmm_pool_resume_ex"):
    getattr(lib, name).argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_uint64)]
lib.vpmm_last_error.restype = ctypes.c_char_p

tally = pyharness.Tally()


def check(cond, what):
    # vpmm_last_error says why a C call failed
    tally.check(cond, what if cond else f"{what}: {lib.vpmm_last_error().decode(errors='replace')}")


torch.cuda.set_device(0)
before = vpmm.default_pool_stats(0)
x = torch.arange(16 << 20, device="cuda", dtype=torch.float32)  # 64 MiB: a cudaMalloc of its own
expected = torch.arange(16 << 20, dtype=torch.float32)
ptr = x.data_ptr()
after = vpmm.default_pool_stats(0)
check(after["n_malloc"] > before["n_malloc"], "PyTorch's cudaMalloc reached the default pool")
check(after["live_bytes"] >= x.numel() * 4, "the tensor's bytes are pool memory")

pool = ctypes.c_void_p()
check(lib.vpmm_default_pool(0, ctypes.byref(pool)) == 0, "vpmm_default_pool")
torch.cuda.synchronize()  # nothing may run on the memory while it is paused
n = ctypes.c_uint64()
check(lib.vpmm_pool_pause_ex(pool, b"torch", ctypes.byref(n)) == 0 and n.value >= 1, "pause('torch')")
check(vpmm.default_pool_stats(0)["paused_bytes"] >= x.numel() * 4, "the tensor's memory is paused")
check(lib.vpmm_pool_resume_ex(pool, b"torch", ctypes.byref(n)) == 0 and n.value >= 1, "resume('torch')")
check(x.data_ptr() == ptr, "same address")
check(torch.equal(x.cpu(), expected), "bytes restored")
check(torch.equal((x * 2).cpu(), expected * 2), "kernels run on the resumed memory")

n_free = vpmm.default_pool_stats(0)["n_free"]
del x
torch.cuda.empty_cache()  # PyTorch's cudaFree of its cached segments
check(vpmm.default_pool_stats(0)["n_free"] > n_free, "PyTorch's cudaFree reached the pool")

tally.finish()
