// WordMutex: a mutex of one 32-bit word, which a sleeping waiter waits on
// in the kernel (a futex on Linux). Why the pool takes it rather than
// std::mutex: core/state/pool_mutex.hpp.
//
// The three-state futex lock: 0 free, 1 held, 2 held with a sleeper
// possible. Taking it is one compare-exchange; a contended take spins a
// little (the pool holds its mutex for a few hundred nanoseconds at a time:
// it makes its driver calls without it), then sleeps; releasing it is one
// exchange, and a wake only when someone may sleep. The word's acquire and
// release order the data it protects, which is also how ThreadSanitizer
// sees it. Lockable: std::unique_lock and std::condition_variable_any take
// it.
#pragma once

#include <atomic>
#include <cstdint>

namespace vpmm {

class WordMutex {
 public:
  WordMutex() = default;
  WordMutex(const WordMutex&) = delete;
  WordMutex& operator=(const WordMutex&) = delete;

  void lock() {
    uint32_t free = 0;
    if (__builtin_expect(!word_.compare_exchange_strong(free, 1, std::memory_order_acquire,
                                                        std::memory_order_relaxed),
                         0))
      lock_contended();
  }
  bool try_lock() {
    uint32_t free = 0;
    return word_.compare_exchange_strong(free, 1, std::memory_order_acquire, std::memory_order_relaxed);
  }
  void unlock() {
    if (__builtin_expect(word_.exchange(0, std::memory_order_release) == 2, 0)) wake_one();
  }

 private:
  void lock_contended();  // spins a little, then sleeps until it takes the word
  void wake_one();        // a sleeper, if any, tries again

  static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t), "the futex is the atomic's word");
  std::atomic<uint32_t> word_{0};
};

}  // namespace vpmm
