// Views: how a large request uses free memory that is scattered.
//
// A request of at least view_min_size that no free region fits takes free
// handles where they lie and maps them, in order, at a VA range of its own:
// a view. The handles stay mapped at their homes in the pool's chunks too,
// where the region map marks them Lent while the view is live (Kind::Lent),
// so nothing else takes them. After the free they are free memory at home
// again, and the view keeps its mappings: the next request of its size whose
// handles are all free again at home takes the view with no driver call. Only
// the handles that something else now holds (stale slots) are replaced.
//
// Why: the alternative, moving free pages into one span of the chunk, takes
// them from where the loop's smaller tensors will want them next, which then
// take the span's pages, and the loop moves the same pages every step
// (docs/handles.md, "Steady state"). A view leaves the chunk's layout alone.
//
// Pure data: the table of views and the index from a handle to the views
// that map it. ViewAllocator (view_alloc.hpp) decides and calls the driver.
#pragma once

#include <cstdint>
#include <map>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/state/regions.hpp"

namespace vpmm {

struct ViewSlot {
  PhysHandle handle = 0;  // 0: a gap, nothing mapped there
  uint64_t size = 0;
};

struct View {
  uint64_t size = 0;              // the VA reserved, tiled by the slots from the start
  std::vector<ViewSlot> slots;    // change only through ViewTable::set_slots
  bool busy = false;              // a malloc in flight owns it (driver calls without the mutex)
  bool active = false;            // an allocation lives in it
  size_t n_lent = 0;              // active: slots [0, n_lent) are its memory, Lent at home
  Region live;                    // active: the allocation (kind Live: size, requested, stream,
                                  // id, res, charge as a region of the map would carry them)
  Region last_free;               // idle: its free point (kind Free, stream, seq, event): what
                                  // must complete before one of its mappings may go
  uint64_t last_use = 0;          // the table's clock at its last malloc or free

  // Bytes of the slots the live allocation holds (0 when idle).
  uint64_t held() const {
    uint64_t n = 0;
    for (size_t k = 0; k < n_lent; ++k) n += slots[k].size;
    return n;
  }
};

class ViewTable {
 public:
  bool empty() const { return views_.empty(); }
  size_t size() const { return views_.size(); }
  std::map<uint64_t, View>& all() { return views_; }
  const std::map<uint64_t, View>& all() const { return views_; }
  View* find(uint64_t va) {
    auto it = views_.find(va);
    return it == views_.end() ? nullptr : &it->second;
  }
  // The view whose reserved VA contains va; {0, null} if none.
  std::pair<uint64_t, View*> containing(uint64_t va);
  View& add(uint64_t va, View v);
  void erase(uint64_t va);
  void set_slots(uint64_t va, std::vector<ViewSlot> slots);
  // The views that map handle h (their VAs); null if none.
  const std::vector<uint64_t>* holders(PhysHandle h) const {
    auto it = holders_.find(h);
    return it == holders_.end() ? nullptr : &it->second;
  }
  uint64_t reserved() const { return reserved_; }
  uint64_t tick() { return ++clock_; }
  // "" when the handle index matches the slots, else the first violation.
  std::string check() const;

 private:
  void index(uint64_t va, const std::vector<ViewSlot>& slots, bool add);
  std::map<uint64_t, View> views_;
  std::unordered_map<PhysHandle, std::vector<uint64_t>> holders_;
  uint64_t reserved_ = 0, clock_ = 0;
};

}  // namespace vpmm
