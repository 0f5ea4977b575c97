// Byte patterns that prove data survived: a seed-determined word sequence,
// written and checked on the host. Shared by the pool tests (pool_util.hpp)
// and the two-process sharing tests (ipc_harness.hpp), so that bytes one
// side wrote are the bytes the other checks for.
#pragma once

#include <cstdint>

namespace vt {

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
