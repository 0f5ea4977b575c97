// PinnedCache (see backup.hpp).
#include "core/backup.hpp"

namespace vpmm {

namespace {
// Unpinning is retried once: a buffer given up on here would leak.
void unpin(Backend& b, void* p, uint64_t size) {
  if (b.host_free_pinned(p, size) != VPMM_OK) b.host_free_pinned(p, size);
}
}  // namespace

PinnedCache::~PinnedCache() {
  for (auto& kv : free_) unpin(backend_, kv.second, kv.first);
}

vpmm_status PinnedCache::get(uint64_t size, void** out, uint64_t* got) {
  auto it = free_.lower_bound(size);
  if (it != free_.end() && it->first / 2 <= size) {
    *out = it->second;
    *got = it->first;
    cached_ -= it->first;
    free_.erase(it);
    return VPMM_OK;
  }
  vpmm_status st = backend_.host_alloc_pinned(size, out);
  if (st == VPMM_ERR_OUT_OF_MEMORY && !free_.empty()) {
    // Unpin what does not fit and try once more.
    for (auto& kv : free_) unpin(backend_, kv.second, kv.first);
    free_.clear();
    cached_ = 0;
    st = backend_.host_alloc_pinned(size, out);
  }
  if (st == VPMM_OK) *got = size;
  return st;
}

void PinnedCache::put(void* p, uint64_t size) {
  if (limit_ != 0 && cached_ + size > limit_) {
    unpin(backend_, p, size);
    return;
  }
  free_.emplace(size, p);
  cached_ += size;
}

}  // namespace vpmm
