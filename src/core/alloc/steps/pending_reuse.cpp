// The pending-reuse step (see page_steps.hpp; the pending chain, any chain
// with the legacy VPMM_PENDING_REUSE=1, and the budget step before it
// grows): a free region of another
// stream that fits whole, though that stream's work before the free is
// still queued, taken after a GPU-side wait of the caller's stream on it
// (the CPU never blocks), as vpmm_pool_malloc's contract allows ("inserts a
// GPU-side wait") and as Phase 2 takes such memory page by page. A GPU
// running behind the CPU leaves most of another stream's frees pending
// (`vpmm replay --gpu-lag`); a chain without this step then grew or moved
// pages while a region that fit lay free: live, the hard client held
// 1.0965x without it and 1.0097x with it (docs/handles.md, "Pending frees
// instead of growth"). Not a step of its own in the default chain: there
// Phase 1 hands another stream's VA over only once its work completed (the
// design's rule), and where the budget pays, Phase 2 harvests such memory
// at a new VA as the design does; only a request the budget would grow for
// (a refused move, or nothing Phase 2 could move) takes it in place.
// Where every event has completed (host replays) Phase 1 saw
// the same regions and this finds nothing more. The memory is handed over
// under the one rule of "Memory between streams" (docs/design.md).
#include "core/alloc/page_steps.hpp"

namespace vpmm {

namespace {
// The step takes a region at most this many times the request: a small
// request carved from a much larger pending region leaves the large
// requests after it (the hard client's logits) to remap or grow. Measured
// with `vpmm replay --gpu-lag` on two recordings of the hard client at five
// lags (docs/handles.md, "The GPU's lag on the host"): 8 kept every cell
// at 11-15% second-half remapping under views; no bound left three at
// 24-27% and took the views-off policy to 1.022x.
constexpr uint64_t kPendingFitMax = 8;
}  // namespace

vpmm_status step_pending_reuse(StepContext& ctx, PageCall& call) {
  RegionIt best = best_fit_other(ctx, call.bytes, call.stream, call.exact, false);
  if (best == ctx.m_.end() || best->second.size / kPendingFitMax > call.bytes) return kNextStep;
  EventRef ev;
  bool done = false;
  if (ctx.st_.event_of(best->second, &ev) != VPMM_OK || ctx.st_.query(ev, &done) != VPMM_OK) return kNextStep;
  if (!done) {
    if (ctx.backend_->stream_wait(call.stream, ev->handle()) != VPMM_OK) return kNextStep;
    ++ctx.c_.n_stream_waits;
    call.waited = true;  // the lender's work: see "Memory between streams"
  }
  ++ctx.c_.n_cross_stream_reuse;
  call.fit = true;
  if (ctx.views_in_chain) ctx.views.note(call.bytes, call.kind, call.attrs, true);
  call.out = best;
  return VPMM_OK;
}

}  // namespace vpmm
