// Limits and reservations (after cuCascade's reservation model): a capacity
// (the hard limit, else the device's memory), reservations that promise part
// of it to an owner, charges of live allocations against either a reservation
// or the unreserved share, and watermarks with hysteresis.
//
// Invariant: sum over reservations of max(size, used) + unreserved_live
// <= capacity whenever admission is enforced (a limit is set or a
// reservation exists); mapped bytes <= limit whenever a limit is set.
#pragma once

#include <cstdint>
#include <set>
#include <vector>

#include "core/defaults.hpp"

namespace vpmm {

struct Reservation {
  uint64_t size = 0;
  uint64_t used = 0;
  uint32_t flags = 0;
};

struct LimitState {
  uint64_t limit = 0;     // hard cap on mapped bytes; 0 = none
  uint64_t capacity = 0;  // limit, else device total
  uint64_t trigger = 0, stop = 0;  // watermark bytes
  double trigger_fraction = kDefaultWatermarkTrigger, stop_fraction = kDefaultWatermarkStop;
  bool pressure = false;
  int pending_transition = -1;  // 0/1 to report to the pressure callback, -1 none
  std::set<Reservation*> reservations;
  // Released reservations, kept until the pool goes: their addresses are the
  // handles users hold, and a new reservation at a released one's address
  // would let a stale handle act on it (the pools' own handles are never
  // reused either). 24 bytes each.
  std::vector<Reservation*> released;
  uint64_t unreserved_live = 0;
  uint64_t n_oom = 0, n_oom_recovered = 0;

  uint64_t reserved_effective() const {
    uint64_t s = 0;
    for (const Reservation* r : reservations) s += r->size > r->used ? r->size : r->used;
    return s;
  }
  uint64_t reserved_used() const {
    uint64_t s = 0;
    for (const Reservation* r : reservations) s += r->used;
    return s;
  }
  bool enforced() const { return limit != 0 || !reservations.empty(); }
  uint64_t available() const {
    uint64_t taken = reserved_effective() + unreserved_live;
    return taken >= capacity ? 0 : capacity - taken;
  }
  void set_capacity(uint64_t c) {
    capacity = c;
    trigger = static_cast<uint64_t>(trigger_fraction * static_cast<double>(c));
    stop = static_cast<uint64_t>(stop_fraction * static_cast<double>(c));
  }
  // Records a watermark crossing for the caller to report after unlocking.
  void observe(uint64_t mapped) {
    if (!pressure && capacity && mapped >= trigger) {
      pressure = true;
      pending_transition = 1;
    } else if (pressure && mapped <= stop) {
      pressure = false;
      pending_transition = 0;
    }
  }
};

}  // namespace vpmm
