// WordMutex (see word_mutex.hpp): the contended paths.
#include "common/word_mutex.hpp"

#include <thread>

#if defined(__linux__)
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace vpmm {

namespace {
constexpr int kSpins = 100;
}

void WordMutex::lock_contended() {
  for (int i = 0; i < kSpins; ++i) {
    if (word_.load(std::memory_order_relaxed) == 0 && try_lock()) return;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  }
  // Mark the word "someone may sleep" and sleep while it stays held; the
  // exchange that finds it free takes it (still marked 2: the release then
  // wakes one more waiter than needed, never one fewer).
  while (word_.exchange(2, std::memory_order_acquire) != 0) {
#if defined(__linux__)
    // Returns at once if the word is no longer 2 (EAGAIN), on a wake or on a
    // signal: the loop tries again either way.
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word_), FUTEX_WAIT_PRIVATE, 2u, nullptr, nullptr, 0);
#else
    std::this_thread::yield();
#endif
  }
}

void WordMutex::wake_one() {
#if defined(__linux__)
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word_), FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0);
#endif
}

}  // namespace vpmm
