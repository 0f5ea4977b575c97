// The placement chain (docs/design.md, "Placement as a chain of steps"): a
// page-level request runs the steps its pool's chain names, in order, until
// one serves it. The chains are rows of config/defaults.hpp
// (kPlacementChains, VPMM_PLACEMENT); each step is one file of steps/ and
// one line of page_steps.cpp's table:
//
//   reap           Phase 0: unmap the zombies whose events completed
//   best_fit       Phase 1: best fit on the caller's stream, then the smallest
//                  completed free region of another stream
//   pending_reuse  another stream's pending free region whole, in place,
//                  after a GPU-side wait (VPMM_PLACEMENT=pending)
//   views          a view maps the free handles where they lie (view_alloc.hpp)
//   budget         grow by what the request lacks instead of moving pages
//                  when the driver budget cannot pay for the move
//   remap          Phase 2: move free pages into one span, grow the shortfall
//
// A step returns kNextStep to pass the request on, VPMM_OK once the request
// is served (call.out a free region of at least call.bytes on the caller's
// stream, or *call.view_va a view), any other status to fail the malloc.
// Every step runs with the pool mutex held; a window lets driver calls run
// without it (LockWindow).
//
// Memory between streams: a step that hands the caller memory another
// stream freed while that stream's work is still queued makes the caller's
// stream wait for it on the GPU and sets call.waited; the carve
// (Allocator::finish_pages, ViewAllocator's commit) then gives the
// allocation a fresh point of its own stream (PoolState::handover_seq), so
// a later free on a third stream is ordered after the lender's work too.
#pragma once

#include <cstddef>
#include <cstdint>

#include "config/defaults.hpp"
#include "core/alloc/defrag.hpp"
#include "core/alloc/driver_budget.hpp"
#include "core/alloc/lock_window.hpp"
#include "core/alloc/view_alloc.hpp"
#include "core/state/pool_state.hpp"

namespace vpmm {

// One page-level request as the steps see it, and what they found.
struct PageCall {
  uint64_t bytes = 0;      // what the region must hold (page multiple, or of large_rounding untagged)
  uint64_t requested = 0;  // the caller's size (0: slab pages)
  Stream stream = nullptr;
  Kind kind = Kind::Live;
  Attrs attrs;
  bool exact = false;            // tagged: a run of whole handles of exactly `bytes`
  LockWindow* window = nullptr;  // driver calls may run without the mutex
  uint64_t* view_va = nullptr;   // non-null: a view may serve the request
  RegionIt out;                  // the region found (valid once a step served)
  size_t ops = 0;                // handles unmapped or mapped so far
  bool remapped = false;         // Phase 2 ran: the carve reaps its harvest
  bool fit = false;              // Phase 1 found a region (the view gate counts it)
  bool waited = false;           // the stream waits on the GPU for another stream's work
  bool carved = false;           // the allocation was cut from `out` (finish_pages)
};

// What the steps work with: the pool's state and the allocator's parts.
struct StepContext : StateRefs {
  StepContext(PoolState& st, Defrag& d, ViewAllocator& v, DriverBudget& b)
      : StateRefs(st), defrag(d), views(v), budget(b) {}
  Defrag& defrag;
  ViewAllocator& views;
  DriverBudget& budget;
  bool views_in_chain = false;  // the view gate hears every request's Phase 1 result
};

// A step passes the request on to the next.
constexpr vpmm_status kNextStep = -104;
using PageStep = vpmm_status (*)(StepContext& ctx, PageCall& call);
// The step a chain names.
PageStep page_step(PageStepId id);

// The steps (steps/*.cpp).
vpmm_status step_reap(StepContext& ctx, PageCall& call);
vpmm_status step_best_fit(StepContext& ctx, PageCall& call);
vpmm_status step_pending_reuse(StepContext& ctx, PageCall& call);
vpmm_status step_views(StepContext& ctx, PageCall& call);
vpmm_status step_budget(StepContext& ctx, PageCall& call);
vpmm_status step_remap(StepContext& ctx, PageCall& call);

// Phase 1's searches (steps/best_fit.cpp), which Phase 2's retry and the
// pending-reuse step use too.
RegionIt best_fit_same_stream(StateRefs& ctx, uint64_t bytes, Stream s, bool exact);
// The smallest candidate of the other streams by its whole index key (size,
// id, va); completed_only: only regions whose stream's work before the free is done.
RegionIt best_fit_other(StateRefs& ctx, uint64_t bytes, Stream s, bool exact, bool completed_only);
// Offset of a run of whole handles inside [va, va+size) that adds up to
// exactly `bytes`; UINT64_MAX when there is none.
uint64_t exact_run(const RegionMap& m, uint64_t va, uint64_t size, uint64_t bytes);

}  // namespace vpmm
