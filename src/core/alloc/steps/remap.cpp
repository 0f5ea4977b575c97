// The remap step, Phase 2 (see page_steps.hpp and defrag.hpp): a hole takes
// free regions' whole handles by remapping (the caller's stream first, then
// others oldest first, with a GPU-side wait for pending foreign events), the
// pool creates only the shortfall, and the combined span serves the request.
// Within remap_slack it grows instead of moving.
#include <vector>

#include "core/alloc/page_steps.hpp"

namespace vpmm {

vpmm_status step_remap(StepContext& ctx, PageCall& call) {
  RegionIt r;
  std::vector<Defrag::MergeUndo> merges;
  vpmm_status st = ctx.defrag.defragment(call.bytes, call.stream, call.exact, &merges, call.window, &r, &call.ops);
  if (st == Defrag::kRetryPhase1) {
    // Phase 2 merged free regions that straddled a handle: one of them may
    // now fit in place, with no remap at all.
    r = best_fit_same_stream(ctx, call.bytes, call.stream, call.exact);
    if (r == ctx.m_.end()) r = best_fit_other(ctx, call.bytes, call.stream, call.exact, true);
    if (r == ctx.m_.end()) st = ctx.defrag.defragment(call.bytes, call.stream, call.exact, nullptr, call.window, &r,
                                                      &call.ops);
    else st = VPMM_OK;
    // A failed malloc changes nothing; if another thread changed the map
    // while this one was mapping, the merges (harmless: completed free
    // memory, one region instead of two) stay.
    if (st != VPMM_OK && !(call.window && call.window->others_changed())) ctx.defrag.undo_merges(merges);
  }
  if (st != VPMM_OK) return st;
  // The span counted on the caller's free neighbour of the hole; another
  // thread may have taken it while the mutex was released. Try again with
  // the mutex held: the new span itself is now the caller's to harvest.
  if (r->second.size < call.bytes) {
    st = ctx.defrag.defragment(call.bytes, call.stream, call.exact, nullptr, nullptr, &r, &call.ops);
    if (st != VPMM_OK) return st;
  }
  call.remapped = true;
  call.out = r;
  return VPMM_OK;
}

}  // namespace vpmm
