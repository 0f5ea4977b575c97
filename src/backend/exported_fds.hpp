// The descriptors a GPU backend exported its handles as, kept until the
// handle is released (docs/ipc.md, "What a send costs"). The driver's export
// (cuMemExportToShareableHandle) costs hundreds of microseconds a handle;
// every later export of the same handle (a weight sync that shares the same
// memory again, or one prepared ahead by vpmm_pool_prepare_export) is then a
// dup of the kept descriptor. A released handle's descriptor is closed with
// it, so the exporter keeps no reference to memory it released.
//
// Exports may run on one thread while another releases the handle (a
// prepared export runs without the pool's lock), and a released handle's
// value may come back from the driver for new memory. So each export in
// flight notes the handle's generation when it starts, a release bumps the
// generations of the exports in flight, and an export that finishes on a
// changed generation keeps nothing. Thread safe.
#pragma once

#include <cstdint>
#include <mutex>
#include <unordered_map>

#include "backend/backend.hpp"
#include "vpmm.h"

namespace vpmm {

class ExportedFds {
 public:
  ExportedFds() = default;
  ExportedFds(const ExportedFds&) = delete;
  ExportedFds& operator=(const ExportedFds&) = delete;
  ~ExportedFds();

  // True when h has a kept descriptor: then *st says whether *out (when not
  // null) received a duplicate of it, the caller's.
  bool dup_kept(PhysHandle h, int* out, vpmm_status* st, const char* who);
  // An export of h starts: returns what finish() and abandon() take.
  uint64_t begin(PhysHandle h);
  // It produced `fd`: kept (the first kept wins; a later one is closed) and
  // duplicated into *out when not null. WRONG_STATE, fd closed, when h was
  // released since `started`.
  vpmm_status finish(PhysHandle h, uint64_t started, int fd, int* out, const char* who);
  // It failed: nothing to keep.
  void abandon(PhysHandle h);
  // h is released: its descriptor closes, exports of it in flight keep nothing.
  void forget(PhysHandle h);

 private:
  struct Flight {
    int count = 0;
    uint64_t generation = 0;
  };
  std::mutex mu_;
  std::unordered_map<PhysHandle, int> fds_;
  std::unordered_map<PhysHandle, Flight> flights_;
};

// What a GPU backend imported its handles from: a duplicate of the
// descriptor each was imported from, kept until the handle is released, so
// that a later descriptor can be recognised as the same memory (the same
// open file: kcmp KCMP_FILE), which lets an importer map it once. A driver's
// descriptors carry no identity of their own (their inode may be the
// device's, shared by every one): only the open file tells. Where kcmp is
// refused (seccomp, an old kernel) nothing is the same. Costs one
// descriptor per imported handle. Thread safe.
class ImportedFds {
 public:
  ImportedFds() = default;
  ImportedFds(const ImportedFds&) = delete;
  ImportedFds& operator=(const ImportedFds&) = delete;
  ~ImportedFds();

  void keep(PhysHandle h, int fd);  // h was imported from fd (the caller's: duplicated)
  void forget(PhysHandle h);        // h is released
  bool same(PhysHandle h, int fd);  // fd is the open file h was imported from

 private:
  std::mutex mu_;
  std::unordered_map<PhysHandle, int> fds_;
};

}  // namespace vpmm
