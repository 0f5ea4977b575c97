// ProcessIdentity (see process_identity.hpp).
#include "ledger/process_identity.hpp"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace vpmm {
namespace ledger {

namespace {
// Field 3 (the state letter) and field 22 of /proc/PID/stat; false when the
// file cannot be read or parsed.
bool read_stat(uint32_t pid, char* state, uint64_t* start) {
  if (pid == 0 || pid > 0x3fffffff) return false;
  char path[48];
  std::snprintf(path, sizeof path, "/proc/%u/stat", pid);
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[1024];
  ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  if (n <= 0) return false;
  buf[n] = '\0';
  // The command name (field 2) is in parentheses and may hold spaces or
  // parentheses itself: fields are counted after its last ')'.
  const char* p = std::strrchr(buf, ')');
  if (!p) return false;
  ++p;
  while (*p == ' ') ++p;
  *state = *p;
  // p is at field 3; field 22 is 19 fields on.
  for (int field = 3; field < 22; ++field) {
    while (*p == ' ') ++p;
    while (*p && *p != ' ') ++p;
    if (!*p) return false;
  }
  while (*p == ' ') ++p;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(p, &end, 10);
  if (end == p) return false;
  *start = static_cast<uint64_t>(v);
  return true;
}
}  // namespace

uint64_t ProcessIdentity::start_time(uint32_t pid) {
  char state = 0;
  uint64_t start = 0;
  return read_stat(pid, &state, &start) ? start : 0;
}

uint32_t ProcessIdentity::self_pid() { return static_cast<uint32_t>(::getpid()); }

uint64_t ProcessIdentity::self_start_time() {
  // Not cached across fork: a child has its own start time.
  return start_time(self_pid());
}

bool ProcessIdentity::pid_exists(uint32_t pid) {
  if (pid == 0 || pid > 0x3fffffff) return false;
  if (::kill(static_cast<pid_t>(pid), 0) == 0) return true;
  return errno == EPERM;  // someone else's process: it exists
}

bool ProcessIdentity::alive(uint32_t pid, uint64_t start) {
  if (!pid_exists(pid)) return false;
  char state = 0;
  uint64_t now = 0;
  // Unreadable while the pid exists: it exited between the two looks, or
  // /proc hides it; count it alive unless kill says otherwise now.
  if (!read_stat(pid, &state, &now)) return pid_exists(pid);
  // A zombie (killed, not yet reaped) holds no memory any more.
  if (state == 'Z' || state == 'X') return false;
  return start == 0 || now == start;
}

}  // namespace ledger
}  // namespace vpmm
