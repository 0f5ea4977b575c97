// ProcessIdentity: who a ledger slot's owner is, so that a slot whose
// process is gone (or whose pid now names another process) can be reclaimed
// by whoever looks. A pid alone is not an identity: pids are reused, so a
// slot also keeps the owner's start time (field 22 of /proc/PID/stat, in
// clock ticks since boot), which no later process with that pid shares.
#pragma once

#include <cstdint>

namespace vpmm {
namespace ledger {

class ProcessIdentity {
 public:
  // Field 22 of /proc/PID/stat; 0 when it cannot be read (no such process).
  static uint64_t start_time(uint32_t pid);
  // This process's pid and start time, read once.
  static uint32_t self_pid();
  static uint64_t self_start_time();
  // False when no process has the pid (kill(pid, 0) says ESRCH) or, with a
  // start time, when the pid's process started at another time. Pid 0 and
  // pids past the kernel's range are never alive.
  static bool alive(uint32_t pid, uint64_t start_time);
  // Only whether a process has the pid (no /proc read): the cheap check.
  static bool pid_exists(uint32_t pid);
};

}  // namespace ledger
}  // namespace vpmm
