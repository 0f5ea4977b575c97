// RecordedStreams: the streams besides its own that a PyTorch allocation was
// used on (Tensor.record_stream). PyTorch's CUDAPluggableAllocator frees an
// allocation on the stream it was allocated on and, unless the allocator
// gave it a record_stream function, drops record_stream on the floor: the
// pool would hand the memory out again on that stream while kernels queued
// on the other streams still read it. vpmm.torch gives PyTorch
// vpmm_torch_record_stream, which lands here, and vpmm_torch_free asks
// free_stream() which stream to free on.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "vpmm.h"

namespace vpmm {

class RecordedStreams {
 public:
  // `stream` uses the allocation at `ptr` (its base, as PyTorch passes it).
  void record(void* ptr, void* stream);

  // The stream to free `ptr` on, its recorded streams forgotten. Without a
  // recorded stream other than `own` (the allocating stream PyTorch frees
  // on), `own`. Otherwise the last recorded one, t: the pool reuses the
  // memory on t in t's order (after the work that used it) and on any other
  // stream only after t's work completes, so t first waits on the GPU for
  // the work queued so far on `own` (the tensor's own kernels) and on every
  // other recorded stream. A recorded stream the backend no longer knows
  // (destroyed) is skipped; one whose wait fails is synchronized on the CPU,
  // reported on stderr if that fails too. If t is destroyed, the free stays
  // on `own`, after the others.
  void* free_stream(vpmm_pool* pool, void* ptr, void* own);

  // A new allocation at `ptr`: entries an earlier one left there (recorded,
  // then freed other than through vpmm_torch_free) must not apply to it.
  void forget(void* ptr);

 private:
  // Entries held, by bucket of their pointer: a malloc or a free of a
  // pointer whose bucket holds none (nearly every call, also while a few
  // tensors are recorded, as on a loop with side-stream gathers) skips the
  // mutex and the map, and reads one cache line of this. An entry is
  // counted before record() returns, and PyTorch records a tensor's stream
  // before the tensor's last reference goes, which orders the count before
  // the free that must see it.
  static constexpr size_t kBuckets = 512;
  static size_t bucket(const void* ptr) {
    return static_cast<size_t>((reinterpret_cast<uintptr_t>(ptr) >> 9) * 0x9E3779B97F4A7C15ull >> 55);
  }
  bool may_hold(const void* ptr) const { return held_[bucket(ptr)].load(std::memory_order_acquire) != 0; }
  std::atomic<uint32_t> held_[kBuckets] = {};
  std::mutex mu_;
  std::unordered_map<void*, std::vector<void*>> by_ptr_;
};

}  // namespace vpmm
