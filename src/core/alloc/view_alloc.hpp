// ViewAllocator: the views of core/alloc/views.hpp in action. A request of
// view_min_size or more that no free region fits may be served by a view:
// the free handles where they lie, mapped in order at a VA of its own
// (docs/handles.md, "Views").
//
// Views are the allocator's own placement for large requests that no free
// region fits, between Phase 1 and Phase 2, chosen by option:
// view_min_size (VPMM_VIEW_MIN_SIZE, from 64 MiB by default; off leaves
// such requests to Phase 2, which moves pages). While they are on, the view
// gate (view_gate.hpp) watches every page-level malloc of live memory and
// keeps them off while large requests look like churn rather than a loop.
//
// A view malloc runs in the steps of a Phase 2 (defrag.hpp): plan (which
// view, which slots are stale, what replaces them, what must grow), wait
// (the caller's stream waits on the GPU for homes another stream freed with
// work still queued, as a Phase 2 harvest does), claim
// (the homes it takes become Lent, the hole for growth Transit, the view
// busy: no other thread can touch them), map (the driver calls, without the
// mutex when there is a window), then commit, or abandon, which puts every
// claimed region back. A failure leaves the pool as it was, except that a
// reused view's stale mappings already unmapped stay unmapped (gaps): they
// held nothing of the view's own.
//
// Owns: the ViewTable, the view gate, the handles released while a view
// mapping them was busy, the bytes claimed Lent by view mallocs in flight.
// May call: PoolState (map, counters, events, handles), the small
// allocator's cached bytes (peaks). Owned by the Allocator; every call is
// made with the pool mutex held (a window releases it around driver calls).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/alloc/lock_window.hpp"
#include "core/alloc/small.hpp"
#include "core/alloc/view_gate.hpp"
#include "core/alloc/views.hpp"
#include "core/state/pool_state.hpp"

namespace vpmm {

struct ViewTransit;

class ViewAllocator : private StateRefs {
 public:
  ViewAllocator(PoolState& st, const SmallAllocator& small);

  bool empty() const { return views_.empty(); }
  ViewTable& table() { return views_; }
  const ViewTable& table() const { return views_; }

  // Whether a request may be served by a view at all.
  bool eligible(uint64_t bytes, Kind kind, const Attrs& a) const {
    return min_size_ && bytes >= min_size_ && kind == Kind::Live && a.tag == 0;
  }
  // One page-level malloc, for the gate: `fitted`, Phase 1 found a free
  // region. What it counts: view-sized requests of live memory that no free
  // region fits although the free bytes would hold them (churn, not a loop).
  void note(uint64_t bytes, Kind kind, const Attrs& a, bool fitted) {
    if (kind == Kind::Live && min_size_)
      gate_.note(!fitted && a.tag == 0 && bytes >= min_size_ && m_.totals().free >= bytes);
  }
  // Whether a request no free region fits goes to a view now: eligible,
  // and the gate open.
  bool wanted(uint64_t bytes, Kind kind, const Attrs& a) const { return eligible(bytes, kind, a) && gate_.open(); }
  // kDecline: no view for this request, Phase 2 serves it.
  static constexpr vpmm_status kDecline = -102;
  // When a view's refill loses to Phase 2. On mixture-of-experts loops the
  // routing changes which of a view's handles the step's activations take;
  // recorded live (bench/torch/hard_client.py --record), the 1000 MiB logits
  // view refilled 180-690 MiB at steps where the largest free region lacked
  // 7 MiB of the request. Declining refills over 4x Phase 2's plan took the
  // second half's driver calls of four recordings of the hard client from
  // 1623, 1543, 4288, 3758 to 1589, 1610, 2224, 1690 (remapped 11.5, 13.1,
  // 40.5, 29.2% of the peak to 11.3, 13.8, 19.4, 12.2%), every other
  // snapshot within 30 calls; 1 (any refill dearer than Phase 2) made most
  // of them worse (3573-4069 calls): views declined at every step lose the
  // slots they keep (docs/handles.md, "Refills weighed against Phase 2").
  static constexpr size_t kRefillOverPhase2 = 4;
  // Serves `bytes` on stream s from a view; *out is its address. A reused
  // view whose refill (the slots other work took at home: unmapped, and
  // replacements mapped) would cost more than kRefillOverPhase2 times the
  // handle operations phase2_ops() says Phase 2 would need declines
  // (kDecline): Phase 2 serves the request, the view stays idle for the
  // next time its handles are free.
  vpmm_status malloc(uint64_t bytes, Stream s, uint64_t requested, const Attrs& a, LockWindow* window,
                     uint64_t* out, size_t* handle_ops, const std::function<size_t()>& phase2_ops = nullptr);
  // The allocation in v is freed on stream s: its homes become free memory.
  void free(View& v, Stream s);
  // Unmaps handle h from the views that map it (before it is released).
  void forget(PhysHandle h);
  // Trim: every idle view goes (after its last use completed; trim waits).
  // A view whose wait failed stays (the first failure is returned).
  vpmm_status release_idle();
  // The pool's end: waits for idle views' last uses, unmaps them all.
  void shutdown();
  std::string check();  // "" when the views agree with the map

 private:
  vpmm_status plan(ViewTransit* t);
  vpmm_status wait(ViewTransit* t);  // GPU-side waits for homes freed by pending foreign work
  void claim(ViewTransit* t);
  vpmm_status map(ViewTransit* t);  // touches only t and the backend; undoes itself on failure
  vpmm_status map_steps(ViewTransit* t);
  void commit(ViewTransit* t, const Attrs& a, uint64_t requested);
  void abandon(ViewTransit* t);
  // Whether a view on stream s may take free region r (*pending: only after
  // a GPU-side wait); whether a slot's handle lies whole in such a region.
  bool usable_by(Region& r, Stream s, bool* pending = nullptr);
  bool home_free(const ViewSlot& slot, Stream s);
  vpmm_status idle_done(View& v, bool* done);
  static uint64_t slot_offset(const std::vector<ViewSlot>& slots, size_t i);
  void settle_dropped(uint64_t va);  // what forget left to a busy view
  void evict_idle();
  void unmap_view(uint64_t va);  // unmaps every slot and gives the VA back

  const SmallAllocator& small_;
  ViewTable views_;
  // Handles released while a view mapping them was busy: (view, handle),
  // unmapped from it at the malloc's commit or abandon.
  std::vector<std::pair<uint64_t, PhysHandle>> dropped_;
  // Homes claimed Lent by view mallocs still in flight (not yet in a view).
  uint64_t lent_in_flight_ = 0;
  // opt_.view_min_size, kept by value beside the gate: note() runs on every
  // page-level malloc, and reading the option through the shared options
  // cost that path ~3 ns of a 2 MiB alloc+free pair (bench/host_hot_path.c).
  const uint64_t min_size_;
  ViewGate gate_;  // views only while large requests look like a loop's
};

}  // namespace vpmm
