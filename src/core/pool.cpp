// Pool: creation, Phase 1 (best fit), page-level malloc/free and the public
// operations (see pool.hpp). Phase 0 and Phase 2 are in defrag.cpp, whose
// claim/abandon steps are what make a failed malloc leave the pool as it was.
#include "core/pool.hpp"

#include <algorithm>
#include <cinttypes>
#include <new>

#include "core/backups.hpp"
#include "common/status.hpp"
#include "core/small.hpp"

namespace vpmm {

namespace {
constexpr int kOtherStreamProbe = 8;  // completed-candidates probed per foreign stream
constexpr uint64_t kSmallMinimum = kSmallQuantum;  // small_size below this disables small blocks
}  // namespace

Pool::Pool(std::unique_ptr<Backend> backend, const PoolOptions& opt)
    : backend_(std::move(backend)), opt_(opt) {}

vpmm_status Pool::create(std::unique_ptr<Backend> backend, const PoolOptions& opt,
                         std::unique_ptr<Pool>* out) {
  std::unique_ptr<Pool> p(new Pool(std::move(backend), opt));
  if (p->opt_.large_rounding == 0) p->opt_.large_rounding = opt.page_size;  // whole pages
  p->small_.reset(new SmallAllocator(*p, opt.small_size));
  p->backups_.reset(new Backups(*p->backend_, opt.backup_cache_size, opt.backup_pinned_limit));
  p->cap_.init(opt.memory_limit, opt.device_total, opt.watermark_trigger, opt.watermark_stop);
  std::lock_guard<std::mutex> lock(p->mu_);
  uint64_t va = 0, size = 0;
  vpmm_status st = p->reserve_chunk(opt.page_size, &va, &size);
  if (st != VPMM_OK) return st;
  p->m_.add_chunk(va, size);
  if (opt.initial_pages > 0) {
    uint64_t bytes = opt.initial_pages * opt.page_size;
    if (bytes / opt.page_size != opt.initial_pages || bytes > size)
      return fail(VPMM_ERR_INVALID_ARGUMENT,
                  "vpmm_pool_create: initial_pages %" PRIu64 " x page_size %" PRIu64
                  " exceeds va_size %" PRIu64,
                  opt.initial_pages, opt.page_size, size);
    // Initial pages are carved by allocations of unknown sizes, so by default
    // each page is its own handle and can be remapped on its own.
    std::vector<Mapping> hs;
    const bool capped = opt.max_handle_size && opt.max_handle_size != kUnlimitedHandle;
    st = p->check_growth_limit(bytes);
    if (st == VPMM_OK)
      st = p->create_handles(bytes, capped ? opt.max_handle_size : opt.page_size, &hs, &p->orphans_);
    if (st != VPMM_OK) return fail_context(st, "vpmm_pool_create: initial_pages");
    uint64_t cur = va;
    size_t n = 0;
    for (; n < hs.size(); ++n) {
      st = p->backend_->map(cur, hs[n].size, hs[n].handle);
      if (st != VPMM_OK) break;
      p->m_.map_new(cur, hs[n]);
      cur += hs[n].size;
    }
    for (size_t i = n; i < hs.size(); ++i) p->release_handle(hs[i]);  // never mapped
    if (st == VPMM_OK) st = p->backend_->set_access(va, bytes);
    // The destructor unmaps and releases what was mapped, and the chunk.
    if (st != VPMM_OK) return fail_context(st, "vpmm_pool_create: initial_pages");
    p->c_.pages_created += opt.initial_pages;
    p->c_.handles_created += hs.size();
    RegionIt it = p->m_.find(va);
    if (size > bytes) p->m_.split(it, bytes);
    it = p->m_.find(va);
    Region fr;
    fr.size = bytes;
    fr.kind = Kind::Free;
    fr.chunk = 0;
    fr.stream = clean_stream();  // never used: any stream may take it without waiting
    fr.id = p->next_id_++;
    p->m_.erase(it);
    p->m_.insert(va, fr);
    p->note_peaks();
  }
  *out = std::move(p);
  return VPMM_OK;
}

Pool::~Pool() {
  std::lock_guard<std::mutex> lock(mu_);
  close_ipc();
  small_->wait_pending();
  small_.reset();
  // Work queued before a free or a remap may still touch pool memory: wait
  // for it before unmapping (cuMemUnmap does not wait for kernels).
  for (auto& kv : m_) {
    Region& r = kv.second;
    if ((r.kind == Kind::Free && r.seq != 0) || r.kind == Kind::Zombie) {
      EventRef ev;
      if (event_of(r, &ev) == VPMM_OK && ev && !ev->done_cached()) backend_->event_sync(ev->handle());
    }
  }
  // A failing driver call is retried once: destroy is the last chance to
  // give memory back.
  auto twice = [](auto&& f) {
    if (f() != VPMM_OK) f();
  };
  // Views first: their handles are released with the primary mappings below.
  for (auto& kv : views_.all())
    if (!kv.second.active) {
      EventRef ev;
      if (event_of(kv.second.last_free, &ev) == VPMM_OK) wait(ev);
    }
  while (!views_.empty()) unmap_view(views_.all().begin()->first);
  for (auto& z : m_.zombie_mappings()) twice([&] { return backend_->unmap(z.first, z.second.size); });
  for (auto& mp : m_.mappings()) {
    twice([&] { return backend_->unmap(mp.first, mp.second.size); });
    release_handle(mp.second);
  }
  retry_orphans();
  for (const Mapping& h : orphans_) twice([&] { return backend_->release(h.handle, h.size); });
  for (auto& kv : m_)  // paused, retained and disk backups: memory and files given back
    if (kv.second.backup) drop_backup(kv.second);
  m_.clear();  // drops the events while the backend still exists
  backups_.reset();  // the buffers and the copy stream
  for (const Chunk& c : m_.chunks()) twice([&] { return backend_->unreserve(c.va, c.size); });
}

// ---------------------------------------------------------------------------
// Events
// ---------------------------------------------------------------------------

vpmm_status Pool::event_of(Region& r, EventRef* out) {
  // Zombies carry their event from the harvest (null: nothing to wait for);
  // a never-used free region (seq 0) has no work to wait for either.
  if (r.event || r.kind != Kind::Free || r.seq == 0) {
    *out = r.event;
    return VPMM_OK;
  }
  StreamState& st = m_.stream(r.stream);
  if (r.seq <= st.clean_upto) {  // freed before a device-wide synchronisation
    out->reset();
    return VPMM_OK;
  }
  if (st.last_event && st.last_event_seq >= r.seq) {
    r.event = st.last_event;
  } else {
    EventHandle h = 0;
    vpmm_status s = backend_->event_record(r.stream, &h);
    if (s == VPMM_ERR_INVALID_ARGUMENT && backend_->device_sync() == VPMM_OK) {
      // The stream is gone (destroyed without vpmm_pool_stream_retire). Work
      // queued on it still completes, and the device is now idle: every
      // region it freed is clean.
      st.clean_upto = st.free_seq;
      out->reset();
      return VPMM_OK;
    }
    if (s != VPMM_OK) return s;
    ++c_.n_events_recorded;
    try {
      st.last_event = std::make_shared<Event>(backend_.get(), h);
    } catch (const std::bad_alloc&) {
      backend_->event_destroy(h);
      return fail(VPMM_ERR_OUT_OF_MEMORY, "out of host memory recording an event");
    }
    st.last_event_seq = st.free_seq;
    r.event = st.last_event;
  }
  *out = r.event;
  return VPMM_OK;
}

vpmm_status Pool::query(const EventRef& ev, bool* done) {
  if (!ev || ev->done_cached()) {
    *done = true;
    return VPMM_OK;
  }
  vpmm_status s = backend_->event_query(ev->handle(), done);
  if (s == VPMM_OK && *done) ev->mark_done();
  return s;
}

vpmm_status Pool::is_complete(Region& r, bool* done) {
  EventRef ev;
  vpmm_status s = event_of(r, &ev);
  if (s != VPMM_OK) return s;
  return query(ev, done);
}

// ---------------------------------------------------------------------------
// Phase 0 and 1
// ---------------------------------------------------------------------------


// The best candidate of one stream's index: (size, id, va), or none. A
// template, not a std::function: this is every page-level malloc's path.
template <typename ExactOk>
static const std::tuple<uint64_t, uint64_t, uint64_t>* fit_in(const StreamState* st, uint64_t bytes,
                                                              bool exact, const ExactOk& exact_ok) {
  if (!st) return nullptr;
  auto& idx = st->free_by_size;
  auto it = idx.lower_bound(std::make_tuple(bytes, uint64_t(0), uint64_t(0)));
  for (int probed = 0; it != idx.end() && probed < kOtherStreamProbe; ++it, ++probed)
    if (!exact || exact_ok(std::get<2>(*it), std::get<0>(*it))) return &*it;
  return nullptr;
}

RegionIt Pool::best_fit_same_stream(uint64_t bytes, Stream s, bool exact) {
  auto ok = [&](uint64_t va, uint64_t size) { return exact_run(va, size, bytes) != UINT64_MAX; };
  const auto* own = fit_in(m_.find_stream(s), bytes, exact, ok);
  // Never-used memory is as good as the caller's own: no event to wait for.
  const auto* clean = fit_in(m_.clean_state(), bytes, exact, ok);
  const auto* best = !own ? clean : !clean ? own : (*clean < *own ? clean : own);
  return best ? m_.find(std::get<2>(*best)) : m_.end();
}

// The smallest completed candidate by its whole index key (size, id, va), so
// that equal sizes on two streams are decided by the key, never by the
// streams map's iteration order (stream handles are heap addresses: the order
// changed from run to run under ASLR, and so did replay figures).
RegionIt Pool::best_fit_completed_other(uint64_t bytes, Stream s, bool exact) {
  RegionIt best = m_.end();
  std::tuple<uint64_t, uint64_t, uint64_t> best_key;
  for (const auto& kv : m_.streams()) {
    if (kv.first == s) continue;
    int probed = 0;
    for (auto it = kv.second.free_by_size.lower_bound(std::make_tuple(bytes, uint64_t(0), uint64_t(0)));
         it != kv.second.free_by_size.end() && probed < kOtherStreamProbe; ++it, ++probed) {
      if (best != m_.end() && !(*it < best_key)) break;
      if (exact && exact_run(std::get<2>(*it), std::get<0>(*it), bytes) == UINT64_MAX) continue;
      RegionIt r = m_.find(std::get<2>(*it));
      bool done = false;
      if (is_complete(r->second, &done) == VPMM_OK && done) {
        best = r;
        best_key = *it;
        break;
      }
    }
  }
  return best;
}
vpmm_status Pool::reserve_chunk(uint64_t min_bytes, uint64_t* va, uint64_t* size) {
  uint64_t want = std::max(opt_.va_size, min_bytes);
  want = (want + opt_.page_size - 1) / opt_.page_size * opt_.page_size;
  // Alignment must be a power of two: the largest one dividing the page.
  uint64_t align = opt_.page_size & (~opt_.page_size + 1);
  vpmm_status st = backend_->reserve(want, align, va);
  // With a valid alignment, a refusal means no VA of that size is to be had.
  if (st == VPMM_ERR_BACKEND || st == VPMM_ERR_INVALID_ARGUMENT) st = VPMM_ERR_OUT_OF_MEMORY;
  if (st != VPMM_OK) return fail_context(st, "reserving a VA chunk");
  *size = want;
  return VPMM_OK;
}

vpmm_status Pool::create_handles(uint64_t bytes, uint64_t max_handle, std::vector<Mapping>* out,
                                 std::vector<Mapping>* orphans) {
  max_handle = std::max<uint64_t>(opt_.page_size, max_handle / opt_.page_size * opt_.page_size);
  // The driver's own limit (HIP's chunked hipMemCreate) caps every policy.
  if (const uint64_t cap = backend_->max_handle_size())
    max_handle = std::min(max_handle, std::max<uint64_t>(opt_.page_size, cap / opt_.page_size * opt_.page_size));
  max_handle = std::min(max_handle, std::max<uint64_t>(bytes, 1));
  std::vector<Mapping> hs;
  hs.reserve(bytes / max_handle + 1);
  uint64_t left = bytes;
  while (left) {
    uint64_t sz = std::min(left, max_handle);
    PhysHandle ph = 0;
    vpmm_status st = backend_->create(sz, &ph);
    if (st != VPMM_OK) {
      release_handles_into(hs, orphans);
      return st;
    }
    hs.push_back({ph, sz});
    left -= sz;
  }
  *out = std::move(hs);
  return VPMM_OK;
}

uint64_t Pool::growth_handle_size(uint64_t shortfall, bool tagged) const {
  const uint64_t page = opt_.page_size;
  if (opt_.max_handle_size == kUnlimitedHandle) return shortfall;
  if (opt_.max_handle_size) return opt_.max_handle_size;
  if (tagged) return shortfall;
  return std::max(page, shortfall / kHandlesPerGrowth / page * page);
}

void Pool::release_handles(const std::vector<Mapping>& hs) {
  for (const Mapping& h : hs) release_handle(h);
}

void Pool::release_handles_into(const std::vector<Mapping>& hs, std::vector<Mapping>* orphans) {
  for (const Mapping& h : hs)
    if (backend_->release(h.handle, h.size) != VPMM_OK) orphans->push_back(h);
}

void Pool::release_handle(const Mapping& h) {
  if (!views_.empty()) forget_in_views(h.handle);
  // An unmapped handle nobody uses: if the driver refuses to release it now,
  // keep it and try again at the next trim or at destroy rather than leak it.
  if (backend_->release(h.handle, h.size) != VPMM_OK) orphans_.push_back(h);
}

void Pool::retry_orphans() {
  size_t kept = 0;
  for (const Mapping& h : orphans_)
    if (backend_->release(h.handle, h.size) != VPMM_OK) orphans_[kept++] = h;
  orphans_.resize(kept);
}

void Pool::note_peaks() {
  c_.peak_mapped = std::max(c_.peak_mapped, m_.totals().mapped);
  c_.peak_live = std::max(c_.peak_live,
                          m_.totals().live + m_.totals().small + m_.totals().lent - small_->empty_bytes());
}

// ---------------------------------------------------------------------------
// Page-level malloc/free
// ---------------------------------------------------------------------------

uint64_t Pool::exact_run(uint64_t va, uint64_t size, uint64_t bytes) const {
  // Sliding window over the whole handles inside [va, va+size): the first run
  // of adjacent handles that adds up to exactly `bytes`.
  auto maps = m_.whole_mappings_in(va, size);
  size_t lo = 0;
  uint64_t sum = 0;
  for (size_t hi = 0; hi < maps.size(); ++hi) {
    if (hi > lo && maps[hi - 1].first + maps[hi - 1].second.size != maps[hi].first) {
      lo = hi;
      sum = 0;
    }
    sum += maps[hi].second.size;
    while (sum > bytes) sum -= maps[lo++].second.size;
    if (sum == bytes) return maps[lo].first - va;
  }
  return UINT64_MAX;
}

vpmm_status Pool::alloc_pages(uint64_t bytes, Stream s, Kind kind, uint64_t requested,
                              const Attrs& a, LockWindow* window, RegionIt* out, size_t* handle_ops,
                              uint64_t* view_va) {
  // Slab pages (no window) are taken with the mutex held, while every other
  // thread's malloc and free waits: their Phase 0 leaves the zombies to the
  // next page-level malloc, whose Phase 0 unmaps them outside the mutex. A
  // backlog unmapped here would stall the whole pool (~31 us a handle).
  size_t ops = window ? reap_zombies(window) : 0;
  const bool exact = a.tag != 0;
  bool remapped = false;
  RegionIt r = best_fit_same_stream(bytes, s, exact);
  if (r == m_.end()) {
    r = best_fit_completed_other(bytes, s, exact);
    if (r != m_.end()) ++c_.n_cross_stream_reuse;
  }
  // What the view gate watches: view-sized requests that no free region fits
  // although the free bytes would hold them (churn, not a loop: view_gate.hpp).
  if (kind == Kind::Live && opt_.view_min_size)
    view_gate_.note(r == m_.end() && a.tag == 0 && bytes >= opt_.view_min_size && m_.totals().free >= bytes);
  if (r == m_.end() && view_va && view_eligible(bytes, kind, a) && view_gate_.open()) {
    vpmm_status st = view_malloc(bytes, s, requested, a, window, view_va, &ops);
    if (st == VPMM_OK) {
      *out = m_.end();
      if (handle_ops) *handle_ops += ops;
      return VPMM_OK;
    }
    if (st != kDeclineView) return st;
  }
  if (r == m_.end()) {
    std::vector<MergeUndo> merges;
    vpmm_status st = defragment(bytes, s, exact, &merges, window, &r, &ops);
    if (st == kRetryPhase1) {
      // Phase 2 merged free regions that straddled a handle: one of them may
      // now fit in place, with no remap at all.
      r = best_fit_same_stream(bytes, s, exact);
      if (r == m_.end()) r = best_fit_completed_other(bytes, s, exact);
      if (r == m_.end()) st = defragment(bytes, s, exact, nullptr, window, &r, &ops);
      else st = VPMM_OK;
      // A failed malloc changes nothing; if another thread changed the map
      // while this one was mapping, the merges (harmless: completed free
      // memory, one region instead of two) stay.
      if (st != VPMM_OK && !(window && window->others_changed())) undo_merges(merges);
    }
    if (st != VPMM_OK) return st;
    // The span counted on the caller's free neighbour of the hole; another
    // thread may have taken it while the mutex was released. Try again with
    // the mutex held: the new span itself is now the caller's to harvest.
    if (r->second.size < bytes) {
      st = defragment(bytes, s, exact, nullptr, nullptr, &r, &ops);
      if (st != VPMM_OK) return st;
    }
    remapped = true;
  }
  if (exact) {
    // Start on the handle run that fits exactly; the head stays free.
    uint64_t off = exact_run(r->first, r->second.size, bytes);
    if (off != 0 && off != UINT64_MAX) r = m_.split(r, off);
  }
  if (r->second.size > bytes) m_.split(r, bytes);  // the tail keeps stream, event, id
  Region live;
  live.size = bytes;
  live.kind = kind;
  live.chunk = r->second.chunk;
  live.stream = s;
  live.id = next_id_++;
  live.requested = requested;
  live.tag = a.tag;
  live.flags = a.flags;
  // Memory this stream freed (or a span made of it) may still be in use by
  // work queued here before: safe for this allocation by stream order, not
  // for another stream it is freed on (free_pages).
  if (r->second.stream == s) live.seq = r->second.seq;
  m_.retag(r, live);
  note_peaks();
  // Same-stream harvests often have completed events already: unmap their old
  // VAs now so the layout after the call is final ([*X] rather than [~X]).
  // With a window, malloc_locked does it once the allocation is complete:
  // the mutex may not be released around a half-made one.
  // Without a window at most as many handles as this call moved, for the
  // reason above (the mutex is held).
  if (remapped && !window) reap_zombies(nullptr, ops);
  if (handle_ops) *handle_ops += ops;
  *out = r;
  return VPMM_OK;
}

vpmm_status Pool::take_slab_pages(uint64_t bytes, Stream s, const Attrs& a, RegionIt* out) {
  return alloc_pages(bytes, s, Kind::Small, 0, a, nullptr, out);
}

void Pool::return_slab_pages(uint64_t va, Stream s, bool paused) {
  if (ipc_.exporting()) ipc_.on_slab_gone(va);  // a tag export shared the slab whole
  RegionIt r = m_.find(va);
  if (paused)
    drop_paused(r);
  else
    free_pages(r, s);
}

bool Pool::release_cached_slabs() {
  if (small_->empty_bytes_if_settled() == 0) return false;
  small_->release_empty_slabs();
  return true;
}

void Pool::wait(const EventRef& ev) {
  if (ev && !ev->done_cached() && backend_->event_sync(ev->handle()) == VPMM_OK) ev->mark_done();
}

const Region* Pool::region_at(uint64_t va) const {
  auto it = m_.regions().find(va);
  return it == m_.regions().end() ? nullptr : &it->second;
}

size_t Pool::count_small_regions() const {
  size_t n = 0;
  for (const auto& r : m_.regions())
    if (r.second.kind == Kind::Small || (r.second.kind == Kind::Paused && r.second.was_small)) ++n;
  return n;
}

void Pool::free_pages(RegionIt it, Stream s) {
  if (it->second.backup) drop_backup(it->second);  // retained, or a disk file
  if (s != it->second.stream) order_after_alloc_stream(it->second, s);
  Region fr;
  fr.size = it->second.size;
  fr.kind = Kind::Free;
  fr.chunk = it->second.chunk;
  fr.stream = s;
  fr.id = next_id_++;
  fr.seq = ++m_.stream(s).free_seq;
  // A slab of a retired stream comes back on that stream's key, which is no
  // stream to record on: its event was recorded when the stream retired.
  if (it->second.event && s == it->second.stream) fr.event = it->second.event;
  m_.retag(it, fr);
  m_.coalesce(it);
}

// The allocation's memory may still be used by work of its allocating
// stream a queued before it was handed out (a's own earlier frees, or a
// Phase 2 wait inserted on a): stream order protects the allocation, but
// a free on s would key the memory to s alone, whose event may complete
// before that work runs, and a third stream would take the memory under it.
// So s's later work waits for a's point on the GPU (the CPU never blocks),
// and s's free point then covers it. Costs nothing when the allocation
// inherited nothing pending, which a same-stream reuse after a completed
// event or any fresh memory is.
void Pool::order_after_alloc_stream(const Region& live, Stream s) {
  EventRef ev = live.event;  // a retired allocating stream's last point
  if (!ev && live.seq != 0) {
    Region point;
    point.kind = Kind::Free;
    point.stream = live.stream;
    point.seq = live.seq;
    if (event_of(point, &ev) != VPMM_OK) {
      // No event to order by: wait for the whole device rather than risk it.
      backend_->device_sync();
      return;
    }
  }
  bool done = false;
  if (!ev || (query(ev, &done) == VPMM_OK && done)) return;
  if (backend_->stream_wait(s, ev->handle()) == VPMM_OK) {
    ++c_.n_stream_waits;
    return;
  }
  wait(ev);  // the GPU-side wait failed: the CPU waits instead
}

// ---------------------------------------------------------------------------
// Public operations
// ---------------------------------------------------------------------------

vpmm_status Pool::malloc_locked(uint64_t size, Stream s, const Attrs& a, Reservation* res,
                               LockWindow* window, void** out) {
  const uint64_t page = opt_.page_size;
  const bool small = size <= opt_.small_size && opt_.small_size >= kSmallMinimum;
  if (!small && size > UINT64_MAX - (page - 1))
    return fail(VPMM_ERR_INVALID_ARGUMENT,
                "size %" PRIu64 " overflows when rounded up to the page size %" PRIu64, size, page);
  // Tagged memory owns whole pages (a pause releases exactly its handles).
  const uint64_t unit = a.tag ? page : opt_.large_rounding;
  const uint64_t bytes = small ? small_charge(size) : (size + unit - 1) / unit * unit;
  vpmm_status st = cap_.admit(bytes, res);
  if (st != VPMM_OK) return st;
  const uint64_t defrags = c_.n_defrag;
  size_t handle_ops = 0;
  if (small) {
    st = small_->malloc(size, s, a, res, out);
  } else {
    RegionIt r;
    uint64_t view_va = 0;
    st = alloc_pages(bytes, s, Kind::Live, size, a, window, &r, &handle_ops, &view_va);
    if (res && window && !cap_.is_live(res)) {
      // Released while this call ran its driver work without the mutex: as
      // release does for the allocations charged to it, the charge becomes
      // unreserved (a failure has nothing left to give back).
      if (st != VPMM_OK) return st;
      res = nullptr;
      cap_.charge_unreserved(bytes);
    }
    if (st == VPMM_OK) {
      Region& live = view_va ? views_.find(view_va)->live : r->second;
      live.res = res;
      live.charge = bytes;
      *out = reinterpret_cast<void*>(view_va ? view_va : r->first);
    }
  }
  if (st != VPMM_OK) {
    cap_.uncharge(bytes, res);
    return st;
  }
  ++c_.n_malloc;
  ++c_.n_live;
  if (small) {
    ++c_.n_small_malloc;
    note_peaks();  // a slab taken back from the empty cache is live again
  }
  c_.requested += size;
  // The old VAs of this call's harvests: now that the allocation is complete,
  // the mutex may be released around their unmaps (see alloc_pages).
  if (window && !small && c_.n_defrag != defrags)
    reap_zombies(window, kHandleOpsPerCall - std::min(kHandleOpsPerCall, handle_ops));
  return VPMM_OK;
}

vpmm_status Pool::malloc(const char* call, uint64_t size, Stream s, const char* tag, uint32_t flags,
                         Reservation* res, void** out) {
  if (!backend_->stream_valid(s))
    return fail(VPMM_ERR_INVALID_ARGUMENT, "%s: stream %p is not a valid %s stream", call, s,
                backend_->name());
  for (int retries = 0;; ++retries) {
    vpmm_status st;
    int transition;
    vpmm_oom_fn oom;
    void* oom_user;
    uint64_t mapped;
    {
      std::unique_lock<std::mutex> lock(mu_);
      DriverTally tally(c_);
      LockWindow window(&lock);
      Attrs a;
      a.flags = flags;
      st = tag ? tags_.intern(tag, &a.tag) : VPMM_OK;
      if (a.tag == 0) a.flags = 0;  // flags only mean something for pausable memory
      if (st == VPMM_OK && res && !cap_.is_live(res))
        st = fail(VPMM_ERR_INVALID_ARGUMENT, "reservation %p is not a live reservation of this pool",
                  static_cast<void*>(res));
      if (st == VPMM_OK) st = malloc_locked(size, s, a, res, &window, out);
      // The pool first releases what it can: an empty slab cached for the
      // next small request holds pages the limit counts (and Phase 2 cannot
      // harvest). Given back, they are free memory, and the malloc tries once more.
      if (st == VPMM_ERR_OUT_OF_MEMORY && release_cached_slabs())
        st = malloc_locked(size, s, a, res, &window, out);
      if (st == VPMM_OK) tags_.mark_used(a.tag);
      tally.keep(st == VPMM_OK);
      if (st == VPMM_OK && retries > 0) cap_.note_oom_recovered();
      if (st == VPMM_ERR_OUT_OF_MEMORY) cap_.note_oom();
      transition = take_transition();
      mapped = m_.totals().mapped;
      oom = cap_.oom_fn();
      oom_user = cap_.oom_user();
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

vpmm_status Pool::fail_unknown_pointer(const char* call, const void* ptr) {
  uint64_t va = reinterpret_cast<uint64_t>(ptr);
  RegionIt it = m_.find_containing(va);
  if (it == m_.end()) {
    auto v = views_.containing(va);
    if (v.second && v.second->active && va < v.first + v.second->live.requested)
      return fail(VPMM_ERR_UNKNOWN_POINTER,
                  "%s: pointer %p is inside the allocation at 0x%" PRIx64 " (size %" PRIu64 "), not its start",
                  call, ptr, v.first, v.second->live.requested);
    if (v.second)
      return fail(VPMM_ERR_UNKNOWN_POINTER, "%s: pointer %p is not allocated (already freed?)", call, ptr);
    return fail(VPMM_ERR_UNKNOWN_POINTER, "%s: pointer %p was not allocated by this pool", call, ptr);
  }
  switch (it->second.kind) {
    case Kind::Live:
      return fail(VPMM_ERR_UNKNOWN_POINTER,
                  "%s: pointer %p is inside the allocation at 0x%" PRIx64 " (size %" PRIu64
                  "), not its start",
                  call, ptr, it->first, it->second.requested);
    case Kind::Free:
      return fail(VPMM_ERR_UNKNOWN_POINTER, "%s: pointer %p is not allocated (already freed?)", call,
                  ptr);
    default:
      return fail(VPMM_ERR_UNKNOWN_POINTER, "%s: pointer %p is in unallocated pool VA", call, ptr);
  }
}

vpmm_status Pool::free(void* ptr, Stream s) {
  if (!backend_->stream_valid(s))
    return fail(VPMM_ERR_INVALID_ARGUMENT, "vpmm_pool_free: stream %p is not a valid %s stream", s,
                backend_->name());
  uint64_t va = reinterpret_cast<uint64_t>(ptr);
  std::lock_guard<std::mutex> lock(mu_);
  DriverTally tally(c_);
  RegionIt it = m_.find(va);
  if (it != m_.end() &&
      (it->second.kind == Kind::Live || (it->second.kind == Kind::Paused && !it->second.was_small))) {
    c_.requested -= it->second.requested;
    --c_.n_live;
    ++c_.n_free;
    if (it->second.kind == Kind::Live) cap_.uncharge(it->second.charge, it->second.res);  // paused: none held
    if (ipc_.exporting()) ipc_.on_free(va);
    if (it->second.kind == Kind::Live)
      free_pages(it, s);
    else
      drop_paused(it);  // freeing a paused allocation returns its VA and drops its backup
    cap_.wake_reservers();
    tally.keep(true);
    return VPMM_OK;
  }
  if (it == m_.end() && !views_.empty()) {
    View* v = views_.find(va);
    if (v && v->active) {
      c_.requested -= v->live.requested;
      --c_.n_live;
      ++c_.n_free;
      cap_.uncharge(v->live.charge, v->live.res);
      free_view(*v, s);
      cap_.wake_reservers();
      tally.keep(true);
      return VPMM_OK;
    }
  }
  RegionIt in = it != m_.end() ? it : m_.find_containing(va);
  if (in != m_.end() &&
      (in->second.kind == Kind::Small || (in->second.kind == Kind::Paused && in->second.was_small))) {
    uint64_t freed_request = 0;
    Reservation* res = nullptr;
    const bool paused = in->second.kind == Kind::Paused;  // `in` may be gone after the free
    vpmm_status st = small_->free(in, va, s, &freed_request, &res);
    if (st != VPMM_OK) return fail_context(st, "vpmm_pool_free");
    if (ipc_.exporting()) ipc_.on_free(va);
    if (!paused) cap_.uncharge(small_charge(freed_request), res);  // paused: none held
    cap_.wake_reservers();
    c_.requested -= freed_request;
    --c_.n_live;
    ++c_.n_free;
    tally.keep(true);
    return VPMM_OK;
  }
  return fail_unknown_pointer("vpmm_pool_free", ptr);
}

vpmm_status Pool::lookup(const void* ptr, void** base, uint64_t* size) {
  uint64_t va = reinterpret_cast<uint64_t>(ptr);
  std::lock_guard<std::mutex> lock(mu_);
  RegionIt it = m_.find_containing(va);
  bool paused_page = it != m_.end() && it->second.kind == Kind::Paused && !it->second.was_small;
  if (it != m_.end() && (it->second.kind == Kind::Live || paused_page)) {
    if (va >= it->first + it->second.requested)
      return fail(VPMM_ERR_UNKNOWN_POINTER,
                  "vpmm_pool_lookup: pointer %p is in the page padding after the allocation at "
                  "0x%" PRIx64 " (size %" PRIu64 ")",
                  ptr, it->first, it->second.requested);
    if (base) *base = reinterpret_cast<void*>(it->first);
    if (size) *size = it->second.requested;
    return VPMM_OK;
  }
  if (it != m_.end() && (it->second.kind == Kind::Small || it->second.kind == Kind::Paused)) {
    uint64_t b = 0, sz = 0;
    if (small_->lookup(it, va, &b, &sz)) {
      if (base) *base = reinterpret_cast<void*>(b);
      if (size) *size = sz;
      return VPMM_OK;
    }
  }
  if (it == m_.end()) {
    auto v = views_.containing(va);
    if (v.second && v.second->active && va < v.first + v.second->live.requested) {
      if (base) *base = reinterpret_cast<void*>(v.first);
      if (size) *size = v.second->live.requested;
      return VPMM_OK;
    }
  }
  return fail(VPMM_ERR_UNKNOWN_POINTER, "vpmm_pool_lookup: pointer %p is not inside a live allocation of this pool", ptr);
}

// A view of a paused region's backup, or of an active one's retained backup:
// the pointer stays valid until the region is resumed (unless retained) or
// freed.
vpmm_status Pool::backup_lookup(const void* ptr, void** host, uint64_t* bytes) {
  const uint64_t va = reinterpret_cast<uint64_t>(ptr);
  std::lock_guard<std::mutex> lock(mu_);
  RegionIt it = m_.find_containing(va);
  if (it == m_.end()) {
    auto v = views_.containing(va);
    if (v.second && v.second->active && va < v.first + v.second->live.requested)
      return fail(VPMM_ERR_WRONG_STATE,
                  "vpmm_pool_backup_lookup: the allocation containing %p is active, not paused, and "
                  "keeps no retained backup of a completed pause", ptr);
  }
  if (it == m_.end() || it->second.kind == Kind::Hole || it->second.kind == Kind::Free ||
      it->second.kind == Kind::Zombie || it->second.kind == Kind::Transit)
    return fail(VPMM_ERR_UNKNOWN_POINTER,
                "vpmm_pool_backup_lookup: pointer %p is not inside an allocation of this pool", ptr);
  // An active allocation's backup counts only when retained and complete:
  // then it holds the bytes of the last pause.
  if (it->second.kind != Kind::Paused &&
      !(it->second.backup && it->second.backup->retain && it->second.backup->current))
    return fail(VPMM_ERR_WRONG_STATE,
                "vpmm_pool_backup_lookup: the allocation containing %p is active, not paused, and "
                "keeps no retained backup of a completed pause", ptr);
  if (!it->second.backup)
    return fail(VPMM_ERR_WRONG_STATE,
                "vpmm_pool_backup_lookup: the paused allocation containing %p has no host backup "
                "(allocated without VPMM_ALLOC_HOST_BACKUP)", ptr);
  const Backup& b = *it->second.backup;
  if (b.store == Store::Disk)
    return fail(VPMM_ERR_UNSUPPORTED,
                "vpmm_pool_backup_lookup: the backup of the allocation containing %p is the file %s "
                "(disk store), which has no host address", ptr, backups_->stores().file_path(b).c_str());
  // The same bytes vpmm_pool_lookup calls an allocation: not a page's
  // padding after it, nor a slab's free blocks.
  uint64_t base = it->first, size = it->second.requested;
  const bool slab = it->second.was_small || it->second.kind == Kind::Small;
  if (slab ? !small_->lookup(it, va, &base, &size) : va >= base + size)
    return fail(VPMM_ERR_UNKNOWN_POINTER,
                "vpmm_pool_backup_lookup: pointer %p is inside a backed-up range but not inside an "
                "allocation (padding or a free block)", ptr);
  if (host) *host = static_cast<char*>(b.host) + (va - it->first);
  if (bytes) *bytes = base + size - va;
  return VPMM_OK;
}

vpmm_status Pool::stream_synchronize(Stream s) {
  if (!backend_->stream_valid(s))
    return fail(VPMM_ERR_INVALID_ARGUMENT,
                "vpmm_pool_stream_synchronize: stream %p is not a valid %s stream", s,
                backend_->name());
  vpmm_status st = backend_->stream_sync(s);  // no pool lock: other threads keep allocating
  if (st != VPMM_OK) return fail_context(st, "vpmm_pool_stream_synchronize");
  return VPMM_OK;
}

vpmm_status Pool::stream_retire(Stream s) {
  std::lock_guard<std::mutex> lock(mu_);
  if (backups_->is_copy_stream(s))
    return fail(VPMM_ERR_INVALID_ARGUMENT,
                "vpmm_pool_stream_retire: stream %p is the pool's own copy stream (a stale handle?)", s);
  // Allocations made on the stream: pausing them later must not record on
  // it (it may be gone), so its last work is recorded now.
  std::vector<uint64_t> allocs;
  for (const auto& kv : m_.regions()) {
    const Region& r = kv.second;
    if (r.stream == s && (r.kind == Kind::Live || r.kind == Kind::Small || r.kind == Kind::Paused ||
                          r.kind == Kind::Lent))
      allocs.push_back(kv.first);
  }
  std::vector<uint64_t> live_views, idle_views;
  for (const auto& kv : views_.all()) {
    const View& v = kv.second;
    if (v.active && v.live.stream == s) live_views.push_back(kv.first);
    if (!v.active && v.last_free.stream == s) idle_views.push_back(kv.first);
  }
  StreamState* st = m_.find_stream(s);
  if (!st && allocs.empty() && live_views.empty()) return VPMM_OK;
  EventRef last;
  bool rekey_allocs = !allocs.empty() || !live_views.empty();
  if (rekey_allocs) {
    vpmm_status rs = record_event(s, &last);
    if (rs == VPMM_ERR_INVALID_ARGUMENT && backend_->device_sync() == VPMM_OK) {
      // Already destroyed: nothing queued there can still run. The
      // allocations keep their stream; a pause falls back the same way.
      rekey_allocs = false;
    } else if (rs != VPMM_OK) {
      return fail_context(rs, "vpmm_pool_stream_retire");
    } else if (st) {  // it covers the stream's frees too: the loop below records nothing more
      st->last_event = last;
      st->last_event_seq = st->free_seq;
    }
  }
  // One record covers every lazy free region of the stream (same stream order).
  std::vector<uint64_t> vas;
  if (st)
    for (const auto& e : st->free_by_size) {
      Region& r = m_.find(std::get<2>(e))->second;
      EventRef ev;
      vpmm_status rs = event_of(r, &ev);
      if (rs != VPMM_OK) return fail_context(rs, "vpmm_pool_stream_retire");
      vas.push_back(std::get<2>(e));
    }
  // An idle view's free point the same way: its event outlives the stream.
  for (uint64_t va : idle_views) {
    EventRef ev;
    vpmm_status rs = event_of(views_.find(va)->last_free, &ev);
    if (rs != VPMM_OK) return fail_context(rs, "vpmm_pool_stream_retire");
  }
  // A new stream may be created at the same address: re-key the regions to a
  // private key so they count as foreign (reused only once their event
  // completed) instead of "same stream, no wait needed".
  retired_keys_.emplace_back(new char);
  Stream key = retired_keys_.back().get();
  for (uint64_t va : vas) {
    RegionIt it = m_.find(va);
    Region r = it->second;
    r.stream = key;
    if (!r.event) r.seq = 0;  // clean: nothing left to wait for (and no stream to record on)
    m_.erase(it);
    m_.insert(va, r);
  }
  if (rekey_allocs) {
    for (uint64_t va : allocs) {
      Region& r = m_.find(va)->second;  // not indexed by stream: changed in place
      r.stream = key;
      r.event = last;
    }
    for (uint64_t va : live_views) {
      Region& r = views_.find(va)->live;
      r.stream = key;
      r.event = last;
    }
    small_->retire_stream(s, key);
  }
  for (uint64_t va : idle_views) {
    Region& r = views_.find(va)->last_free;
    r.stream = key;
    if (!r.event) r.seq = 0;
  }
  if (st) m_.forget_stream(s);
  return VPMM_OK;
}

std::string Pool::check() {
  std::lock_guard<std::mutex> lock(mu_);
  std::string e = m_.check(opt_.page_size, opt_.large_rounding);
  if (e.empty()) e = check_views();
  if (!e.empty()) return e;
  return small_->check();
}

}  // namespace vpmm
