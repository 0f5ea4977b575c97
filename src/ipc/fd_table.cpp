// See fd_table.hpp.
#include "ipc/fd_table.hpp"

#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <unistd.h>

#include <mutex>

namespace vpmm {
namespace ipc {

namespace {
// Grows the table to hold the numbers below `from_lowest ? lowest free +
// n : n`.
void grow(size_t n, bool from_lowest) {
  if (n == 0) return;
  // The lowest free number, from a descriptor that needs no file system.
  const int probe = eventfd(0, EFD_CLOEXEC);
  if (probe < 0) return;
  rlimit limit{};
  size_t top = (from_lowest ? static_cast<size_t>(probe) + n : n) - 1;  // the highest number wanted
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY &&
      top >= static_cast<size_t>(limit.rlim_cur))
    top = static_cast<size_t>(limit.rlim_cur) - 1;
  // One descriptor at `top` or above makes the kernel size the table for it
  // at once (a table already that large costs a dup and a close).
  if (top > static_cast<size_t>(probe)) {
    const int high = fcntl(probe, F_DUPFD_CLOEXEC, static_cast<int>(top));
    if (high >= 0) close(high);
  }
  close(probe);
}
}  // namespace

void make_descriptor_room(size_t more) { grow(more, true); }

void make_descriptor_table_once(size_t entries) {
  static std::once_flag once;
  std::call_once(once, [entries] { grow(entries, false); });
}

}  // namespace ipc
}  // namespace vpmm
