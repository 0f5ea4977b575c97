// An XLA FFI custom call whose scratch memory comes from libvpmm, loaded at
// run time through vpmm_loader.h: this library has no link-time dependency
// on libvpmm (readelf -d shows no libvpmm), only on what nvcc links.
//
//   y = 2 * x + 1, computed in two kernels through a scratch buffer taken
//   from the default pool of the call's device, on XLA's stream, and given
//   back in stream order (the pool reuses it only after the kernels ran).
//
// Build: examples/jax_ffi/build.sh (headers from jax.ffi.include_dir()).
// Use:   see examples/jax_ffi/vpmm_scratch.py.
#include <cuda_runtime.h>

#include <cstdint>
#include <mutex>
#include <string>

#include "vpmm_loader.h"
#include "xla/ffi/api/c_api.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

// One loader for the life of the process (never closed: the default pools
// live until exit). Which file: $VPMM_LIBRARY, else libvpmm.so.1 on the
// loader's search path.
vpmm_loader g_loader;
std::once_flag g_once;

const vpmm_api* api() {
  std::call_once(g_once, [] { vpmm_loader_open(&g_loader, nullptr); });
  return g_loader.api;
}

__global__ void twice(const float* x, float* scratch, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(blockDim.x) * gridDim.x)
    scratch[i] = 2.0f * x[i];
}

__global__ void plus_one(const float* scratch, float* y, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(blockDim.x) * gridDim.x)
    y[i] = scratch[i] + 1.0f;
}

ffi::Error vpmm_error(const vpmm_api* a, const char* call, vpmm_status st) {
  return ffi::Error(XLA_FFI_Error_Code_INTERNAL, std::string("vpmm_scratch_affine: ") + call +
                                                     ": " + a->status_string(st) + ": " +
                                                     a->last_error());
}

ffi::Error ScratchAffineImpl(cudaStream_t stream, ffi::Buffer<ffi::F32> x,
                             ffi::ResultBuffer<ffi::F32> y) {
  const vpmm_api* a = api();
  if (!a)
    return ffi::Error(XLA_FFI_Error_Code_FAILED_PRECONDITION,
                      std::string("vpmm_scratch_affine: ") + g_loader.error);
  const size_t n = x.element_count();
  if (n == 0) return ffi::Error::Success();
  // The device of the call: the one holding its input. (ffi::DeviceOrdinal
  // is not in the external FFI headers jaxlib ships, and the current device
  // of XLA's thread is an implementation detail; the pointer is not.)
  cudaPointerAttributes where{};
  const cudaError_t pe = cudaPointerGetAttributes(&where, x.typed_data());
  if (pe != cudaSuccess || where.type != cudaMemoryTypeDevice)
    return ffi::Error(XLA_FFI_Error_Code_INVALID_ARGUMENT,
                      std::string("vpmm_scratch_affine: input is not device memory: ") +
                          cudaGetErrorString(pe));
  vpmm_pool* pool = nullptr;
  vpmm_status st = a->default_pool(where.device, &pool);
  if (st != VPMM_OK) return vpmm_error(a, "vpmm_default_pool", st);
  void* scratch = nullptr;
  st = a->pool_malloc(pool, n * sizeof(float), static_cast<vpmm_stream>(stream), &scratch);
  if (st != VPMM_OK) return vpmm_error(a, "vpmm_pool_malloc", st);

  const int block = 256;
  const int grid = static_cast<int>((n + block - 1) / block < 4096 ? (n + block - 1) / block : 4096);
  twice<<<grid, block, 0, stream>>>(x.typed_data(), static_cast<float*>(scratch), n);
  plus_one<<<grid, block, 0, stream>>>(static_cast<const float*>(scratch), y->typed_data(), n);
  const cudaError_t launch = cudaGetLastError();

  // Stream-ordered free: queued work on `stream` may still use the scratch;
  // the pool hands it to another stream only after that work completes.
  st = a->pool_free(pool, scratch, static_cast<vpmm_stream>(stream));
  if (launch != cudaSuccess)
    return ffi::Error(XLA_FFI_Error_Code_INTERNAL,
                      std::string("vpmm_scratch_affine: kernel launch: ") +
                          cudaGetErrorString(launch));
  if (st != VPMM_OK) return vpmm_error(a, "vpmm_pool_free", st);
  return ffi::Error::Success();
}

}  // namespace

// The handler symbol, found by Python with ctypes and registered with
// jax.ffi.register_ffi_target(..., platform="CUDA").
XLA_FFI_DEFINE_HANDLER_SYMBOL(VpmmScratchAffine, ScratchAffineImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>());
