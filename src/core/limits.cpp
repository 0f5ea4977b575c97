// Limits, reservations, watermarks and the OOM callback (see limits.hpp).
// Everything here runs under the pool mutex; callbacks run outside it.
#include <chrono>
#include <cinttypes>

#include "common/status.hpp"
#include "core/pool.hpp"
#include "core/small.hpp"

namespace vpmm {

namespace {
constexpr uint32_t kModeMask = VPMM_RESERVE_BLOCK | VPMM_RESERVE_UPTO;
constexpr uint32_t kKnownReserveFlags =
    kModeMask | VPMM_RESERVE_OVERDRAFT_IGNORE | VPMM_RESERVE_OVERDRAFT_GROW;
}  // namespace

vpmm_status Pool::admit(uint64_t charge, Reservation* res) {
  if (res) {
    if (res->used + charge <= res->size) {
      res->used += charge;
      return VPMM_OK;
    }
    const uint64_t over = res->used + charge - res->size;
    if (res->flags & VPMM_RESERVE_OVERDRAFT_IGNORE) {
      if (over > lim_.available())
        return fail(VPMM_ERR_OUT_OF_MEMORY,
                    "allocation of %" PRIu64 " bytes overdraws its reservation by %" PRIu64
                    " bytes and only %" PRIu64 " are available",
                    charge, over, lim_.available());
      res->used += charge;
      return VPMM_OK;
    }
    if (res->flags & VPMM_RESERVE_OVERDRAFT_GROW) {
      uint64_t grow = over + over / 4;
      if (grow > lim_.available()) grow = over;  // at least what is needed
      if (grow <= lim_.available()) {
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
  if (lim_.enforced() && charge > lim_.available())
    return fail(VPMM_ERR_OUT_OF_MEMORY,
                "allocation of %" PRIu64 " bytes exceeds the available capacity (%" PRIu64
                " of %" PRIu64 " bytes; %" PRIu64 " reserved)",
                charge, lim_.available(), lim_.capacity, lim_.reserved_effective());
  lim_.unreserved_live += charge;
  return VPMM_OK;
}

void Pool::uncharge(uint64_t charge, Reservation* res) {
  if (res)
    res->used -= charge;
  else
    lim_.unreserved_live -= charge;
}

vpmm_status Pool::reserve(uint64_t bytes, uint32_t flags, uint64_t timeout_ns, Reservation** out) {
  const char* call = "reserve";
  if (bytes == 0) return fail(VPMM_ERR_INVALID_ARGUMENT, "%s: bytes 0 is not allowed", call);
  if (flags & ~kKnownReserveFlags)
    return fail(VPMM_ERR_INVALID_ARGUMENT, "%s: flags 0x%x has unknown bits", call, flags);
  if ((flags & kModeMask) == kModeMask)
    return fail(VPMM_ERR_INVALID_ARGUMENT, "%s: VPMM_RESERVE_BLOCK and VPMM_RESERVE_UPTO exclude each other", call);
  std::unique_lock<std::mutex> lock(mu_);
  if (bytes > lim_.capacity && !(flags & VPMM_RESERVE_UPTO))
    return fail(VPMM_ERR_OUT_OF_MEMORY, "%s: %" PRIu64 " bytes exceed the capacity of %" PRIu64, call,
                bytes, lim_.capacity);
  if (flags & VPMM_RESERVE_BLOCK) {
    auto ready = [&] { return lim_.available() >= bytes; };
    ++res_waiters_;
    struct Unwait {
      std::atomic<int>* n;
      ~Unwait() { --*n; }
    } unwait{&res_waiters_};
    if (timeout_ns == UINT64_MAX) {
      res_cv_.wait(lock, ready);
    } else if (!res_cv_.wait_for(lock, std::chrono::nanoseconds(timeout_ns), ready)) {
      return fail(VPMM_ERR_TIMEOUT,
                  "%s: timed out after %" PRIu64 " ns waiting for %" PRIu64 " bytes (%" PRIu64
                  " available)",
                  call, timeout_ns, bytes, lim_.available());
    }
  }
  uint64_t avail = lim_.available();
  uint64_t take = bytes;
  if (flags & VPMM_RESERVE_UPTO) take = bytes < avail ? bytes : avail;
  if (take == 0 || take > avail)
    return fail(VPMM_ERR_OUT_OF_MEMORY, "%s: %" PRIu64 " bytes requested, %" PRIu64 " available", call,
                bytes, avail);
  Reservation* r = new Reservation;
  r->size = take;
  r->flags = flags & ~kModeMask;
  lim_.reservations.insert(r);
  *out = r;
  return VPMM_OK;
}

vpmm_status Pool::reservation_info(const Reservation* r, uint64_t* size, uint64_t* used) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!lim_.reservations.count(const_cast<Reservation*>(r)))
    return fail(VPMM_ERR_INVALID_ARGUMENT,
                "vpmm_reservation_info: %p is not a live reservation of this pool", static_cast<const void*>(r));
  if (size) *size = r->size;
  if (used) *used = r->used;
  return VPMM_OK;
}

vpmm_status Pool::release_reservation(Reservation* r) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!lim_.reservations.count(r))
      return fail(VPMM_ERR_INVALID_ARGUMENT,
                  "vpmm_reservation_release: %p is not a live reservation of this pool (released twice?)",
                  static_cast<void*>(r));
    lim_.released.reserve(lim_.released.size() + 1);  // may throw before anything changes
    // Allocations still charged to it stay valid and become unreserved.
    for (auto& kv : m_)
      if (kv.second.res == r) {
        kv.second.res = nullptr;
        // A paused allocation holds no charge until it is resumed.
        if (kv.second.kind != Kind::Paused) lim_.unreserved_live += kv.second.charge;
      }
    lim_.unreserved_live += small_->forget_reservation(r);
    lim_.reservations.erase(r);
    lim_.released.push_back(r);
  }
  wake_reservers();
  return VPMM_OK;
}

vpmm_status Pool::set_limit(uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  if (bytes != 0 && m_.totals().mapped > bytes) {
    release_free(bytes > m_.totals().mapped - m_.totals().free ? bytes - (m_.totals().mapped - m_.totals().free) : 0,
                 true);
    if (m_.totals().mapped > bytes)
      return fail(VPMM_ERR_WRONG_STATE,
                  "vpmm_pool_set_limit: %" PRIu64 " bytes is below the %" PRIu64
                  " bytes still mapped after trimming; the limit stays %" PRIu64,
                  bytes, m_.totals().mapped, lim_.limit);
  }
  lim_.limit = bytes;
  lim_.set_capacity(bytes ? std::min(bytes, opt_.device_total ? opt_.device_total : bytes)
                          : opt_.device_total);
  return VPMM_OK;
}

void Pool::set_oom_callback(vpmm_oom_fn fn, void* user) {
  std::lock_guard<std::mutex> lock(mu_);
  oom_fn_ = fn;
  oom_user_ = user;
}

void Pool::set_pressure_callback(vpmm_pressure_fn fn, void* user) {
  std::lock_guard<std::mutex> lock(mu_);
  pressure_fn_ = fn;
  pressure_user_ = user;
}

void Pool::report_pressure(int transition, uint64_t mapped) {
  vpmm_pressure_fn fn;
  void* user;
  {
    std::lock_guard<std::mutex> lock(mu_);
    fn = pressure_fn_;
    user = pressure_user_;
  }
  if (fn) fn(handle_, transition, mapped, user);
}

}  // namespace vpmm
