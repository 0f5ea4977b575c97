// PinnedCache: page-locked host buffers for pause backups, pinned once and
// reused across pause/resume cycles. Pinning is the expensive part (seconds
// for tens of GiB on the H100, see notes/h100-measurements.md) while copies
// into pinned memory run at copy-engine speed, so buffers outlive the pause
// that needed them; after a resume the cache keeps at most `limit` bytes
// (0 = everything) and gives the rest back.
#pragma once

#include <cstdint>
#include <map>

#include "backend/backend.hpp"

namespace vpmm {

class PinnedCache {
 public:
  PinnedCache(Backend& b, uint64_t limit) : backend_(b), limit_(limit) {}
  ~PinnedCache();
  PinnedCache(const PinnedCache&) = delete;
  PinnedCache& operator=(const PinnedCache&) = delete;

  // A buffer of at least `size` bytes: the smallest cached one no larger
  // than 2x size, else a newly pinned one. *got receives its real size.
  vpmm_status get(uint64_t size, void** out, uint64_t* got);
  // Returns a buffer; kept while the cache is under its limit.
  void put(void* p, uint64_t size);
  uint64_t cached_bytes() const { return cached_; }

 private:
  Backend& backend_;
  uint64_t limit_;
  uint64_t cached_ = 0;
  std::multimap<uint64_t, void*> free_;
};

}  // namespace vpmm
