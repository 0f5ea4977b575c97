// The cost of PyTorch's pluggable-allocator path itself, for the serving and
// training clients (allocator.py's 'pluggable-async'): a CUDAPluggableAllocator
// whose malloc and free are cudaMallocAsync / cudaFreeAsync on the stream
// PyTorch passes, the same driver pool as PyTorch's backend:cudaMallocAsync.
// The difference between the two is what the pluggable path costs any
// allocator behind it; libvpmm's hooks sit behind the same path. Like that
// backend, it sets the pool's release threshold to "keep everything": at the
// driver's default (0) the pool hands its memory back at every
// synchronization, which once measured as a 14% "cost of the path".
// passthrough_nodeps_malloc / _free (allocator.py's 'pluggable-async-nodeps')
// also turn off the pool's reuse across streams that inserts GPU-side waits
// (internal dependencies, opportunistic reuse): a freed block then reaches
// another stream only once the driver knows it is safe, as in PyTorch's
// caching allocator, which never makes a stream wait for another's free.
//   nvcc -shared -Xcompiler -fPIC -o libpassthrough.so bench/torch/passthrough_allocator.cu
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cuda_runtime.h>

namespace {
constexpr int kMaxDevices = 64;
std::atomic<bool> g_pool_kept[kMaxDevices];

// Once per device: the default pool keeps everything it was given (and,
// with no_waits, reuses across streams only where no wait is needed; a
// process uses one pair of entry points). A race between two first calls
// sets the same attributes twice, which is harmless.
void keep_pool(int device, bool no_waits) {
  if (device < 0 || device >= kMaxDevices || g_pool_kept[device].load(std::memory_order_acquire)) return;
  cudaMemPool_t pool = nullptr;
  if (cudaDeviceGetDefaultMemPool(&pool, device) == cudaSuccess) {
    uint64_t keep_all = UINT64_MAX;
    cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep_all);
    if (no_waits) {
      int off = 0;
      cudaMemPoolSetAttribute(pool, cudaMemPoolReuseAllowInternalDependencies, &off);
      cudaMemPoolSetAttribute(pool, cudaMemPoolReuseAllowOpportunistic, &off);
    }
  }
  g_pool_kept[device].store(true, std::memory_order_release);
}

// PyTorch calls on the current device, which it names.
void* pool_malloc(ptrdiff_t size, int device, cudaStream_t stream, bool no_waits) {
  keep_pool(device, no_waits);
  void* p = nullptr;
  return cudaMallocAsync(&p, static_cast<size_t>(size), stream) == cudaSuccess ? p : nullptr;
}
}  // namespace

extern "C" {
void* passthrough_malloc(ptrdiff_t size, int device, cudaStream_t stream) {
  return pool_malloc(size, device, stream, /*no_waits=*/false);
}

void passthrough_free(void* ptr, ptrdiff_t size, int device, cudaStream_t stream) {
  (void)size;
  (void)device;
  cudaFreeAsync(ptr, stream);
}

void* passthrough_nodeps_malloc(ptrdiff_t size, int device, cudaStream_t stream) {
  return pool_malloc(size, device, stream, /*no_waits=*/true);
}

void passthrough_nodeps_free(void* ptr, ptrdiff_t size, int device, cudaStream_t stream) {
  passthrough_free(ptr, size, device, stream);
}
}
