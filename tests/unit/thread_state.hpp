// Observable waits for tests that need one thread blocked inside a call
// before another acts (a blocking reservation before the release that wakes
// it, a pause waiting for a prepare): the kernel says when a thread sleeps,
// so the test orders the two without guessing a delay.
#pragma once

#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>

namespace vt {

// The calling thread's kernel id, for blocked() from another thread.
inline pid_t thread_id() { return static_cast<pid_t>(syscall(SYS_gettid)); }

// Whether thread `tid` of this process sleeps (state S: in a futex, a
// condition variable's wait). A thread that publishes its id right before a
// blocking call and then sleeps is blocked in that call: nothing between
// the two sleeps unless a lock is contended, and the tests using this hold
// none the sleeper needs.
inline bool sleeping(pid_t tid) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/self/task/%d/stat", static_cast<int>(tid));
  FILE* f = std::fopen(path, "r");
  if (!f) return false;
  char buf[512];
  const size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  buf[n] = '\0';
  // "tid (comm) S ...": the state follows the last ')' (comm may hold one).
  const char* close = nullptr;
  for (const char* p = buf; *p; ++p)
    if (*p == ')') close = p;
  return close && close[1] == ' ' && close[2] == 'S';
}

// Waits until the thread that stored its id in `tid` (non-zero) sleeps.
// False only after `guard_s` seconds: a hang guard, not a timing bound (a
// thread that never blocks is the failure this reports).
inline bool wait_until_blocked(const std::atomic<pid_t>& tid, int guard_s = 60) {
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(guard_s);
  while (std::chrono::steady_clock::now() < give_up) {
    const pid_t t = tid.load();
    if (t != 0 && sleeping(t)) return true;
    sched_yield();
  }
  std::printf("  thread %d never blocked\n", static_cast<int>(tid.load()));
  return false;
}

// Waits until the thread that stored its id in `tid` sleeps, or until `done`
// is set (the call it was to block in returned without blocking: there is
// nothing to wait for, and the caller's checks say whether it should have
// blocked). True when the thread slept. The guard as above.
inline bool wait_until_blocked_or(const std::atomic<pid_t>& tid, const std::atomic<bool>& done,
                                  int guard_s = 60) {
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(guard_s);
  while (std::chrono::steady_clock::now() < give_up) {
    if (done.load()) return false;
    const pid_t t = tid.load();
    if (t != 0 && sleeping(t)) return true;
    sched_yield();
  }
  std::printf("  thread %d never blocked\n", static_cast<int>(tid.load()));
  return false;
}

}  // namespace vt
