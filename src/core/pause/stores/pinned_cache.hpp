// PinnedCache: host memory for pause backups.
//
// Pinned first: copies into page-locked memory run at copy-engine speed,
// and pinning is the expensive part (measured on an H100: 4 GiB took 3.9 s to
// pin, so seconds for tens of GiB), so pinned buffers outlive the pause that
// needed them and are reused; after a resume the cache keeps at most
// `keep_limit` bytes (0 = everything) and unpins the rest.
//
// Bounded: with `pinned_limit` (0 = none) the pinned bytes held, cached and
// in use together, never exceed it. A backup that would pass the limit, or
// whose pinning fails for want of memory, gets ordinary pageable memory
// instead: slower copies (the driver stages them), same bytes. So a cap on
// pinned memory never makes a pause fail or lose data. A backend without
// pinned memory (no kCapPinnedHost) gets pageable buffers only, and one that
// cannot copy (no kCapDeviceCopy) makes get() fail with UNSUPPORTED.
//
// Pinned memory comes from the backend (host_alloc_pinned), pageable memory
// from the host services (host_alloc_pageable): this file makes no system call.
#pragma once

#include <cstdint>
#include <map>
#include <unordered_map>

#include "backend/backend.hpp"
#include "backend/host_services/host_services.hpp"

namespace vpmm {

class PinnedCache {
 public:
  PinnedCache(Backend& b, HostServices& host, uint64_t keep_limit, uint64_t pinned_limit)
      : backend_(b), host_(host), keep_limit_(keep_limit), pinned_limit_(pinned_limit) {}
  ~PinnedCache();
  PinnedCache(const PinnedCache&) = delete;
  PinnedCache& operator=(const PinnedCache&) = delete;

  // A buffer of at least `size` bytes: the smallest cached pinned one no
  // larger than 2x size, else a newly pinned one, else (over the pinned
  // limit, or pinning ran out of memory) a pageable one. *got receives its
  // real size. OUT_OF_MEMORY only when no host memory at all is left;
  // UNSUPPORTED when the backend cannot copy device memory to the host.
  vpmm_status get(uint64_t size, void** out, uint64_t* got) { return get(size, out, got, true); }
  // Returns a buffer from get(): pinned ones are cached while under the keep
  // limit, pageable ones are freed.
  void put(void* p, uint64_t size) { put(p, size, true); }
  // For the staging slots of the mmap and disk stores, which must leave no
  // memory resident behind them: a buffer pinned for the call (never one of
  // the cache's, so no cached backup buffer is lost to it), within the
  // pinned limit like any other, and unpinned when given back.
  vpmm_status get_transient(uint64_t size, void** out, uint64_t* got) { return get(size, out, got, false); }
  void put_transient(void* p, uint64_t size) { put(p, size, false); }
  // For pinning ahead without the pool lock (Pauser::prepare_backups), in
  // three steps: take_cached() a cached buffer that get() would give for
  // `size` (false: none fits; nothing is pinned); reserve_pinned() counts
  // `size` pinned bytes as in use before they exist, so the pinned limit
  // holds while the caller pins unlocked (false: over the limit, after
  // unpinning cached buffers that do not fit); the caller then pins with the
  // backend and hands the buffer to put(), or gives up the reservation with
  // unreserve_pinned(). All three need the caller's lock, as get() does.
  bool take_cached(uint64_t size, void** out, uint64_t* got);
  bool reserve_pinned(uint64_t size);
  void unreserve_pinned(uint64_t size) { pinned_ -= size; }
  uint64_t cached_bytes() const { return cached_; }
  uint64_t pinned_bytes() const { return pinned_; }      // held: cached + in use
  uint64_t pageable_bytes() const { return pageable_; }  // in use

 private:
  vpmm_status get(uint64_t size, void** out, uint64_t* got, bool from_cache);
  void put(void* p, uint64_t size, bool keep);
  void unpin(void* p, uint64_t size);
  bool unpin_cached_until(uint64_t room);  // true when `room` more pinned bytes fit the limit
  vpmm_status get_pageable(uint64_t size, void** out);

  Backend& backend_;
  HostServices& host_;  // the pageable fallback
  uint64_t keep_limit_;
  uint64_t pinned_limit_;
  uint64_t cached_ = 0, pinned_ = 0, pageable_ = 0;
  std::multimap<uint64_t, void*> free_;                 // cached pinned buffers by size
  std::unordered_map<void*, uint64_t> pageable_bufs_;  // in use, pageable: mapped bytes
};

}  // namespace vpmm
