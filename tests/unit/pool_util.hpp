// Helpers shared by the pool tests (host backend, or HIP over the emulator:
// test_backend.hpp): pool construction, the region
// layout in the seed's notation, and byte patterns that prove data survives.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <utility>
#include <string>
#include <vector>

#include "patterns.hpp"
#include "pool_inspect.hpp"
#include "test_backend.hpp"
#include "vpmm.h"

namespace vt {

struct HostPoolSpec {
  uint64_t page = 64 << 10;
  uint64_t va_pages = 256;
  uint64_t initial_pages = 0;
  uint64_t capacity = 64ull << 20;
  uint64_t max_handle = 0;
  uint64_t small_size = 0;
  uint64_t large_rounding = 0;  // 0 = whole pages
  double remap_slack = 0;       // 0 = the default; negative = page-exact
  uint64_t view_min_size = 0;   // 0 = the default (or VPMM_VIEW_MIN_SIZE)
  uint64_t memory_limit = 0;    // bytes; 0 = none (or VPMM_MEMORY_LIMIT)
  double driver_budget = 0;     // 0 = the default (or VPMM_DRIVER_BUDGET); VPMM_DRIVER_BUDGET_*
  int32_t placement = -1;       // -1 = the default (or VPMM_PLACEMENT); VPMM_PLACEMENT_*
  int32_t budget_clock_us = 0;  // 0 = the wall clock (or VPMM_BUDGET_CLOCK_US)
  // Ignore the VPMM_* environment (vpmm_config_init_defaults): for the tests
  // whose pool must be exactly this one whatever the caller's shell sets.
  bool defaults_only = false;
};

inline vpmm_pool* make_host_pool(const HostPoolSpec& s) {
  vpmm_config c;
  if (s.defaults_only)
    vpmm_config_init_defaults(&c);
  else
    vpmm_config_init(&c);
  c.page_size = s.page;
  c.va_size = s.va_pages * s.page;
  c.initial_pages = s.initial_pages;
  c.host_capacity = s.capacity;
  c.max_handle_size = s.max_handle;
  c.small_size = s.small_size;
  c.large_rounding = s.large_rounding;
  c.remap_slack = s.remap_slack;
  if (s.view_min_size) c.view_min_size = s.view_min_size;
  if (s.memory_limit) c.memory_limit = s.memory_limit;
  if (s.driver_budget != 0) c.driver_budget = s.driver_budget;
  if (s.placement >= 0) c.placement = s.placement;
  if (s.budget_clock_us) c.budget_clock_us = s.budget_clock_us;
  use_test_backend(&c);  // host, or HIP over the emulator (test_backend.hpp)
  vpmm_pool* p = nullptr;
  if (vpmm_pool_create(&c, &p) != VPMM_OK) {
    std::printf("  pool create: %s\n", vpmm_last_error());  // the log says why the test has no pool
    return nullptr;
  }
  return p;
}

// vpmm_pool_malloc_ex with a tag and flags (and a reservation, if given);
// nullptr on failure (*st, if given, receives the status).
inline void* malloc_tagged(vpmm_pool* p, uint64_t size, const char* tag, uint32_t flags,
                           vpmm_stream s = nullptr, vpmm_status* st = nullptr,
                           vpmm_reservation* reservation = nullptr) {
  vpmm_alloc_attrs a = sized<vpmm_alloc_attrs>();
  a.tag = tag;
  a.flags = flags;
  a.reservation = reservation;
  void* out = nullptr;
  vpmm_status rs = vpmm_pool_malloc_ex(p, size, s, &a, &out);
  if (st) *st = rs;
  return rs == VPMM_OK ? out : nullptr;
}

inline uint64_t chunk_offset(vpmm_pool* p, void* ptr) {
  for (const vpmm_region_info& r : regions(p))
    if (r.va == reinterpret_cast<uint64_t>(ptr)) return r.chunk_offset;
  return UINT64_MAX;
}

// Name of the vpmm_stats field at 8-byte word i (for readable diffs).
inline std::string stat_name(size_t i) {
#define VT_F(f) {offsetof(vpmm_stats, f) / 8, #f},
  static const std::pair<size_t, const char*> names[] = {
      VT_F(mapped_bytes) VT_F(reserved_va_bytes) VT_F(live_bytes) VT_F(requested_bytes)
      VT_F(free_bytes) VT_F(hole_bytes) VT_F(zombie_bytes) VT_F(peak_mapped_bytes)
      VT_F(peak_live_bytes) VT_F(n_malloc) VT_F(n_free) VT_F(n_defrag) VT_F(n_grow)
      VT_F(pages_created) VT_F(bytes_remapped) VT_F(page_size) VT_F(handles) VT_F(handles_created)
      VT_F(va_chunks) VT_F(largest_free_bytes) VT_F(small_bytes) VT_F(small_live_bytes)
      VT_F(n_small_malloc) VT_F(n_cross_stream_reuse) VT_F(n_stream_waits) VT_F(n_events_recorded)
      VT_F(n_zombies_reaped) VT_F(n_live) VT_F(paused_bytes) VT_F(backup_bytes)
      VT_F(backup_cache_bytes) VT_F(n_pause) VT_F(n_resume) VT_F(n_trim) VT_F(bytes_trimmed)
      VT_F(capacity_bytes) VT_F(reserved_bytes) VT_F(reservation_used_bytes) VT_F(available_bytes)
      VT_F(watermark_trigger_bytes) VT_F(watermark_stop_bytes) VT_F(under_pressure) VT_F(n_oom)
      VT_F(n_oom_recovered) VT_F(backup_pinned_bytes) VT_F(backup_pageable_bytes) VT_F(driver_ns) VT_F(driver_calls)
      VT_F(backup_mmap_bytes) VT_F(backup_disk_bytes) VT_F(backup_retained_bytes) VT_F(backup_skipped_bytes)
  };
#undef VT_F
  for (const auto& n : names)
    if (n.first == i) return n.second;
  return "word " + std::to_string(i);
}

}  // namespace vt
