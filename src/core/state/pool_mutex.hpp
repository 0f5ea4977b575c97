// PoolMutex: the pool's mutex, a WordMutex (common/word_mutex.hpp).
//
// Why not std::mutex: every malloc and free takes the pool's mutex, and
// inside a program's step the pool's data is out of the caches at each call
// (docs/handles.md, "Where the hard loop's host time goes"). glibc's
// pthread_mutex_lock reads three cache lines besides the mutex's own (its
// lock-elision switch and two words of the calling thread's descriptor),
// each a miss there: 2.7 of the 54.1 misses a malloc or free of the hard MoE
// trace had under `vpmm replay --cold` (cachegrind). A WordMutex touches its
// word alone. Lockable: std::unique_lock and std::condition_variable_any
// take it.
#pragma once

#include <mutex>

#include "common/word_mutex.hpp"

namespace vpmm {

using PoolMutex = WordMutex;
// The pool mutex held for a scope, or held and let go in turns.
using PoolGuard = std::lock_guard<PoolMutex>;
using PoolLock = std::unique_lock<PoolMutex>;

}  // namespace vpmm
