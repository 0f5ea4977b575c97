// FirstFit: the first unused entry of a list whose size is at most a want,
// in O(log n) a query and an update (a segment tree of the smallest unused
// size over ranges of the list). ViewAllocator's plan takes replacement
// handles from its inventory this way: scanning the inventory from its
// start for every slot of a view cost O(slots x inventory), 0.32 s for a
// view of 32,768 page slots, and a 512 GiB request replayed for 24 s.
// Owns: the tree. Counts its node visits (probes()) so a test can bound
// the work by counting, not by timing.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace vpmm {

class FirstFit {
 public:
  static constexpr size_t npos = SIZE_MAX;

  explicit FirstFit(const std::vector<uint64_t>& sizes) : n_(sizes.size()) {
    while (leaves_ < n_) leaves_ <<= 1;
    tree_.assign(2 * leaves_, UINT64_MAX);
    for (size_t i = 0; i < n_; ++i) tree_[leaves_ + i] = sizes[i];
    for (size_t i = leaves_ - 1; i > 0; --i) tree_[i] = std::min(tree_[2 * i], tree_[2 * i + 1]);
  }

  // The lowest index of an unused entry of size <= want; npos when none.
  size_t find(uint64_t want) const {
    if (n_ == 0 || tree_[1] > want) return npos;
    size_t i = 1;
    while (i < leaves_) {
      ++probes_;
      i = tree_[2 * i] <= want ? 2 * i : 2 * i + 1;
    }
    return i - leaves_;
  }
  // Entry k is used from now on.
  void take(size_t k) {
    size_t i = leaves_ + k;
    tree_[i] = UINT64_MAX;
    for (i >>= 1; i > 0; i >>= 1) {
      ++probes_;
      tree_[i] = std::min(tree_[2 * i], tree_[2 * i + 1]);
    }
  }
  uint64_t probes() const { return probes_; }

 private:
  size_t n_;
  size_t leaves_ = 1;
  std::vector<uint64_t> tree_;
  mutable uint64_t probes_ = 0;
};

}  // namespace vpmm
