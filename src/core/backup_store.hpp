// Backup stores: where the bytes of a paused allocation live.
//
//   pinned  page-locked host memory from BackupBuffers' cache (the default):
//           the copy engine moves it at link speed, and the buffer goes back
//           to the cache at resume, so later pauses skip the pinning;
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
// A store is chosen per allocation by its VPMM_ALLOC_* flags. A retained
// backup (VPMM_ALLOC_RETAIN_BACKUP) outlives the resume: it stays with the
// active allocation, holding its bytes as of the last pause, and the next
// pause writes into it again (same host address, same file), or, when the
// caller declares the allocation unchanged, releases it without copying.
//
// The disk store's directory travels with the allocation's flags: the
// directory is interned here and its id kept in the flags' top 16 bits, so
// that malloc stores it with the flags and never looks at it. Interning
// opens it (the backend's dir_open): a directory that does not exist fails
// the malloc that names it, and the path is resolved once, so a relative
// one keeps naming the same directory after a chdir, and a renamed one is
// followed. One that was removed is opened again when a later call names
// its path.
//
// Owned by Backups; every call is made with the pool mutex held. No system
// call: memory and files come from the backend.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "backend/backend.hpp"
#include "core/backup.hpp"

namespace vpmm {

constexpr uint32_t kBackupDirShift = 16;
constexpr uint32_t kAllocFlagsMask = (1u << kBackupDirShift) - 1;  // the public VPMM_ALLOC_* bits
constexpr uint32_t kMaxBackupDirs = (1u << (32 - kBackupDirShift)) - 1;
constexpr uint32_t kBackupStoreFlags = VPMM_ALLOC_BACKUP_MMAP | VPMM_ALLOC_BACKUP_DISK;
inline uint32_t backup_dir_of(uint32_t flags) { return flags >> kBackupDirShift; }

enum class Store : uint8_t { Pinned, Mmap, Disk };
inline Store store_of(uint32_t flags) {
  return flags & VPMM_ALLOC_BACKUP_DISK ? Store::Disk : flags & VPMM_ALLOC_BACKUP_MMAP ? Store::Mmap : Store::Pinned;
}
const char* store_name(Store s);

// One allocation's backup. Made and freed by BackupStores; a region points to
// it while paused, and while active when it is retained or a disk file.
struct Backup {
  Store store = Store::Pinned;
  bool retain = false;       // VPMM_ALLOC_RETAIN_BACKUP: outlives resume
  bool current = false;      // holds the allocation's bytes as of its last pause
  bool with_active = false;  // kept by an active allocation (counted as retained when retain)
  uint64_t bytes = 0;        // the allocation's (region's) bytes
  void* host = nullptr;      // pinned, mmap: the buffer
  uint64_t capacity = 0;     // bytes of the buffer or file (>= bytes)
  uint32_t dir = 0;          // disk: the directory's id
  FileRef file;              // disk: the file's place in that directory
  FileHandle fd = -1;        // disk: the file, open while it exists (never reopened by name)
};

class BackupStores {
 public:
  BackupStores(Backend& b, BackupBuffers& pinned) : backend_(b), pinned_(pinned) {}
  ~BackupStores();
  BackupStores(const BackupStores&) = delete;
  BackupStores& operator=(const BackupStores&) = delete;

  // --- directories of the disk store ---
  // The id of `dir` (interned if new; ids start at 1), the directory open.
  // INVALID_ARGUMENT for an empty or over-long path, one that is no
  // directory the process may create files in, or past kMaxBackupDirs
  // distinct ones; nothing is interned then.
  vpmm_status intern_dir(const char* call, const char* dir, uint32_t* id);
  const std::string& dir(uint32_t id) const { return dirs_[id].path; }
  // "directory/name" of a disk backup's file, for messages.
  std::string file_path(const Backup& b) const;
  // The pool's default directory for disk backups of allocations that name
  // none (0 = none).
  uint32_t default_dir() const { return default_dir_; }
  void set_default_dir(uint32_t id) { default_dir_ = id; }

  // --- backups ---
  // A new backup of `bytes` in the store `flags` choose, its storage taken
  // now (a pinned buffer, mapped pageable memory, a file of that size).
  // OUT_OF_MEMORY when no memory or disk space is left, BACKEND for a file
  // the OS refused, UNSUPPORTED when the backend cannot copy at all; on
  // failure nothing is left.
  vpmm_status acquire(uint32_t flags, uint64_t bytes, Backup** out);
  // Gives a backup's storage back (the pinned cache, unmapped, the file
  // removed) and forgets it.
  void release(Backup* b);
  // The allocation holding `b` was resumed: kept (retained, or a disk file,
  // whose bytes are not current any more unless retained) or released.
  // Returns whether the active allocation keeps it.
  bool after_resume(Backup* b);
  // The allocation holding `b` is paused again with it.
  void before_pause(Backup* b);
  // Bytes an unchanged re-pause released without copying.
  void note_skipped(uint64_t bytes) { skipped_bytes_ += bytes; }

  // Whether a store's bytes move through the staging slots: mmap (when the
  // backend has pinned memory to stage through) and disk.
  bool staged(const Backup& b) const;

  uint64_t mmap_bytes() const { return mmap_bytes_; }
  uint64_t disk_bytes() const { return disk_bytes_; }
  uint64_t retained_bytes() const { return retained_bytes_; }
  uint64_t skipped_bytes() const { return skipped_bytes_; }

 private:
  void set_with_active(Backup* b, bool on);

  Backend& backend_;
  BackupBuffers& pinned_;
  struct Dir {
    std::string path;  // as first named (relative or not)
    DirHandle fd = -1;
  };
  std::vector<Dir> dirs_{Dir()};  // [0] = none
  std::vector<DirHandle> retired_dirs_;  // removed directories opened again: files still name them
  std::unordered_map<std::string, uint32_t> dir_ids_;
  uint32_t default_dir_ = 0;
  std::unordered_set<Backup*> live_;  // every backup not yet released (released at destruction)
  uint64_t mmap_bytes_ = 0, disk_bytes_ = 0, retained_bytes_ = 0, skipped_bytes_ = 0;
};

}  // namespace vpmm
