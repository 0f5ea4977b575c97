// The placement registry (see placement.hpp): the built-in policies, then
// those registered at run time.
#include "core/alloc/placement.hpp"

#include <cstring>
#include <mutex>
#include <deque>

namespace vpmm {

namespace {

// One line per built-in policy. "default" is the allocator's own path.
const PlacementEntry kBuiltIn[] = {
    {"default", nullptr, "phases 0-2: best fit, then views for large requests (view_min_size), then remapping within the remap slack"},
};

std::mutex& registry_mu() {
  static std::mutex mu;
  return mu;
}
std::deque<PlacementEntry>& registered() {  // a deque: entries found stay put
  static std::deque<PlacementEntry> v;
  return v;
}

}  // namespace

const PlacementEntry* find_placement(const char* name) {
  if (name == nullptr || *name == '\0') name = "default";
  for (const PlacementEntry& e : kBuiltIn)
    if (std::strcmp(e.name, name) == 0) return &e;
  std::lock_guard<std::mutex> lock(registry_mu());
  for (const PlacementEntry& e : registered())
    if (std::strcmp(e.name, name) == 0) return &e;
  return nullptr;
}

bool register_placement(const PlacementEntry& e) {
  if (e.name == nullptr || find_placement(e.name) != nullptr) return false;
  std::lock_guard<std::mutex> lock(registry_mu());
  registered().push_back(e);
  return true;
}

}  // namespace vpmm
