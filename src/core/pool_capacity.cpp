// The pool's limit, reservation and callback calls: Capacity decides, the
// pool walks its regions where a decision concerns allocations (a released
// reservation's charges, a lower limit's trim). Callbacks run outside the
// pool mutex.
#include <cinttypes>

#include "core/pool.hpp"
#include "core/small.hpp"

namespace vpmm {

vpmm_status Pool::reserve(uint64_t bytes, uint32_t flags, uint64_t timeout_ns, Reservation** out) {
  std::unique_lock<std::mutex> lock(mu_);
  return cap_.reserve(bytes, flags, timeout_ns, lock, out);
}

vpmm_status Pool::reservation_info(const Reservation* r, uint64_t* size, uint64_t* used) {
  std::lock_guard<std::mutex> lock(mu_);
  return cap_.info(r, size, used);
}

vpmm_status Pool::release_reservation(Reservation* r) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    vpmm_status st = cap_.prepare_release(r);
    if (st != VPMM_OK) return st;
    // Allocations still charged to it stay valid and become unreserved.
    for (auto& kv : m_)
      if (kv.second.res == r) {
        kv.second.res = nullptr;
        // A paused allocation holds no charge until it is resumed.
        if (kv.second.kind != Kind::Paused) cap_.charge_unreserved(kv.second.charge);
      }
    cap_.charge_unreserved(small_->forget_reservation(r));
    cap_.finish_release(r);
  }
  cap_.wake_reservers();
  return VPMM_OK;
}

vpmm_status Pool::set_limit(uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  if (bytes != 0 && m_.totals().mapped > bytes) {
    const uint64_t used = m_.totals().mapped - m_.totals().free;
    release_free(bytes > used ? bytes - used : 0, true);
    if (m_.totals().mapped > bytes)
      return fail(VPMM_ERR_WRONG_STATE,
                  "vpmm_pool_set_limit: %" PRIu64 " bytes is below the %" PRIu64
                  " bytes still mapped after trimming; the limit stays %" PRIu64,
                  bytes, m_.totals().mapped, cap_.limit());
  }
  cap_.set_limit(bytes);
  return VPMM_OK;
}

void Pool::set_oom_callback(vpmm_oom_fn fn, void* user) {
  std::lock_guard<std::mutex> lock(mu_);
  cap_.set_oom_callback(fn, user);
}

void Pool::set_pressure_callback(vpmm_pressure_fn fn, void* user) {
  std::lock_guard<std::mutex> lock(mu_);
  cap_.set_pressure_callback(fn, user);
}

void Pool::report_pressure(int transition, uint64_t mapped) {
  vpmm_pressure_fn fn;
  void* user;
  {
    std::lock_guard<std::mutex> lock(mu_);
    fn = cap_.pressure_fn();
    user = cap_.pressure_user();
  }
  if (fn) fn(handle_, transition, mapped, user);
}

}  // namespace vpmm
