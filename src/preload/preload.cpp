// libvpmm_preload.so: an LD_PRELOAD interposer that routes the allocations of
// unmodified CUDA programs into libvpmm's default pools (one per device).
//
//   LD_PRELOAD=/path/libvpmm_preload.so VPMM_PRELOAD_TAG=kv VPMM_PRELOAD_HOST_BACKUP=1 ./app
//
// Interposed (exported from this library, so the dynamic linker binds the
// program's and its shared libraries' calls here first):
//   cudaMalloc / cudaFree, cudaMallocAsync / cudaFreeAsync   (runtime API)
//   cuMemAlloc_v2 / cuMemFree_v2                              (driver API)
// Pointers the pools do not own (memory from before the preload took effect,
// from cudaMallocHost, from another allocator) go to the next definition of
// the same symbol (dlsym(RTLD_NEXT)), i.e. the real libcudart / libcuda.
// What cannot be reached is listed in docs/preload.md (statically linked
// cudart, cuGetProcAddress, dlsym on a handle). scope.cpp opens the
// environment's tag scope (VPMM_PRELOAD_TAG, TMS_INIT_ENABLE); control.cpp
// serves the VPMM_PRELOAD_CTL pause/resume channel.
//
// No CUDA header: the few types are declared below (the values are CUDA's,
// pinned by its ABI), so the interposer builds anywhere libvpmm builds.
#include <dlfcn.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "preload/preload.hpp"
#include "vpmm.h"

namespace {

// cudaError_t and CUresult share these values.
using cuda_error = int;
constexpr cuda_error kSuccess = 0;
constexpr cuda_error kInvalidValue = 1;      // cudaErrorInvalidValue / CUDA_ERROR_INVALID_VALUE
constexpr cuda_error kMemoryAllocation = 2;  // cudaErrorMemoryAllocation / CUDA_ERROR_OUT_OF_MEMORY
constexpr cuda_error kRuntimeNotFound = 35;  // cudaErrorInsufficientDriver: no real runtime below
constexpr cuda_error kDriverNotFound = 3;    // CUDA_ERROR_NOT_INITIALIZED: no real driver below
using cu_deviceptr = unsigned long long;     // CUdeviceptr on 64-bit targets
using cuda_stream = void*;                   // cudaStream_t / CUstream

using vpmm_preload::kMaxDevices;
std::atomic<vpmm_pool*> g_pools[kMaxDevices];

// The real functions, resolved on first use (the runtime may be loaded after
// this library, e.g. when the program dlopens it). A null result is retried
// on the next call; a found one is cached.
template <typename F>
F real(const char* name, std::atomic<void*>& cache) {
  void* p = cache.load(std::memory_order_acquire);
  if (!p) {
    p = dlsym(RTLD_NEXT, name);
    if (p) cache.store(p, std::memory_order_release);
  }
  F f;
  std::memcpy(&f, &p, sizeof f);
  return f;
}

#define VPMM_REAL(type, name)                  \
  ([]() {                                      \
    static std::atomic<void*> cache_{nullptr}; \
    return real<type>(#name, cache_);          \
  }())

using FnFree = cuda_error (*)(void*);
using FnFreeAsync = cuda_error (*)(void*, cuda_stream);
using FnGetDevice = cuda_error (*)(int*);
using FnDeviceSynchronize = cuda_error (*)(void);
using FnMemFree = cuda_error (*)(cu_deviceptr);
using FnCtxGetDevice = cuda_error (*)(int*);
using FnCtxSynchronize = cuda_error (*)(void);
using FnStreamSynchronize = cuda_error (*)(cuda_stream);
using FnSetDevice = cuda_error (*)(int);

int log_level() {  // 0 quiet (default: errors only once), 1 every routed call (VPMM_PRELOAD_LOG=1)
  static const int level = [] {
    const char* v = vpmm_preload::option_text("preload_log");
    return v && *v && std::strcmp(v, "0") != 0 ? 1 : 0;
  }();
  return level;
}

vpmm_pool* pool_of_device(int device) {
  if (device < 0 || device >= kMaxDevices) return nullptr;
  vpmm_pool* p = g_pools[device].load(std::memory_order_acquire);
  if (p) return p;
  if (vpmm_default_pool(device, &p) != VPMM_OK) {
    std::fprintf(stderr, "libvpmm_preload: no pool for device %d: %s\n", device,
                 vpmm_last_error());
    return nullptr;
  }
  g_pools[device].store(p, std::memory_order_release);
  return p;
}

// The pool that owns ptr as the start of an allocation; nullptr when no pool
// made by this interposer knows it (then it belongs to the real allocator).
// *interior is set when a pool knows ptr only as an interior pointer.
vpmm_pool* owner(const void* ptr, bool* interior) {
  *interior = false;
  for (auto& slot : g_pools) {
    vpmm_pool* p = slot.load(std::memory_order_acquire);
    void* base = nullptr;
    if (p && vpmm_pool_lookup(p, ptr, &base, nullptr) == VPMM_OK) {
      if (base == ptr) return p;
      *interior = true;
      return nullptr;
    }
  }
  return nullptr;
}

// Set once any cudaFreeAsync went to a pool: from then on a pool region may
// be free with work still pending on the freeing stream (the blocking frees
// synchronise first, so their regions are idle).
std::atomic<bool> g_async_freed{false};

// route_malloc's `settle` (may be null) runs after a successful allocation
// once async frees happened: blocking allocations (cudaMalloc, cuMemAlloc)
// promise memory usable on any stream at once, but the pool orders reuse of
// another stream's region with a GPU-side wait on the allocating stream (the
// legacy default stream here), which a non-blocking stream of the program
// would not observe. Synchronising that stream makes the wait complete.
cuda_error route_malloc(const char* call, int device, void** out, size_t size, cuda_stream stream,
                        cuda_error (*settle)(cuda_stream)) {
  if (!out) return kInvalidValue;
  if (size == 0) {  // cudaMalloc(0) succeeds with NULL; so does the driver's for ours
    *out = nullptr;
    return kSuccess;
  }
  vpmm_pool* pool = pool_of_device(device);
  if (!pool) return kMemoryAllocation;
  vpmm_preload::open_env_scope();
  void* p = nullptr;
  if (vpmm_pool_malloc(pool, size, stream, &p) != VPMM_OK) {
    std::fprintf(stderr, "libvpmm_preload: %s(%zu) on device %d: %s\n", call, size, device,
                 vpmm_last_error());
    return kMemoryAllocation;
  }
  if (settle && g_async_freed.load(std::memory_order_acquire)) settle(stream);
  if (log_level()) std::fprintf(stderr, "libvpmm_preload: %s(%zu) = %p\n", call, size, p);
  *out = p;
  return kSuccess;
}

// Frees ptr if a pool owns it: returns true with *result set; false when the
// pointer is not the pools' (the caller passes it to the real function).
// A blocking free (cudaFree, cuMemFree) first runs sync, the implicit
// synchronisation of those calls (null when no runtime is loaded below the
// interposer), and afterwards gives the pool's free memory
// back to the driver, as the real cudaFree / cuMemFree do: a program (or the
// caching allocator of a framework, on empty_cache) that frees expects the
// device to see the memory free; a second cache under PyTorch's would hide
// it. cudaFreeAsync keeps it for stream-ordered reuse, as CUDA's pools do.
bool route_free(const char* call, void* ptr, cuda_stream stream, bool blocking,
                cuda_error (*sync)(void), cuda_error* result) {
  bool interior = false;
  vpmm_pool* pool = owner(ptr, &interior);
  if (interior) {  // inside a pool allocation: no real allocator knows it either
    std::fprintf(stderr, "libvpmm_preload: %s(%p): interior pointer of a pool allocation\n", call,
                 ptr);
    *result = kInvalidValue;
    return true;
  }
  if (!pool) return false;
  if (blocking && sync) sync();
  *result = vpmm_pool_free(pool, ptr, stream) == VPMM_OK ? kSuccess : kInvalidValue;
  if (*result != kSuccess) {
    std::fprintf(stderr, "libvpmm_preload: %s(%p): %s\n", call, ptr, vpmm_last_error());
    return true;
  }
  if (log_level()) std::fprintf(stderr, "libvpmm_preload: %s(%p)\n", call, ptr);
  // The free itself succeeded; memory that could not be given back stays
  // cached for the next allocation, which is no reason to fail the call.
  if (blocking && vpmm_pool_trim(pool, 0) != VPMM_OK)
    std::fprintf(stderr, "libvpmm_preload: %s(%p): cached memory not given back: %s\n", call, ptr,
                 vpmm_last_error());
  return true;
}

int runtime_device() {
  int device = 0;
  if (auto get = VPMM_REAL(FnGetDevice, cudaGetDevice)) get(&device);
  return device;
}

int driver_device() {
  int device = 0;  // CUdevice is the ordinal for devices enumerated by cuDeviceGet
  if (auto get = VPMM_REAL(FnCtxGetDevice, cuCtxGetDevice)) get(&device);
  return device;
}

}  // namespace

namespace vpmm_preload {

const char* option_text(const char* option) {
  vpmm_option_info o;
  std::memset(&o, 0, sizeof o);
  o.struct_size = sizeof o;
  if (vpmm_option_find(option, &o, nullptr) != VPMM_OK || !o.env) {
    // Only a libvpmm older than this interposer lacks the row: say so rather
    // than run as if the variable were unset.
    std::fprintf(stderr, "libvpmm_preload: option %s not read: %s\n", option, vpmm_last_error());
    return nullptr;
  }
  return std::getenv(o.env);
}

vpmm_pool* used_pool(int device) {
  if (device < 0 || device >= kMaxDevices) return nullptr;
  return g_pools[device].load(std::memory_order_acquire);
}

bool synchronize_device(int device) {
  auto set = VPMM_REAL(FnSetDevice, cudaSetDevice);
  auto sync = VPMM_REAL(FnDeviceSynchronize, cudaDeviceSynchronize);
  return set && sync && set(device) == kSuccess && sync() == kSuccess;
}

}  // namespace vpmm_preload

extern "C" {

// cudaMalloc: the current device's default pool, on the legacy default
// stream (NULL), the stream cudaMalloc memory is first usable on.
__attribute__((visibility("default"))) cuda_error cudaMalloc(void** devPtr, size_t size) {
  return route_malloc("cudaMalloc", runtime_device(), devPtr, size, nullptr,
                      VPMM_REAL(FnStreamSynchronize, cudaStreamSynchronize));
}

// cudaFree synchronises the device before it frees (CUDA's documented
// implicit synchronisation); ours does the same, so memory freed here is idle
// on every stream, as a program written for cudaFree expects.
// cudaFree(NULL) goes to the runtime: programs call it to create the context.
__attribute__((visibility("default"))) cuda_error cudaFree(void* devPtr) {
  cuda_error r = kSuccess;
  if (devPtr &&
      route_free("cudaFree", devPtr, nullptr, true,
                 VPMM_REAL(FnDeviceSynchronize, cudaDeviceSynchronize), &r))
    return r;
  auto next = VPMM_REAL(FnFree, cudaFree);
  return next ? next(devPtr) : kRuntimeNotFound;
}

// Stream-ordered: exactly the pool's own semantics.
__attribute__((visibility("default"))) cuda_error cudaMallocAsync(void** devPtr, size_t size,
                                                                  cuda_stream stream) {
  return route_malloc("cudaMallocAsync", runtime_device(), devPtr, size, stream, nullptr);
}

__attribute__((visibility("default"))) cuda_error cudaFreeAsync(void* devPtr, cuda_stream stream) {
  cuda_error r = kSuccess;
  if (devPtr && route_free("cudaFreeAsync", devPtr, stream, false, nullptr, &r)) {
    if (r == kSuccess) g_async_freed.store(true, std::memory_order_release);
    return r;
  }
  auto next = VPMM_REAL(FnFreeAsync, cudaFreeAsync);
  return next ? next(devPtr, stream) : kRuntimeNotFound;
}

// The driver API, for programs that call libcuda by name. cudart itself
// reaches the driver through cuGetProcAddress, never through these symbols,
// so a cudaMalloc is routed once (above), not twice.
__attribute__((visibility("default"))) cuda_error cuMemAlloc_v2(cu_deviceptr* dptr, size_t bytesize) {
  if (!dptr) return kInvalidValue;
  void* p = nullptr;
  cuda_error r = route_malloc("cuMemAlloc_v2", driver_device(), &p, bytesize, nullptr,
                              VPMM_REAL(FnStreamSynchronize, cuStreamSynchronize));
  if (r == kSuccess) *dptr = static_cast<cu_deviceptr>(reinterpret_cast<uintptr_t>(p));
  return r;
}

// cuMemFree synchronises the context when the memory may be in use; ours
// synchronises always (cheap next to a free that needed it).
__attribute__((visibility("default"))) cuda_error cuMemFree_v2(cu_deviceptr dptr) {
  void* ptr = reinterpret_cast<void*>(static_cast<uintptr_t>(dptr));
  cuda_error r = kSuccess;
  if (ptr &&
      route_free("cuMemFree_v2", ptr, nullptr, true, VPMM_REAL(FnCtxSynchronize, cuCtxSynchronize),
                 &r))
    return r;
  auto next = VPMM_REAL(FnMemFree, cuMemFree_v2);
  return next ? next(dptr) : kDriverNotFound;
}

}  // extern "C"
