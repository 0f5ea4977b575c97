// The descriptors a GPU backend exported its handles as, kept until the
// handle is released (docs/ipc.md, "What a send costs"). The driver's export
// (cuMemExportToShareableHandle) costs hundreds of microseconds a handle;
// every later export of the same handle (a weight sync that shares the same
// memory again) is then a dup of the kept descriptor. A released handle's
// descriptor is closed with it, so the exporter keeps no reference to memory
// it released. Thread safe.
#pragma once

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

  // True when h has a kept descriptor: then *st says whether *out received a
  // duplicate of it (the caller's).
  bool dup_kept(PhysHandle h, int* out, vpmm_status* st, const char* who);
  // Keeps `fd` (just exported for h) and puts a duplicate in *out. Of two
  // threads exporting h at once, the first kept wins and the other's fd is
  // closed.
  vpmm_status keep(PhysHandle h, int fd, int* out, const char* who);
  // h is released: its descriptor closes.
  void forget(PhysHandle h);

 private:
  std::mutex mu_;
  std::unordered_map<PhysHandle, int> fds_;
};

}  // namespace vpmm
