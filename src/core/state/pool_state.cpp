// PoolState (see pool_state.hpp): events, handles and VA, and the steps of
// the pool's end.
#include "core/state/pool_state.hpp"

#include <algorithm>
#include <cinttypes>
#include <new>

#include "common/status.hpp"

namespace vpmm {

PoolState::PoolState(std::unique_ptr<Backend> backend, std::unique_ptr<HostServices> host, const PoolOptions& opt)
    : backend_(std::move(backend)), host_(std::move(host)), opt_(opt) {
  if (opt_.large_rounding == 0) opt_.large_rounding = opt_.page_size;  // whole pages
  cap_.init(opt.memory_limit, opt.device_total, opt.watermark_trigger, opt.watermark_stop);
  m_.index_small_by_page(opt_.page_size);
}

vpmm_status PoolState::init() {
  const PoolOptions& opt = opt_;
  uint64_t va = 0, size = 0;
  vpmm_status st = reserve_chunk(opt.page_size, &va, &size);
  if (st != VPMM_OK) return st;
  m_.add_chunk(va, size);
  if (opt.initial_pages == 0) return VPMM_OK;
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
  st = check_growth_limit(bytes);
  if (st == VPMM_OK) st = create_handles(bytes, capped ? opt.max_handle_size : opt.page_size, &hs, &orphans_);
  if (st != VPMM_OK) return fail_context(st, "vpmm_pool_create: initial_pages");
  uint64_t cur = va;
  size_t n = 0;
  for (; n < hs.size(); ++n) {
    st = backend_->map(cur, hs[n].size, hs[n].handle);
    if (st != VPMM_OK) break;
    m_.map_new(cur, hs[n]);
    cur += hs[n].size;
  }
  for (size_t i = n; i < hs.size(); ++i) release_handle(hs[i]);  // never mapped
  if (st == VPMM_OK) st = backend_->set_access(va, bytes);
  // The destructor unmaps and releases what was mapped, and the chunk.
  if (st != VPMM_OK) return fail_context(st, "vpmm_pool_create: initial_pages");
  c_.pages_created += opt.initial_pages;
  c_.handles_created += hs.size();
  RegionIt it = m_.find(va);
  if (size > bytes) m_.split(it, bytes);
  m_.remake(m_.find(va), Kind::Free, [&](Region& fr) {
    fr.stream = clean_stream();  // never used: any stream may take it without waiting
    fr.id = next_id_++;
  });
  note_peaks(0);
  return VPMM_OK;
}

// ---------------------------------------------------------------------------
// Events
// ---------------------------------------------------------------------------

vpmm_status PoolState::event_of(Region& r, EventRef* out) {
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

vpmm_status PoolState::query(const EventRef& ev, bool* done) {
  if (!ev || ev->done_cached()) {
    *done = true;
    return VPMM_OK;
  }
  vpmm_status s = backend_->event_query(ev->handle(), done);
  if (s == VPMM_OK && *done) ev->mark_done();
  return s;
}

vpmm_status PoolState::is_complete(Region& r, bool* done) {
  EventRef ev;
  vpmm_status s = event_of(r, &ev);
  if (s != VPMM_OK) return s;
  return query(ev, done);
}

vpmm_status PoolState::record_event(Stream s, EventRef* out) {
  EventHandle h = 0;
  vpmm_status st = backend_->event_record(s, &h);
  if (st != VPMM_OK) return st;
  ++c_.n_events_recorded;
  *out = std::make_shared<Event>(backend_.get(), h);
  return VPMM_OK;
}

void PoolState::wait(const EventRef& ev) {
  if (ev && !ev->done_cached() && backend_->event_sync(ev->handle()) == VPMM_OK) ev->mark_done();
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
void PoolState::order_after_alloc_stream(const Region& live, Stream s) {
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

vpmm_status PoolState::order_stream_after(Stream s, Stream on) {
  for (Stream x : {s, on})
    if (!backend_->stream_valid(x))
      return fail(VPMM_ERR_INVALID_ARGUMENT, "stream %p is not a valid %s stream", x, backend_->name());
  if (s == on) return VPMM_OK;  // ordered by the stream itself
  EventRef ev;
  vpmm_status st = record_event(on, &ev);
  // The wait keeps the point it was given: the event may go right after.
  if (st == VPMM_OK) st = backend_->stream_wait(s, ev->handle());
  if (st != VPMM_OK) return fail_context(st, "ordering one stream after another");
  ++c_.n_stream_waits;
  return VPMM_OK;
}

// ---------------------------------------------------------------------------
// Handles and VA
// ---------------------------------------------------------------------------

vpmm_status PoolState::reserve_chunk(uint64_t min_bytes, uint64_t* va, uint64_t* size) {
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

vpmm_status PoolState::create_handles(uint64_t bytes, uint64_t max_handle, std::vector<Mapping>* out,
                                      std::vector<Mapping>* orphans) {
  max_handle = std::max<uint64_t>(opt_.page_size, max_handle / opt_.page_size * opt_.page_size);
  // The driver's own limit (HIP's chunked hipMemCreate) caps every policy.
  if (const uint64_t cap = backend_->max_handle_size())
    max_handle = std::min(max_handle, std::max<uint64_t>(opt_.page_size, cap / opt_.page_size * opt_.page_size));
  max_handle = std::min(max_handle, std::max<uint64_t>(bytes, 1));
  std::vector<Mapping> hs;
  // Bounded: a request far beyond the device (views grow in page handles)
  // fails at the driver's first refusal, not in a host allocation of one
  // entry per page it would have needed.
  hs.reserve(std::min<uint64_t>(bytes / max_handle + 1, 4096));
  if (admission_) {
    vpmm_status st = admission_->admit(bytes);
    if (st != VPMM_OK) return st;
  }
  uint64_t left = bytes;
  while (left) {
    uint64_t sz = std::min(left, max_handle);
    PhysHandle ph = 0;
    vpmm_status st = backend_->create(sz, &ph);
    if (st != VPMM_OK) {
      release_handles_into(hs, orphans);
      if (admission_) admission_->give_back(left);  // admitted, never created
      return st;
    }
    hs.push_back({ph, sz});
    left -= sz;
  }
  *out = std::move(hs);
  return VPMM_OK;
}

uint64_t PoolState::growth_handle_size(uint64_t shortfall, bool tagged) const {
  const uint64_t page = opt_.page_size;
  if (opt_.max_handle_size == kUnlimitedHandle) return shortfall;
  if (opt_.max_handle_size) return opt_.max_handle_size;
  if (tagged) return shortfall;
  return std::max(page, shortfall / kHandlesPerGrowth / page * page);
}

void PoolState::release_handles(const std::vector<Mapping>& hs) {
  for (const Mapping& h : hs) release_handle(h);
}

vpmm_status PoolState::release_counted(const Mapping& h) {
  vpmm_status st = backend_->release(h.handle, h.size);
  if (st == VPMM_OK && admission_) admission_->give_back(h.size);
  return st;
}

void PoolState::release_handles_into(const std::vector<Mapping>& hs, std::vector<Mapping>* orphans) {
  for (const Mapping& h : hs)
    if (release_counted(h) != VPMM_OK) orphans->push_back(h);
}

void PoolState::release_handle(const Mapping& h) {
  if (handle_listener_) handle_listener_->before_release(h.handle);
  // An unmapped handle nobody uses: if the driver refuses to release it now,
  // keep it and try again at the next trim or at destroy rather than leak it.
  if (release_counted(h) != VPMM_OK) orphans_.push_back(h);
}

void PoolState::retry_orphans() {
  size_t kept = 0;
  for (const Mapping& h : orphans_)
    if (release_counted(h) != VPMM_OK) orphans_[kept++] = h;
  orphans_.resize(kept);
}

Stream PoolState::retired_key() {
  retired_keys_.emplace_back(new char);
  return retired_keys_.back().get();
}

// ---------------------------------------------------------------------------
// Giving memory back
// ---------------------------------------------------------------------------

void PoolState::drop_backup(Region& r) {
  if (r.kind == Kind::Paused) c_.backup_bytes -= r.size;
  backup_releaser_->release_backup(r.backup);
  r.backup = nullptr;
}

void PoolState::drop_paused(RegionIt it) {
  if (it->second.backup) drop_backup(it->second);
  m_.make_hole(it);
}

// ---------------------------------------------------------------------------
// The pool's end
// ---------------------------------------------------------------------------

namespace {
// A failing driver call is retried once: destroy is the last chance to give
// memory back.
template <typename F>
void twice(F&& f) {
  if (f() != VPMM_OK) f();
}
}  // namespace

void PoolState::wait_queued_work() {
  for (auto& kv : m_) {
    Region& r = kv.second;
    if ((r.kind == Kind::Free && r.seq != 0) || r.kind == Kind::Zombie) {
      EventRef ev;
      if (event_of(r, &ev) == VPMM_OK && ev && !ev->done_cached()) backend_->event_sync(ev->handle());
    }
  }
}

void PoolState::release_all() {
  for (auto& z : m_.zombie_mappings()) twice([&] { return backend_->unmap(z.first, z.second.size); });
  for (auto& mp : m_.mappings()) {
    twice([&] { return backend_->unmap(mp.first, mp.second.size); });
    release_handle(mp.second);
  }
  retry_orphans();
  for (const Mapping& h : orphans_) twice([&] { return release_counted(h); });
  for (auto& kv : m_)  // paused, retained and disk backups: memory and files given back
    if (kv.second.backup) drop_backup(kv.second);
  m_.clear();  // drops the events while the backend still exists
}

void PoolState::unreserve_chunks() {
  for (const Chunk& c : m_.chunks()) twice([&] { return backend_->unreserve(c.va, c.size); });
}

}  // namespace vpmm
