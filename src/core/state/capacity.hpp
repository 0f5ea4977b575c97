// Capacity: what the pool may hold and who it is promised to (after
// cuCascade's reservation model). It owns the hard limit, the capacity (the
// limit, else the device's memory), reservations and the charges made
// against them or the unreserved share, the bytes growths in flight are
// creating, watermarks with hysteresis, the OOM and pressure callbacks and
// the threads blocked in a reservation.
//
// It knows nothing of regions: the pool tells it what it charges, maps and
// frees. Every method is called with the pool mutex held (reserve takes the
// caller's lock to wait on); the callbacks are handed out to be called
// without it.
//
// Invariant: sum over reservations of max(size, used) + unreserved_live
// <= capacity whenever admission is enforced (a limit is set or a
// reservation exists); mapped bytes <= limit whenever a limit is set.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <set>
#include <vector>

#include "common/status.hpp"
#include "config/defaults.hpp"
#include "core/state/pool_mutex.hpp"
#include "vpmm.h"

namespace vpmm {

struct Reservation {
  uint64_t size = 0;
  uint64_t used = 0;
  uint32_t flags = 0;
};

class Capacity {
 public:
  Capacity() = default;
  ~Capacity();
  Capacity(const Capacity&) = delete;
  Capacity& operator=(const Capacity&) = delete;

  // limit 0 = none; device_total 0 = unknown.
  void init(uint64_t limit, uint64_t device_total, double trigger_fraction, double stop_fraction);

  // --- charges ---------------------------------------------------------
  // Charges `charge` bytes to res (or the unreserved share) if capacity
  // allows; OUT_OF_MEMORY with a message otherwise.
  vpmm_status admit(uint64_t charge, Reservation* res);
  void uncharge(uint64_t charge, Reservation* res) {
    if (res)
      res->used -= charge;
    else
      unreserved_live_ -= charge;
  }
  // Charges that lost their reservation (released) become unreserved.
  void charge_unreserved(uint64_t bytes) { unreserved_live_ += bytes; }

  // --- growth against the hard limit -------------------------------------
  // OUT_OF_MEMORY when `mapped` plus what growths in flight are creating
  // plus `bytes` would pass the limit.
  vpmm_status check_growth(uint64_t mapped, uint64_t bytes) const;
  // The same question without the failure's message (a planning guess).
  bool growth_fits(uint64_t mapped, uint64_t bytes) const { return !limit_ || mapped + creating_ + bytes <= limit_; }
  // Bytes created (or resumed) but not yet in the region map's totals.
  void creating(uint64_t bytes) { creating_ += bytes; }
  void created(uint64_t bytes) { creating_ -= bytes; }

  // --- reservations ------------------------------------------------------
  // Waits on `lock` (the pool's) for VPMM_RESERVE_BLOCK.
  vpmm_status reserve(uint64_t bytes, uint32_t flags, uint64_t timeout_ns,
                      PoolLock& lock, Reservation** out);
  bool is_live(const Reservation* r) const {
    return reservations_.count(const_cast<Reservation*>(r)) != 0;
  }
  vpmm_status info(const Reservation* r, uint64_t* size, uint64_t* used) const;
  // Release in two steps, so that the pool can move the charges of r's
  // allocations to the unreserved share in between: `prepare` validates r
  // and makes sure `finish` cannot fail; `finish` forgets r. Handles are
  // never reused: a released reservation stays allocated (24 bytes) until
  // the pool goes, so a stale handle can never name a new reservation.
  vpmm_status prepare_release(const Reservation* r);
  void finish_release(Reservation* r);

  // --- the limit ---------------------------------------------------------
  uint64_t limit() const { return limit_; }
  void set_limit(uint64_t bytes);

  // --- watermarks --------------------------------------------------------
  // Records a crossing at `mapped`; returns 0/1 to report to the pressure
  // callback (after unlocking), -1 for none.
  int take_transition(uint64_t mapped);

  // --- callbacks and waiters ---------------------------------------------
  void set_oom_callback(vpmm_oom_fn fn, void* user) {
    oom_fn_ = fn;
    oom_user_ = user;
  }
  void set_pressure_callback(vpmm_pressure_fn fn, void* user) {
    pressure_fn_ = fn;
    pressure_user_ = user;
  }
  vpmm_oom_fn oom_fn() const { return oom_fn_; }
  void* oom_user() const { return oom_user_; }
  vpmm_pressure_fn pressure_fn() const { return pressure_fn_; }
  void* pressure_user() const { return pressure_user_; }
  // After anything that frees capacity. Cheap when nobody waits: a free
  // would otherwise pay a broadcast for reservers that rarely exist. Safe
  // without the mutex: a waiter counted itself, under the mutex the change
  // was made under, before testing its condition.
  void wake_reservers() {
    if (waiters_.load(std::memory_order_relaxed)) cv_.notify_all();
  }
  void note_oom() { ++n_oom_; }
  void note_oom_recovered() { ++n_oom_recovered_; }

  // The capacity, reservation, watermark and OOM fields of vpmm_stats.
  void fill_stats(vpmm_stats* s) const;

 private:
  bool enforced() const { return limit_ != 0 || !reservations_.empty(); }
  uint64_t reserved_effective() const;
  uint64_t available() const {
    const uint64_t taken = reserved_effective() + unreserved_live_;
    return taken >= capacity_ ? 0 : capacity_ - taken;
  }
  void set_capacity(uint64_t c);

  // What every malloc and free reads or writes first, together (two cache
  // lines with reservations_, where they were spread over four: inside a
  // program's step each line of the pool is a miss at each call).
  uint64_t limit_ = 0;     // hard cap on mapped bytes; 0 = none
  uint64_t capacity_ = 0;  // limit, else device total
  uint64_t unreserved_live_ = 0;
  uint64_t trigger_ = 0, stop_ = 0;  // watermark bytes
  vpmm_oom_fn oom_fn_ = nullptr;
  void* oom_user_ = nullptr;
  std::atomic<int> waiters_{0};
  bool pressure_ = false;
  std::set<Reservation*> reservations_;
  // The rest.
  uint64_t device_total_ = 0;
  uint64_t creating_ = 0;  // bytes growths (and resumes) in flight are creating
  double trigger_fraction_ = kDefaultWatermarkTrigger, stop_fraction_ = kDefaultWatermarkStop;
  std::vector<Reservation*> released_;
  uint64_t n_oom_ = 0, n_oom_recovered_ = 0;
  std::condition_variable_any cv_;  // blocked reservers wait here (on the pool mutex)
  vpmm_pressure_fn pressure_fn_ = nullptr;
  void* pressure_user_ = nullptr;
};

}  // namespace vpmm
