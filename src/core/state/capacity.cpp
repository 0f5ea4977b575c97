// Capacity (see capacity.hpp).
#include "core/state/capacity.hpp"

#include <algorithm>
#include <chrono>
#include <cinttypes>

namespace vpmm {

namespace {
constexpr uint32_t kModeMask = VPMM_RESERVE_BLOCK | VPMM_RESERVE_UPTO;
constexpr uint32_t kKnownReserveFlags =
    kModeMask | VPMM_RESERVE_OVERDRAFT_IGNORE | VPMM_RESERVE_OVERDRAFT_GROW;
}  // namespace

Capacity::~Capacity() {
  for (Reservation* r : reservations_) delete r;
  for (Reservation* r : released_) delete r;
}

void Capacity::init(uint64_t limit, uint64_t device_total, double trigger_fraction,
                    double stop_fraction) {
  trigger_fraction_ = trigger_fraction;
  stop_fraction_ = stop_fraction;
  device_total_ = device_total;
  limit_ = limit;
  set_capacity(limit ? limit : device_total);
}

void Capacity::set_capacity(uint64_t c) {
  capacity_ = c;
  trigger_ = static_cast<uint64_t>(trigger_fraction_ * static_cast<double>(c));
  stop_ = static_cast<uint64_t>(stop_fraction_ * static_cast<double>(c));
}

void Capacity::set_limit(uint64_t bytes) {
  limit_ = bytes;
  set_capacity(bytes ? std::min(bytes, device_total_ ? device_total_ : bytes) : device_total_);
}

uint64_t Capacity::reserved_effective() const {
  uint64_t s = 0;
  for (const Reservation* r : reservations_) s += r->size > r->used ? r->size : r->used;
  return s;
}

vpmm_status Capacity::admit(uint64_t charge, Reservation* res) {
  if (res) {
    if (res->used + charge <= res->size) {
      res->used += charge;
      return VPMM_OK;
    }
    const uint64_t over = res->used + charge - res->size;
    if (res->flags & VPMM_RESERVE_OVERDRAFT_IGNORE) {
      if (over > available())
        return fail(VPMM_ERR_OUT_OF_MEMORY,
                    "allocation of %" PRIu64 " bytes overdraws its reservation by %" PRIu64
                    " bytes and only %" PRIu64 " are available",
                    charge, over, available());
      res->used += charge;
      return VPMM_OK;
    }
    if (res->flags & VPMM_RESERVE_OVERDRAFT_GROW) {
      uint64_t grow = over + over / 4;
      if (grow > available()) grow = over;  // at least what is needed
      if (grow <= available()) {
        res->size += grow;
        res->used += charge;
        return VPMM_OK;
      }
    }
    return fail(VPMM_ERR_OUT_OF_MEMORY,
                "allocation of %" PRIu64 " bytes exceeds its reservation (%" PRIu64 " of %" PRIu64
                " bytes used)",
                charge, res->used, res->size);
  }
  if (enforced() && charge > available())
    return fail(VPMM_ERR_OUT_OF_MEMORY,
                "allocation of %" PRIu64 " bytes exceeds the available capacity (%" PRIu64
                " of %" PRIu64 " bytes; %" PRIu64 " reserved)",
                charge, available(), capacity_, reserved_effective());
  unreserved_live_ += charge;
  return VPMM_OK;
}

vpmm_status Capacity::check_growth(uint64_t mapped, uint64_t bytes) const {
  const uint64_t held = mapped + creating_;
  if (limit_ && held + bytes > limit_)
    return fail(VPMM_ERR_OUT_OF_MEMORY,
                "growing by %" PRIu64 " bytes would exceed the memory limit (%" PRIu64 " of %" PRIu64
                " bytes mapped or being mapped)",
                bytes, held, limit_);
  return VPMM_OK;
}

vpmm_status Capacity::reserve(uint64_t bytes, uint32_t flags, uint64_t timeout_ns,
                              PoolLock& lock, Reservation** out) {
  const char* call = "reserve";
  if (bytes == 0) return fail(VPMM_ERR_INVALID_ARGUMENT, "%s: bytes 0 is not allowed", call);
  if (flags & ~kKnownReserveFlags)
    return fail(VPMM_ERR_INVALID_ARGUMENT, "%s: flags 0x%x has unknown bits", call, flags);
  if ((flags & kModeMask) == kModeMask)
    return fail(VPMM_ERR_INVALID_ARGUMENT, "%s: VPMM_RESERVE_BLOCK and VPMM_RESERVE_UPTO exclude each other", call);
  if (bytes > capacity_ && !(flags & VPMM_RESERVE_UPTO))
    return fail(VPMM_ERR_OUT_OF_MEMORY, "%s: %" PRIu64 " bytes exceed the capacity of %" PRIu64, call,
                bytes, capacity_);
  if (flags & VPMM_RESERVE_BLOCK) {
    auto ready = [&] { return available() >= bytes; };
    ++waiters_;
    struct Unwait {
      std::atomic<int>* n;
      ~Unwait() { --*n; }
    } unwait{&waiters_};
    if (timeout_ns == UINT64_MAX) {
      cv_.wait(lock, ready);
    } else if (!cv_.wait_for(lock, std::chrono::nanoseconds(timeout_ns), ready)) {
      return fail(VPMM_ERR_TIMEOUT,
                  "%s: timed out after %" PRIu64 " ns waiting for %" PRIu64 " bytes (%" PRIu64
                  " available)",
                  call, timeout_ns, bytes, available());
    }
  }
  const uint64_t avail = available();
  uint64_t take = bytes;
  if (flags & VPMM_RESERVE_UPTO) take = bytes < avail ? bytes : avail;
  if (take == 0 || take > avail)
    return fail(VPMM_ERR_OUT_OF_MEMORY, "%s: %" PRIu64 " bytes requested, %" PRIu64 " available", call,
                bytes, avail);
  Reservation* r = new Reservation;
  r->size = take;
  r->flags = flags & ~kModeMask;
  reservations_.insert(r);
  *out = r;
  return VPMM_OK;
}

vpmm_status Capacity::info(const Reservation* r, uint64_t* size, uint64_t* used) const {
  if (!is_live(r))
    return fail(VPMM_ERR_INVALID_ARGUMENT,
                "vpmm_reservation_info: %p is not a live reservation of this pool", static_cast<const void*>(r));
  if (size) *size = r->size;
  if (used) *used = r->used;
  return VPMM_OK;
}

vpmm_status Capacity::prepare_release(const Reservation* r) {
  if (!is_live(r))
    return fail(VPMM_ERR_INVALID_ARGUMENT,
                "vpmm_reservation_release: %p is not a live reservation of this pool (released twice?)",
                static_cast<const void*>(r));
  released_.reserve(released_.size() + 1);  // may throw before anything changes
  return VPMM_OK;
}

void Capacity::finish_release(Reservation* r) {
  reservations_.erase(r);
  released_.push_back(r);
}

int Capacity::take_transition(uint64_t mapped) {
  if (!pressure_ && capacity_ && mapped >= trigger_) {
    pressure_ = true;
    return 1;
  }
  if (pressure_ && mapped <= stop_) {
    pressure_ = false;
    return 0;
  }
  return -1;
}

void Capacity::fill_stats(vpmm_stats* s) const {
  s->capacity_bytes = capacity_;
  s->reserved_bytes = 0;
  uint64_t used = 0;
  for (const Reservation* r : reservations_) {
    s->reserved_bytes += r->size;
    used += r->used;
  }
  s->reservation_used_bytes = used;
  s->available_bytes = available();
  s->watermark_trigger_bytes = trigger_;
  s->watermark_stop_bytes = stop_;
  s->under_pressure = pressure_ ? 1 : 0;
  s->n_oom = n_oom_;
  s->n_oom_recovered = n_oom_recovered_;
}

}  // namespace vpmm
