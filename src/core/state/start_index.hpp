// StartIndex: the region map's regions by their start VA, in an
// open-addressed hash table of VA -> map iterator. RegionMap adds an entry
// where it creates a node and removes it where it destroys one (its insert,
// erase and clear are the only three places), so an entry never outlives its
// node and RegionMap::find is one probe.
//
// Why: find walked the map, a red-black tree of every region (thousands on a
// fragmented loop), one node a level, and a free, a best fit and a slab's
// return each ask it. Inside a training step the pool's data is out of the
// caches between calls, so each level costs a miss: libvpmm's hooks took
// 5.6-9.6 ms of a ~180 ms step of the hard client on the H200
// (docs/handles.md, "Where the hard loop's host time goes"), and
// `vpmm replay --cold` reproduces it on the host.
#pragma once
#include <cstdint>
#include <vector>

namespace vpmm {

template <class It>
class StartIndex {
 public:
  StartIndex() : slots_(kMinSlots) {}

  // Adds va (not present, not 0: no pool VA is 0).
  void insert(uint64_t va, It it) {
    if (2 * (count_ + 1) > slots_.size()) grow();
    place(va, it);
    ++count_;
  }
  // Removes va; nothing when absent.
  void erase(uint64_t va) {
    size_t i = home(va);
    while (slots_[i].va != va) {
      if (slots_[i].va == 0) return;
      i = (i + 1) & mask();
    }
    // Backward-shift deletion keeps every probe run unbroken: no tombstones.
    for (size_t j = (i + 1) & mask(); slots_[j].va != 0; j = (j + 1) & mask()) {
      const size_t h = home(slots_[j].va);
      // j's entry may move into the hole at i unless its home lies in (i, j].
      if (((j - h) & mask()) >= ((j - i) & mask())) {
        slots_[i] = slots_[j];
        i = j;
      }
    }
    slots_[i].va = 0;
    --count_;
  }
  // The iterator stored for va, or `none` when absent.
  It find(uint64_t va, It none) const {
    for (size_t i = home(va);; i = (i + 1) & mask()) {
      if (slots_[i].va == va) return slots_[i].it;
      if (slots_[i].va == 0) return none;
    }
  }
  size_t size() const { return count_; }
  void clear() {
    slots_.assign(kMinSlots, Slot{});
    count_ = 0;
  }
  // Every entry, for RegionMap::check.
  template <class F>
  void for_each(F&& f) const {
    for (const Slot& s : slots_)
      if (s.va != 0) f(s.va, s.it);
  }

 private:
  struct Slot {
    uint64_t va = 0;
    It it{};
  };
  static constexpr size_t kMinSlots = 256;
  size_t mask() const { return slots_.size() - 1; }
  // Fibonacci hashing of the VA above its 512-byte quantum.
  size_t home(uint64_t va) const { return static_cast<size_t>(((va >> 9) * 0x9E3779B97F4A7C15ull) >> 20) & mask(); }
  void place(uint64_t va, It it) {
    size_t i = home(va);
    while (slots_[i].va != 0) i = (i + 1) & mask();
    slots_[i] = Slot{va, it};
  }
  void grow() {
    std::vector<Slot> old(2 * slots_.size());
    old.swap(slots_);
    for (const Slot& s : old)
      if (s.va != 0) place(s.va, s.it);
  }

  std::vector<Slot> slots_;
  size_t count_ = 0;
};

}  // namespace vpmm
