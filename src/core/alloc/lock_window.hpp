// LockWindow: lets a page-level malloc run its driver calls without the pool
// mutex, so that no other thread's malloc or free waits behind a remap:
// set-access and unmap cost 30-40 us per handle on an H100, and a
// defragmentation moves tens of handles. Made by the pool facade around a
// malloc; the small allocator, whose state cannot survive the mutex being
// dropped mid-slab, passes none. Whatever runs outside works only on regions
// its call claimed first (Kind::Transit, busy zombies, Lent homes), so no
// other thread can touch them meanwhile.
#pragma once

#include <cstdint>
#include "core/state/pool_mutex.hpp"

#include "core/state/regions.hpp"

namespace vpmm {

class LockWindow {
 public:
  explicit LockWindow(PoolLock* lock) : lock_(lock) {}
  // Runs f with the mutex released and takes it back (also on an exception),
  // noting whether another thread changed the region map meanwhile.
  template <typename F>
  vpmm_status outside(const RegionMap& m, F&& f) {
    const uint64_t before = m.changes();
    struct Relock {
      PoolLock* l;
      ~Relock() { l->lock(); }
    };
    vpmm_status st;
    {
      lock_->unlock();
      Relock relock{lock_};
      st = f();
    }
    if (m.changes() != before) others_changed_ = true;
    return st;
  }
  bool others_changed() const { return others_changed_; }

 private:
  PoolLock* lock_;
  bool others_changed_ = false;
};

}  // namespace vpmm
