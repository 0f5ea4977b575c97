// FirstFit (src/core/alloc/first_fit.hpp), the search a view's plan takes
// its replacement handles with: the same choices as a scan of the list from
// its start, and work bounded by counting (O(log n) a query and an update),
// not by timing.
#include <cstdint>
#include <random>
#include <vector>

#include "check.hpp"
#include "core/alloc/first_fit.hpp"

namespace {

// The scan the plan made before: the first unused entry no larger than want.
size_t naive(const std::vector<uint64_t>& sizes, const std::vector<bool>& used, uint64_t want) {
  for (size_t i = 0; i < sizes.size(); ++i)
    if (!used[i] && sizes[i] <= want) return i;
  return vpmm::FirstFit::npos;
}

uint64_t log2_ceil(uint64_t n) {
  uint64_t l = 0;
  while ((uint64_t(1) << l) < n) ++l;
  return l;
}

}  // namespace

TEST("first fit chooses what a scan from the start chooses, on random sizes and wants") {
  std::mt19937 rng(7);
  for (int round = 0; round < 50; ++round) {
    const size_t n = 1 + rng() % 300;
    std::vector<uint64_t> sizes(n);
    for (auto& s : sizes) s = 1 + rng() % 8;
    vpmm::FirstFit ff(sizes);
    std::vector<bool> used(n, false);
    for (int q = 0; q < 400; ++q) {
      const uint64_t want = rng() % 10;
      const size_t a = ff.find(want), b = naive(sizes, used, want);
      CHECK_EQ(a, b);
      if (a == vpmm::FirstFit::npos) continue;
      used[a] = true;
      ff.take(a);
    }
  }
}

TEST("taking every one of 32,768 page slots costs O(n log n) tree visits") {
  const size_t n = 32768;
  std::vector<uint64_t> sizes(n, 2 << 20);
  vpmm::FirstFit ff(sizes);
  size_t taken = 0;
  for (size_t i; (i = ff.find(2 << 20)) != vpmm::FirstFit::npos; ++taken) {
    CHECK_EQ(i, taken);  // in order
    ff.take(i);
  }
  CHECK_EQ(taken, n);
  // A find and a take each visit one node a level: 2 x n x log2(n) in all,
  // where the scan it replaced made n^2 / 2 = 536,870,912 comparisons.
  CHECK(ff.probes() <= 2 * n * log2_ceil(n));
  CHECK(ff.find(1) == vpmm::FirstFit::npos);
}

TEST("an empty list finds nothing") {
  vpmm::FirstFit ff(std::vector<uint64_t>{});
  CHECK(ff.find(UINT64_MAX) == vpmm::FirstFit::npos);
}

TEST_MAIN()
