// StepRecord: the program's steps as vpmm_pool_mark_step marks them, and the
// driver time the pool's mallocs and frees spent within each. A step's
// driver share (its driver time over its wall time) is what the driver
// budget bounds; measured per step it is free of the noise that timing
// whole steps carries from one step to the next. Owned by PoolState; read
// and written under the pool mutex. Marks change no placement decision.
#pragma once

#include <chrono>
#include <cstdint>

#include "vpmm.h"

namespace vpmm {

class StepRecord {
 public:
  // A mark now, the pool's driver time so far being `driver_ns`: closes the
  // step the previous mark opened, opens the next.
  void mark(uint64_t driver_ns) {
    const uint64_t now_ns = static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
            .count());
    if (open_) {
      // A clock that went backwards (none should) counts a step of zero.
      last_ns_ = now_ns > start_ns_ ? now_ns - start_ns_ : 0;
      last_driver_ns_ = driver_ns - start_driver_ns_;
      sum_ns_ += last_ns_;
      sum_driver_ns_ += last_driver_ns_;
      ++n_steps_;
    }
    open_ = true;
    start_ns_ = now_ns;
    start_driver_ns_ = driver_ns;
  }
  void fill_stats(vpmm_stats* s) const {
    s->n_steps = n_steps_;
    s->last_step_ns = last_ns_;
    s->last_step_driver_ns = last_driver_ns_;
    s->steps_ns = sum_ns_;
    s->steps_driver_ns = sum_driver_ns_;
  }

 private:
  bool open_ = false;  // a step is open: some mark was made
  uint64_t start_ns_ = 0, start_driver_ns_ = 0;
  uint64_t n_steps_ = 0, last_ns_ = 0, last_driver_ns_ = 0, sum_ns_ = 0, sum_driver_ns_ = 0;
};

}  // namespace vpmm
