// Host "kernels" for the tests of stream order on the host backend: work a
// held host stream keeps queued, as a GPU that is behind keeps a kernel.
// Stamp writes one byte over a block (a late write the next owner must not
// see); Fill writes vt::fill's pattern (an owner's own use of its memory).
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>

#include "check.hpp"
#include "patterns.hpp"
#include "vpmm.h"
#include "vpmm_host_streams.h"

namespace vt {

struct Stamp {
  void* block;
  uint64_t bytes;
  int byte;
  std::atomic<int> ran{0};
};
inline void stamp(void* user) {
  auto* k = static_cast<Stamp*>(user);
  std::memset(k->block, k->byte, k->bytes);
  k->ran = 1;
}

struct Fill {
  void* block;
  uint64_t bytes;
  uint64_t seed;
};
inline void fill_on_stream(void* user) {
  auto* f = static_cast<Fill*>(user);
  vt::fill(f->block, f->bytes, f->seed);
}

// A stream's own work runs now unless it waits for a held stream: then a
// synchronize says WRONG_STATE instead of blocking. Either way, no race
// decides the test.
inline void run_unless_waiting(vpmm_stream s) {
  const vpmm_status st = vpmm_host_stream_synchronize(s);
  CHECK(st == VPMM_OK || st == VPMM_ERR_WRONG_STATE);
}

}  // namespace vt
