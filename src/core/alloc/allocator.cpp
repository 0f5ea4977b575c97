// Allocator (see allocator.hpp): malloc and free at every size, the
// placement chain's run and the carve after it, the placement policy's
// calls, and what the allocations look like from outside (lookup, stats,
// snapshot, check). The steps are steps/*.cpp; Phase 0 and Phase 2 are
// Defrag's (defrag.cpp), views ViewAllocator's (view_alloc.cpp).
#include "core/alloc/allocator.hpp"

#include <algorithm>
#include <cinttypes>
#include <cstring>
#include <new>
#include <tuple>

#include "common/status.hpp"

namespace vpmm {

// The page level's steps, inlined into the malloc path (see alloc_pages).
#define VPMM_HOT_INLINE __attribute__((always_inline))

namespace {
constexpr uint64_t kSmallMinimum = kSmallQuantum;  // small_size below this disables small blocks
}  // namespace

Allocator::Allocator(PoolState& st)
    : StateRefs(st),
      small_(new SmallAllocator(*this, st.options().small_size)),
      defrag_(st, *small_),
      views_(st, *small_),
      budget_(st.options(), st.counters()),
      steps_ctx_(st, defrag_, views_, budget_) {}

Allocator::~Allocator() = default;

vpmm_status Allocator::init() {
  if (!placement_chain_name(opt_.placement))
    return fail(VPMM_ERR_INVALID_ARGUMENT, "vpmm_pool_create: placement %d is not a VPMM_PLACEMENT_* chain",
                opt_.placement);
  // The chain's row, with the steps the options add: views wherever a view
  // size is set (the views chain's default size, or one set explicitly),
  // pending reuse where the legacy switch asks for it; both before the
  // steps that grow or move, in their order of the pending chain.
  const PlacementChainDef& def = kPlacementChains[opt_.placement];
  bool has_views = false, has_pending = false;
  for (PageStepId id : def.steps) {
    has_views |= id == PageStepId::kViews;
    has_pending |= id == PageStepId::kPendingReuse;
  }
  size_t n = 0;
  for (PageStepId id : def.steps) {
    if (id == PageStepId::kEnd) break;
    const bool grows = id == PageStepId::kBudget || id == PageStepId::kRemap;
    if (grows && opt_.pending_reuse && !has_pending) {
      chain_[n++] = page_step(PageStepId::kPendingReuse);
      has_pending = true;
    }
    if (grows && opt_.view_min_size && !has_views) {
      chain_[n++] = page_step(PageStepId::kViews);
      has_views = true;
    }
    chain_[n++] = page_step(id);
  }
  chain_[n] = nullptr;
  steps_ctx_.views_in_chain = has_views && opt_.view_min_size;
  const PlacementEntry* e = find_placement(opt_.policy);
  if (e == nullptr)
    return fail(VPMM_ERR_INVALID_ARGUMENT, "vpmm_pool_create: no placement policy is named \"%s\"",
                opt_.policy);
  if (e->make) policy_ = e->make(opt_);
  return VPMM_OK;
}

void Allocator::shutdown() {
  small_->wait_pending();
  small_.reset();
  st_.wait_queued_work();
  // Views first: their handles are released with the primary mappings.
  views_.shutdown();
}

// ---------------------------------------------------------------------------
// The page level
// ---------------------------------------------------------------------------

inline VPMM_HOT_INLINE vpmm_status Allocator::run_chain(PageCall& call) {
  for (const PageStep* step = chain_; *step; ++step) {
    vpmm_status st = (*step)(steps_ctx_, call);
    if (st != kNextStep) return st;
  }
  // Phase 2 serves or fails every request it sees: a chain ends with it.
  return fail(VPMM_ERR_INTERNAL, "placement chain \"%s\" served no step", placement_chain_name(opt_.placement));
}

inline VPMM_HOT_INLINE void Allocator::finish_pages(PageCall& call) {
  RegionIt r = call.out;
  const uint64_t bytes = call.bytes;
  const Stream s = call.stream;
  if (call.attrs.tag != 0) {
    // Start on the handle run that fits exactly; the head stays free.
    uint64_t off = exact_run(m_, r->first, r->second.size, bytes);
    if (off != 0 && off != UINT64_MAX) r = m_.split(r, off);
  }
  // The memory's earlier work, ordered for a free on another stream
  // (PoolState::handover_seq): this stream's own (safe for this allocation
  // by stream order), or a lender's this stream now waits for.
  const uint64_t seq = st_.handover_seq(s, r->second, call.waited);
  const Attrs& a = call.attrs;
  // The rest after `bytes` stays free: it keeps stream, event, id.
  m_.carve(r, bytes, call.kind, [&](Region& live) {
    live.stream = s;
    live.id = st_.next_id();
    live.seq = seq;
    live.requested = call.requested;
    live.tag = a.tag;
    live.flags = a.flags;
  });
  note_peaks();
  // Same-stream harvests often have completed events already: unmap their old
  // VAs now so the layout after the call is final ([*X] rather than [~X]).
  // With a window, the malloc does it once the allocation is complete:
  // the mutex may not be released around a half-made one.
  // Without a window at most as many handles as this call moved, for the
  // reason above (the mutex is held).
  if (call.remapped && !call.window) defrag_.reap_zombies(nullptr, call.ops);
  call.out = r;
}

// Every page-level malloc's path: no policy object, the chain's run and the
// carve inlined (split, each cost a call of ten arguments on the hot path).
inline VPMM_HOT_INLINE vpmm_status Allocator::alloc_pages(uint64_t bytes, Stream s, Kind kind, uint64_t requested,
                                                         const Attrs& a, LockWindow* window, RegionIt* out,
                                                         size_t* handle_ops, uint64_t* view_va) {
  PageCall call;
  call.bytes = bytes;
  call.requested = requested;
  call.stream = s;
  call.kind = kind;
  call.attrs = a;
  call.exact = a.tag != 0;
  call.window = window;
  call.view_va = view_va;
  vpmm_status st = policy_ ? alloc_with_policy(call) : run_chain(call);
  if (st != VPMM_OK) return st;
  if (call.out != m_.end() && !call.carved) finish_pages(call);  // else a view served it
  if (handle_ops) *handle_ops += call.ops;
  *out = call.out;
  return VPMM_OK;
}

// A policy first; what it declines, the chain.
vpmm_status Allocator::alloc_with_policy(PageCall& call) {
  PageRequest req;
  req.seq = ++seq_;
  req.bytes = call.bytes;
  req.requested = call.requested;
  req.stream = call.stream;
  req.kind = call.kind;
  req.attrs = call.attrs;
  RegionIt r;
  window_ = call.window;
  vpmm_status st = policy_->place(req, *this, &r);
  window_ = nullptr;
  if (st == VPMM_OK) st = check_placed(req, r);
  if (st == VPMM_OK) call.out = r;
  if (st == PlacementPolicy::kDecline) st = run_chain(call);
  if (st != VPMM_OK) return st;
  // The carve now, so the policy hears where the allocation went.
  if (call.out != m_.end()) finish_pages(call);
  policy_->placed(req, call.out != m_.end() ? call.out->first : *call.view_va,
                  call.out != m_.end() ? call.out->second.id : views_.table().find(*call.view_va)->live.id);
  call.carved = true;
  return VPMM_OK;
}

vpmm_status Allocator::check_placed(const PageRequest& req, RegionIt r) const {
  const bool free_fit = r != m_.end() && r->second.kind == Kind::Free && r->second.size >= req.bytes;
  if (!free_fit || (req.attrs.tag != 0 && exact_run(m_, r->first, r->second.size, req.bytes) == UINT64_MAX))
    return fail(VPMM_ERR_INTERNAL,
                "placement policy \"%s\" placed a request of %" PRIu64 " bytes in a region that cannot hold it",
                opt_.policy, req.bytes);
  return VPMM_OK;
}

bool Allocator::usable(uint64_t va, Stream s) {
  RegionIt r = m_.find(va);
  if (r == m_.end() || r->second.kind != Kind::Free) return false;
  if (r->second.stream == s || r->second.stream == clean_stream()) return true;
  bool done = false;
  return st_.is_complete(r->second, &done) == VPMM_OK && done;
}

vpmm_status Allocator::default_place(const PageRequest& r, RegionIt* out) {
  PageCall call;
  call.bytes = r.bytes;
  call.requested = r.requested;
  call.stream = r.stream;
  call.kind = r.kind;
  call.attrs = r.attrs;
  call.exact = r.attrs.tag != 0;
  call.window = window_;
  vpmm_status st = run_chain(call);  // no view_va: views are not tried
  *out = call.out;
  return st;
}

vpmm_status Allocator::assemble(uint64_t bytes, Stream s, RegionIt* out) {
  size_t ops = 0;
  vpmm_status st = defrag_.defragment(bytes, s, false, nullptr, window_, out, &ops);
  if (st == VPMM_OK && (*out)->second.size < bytes) st = defrag_.defragment(bytes, s, false, nullptr, nullptr, out, &ops);
  return st;
}

vpmm_status Allocator::take_slab_pages(uint64_t bytes, Stream s, const Attrs& a, RegionIt* out) {
  return alloc_pages(bytes, s, Kind::Small, 0, a, nullptr, out);
}

void Allocator::return_slab_pages(uint64_t va, Stream s, bool paused) {
  if (slab_watcher_) slab_watcher_->slab_gone(va);  // a tag export shared the slab whole
  RegionIt r = m_.find(va);
  if (paused) {
    st_.drop_paused(r);
  } else {
    free_and_tell(r, va, s);
  }
}

void Allocator::slab_emptied(uint64_t va) {
  // A tagged slab's backup holds the freed blocks' bytes: a disk file would
  // keep them in the user's directory while the slab waits in the cache.
  // The next pause of the slab, once it serves again, makes a new one.
  RegionIt r = m_.find(va);
  if (r != m_.end() && r->second.backup) st_.drop_backup(r->second);
}

bool Allocator::release_cached_slabs() {
  if (small_->empty_bytes_if_settled() == 0) return false;
  small_->release_empty_slabs();
  return true;
}

const Region* Allocator::region_at(uint64_t va) const {
  auto it = m_.regions().find(va);
  return it == m_.regions().end() ? nullptr : &it->second;
}

size_t Allocator::count_small_regions() const {
  size_t n = 0;
  for (const auto& r : m_.regions())
    if (r.second.kind == Kind::Small || (r.second.kind == Kind::Paused && r.second.was_small)) ++n;
  return n;
}

void Allocator::free_pages(RegionIt it, Stream s) {
  if (it->second.backup) st_.drop_backup(it->second);  // retained, or a disk file
  if (s != it->second.stream) st_.order_after_alloc_stream(it->second, s);
  // A slab of a retired stream comes back on that stream's key, which is no
  // stream to record on: its event was recorded when the stream retired.
  EventRef event = s == it->second.stream ? std::move(it->second.event) : EventRef();
  const uint64_t seq = ++m_.stream(s).free_seq;
  m_.remake_coalesced(it, Kind::Free, [&](Region& fr) {
    fr.stream = s;
    fr.id = st_.next_id();
    fr.seq = seq;
    fr.event = std::move(event);
  });
}

// ---------------------------------------------------------------------------
// malloc and free
// ---------------------------------------------------------------------------

vpmm_status Allocator::malloc(uint64_t size, Stream s, const Attrs& a, Reservation* res, LockWindow* window,
                              void** out) {
  const uint64_t page = opt_.page_size;
  const bool small = size <= opt_.small_size && opt_.small_size >= kSmallMinimum;
  if (!small && size > UINT64_MAX - (page - 1))
    return fail(VPMM_ERR_INVALID_ARGUMENT,
                "size %" PRIu64 " overflows when rounded up to the page size %" PRIu64, size, page);
  // Tagged memory owns whole pages (a pause releases exactly its handles).
  const uint64_t unit = a.tag ? page : opt_.large_rounding;
  // Both units are powers of two but for an odd page size; a mask saves the
  // 64-bit division (~1 ns of the 2 MiB alloc+free pair, bench/host_hot_path.c).
  const uint64_t bytes = small                 ? small_charge(size)
                         : (unit & (unit - 1)) ? (size + unit - 1) / unit * unit
                                               : (size + unit - 1) & ~(unit - 1);
  vpmm_status st = cap_.admit(bytes, res);
  if (st != VPMM_OK) return st;
  budget_.tick();
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
      Region& live = view_va ? views_.table().find(view_va)->live : r->second;
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
    defrag_.reap_zombies(window, kHandleOpsPerCall - std::min(kHandleOpsPerCall, handle_ops));
  return VPMM_OK;
}

vpmm_status Allocator::fail_unknown_pointer(const char* call, const void* ptr) {
  uint64_t va = reinterpret_cast<uint64_t>(ptr);
  RegionIt it = m_.find_containing(va);
  if (it == m_.end()) {
    auto v = views_.table().containing(va);
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

vpmm_status Allocator::free(uint64_t va, Stream s) {
  budget_.tick();
  RegionIt it = m_.find(va);
  if (it != m_.end() &&
      (it->second.kind == Kind::Live || (it->second.kind == Kind::Paused && !it->second.was_small))) {
    c_.requested -= it->second.requested;
    --c_.n_live;
    ++c_.n_free;
    if (it->second.kind == Kind::Live) {
      cap_.uncharge(it->second.charge, it->second.res);
      free_and_tell(it, va, s);
    } else {
      st_.drop_paused(it);  // freeing a paused allocation returns its VA and drops its backup (none held)
    }
    return VPMM_OK;
  }
  if (it == m_.end() && !views_.empty()) {
    View* v = views_.table().find(va);
    if (v && v->active) {
      c_.requested -= v->live.requested;
      --c_.n_live;
      ++c_.n_free;
      cap_.uncharge(v->live.charge, v->live.res);
      const PageFree f{0, va, v->live.size, v->live.id, s, v->live.kind, true};
      views_.free(*v, s);
      if (policy_) tell_freed(f);
      return VPMM_OK;
    }
  }
  RegionIt in = it;
  if (in == m_.end()) in = m_.find_small(va);
  if (in == m_.end()) in = m_.find_containing(va);
  if (in != m_.end() &&
      (in->second.kind == Kind::Small || (in->second.kind == Kind::Paused && in->second.was_small))) {
    uint64_t freed_request = 0;
    Reservation* res = nullptr;
    const bool paused = in->second.kind == Kind::Paused;  // `in` may be gone after the free
    vpmm_status st = small_->free(in, va, s, &freed_request, &res);
    if (st != VPMM_OK) return fail_context(st, "vpmm_pool_free");
    if (!paused) cap_.uncharge(small_charge(freed_request), res);  // paused: none held
    c_.requested -= freed_request;
    --c_.n_live;
    ++c_.n_free;
    return VPMM_OK;
  }
  return fail_unknown_pointer("vpmm_pool_free", reinterpret_cast<const void*>(va));
}

vpmm_status Allocator::lookup(const void* ptr, void** base, uint64_t* size) {
  uint64_t va = reinterpret_cast<uint64_t>(ptr);
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
    auto v = views_.table().containing(va);
    if (v.second && v.second->active && va < v.first + v.second->live.requested) {
      if (base) *base = reinterpret_cast<void*>(v.first);
      if (size) *size = v.second->live.requested;
      return VPMM_OK;
    }
  }
  return fail(VPMM_ERR_UNKNOWN_POINTER, "vpmm_pool_lookup: pointer %p is not inside a live allocation of this pool", ptr);
}

// ---------------------------------------------------------------------------
// Streams and reservations
// ---------------------------------------------------------------------------

vpmm_status Allocator::stream_retire(Stream s) {
  // Allocations made on the stream: pausing them later must not record on
  // it (it may be gone), so its last work is recorded now.
  std::vector<uint64_t> allocs;
  for (const auto& kv : m_.regions()) {
    const Region& r = kv.second;
    if (r.stream == s && (r.kind == Kind::Live || r.kind == Kind::Small || r.kind == Kind::Paused ||
                          r.kind == Kind::Lent))
      allocs.push_back(kv.first);
  }
  ViewTable& views = views_.table();
  std::vector<uint64_t> live_views, idle_views;
  for (const auto& kv : views.all()) {
    const View& v = kv.second;
    if (v.active && v.live.stream == s) live_views.push_back(kv.first);
    if (!v.active && v.last_free.stream == s) idle_views.push_back(kv.first);
  }
  StreamState* st = m_.find_stream(s);
  if (!st && allocs.empty() && live_views.empty()) return VPMM_OK;
  EventRef last;
  bool rekey_allocs = !allocs.empty() || !live_views.empty();
  if (rekey_allocs) {
    vpmm_status rs = st_.record_event(s, &last);
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
      vpmm_status rs = st_.event_of(r, &ev);
      if (rs != VPMM_OK) return fail_context(rs, "vpmm_pool_stream_retire");
      vas.push_back(std::get<2>(e));
    }
  // An idle view's free point the same way: its event outlives the stream.
  for (uint64_t va : idle_views) {
    EventRef ev;
    vpmm_status rs = st_.event_of(views.find(va)->last_free, &ev);
    if (rs != VPMM_OK) return fail_context(rs, "vpmm_pool_stream_retire");
  }
  // A new stream may be created at the same address: re-key the regions to a
  // private key so they count as foreign (reused only once their event
  // completed) instead of "same stream, no wait needed".
  Stream key = st_.retired_key();
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
      Region& r = views.find(va)->live;
      r.stream = key;
      r.event = last;
    }
    small_->retire_stream(s, key);
  }
  for (uint64_t va : idle_views) {
    Region& r = views.find(va)->last_free;
    r.stream = key;
    if (!r.event) r.seq = 0;
  }
  if (st) m_.forget_stream(s);
  return VPMM_OK;
}

void Allocator::release_reservation(Reservation* r) {
  for (auto& kv : m_)
    if (kv.second.res == r) {
      kv.second.res = nullptr;
      // A paused allocation holds no charge until it is resumed.
      if (kv.second.kind != Kind::Paused) cap_.charge_unreserved(kv.second.charge);
    }
  cap_.charge_unreserved(small_->forget_reservation(r));
}

// ---------------------------------------------------------------------------
// Observability: totals are kept incrementally by RegionMap, so a stats call
// costs O(streams), never a scan.
// ---------------------------------------------------------------------------

void Allocator::fill_stats(vpmm_stats* out) {
  // No side effects: reading the counters must not change what the pool does
  // next (it once settled small blocks here, so `vpmm replay --timeline`
  // changed later placements and peaks). Blocks freed on another stream
  // return to their slabs at the next small malloc, as they would unobserved.
  vpmm_stats& s = *out;
  const ViewTable& views = views_.table();
  const Totals& t = m_.totals();
  s.mapped_bytes = t.mapped;
  s.reserved_va_bytes = t.reserved + views.reserved();
  // Empty small-object slabs are cached memory, not live: they count as free,
  // and so do slabs whose blocks only wait for completed events, and free
  // pages a malloc in flight is moving into its new span.
  const uint64_t small_empty = small_->empty_bytes_if_settled();
  s.live_bytes = t.live + t.small + t.lent - small_empty;
  s.requested_bytes = c_.requested;
  s.free_bytes = t.free + t.moving + small_empty;
  s.hole_bytes = t.hole;
  for (const auto& kv : views.all())  // a view's VA without its allocation: a hole (snapshot)
    s.hole_bytes += kv.second.size - kv.second.held();
  s.zombie_bytes = t.zombie;
  s.peak_mapped_bytes = c_.peak_mapped;
  s.peak_live_bytes = c_.peak_live;
  s.n_malloc = c_.n_malloc;
  s.n_free = c_.n_free;
  s.n_defrag = c_.n_defrag;
  s.n_grow = c_.n_grow;
  s.pages_created = c_.pages_created;
  s.bytes_remapped = c_.bytes_remapped;
  s.page_size = opt_.page_size;
  s.handles = m_.mappings().size();
  s.handles_created = c_.handles_created;
  s.va_chunks = m_.chunks().size() + views.size();  // a view is a chunk of its own (snapshot)
  for (const auto& kv : m_.streams())
    if (!kv.second.free_by_size.empty())
      s.largest_free_bytes = std::max(s.largest_free_bytes, std::get<0>(*kv.second.free_by_size.rbegin()));
  s.small_bytes = t.small;
  s.small_live_bytes = small_->live_bytes();
  s.n_small_malloc = c_.n_small_malloc;
  s.n_cross_stream_reuse = c_.n_cross_stream_reuse;
  s.n_stream_waits = c_.n_stream_waits;
  s.n_events_recorded = c_.n_events_recorded;
  s.n_zombies_reaped = c_.n_zombies_reaped;
  s.n_live = c_.n_live;
  s.paused_bytes = t.paused;
  s.backup_bytes = c_.backup_bytes;
  s.n_pause = c_.n_pause;
  s.n_resume = c_.n_resume;
  s.n_trim = c_.n_trim;
  s.bytes_trimmed = c_.bytes_trimmed;
  s.driver_ns = c_.driver_ns;
  s.driver_calls = c_.driver_calls;
  s.lent_bytes = t.lent;
  s.n_views = views.size();
  s.view_va_bytes = views.reserved();
  s.n_view_malloc = c_.n_view_malloc;
  s.n_view_reuse = c_.n_view_reuse;
  s.handles_moved = c_.handles_moved;
  s.n_budget_grow = c_.n_budget_grow;
  s.bytes_budget_grown = c_.bytes_budget_grown;
}

std::vector<vpmm_region_info> Allocator::snapshot() {
  std::vector<vpmm_region_info> out;
  out.reserve(m_.regions().size());
  for (auto& kv : m_) {
    const Region& r = kv.second;
    vpmm_region_info x;
    std::memset(&x, 0, sizeof x);
    x.struct_size = sizeof x;
    x.va = kv.first;
    x.size = r.size;
    // A transit region is a hole being mapped by a malloc still in flight.
    x.kind = r.kind == Kind::Transit ? VPMM_REGION_HOLE
             : r.kind == Kind::Lent  ? VPMM_REGION_LENT
                                     : static_cast<int32_t>(r.kind);
    x.chunk = r.chunk;
    x.chunk_offset = kv.first - m_.chunks()[r.chunk].va;
    if (r.kind == Kind::Live || r.kind == Kind::Small || r.kind == Kind::Free || r.kind == Kind::Lent) {
      x.handles = RegionMap::count_mappings_in(m_.mappings(), kv.first, r.size);
      x.stream = r.stream == clean_stream() ? nullptr : r.stream;  // never used: no stream
      x.id = r.id;
    } else if (r.kind == Kind::Zombie) {
      x.handles = RegionMap::count_mappings_in(m_.zombie_mappings(), kv.first, r.size);
    }
    if (r.kind == Kind::Live) x.requested = r.requested;
    if (r.kind == Kind::Small) {
      x.requested = small_->requested_in(r.owner);
      x.event_pending = small_->waits_on_event(r.owner) ? 1 : 0;
    }
    if ((r.kind == Kind::Free || r.kind == Kind::Zombie) && r.event && !r.event->done_cached()) {
      bool done = true;
      if (backend_->event_query(r.event->handle(), &done) == VPMM_OK) {
        if (done) r.event->mark_done();
        x.event_pending = done ? 0 : 1;
      }
    }
    out.push_back(x);
  }
  // A view is a chunk of its own after the pool's, so that the regions tile
  // all reserved VA: a live one holds the allocation over the slots it
  // holds, then what of its VA it does not use; an idle one is a hole (its
  // mappings are the pool's free memory, counted at home).
  uint32_t chunk = static_cast<uint32_t>(m_.chunks().size());
  for (const auto& kv : views_.table().all()) {
    const View& v = kv.second;
    if (!v.active) {
      vpmm_region_info x;
      std::memset(&x, 0, sizeof x);
      x.struct_size = sizeof x;
      x.kind = VPMM_REGION_HOLE;
      x.va = kv.first;
      x.size = v.size;
      x.chunk = chunk++;
      out.push_back(x);
      continue;
    }
    const uint64_t held = v.held();
    vpmm_region_info x;
    std::memset(&x, 0, sizeof x);
    x.struct_size = sizeof x;
    x.kind = VPMM_REGION_LIVE;
    x.va = kv.first;
    x.size = held;
    x.chunk = chunk;
    x.handles = static_cast<uint32_t>(v.n_lent);
    x.id = v.live.id;
    x.requested = v.live.requested;
    x.stream = v.live.stream;
    out.push_back(x);
    if (v.size > held) {
      x.kind = VPMM_REGION_HOLE;
      x.va = kv.first + held;
      x.size = v.size - held;
      x.chunk_offset = held;
      x.handles = 0;
      x.id = x.requested = 0;
      x.stream = nullptr;
      out.push_back(x);
    }
    ++chunk;
  }
  std::sort(out.begin(), out.end(),
            [](const vpmm_region_info& a, const vpmm_region_info& b) { return a.va < b.va; });
  return out;
}

std::string Allocator::check() {
  std::string e = m_.check(opt_.page_size, opt_.large_rounding);
  if (e.empty()) e = views_.check();
  if (!e.empty()) return e;
  return small_->check();
}

}  // namespace vpmm
