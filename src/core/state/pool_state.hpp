// PoolState: what every collaborator of the pool shares, and the operations
// on it that more than one of them needs.
//
// Owns: the backend, the host services (pageable memory, files, host copies:
// backend/host_services/host_services.hpp), the resolved options, the region map, the counters, the
// tag table, the capacity (limit, reservations, callbacks), the id counter
// of regions, the handles the driver refused to release (orphans) and the
// stand-in keys of retired streams.
// Offers: events (recorded lazily, queried, waited for), handle operations
// (VA chunks, creating and releasing handles, the growth limit and handle
// sizes), peaks, and the region-level steps of giving memory back (a paused
// allocation's VA, a region's backup).
// May call: the backend, the host services, and two narrow interfaces the layers above install
// (HandleListener: the allocator's views; BackupReleaser: the pauser's
// stores), and the Admission the C API may give it (a ledger shared with
// other processes, src/ledger/): asked before every handle is created, told
// after every handle is released. Nothing else of the pool.
//
// The allocator (core/alloc/), the sharer (core/share/) and the pauser
// (core/pause/) each hold a reference to it; the pool facade (core/pool.hpp)
// owns it and its mutex. Every call is made with the pool mutex held, except
// create_handles and release_handles_into, which touch only the backend.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "backend/backend.hpp"
#include "backend/host_services/host_services.hpp"
#include "core/state/admission.hpp"
#include "core/state/capacity.hpp"
#include "core/state/counters.hpp"
#include "config/pool_options.hpp"
#include "core/state/regions.hpp"
#include "core/state/step_record.hpp"
#include "core/state/tags.hpp"

namespace vpmm {

// Scaled handles (max_handle_size 0): a growth of S bytes is cut into handles
// of max(page, S / kHandlesPerGrowth). Memory first: a handle is the unit of
// remapping, so free memory inside a partly live handle cannot move, and on
// real training traces only near-page handles for small and mid-size growths
// reach the page-handle peak (docs/handles.md has the measurements). Growth
// cost is per handle, so the count per growth is bounded: an 8 GiB first
// malloc is 128 handles of 64 MiB, not 4096 pages.
constexpr uint64_t kHandlesPerGrowth = 128;
constexpr uint64_t kUnlimitedHandle = UINT64_MAX;  // VPMM_HANDLE_SIZE_UNLIMITED

// Told before a handle is released, so that the mappings of it that no
// region of the map knows (views, core/alloc/views.hpp) go first.
class HandleListener {
 public:
  virtual void before_release(PhysHandle h) = 0;

 protected:
  ~HandleListener() = default;
};

// Gives a region's backup back to the store it lives in (core/pause/stores/).
class BackupReleaser {
 public:
  virtual void release_backup(Backup* b) = 0;

 protected:
  ~BackupReleaser() = default;
};

class PoolState {
 public:
  PoolState(std::unique_ptr<Backend> backend, std::unique_ptr<HostServices> host, const PoolOptions& opt);
  PoolState(const PoolState&) = delete;
  PoolState& operator=(const PoolState&) = delete;

  Backend& backend() { return *backend_; }
  const Backend& backend() const { return *backend_; }
  HostServices& host() { return *host_; }
  const PoolOptions& options() const { return opt_; }
  RegionMap& map() { return m_; }
  const RegionMap& map() const { return m_; }
  PoolCounters& counters() { return c_; }
  const PoolCounters& counters() const { return c_; }
  TagTable& tags() { return tags_; }
  StepRecord& steps() { return steps_; }
  Capacity& capacity() { return cap_; }
  const Capacity& capacity() const { return cap_; }
  uint64_t next_id() { return next_id_++; }
  void set_listeners(HandleListener* handles, BackupReleaser* backups) {
    handle_listener_ = handles;
    backup_releaser_ = backups;
  }
  // Before init(): from then on every handle is admitted by `a` first.
  void set_admission(std::unique_ptr<Admission> a) { admission_ = std::move(a); }
  // A reservation's bytes admitted (and given back) outside the pool: no
  // Admission, nothing asked.
  vpmm_status admit_reserved(uint64_t bytes) { return admission_ ? admission_->reserve_credit(bytes) : VPMM_OK; }
  void give_back_reserved(uint64_t bytes) {
    if (admission_) admission_->give_back_credit(bytes);
  }

  // The first VA chunk, and the initial pages mapped into it
  // (PoolOptions::initial_pages). On failure the pool's destructor gives
  // back what was made.
  vpmm_status init();

  // --- events ----------------------------------------------------------
  // Free regions record lazily (a free costs no driver call); the event is
  // recorded the first time another stream or an unmap needs it.
  vpmm_status event_of(Region& r, EventRef* out);
  vpmm_status is_complete(Region& r, bool* done);
  vpmm_status query(const EventRef& ev, bool* done);
  // Records an event on s (counted in n_events_recorded).
  vpmm_status record_event(Stream s, EventRef* out);
  void wait(const EventRef& ev);  // the CPU blocks until ev completed
  // A free on stream s of memory allocated on another stream: s's later
  // work waits (on the GPU) for what the allocating stream's work may still
  // do to that memory, so that s's free point covers it (the allocator's
  // free of pages and of views).
  void order_after_alloc_stream(const Region& live, Stream s);
  // Stream s's later work waits on the GPU for what stream `on` has queued
  // so far (the hooks' record_stream free); INVALID_ARGUMENT for a stream
  // the backend does not know. Nothing to do when s is `on`.
  vpmm_status order_stream_after(Stream s, Stream on);
  // THE rule for memory that reaches stream s from a free region `from`
  // (docs/design.md, "Memory between streams"): the point of s's order
  // after which the memory's earlier work is done, for the allocation's
  // Region::seq. Memory s freed itself: that free's point (its own work
  // before, ordered by the stream). Memory another stream freed while its
  // work was still queued, after s was made to wait for that work on the
  // GPU (`waited`): a fresh point of s, so an event recorded on s for a
  // later free on a third stream comes after the wait, and so after the
  // lender's work. Completed or never-used memory: 0, nothing to order.
  uint64_t handover_seq(Stream s, const Region& from, bool waited) {
    if (from.stream == s) return from.seq;
    return waited ? ++m_.stream(s).free_seq : 0;
  }

  // --- handles and VA ----------------------------------------------------
  vpmm_status reserve_chunk(uint64_t min_bytes, uint64_t* va, uint64_t* size);
  // Fails with OUT_OF_MEMORY when growing by `bytes` now (besides what
  // Phase 2s and resumes in flight are creating) would pass the memory limit.
  vpmm_status check_growth_limit(uint64_t bytes) const { return cap_.check_growth(m_.totals().mapped, bytes); }
  bool growth_fits(uint64_t bytes) const { return cap_.growth_fits(m_.totals().mapped, bytes); }
  // Creates handles no larger than max_handle; needs no mutex (the limit is
  // the caller's to check). The Admission, if any, admits the bytes first
  // (its refusal is the call's OUT_OF_MEMORY). On failure nothing is left;
  // handles the driver refused to release go to *orphans (and stay admitted).
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
  // Orphans a call collected without the mutex become the pool's.
  void keep_orphans(const std::vector<Mapping>& hs) { orphans_.insert(orphans_.end(), hs.begin(), hs.end()); }
  std::vector<Mapping>* orphans() { return &orphans_; }
  void retry_orphans();
  // A private stream key for a retired stream's regions: a new stream at the
  // same address must not take them as its own.
  Stream retired_key();

  // --- peaks and watermarks -----------------------------------------------
  // `cached`: bytes the map counts as live that hold no allocation (empty
  // small-object slabs).
  void note_peaks(uint64_t cached) {
    c_.peak_mapped = std::max(c_.peak_mapped, m_.totals().mapped);
    c_.peak_live = std::max(c_.peak_live, m_.totals().live + m_.totals().small + m_.totals().lent - cached);
  }
  int take_transition() { return cap_.take_transition(m_.totals().mapped); }

  // --- giving memory back ----------------------------------------------
  // Gives back the backup a region holds (paused, or kept by an active one).
  void drop_backup(Region& r);
  // Turns a Paused region back into a hole (free of a paused allocation).
  void drop_paused(RegionIt it);

  // --- the pool's end (the facade's destructor, in this order) --------------
  // Waits for the work queued before a free or a remap: it may still touch
  // pool memory (cuMemUnmap does not wait for kernels).
  void wait_queued_work();
  // Unmaps and releases every mapping and orphan, gives back every backup,
  // and forgets the regions (their events die while the backend lives).
  void release_all();
  void unreserve_chunks();

 private:
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<HostServices> host_;
  PoolOptions opt_;
  RegionMap m_;
  PoolCounters c_;
  uint64_t next_id_ = 0;
  TagTable tags_;
  StepRecord steps_;
  Capacity cap_;
  std::vector<Mapping> orphans_;  // unmapped handles the driver refused to release
  std::vector<std::unique_ptr<char>> retired_keys_;  // stand-ins for retired streams
  HandleListener* handle_listener_ = nullptr;
  BackupReleaser* backup_releaser_ = nullptr;
  std::unique_ptr<Admission> admission_;  // null: nothing outside the pool is asked
  // Releases one handle; its bytes go back to the Admission when it went.
  vpmm_status release_counted(const Mapping& h);
};

// The shared state as a collaborator holds it: references to the parts it
// reads and changes, made once from the PoolState (the allocator and its
// parts, the sharer and the pauser inherit it privately).
struct StateRefs {
  explicit StateRefs(PoolState& st)
      : st_(st),
        m_(st.map()),
        c_(st.counters()),
        opt_(st.options()),
        cap_(st.capacity()),
        backend_(&st.backend()) {}
  PoolState& st_;
  RegionMap& m_;
  PoolCounters& c_;
  const PoolOptions& opt_;
  Capacity& cap_;
  Backend* backend_;
};

}  // namespace vpmm
