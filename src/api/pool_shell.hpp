// The handle users hold (struct vpmm_pool) and what every file of the C API
// layer does with it: check it, and keep C++ exceptions from crossing the
// ABI. Destroyed pools keep their (tiny) shell with a dead magic, so a call
// on a destroyed pool is reported as such instead of reading freed memory.
#pragma once

#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <string>

#include "common/status.hpp"
#include "core/pool.hpp"
#include "vpmm.h"

namespace vpmm {
namespace api {

constexpr uint64_t kLiveMagic = 0x76706d6d2d6c6976ull;  // "vpmm-liv"
constexpr uint64_t kDeadMagic = 0x76706d6d2d646561ull;  // "vpmm-dea"

template <typename F>
vpmm_status guarded(const char* call, F&& f) noexcept {
  try {
    return f();
  } catch (const std::bad_alloc&) {
    return vpmm::fail(VPMM_ERR_OUT_OF_MEMORY, "%s: out of host memory", call);
  } catch (const std::exception& e) {
    return vpmm::fail(VPMM_ERR_INTERNAL, "%s: internal error: %s", call, e.what());
  } catch (...) {
    return vpmm::fail(VPMM_ERR_INTERNAL, "%s: internal error (unknown exception)", call);
  }
}

}  // namespace api
}  // namespace vpmm

struct vpmm_pool {
  uint64_t magic = vpmm::api::kLiveMagic;
  std::unique_ptr<vpmm::Pool> pool;
  vpmm_config config{};  // effective configuration
  std::string ledger;    // the ledger joined: config.ledger points here
  std::mutex config_mu;  // set_limit writes config while other threads read it
};

namespace vpmm {
namespace api {

inline vpmm_status check_pool(const char* call, vpmm_pool* p) {
  if (!p) return vpmm::fail(VPMM_ERR_INVALID_ARGUMENT, "%s: pool is NULL", call);
  if (p->magic == kDeadMagic)
    return vpmm::fail(VPMM_ERR_INVALID_ARGUMENT, "%s: pool %p was already destroyed", call,
                      static_cast<void*>(p));
  if (p->magic != kLiveMagic)
    return vpmm::fail(VPMM_ERR_INVALID_ARGUMENT, "%s: %p is not a vpmm_pool", call,
                      static_cast<void*>(p));
  return VPMM_OK;
}

// A snapshot struct (vpmm_stats, vpmm_ipc_stats, vpmm_driver_profile) for
// a caller compiled against out->struct_size bytes of it: checks that size,
// has fill() write a whole one, and copies what the caller has room for
// (the ABI only appends fields). `arg` and `type` name them in the error.
template <typename T, typename Fill>
vpmm_status sized_snapshot(const char* call, const char* arg, const char* type, T* out, Fill&& fill) {
  if (out->struct_size < 2 * sizeof(uint64_t) || out->struct_size > 65536)
    return vpmm::fail(VPMM_ERR_INVALID_ARGUMENT, "%s: %s->struct_size %u is not a %s size (expected %u)", call,
                      arg, out->struct_size, type, static_cast<unsigned>(sizeof(T)));
  return guarded(call, [&]() -> vpmm_status {
    T full;
    fill(&full);
    const uint32_t n = out->struct_size;
    std::memcpy(out, &full, n < sizeof full ? n : sizeof full);
    out->struct_size = n;
    return VPMM_OK;
  });
}

}  // namespace api
}  // namespace vpmm

#define VPMM_CHECK_POOL(call, p)                           \
  do {                                                     \
    vpmm_status st_ = vpmm::api::check_pool(call, p);      \
    if (st_ != VPMM_OK) return st_;                        \
  } while (0)

#define VPMM_CHECK_NONNULL(call, arg)                                              \
  do {                                                                             \
    if (!(arg)) return vpmm::fail(VPMM_ERR_INVALID_ARGUMENT, "%s: %s is NULL", call, #arg); \
  } while (0)
