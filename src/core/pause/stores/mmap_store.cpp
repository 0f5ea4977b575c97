// The mmap store: a backup is anonymous pageable memory (huge-page advised
// by the backend), mapped at the pause and unmapped at the resume, so host
// RSS returns to where it was: for hosts whose memory must come back between
// pauses. The driver copies pageable memory through its own staging at
// 1.6-4 GB/s D2H (H200), so where the backend has pinned memory the bytes
// move through the pinned staging slots instead, the CPU half a parallel
// host copy (17 GB/s staged); without pinned memory the copy engine copies
// the pageable memory directly.
#include <cinttypes>
#include <cstdio>
#include <memory>

#include "common/status.hpp"
#include "core/pause/stores/store.hpp"

namespace vpmm {

namespace {

class MmapStore final : public BackupStore {
 public:
  MmapStore(const StoreContext& ctx) : backend_(ctx.backend), host_(ctx.host) {}
  const char* name() const override { return "mmap"; }
  vpmm_status acquire(const BackupDir&, uint64_t bytes, Backup* b) override {
    vpmm_status st = host_.host_alloc_pageable(bytes, &b->host);
    if (st != VPMM_OK) {
      char ctx[96];
      std::snprintf(ctx, sizeof ctx, "mmap backup of %" PRIu64 " bytes", bytes);
      return fail_context(st, ctx);
    }
    b->capacity = bytes;
    bytes_ += bytes;
    return VPMM_OK;
  }
  void release(Backup* b) override {
    // Retried once: memory given up on here would stay mapped.
    if (host_.host_free_pageable(b->host, b->capacity) != VPMM_OK)
      host_.host_free_pageable(b->host, b->capacity);
    bytes_ -= b->capacity;
  }
  bool staged() const override { return (backend_.capabilities() & kCapPinnedHost) != 0; }
  vpmm_status write(Backup& b, const void* src, uint64_t offset, uint64_t len) override {
    return host_.host_copy(static_cast<char*>(b.host) + offset, src, len);
  }
  vpmm_status read(Backup& b, void* dst, uint64_t offset, uint64_t len) override {
    return host_.host_copy(dst, static_cast<const char*>(b.host) + offset, len);
  }
  void add_stats(vpmm_stats* s) const override { s->backup_mmap_bytes = bytes_; }

 private:
  Backend& backend_;  // whether it has pinned memory to stage through
  HostServices& host_;
  uint64_t bytes_ = 0;  // mapped for backups
};

}  // namespace

std::unique_ptr<BackupStore> make_mmap_store(const StoreContext& ctx) {
  return std::unique_ptr<BackupStore>(new MmapStore(ctx));
}

}  // namespace vpmm
