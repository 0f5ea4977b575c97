// Helpers shared by the host-backend tests: pool construction, the region
// layout in the seed's notation, and byte patterns that prove data survives.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "vpmm.h"

namespace vt {

struct HostPoolSpec {
  uint64_t page = 64 << 10;
  uint64_t va_pages = 256;
  uint64_t initial_pages = 0;
  uint64_t capacity = 64ull << 20;
  uint64_t max_handle = 0;
  uint64_t small_size = 0;
};

inline vpmm_pool* make_host_pool(const HostPoolSpec& s) {
  vpmm_config c;
  vpmm_config_init(&c);
  c.backend = VPMM_BACKEND_HOST;
  c.page_size = s.page;
  c.va_size = s.va_pages * s.page;
  c.initial_pages = s.initial_pages;
  c.host_capacity = s.capacity;
  c.max_handle_size = s.max_handle;
  c.small_size = s.small_size;
  vpmm_pool* p = nullptr;
  if (vpmm_pool_create(&c, &p) != VPMM_OK) return nullptr;
  return p;
}

inline std::vector<vpmm_region> regions(vpmm_pool* p) {
  size_t n = 0;
  vpmm_pool_dump(p, nullptr, 0, &n);
  std::vector<vpmm_region> r(n);
  vpmm_pool_dump(p, r.data(), r.size(), &n);
  r.resize(n);
  return r;
}

// "[4][*6][1][11][*233]": sizes in pages; live plain, free '-', hole '*',
// zombie '~', small 's'; chunks separated by " | ".
inline std::string layout(vpmm_pool* p) {
  vpmm_stats st;
  st.struct_size = sizeof st;
  vpmm_pool_stats(p, &st);
  std::string out;
  uint32_t chunk = 0;
  for (const vpmm_region& r : regions(p)) {
    if (r.chunk != chunk) {
      out += " | ";
      chunk = r.chunk;
    }
    const char* mark = r.kind == VPMM_REGION_LIVE ? "" : r.kind == VPMM_REGION_FREE ? "-"
                     : r.kind == VPMM_REGION_HOLE ? "*" : r.kind == VPMM_REGION_ZOMBIE ? "~"
                     : r.kind == VPMM_REGION_PAUSED ? "p" : "s";
    out += "[" + std::string(mark) + std::to_string(r.size / st.page_size) + "]";
  }
  return out;
}

inline vpmm_stats stats(vpmm_pool* p) {
  vpmm_stats st;
  std::memset(&st, 0, sizeof st);
  st.struct_size = sizeof st;
  vpmm_pool_stats(p, &st);
  return st;
}

inline uint64_t chunk_offset(vpmm_pool* p, void* ptr) {
  for (const vpmm_region& r : regions(p))
    if (r.va == reinterpret_cast<uint64_t>(ptr)) return r.chunk_offset;
  return UINT64_MAX;
}

// Deterministic pattern keyed by a seed: a moved page shows the wrong bytes.
inline void fill(void* p, uint64_t n, uint64_t seed) {
  auto* b = static_cast<uint64_t*>(p);
  for (uint64_t i = 0; i < n / 8; ++i) b[i] = seed * 0x9E3779B97F4A7C15ull ^ i;
}
inline bool verify(const void* p, uint64_t n, uint64_t seed) {
  auto* b = static_cast<const uint64_t*>(p);
  for (uint64_t i = 0; i < n / 8; ++i)
    if (b[i] != (seed * 0x9E3779B97F4A7C15ull ^ i)) return false;
  return true;
}

}  // namespace vt
