// ViewAllocator (see view_alloc.hpp; views.hpp says what a view is and why).
#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <new>
#include <string>

#include "common/status.hpp"
#include "core/alloc/view_alloc.hpp"

#include "core/alloc/first_fit.hpp"

namespace vpmm {

namespace {

// Views held, live and idle: past it a new view first evicts the least
// recently used idle one whose last use completed, and when none can go the
// request is Phase 2's. Each view holds VA only (its handles are the pool's
// free memory), and a training loop needs one per distinct large size that
// has to be assembled (the hard client: seven).
constexpr size_t kMaxViews = 32;

struct Free {
  uint64_t va;       // the handle's home
  Mapping m;
  uint64_t region;   // size of the free region it lies in
  bool pending;      // freed on another stream by work still queued: needs a wait
};

}  // namespace

struct ViewTransit {
  uint64_t bytes = 0;
  Stream stream = nullptr;
  uint64_t va = 0;                 // the view; a fresh one is reserved by map()
  bool fresh = false;
  uint64_t size = 0;               // the view's VA
  std::vector<ViewSlot> old_slots; // a reused view's slots before
  std::vector<ViewSlot> slots;     // after; grown handles are filled in by map()
  size_t n_lent = 0;
  std::vector<size_t> unmaps;      // indexes into old_slots whose mappings go
  std::vector<size_t> maps;        // indexes into slots to map at the view
  std::vector<size_t> grown;       // indexes into slots that get created handles (pages)
  struct Lend {
    uint64_t va, size;
    Region original;               // the free region piece it was (claim fills it in)
  };
  std::vector<Lend> lends;
  uint64_t shortfall = 0;          // growth: page handles, homed in a hole of the chunks
  bool have_hole = false;          // false: map() reserves a new chunk
  uint64_t hole_va = 0, chunk_va = 0, chunk_size = 0;
  std::vector<Mapping> created;
  std::vector<Mapping> orphans;
  size_t n_unmapped = 0, n_view_mapped = 0, n_home_mapped = 0;
  bool va_reserved = false;
  bool waited = false;             // the stream waits on the GPU for a lender's work
};

ViewAllocator::ViewAllocator(PoolState& st, const SmallAllocator& small)
    : StateRefs(st),
      small_(small),
      min_size_(opt_.view_min_size) {}

uint64_t ViewAllocator::slot_offset(const std::vector<ViewSlot>& slots, size_t i) {
  uint64_t off = 0;
  for (size_t k = 0; k < i; ++k) off += slots[k].size;
  return off;
}

// Free memory a view on stream s may take: any free region whose free point
// can be waited for. Memory freed on s (stream order), never used, or freed
// elsewhere by work that completed needs nothing; memory freed on another
// stream whose work is still queued is usable after a GPU-side wait of s on
// that stream's event (wait), as Phase 2 harvests it. Live, the
// hard client's side streams free their gather buffers while the GPU is
// still behind: a view that skipped them grew instead (1.027-1.044x the live
// bytes on the H200, docs/handles.md "Views"). *pending (may be null) says
// whether a wait is needed; it is false on the host backend's replays, whose
// events complete at once.
bool ViewAllocator::usable_by(Region& r, Stream s, bool* pending) {
  if (pending) *pending = false;
  if (r.kind != Kind::Free) return false;
  if (r.stream == s || r.stream == clean_stream()) return true;
  bool done = false;
  if (st_.is_complete(r, &done) != VPMM_OK) return false;
  if (pending) *pending = !done;
  return true;
}

bool ViewAllocator::home_free(const ViewSlot& slot, Stream s) {
  if (!slot.handle) return false;
  const uint64_t va = m_.primary_va_of(slot.handle);
  if (va == UINT64_MAX) return false;
  RegionIt r = m_.find_containing(va);
  return r != m_.end() && va + slot.size <= r->first + r->second.size && usable_by(r->second, s);
}

vpmm_status ViewAllocator::idle_done(View& v, bool* done) {
  EventRef ev;
  vpmm_status st = st_.event_of(v.last_free, &ev);
  if (st != VPMM_OK) return st;
  return st_.query(ev, done);
}

// ---------------------------------------------------------------------------
// Plan
// ---------------------------------------------------------------------------

vpmm_status ViewAllocator::plan(ViewTransit* t) {
  const uint64_t page = opt_.page_size;
  const uint64_t need = (t->bytes + page - 1) / page * page;
  // The idle view needing the fewest replaced bytes; one with stale slots
  // only if its last use completed (its mappings may go now).
  uint64_t best_va = 0, best_stale = UINT64_MAX;
  for (auto& kv : views_.all()) {
    View& v = kv.second;
    if (v.active || v.busy || v.size < need) continue;
    uint64_t covered = 0, stale = 0;
    for (const ViewSlot& s : v.slots) {
      if (covered >= t->bytes) break;
      if (!home_free(s, t->stream)) stale += s.size;
      covered += s.size;
    }
    if (stale > best_stale) continue;
    if (stale == best_stale && v.size >= views_.find(best_va)->size) continue;
    if (stale) {
      bool done = false;
      vpmm_status st = idle_done(v, &done);
      if (st != VPMM_OK) return st;
      if (!done) continue;
    }
    best_va = kv.first;
    best_stale = stale;
  }

  // Whole handles of free regions, the smallest regions first: a view can
  // use the scattered pieces that no contiguous request can.
  // Memory usable without a wait comes first.
  std::vector<Free> inv;
  for (const auto& kv : m_.streams())
    for (const auto& e : kv.second.free_by_size) {
      bool pending = false;
      if (!usable_by(m_.find(std::get<2>(e))->second, t->stream, &pending)) continue;
      for (const auto& mp : m_.whole_mappings_in(std::get<2>(e), std::get<0>(e)))
        inv.push_back({mp.first, mp.second, std::get<0>(e), pending});
    }
  std::sort(inv.begin(), inv.end(), [](const Free& a, const Free& b) {
    if (a.pending != b.pending) return !a.pending;
    return a.region != b.region ? a.region < b.region : a.va < b.va;
  });
  std::vector<bool> used(inv.size(), false);
  std::unordered_map<PhysHandle, size_t> at;  // handle -> inventory index
  std::vector<uint64_t> sizes(inv.size());
  for (size_t i = 0; i < inv.size(); ++i) {
    at.emplace(inv[i].m.handle, i);
    sizes[i] = inv[i].m.size;
  }
  FirstFit unused(sizes);
  auto use = [&](size_t i) {
    used[i] = true;
    unused.take(i);
  };
  // In inventory order, every unused entry that fits what is still wanted
  // (the entries before the one found were too large for a larger want).
  auto take = [&](uint64_t want, std::vector<ViewSlot>* out) {
    for (size_t i; want && (i = unused.find(want)) != FirstFit::npos;) {
      use(i);
      out->push_back({inv[i].m.handle, inv[i].m.size});
      want -= inv[i].m.size;
    }
    return want;
  };
  auto grow_into = [&](uint64_t bytes, std::vector<ViewSlot>* out, std::vector<bool>* is_grown) {
    for (uint64_t b = 0; b < bytes; b += page) {
      out->push_back({0, page});
      is_grown->push_back(true);
    }
    t->shortfall += bytes;
  };

  std::vector<bool> is_grown;  // parallel to t->slots
  std::vector<bool> is_new;    // parallel to t->slots: mapped by this malloc
  if (best_va) {
    View& v = *views_.find(best_va);
    t->va = best_va;
    t->size = v.size;
    t->old_slots = v.slots;
    // The view's own handles are never replacements: a handle maps once per view.
    for (const ViewSlot& s : v.slots) {
      auto i = at.find(s.handle);
      if (s.handle && i != at.end()) use(i->second);
    }
    uint64_t covered = 0;
    for (size_t k = 0; k < v.slots.size(); ++k) {
      const ViewSlot& s = v.slots[k];
      if (covered >= t->bytes || home_free(s, t->stream)) {
        t->slots.push_back(s);
        is_grown.push_back(false);
        is_new.push_back(false);
      } else {
        if (s.handle) t->unmaps.push_back(k);
        std::vector<ViewSlot> got;
        const uint64_t left = take(s.size, &got);
        for (const ViewSlot& g : got) {
          t->slots.push_back(g);
          is_grown.push_back(false);
          is_new.push_back(true);
        }
        if (left) {
          grow_into(left, &t->slots, &is_grown);
          is_new.resize(t->slots.size(), true);
        }
      }
      if (covered < t->bytes) t->n_lent = t->slots.size();
      covered += s.size;
    }
  } else {
    t->fresh = true;
    uint64_t left = need;
    for (size_t i = 0; i < inv.size() && left; ++i) {
      used[i] = true;
      t->slots.push_back({inv[i].m.handle, inv[i].m.size});
      left -= std::min(left, inv[i].m.size);
    }
    // Growth that can never fit is Phase 2's error to report, before a slot
    // per page is planned for it.
    const uint64_t bound = opt_.device_total ? opt_.device_total : opt_.va_size;
    if (left && (left > bound || st_.check_growth_limit(left) != VPMM_OK)) return kDecline;
    // Nothing free to assemble: plain growth, in scaled handles where the
    // chunk has room (Phase 2), not a view of page handles.
    if (left == need) return kDecline;
    is_grown.assign(t->slots.size(), false);
    if (left) grow_into(left, &t->slots, &is_grown);
    is_new.assign(t->slots.size(), true);
    t->n_lent = t->slots.size();
    for (const ViewSlot& s : t->slots) t->size += s.size;
  }
  for (size_t i = 0; i < t->slots.size(); ++i) {
    if (is_new[i]) t->maps.push_back(i);
    if (is_grown[i]) t->grown.push_back(i);
  }

  if (t->shortfall) {
    // Past the limit a view is not worth an OOM: Phase 2 may still fit the
    // request by moving pages (the caller falls back to it).
    if (st_.check_growth_limit(t->shortfall) != VPMM_OK) return kDecline;
    auto h = m_.holes().lower_bound({t->shortfall, 0});
    t->have_hole = h != m_.holes().end();
    if (t->have_hole) t->hole_va = h->second;
  }
  // Homes to lend: the view's memory below n_lent that exists already (all
  // of it usable by this stream, some after a wait: see usable_by).
  for (size_t i = 0; i < t->n_lent; ++i)
    if (!is_grown[i]) t->lends.push_back({m_.primary_va_of(t->slots[i].handle), t->slots[i].size, Region()});
  if (t->fresh && views_.size() >= kMaxViews) {
    evict_idle();
    if (views_.size() >= kMaxViews) return kDecline;  // every view is live or busy
  }
  return VPMM_OK;
}

// ---------------------------------------------------------------------------
// Wait, claim, map, commit, abandon
// ---------------------------------------------------------------------------

// The homes the view lends that another stream freed with work still queued:
// the caller's stream waits on the GPU for each such stream's event (one
// wait per event), before anything is claimed. The CPU never blocks.
vpmm_status ViewAllocator::wait(ViewTransit* t) {
  std::vector<const Event*> waited;
  for (const auto& l : t->lends) {
    Region& r = m_.find_containing(l.va)->second;
    if (r.stream == t->stream || r.stream == clean_stream()) continue;
    EventRef ev;
    vpmm_status st = st_.event_of(r, &ev);
    if (st != VPMM_OK) return st;
    if (!ev || std::find(waited.begin(), waited.end(), ev.get()) != waited.end()) continue;
    bool done = false;
    st = st_.query(ev, &done);
    if (st != VPMM_OK) return st;
    if (done) continue;
    st = backend_->stream_wait(t->stream, ev->handle());
    if (st != VPMM_OK) return st;
    waited.push_back(ev.get());
    t->waited = true;
    ++c_.n_stream_waits;
  }
  return VPMM_OK;
}

void ViewAllocator::claim(ViewTransit* t) {
  if (!t->fresh) views_.find(t->va)->busy = true;
  for (auto& l : t->lends) {
    RegionIt r = m_.find_containing(l.va);
    if (r->first < l.va) r = m_.split(r, l.va - r->first);
    if (r->second.size > l.size) m_.split(r, l.size);
    l.original = r->second;
    lent_in_flight_ += l.size;
    Region lent;
    lent.size = l.size;
    lent.kind = Kind::Lent;
    lent.chunk = r->second.chunk;
    lent.stream = t->stream;
    m_.retag(r, lent);
  }
  if (t->have_hole) {
    RegionIt hole = m_.find(t->hole_va);
    if (hole->second.size > t->shortfall) m_.split(hole, t->shortfall);
    hole = m_.find(t->hole_va);
    Region transit = hole->second;
    transit.kind = Kind::Transit;
    m_.retag(hole, transit);
  }
  cap_.creating(t->shortfall);
}

vpmm_status ViewAllocator::map(ViewTransit* t) {
  // Runs without the mutex: an exception must not escape with the claim
  // stranded. Whatever was done is undone here on any failure.
  vpmm_status st;
  try {
    st = map_steps(t);
  } catch (const std::bad_alloc&) {
    st = fail(VPMM_ERR_OUT_OF_MEMORY, "out of host memory mapping a view of %" PRIu64 " bytes", t->size);
  }
  if (st == VPMM_OK) return st;
  FirstFailure first;
  first.note(st);
  for (size_t i = 0; i < t->n_view_mapped; ++i) {
    const size_t k = t->maps[i];
    backend_->unmap(t->va + slot_offset(t->slots, k), t->slots[k].size);
  }
  for (size_t i = 0; i < t->n_home_mapped; ++i) backend_->unmap(t->hole_va + i * opt_.page_size, opt_.page_size);
  st_.release_handles_into(t->created, &t->orphans);
  t->created.clear();
  if (t->chunk_size) backend_->unreserve(t->chunk_va, t->chunk_size);
  t->chunk_size = 0;
  if (t->va_reserved) backend_->unreserve(t->va, t->size);
  t->va_reserved = false;
  return first.finish();
}

vpmm_status ViewAllocator::map_steps(ViewTransit* t) {
  const uint64_t page = opt_.page_size;
  if (t->fresh) {
    vpmm_status st = backend_->reserve(t->size, page & (~page + 1), &t->va);
    if (st == VPMM_ERR_BACKEND || st == VPMM_ERR_INVALID_ARGUMENT) st = VPMM_ERR_OUT_OF_MEMORY;
    if (st != VPMM_OK) return fail_context(st, "reserving a view's VA");
    t->va_reserved = true;
  }
  if (t->shortfall) {
    if (!t->have_hole) {
      vpmm_status st = st_.reserve_chunk(t->shortfall, &t->chunk_va, &t->chunk_size);
      if (st != VPMM_OK) return st;
      t->hole_va = t->chunk_va;
    }
    // Page handles: a view's growth is what scattered free memory lacked,
    // and it becomes scattered free memory after the free.
    vpmm_status st = st_.create_handles(t->shortfall, page, &t->created, &t->orphans);
    if (st != VPMM_OK) return st;
    for (; t->n_home_mapped < t->created.size(); ++t->n_home_mapped) {
      const Mapping& m = t->created[t->n_home_mapped];
      st = backend_->map(t->hole_va + t->n_home_mapped * page, m.size, m.handle);
      if (st != VPMM_OK) return st;
    }
    st = backend_->set_access(t->hole_va, t->shortfall);
    if (st != VPMM_OK) return st;
    for (size_t i = 0; i < t->grown.size(); ++i) t->slots[t->grown[i]].handle = t->created[i].handle;
  }
  // The view's stale mappings go first (their slots' VA takes the new ones);
  // its last use completed (plan_view).
  for (; t->n_unmapped < t->unmaps.size(); ++t->n_unmapped) {
    const size_t k = t->unmaps[t->n_unmapped];
    vpmm_status st = backend_->unmap(t->va + slot_offset(t->old_slots, k), t->old_slots[k].size);
    if (st != VPMM_OK) return st;
  }
  for (; t->n_view_mapped < t->maps.size(); ++t->n_view_mapped) {
    const size_t k = t->maps[t->n_view_mapped];
    vpmm_status st = backend_->map(t->va + slot_offset(t->slots, k), t->slots[k].size, t->slots[k].handle);
    if (st != VPMM_OK) return st;
  }
  // Access once per run of new mappings (a fresh view: one call).
  for (size_t i = 0; i < t->maps.size();) {
    size_t j = i + 1;
    while (j < t->maps.size() && t->maps[j] == t->maps[j - 1] + 1) ++j;
    const uint64_t lo = slot_offset(t->slots, t->maps[i]);
    const uint64_t hi = slot_offset(t->slots, t->maps[j - 1]) + t->slots[t->maps[j - 1]].size;
    vpmm_status st = backend_->set_access(t->va + lo, hi - lo);
    if (st != VPMM_OK) return st;
    i = j;
  }
  return VPMM_OK;
}

void ViewAllocator::abandon(ViewTransit* t) {
  st_.keep_orphans(t->orphans);
  cap_.created(t->shortfall);
  for (auto l = t->lends.rbegin(); l != t->lends.rend(); ++l) {
    lent_in_flight_ -= l->size;
    m_.erase(m_.find(l->va));
    m_.coalesce(m_.insert(l->va, l->original));
  }
  if (t->have_hole) m_.make_hole(m_.find(t->hole_va));
  if (!t->fresh) {
    // Mappings already unmapped are gaps now: they were stale, nothing of
    // the view's own.
    std::vector<ViewSlot> slots = t->old_slots;
    for (size_t i = 0; i < t->n_unmapped; ++i) slots[t->unmaps[i]].handle = 0;
    views_.set_slots(t->va, std::move(slots));
    View& v = *views_.find(t->va);
    v.busy = false;
    settle_dropped(t->va);
  }
}

void ViewAllocator::commit(ViewTransit* t, const Attrs& a, uint64_t requested) {
  for (const auto& l : t->lends) lent_in_flight_ -= l.size;
  st_.keep_orphans(t->orphans);
  const uint64_t page = opt_.page_size;
  if (t->chunk_size) {
    RegionIt it = m_.add_chunk(t->chunk_va, t->chunk_size);
    if (t->chunk_size > t->shortfall) m_.split(it, t->shortfall);
  }
  if (t->shortfall) {
    // The grown pages' homes: one Lent region per handle, as for the others.
    RegionIt r = m_.find(t->hole_va);
    Region lent;
    lent.size = page;
    lent.kind = Kind::Lent;
    lent.chunk = r->second.chunk;
    lent.stream = t->stream;
    m_.erase(r);
    for (size_t i = 0; i < t->created.size(); ++i) {
      const uint64_t home = t->hole_va + i * page;
      m_.map_new(home, t->created[i]);
      m_.insert(home, lent);
    }
    cap_.created(t->shortfall);
    ++c_.n_grow;
    c_.pages_created += t->shortfall / page;
    c_.handles_created += t->created.size();
  }
  View* v;
  if (t->fresh) {
    View nv;
    nv.size = t->size;
    nv.slots = t->slots;
    v = &views_.add(t->va, std::move(nv));
  } else {
    views_.set_slots(t->va, t->slots);
    v = views_.find(t->va);
  }
  v->busy = false;
  v->active = true;
  v->n_lent = t->n_lent;
  v->last_use = views_.tick();
  v->live = Region();
  v->live.size = t->bytes;
  v->live.kind = Kind::Live;
  v->live.stream = t->stream;
  v->live.id = st_.next_id();
  v->live.requested = requested;
  v->live.flags = a.flags;
  // The homes' earlier work, ordered for a free on another stream
  // (PoolState::handover_seq): this stream's own frees, and the lenders'
  // queued work this stream now waits for.
  for (const auto& l : t->lends)
    v->live.seq = std::max(v->live.seq, st_.handover_seq(t->stream, l.original, t->waited));
  ++c_.n_view_malloc;
  uint64_t mapped = 0;
  for (size_t k : t->maps) mapped += t->slots[k].size;
  c_.handles_moved += t->maps.size();
  if (mapped) {
    ++c_.n_defrag;
    c_.bytes_remapped += mapped;
  } else {
    ++c_.n_view_reuse;  // no driver call at all
  }
  settle_dropped(t->va);
  st_.note_peaks(small_.empty_bytes());
}

vpmm_status ViewAllocator::malloc(uint64_t bytes, Stream s, uint64_t requested, const Attrs& a, LockWindow* window,
                              uint64_t* out, size_t* handle_ops, const std::function<size_t()>& phase2_ops) {
  ViewTransit t;
  t.bytes = bytes;
  t.stream = s;
  vpmm_status st = plan(&t);
  if (st != VPMM_OK) return st;
  if (!t.fresh && phase2_ops) {
    // A reused view's refill: its stale slots unmapped, replacements mapped,
    // grown pages created and mapped at home.
    const size_t refill = t.maps.size() + t.unmaps.size() + 2 * t.grown.size();
    const size_t p2 = phase2_ops();
    if (p2 < SIZE_MAX / kRefillOverPhase2 && refill > kRefillOverPhase2 * p2) return kDecline;
  }
  st = wait(&t);
  if (st != VPMM_OK) return st;
  claim(&t);
  const bool driver_work = t.fresh || t.shortfall || !t.maps.empty() || !t.unmaps.empty();
  if (driver_work) {
    st = window ? window->outside(m_, [&] { return map(&t); }) : map(&t);
    if (st != VPMM_OK) {
      abandon(&t);
      return st;
    }
  }
  commit(&t, a, requested);
  if (handle_ops) *handle_ops += t.maps.size() + t.unmaps.size() + t.created.size();
  *out = t.va;
  return VPMM_OK;
}

// ---------------------------------------------------------------------------
// Free, forget, evict
// ---------------------------------------------------------------------------

void ViewAllocator::free(View& v, Stream s) {
  if (s != v.live.stream) st_.order_after_alloc_stream(v.live, s);
  const uint64_t seq = ++m_.stream(s).free_seq;
  for (size_t k = 0; k < v.n_lent; ++k) {
    RegionIt r = m_.find(m_.primary_va_of(v.slots[k].handle));
    m_.remake(r, Kind::Free, [&](Region& fr) {
      fr.stream = s;
      fr.id = st_.next_id();
      fr.seq = seq;
    });
    m_.coalesce(r);
  }
  v.active = false;
  v.n_lent = 0;
  v.live = Region();
  v.last_free = Region();
  v.last_free.kind = Kind::Free;
  v.last_free.stream = s;
  v.last_free.seq = seq;
  v.last_use = views_.tick();
}

// Before a handle is released its mappings in views go: released while
// mapped, its memory would live on until the view's next use. An idle view
// unmaps once its last use completed; an active one only unmaps slots past
// its allocation; a busy one (a malloc in flight) is settled at its commit
// or abandon.
void ViewAllocator::forget(PhysHandle h) {
  const auto* holders = views_.holders(h);
  if (!holders) return;
  const std::vector<uint64_t> vas = *holders;
  for (uint64_t va : vas) {
    View& v = *views_.find(va);
    if (v.busy) {
      dropped_.push_back({va, h});
      continue;
    }
    std::vector<ViewSlot> slots = v.slots;
    uint64_t off = 0;
    for (size_t k = 0; k < slots.size(); off += slots[k].size, ++k) {
      if (slots[k].handle != h) continue;
      if (v.active && k < v.n_lent) continue;  // lent: never released (it is not free)
      if (!v.active) {
        EventRef ev;
        if (st_.event_of(v.last_free, &ev) == VPMM_OK) st_.wait(ev);
      }
      // Once more on failure (as the destructor does); a mapping that still
      // stays is kept in the view, unmapped at its next use or at destroy.
      if (backend_->unmap(va + off, slots[k].size) == VPMM_OK ||
          backend_->unmap(va + off, slots[k].size) == VPMM_OK)
        slots[k].handle = 0;
    }
    // A view left with gaps only keeps its VA: reserved VA then only grows
    // while the pool lives (past kMaxViews an idle view goes), and the next
    // request of its size maps into it again.
    views_.set_slots(va, std::move(slots));
  }
}

void ViewAllocator::settle_dropped(uint64_t va) {
  if (dropped_.empty()) return;
  std::vector<PhysHandle> now;
  auto keep = dropped_.begin();
  for (const auto& d : dropped_) {
    if (d.first == va)
      now.push_back(d.second);
    else
      *keep++ = d;
  }
  dropped_.erase(keep, dropped_.end());
  for (PhysHandle h : now) forget(h);
}

void ViewAllocator::evict_idle() {
  uint64_t victim = 0;
  uint64_t oldest = UINT64_MAX;
  for (auto& kv : views_.all()) {
    View& v = kv.second;
    if (v.active || v.busy || v.last_use >= oldest) continue;
    bool done = false;
    if (idle_done(v, &done) != VPMM_OK || !done) continue;
    victim = kv.first;
    oldest = v.last_use;
  }
  if (victim) unmap_view(victim);
}

vpmm_status ViewAllocator::release_idle() {
  std::vector<uint64_t> idle;
  for (auto& kv : views_.all())
    if (!kv.second.active && !kv.second.busy) idle.push_back(kv.first);
  FirstFailure first;
  for (uint64_t va : idle) {
    EventRef ev;
    vpmm_status st = st_.event_of(views_.find(va)->last_free, &ev);
    if (st == VPMM_OK && ev && !ev->done_cached()) {
      st = backend_->event_sync(ev->handle());
      if (st == VPMM_OK) ev->mark_done();
    }
    if (st != VPMM_OK) {
      first.note(st);  // its last use may still run: the view stays
      continue;
    }
    unmap_view(va);
  }
  return first.finish();
}

void ViewAllocator::shutdown() {
  for (auto& kv : views_.all())
    if (!kv.second.active) {
      EventRef ev;
      if (st_.event_of(kv.second.last_free, &ev) == VPMM_OK) st_.wait(ev);
    }
  while (!views_.empty()) unmap_view(views_.all().begin()->first);
}

void ViewAllocator::unmap_view(uint64_t va) {
  View& v = *views_.find(va);
  uint64_t off = 0;
  for (const ViewSlot& s : v.slots) {
    if (s.handle && backend_->unmap(va + off, s.size) != VPMM_OK) backend_->unmap(va + off, s.size);
    off += s.size;
  }
  if (backend_->unreserve(va, v.size) != VPMM_OK) backend_->unreserve(va, v.size);
  views_.erase(va);
}


std::string ViewAllocator::check() {
  std::string e = views_.check();
  if (!e.empty()) return e;
  char buf[200];
  uint64_t lent = lent_in_flight_;
  for (auto& kv : views_.all()) {
    const View& v = kv.second;
    std::vector<PhysHandle> seen;
    for (const ViewSlot& s : v.slots)
      if (s.handle) seen.push_back(s.handle);
    std::sort(seen.begin(), seen.end());
    if (std::adjacent_find(seen.begin(), seen.end()) != seen.end()) {
      std::snprintf(buf, sizeof buf, "view 0x%" PRIx64 " maps a handle twice", kv.first);
      return buf;
    }
    if (!v.active) {
      if (v.n_lent) {
        std::snprintf(buf, sizeof buf, "idle view 0x%" PRIx64 " claims %zu lent slots", kv.first, v.n_lent);
        return buf;
      }
      continue;
    }
    uint64_t held = 0;
    for (size_t k = 0; k < v.n_lent && k < v.slots.size(); ++k) {
      const ViewSlot& s = v.slots[k];
      const uint64_t home = s.handle ? m_.primary_va_of(s.handle) : UINT64_MAX;
      auto r = home == UINT64_MAX ? m_.regions().end() : m_.regions().find(home);
      if (r == m_.regions().end() || r->second.kind != Kind::Lent || r->second.size != s.size) {
        std::snprintf(buf, sizeof buf, "view 0x%" PRIx64 ": slot %zu's home is not a Lent region of its size",
                      kv.first, k);
        return buf;
      }
      held += s.size;
    }
    if (v.n_lent > v.slots.size() || held < v.live.size) {
      std::snprintf(buf, sizeof buf, "view 0x%" PRIx64 ": %" PRIu64 " lent bytes for an allocation of %" PRIu64,
                    kv.first, held, v.live.size);
      return buf;
    }
    lent += held;
  }
  if (lent != m_.totals().lent) {
    std::snprintf(buf, sizeof buf, "views hold %" PRIu64 " lent bytes, the map %" PRIu64, lent, m_.totals().lent);
    return buf;
  }
  return "";
}

}  // namespace vpmm
