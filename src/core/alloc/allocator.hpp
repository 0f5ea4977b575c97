// Allocator: where allocations go, the coordinator of the placement chain.
// A page-level request runs the steps of the pool's chain in order until one
// serves it (page_steps.hpp; the chains are config/defaults.hpp's
// kPlacementChains, chosen by vpmm_config.placement). The default chain:
//
//   reap      Phase 0: unmap zombies whose events completed (old VAs -> holes)
//   best_fit  Phase 1: best fit on the caller's stream, then the smallest
//             completed region of another stream (no synchronisation at all)
//   budget    grow by what the request lacks instead of moving pages when
//             the driver budget cannot pay for the move (driver_budget.hpp)
//   remap     Phase 2: take a hole, harvest free regions into it by remapping
//             whole handles (caller's stream first, then others oldest first,
//             with a GPU-side wait for pending foreign events), create only
//             the shortfall, and hand the combined span to the caller
//
// and the views and pending-reuse steps for the chains that name them.
// A placement policy chosen by PoolOptions::policy (placement.hpp) is
// consulted before the chain and told of every page-level allocation and
// free. Requests up to small_size go to the small allocator (small.hpp),
// which takes its slab pages from the page level like any request.
//
// Owns: the small allocator, Phase 2 (Defrag), the views (ViewAllocator),
// the driver budget, the chain, the placement policy.
// May call: PoolState (region map, counters, capacity, events, handles).
// Implements the narrow interfaces its parts call back through: SlabSource
// (the small allocator), HandleListener (a handle is released: views forget
// it) and PlacementOps (what a policy may do).
//
// Every call is made with the pool mutex held; a page-level malloc given a
// LockWindow releases it around its driver calls, on regions it claimed
// first. A failing call rolls back every backend side effect it made and
// leaves the region map as it was.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/alloc/defrag.hpp"
#include "core/alloc/driver_budget.hpp"
#include "core/alloc/lock_window.hpp"
#include "core/alloc/page_steps.hpp"
#include "core/alloc/placement.hpp"
#include "core/alloc/small.hpp"
#include "core/alloc/view_alloc.hpp"
#include "core/state/pool_state.hpp"

namespace vpmm {

// Told when a small-object slab's pages go back to the page level (its last
// block freed, or the cached empty slab given back): the sharer ends the
// exports that shared the slab whole.
class SlabWatcher {
 public:
  virtual void slab_gone(uint64_t va) = 0;

 protected:
  ~SlabWatcher() = default;
};

class Allocator final : private StateRefs, private SlabSource, private HandleListener, private PlacementOps {
 public:
  explicit Allocator(PoolState& st);
  ~Allocator();
  Allocator(const Allocator&) = delete;
  Allocator& operator=(const Allocator&) = delete;

  // Builds the chain vpmm_config.placement names and the placement policy
  // PoolOptions::policy names; INVALID_ARGUMENT for a name the registry
  // does not know.
  vpmm_status init();

  // An allocation of `size` bytes on stream s, charged to res (or the
  // unreserved share). With a window, page-level driver calls run outside
  // the mutex.
  vpmm_status malloc(uint64_t size, Stream s, const Attrs& a, Reservation* res, LockWindow* window,
                     void** out);
  // Frees the allocation starting at va (live, paused, small or in a view);
  // UNKNOWN_POINTER, with what va is, when it starts none.
  vpmm_status free(uint64_t va, Stream s);
  vpmm_status lookup(const void* ptr, void** base, uint64_t* size);
  // The stream s goes away (vpmm_pool_stream_retire): what it freed and
  // allocated is re-keyed so that a new stream at its address owns nothing.
  vpmm_status stream_retire(Stream s);
  // Allocations charged to r stay valid and become unreserved.
  void release_reservation(Reservation* r);
  // Gives the empty slabs the small allocator caches back to the page level
  // (their events completed); false when there was none. A malloc at the
  // limit does this before it fails: those slabs hold pages the limit counts.
  bool release_cached_slabs();
  void set_slab_watcher(SlabWatcher* w) { slab_watcher_ = w; }

  void fill_stats(vpmm_stats* out);          // every field but the backups' and the capacity's
  std::vector<vpmm_region_info> snapshot();  // every region, ascending VA
  std::string check();                       // "" when all invariants hold
  // The pool's end: pending small blocks, queued work, views.
  void shutdown();

  // What the pauser needs of the allocations.
  SmallAllocator& small() { return *small_; }
  ViewAllocator& views() { return views_; }
  size_t reap_zombies(LockWindow* window = nullptr, size_t budget = SIZE_MAX) {
    return defrag_.reap_zombies(window, budget);
  }
  bool merge_completed_straddles() { return defrag_.merge_completed_straddles(nullptr); }
  void note_peaks() { st_.note_peaks(small_->empty_bytes()); }
  // What PoolState tells before it releases a handle (views forget it).
  HandleListener& handle_listener() { return *this; }

 private:
  // SlabSource: what the small allocator may ask of the page level.
  uint64_t page_size() const override { return opt_.page_size; }
  vpmm_status take_slab_pages(uint64_t bytes, Stream s, const Attrs& a, RegionIt* out) override;
  void return_slab_pages(uint64_t va, Stream s, bool paused) override;
  void slab_emptied(uint64_t va) override;
  vpmm_status record_event(Stream s, EventRef* out) override { return st_.record_event(s, out); }
  vpmm_status query(const EventRef& ev, bool* done) override { return st_.query(ev, done); }
  void wait(const EventRef& ev) override { st_.wait(ev); }
  const Region* region_at(uint64_t va) const override;
  size_t count_small_regions() const override;

  // HandleListener.
  void before_release(PhysHandle h) override {
    if (!views_.empty()) views_.forget(h);
  }

  // PlacementOps (placement.hpp).
  const RegionMap& regions() const override { return m_; }
  const PoolOptions& options() const override { return opt_; }
  bool usable(uint64_t va, Stream s) override;
  vpmm_status default_place(const PageRequest& r, RegionIt* out) override;
  size_t reap(size_t budget) override { return defrag_.reap_zombies(window_, budget); }
  vpmm_status assemble(uint64_t bytes, Stream s, RegionIt* out) override;

  // --- the page level ---
  // Hands out `bytes` as a region of `kind` on stream s: a placement policy
  // first, then the chain. A tagged request (a.tag != 0) gets a range made
  // of whole handles only. With a window, driver calls run outside the mutex
  // (see LockWindow). `handle_ops`, if given, adds the handles this call
  // unmapped or mapped. With view_va, a request of views' size that no free
  // region fits may be served by a view (*view_va its address; *out is then
  // end()).
  vpmm_status alloc_pages(uint64_t bytes, Stream s, Kind kind, uint64_t requested, const Attrs& a,
                          LockWindow* window, RegionIt* out, size_t* handle_ops = nullptr,
                          uint64_t* view_va = nullptr);
  // The chain's steps in order for `call`, until one serves it.
  vpmm_status run_chain(PageCall& call);
  vpmm_status alloc_with_policy(PageCall& call);
  // Carves the allocation from the front of free region call.out, and after
  // a remap without a window unmaps the harvest's old VAs (at most call.ops).
  void finish_pages(PageCall& call);
  // The region a policy returned, checked before it is carved.
  vpmm_status check_placed(const PageRequest& req, RegionIt r) const;
  // Returns a live/small region to the free set on stream s.
  void free_pages(RegionIt it, Stream s);
  vpmm_status fail_unknown_pointer(const char* call, const void* ptr);
  // free_pages, and the policy told of it (when there is one: the free's
  // hot path copies nothing for it).
  void free_and_tell(RegionIt it, uint64_t va, Stream s) {
    if (!policy_) return free_pages(it, s);
    PageFree f{0, va, it->second.size, it->second.id, s, it->second.kind, false};
    free_pages(it, s);
    tell_freed(f);
  }
  void tell_freed(PageFree f) {
    f.seq = ++seq_;
    policy_->freed(f, *this);
  }


  std::unique_ptr<SmallAllocator> small_;
  Defrag defrag_;
  ViewAllocator views_;
  DriverBudget budget_;
  StepContext steps_ctx_;
  // The chain's steps, in order, null-terminated (init builds it).
  PageStep chain_[kMaxPageSteps + 2] = {};
  std::unique_ptr<PlacementPolicy> policy_;  // null: the default phases alone
  SlabWatcher* slab_watcher_ = nullptr;
  LockWindow* window_ = nullptr;             // the malloc's window while a policy runs
  uint64_t seq_ = 0;                         // page-level requests and frees told to the policy
};

}  // namespace vpmm
