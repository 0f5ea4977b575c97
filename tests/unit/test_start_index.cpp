// StartIndex (src/core/state/start_index.hpp), the region map's find: the
// same answers as a std::map under random inserts and erases, through its
// growth, and with keys that collide in the table so that erase's backward
// shift runs over wrapped probe runs.
#include <cstdint>
#include <map>
#include <random>

#include "check.hpp"
#include "core/state/start_index.hpp"

namespace {

// Checks every key of `ref` and `probes` absent keys against `idx`.
void agree(const vpmm::StartIndex<int>& idx, const std::map<uint64_t, int>& ref, std::mt19937_64& rng,
           uint64_t key_space) {
  CHECK_EQ(idx.size(), ref.size());
  for (const auto& kv : ref) CHECK_EQ(idx.find(kv.first, -1), kv.second);
  for (int i = 0; i < 64; ++i) {
    const uint64_t k = 512 * (1 + rng() % key_space);
    auto it = ref.find(k);
    CHECK_EQ(idx.find(k, -1), it == ref.end() ? -1 : it->second);
  }
  size_t seen = 0;
  idx.for_each([&](uint64_t va, int v) {
    ++seen;
    auto it = ref.find(va);
    CHECK(it != ref.end());
    if (it != ref.end()) CHECK_EQ(v, it->second);
  });
  CHECK_EQ(seen, ref.size());
}

void churn(uint64_t key_space, int ops, unsigned seed) {
  std::mt19937_64 rng(seed);
  vpmm::StartIndex<int> idx;
  std::map<uint64_t, int> ref;
  for (int i = 0; i < ops; ++i) {
    const uint64_t k = 512 * (1 + rng() % key_space);  // VAs on the 512-byte quantum, never 0
    if (ref.count(k)) {
      idx.erase(k);
      ref.erase(k);
    } else {
      idx.insert(k, i);
      ref[k] = i;
    }
    if (i % 997 == 0) agree(idx, ref, rng, key_space);
  }
  agree(idx, ref, rng, key_space);
  for (auto it = ref.begin(); it != ref.end();) {  // empties it whole
    idx.erase(it->first);
    it = ref.erase(it);
  }
  agree(idx, ref, rng, key_space);
}

}  // namespace

TEST("the start index answers as a map does, through growth and random erases") {
  churn(50000, 200000, 1);   // grows to thousands of entries
  churn(300, 100000, 2);     // a dense, full-ish table of few keys
}

TEST("erasing an absent key changes nothing") {
  vpmm::StartIndex<int> idx;
  idx.insert(4096, 1);
  idx.erase(8192);
  CHECK_EQ(idx.size(), size_t(1));
  CHECK_EQ(idx.find(4096, -1), 1);
}

TEST("keys stay found after erases in the middle of probe runs") {
  // 126 keys in the first table (256 slots, which grows past 127): at
  // almost half full, runs of several slots form, some wrapping past the
  // table's end; erasing in random order, one at a time, leaves the rest found.
  for (unsigned seed = 0; seed < 40; ++seed) {
    std::mt19937_64 rng(seed);
    vpmm::StartIndex<int> idx;
    std::map<uint64_t, int> ref;
    for (int i = 0; ref.size() < 126; ++i) {
      const uint64_t k = 512 * (1 + rng() % 100000);
      if (ref.count(k)) continue;
      idx.insert(k, i);
      ref[k] = i;
    }
    while (!ref.empty()) {
      auto it = ref.begin();
      std::advance(it, rng() % ref.size());
      idx.erase(it->first);
      ref.erase(it);
      for (const auto& kv : ref) CHECK_EQ(idx.find(kv.first, -1), kv.second);
    }
    CHECK_EQ(idx.size(), size_t(0));
  }
}

TEST_MAIN()
