// The pinned store, the default: a backup is a buffer of page-locked host
// memory from the PinnedCache, which the copy engine reads and writes
// directly at link speed; at resume the buffer goes back to the cache, so a
// later pause skips the pinning (seconds for tens of GiB). Past the pinned
// limit, or where pinning fails or the backend has none, the cache hands out
// pageable memory instead: slower copies, same bytes.
#include <memory>

#include "core/pause/stores/pinned_cache.hpp"
#include "core/pause/stores/store.hpp"

namespace vpmm {

namespace {

class PinnedStore final : public BackupStore {
 public:
  PinnedStore(const StoreContext& ctx) : host_(ctx.host), pinned_(ctx.pinned) {}
  const char* name() const override { return "pinned"; }
  vpmm_status acquire(const BackupDir&, uint64_t bytes, Backup* b) override {
    return pinned_.get(bytes, &b->host, &b->capacity);
  }
  void release(Backup* b) override { pinned_.put(b->host, b->capacity); }
  // The copy engine moves the bytes to and from b->host itself.
  bool staged() const override { return false; }
  vpmm_status write(Backup& b, const void* src, uint64_t offset, uint64_t len) override {
    return host_.host_copy(static_cast<char*>(b.host) + offset, src, len);
  }
  vpmm_status read(Backup& b, void* dst, uint64_t offset, uint64_t len) override {
    return host_.host_copy(dst, static_cast<const char*>(b.host) + offset, len);
  }
  bool prepared_ahead() const override { return true; }

 private:
  HostServices& host_;
  PinnedCache& pinned_;
};

}  // namespace

std::unique_ptr<BackupStore> make_pinned_store(const StoreContext& ctx) {
  return std::unique_ptr<BackupStore>(new PinnedStore(ctx));
}

}  // namespace vpmm
