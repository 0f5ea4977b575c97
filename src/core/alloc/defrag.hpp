// Defrag: Phase 0 (reaping zombies) and Phase 2 (defragmentation by
// remapping) of the default placement (docs/design.md, "malloc").
//
// Phase 2 runs in steps so that its driver calls can run without the pool
// mutex: plan (choose the hole and what moves, within the remap slack),
// wait (events; GPU-side waits on pending foreign work), claim (the plan's
// regions leave every index, so no other thread takes them), map (driver
// calls: outside the mutex when there is a window), then commit, or abandon,
// which puts every claimed region back. A failure leaves no backend effect
// behind (map_transit undoes its own).
//
// Owns: nothing between calls (a call's plan lives in its Transit).
// May call: PoolState (map, counters, events, handles), the small
// allocator's cached bytes (peaks). Owned by the Allocator; every call is
// made with the pool mutex held (a window releases it around driver calls).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/alloc/lock_window.hpp"
#include "core/alloc/small.hpp"
#include "core/state/pool_state.hpp"

namespace vpmm {

// Driver work one malloc does on handles, in map + set-access and unmap
// calls (30-45 us each on an H100, per handle whatever its size). Phase 0
// unmaps every zombie whose event completed (the seed's contract: the next
// call finds them gone). A defragmentation may always map as many handles as
// its request has pages: that is the work the request needs, and
// page-exact memory comes first. Whole-region moves beyond that (case B's
// consolidation) and the unmaps of the call's own harvest's old VAs share
// what is left of this budget; zombies left over are the next call's Phase 0.
constexpr size_t kHandleOpsPerCall = 24;
// A free region moves whole into the span (consolidation, the walkthrough's
// case B) only if that moves at most this many handles beyond what the
// request needs: with page handles a whole 64 MiB region for a 32 MiB request
// would double the call's driver work.
constexpr size_t kWholeMoveExtraHandles = 8;

struct Transit;

class Defrag : private StateRefs {
 public:
  Defrag(PoolState& st, const SmallAllocator& small);

  // Phase 0: unmaps the old VAs of zombies whose events completed (at most
  // `budget` handles) and turns them into holes. With a window the unmaps run
  // outside the mutex. Returns the number of handles unmapped.
  size_t reap_zombies(LockWindow* window = nullptr, size_t budget = SIZE_MAX) {
    return m_.zombies().empty() ? 0 : reap_completed_zombies(window, budget);
  }

  // Internal status of defragment: it merged regions, run Phase 1 again.
  static constexpr vpmm_status kRetryPhase1 = -100;
  struct MergeUndo {
    uint64_t left_va;
    Region left;
    uint64_t right_va;
    Region right;
  };
  // Phase 2 for `bytes` on stream s: *out is a free region of s of at least
  // `bytes`. With `merges`, it may first merge completed free regions that
  // straddle a handle (recorded there so a later failure can undo them) and
  // ask for Phase 1 again (kRetryPhase1). `handle_ops`, if given, adds the
  // handles this call mapped.
  // grow_only: the span moves no handle; it grows by all it lacks (the
  // budget step's plan).
  vpmm_status defragment(uint64_t bytes, Stream s, bool exact, std::vector<MergeUndo>* merges,
                         LockWindow* window, RegionIt* out, size_t* handle_ops, bool grow_only = false);
  // What Phase 2 would do now for an untagged `bytes` on stream s, without
  // doing it: the handles its plan moves, and the bytes a plan that moves
  // nothing would create instead (the budget step weighs the two).
  struct PlanCost {
    size_t moved_handles = 0;
    uint64_t growth = 0;
  };
  PlanCost plan_costs(uint64_t bytes, Stream s, size_t handle_ops);
  // The handle operations of the Phase 2 that defragment would plan now for
  // `bytes` on stream s, without doing it: a moved handle is mapped at the
  // span and unmapped at its old VA, a created one created and mapped (the
  // ViewAllocator weighs a view's refill against it).
  size_t planned_handle_ops(uint64_t bytes, Stream s, bool exact, size_t handle_ops);
  // Merges adjacent completed free regions of different streams that
  // straddle a handle (journaled when `journal` is given); true if any.
  bool merge_completed_straddles(std::vector<MergeUndo>* journal);
  void undo_merges(const std::vector<MergeUndo>& journal);

 private:
  size_t reap_completed_zombies(LockWindow* window, size_t budget);
  // A Phase 2's request and its handle budget (`handle_ops`: the handles
  // this call already used; null: no budget).
  void start(Transit* t, uint64_t bytes, Stream s, bool exact, const size_t* handle_ops) const;
  struct Join;
  bool best_join(uint64_t bytes, Stream s, Join* out);
  void plan_defrag(Transit* t);
  void plan_with_slack(Transit* t);  // plan_defrag, growing instead of moving within remap_slack
  vpmm_status wait_for_harvest(Transit* t);
  vpmm_status claim(Transit* t);
  vpmm_status map_transit(Transit* t);  // touches only t and the backend; undoes itself on failure
  vpmm_status map_transit_steps(Transit* t, size_t* n_mapped);
  RegionIt commit(Transit* t);
  void abandon(Transit* t);

  const SmallAllocator& small_;
};

}  // namespace vpmm
