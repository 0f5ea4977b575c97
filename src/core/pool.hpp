// The pool: the algorithm of docs/design.md over an abstract Backend.
//
//   Phase 0  reap zombies whose events completed (unmap old VAs -> holes)
//   Phase 1  best fit on the caller's stream, then the smallest completed
//            region of another stream (no synchronisation at all)
//   Phase 2  take a hole, harvest free regions into it by remapping whole
//            handles (caller's stream first, then others oldest first, with a
//            GPU-side wait for pending foreign events), create only the
//            shortfall, and hand the combined span to the caller
//
// Every decision is made here; the backend only executes. All public methods
// take the pool mutex; a page-level malloc releases it around its driver calls
// on regions it claimed first (LockWindow, defrag.cpp). A failing call rolls
// back every backend side effect it made and leaves the region map as it was.
//
// State has one owner each: the pool holds the mutex, the region map and its
// counters; tags are TagTable's, limits and reservations Capacity's, backup
// buffers and the copy stream Backups', slabs SmallAllocator's. The pool
// calls down into them; they reach back only through SlabSource (the small
// allocator) and HandleOps (the pause and resume pipelines).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "config/pool_options.hpp"
#include "core/capacity.hpp"
#include "core/ipc.hpp"
#include "core/regions.hpp"
#include "core/pause_pipeline.hpp"
#include "core/small.hpp"
#include "core/tags.hpp"
#include "core/view_gate.hpp"
#include "core/views.hpp"

namespace vpmm {

class Backups;
struct Transit;
struct ViewTransit;

// Lets a page-level malloc run its driver calls without the pool mutex, so
// that no other thread's malloc or free waits behind a remap: set-access and
// unmap cost 30-40 us per handle on an H100, and a defragmentation moves tens
// of handles. Held by the caller of Pool::malloc; the small allocator, whose
// state cannot survive the mutex being dropped mid-slab, passes none.
class LockWindow {
 public:
  explicit LockWindow(std::unique_lock<std::mutex>* lock) : lock_(lock) {}
  // Runs f with the mutex released and takes it back (also on an exception),
  // noting whether another thread changed the region map meanwhile.
  template <typename F>
  vpmm_status outside(const RegionMap& m, F&& f) {
    const uint64_t before = m.changes();
    struct Relock {
      std::unique_lock<std::mutex>* l;
      ~Relock() { l->lock(); }
    };
    vpmm_status st;
    {
      lock_->unlock();
      Relock relock{lock_};
      st = f();
    }
    if (m.changes() != before) others_changed_ = true;
    return st;
  }
  bool others_changed() const { return others_changed_; }

 private:
  std::unique_lock<std::mutex>* lock_;
  bool others_changed_ = false;
};



// Scaled handles (max_handle_size 0): a growth of S bytes is cut into handles
// of max(page, S / kHandlesPerGrowth). Memory first: a handle is the unit of
// remapping, so free memory inside a partly live handle cannot move, and on
// real training traces only near-page handles for small and mid-size growths
// reach the page-handle peak (docs/handles.md has the measurements). Growth
// cost is per handle, so the count per growth is bounded: an 8 GiB first
// malloc is 128 handles of 64 MiB, not 4096 pages.
constexpr uint64_t kHandlesPerGrowth = 128;
constexpr uint64_t kUnlimitedHandle = UINT64_MAX;  // VPMM_HANDLE_SIZE_UNLIMITED

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


struct PoolCounters {
  uint64_t n_malloc = 0, n_free = 0, n_defrag = 0, n_grow = 0;
  uint64_t pages_created = 0, bytes_remapped = 0, handles_created = 0;
  uint64_t peak_mapped = 0, peak_live = 0;
  uint64_t requested = 0, n_live = 0;
  uint64_t n_small_malloc = 0, n_cross_stream_reuse = 0, n_stream_waits = 0;
  uint64_t n_events_recorded = 0, n_zombies_reaped = 0;
  uint64_t n_pause = 0, n_resume = 0, n_trim = 0, bytes_trimmed = 0, backup_bytes = 0;
  uint64_t driver_ns = 0, driver_calls = 0;  // spent in the driver by malloc and free
  uint64_t n_view_malloc = 0, n_view_reuse = 0;  // served by a view; of them, with no driver call
};

// Hands the driver time its thread spent during a malloc or free to the
// counters if the call succeeded (keep()): a failed malloc leaves every
// statistic as it was. Made right after the pool mutex is taken, destroyed
// before it is released. The thread's clock is read only if some driver call
// happened meanwhile (the process-wide count moved): the hot path reads two
// relaxed counters. Pool calls that are not malloc or free drop what their
// driver calls left on the thread's clock (drop_driver_time()).
class DriverTally {
 public:
  explicit DriverTally(PoolCounters& c) : c_(c), start_(driver_calls_so_far()) {}
  ~DriverTally() {
    if (driver_calls_so_far() == start_) return;
    const DriverClock spent = take_thread_driver_clock();
    if (!keep_) return;
    c_.driver_ns += spent.ns;
    c_.driver_calls += spent.calls;
  }
  void keep(bool ok) { keep_ = ok; }
  DriverTally(const DriverTally&) = delete;
  DriverTally& operator=(const DriverTally&) = delete;

 private:
  PoolCounters& c_;
  uint64_t start_;
  bool keep_ = false;
};
// What pause, resume, trim and the other pool calls left on the thread's
// driver clock is theirs, not the next malloc's.
inline void drop_driver_time() { (void)take_thread_driver_clock(); }

class Pool final : private SlabSource, private HandleOps {
 public:
  static vpmm_status create(std::unique_ptr<Backend> backend, const PoolOptions& opt,
                            std::unique_ptr<Pool>* out);
  ~Pool();
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;

  // `call` names the public function in error messages.
  vpmm_status malloc(const char* call, uint64_t size, Stream s, const char* tag, uint32_t flags,
                     Reservation* res, void** out);
  vpmm_status free(void* ptr, Stream s);
  vpmm_status lookup(const void* ptr, void** base, uint64_t* size);
  // The host backup of the paused allocation containing ptr (vpmm_pool_backup_lookup).
  vpmm_status backup_lookup(const void* ptr, void** host, uint64_t* bytes);
  vpmm_status stream_synchronize(Stream s);
  vpmm_status stream_retire(Stream s);
  // A stream of the pool's backend for callers without a runtime of their
  // own; destroy retires it first (vpmm_pool_stream_create/_destroy).
  vpmm_status stream_create(Stream* out) { return backend_->stream_create(out); }
  vpmm_status stream_destroy(Stream s) {
    vpmm_status st = stream_retire(s);
    return st == VPMM_OK ? backend_->stream_destroy(s) : st;
  }
  const char* backend_name() const { return backend_->name(); }

  // Pause/resume by tag (NULL = every tag); see vpmm.h for the contract.
  // *n_changed (may be NULL) receives, on success, how many regions changed
  // state (0: nothing matched, still VPMM_OK).
  // flags: VPMM_PAUSE_* (vpmm_pool_pause_flags).
  vpmm_status pause(const char* tag, uint64_t* n_changed = nullptr, uint32_t flags = 0);
  vpmm_status resume(const char* tag, uint64_t* n_changed = nullptr, uint32_t flags = 0);
  vpmm_status trim(uint64_t keep_bytes);
  vpmm_status tag_stats(const char* tag, vpmm_tag_stats* out);
  // Pins ahead the host buffers a pause of `tag` would back up into (see
  // vpmm_pool_prepare_backups); *cached = pinned bytes cached after it.
  vpmm_status prepare_backups(const char* tag, uint64_t* cached);
  // The id of the disk-store directory of a new allocation (pause.cpp): `dir`,
  // else the pool's default (set_backup_dir), else VPMM_BACKUP_DIR; the C
  // API puts it in the allocation's flags (core/backup_store.hpp).
  vpmm_status backup_dir_id(const char* call, const char* dir, uint32_t* id);
  vpmm_status set_backup_dir(const char* dir);  // NULL or "": none

  // Limits and reservations (pool_capacity.cpp, over Capacity).
  vpmm_status reserve(uint64_t bytes, uint32_t flags, uint64_t timeout_ns, Reservation** out);
  vpmm_status reservation_info(const Reservation* r, uint64_t* size, uint64_t* used);
  vpmm_status release_reservation(Reservation* r);
  vpmm_status set_limit(uint64_t bytes);
  void set_oom_callback(vpmm_oom_fn fn, void* user);
  void set_pressure_callback(vpmm_pressure_fn fn, void* user);
  void set_handle(vpmm_pool* h) { handle_ = h; }

  // Sharing memory with other processes (pool_ipc.cpp, docs/ipc.md). An
  // export (of the allocations holding ptrs, or of a tag) fills ch with a
  // descriptor per covering handle and is recorded until closed; an import
  // maps req's handles and returns the importer's address of each entry.
  vpmm_status export_memory(const char* call, const std::vector<const void*>& ptrs, const char* tag, bool by_tag,
                            const std::shared_ptr<ExportChannel>& ch, ExportLayout* layout, uint64_t* id);
  vpmm_status close_export(const char* call, uint64_t id);
  // Does now, for every handle of tag's active allocations, what an export
  // of it would pay the driver for (vpmm_pool_prepare_export); the driver
  // calls run without the pool's mutex. *n_handles: the handles prepared.
  vpmm_status prepare_export(const char* call, const char* tag, uint64_t* n_handles);
  vpmm_status import_memory(const char* call, const ImportRequest& req, const std::shared_ptr<ImportChannel>& ch,
                            uint64_t* id, std::vector<uint64_t>* entry_ptrs);
  vpmm_status close_import(const char* call, uint64_t id);
  void ipc_stats(vpmm_ipc_stats* out);

  void stats(vpmm_stats* out);             // fills a full-size struct
  std::vector<vpmm_region_info> snapshot();  // every region, ascending VA
  std::string check();                     // "" when all invariants hold

  const PoolOptions& options() const { return opt_; }

 private:
  Pool(std::unique_ptr<Backend> backend, const PoolOptions& opt);

  // SlabSource: what the small allocator may ask of the page level.
  uint64_t page_size() const override { return opt_.page_size; }
  vpmm_status take_slab_pages(uint64_t bytes, Stream s, const Attrs& a, RegionIt* out) override;
  void return_slab_pages(uint64_t va, Stream s, bool paused) override;
  void wait(const EventRef& ev) override;
  const Region* region_at(uint64_t va) const override;
  size_t count_small_regions() const override;

  // --- page-level operations; the caller holds mu_ ---
  // Hands out `bytes` (page multiple) as a region of `kind` on stream s.
  // A tagged request (a.tag != 0) gets a range made of whole handles only.
  // With a window, driver calls run outside the mutex (see LockWindow).
  // `handle_ops`, if given, adds the handles this call unmapped or mapped.
  // With view_va, a request of views' size that no free region fits may be
  // served by a view (*view_va its address; *out is then end()).
  vpmm_status alloc_pages(uint64_t bytes, Stream s, Kind kind, uint64_t requested, const Attrs& a,
                          LockWindow* window, RegionIt* out, size_t* handle_ops = nullptr,
                          uint64_t* view_va = nullptr);
  // Returns a live/small region to the free set on stream s.
  void free_pages(RegionIt it, Stream s);
  // Gives the empty slabs the small allocator caches back to the page level
  // (their events completed); false when there was none.
  bool release_cached_slabs();
  // A free on stream s of memory allocated on another stream: s's later
  // work waits (on the GPU) for what the allocating stream's work may still
  // do to that memory, so that s's free point covers it (see free_pages).
  void order_after_alloc_stream(const Region& live, Stream s);

  // Phase 0: unmaps the old VAs of zombies whose events completed (at most
  // `budget` handles) and turns them into holes. With a window the unmaps run
  // outside the mutex. Returns the number of handles unmapped.
  size_t reap_zombies(LockWindow* window = nullptr, size_t budget = SIZE_MAX) {
    return m_.zombies().empty() ? 0 : reap_completed_zombies(window, budget);
  }
  size_t reap_completed_zombies(LockWindow* window, size_t budget);
  RegionIt best_fit_same_stream(uint64_t bytes, Stream s, bool exact);
  RegionIt best_fit_completed_other(uint64_t bytes, Stream s, bool exact);
  // With `merges`, it may first merge completed free regions that straddle a
  // handle (recorded there so a later failure can undo them) and ask for
  // Phase 1 again (kRetryPhase1).
  // Internal status of defragment: it merged regions, run Phase 1 again.
  static constexpr vpmm_status kRetryPhase1 = -100;
  struct MergeUndo {
    uint64_t left_va;
    Region left;
    uint64_t right_va;
    Region right;
  };
  // Phase 2 (defrag.cpp), in steps: plan (choose the hole and what
  // moves), wait (events; GPU-side waits on pending foreign work), claim
  // (the plan's regions leave every index, so no other thread takes them),
  // map (driver calls: outside the mutex when there is a window), then
  // commit, or abandon, which puts every claimed region back.
  vpmm_status defragment(uint64_t bytes, Stream s, bool exact, std::vector<MergeUndo>* merges,
                         LockWindow* window, RegionIt* out, size_t* handle_ops);
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
  bool merge_completed_straddles(std::vector<MergeUndo>* journal);
  void undo_merges(const std::vector<MergeUndo>& journal);
  // Views (pool_views.cpp), in the steps of a Phase 2. kDeclineView: no
  // view for this request, Phase 2 serves it.
  static constexpr vpmm_status kDeclineView = -102;
  bool view_eligible(uint64_t bytes, Kind kind, const Attrs& a) const;
  vpmm_status view_malloc(uint64_t bytes, Stream s, uint64_t requested, const Attrs& a, LockWindow* window,
                          uint64_t* out, size_t* handle_ops);
  vpmm_status plan_view(ViewTransit* t);
  vpmm_status wait_for_view(ViewTransit* t);  // GPU-side waits for pending foreign homes
  void claim_view(ViewTransit* t);
  vpmm_status map_view(ViewTransit* t);  // touches only t and the backend; undoes itself on failure
  vpmm_status map_view_steps(ViewTransit* t);
  void commit_view(ViewTransit* t, const Attrs& a, uint64_t requested);
  void abandon_view(ViewTransit* t);
  void free_view(View& v, Stream s);
  // Whether a view on stream s may take free region r (*pending: only after
  // a GPU-side wait); whether a slot's handle lies whole in such a region.
  bool usable_by(Region& r, Stream s, bool* pending = nullptr);
  bool home_free(const ViewSlot& slot, Stream s);
  vpmm_status view_idle_done(View& v, bool* done);
  static uint64_t slot_offset(const std::vector<ViewSlot>& slots, size_t i);
  // Unmaps handle h from the views that map it (before it is released).
  void forget_in_views(PhysHandle h);
  void settle_dropped(uint64_t va);  // what forget_in_views left to a busy view
  void evict_idle_view();
  // Trim: every idle view goes (after its last use completed; trim waits).
  // A view whose wait failed stays (the first failure is returned).
  vpmm_status release_idle_views();
  void unmap_view(uint64_t va);  // unmaps every slot and gives the VA back
  std::string check_views();     // "" when the views agree with the map
  // Offset of a run of whole handles inside [va, va+size) that adds up to
  // exactly `bytes`; UINT64_MAX when there is none.
  uint64_t exact_run(uint64_t va, uint64_t size, uint64_t bytes) const;

  // Events: free regions record lazily (a free costs no driver call); the
  // event is recorded the first time another stream or an unmap needs it.
  vpmm_status event_of(Region& r, EventRef* out);
  vpmm_status is_complete(Region& r, bool* done);
  vpmm_status query(const EventRef& ev, bool* done) override;

  vpmm_status reserve_chunk(uint64_t min_bytes, uint64_t* va, uint64_t* size);
  // Fails with OUT_OF_MEMORY when growing by `bytes` now (besides what
  // Phase 2s and resumes in flight are creating) would pass the memory limit.
  vpmm_status check_growth_limit(uint64_t bytes) const { return cap_.check_growth(m_.totals().mapped, bytes); }
  // Creates handles no larger than max_handle; needs no mutex (the limit is
  // the caller's to check). On failure nothing is left; handles the driver
  // refused to release go to *orphans.
  vpmm_status create_handles(uint64_t bytes, uint64_t max_handle, std::vector<Mapping>* out,
                             std::vector<Mapping>* orphans);
  // Largest handle a growth of `shortfall` bytes is cut into under the
  // configured policy; `tagged` growths own whole handles, one per growth by
  // default so that pausing costs one unmap + release per allocation.
  uint64_t growth_handle_size(uint64_t shortfall, bool tagged) const;
  void release_handles(const std::vector<Mapping>& hs);
  void release_handle(const Mapping& h);  // unmapped handle; kept as an orphan if refused
  // The same without the mutex: refused handles are collected in *orphans.
  void release_handles_into(const std::vector<Mapping>& hs, std::vector<Mapping>* orphans);
  void retry_orphans();
  void note_peaks();
  vpmm_status malloc_locked(uint64_t size, Stream s, const Attrs& a, Reservation* res,
                            LockWindow* window, void** out);
  static uint64_t small_charge(uint64_t requested) { return vpmm::small_charge(requested); }
  // Reports a pending watermark crossing; call without mu_ held.
  void report_pressure(int transition, uint64_t mapped);
  int take_transition() { return cap_.take_transition(m_.totals().mapped); }
  // HandleOps (pause_pipeline.hpp documents each).
  const Region& region(uint64_t va) override { return m_.find(va)->second; }
  vpmm_status record_event(Stream s, EventRef* out) override;
  vpmm_status release_paused_target(const char* call, uint64_t va, Backup* backup) override;
  vpmm_status map_paused_target(const Region& r, uint64_t va, std::vector<Mapping>* out) override;
  void undo_resume_target(const Region& r, uint64_t va, const std::vector<Mapping>& hs, size_t n_mapped) override;
  void commit_resumed(uint64_t va, const std::vector<Mapping>& handles) override;
  // Capacity charges of a live or paused region (pause gives them back,
  // resume takes them again).
  void release_charges(const Region& r);
  vpmm_status retake_charges(const Region& r);
  // What must complete before region r may be unmapped: its allocating
  // stream's work so far (recorded once per stream in *recorded), and for a
  // slab the frees of its blocks on other streams.
  vpmm_status last_uses(const Region& r, std::vector<Stream>* recorded, std::vector<EventRef>* out);
  vpmm_status pause_locked(const char* tag, uint32_t flags, uint64_t* n_changed);
  // *short_bytes: the size of the allocation that ran out of memory (0: none).
  vpmm_status resume_locked(const char* tag, uint32_t flags, uint64_t* n_changed, uint64_t* short_bytes);
  vpmm_status trim_locked(uint64_t keep_bytes);
  template <typename F>
  // after_prepares: first wait until no prepare_backups is pinning.
  vpmm_status locked_with_pressure(F&& f, bool after_prepares = false);
  // Turns a Paused region back into a hole (free of a paused allocation).
  void drop_paused(RegionIt it);
  // Gives back the backup a region holds (paused, or kept by an active one).
  void drop_backup(Region& r);
  // Releases whole handles of free regions until free bytes <= keep.
  vpmm_status release_free(uint64_t keep_bytes, bool wait);
  vpmm_status fail_unknown_pointer(const char* call, const void* ptr);
  // Closes every export and unmaps every import (the destructor).
  void close_ipc();
  // Under mu_: the allocations an export of ptrs (or of a tag) covers, in
  // address order, and every handle holding a byte of them (pool_ipc.cpp).
  vpmm_status exported_ranges(const char* call, const std::vector<const void*>& ptrs, const char* tag,
                              bool by_tag, std::vector<IpcRange>* out);
  std::map<uint64_t, Mapping> covering_handles(const std::vector<IpcRange>& ranges) const;

  std::unique_ptr<Backend> backend_;
  PoolOptions opt_;
  std::mutex mu_;
  RegionMap m_;
  PoolCounters c_;
  uint64_t next_id_ = 0;
  std::unique_ptr<SmallAllocator> small_;
  std::vector<std::unique_ptr<char>> retired_keys_;  // stand-ins for retired streams
  TagTable tags_;
  std::unique_ptr<Backups> backups_;  // host buffers, copy stream, prepares in flight
  Capacity cap_;
  std::vector<Mapping> orphans_;  // unmapped handles the driver refused to release
  vpmm_pool* handle_ = nullptr;  // the C handle passed to callbacks
  IpcTables ipc_;  // open exports and imports
  ViewTable views_;
  // Handles released while a view mapping them was busy: (view, handle),
  // unmapped from it at the malloc's commit or abandon.
  std::vector<std::pair<uint64_t, PhysHandle>> dropped_;
  // Homes claimed Lent by view mallocs still in flight (not yet in a view).
  uint64_t lent_in_flight_ = 0;
  ViewGate view_gate_;  // views only while large requests look like a loop's
};

}  // namespace vpmm
