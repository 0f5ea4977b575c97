// Best-fit free-range allocator over memfd offsets (see host_offsets.hpp).
// Both indexes are updated together so that a lookup in one always finds the
// range in the other; an exception between the two updates is prevented by
// doing every insertion (the only operation that allocates) before erasing.
#include "backend/host/host_offsets.hpp"

#include <iterator>

namespace vpmm {
namespace host {

void OffsetAllocator::erase(std::map<uint64_t, uint64_t>::iterator it) {
  by_size_.erase({it->second, it->first});
  free_bytes_ -= it->second;
  by_offset_.erase(it);
}

bool OffsetAllocator::allocate(uint64_t size, uint64_t* offset) {
  auto fit = by_size_.lower_bound({size, 0});
  if (fit == by_size_.end()) return false;
  const uint64_t range_size = fit->first;
  const uint64_t range_off = fit->second;
  if (range_size > size) {
    // Insert the remainder first: if that throws, nothing has changed yet.
    const uint64_t rest_off = range_off + size;
    const uint64_t rest_size = range_size - size;
    auto ins = by_size_.insert({rest_size, rest_off}).first;
    try {
      by_offset_.emplace(rest_off, rest_size);
    } catch (...) {
      by_size_.erase(ins);
      throw;
    }
    free_bytes_ += rest_size;
  }
  erase(by_offset_.find(range_off));
  *offset = range_off;
  return true;
}

void OffsetAllocator::release(uint64_t offset, uint64_t size) noexcept {
  if (size == 0) return;
  uint64_t start = offset;
  uint64_t end = offset + size;
  // Merge with the range that ends exactly at `offset` and the one that
  // starts exactly at `end`, so free ranges never touch.
  auto next = by_offset_.lower_bound(offset);
  if (next != by_offset_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == start) {
      start = prev->first;
      erase(prev);
    }
  }
  next = by_offset_.lower_bound(end);
  if (next != by_offset_.end() && next->first == end) {
    end = next->first + next->second;
    erase(next);
  }
  try {
    auto ins = by_size_.insert({end - start, start}).first;
    try {
      by_offset_.emplace(start, end - start);
    } catch (...) {
      by_size_.erase(ins);
      throw;
    }
    free_bytes_ += end - start;
  } catch (...) {
    // Out of memory for a tree node: the range is lost to reuse. Its pages
    // were already punched, so no memory leaks, only file offsets.
  }
}

}  // namespace host
}  // namespace vpmm
