// Reading a pool through the public API only, shared by the host-backend
// unit tests (pool_util.hpp), the sharing tests (ipc_harness.hpp) and the
// GPU tests (tests/gpu/gpu_util.cuh): statistics (the pool's and its
// sharing's), the region dump and the layout in the seed's notation.
#pragma once

#include <cstring>
#include <string>
#include <vector>

#include "vpmm.h"

namespace vt {

// A growable public struct zeroed, with its struct_size set: what every
// call that reads or fills one expects of its caller.
template <class T>
T sized() {
  T s;
  std::memset(&s, 0, sizeof s);
  s.struct_size = sizeof s;
  return s;
}

inline vpmm_stats stats(vpmm_pool* p) {
  vpmm_stats st = sized<vpmm_stats>();
  vpmm_pool_stats(p, &st);
  return st;
}

inline vpmm_ipc_stats ipc_stats(vpmm_pool* p) {
  vpmm_ipc_stats s = sized<vpmm_ipc_stats>();
  vpmm_pool_ipc_stats(p, &s);
  return s;
}

// A vpmm_pool_dump buffer of n records, each with its struct_size set (the
// library reads buf[0]'s as the stride).
inline std::vector<vpmm_region_info> region_buffer(size_t n) {
  return std::vector<vpmm_region_info>(n, sized<vpmm_region_info>());
}

inline std::vector<vpmm_region_info> regions(vpmm_pool* p) {
  size_t n = 0;
  vpmm_pool_dump(p, nullptr, 0, &n);
  std::vector<vpmm_region_info> r = region_buffer(n);
  vpmm_pool_dump(p, r.data(), r.size(), &n);
  r.resize(n);
  return r;
}

// "[4][*6][1][11][*233]": the layout in the seed notation, as the library
// writes it (vpmm_pool_layout; see include/vpmm.h).
inline std::string layout(vpmm_pool* p) {
  size_t need = 0;
  if (vpmm_pool_layout(p, nullptr, 0, &need) != VPMM_OK) return "?";
  std::string s;
  do {  // the pool may change between the two calls: retry until it fits
    s.assign(need + 64, '\0');
    if (vpmm_pool_layout(p, &s[0], s.size(), &need) != VPMM_OK) return "?";
  } while (need > s.size());
  s.resize(need - 1);
  return s;
}

}  // namespace vt
