// ViewTable: the views and the index from a handle to the views that map it.
#include "core/alloc/views.hpp"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <string>

namespace vpmm {

std::pair<uint64_t, View*> ViewTable::containing(uint64_t va) {
  auto it = views_.upper_bound(va);
  if (it == views_.begin()) return {0, nullptr};
  --it;
  if (va >= it->first + it->second.size) return {0, nullptr};
  return {it->first, &it->second};
}

View& ViewTable::add(uint64_t va, View v) {
  index(va, v.slots, true);
  reserved_ += v.size;
  return views_.emplace(va, std::move(v)).first->second;
}

void ViewTable::erase(uint64_t va) {
  auto it = views_.find(va);
  index(va, it->second.slots, false);
  reserved_ -= it->second.size;
  views_.erase(it);
}

void ViewTable::set_slots(uint64_t va, std::vector<ViewSlot> slots) {
  View& v = views_.find(va)->second;
  index(va, v.slots, false);
  v.slots = std::move(slots);
  index(va, v.slots, true);
}

void ViewTable::index(uint64_t va, const std::vector<ViewSlot>& slots, bool add) {
  for (const ViewSlot& s : slots) {
    if (!s.handle) continue;
    if (add) {
      holders_[s.handle].push_back(va);
      continue;
    }
    auto it = holders_.find(s.handle);
    if (it == holders_.end()) continue;
    auto& vs = it->second;
    auto pos = std::find(vs.begin(), vs.end(), va);
    if (pos != vs.end()) vs.erase(pos);
    if (vs.empty()) holders_.erase(it);
  }
}

std::string ViewTable::check() const {
  char buf[160];
  size_t entries = 0;
  uint64_t reserved = 0;
  for (const auto& kv : views_) {
    reserved += kv.second.size;
    uint64_t tiled = 0;
    for (const ViewSlot& s : kv.second.slots) {
      tiled += s.size;
      if (!s.handle) continue;
      ++entries;
      const auto* h = holders(s.handle);
      if (!h || std::count(h->begin(), h->end(), kv.first) == 0) {
        std::snprintf(buf, sizeof buf, "view 0x%" PRIx64 ": handle %" PRIu64 " missing from the holder index",
                      kv.first, s.handle);
        return buf;
      }
    }
    if (tiled != kv.second.size) {
      std::snprintf(buf, sizeof buf, "view 0x%" PRIx64 ": slots tile %" PRIu64 " of its %" PRIu64 " bytes",
                    kv.first, tiled, kv.second.size);
      return buf;
    }
  }
  size_t indexed = 0;
  for (const auto& kv : holders_) indexed += kv.second.size();
  if (indexed != entries) {
    std::snprintf(buf, sizeof buf, "holder index has %zu entries, the views %zu slots", indexed, entries);
    return buf;
  }
  if (reserved != reserved_) return "view VA total does not match the views";
  return "";
}

}  // namespace vpmm
