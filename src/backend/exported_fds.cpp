// See exported_fds.hpp.
#include "backend/exported_fds.hpp"

#include <fcntl.h>
#include <linux/kcmp.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/status.hpp"

namespace vpmm {

namespace {

vpmm_status dup_of(int fd, int* out, const char* who) {
  if (out == nullptr) return VPMM_OK;  // prepared ahead: nothing to hand out
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

uint64_t ExportedFds::begin(PhysHandle h) {
  std::lock_guard<std::mutex> lk(mu_);
  Flight& f = flights_[h];
  ++f.count;
  return f.generation;
}

vpmm_status ExportedFds::finish(PhysHandle h, uint64_t started, int fd, int* out, const char* who) {
  std::lock_guard<std::mutex> lk(mu_);
  auto f = flights_.find(h);
  const bool released = f == flights_.end() || f->second.generation != started;
  if (f != flights_.end() && --f->second.count == 0) flights_.erase(f);
  if (released) {
    close(fd);
    return fail(VPMM_ERR_WRONG_STATE, "%s: handle 0x%llx was released while it was exported", who,
                static_cast<unsigned long long>(h));
  }
  auto ins = fds_.emplace(h, fd);
  if (!ins.second) close(fd);
  return dup_of(ins.first->second, out, who);
}

void ExportedFds::abandon(PhysHandle h) {
  std::lock_guard<std::mutex> lk(mu_);
  auto f = flights_.find(h);
  if (f != flights_.end() && --f->second.count == 0) flights_.erase(f);
}

void ExportedFds::forget(PhysHandle h) {
  std::lock_guard<std::mutex> lk(mu_);
  auto f = flights_.find(h);
  if (f != flights_.end()) ++f->second.generation;
  auto it = fds_.find(h);
  if (it == fds_.end()) return;
  close(it->second);
  fds_.erase(it);
}

ImportedFds::~ImportedFds() {
  for (const auto& kv : fds_) close(kv.second);
}

void ImportedFds::keep(PhysHandle h, int fd) {
  const int d = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (d < 0) return;  // then it is never recognised: mapped again, as before
  std::lock_guard<std::mutex> lk(mu_);
  auto ins = fds_.emplace(h, d);
  if (!ins.second) close(d);
}

void ImportedFds::forget(PhysHandle h) {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = fds_.find(h);
  if (it == fds_.end()) return;
  close(it->second);
  fds_.erase(it);
}

bool ImportedFds::same(PhysHandle h, int fd) {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = fds_.find(h);
  if (it == fds_.end()) return false;
  const pid_t me = getpid();
  return syscall(SYS_kcmp, me, me, KCMP_FILE, it->second, fd) == 0;
}

}  // namespace vpmm
