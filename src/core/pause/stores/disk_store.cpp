// The disk store: a backup is a file of its own in the allocation's
// directory, for hosts that cannot hold the backups at all. The file is
// created (its space allocated) at the first pause, so a full disk fails the
// pause before anything changes; every later pause overwrites it in place
// and the active allocation keeps it between pauses (the footprint stays
// constant); it is removed when the allocation is freed. Its bytes move
// through the pinned staging slots in large writes and reads, with direct
// I/O where the file system allows it ((backend/host_services/backup_files.cpp)).
//
// The file is never opened again by its name: whoever may write the
// directory could put a symbolic link or a file of their own there between
// two pauses. The descriptor file_create returned is kept from the first
// pause until the backup goes (one descriptor per disk backup that paused;
// the directory's own descriptor stays open while such files remain),
// every write and read goes through it, and the removal unlinks the name
// only while it still holds that file (HostServices::file_remove).
#include <cinttypes>
#include <memory>
#include <string>

#include "common/status.hpp"
#include "core/pause/stores/store.hpp"

namespace vpmm {

namespace {

class DiskStore final : public BackupStore {
 public:
  explicit DiskStore(const StoreContext& ctx) : host_(ctx.host) {}
  const char* name() const override { return "disk"; }
  vpmm_status acquire(const BackupDir& dir, uint64_t bytes, Backup* b) override {
    if (dir.fd < 0 && !dir.path.empty())
      // Closed by the table: removed, and no file used it (store_table.hpp).
      return fail(VPMM_ERR_BACKEND,
                  "disk backup in directory \"%s\": the directory was removed (naming its path again "
                  "opens the one there now)",
                  dir.path.c_str());
    if (dir.fd < 0)
      return fail(VPMM_ERR_INTERNAL, "disk backup of %" PRIu64 " bytes without a directory", bytes);
    FileHandle fh = -1;
    vpmm_status st = host_.file_create(dir.fd, bytes, &b->file, &fh);
    if (st != VPMM_OK) {
      const std::string ctx = "disk backup in directory \"" + dir.path + "\"";
      return fail_context(st, ctx.c_str());
    }
    b->dir = &dir;
    b->fd = fh;  // kept open until the backup goes: its name is only used to remove it
    b->capacity = bytes;
    bytes_ += bytes;
    return VPMM_OK;
  }
  void release(Backup* b) override {
    if (host_.file_remove(b->file, b->fd) != VPMM_OK) host_.file_remove(b->file, b->fd);
    if (host_.file_close(b->fd) != VPMM_OK) host_.file_close(b->fd);
    b->fd = -1;
    bytes_ -= b->capacity;
  }
  bool staged() const override { return true; }
  vpmm_status write(Backup& b, const void* src, uint64_t offset, uint64_t len) override {
    return host_.file_write(b.fd, src, len, offset);
  }
  vpmm_status read(Backup& b, void* dst, uint64_t offset, uint64_t len) override {
    return host_.file_read(b.fd, dst, len, offset);
  }
  bool kept_after_resume() const override { return true; }
  bool addressable() const override { return false; }
  std::string where(const Backup& b) const override {
    return "the file " + (b.dir ? b.dir->path + "/" : std::string()) + b.file.name + " (disk store)";
  }
  void add_stats(vpmm_stats* s) const override { s->backup_disk_bytes = bytes_; }

 private:
  HostServices& host_;
  uint64_t bytes_ = 0;  // of backup files
};

}  // namespace

std::unique_ptr<BackupStore> make_disk_store(const StoreContext& ctx) {
  return std::unique_ptr<BackupStore>(new DiskStore(ctx));
}

}  // namespace vpmm
