// HostServices: what the pool asks of the host rather than of the device's
// driver: pageable memory, backup files, host-to-host copies. The mmap and
// disk backup stores and the pinned cache's pageable fallback use them
// (core/pause/stores/). They are the same for every backend, so the backends
// (backend.hpp) stay device drivers only; a pool gets the process's services
// (make_host_services) unless a test hands it an adaptor that fails their
// calls (tests/support/fault_host_services.hpp).
//
// Pattern: as Backend's, a non-virtual public face that checks arguments,
// counts every call (of the Op kinds of backend.hpp) and keeps the
// live-object counters leak tests read, over private do_* calls.
//
// Errors: every call returns a vpmm_status with the thread-local message
// set (common/status.hpp). Thread safety: every call may come from any
// thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "backend/backend.hpp"

namespace vpmm {

using DirHandle = int64_t;  // an open backup directory (a descriptor); -1 = none

// A backup file's place: the directory it was made in (held open since
// that directory was first named, so that a later chdir or a rename of the
// directory changes nothing) and its name there. The file itself is the
// descriptor file_create returned, kept open until the file is removed.
struct FileRef {
  DirHandle dir = -1;
  std::string name;
};

struct HostCounters {
  std::atomic<uint64_t> calls[static_cast<int>(Op::count_)]{};  // the host kinds only
  std::atomic<int64_t> live_pageable{0};      // pageable buffers not yet freed
  std::atomic<int64_t> live_files{0};         // backup files created and not removed
  std::atomic<int64_t> live_file_handles{0};  // backup files open
  std::atomic<int64_t> live_dir_handles{0};   // backup directories open
};

class HostServices {
 public:
  virtual ~HostServices() = default;
  HostServices(const HostServices&) = delete;
  HostServices& operator=(const HostServices&) = delete;

  // Pageable memory: ordinary anonymous memory (huge-page advised), always
  // available; freed by host_free_pageable with the size it was allocated
  // with. OUT_OF_MEMORY when the kernel has none.
  vpmm_status host_alloc_pageable(uint64_t size, void** out);
  vpmm_status host_free_pageable(void* p, uint64_t size);

  // Backup directories and files (the disk store). dir_open opens a
  // directory the process may create files in (a relative path is resolved
  // now, against the working directory, once): INVALID_ARGUMENT when it does
  // not exist, is no directory or may not be written, naming it. dir_check
  // says whether an open directory was removed since. file_create makes a
  // new file of `size` bytes in `dir` (space allocated up front where the
  // file system can, so that a full disk fails here, before a pause changes
  // anything) and opens it; *ref receives its directory and name. Files are
  // opened for direct I/O where the file system allows it (buffers, sizes
  // and offsets aligned to 4 KiB), else buffered. A full disk is
  // OUT_OF_MEMORY; other OS errors are BACKEND. The caller keeps the
  // descriptor for every later transfer: a file is never opened again by
  // its name, which whoever may write the directory could point elsewhere
  // meanwhile. file_remove(ref, f) unlinks the name only while it still
  // holds f's file; a name that holds anything else is left alone, and f's
  // file, moved out of reach, is cut to nothing. It does not close f.
  vpmm_status dir_open(const std::string& path, DirHandle* out);
  vpmm_status dir_close(DirHandle d);
  vpmm_status dir_check(DirHandle d, bool* removed);
  vpmm_status file_create(DirHandle dir, uint64_t size, FileRef* ref, FileHandle* out);
  vpmm_status file_write(FileHandle f, const void* src, uint64_t size, uint64_t offset);
  vpmm_status file_read(FileHandle f, void* dst, uint64_t size, uint64_t offset);
  vpmm_status file_close(FileHandle f);
  vpmm_status file_remove(const FileRef& ref, FileHandle f);

  // Host-to-host copy on a few threads: the CPU half of a staged backup,
  // between a pinned staging slot and mmap memory.
  vpmm_status host_copy(void* dst, const void* src, uint64_t size);

  const HostCounters& counters() const { return counters_; }

 protected:
  HostServices() = default;
  virtual vpmm_status do_host_alloc_pageable(uint64_t size, void** out) = 0;
  virtual vpmm_status do_host_free_pageable(void* p, uint64_t size) = 0;
  virtual vpmm_status do_dir_open(const std::string& path, DirHandle* out) = 0;
  virtual vpmm_status do_dir_close(DirHandle d) = 0;
  virtual vpmm_status do_dir_check(DirHandle d, bool* removed) = 0;
  virtual vpmm_status do_file_create(DirHandle dir, uint64_t size, FileRef* ref, FileHandle* out) = 0;
  virtual vpmm_status do_file_write(FileHandle f, const void* src, uint64_t size, uint64_t offset) = 0;
  virtual vpmm_status do_file_read(FileHandle f, void* dst, uint64_t size, uint64_t offset) = 0;
  virtual vpmm_status do_file_close(FileHandle f) = 0;
  virtual vpmm_status do_file_remove(const FileRef& ref, FileHandle f) = 0;
  virtual vpmm_status do_host_copy(void* dst, const void* src, uint64_t size) = 0;

 private:
  void count(Op op) { counters_.calls[static_cast<int>(op)].fetch_add(1, std::memory_order_relaxed); }
  HostCounters counters_;
};

// The process's host services: mmap for pageable memory (tracked, so a bad
// pointer is refused), host_services/backup_files.cpp for files,
// host_services/host_copy.cpp for copies.
std::unique_ptr<HostServices> make_host_services();
std::shared_ptr<HostServices> make_shared_host_services();

}  // namespace vpmm
