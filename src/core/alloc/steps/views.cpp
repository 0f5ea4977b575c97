// The views step (see page_steps.hpp and view_alloc.hpp): a large request no
// free region fits maps the free handles where they lie at a VA of its own,
// kept for the next request of its size. In the views chain (the default
// before the driver budget), or any chain when view_min_size is set.
#include "core/alloc/page_steps.hpp"

namespace vpmm {

vpmm_status step_views(StepContext& ctx, PageCall& call) {
  ctx.views.note(call.bytes, call.kind, call.attrs, false);
  if (!call.view_va || !ctx.views.wanted(call.bytes, call.kind, call.attrs)) return kNextStep;
  vpmm_status st = ctx.views.malloc(call.bytes, call.stream, call.requested, call.attrs, call.window, call.view_va,
                                    &call.ops, [&] {
                                      return ctx.defrag.planned_handle_ops(call.bytes, call.stream, call.exact,
                                                                           call.ops);
                                    });
  if (st == VPMM_OK) {
    call.out = ctx.m_.end();
    return VPMM_OK;
  }
  return st == ViewAllocator::kDecline ? kNextStep : st;
}

}  // namespace vpmm
