// ViewGate: whether the pool's large requests behave like a loop's, where
// views pay, or like churn, where they do not.
//
// A view is the memory of a loop's peak moment: the same large request comes
// back at the same point of every step and finds its view's pages where it
// left them (docs/handles.md, "Placement that learns the loop"). Under churn
// (large requests of sizes that never repeat, one every few dozen mallocs)
// views never settle: they keep the free memory where it lies, so the next
// large request misses Phase 1 again and refills a view, where Phase 2 would
// have assembled a span that the following requests fit. Measured on the
// host backend: bench/host_hot_path.c's churn (256 B-128 MiB) ran 4x slower
// with views than without, remapping 4x the bytes.
//
// The signal is the rate of view-sized requests that no free region fits
// although the pool holds enough free memory (misses of fragmentation, not
// of growth: a loop's warm-up grows). On every shipped and held-out training
// snapshot it stays below 1 in 420 page-level mallocs (averaged over 4096);
// under the churns above it is 1 in 22-26. Views are used while the last
// complete window of kWindow page-level mallocs and the current one each
// have at most kWindow / kMissRatio such misses.
//
// Pure data, no backend; the ViewAllocator (view_alloc.hpp) owns it, notes
// every page-level malloc of live memory and asks open() before a view.
#pragma once

#include <cstdint>

namespace vpmm {

class ViewGate {
 public:
  static constexpr uint32_t kWindow = 4096;
  static constexpr uint32_t kMissRatio = 128;

  // One page-level malloc of live memory; `miss`: it was view-sized, no free
  // region fitted it, and the pool's free bytes would have held it.
  void note(bool miss) {
    misses_ += miss ? 1u : 0u;
    if (++mallocs_ < kWindow) return;
    last_ = misses_;
    misses_ = 0;
    mallocs_ = 0;
  }
  bool open() const { return last_ <= kWindow / kMissRatio && misses_ <= kWindow / kMissRatio; }

 private:
  uint32_t mallocs_ = 0, misses_ = 0, last_ = 0;
};

}  // namespace vpmm
