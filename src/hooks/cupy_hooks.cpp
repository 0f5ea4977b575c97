// CuPy allocator entry points over the default pools (see vpmm.h):
//   cupy.cuda.memory.CFunctionAllocator(param, vpmm_cupy_malloc, vpmm_cupy_free, owner)
// CuPy passes an opaque `param` with every call; libvpmm reads it as the
// attributes of the allocations (NULL: the calling thread's vpmm_region_push
// scope, as for the PyTorch hooks). CuPy gives no stream: allocations and
// frees are ordered on the backend's default stream, which (legacy default
// stream semantics) waits for the work of CuPy's ordinary blocking streams.
#include <cstddef>
#include <cstdint>
#include <cstdio>

#include "hooks/report.hpp"
#include "vpmm.h"

extern "C" {

VPMM_API void* vpmm_cupy_malloc(void* param, size_t size, int device) {
  vpmm_pool* pool = nullptr;
  void* p = nullptr;
  if (size == 0) {
    vpmm::hook_fail(VPMM_ERR_INVALID_ARGUMENT, "vpmm_cupy_malloc: size 0 is not allowed");
    return nullptr;
  }
  vpmm_status st = vpmm_default_pool(device, &pool);
  if (st == VPMM_OK)
    st = vpmm_pool_malloc_ex(pool, static_cast<uint64_t>(size), nullptr,
                             static_cast<const vpmm_alloc_attrs*>(param), &p);
  if (st != VPMM_OK) {
    vpmm::report_hook_failure("vpmm_cupy_malloc", st);
    return nullptr;
  }
  return p;
}

VPMM_API void vpmm_cupy_free(void* param, void* ptr, int device) {
  (void)param;
  vpmm_pool* pool = nullptr;
  if (!ptr || vpmm_default_pool(device, &pool) != VPMM_OK) return;
  if (vpmm_pool_free(pool, ptr, nullptr) != VPMM_OK && vpmm::hook_log_enabled(vpmm::HookLog::kError))
    std::fprintf(stderr, "libvpmm: vpmm_cupy_free: %s\n", vpmm_last_error());
}

}  // extern "C"
