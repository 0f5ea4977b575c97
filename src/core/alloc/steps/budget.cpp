// The budget step (see page_steps.hpp and driver_budget.hpp): before Phase 2
// moves pages, it asks what the move would cost and whether the driver
// budget can pay for it. When it cannot, the request grows by what it lacks
// instead (a join with the caller's free region beside a hole, or a fresh
// span), so that the step time the user sees is not spent in the driver:
// the loop finds the grown memory in place at every later step, as PyTorch's
// expandable segments do, but only where moving would have cost time.
// Before it grows, it takes another stream's pending free in place (after
// a GPU-side wait) where one fits. Memory comes first where it must: past
// memory_limit, or past the growth ceiling (kBudgetGrowthCeiling over the
// bytes asked for, kBudgetPeakAllowance over the peak), or when the driver
// refuses to create, the request goes on to Phase 2 and pages move.
#include <algorithm>

#include "core/alloc/page_steps.hpp"

namespace vpmm {

vpmm_status step_budget(StepContext& ctx, PageCall& call) {
  // Tagged memory owns whole handles of exactly its size: no slack to grow into.
  if (call.exact || ctx.budget.exact()) return kNextStep;
  const Defrag::PlanCost cost = ctx.defrag.plan_costs(call.bytes, call.stream, call.ops);
  if (cost.moved_handles > 0 && ctx.budget.can_move(cost.moved_handles)) return kNextStep;  // pays: stay page-exact
  // Refused, or Phase 2 would move nothing and only grow by the whole
  // request: first another stream's free region that fits whole though its
  // work is still queued, in place after a GPU-side wait, which is what
  // Phase 2 would have harvested page by page at a new VA, with no page
  // moved and nothing grown. Live on the H200 the hard client's side stream
  // frees its gather buffers while the GPU is behind; a budget that grew
  // past them held 1.0965x live, a chain that took them 1.0097x
  // (docs/handles.md, "Pending frees instead of growth"). A pool whose
  // budget pays (every new pool, with its starting credit) harvests them as
  // the design's Phase 2 does.
  if (step_pending_reuse(ctx, call) == VPMM_OK) return VPMM_OK;
  if (cost.moved_handles == 0) return kNextStep;  // Phase 2 only grows: nothing to save
  if (!ctx.st_.growth_fits(cost.growth)) return kNextStep;
  // The ceiling is over the bytes asked for now (a 10% ceiling over the
  // loop's peak took the hard client on the H200 to 1.098-1.099x live, still
  // moving 0.4-1.0 GB over eight steps; over the moment it held 1.061-1.078x
  // for the same driver share: docs/handles.md, "A driver-time budget"), or,
  // when that is less, a 3% allowance over the peak, so that a loop's small
  // steps grow a little rather than move.
  const double asked = static_cast<double>(ctx.c_.requested + call.bytes);
  const double ceiling = std::max((1.0 + kBudgetGrowthCeiling) * asked,
                                  (1.0 + kBudgetPeakAllowance) * static_cast<double>(ctx.c_.peak_live));
  if (static_cast<double>(ctx.m_.totals().mapped + cost.growth) > ceiling) return kNextStep;
  RegionIt r;
  vpmm_status st = ctx.defrag.defragment(call.bytes, call.stream, false, nullptr, call.window, &r, &call.ops, true);
  // Another thread took the caller's neighbour meanwhile: again, with the mutex held.
  if (st == VPMM_OK && r->second.size < call.bytes)
    st = ctx.defrag.defragment(call.bytes, call.stream, false, nullptr, nullptr, &r, &call.ops, true);
  if (st == VPMM_ERR_OUT_OF_MEMORY) return kNextStep;  // the driver refused: moving may still serve
  if (st != VPMM_OK) return st;
  ++ctx.c_.n_budget_grow;
  ctx.c_.bytes_budget_grown += cost.growth;
  call.out = r;
  return VPMM_OK;
}

}  // namespace vpmm
