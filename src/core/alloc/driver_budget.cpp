// DriverBudget (see driver_budget.hpp).
#include "core/alloc/driver_budget.hpp"

#include <algorithm>
#include <chrono>

#include "config/defaults.hpp"

namespace vpmm {

namespace {
// The bucket holds at most this much elapsed time's worth of credit: a loop
// that ran a while without moving may move a step's worth at once, but an
// idle pool does not bank a license to remap for a later stretch of steps.
// Ten seconds' worth (100 ms at 1%) banked during the hard client's warm-up
// was spent in its eight measured steps on the H200: up to 1.5 GB moved and
// 3.2% of the step in the driver (docs/handles.md, "Driver time charged").
constexpr double kBurstSeconds = 1.0;
// The handles a new pool's credit pays for (19 ms at H100 cost).
constexpr size_t kStartMoves = 256;
// What the modelled clock charges for a handle created: create, map and
// set-access at H100 cost (the growth's own driver time).
constexpr uint64_t kCreateNs = kModelCreateNs + kModelMapNs + kModelSetAccessNs;

uint64_t wall_ns() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
}
}  // namespace

DriverBudget::DriverBudget(const PoolOptions& opt, const PoolCounters& c)
    : c_(c),
      share_(opt.driver_budget > 0.0 ? opt.driver_budget : 0.0),
      exact_(opt.driver_budget == VPMM_DRIVER_BUDGET_EXACT),
      never_(opt.driver_budget == VPMM_DRIVER_BUDGET_NEVER),
      model_op_ns_(opt.budget_clock_us > 0 ? static_cast<uint64_t>(opt.budget_clock_us) * 1000 : 0) {
  sampled_ns_ = wall_ns();
  last_ns_ = now_ns();
  moved_seen_ = c_.handles_moved;
  created_seen_ = c_.handles_created;
  driver_seen_ = c_.driver_ns;
  // A new pool may move some pages at once (a program's first layout, a
  // test's): a full bucket, or 256 handles' worth where the bucket holds
  // more. A ten-second bucket full at creation spent its 100 ms in the hard
  // client's measured steps on the H200 (2.2-2.7 GB moved over eight steps,
  // 3.5-4.1% of the step in the driver; docs/handles.md), an empty one made
  // every pool grow from its first fragmented request.
  credit_ = std::min(burst_ns(), static_cast<double>(move_ns(kStartMoves)));
}

double DriverBudget::burst_ns() const { return share_ * kBurstSeconds * 1e9; }

void DriverBudget::sample() {
  const uint64_t now = wall_ns();
  if (now > sampled_ns_) work_ns_ += std::min(now - sampled_ns_, kMaxStretchNs);
  sampled_ns_ = std::max(sampled_ns_, now);
}

uint64_t DriverBudget::now_ns() {
  if (model_op_ns_) return model_now_;
  sample();  // the stretch since the last sample counts up to this call
  return work_ns_;
}

void DriverBudget::accrue() {
  // What the driver took since the last look and what the time since
  // accrued, both of the same stretch, before the bucket's cap: a stretch
  // that spent less than its share ends with more credit, one that spent
  // more (a layout's growth) owes the rest.
  const uint64_t now = now_ns();
  credit_ -= spent_ns();
  if (now > last_ns_) credit_ += share_ * static_cast<double>(now - last_ns_);
  last_ns_ = std::max(last_ns_, now);
  credit_ = std::min(credit_, burst_ns());
}

double DriverBudget::spent_ns() {
  // Measured: whatever the driver took in mallocs and frees (moves,
  // creation, events), as the step the user times pays it. Modelled: the
  // same work at H100 cost, every handle moved and every handle created
  // (create, map and set-access).
  const double ns =
      model_op_ns_ ? static_cast<double>(move_ns(c_.handles_moved - moved_seen_) +
                                         (c_.handles_created - created_seen_) * kCreateNs)
                   : static_cast<double>(c_.driver_ns - driver_seen_);
  moved_seen_ = c_.handles_moved;
  created_seen_ = c_.handles_created;
  driver_seen_ = c_.driver_ns;
  return ns;
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
