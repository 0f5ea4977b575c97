// PoolCounters: the pool's running statistics that the region map's totals
// do not give (calls made, bytes moved, peaks, driver time), and DriverTally,
// which hands a malloc's or free's driver time to them. Owned by PoolState;
// every collaborator counts what it does, under the pool mutex.
#pragma once

#include <cstdint>

#include "backend/backend.hpp"

namespace vpmm {

// What every malloc and free updates comes first, in one cache line: inside
// a program's step the pool's data is out of the caches at each call, and
// these eight were spread over two (docs/handles.md, "Where the hard loop's
// host time goes").
struct PoolCounters {
  alignas(64) uint64_t n_malloc = 0;  // the struct, and so this line, on a cache line of its own
  uint64_t n_free = 0, n_small_malloc = 0, n_defrag = 0;
  uint64_t requested = 0, n_live = 0, peak_mapped = 0, peak_live = 0;
  uint64_t n_grow = 0, pages_created = 0, bytes_remapped = 0, handles_created = 0;
  uint64_t n_cross_stream_reuse = 0, n_stream_waits = 0;
  uint64_t n_events_recorded = 0, n_zombies_reaped = 0;
  uint64_t n_pause = 0, n_resume = 0, n_trim = 0, bytes_trimmed = 0, backup_bytes = 0;
  uint64_t driver_ns = 0, driver_calls = 0;  // spent in the driver by malloc and free
  uint64_t n_view_malloc = 0, n_view_reuse = 0;  // served by a view; of them, with no driver call
  // Handles moved to keep memory page-exact (Phase 2's harvests, views'
  // refills): what the driver budget charges (core/alloc/driver_budget.hpp).
  uint64_t handles_moved = 0;
  // Requests the budget step served by growing instead of moving, and the
  // bytes those growths created.
  uint64_t n_budget_grow = 0, bytes_budget_grown = 0;
};

// Hands the driver time its thread spent during a malloc or free to the
// counters if the call succeeded (keep()): a failed malloc leaves every
// statistic as it was. Made right after the pool mutex is taken, destroyed
// before it is released. The thread's clock is read only if some driver call
// happened meanwhile (the process-wide count moved): the hot path reads two
// relaxed counters. Pool calls that are not malloc or free drop what their
// driver calls left on the thread's clock (drop_driver_time()).
class DriverTally {
 public:
  explicit DriverTally(PoolCounters& c) : c_(c), start_(driver_calls_so_far()) {}
  ~DriverTally() {
    if (driver_calls_so_far() == start_) return;
    const DriverClock spent = take_thread_driver_clock();
    if (!keep_) return;
    c_.driver_ns += spent.ns;
    c_.driver_calls += spent.calls;
  }
  void keep(bool ok) { keep_ = ok; }
  DriverTally(const DriverTally&) = delete;
  DriverTally& operator=(const DriverTally&) = delete;

 private:
  PoolCounters& c_;
  uint64_t start_;
  bool keep_ = false;
};
// What pause, resume, trim and the other pool calls left on the thread's
// driver clock is theirs, not the next malloc's.
inline void drop_driver_time() { (void)take_thread_driver_clock(); }

}  // namespace vpmm
