// StoreTable: a pool's backup stores (store.hpp), one of each registered
// store, and every backup they hold. An allocation's VPMM_ALLOC_* flags pick
// its store: the store whose flag is set, else the default (pinned).
//
//   pinned  page-locked host memory from the PinnedCache (the default): the
//           copy engine moves it at link speed, and the buffer goes back to
//           the cache at resume, so later pauses skip the pinning;
//   mmap    anonymous pageable memory (huge-page advised), mapped at pause and
//           unmapped at resume: host RSS returns to where it was. Its bytes
//           move through a few pinned staging slots and a parallel host copy
//           (pageable memory copied by the driver ran at 1.6-4 GB/s D2H on an
//           H200, staged at 17);
//   disk    a file per allocation in a directory, written and read in large
//           chunks through the staging slots; created at the first pause,
//           overwritten in place by every later one (the footprint stays
//           constant) and removed when the allocation is freed.
//
// A retained backup (VPMM_ALLOC_RETAIN_BACKUP) outlives the resume: it stays
// with the active allocation, holding its bytes as of the last pause, and the
// next pause writes into it again (same host address, same file), or, when
// the caller declares the allocation unchanged, releases it without copying.
//
// A store's directory travels with the allocation's flags: the directory is
// interned here and its id kept in the flags' top 16 bits, so that malloc
// stores it with the flags and never looks at it. Interning opens it (the
// host services' dir_open): a directory that does not exist fails the malloc
// that names it, and the path is resolved once, so a relative one keeps
// naming the same directory after a chdir, and a renamed one is followed.
// One that was removed is opened again when a later call names its path.
//
// Descriptors are bounded by what uses them. Each open directory descriptor
// counts the backup files made in it (their removal needs it). A directory
// removed and named again gets a fresh descriptor; the old one is closed at
// once, or, while files made in it remain, with the last of them. A removed
// directory that no file uses is closed too (nothing can be made in it any
// more), when the open ones have doubled since the last look: its id stays,
// and a pause into it fails as one into any removed directory does, until
// its path is named again. A checkpoint loop that recreates its directory,
// or makes a new one per round and removes the old, keeps a few open.
//
// Owned by the pauser's PauseKit; every call is made with the pool mutex held.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "backend/backend.hpp"
#include "core/pause/stores/pinned_cache.hpp"
#include "core/pause/stores/store.hpp"

namespace vpmm {

constexpr uint32_t kBackupDirShift = 16;
constexpr uint32_t kAllocFlagsMask = (1u << kBackupDirShift) - 1;  // the public VPMM_ALLOC_* bits
constexpr uint32_t kMaxBackupDirs = (1u << (32 - kBackupDirShift)) - 1;
inline uint32_t backup_dir_of(uint32_t flags) { return flags >> kBackupDirShift; }

// The registry of stores: store_table.cpp lists the library's, one line each.
struct StoreEntry {
  const char* name;
  uint32_t flag;   // the VPMM_ALLOC_* bit that chooses it; 0: the default store
  bool wants_dir;  // an allocation names a directory for it (VPMM_ALLOC_BACKUP_DISK's)
  StoreFactory make;
};
// Adds a store that lives outside the library (a test's), before any pool is
// made; its flag must be a bit no store uses. False if it is taken.
bool register_backup_store(const StoreEntry& e);
// The flag bits that choose a store (the C API's flag checks).
uint32_t backup_store_flags();
// The name of the store `flags` choose, and whether it wants a directory.
const char* backup_store_name(uint32_t flags);
bool backup_store_wants_dir(uint32_t flags);

class StoreTable {
 public:
  StoreTable(Backend& b, HostServices& host, PinnedCache& pinned);
  ~StoreTable();
  StoreTable(const StoreTable&) = delete;
  StoreTable& operator=(const StoreTable&) = delete;

  // --- directories ---
  // The id of `dir` (interned if new; ids start at 1), the directory open
  // (opened again if it was removed, or closed as unused, since).
  // INVALID_ARGUMENT for an empty or over-long path, one that is no
  // directory the process may create files in, or past kMaxBackupDirs
  // distinct ones; nothing is interned then.
  vpmm_status intern_dir(const char* call, const char* dir, uint32_t* id);
  const std::string& dir(uint32_t id) const { return dirs_[id].path; }
  // The pool's default directory for backups of allocations that name none
  // (0 = none).
  uint32_t default_dir() const { return default_dir_; }
  void set_default_dir(uint32_t id) { default_dir_ = id; }

  // --- backups ---
  // A new backup of `bytes` in the store `flags` choose, its storage taken
  // now (a pinned buffer, mapped pageable memory, a file of that size).
  // OUT_OF_MEMORY when no memory or disk space is left, BACKEND for a file
  // the OS refused, UNSUPPORTED when the backend cannot copy at all; on
  // failure nothing is left.
  vpmm_status acquire(uint32_t flags, uint64_t bytes, Backup** out);
  // Gives a backup's storage back and forgets it.
  void release(Backup* b);
  // The allocation holding `b` was resumed: kept (retained, or its store
  // keeps it: a disk file, whose bytes are not current any more unless
  // retained) or released. Returns whether the active allocation keeps it.
  bool after_resume(Backup* b);
  // The allocation holding `b` is paused again with it.
  void before_pause(Backup* b);
  // Bytes an unchanged re-pause released without copying.
  void note_skipped(uint64_t bytes) { skipped_bytes_ += bytes; }
  // Whether vpmm_pool_prepare_backups pins ahead for the store `flags` choose.
  bool prepared_ahead(uint32_t flags) const { return store_for(flags).prepared_ahead(); }

  uint64_t retained_bytes() const { return retained_bytes_; }
  void fill_stats(vpmm_stats* s) const;  // what the stores hold, retained and skipped bytes

 private:
  BackupStore& store_for(uint32_t flags) const;
  void set_with_active(Backup* b, bool on);

  Backend& backend_;
  HostServices& host_;
  std::vector<std::pair<uint32_t, std::unique_ptr<BackupStore>>> stores_;  // (flag, store); flag 0 first
  // A file made in `fd` (acquire) or gone from it (release).
  void add_file_ref(DirHandle fd);
  void drop_file_ref(DirHandle fd);
  // Closes the descriptors of removed directories no file uses, when the
  // open ones have doubled since the last time (amortised: one fstat each).
  void close_removed_dirs();
  void close_dir(DirHandle fd);

  std::deque<BackupDir> dirs_{BackupDir()};  // [0] = none; a deque: backups point to theirs
  // Every open directory descriptor (a dirs_ entry's, or a removed
  // directory's old one that files still name) and the backup files in it.
  std::unordered_map<DirHandle, uint64_t> files_in_;
  std::unordered_set<DirHandle> retired_dirs_;  // old descriptors of directories opened again
  size_t sweep_at_ = 16;                        // close_removed_dirs looks at this many open
  std::unordered_map<std::string, uint32_t> dir_ids_;
  uint32_t default_dir_ = 0;
  std::unordered_set<Backup*> live_;  // every backup not yet released (released at destruction)
  uint64_t retained_bytes_ = 0, skipped_bytes_ = 0;
};

}  // namespace vpmm
