// DriverBudget: how much driver time a pool may spend moving pages to stay
// page-exact (vpmm_config.driver_budget; docs/handles.md, "A driver-time
// budget"). Moving a 2 MiB page costs ~75 us on the allocating thread
// (unmap 31 + set-access 41 + map 1.6 on an H100: cost is per handle), which
// a training step pays in full; growing by what a request lacks costs the
// driver once, and the loop then finds the memory in place at every later
// step. The budget is a token bucket: `share` x elapsed time accrues (up to
// `share` x kBurstSeconds, one second; a pool starts with it full, or with
// 256 handles' worth where that is less), and
// every driver call a malloc or free made leaves it: the moves it paid for
// and the pool's other driver work alike (creating handles, events), so the
// share it keeps is the share of the step the user sees in the driver. A
// move is allowed only when the credit covers its modelled cost; the budget
// step of the placement chain grows instead when it does not. A refused move
// empties the bucket, and so does every request to move until it is full
// again: moves resume only after a bucket's time in which none was asked
// for. A loop whose moves the budget pays only in part keeps its conveyor of
// moves running and grows as well (on the hard client's snapshot, paying what
// the credit allows moved 6.5% of the peak in the second half at 1.076x,
// against 0% at 1.046x for stopping; docs/handles.md), so the pool moves in
// bursts the bucket holds, or not at all.
//
// Time is the pool's working time, charged with the driver time the pool
// measured: the wall clock read every kSampleOps mallocs and frees, a
// stretch between two reads counted at most kMaxStretchNs (a longer one was
// idle). A process idle while others take the GPU (colocated RL, the
// lockstep clients) accrues nothing meanwhile; on the wall clock it came
// back with a full bucket and its refilling over, and on the H200 the hard
// client moved 0.5-1.7 GB a cycle that way where alone it moved nothing
// (docs/handles.md, "The hard loop in lockstep"). Or, with budget_clock_us,
// a modelled clock: each malloc and free stands for
// that many microseconds of the program's work, and each handle moved or
// created is charged its H100 cost, so that a replay decides as a GPU run
// would, and the same way every run (a replay's own driver calls are the
// host backend's, not a GPU's).
//
// Owns: the credit and the clock. Reads the pool's counters (PoolCounters:
// driver_ns, handles_moved whatever moved them, handles_created).
// Owned by the Allocator; every call is made with the pool mutex held.
#pragma once

#include <cstddef>
#include <cstdint>

#include "config/pool_options.hpp"
#include "core/state/counters.hpp"

namespace vpmm {

class DriverBudget {
 public:
  DriverBudget(const PoolOptions& opt, const PoolCounters& c);

  // No budget: page-exact within remap_slack at any driver cost.
  bool exact() const { return exact_; }
  // Every malloc and free: the modelled clock's step, or every
  // kSampleOps-th one a look at the wall clock (the working time's sample).
  void tick() {
    if (model_op_ns_)
      model_now_ += model_op_ns_;
    else if (__builtin_expect((++ops_ & (kSampleOps - 1)) == 0, 0))
      sample();
  }
  // Whether the credit pays for moving `handles` handles now.
  bool can_move(size_t handles);
  // What a moved handle is charged (unmap + set-access + map at H100 cost).
  static uint64_t move_ns(size_t handles);

 private:
  // The working time (ns), or the modelled clock.
  uint64_t now_ns();
  // Adds the wall clock's stretch since the last sample to the working
  // time, at most kMaxStretchNs of it.
  void sample();
  double burst_ns() const;
  void accrue();

  // What the pool's counters say it spent since the last look.
  double spent_ns();

  const PoolCounters& c_;
  uint64_t moved_seen_ = 0, created_seen_ = 0, driver_seen_ = 0;  // counters already charged
  const double share_;   // of elapsed time; <= 0 when never or exact
  const bool exact_;
  const bool never_;
  const uint64_t model_op_ns_;  // 0: the wall clock
  uint64_t model_now_ = 0;
  uint64_t last_ns_ = 0;
  double credit_ = 0.0;  // ns
  bool refilling_ = false;  // a move was refused: none until the bucket is full
  // 64 mallocs and frees are well under a millisecond of a training step's
  // work. A clock read (31 ns on the development machine) every 64th is
  // 0.5 ns a call; the counter and its branch cost the host's large
  // alloc+free pairs ~10 ns in all (docs/handles.md, "What shipped").
  static constexpr uint32_t kSampleOps = 64;
  // A stretch of 64 calls longer than this is counted as this much work:
  // the rest was the program waiting (its turn, a rollout, a data stall).
  static constexpr uint64_t kMaxStretchNs = 100'000'000;
  uint32_t ops_ = 0;
  uint64_t sampled_ns_ = 0;  // the wall clock at the last sample
  uint64_t work_ns_ = 0;     // the working time up to it
};

}  // namespace vpmm
