// A backup store: one place where the bytes of a paused allocation can live
// (docs/design.md, "Choosing a backup store"; "Adding a backup store" has
// the recipe). The stores are one file each (pinned_store.cpp,
// mmap_store.cpp, disk_store.cpp) and one line each in store_table.cpp,
// which makes one of each per pool and picks an allocation's store by its
// VPMM_ALLOC_* flags.
//
// Two ways for bytes to move: a store that is not staged() hands the copy
// engine a host address (Backup::host) that D2H and H2D copies read and
// write directly (the pinned store: link speed); a staged one takes the
// bytes chunk by chunk through pinned staging slots (core/pause/staging.hpp),
// between open() and close() of its backup (the mmap store: a parallel host
// copy; the disk store: large file writes and reads).
//
// Every call is made with the pool mutex held; a store makes no system call
// itself: memory and files come from the backend and the host services.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "backend/backend.hpp"
#include "backend/host_services/host_services.hpp"
#include "vpmm.h"

namespace vpmm {

class BackupStore;
class PinnedCache;

// A directory an allocation names for a store that wants one (the disk
// store's), opened by the StoreTable when first named (HostServices::
// dir_open): the path is resolved once, so a relative one keeps naming the
// same directory after a chdir, and a renamed one is followed. The table's
// entry 0 is "none" (fd -1).
struct BackupDir {
  std::string path;  // as first named (relative or not), for messages
  DirHandle fd = -1;
};

// One allocation's backup. Made and freed by the StoreTable; a region points
// to it while paused, and while active when it is retained or its store keeps
// it (kept_after_resume).
struct Backup {
  BackupStore* store = nullptr;
  bool retain = false;       // VPMM_ALLOC_RETAIN_BACKUP: outlives resume
  bool current = false;      // holds the allocation's bytes as of its last pause
  bool with_active = false;  // kept by an active allocation (counted as retained when retain)
  uint64_t bytes = 0;        // the allocation's (region's) bytes
  void* host = nullptr;      // an addressable store's memory
  uint64_t capacity = 0;     // bytes of the memory or file (>= bytes)
  const BackupDir* dir = nullptr;  // a file store's directory
  FileRef file;                    // a file store's file: its place in that directory
  FileHandle fd = -1;              // a file store's file, open while it exists (never reopened by name)
};

class BackupStore {
 public:
  virtual ~BackupStore() = default;
  virtual const char* name() const = 0;

  // Storage for `bytes` in b, taken now, before a pause changes anything
  // (b->host or b->file, b->capacity). `dir`: the directory the allocation
  // names (core/pause/stores/store_table.hpp), open; fd -1 when none. It
  // lives as long as the table, so b may keep a pointer to it.
  // OUT_OF_MEMORY when no memory or space is left; on failure nothing is
  // left.
  virtual vpmm_status acquire(const BackupDir& dir, uint64_t bytes, Backup* b) = 0;
  // Gives b's storage back (b itself is the table's to free).
  virtual void release(Backup* b) = 0;

  // Whether the bytes move through the staging slots (below) rather than by
  // copies to and from b->host.
  virtual bool staged() const = 0;
  // A staged transfer of b: open, chunks written (pause) or read (resume)
  // at their offsets, close (also after a failure).
  virtual vpmm_status open(Backup& b) {
    (void)b;
    return VPMM_OK;
  }
  virtual vpmm_status write(Backup& b, const void* src, uint64_t offset, uint64_t len) = 0;
  virtual vpmm_status read(Backup& b, void* dst, uint64_t offset, uint64_t len) = 0;
  virtual void close(Backup& b) { (void)b; }

  // Whether the active allocation keeps b after its resume even when it is
  // not retained (a disk file stays, so that the footprint is constant).
  virtual bool kept_after_resume() const { return false; }
  // Whether b->host holds the bytes (vpmm_pool_backup_lookup can point there);
  // `where` names the backup in a message when it does not.
  virtual bool addressable() const { return true; }
  virtual std::string where(const Backup& b) const {
    (void)b;
    return name();
  }
  // Whether vpmm_pool_prepare_backups pins this store's buffers ahead.
  virtual bool prepared_ahead() const { return false; }
  // Adds what it holds to the pool's stats.
  virtual void add_stats(vpmm_stats* s) const { (void)s; }
};

// What a store is made with.
struct StoreContext {
  Backend& backend;    // the device's: its capabilities, pinned memory
  HostServices& host;  // pageable memory, files, host copies
  PinnedCache& pinned;
};
using StoreFactory = std::unique_ptr<BackupStore> (*)(const StoreContext& ctx);

}  // namespace vpmm
