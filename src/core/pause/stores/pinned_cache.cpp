// PinnedCache (see pinned_cache.hpp). Pure C++: pinned and pageable memory both
// come from the backend, which makes the system and driver calls.
#include "core/pause/stores/pinned_cache.hpp"

#include <cstdio>
#include <iterator>

#include "common/status.hpp"

namespace vpmm {

PinnedCache::~PinnedCache() {
  for (auto& kv : free_) unpin(kv.second, kv.first);
  for (auto& kv : pageable_bufs_) host_.host_free_pageable(kv.first, kv.second);
}

// Unpinning is retried once: a buffer given up on here would leak.
void PinnedCache::unpin(void* p, uint64_t size) {
  if (backend_.host_free_pinned(p, size) != VPMM_OK) backend_.host_free_pinned(p, size);
  pinned_ -= size;
}

bool PinnedCache::unpin_cached_until(uint64_t room) {
  // Largest first: fewest unpin calls.
  while (pinned_limit_ != 0 && pinned_ + room > pinned_limit_ && !free_.empty()) {
    auto it = std::prev(free_.end());
    cached_ -= it->first;
    unpin(it->second, it->first);
    free_.erase(it);
  }
  return pinned_limit_ == 0 || pinned_ + room <= pinned_limit_;
}

vpmm_status PinnedCache::get(uint64_t size, void** out, uint64_t* got, bool from_cache) {
  const uint32_t caps = backend_.capabilities();
  // Checked here, before the pause changes anything: a backup the backend
  // cannot copy into must fail the pause whole, not halfway.
  if (!(caps & kCapDeviceCopy))
    return fail(VPMM_ERR_UNSUPPORTED,
                "backup of %llu bytes: the %s backend cannot copy device memory to the host "
                "(pause without a backup instead)",
                static_cast<unsigned long long>(size), backend_.name());
  // Without pinned memory every backup is pageable: slower copies, same bytes.
  if (!(caps & kCapPinnedHost)) {
    vpmm_status st = get_pageable(size, out);
    if (st == VPMM_OK) *got = size;
    return st;
  }
  if (from_cache && take_cached(size, out, got)) return VPMM_OK;
  if (unpin_cached_until(size)) {
    vpmm_status st = backend_.host_alloc_pinned(size, out);
    if (st == VPMM_ERR_OUT_OF_MEMORY && !free_.empty()) {
      // Unpin what does not fit and try once more.
      for (auto& kv : free_) unpin(kv.second, kv.first);
      free_.clear();
      cached_ = 0;
      st = backend_.host_alloc_pinned(size, out);
    }
    if (st == VPMM_OK) {
      pinned_ += size;
      *got = size;
      return VPMM_OK;
    }
    if (st != VPMM_ERR_OUT_OF_MEMORY) return st;
  }
  vpmm_status st = get_pageable(size, out);
  if (st == VPMM_OK) *got = size;
  return st;
}

bool PinnedCache::take_cached(uint64_t size, void** out, uint64_t* got) {
  auto it = free_.lower_bound(size);
  if (it == free_.end() || it->first / 2 > size) return false;
  *out = it->second;
  *got = it->first;
  cached_ -= it->first;
  free_.erase(it);
  return true;
}

bool PinnedCache::reserve_pinned(uint64_t size) {
  if (!(backend_.capabilities() & kCapPinnedHost) || !unpin_cached_until(size)) return false;
  pinned_ += size;
  return true;
}

vpmm_status PinnedCache::get_pageable(uint64_t size, void** out) {
  void* p = nullptr;
  vpmm_status st = host_.host_alloc_pageable(size, &p);
  if (st != VPMM_OK) {
    char ctx[128];
    std::snprintf(ctx, sizeof ctx, "backup of %llu bytes in pageable memory (no pinned memory to use)",
                  static_cast<unsigned long long>(size));
    return fail_context(st, ctx);
  }
  try {
    pageable_bufs_.emplace(p, size);
  } catch (...) {
    host_.host_free_pageable(p, size);
    throw;
  }
  pageable_ += size;
  *out = p;
  return VPMM_OK;
}

void PinnedCache::put(void* p, uint64_t size, bool keep) {
  auto pg = pageable_bufs_.find(p);
  if (pg != pageable_bufs_.end()) {
    host_.host_free_pageable(p, pg->second);
    pageable_ -= pg->second;
    pageable_bufs_.erase(pg);
    return;
  }
  if (!keep || (keep_limit_ != 0 && cached_ + size > keep_limit_)) {
    unpin(p, size);
    return;
  }
  free_.emplace(size, p);
  cached_ += size;
}

}  // namespace vpmm
