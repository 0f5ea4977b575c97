// Free-range allocator for byte offsets inside the host backend's memfd.
// Concern: hand out [offset, offset+size) ranges of a file whose length may
// grow, best fit, and take them back with coalescing. It knows nothing about
// memory, capacity or locking (the backend holds its own mutex around every
// call). Invariants: free ranges never overlap, never touch (adjacent ranges
// are always merged), and `by_offset_` and `by_size_` describe the same set.
// Best fit keeps large contiguous ranges intact for large handles; and since
// the backend accounts bytes against its capacity separately and may grow the
// file (a sparse memfd costs nothing until written), fragmentation here never
// turns into a false out-of-memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <utility>

namespace vpmm {
namespace host {

class OffsetAllocator {
 public:
  // Best-fit range of exactly `size` bytes. Returns false when no free range
  // is large enough (the caller then grows the file with add()). May throw
  // std::bad_alloc; the allocator is unchanged when it does.
  bool allocate(uint64_t size, uint64_t* offset);

  // Give [offset, offset+size) back (or add fresh file space), merging with
  // neighbours. The range must not overlap a free range. Never throws: if a
  // node cannot be allocated the range is dropped (file space leaks, memory
  // does not, because the backend punched the range before returning it).
  void release(uint64_t offset, uint64_t size) noexcept;

  uint64_t free_bytes() const { return free_bytes_; }
  size_t ranges() const { return by_offset_.size(); }

 private:
  void erase(std::map<uint64_t, uint64_t>::iterator it);

  std::map<uint64_t, uint64_t> by_offset_;           // offset -> size
  std::set<std::pair<uint64_t, uint64_t>> by_size_;  // (size, offset), for best fit
  uint64_t free_bytes_ = 0;
};

}  // namespace host
}  // namespace vpmm
