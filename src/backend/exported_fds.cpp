// See exported_fds.hpp.
#include "backend/exported_fds.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/status.hpp"

namespace vpmm {

namespace {

vpmm_status dup_of(int fd, int* out, const char* who) {
  int d = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (d < 0) {
    int err = errno;
    return fail(err == EMFILE || err == ENFILE ? VPMM_ERR_OUT_OF_MEMORY : VPMM_ERR_BACKEND,
                "%s: duplicating the exported descriptor %d failed: %s", who, fd, std::strerror(err));
  }
  *out = d;
  return VPMM_OK;
}

}  // namespace

ExportedFds::~ExportedFds() {
  for (const auto& kv : fds_) close(kv.second);
}

bool ExportedFds::dup_kept(PhysHandle h, int* out, vpmm_status* st, const char* who) {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = fds_.find(h);
  if (it == fds_.end()) return false;
  *st = dup_of(it->second, out, who);
  return true;
}

vpmm_status ExportedFds::keep(PhysHandle h, int fd, int* out, const char* who) {
  std::lock_guard<std::mutex> lk(mu_);
  auto ins = fds_.emplace(h, fd);
  if (!ins.second) close(fd);
  return dup_of(ins.first->second, out, who);
}

void ExportedFds::forget(PhysHandle h) {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = fds_.find(h);
  if (it == fds_.end()) return;
  close(it->second);
  fds_.erase(it);
}

}  // namespace vpmm
