// The reap step, Phase 0 (see page_steps.hpp): the zombies whose events
// completed are unmapped and become holes, so the next steps see them.
#include "core/alloc/page_steps.hpp"

namespace vpmm {

vpmm_status step_reap(StepContext& ctx, PageCall& call) {
  // Slab pages (no window) are taken with the mutex held, while every other
  // thread's malloc and free waits: their Phase 0 leaves the zombies to the
  // next page-level malloc, whose Phase 0 unmaps them outside the mutex. A
  // backlog unmapped here would stall the whole pool (~31 us a handle).
  if (call.window) call.ops += ctx.defrag.reap_zombies(call.window);
  return kNextStep;
}

}  // namespace vpmm
