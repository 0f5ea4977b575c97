// The cost of PyTorch's pluggable-allocator path itself, for the serving and
// training clients (allocator.py's 'pluggable-async'): a CUDAPluggableAllocator
// whose malloc and free are cudaMallocAsync / cudaFreeAsync on the stream
// PyTorch passes, the same driver pool as PyTorch's backend:cudaMallocAsync.
// The difference between the two is what the pluggable path costs any
// allocator behind it; libvpmm's hooks sit behind the same path.
//   nvcc -shared -Xcompiler -fPIC -o libpassthrough.so bench/torch/passthrough_allocator.cu
#include <cstddef>
#include <cuda_runtime.h>

extern "C" {
void* passthrough_malloc(ptrdiff_t size, int device, cudaStream_t stream) {
  (void)device;  // PyTorch calls on the current device
  void* p = nullptr;
  return cudaMallocAsync(&p, static_cast<size_t>(size), stream) == cudaSuccess ? p : nullptr;
}

void passthrough_free(void* ptr, ptrdiff_t size, int device, cudaStream_t stream) {
  (void)size;
  (void)device;
  cudaFreeAsync(ptr, stream);
}
}
