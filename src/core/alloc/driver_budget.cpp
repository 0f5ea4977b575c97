// DriverBudget (see driver_budget.hpp).
#include "core/alloc/driver_budget.hpp"

#include <algorithm>
#include <chrono>

#include "config/defaults.hpp"

namespace vpmm {

namespace {
// The bucket holds at most this much elapsed time's worth of credit: a loop
// that ran ten seconds without moving may move a step's worth at once, but
// an idle pool does not bank a license to remap for minutes.
constexpr double kBurstSeconds = 10.0;
// The handles a new pool's credit pays for (19 ms at H100 cost).
constexpr size_t kStartMoves = 256;
}  // namespace

DriverBudget::DriverBudget(const PoolOptions& opt, const PoolCounters& c)
    : c_(c),
      share_(opt.driver_budget > 0.0 ? opt.driver_budget : 0.0),
      exact_(opt.driver_budget == VPMM_DRIVER_BUDGET_EXACT),
      never_(opt.driver_budget == VPMM_DRIVER_BUDGET_NEVER),
      model_op_ns_(opt.budget_clock_us > 0 ? static_cast<uint64_t>(opt.budget_clock_us) * 1000 : 0) {
  last_ns_ = now_ns();
  // A new pool may move a few hundred pages at once (a program's first
  // layout, a test's), not a full bucket: a full one at creation spent its
  // 100 ms in the hard client's measured steps on the H200 (2.2-2.7 GB
  // moved over eight steps, 3.5-4.1% of the step in the driver;
  // docs/handles.md), an empty one made every pool grow from its first
  // fragmented request.
  credit_ = std::min(burst_ns(), static_cast<double>(move_ns(kStartMoves)));
}

double DriverBudget::burst_ns() const { return share_ * kBurstSeconds * 1e9; }

uint64_t DriverBudget::now_ns() const {
  if (model_op_ns_) return model_now_;
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
}

void DriverBudget::accrue() {
  const uint64_t now = now_ns();
  if (now > last_ns_) credit_ += share_ * static_cast<double>(now - last_ns_);
  last_ns_ = std::max(last_ns_, now);
  credit_ = std::min(credit_, burst_ns());
  // Every handle moved since: its modelled cost leaves the credit.
  credit_ -= static_cast<double>(move_ns(c_.handles_moved - moved_seen_));
  moved_seen_ = c_.handles_moved;
}

uint64_t DriverBudget::move_ns(size_t handles) {
  return static_cast<uint64_t>(handles) * (kModelUnmapNs + kModelSetAccessNs + kModelMapNs);
}

bool DriverBudget::can_move(size_t handles) {
  if (exact_) return true;
  if (never_) return false;
  accrue();
  if (refilling_) {
    // Still refilling: the wait starts again. Moves resume only after a
    // bucket's time in which the pool was not asked to move at all (the
    // loop settled); a loop whose every step asks stays grown.
    if (credit_ < burst_ns()) {
      credit_ = std::min(credit_, 0.0);
      return false;
    }
    refilling_ = false;
  }
  if (credit_ >= static_cast<double>(move_ns(handles))) return true;
  // Refused: what is left is forfeit, so the pool grows for a whole
  // bucket's time before it moves again (see the header).
  refilling_ = true;
  credit_ = std::min(credit_, 0.0);
  return false;
}

}  // namespace vpmm
