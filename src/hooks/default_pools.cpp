// Default pools and allocator hooks for callers that carry no user data:
// PyTorch's CUDAPluggableAllocator (malloc/free by device and stream), CuPy
// and XLA-style custom allocators. One pool per device, created on first use
// from vpmm_config_init() (so VPMM_* environment variables apply), destroyed
// never: allocator hooks can be called until process exit. A hook cannot
// return a reason, so failures are reported on stderr as VPMM_LOG allows.
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <cstddef>
#include <cstdlib>
#include <cstring>

#include "hooks/recorded_streams.hpp"
#include "hooks/report.hpp"
#include "vpmm.h"

namespace vpmm {

// A hook that returns NULL makes PyTorch report a bare "out of memory" or
// "invalid argument"; the reason (a malformed VPMM_* variable, no device)
// would be lost. Say it on stderr: out of memory at VPMM_LOG=warn (the
// default), any other failure (configuration, device, driver) at error; once
// per kind of failure, or every time at VPMM_LOG=debug.
void report_hook_failure(const char* hook, vpmm_status st) {
  const HookLog level = st == VPMM_ERR_OUT_OF_MEMORY ? HookLog::kWarn : HookLog::kError;
  if (!hook_log_enabled(level)) return;
  static std::atomic<uint32_t> reported{0};
  const uint32_t bit = 1u << (static_cast<uint32_t>(st) & 31u);
  const bool first = !(reported.fetch_or(bit) & bit);
  if (!first && !hook_log_enabled(HookLog::kDebug)) return;
  std::fprintf(stderr, "libvpmm: %s: %s: %s%s\n", hook, vpmm_status_string(st), vpmm_last_error(),
               first && !hook_log_enabled(HookLog::kDebug)
                   ? " (reported once; VPMM_LOG=debug reports every failure)"
                   : "");
}

}  // namespace vpmm

namespace {
constexpr int kMaxDevices = 64;
// Each device's pool is made once under g_mu and then only read: every
// torch malloc and free asks for it, from the main thread and autograd's
// backward thread in turn, and a mutex there moved its cache line between
// their cores twice a call.
std::mutex g_mu;
std::atomic<vpmm_pool*> g_pools[kMaxDevices] = {};
// Tensor.record_stream, all devices (pointers are unique across them). Never
// destroyed, like the pools: PyTorch may free tensors during exit.
vpmm::RecordedStreams& recorded() {
  static vpmm::RecordedStreams* r = new vpmm::RecordedStreams;
  return *r;
}

// Whether the caller set the variable of `option`, named by the library's
// option table. The hooks see the table through vpmm.h like a binding; the
// field alone cannot tell "set to 0" (whole pages, asked for) from "unset".
bool option_set_in_env(const char* option) {
  vpmm_option_info o;
  std::memset(&o, 0, sizeof o);
  o.struct_size = sizeof o;
  return vpmm_option_find(option, &o, nullptr) == VPMM_OK && o.env && std::getenv(o.env);
}

// VPMM_LOG=info: what the default pool of a device is, once, when created.
void report_pool_created(int32_t device, vpmm_pool* pool) {
  if (!vpmm::hook_log_enabled(vpmm::HookLog::kInfo)) return;
  vpmm_config c;
  std::memset(&c, 0, sizeof c);
  c.struct_size = sizeof c;
  if (vpmm_pool_get_config(pool, &c) != VPMM_OK) return;
  std::fprintf(stderr, "libvpmm: default pool of device %d: %s backend, page %llu bytes\n", device,
               vpmm_pool_backend_name(pool), static_cast<unsigned long long>(c.page_size));
}
}  // namespace

extern "C" {

/* See vpmm.h. */
VPMM_API vpmm_status vpmm_default_pool(int32_t device, vpmm_pool** out) {
  if (!out) return vpmm::hook_fail(VPMM_ERR_INVALID_ARGUMENT, "vpmm_default_pool: out is NULL");
  if (device < 0 || device >= kMaxDevices)
    return vpmm::hook_fail(VPMM_ERR_INVALID_ARGUMENT, "vpmm_default_pool: device %d is outside 0..%d",
                      device, kMaxDevices - 1);
  vpmm_pool* pool = g_pools[device].load(std::memory_order_acquire);
  if (!pool) {
    std::lock_guard<std::mutex> lock(g_mu);
    pool = g_pools[device].load(std::memory_order_relaxed);
    if (!pool) {
      vpmm_config c;
      vpmm_config_init(&c);
      c.device = device;
      if (!option_set_in_env("large_rounding")) c.large_rounding = VPMM_DEFAULT_POOL_LARGE_ROUNDING;
      vpmm_status st = vpmm_pool_create(&c, &pool);
      if (st != VPMM_OK) return st;
      report_pool_created(device, pool);
      g_pools[device].store(pool, std::memory_order_release);
    }
  }
  *out = pool;
  return VPMM_OK;
}

/* PyTorch CUDAPluggableAllocator entry points (see vpmm.h). */
VPMM_API void* vpmm_torch_malloc(ptrdiff_t size, int device, void* stream) {
  vpmm_pool* pool = nullptr;
  void* p = nullptr;
  if (size <= 0) {
    vpmm::hook_fail(VPMM_ERR_INVALID_ARGUMENT, "vpmm_torch_malloc: size %td is not positive", size);
    return nullptr;
  }
  vpmm_status st = vpmm_default_pool(device, &pool);
  if (st == VPMM_OK) st = vpmm_pool_malloc(pool, static_cast<uint64_t>(size), stream, &p);
  if (st != VPMM_OK) {
    vpmm::report_hook_failure("vpmm_torch_malloc", st);
    return nullptr;
  }
  recorded().forget(p);
  return p;
}

VPMM_API void vpmm_torch_free(void* ptr, ptrdiff_t size, int device, void* stream) {
  (void)size;
  vpmm_pool* pool = nullptr;
  if (!ptr || vpmm_default_pool(device, &pool) != VPMM_OK) return;
  void* on = recorded().free_stream(pool, ptr, stream);
  vpmm_status st = vpmm_pool_free(pool, ptr, on);
  // The recorded stream is gone (its work still completes, as a destroyed
  // stream's does): free on the allocating stream rather than leak.
  if (st != VPMM_OK && on != stream) st = vpmm_pool_free(pool, ptr, stream);
  if (st != VPMM_OK && vpmm::hook_log_enabled(vpmm::HookLog::kError))
    std::fprintf(stderr, "libvpmm: vpmm_torch_free: %s\n", vpmm_last_error());
}

VPMM_API void vpmm_torch_record_stream(void* ptr, void* stream) {
  if (ptr) recorded().record(ptr, stream);
}

}  // extern "C"
