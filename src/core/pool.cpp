// Pool (see pool.hpp): the mutex, the public operations forwarded to the
// collaborators, the callbacks that run without the mutex, and the order of
// the pool's end.
#include "core/pool.hpp"

#include <cinttypes>
#include <cstring>

#include "common/status.hpp"

namespace vpmm {

Pool::Pool(std::unique_ptr<Backend> backend, std::unique_ptr<HostServices> host, const PoolOptions& opt)
    : state_(std::move(backend), std::move(host), opt), alloc_(state_), sharer_(state_, alloc_, mu_), pauser_(state_, alloc_, sharer_, mu_) {
  state_.set_listeners(&alloc_.handle_listener(), &pauser_.backup_releaser());
  alloc_.set_slab_watcher(&sharer_.slab_watcher());
}

vpmm_status Pool::create(std::unique_ptr<Backend> backend, std::unique_ptr<HostServices> host,
                         const PoolOptions& opt, std::unique_ptr<Pool>* out, std::unique_ptr<Admission> admission) {
  std::unique_ptr<Pool> p(new Pool(std::move(backend), std::move(host), opt));
  PoolGuard lock(p->mu_);
  if (admission) p->state_.set_admission(std::move(admission));
  vpmm_status st = p->alloc_.init();
  if (st == VPMM_OK) st = p->state_.init();
  // The creation's driver calls (the VA reserve, initial pages) are no
  // malloc's: left on the thread's clock, the first malloc would count them,
  // and the first marked step with it.
  drop_driver_time();
  if (st != VPMM_OK) return st;
  *out = std::move(p);
  return VPMM_OK;
}

Pool::~Pool() {
  PoolGuard lock(mu_);
  sharer_.close_all();
  alloc_.shutdown();     // pending small blocks, queued work, views
  state_.release_all();  // every mapping, orphan and backup
  pauser_.shutdown();    // the pinned buffers, the copy stream
  state_.unreserve_chunks();
}

// ---------------------------------------------------------------------------
// malloc and free
// ---------------------------------------------------------------------------

vpmm_status Pool::malloc(const char* call, uint64_t size, Stream s, const char* tag, uint32_t flags,
                         Reservation* res, void** out) {
  Backend& b = state_.backend();
  if (!b.stream_valid(s))
    return fail(VPMM_ERR_INVALID_ARGUMENT, "%s: stream %p is not a valid %s stream", call, s, b.name());
  Capacity& cap = state_.capacity();
  for (int retries = 0;; ++retries) {
    vpmm_status st;
    int transition;
    vpmm_oom_fn oom;
    void* oom_user;
    uint64_t mapped;
    {
      PoolLock lock(mu_);
      DriverTally tally(state_.counters());
      LockWindow window(&lock);
      Attrs a;
      a.flags = flags;
      st = tag ? state_.tags().intern(tag, &a.tag) : VPMM_OK;
      if (a.tag == 0) a.flags = 0;  // flags only mean something for pausable memory
      if (st == VPMM_OK && res && !cap.is_live(res))
        st = fail(VPMM_ERR_INVALID_ARGUMENT, "reservation %p is not a live reservation of this pool",
                  static_cast<void*>(res));
      if (st == VPMM_OK) st = alloc_.malloc(size, s, a, res, &window, out);
      // The pool first releases what it can: an empty slab cached for the
      // next small request holds pages the limit counts (and Phase 2 cannot
      // harvest). Given back, they are free memory, and the malloc tries once more.
      if (st == VPMM_ERR_OUT_OF_MEMORY && alloc_.release_cached_slabs())
        st = alloc_.malloc(size, s, a, res, &window, out);
      if (st == VPMM_OK) state_.tags().mark_used(a.tag);
      tally.keep(st == VPMM_OK);
      if (st == VPMM_OK && retries > 0) cap.note_oom_recovered();
      if (st == VPMM_ERR_OUT_OF_MEMORY) cap.note_oom();
      transition = state_.take_transition();
      // Read only where used: each is a cache line the common call need not touch.
      mapped = transition >= 0 ? state_.map().totals().mapped : 0;
      oom = st == VPMM_ERR_OUT_OF_MEMORY ? cap.oom_fn() : nullptr;
      oom_user = oom ? cap.oom_user() : nullptr;
    }
    if (transition >= 0) report_pressure(transition, mapped);
    if (st == VPMM_ERR_OUT_OF_MEMORY && oom && retries < 8) {
      // The user may spill, free or pause, then ask for another try. The
      // message of this failure is kept in case it says no.
      if (oom(handle_, size, oom_user) != 0) continue;
      fail(VPMM_ERR_OUT_OF_MEMORY, "out of memory for %" PRIu64 " bytes (the OOM callback declined to retry)", size);
    }
    return st == VPMM_OK ? st : fail_context(st, call);
  }
}

vpmm_status Pool::free(void* ptr, Stream s) {
  Backend& b = state_.backend();
  if (!b.stream_valid(s))
    return fail(VPMM_ERR_INVALID_ARGUMENT, "vpmm_pool_free: stream %p is not a valid %s stream", s, b.name());
  const uint64_t va = reinterpret_cast<uint64_t>(ptr);
  PoolGuard lock(mu_);
  DriverTally tally(state_.counters());
  vpmm_status st = alloc_.free(va, s);
  if (st != VPMM_OK) return st;
  sharer_.on_free(va);
  state_.capacity().wake_reservers();
  tally.keep(true);
  return VPMM_OK;
}

vpmm_status Pool::lookup(const void* ptr, void** base, uint64_t* size) {
  PoolGuard lock(mu_);
  return alloc_.lookup(ptr, base, size);
}

vpmm_status Pool::backup_lookup(const void* ptr, void** host, uint64_t* bytes) {
  PoolGuard lock(mu_);
  return pauser_.backup_lookup(ptr, host, bytes);
}

vpmm_status Pool::stream_synchronize(Stream s) {
  Backend& b = state_.backend();
  if (!b.stream_valid(s))
    return fail(VPMM_ERR_INVALID_ARGUMENT, "vpmm_pool_stream_synchronize: stream %p is not a valid %s stream", s,
                b.name());
  vpmm_status st = b.stream_sync(s);  // no pool lock: other threads keep allocating
  if (st != VPMM_OK) return fail_context(st, "vpmm_pool_stream_synchronize");
  return VPMM_OK;
}

vpmm_status Pool::stream_wait_stream(Stream s, Stream on) {
  PoolGuard lock(mu_);  // the event and wait counters
  return state_.order_stream_after(s, on);
}

vpmm_status Pool::stream_retire(Stream s) {
  PoolGuard lock(mu_);
  if (pauser_.is_copy_stream(s))
    return fail(VPMM_ERR_INVALID_ARGUMENT,
                "vpmm_pool_stream_retire: stream %p is the pool's own copy stream (a stale handle?)", s);
  return alloc_.stream_retire(s);
}

// ---------------------------------------------------------------------------
// Pause, resume, trim, backups
// ---------------------------------------------------------------------------

template <typename F>
vpmm_status Pool::locked_with_pressure(F&& f, bool after_prepares) {
  vpmm_status st;
  int transition;
  uint64_t mapped;
  {
    PoolLock lock(mu_);
    if (after_prepares) pauser_.wait_prepares(lock);
    st = f();
    transition = state_.take_transition();
    mapped = state_.map().totals().mapped;
  }
  drop_driver_time();  // pause, resume and trim are not the allocating path
  if (transition >= 0) report_pressure(transition, mapped);
  state_.capacity().wake_reservers();
  return st;
}

vpmm_status Pool::pause(const char* tag, uint64_t* n_changed, uint32_t flags) {
  return locked_with_pressure([&] { return pauser_.pause(tag, flags, n_changed); }, /*after_prepares=*/true);
}

vpmm_status Pool::resume(const char* tag, uint64_t* n_changed, uint32_t flags) {
  Capacity& cap = state_.capacity();
  uint64_t total = 0;
  for (int retries = 0;; ++retries) {
    uint64_t n = 0, short_bytes = 0;
    vpmm_oom_fn oom = nullptr;
    void* oom_user = nullptr;
    vpmm_status st = locked_with_pressure([&] {
      vpmm_status rs = pauser_.resume(tag, flags, &n, &short_bytes);
      if (rs == VPMM_ERR_OUT_OF_MEMORY) cap.note_oom();
      if (rs == VPMM_OK && retries > 0) cap.note_oom_recovered();
      oom = cap.oom_fn();
      oom_user = cap.oom_user();
      return rs;
    });
    total += n;
    // As malloc does: the user may spill, free or pause something else, then
    // ask for another try; what resumed already stays resumed.
    if (st == VPMM_ERR_OUT_OF_MEMORY && short_bytes && oom && retries < 8) {
      if (oom(handle_, short_bytes, oom_user) != 0) continue;
      fail(VPMM_ERR_OUT_OF_MEMORY,
           "vpmm_pool_resume: out of memory for a paused allocation of %" PRIu64
           " bytes (the OOM callback declined to retry); it stays paused",
           short_bytes);
    }
    if (st == VPMM_OK && n_changed) *n_changed = total;
    return st;
  }
}

vpmm_status Pool::trim(uint64_t keep_bytes) {
  return locked_with_pressure([&] { return pauser_.trim(keep_bytes); });
}

vpmm_status Pool::tag_stats(const char* tag, vpmm_tag_stats* out) {
  PoolGuard lock(mu_);
  return pauser_.tag_stats(tag, out);
}

vpmm_status Pool::prepare_backups(const char* tag, uint64_t* cached) {
  return pauser_.prepare_backups(tag, cached);  // takes the mutex itself: it pins without it
}

vpmm_status Pool::backup_dir_id(const char* call, const char* dir, uint32_t* id) {
  PoolGuard lock(mu_);
  return pauser_.backup_dir_id(call, dir, id);
}

vpmm_status Pool::set_backup_dir(const char* dir) {
  PoolGuard lock(mu_);
  return pauser_.set_backup_dir(dir);
}

// ---------------------------------------------------------------------------
// Limits, reservations and callbacks: Capacity decides; callbacks run
// outside the mutex.
// ---------------------------------------------------------------------------

vpmm_status Pool::reserve(uint64_t bytes, uint32_t flags, uint64_t timeout_ns, Reservation** out) {
  PoolLock lock(mu_);
  Capacity& cap = state_.capacity();
  Reservation* r = nullptr;
  vpmm_status st = cap.reserve(bytes, flags, timeout_ns, lock, &r);
  if (st != VPMM_OK) return st;
  // A reservation counts as admitted by the ledger, if the pool is in one:
  // refused there, it is undone (nothing was charged to it yet).
  st = state_.admit_reserved(r->size);
  if (st != VPMM_OK) {
    if (cap.prepare_release(r) == VPMM_OK) cap.finish_release(r);
    return st;
  }
  *out = r;
  return VPMM_OK;
}

vpmm_status Pool::reservation_info(const Reservation* r, uint64_t* size, uint64_t* used) {
  PoolGuard lock(mu_);
  return state_.capacity().info(r, size, used);
}

vpmm_status Pool::release_reservation(Reservation* r) {
  Capacity& cap = state_.capacity();
  {
    PoolGuard lock(mu_);
    vpmm_status st = cap.prepare_release(r);
    if (st != VPMM_OK) return st;
    uint64_t size = 0, used = 0;
    if (cap.info(r, &size, &used) == VPMM_OK && size > used) state_.give_back_reserved(size - used);
    alloc_.release_reservation(r);  // its allocations stay valid and become unreserved
    cap.finish_release(r);
  }
  cap.wake_reservers();
  return VPMM_OK;
}

vpmm_status Pool::set_limit(uint64_t bytes) {
  PoolGuard lock(mu_);
  return pauser_.set_limit(bytes);
}

void Pool::set_oom_callback(vpmm_oom_fn fn, void* user) {
  PoolGuard lock(mu_);
  state_.capacity().set_oom_callback(fn, user);
}

void Pool::set_pressure_callback(vpmm_pressure_fn fn, void* user) {
  PoolGuard lock(mu_);
  state_.capacity().set_pressure_callback(fn, user);
}

void Pool::report_outside_pressure() {
  uint64_t mapped = 0;
  {
    PoolGuard lock(mu_);
    mapped = state_.map().totals().mapped;
  }
  report_pressure(1, mapped);
}

void Pool::report_pressure(int transition, uint64_t mapped) {
  vpmm_pressure_fn fn;
  void* user;
  {
    PoolGuard lock(mu_);
    fn = state_.capacity().pressure_fn();
    user = state_.capacity().pressure_user();
  }
  if (fn) fn(handle_, transition, mapped, user);
}

// ---------------------------------------------------------------------------
// Exports and imports
// ---------------------------------------------------------------------------

vpmm_status Pool::export_memory(const char* call, const std::vector<const void*>& ptrs, const char* tag, bool by_tag,
                                const std::shared_ptr<ExportChannel>& ch, ExportLayout* layout, uint64_t* id) {
  PoolGuard lock(mu_);
  return sharer_.export_memory(call, ptrs, tag, by_tag, ch, layout, id);
}

vpmm_status Pool::prepare_export(const char* call, const char* tag, uint64_t* n_handles) {
  return sharer_.prepare_export(call, tag, n_handles);  // exports without the mutex
}

vpmm_status Pool::close_export(const char* call, uint64_t id) {
  PoolGuard lock(mu_);
  return sharer_.close_export(call, id);
}

vpmm_status Pool::import_memory(const char* call, const ImportRequest& req, const std::shared_ptr<ImportChannel>& ch,
                                uint64_t* id, std::vector<uint64_t>* entry_ptrs) {
  return sharer_.import_memory(call, req, ch, id, entry_ptrs);  // maps without the mutex
}

vpmm_status Pool::close_import(const char* call, uint64_t id) {
  return sharer_.close_import(call, id);  // unmaps without the mutex
}

void Pool::ipc_stats(vpmm_ipc_stats* out) {
  PoolGuard lock(mu_);
  sharer_.stats(out);
}

void Pool::driver_profile(vpmm_driver_profile* out) const {
  fill_driver_profile(state_.backend().counters(), out);
}

// ---------------------------------------------------------------------------
// Observability
// ---------------------------------------------------------------------------

void Pool::stats(vpmm_stats* out) {
  PoolGuard lock(mu_);
  vpmm_stats s;
  std::memset(&s, 0, sizeof s);
  s.struct_size = sizeof s;
  alloc_.fill_stats(&s);
  pauser_.fill_stats(&s);
  state_.capacity().fill_stats(&s);
  state_.steps().fill_stats(&s);
  *out = s;
}

void Pool::mark_step() {
  PoolGuard lock(mu_);
  state_.steps().mark(state_.counters().driver_ns);
}

std::vector<vpmm_region_info> Pool::snapshot() {
  PoolGuard lock(mu_);
  return alloc_.snapshot();
}

std::string Pool::check() {
  PoolGuard lock(mu_);
  return alloc_.check();
}

}  // namespace vpmm
