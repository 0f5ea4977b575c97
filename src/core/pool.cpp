// Pool: malloc/free and the three phases (see pool.hpp). The order of work in
// defragment() is what makes failures clean: everything that can fail (event
// records, waits, VA reservation, handle creation, map, set-access) happens
// before the region map is touched, and each step's effects are undone if a
// later step fails.
#include "core/pool.hpp"

#include <algorithm>
#include <cinttypes>
#include <functional>
#include <new>

#include "core/backup.hpp"
#include "core/error.hpp"
#include "core/small.hpp"

namespace vpmm {

namespace {
constexpr int kOtherStreamProbe = 8;  // completed-candidates probed per foreign stream
constexpr uint64_t kSmallMinimum = kSmallQuantum;  // small_size below this disables small blocks
constexpr vpmm_status kRetryPhase1 = -100;  // internal: defragment freed memory, run Phase 1 again
}  // namespace

Pool::Pool(std::unique_ptr<Backend> backend, const PoolOptions& opt)
    : backend_(std::move(backend)), opt_(opt) {}

vpmm_status Pool::create(std::unique_ptr<Backend> backend, const PoolOptions& opt,
                         std::unique_ptr<Pool>* out) {
  std::unique_ptr<Pool> p(new Pool(std::move(backend), opt));
  p->small_.reset(new SmallAllocator(*p));
  p->backup_bufs_.reset(new BackupBuffers(*p->backend_, opt.backup_cache_size, opt.backup_pinned_limit));
  p->lim_.trigger_fraction = opt.watermark_trigger;
  p->lim_.stop_fraction = opt.watermark_stop;
  p->lim_.limit = opt.memory_limit;
  p->lim_.set_capacity(opt.memory_limit ? opt.memory_limit : opt.device_total);
  std::lock_guard<std::mutex> lock(p->mu_);
  uint64_t va = 0, size = 0;
  vpmm_status st = p->reserve_chunk(opt.page_size, &va, &size);
  if (st != VPMM_OK) return st;
  Region hole;
  hole.size = size;
  hole.kind = Kind::Hole;
  hole.chunk = 0;
  p->m_.chunks.push_back({va, size});
  p->m_.totals.reserved += size;
  p->m_.insert(va, hole);
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
    st = p->create_handles(bytes, capped ? opt.max_handle_size : opt.page_size, &hs);
    if (st != VPMM_OK) return fail_context(st, "vpmm_pool_create: initial_pages");
    uint64_t cur = va;
    size_t n = 0;
    for (; n < hs.size(); ++n) {
      st = p->backend_->map(cur, hs[n].size, hs[n].handle);
      if (st != VPMM_OK) break;
      p->m_.mappings.emplace(cur, hs[n]);
      cur += hs[n].size;
    }
    for (size_t i = n; i < hs.size(); ++i) p->release_handle(hs[i]);  // never mapped
    if (st == VPMM_OK) st = p->backend_->set_access(va, bytes);
    // The destructor unmaps and releases what was mapped, and the chunk.
    if (st != VPMM_OK) return fail_context(st, "vpmm_pool_create: initial_pages");
    p->m_.totals.mapped += bytes;
    p->c_.pages_created += opt.initial_pages;
    p->c_.handles_created += hs.size();
    RegionIt it = p->m_.regions.find(va);
    if (size > bytes) p->m_.split(it, bytes);
    it = p->m_.regions.find(va);
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
  small_->wait_pending();
  small_.reset();
  // Work queued before a free or a remap may still touch pool memory: wait
  // for it before unmapping (cuMemUnmap does not wait for kernels).
  for (auto& kv : m_.regions) {
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
  for (auto& z : m_.zombie_mappings) twice([&] { return backend_->unmap(z.first, z.second.size); });
  for (auto& mp : m_.mappings) {
    twice([&] { return backend_->unmap(mp.first, mp.second.size); });
    release_handle(mp.second);
  }
  retry_orphans();
  for (const Mapping& h : orphans_) twice([&] { return backend_->release(h.handle, h.size); });
  for (auto& kv : m_.regions)
    if (kv.second.kind == Kind::Paused && kv.second.backup)
      backup_bufs_->put(kv.second.backup, kv.second.backup_size);
  backup_bufs_.reset();
  for (Reservation* r : lim_.reservations) delete r;
  lim_.reservations.clear();
  m_.regions.clear();  // drops the events while the backend still exists
  m_.streams.clear();
  if (have_copy_stream_) backend_->stream_destroy(copy_stream_);
  for (const Chunk& c : m_.chunks) twice([&] { return backend_->unreserve(c.va, c.size); });
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
  StreamState& st = m_.streams[r.stream];
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

void Pool::reap_zombies() {
  if (m_.zombies.empty()) return;
  std::vector<uint64_t> ready;
  for (uint64_t va : m_.zombies) {
    bool done = false;
    Region& z = m_.regions.find(va)->second;
    if (query(z.event, &done) == VPMM_OK && done) ready.push_back(va);
  }
  for (uint64_t va : ready) {
    RegionIt it = m_.regions.find(va);
    uint64_t end = va + it->second.size;
    // Unmap every old mapping of the zombie; stop at the first failure and
    // keep the rest a zombie so no VA is handed out while still mapped.
    uint64_t cur = va;
    while (cur < end) {
      auto mp = m_.zombie_mappings.find(cur);
      if (backend_->unmap(cur, mp->second.size) != VPMM_OK) break;
      cur += mp->second.size;
      m_.zombie_mappings.erase(mp);
    }
    if (cur == va) continue;
    RegionIt z = it;
    if (cur < end) m_.split(z, cur - va);
    z = m_.regions.find(va);
    Region hole;
    hole.size = z->second.size;
    hole.kind = Kind::Hole;
    hole.chunk = z->second.chunk;
    m_.erase(z);
    m_.coalesce(m_.insert(va, hole));
    ++c_.n_zombies_reaped;
  }
}

// The best candidate of one stream's index: (size, id, va), or none.
static const std::tuple<uint64_t, uint64_t, uint64_t>* fit_in(
    RegionMap& m, Stream s, uint64_t bytes, bool exact,
    const std::function<bool(uint64_t, uint64_t)>& exact_ok) {
  auto st = m.streams.find(s);
  if (st == m.streams.end()) return nullptr;
  auto& idx = st->second.free_by_size;
  auto it = idx.lower_bound(std::make_tuple(bytes, uint64_t(0), uint64_t(0)));
  for (int probed = 0; it != idx.end() && probed < kOtherStreamProbe; ++it, ++probed)
    if (!exact || exact_ok(std::get<2>(*it), std::get<0>(*it))) return &*it;
  return nullptr;
}

RegionIt Pool::best_fit_same_stream(uint64_t bytes, Stream s, bool exact) {
  auto ok = [&](uint64_t va, uint64_t size) { return exact_run(va, size, bytes) != UINT64_MAX; };
  const auto* own = fit_in(m_, s, bytes, exact, ok);
  // Never-used memory is as good as the caller's own: no event to wait for.
  const auto* clean = m_.streams.count(clean_stream()) ? fit_in(m_, clean_stream(), bytes, exact, ok)
                                                      : nullptr;
  const auto* best = !own ? clean : !clean ? own : (*clean < *own ? clean : own);
  return best ? m_.regions.find(std::get<2>(*best)) : m_.regions.end();
}

// The smallest completed candidate by its whole index key (size, id, va), so
// that equal sizes on two streams are decided by the key, never by the
// streams map's iteration order (stream handles are heap addresses: the order
// changed from run to run under ASLR, and so did replay figures).
RegionIt Pool::best_fit_completed_other(uint64_t bytes, Stream s, bool exact) {
  RegionIt best = m_.regions.end();
  std::tuple<uint64_t, uint64_t, uint64_t> best_key;
  for (auto& kv : m_.streams) {
    if (kv.first == s) continue;
    int probed = 0;
    for (auto it = kv.second.free_by_size.lower_bound(std::make_tuple(bytes, uint64_t(0), uint64_t(0)));
         it != kv.second.free_by_size.end() && probed < kOtherStreamProbe; ++it, ++probed) {
      if (best != m_.regions.end() && !(*it < best_key)) break;
      if (exact && exact_run(std::get<2>(*it), std::get<0>(*it), bytes) == UINT64_MAX) continue;
      RegionIt r = m_.regions.find(std::get<2>(*it));
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

// ---------------------------------------------------------------------------
// Phase 2
// ---------------------------------------------------------------------------

namespace {
struct Harvest {
  uint64_t region_va = 0;
  uint64_t lo = 0, hi = 0;  // moved range [lo, hi): whole handles
  std::vector<std::pair<uint64_t, Mapping>> maps;
  bool foreign = false;
};
struct Plan {
  std::vector<Harvest> harvests;
  uint64_t moved = 0;
  uint64_t shortfall = 0;
  uint64_t span() const { return moved + shortfall; }
};
}  // namespace

// Plans which free pages move into the hole. A region is moved whole (it
// consolidates free memory in one span, as in the walkthrough's case B) unless
// it is more than twice what is still needed; then only the needed handles
// from its start are detached and the rest stays in place, keeping its stream,
// event and id. Only whole handles can move (a handle maps whole).
// In `exact` mode (tagged allocations, which must own whole handles so a
// pause releases exactly their memory) only handles no larger than what is
// still needed move, so the span never exceeds the request.
static Plan plan_harvest(RegionMap& m, uint64_t need, Stream s, uint64_t exclude_va, bool exact) {
  struct Cand {
    bool foreign;
    uint64_t id;
    uint64_t va;
  };
  std::vector<Cand> cands;
  for (auto& kv : m.streams)
    for (const auto& e : kv.second.free_by_size) {
      uint64_t va = std::get<2>(e);
      if (va == exclude_va) continue;
      cands.push_back({kv.first != s, std::get<1>(e), va});
    }
  std::sort(cands.begin(), cands.end(), [](const Cand& a, const Cand& b) {
    return a.foreign != b.foreign ? !a.foreign : (a.id != b.id ? a.id < b.id : a.va < b.va);
  });
  Plan plan;
  uint64_t remaining = need;
  for (const Cand& c : cands) {
    if (remaining == 0) break;
    const Region& r = m.regions.find(c.va)->second;
    auto maps = m.whole_mappings_in(c.va, r.size);
    if (maps.empty()) continue;
    Harvest h;
    h.region_va = c.va;
    h.foreign = c.foreign;
    bool whole = !exact && r.size <= 2 * remaining;
    uint64_t taken = 0;
    for (auto& mp : maps) {
      if (exact) {
        // a contiguous run of handles that each fit what is still needed
        if (taken + mp.second.size > remaining) {
          if (h.maps.empty()) continue;
          break;
        }
      } else if (!whole && taken >= remaining) {
        break;
      }
      h.maps.push_back(mp);
      taken += mp.second.size;
    }
    if (h.maps.empty()) continue;
    h.lo = h.maps.front().first;
    h.hi = h.maps.back().first + h.maps.back().second.size;
    plan.moved += taken;
    remaining = taken >= remaining ? 0 : remaining - taken;
    plan.harvests.push_back(std::move(h));
  }
  plan.shortfall = remaining;
  return plan;
}

bool Pool::merge_completed_straddles(std::vector<MergeUndo>* journal) {
  // A handle can straddle two adjacent free regions of different streams (a
  // growth handle freed on A, half reused and freed on B). Neither region
  // holds it whole, so it could be neither moved nor trimmed. Once both
  // regions' events completed their streams no longer matter: merge them into
  // one clean region, and fold in the free neighbours of its stream, which
  // would otherwise split a handle the same way. Every merge is journaled.
  bool changed = false;
  auto merge = [&](RegionIt left, RegionIt right, bool same_stream) {
    if (journal) journal->push_back({left->first, left->second, right->first, right->second});
    Region merged = left->second;
    merged.size += right->second.size;
    if (same_stream) {
      RegionMap::absorb(merged, right->second);
    } else {
      merged.id = std::max(merged.id, right->second.id);
      merged.seq = 0;  // nothing pending on either stream
      merged.event.reset();
    }
    m_.erase(right);
    m_.retag(left, merged);
    changed = true;
    return left;
  };
  auto adjacent_free = [&](RegionIt x, RegionIt y) {
    return x->second.kind == Kind::Free && y->second.kind == Kind::Free &&
           x->second.chunk == y->second.chunk && x->first + x->second.size == y->first;
  };
  for (auto it = m_.regions.begin(); it != m_.regions.end();) {
    auto nx = std::next(it);
    if (nx == m_.regions.end()) break;
    if (!adjacent_free(it, nx)) {
      it = nx;
      continue;
    }
    if (RegionMap::coalescable(it->second, nx->second)) {  // left by a merge below
      it = merge(it, nx, true);
      continue;
    }
    auto mp = m_.mappings.upper_bound(nx->first);
    bool straddles = mp != m_.mappings.begin() && std::prev(mp)->first < nx->first &&
                     std::prev(mp)->first + std::prev(mp)->second.size > nx->first;
    bool done_a = false, done_b = false;
    if (straddles && is_complete(it->second, &done_a) == VPMM_OK && done_a &&
        is_complete(nx->second, &done_b) == VPMM_OK && done_b) {
      it = merge(it, nx, false);
      if (it != m_.regions.begin()) {
        auto pv = std::prev(it);
        if (adjacent_free(pv, it) && RegionMap::coalescable(pv->second, it->second)) it = pv;
      }
      continue;  // it may touch, or straddle, its new neighbour too
    }
    it = nx;
  }
  return changed;
}

void Pool::undo_merges(const std::vector<MergeUndo>& journal) {
  for (auto u = journal.rbegin(); u != journal.rend(); ++u) {
    RegionIt it = m_.regions.find(u->left_va);
    m_.split(it, u->left.size);
    m_.retag(m_.regions.find(u->left_va), u->left);
    m_.retag(m_.regions.find(u->right_va), u->right);
  }
}

vpmm_status Pool::defragment(uint64_t bytes, Stream s, bool exact, std::vector<MergeUndo>* merges,
                             RegionIt* out) {
  if (merges && merge_completed_straddles(merges)) return kRetryPhase1;
  // A. Choose the hole and the plan. Prefer the smallest hole that fits the
  // request; if a free region of the caller's stream ends right where the hole
  // starts, it joins the span in place and less has to move.
  Plan plan;
  uint64_t hole_va = 0;
  bool have_hole = false;
  auto h = m_.holes_by_size.lower_bound({bytes, 0});
  if (!exact && h != m_.holes_by_size.end()) {
    RegionIt hole = m_.regions.find(h->second);
    uint64_t prefix_va = UINT64_MAX, prefix = 0;
    if (hole != m_.regions.begin()) {
      RegionIt pv = std::prev(hole);
      if (pv->second.kind == Kind::Free &&
          (pv->second.stream == s || pv->second.stream == clean_stream()) &&
          pv->second.chunk == hole->second.chunk && pv->first + pv->second.size == hole->first) {
        prefix_va = pv->first;
        prefix = pv->second.size;
      }
    }
    plan = plan_harvest(m_, bytes - std::min(prefix, bytes - opt_.page_size), s, prefix_va, false);
    if (plan.span() > 0 && plan.span() <= hole->second.size) {
      hole_va = hole->first;
      have_hole = true;
    }
  }
  if (!have_hole) {
    plan = plan_harvest(m_, bytes, s, UINT64_MAX, exact);
    auto h2 = m_.holes_by_size.lower_bound({plan.span(), 0});
    if (h2 != m_.holes_by_size.end()) {
      hole_va = h2->second;
      have_hole = true;
    }
  }



  // B. Events: zombies need the event of each moved region; a pending foreign
  // one also makes the caller's stream wait on the GPU (the CPU never blocks).
  std::vector<EventRef> events(plan.harvests.size());
  for (size_t i = 0; i < plan.harvests.size(); ++i) {
    Region& r = m_.regions.find(plan.harvests[i].region_va)->second;
    vpmm_status st = event_of(r, &events[i]);
    if (st != VPMM_OK) return st;
    if (!events[i]) continue;  // never used: nothing pending
    bool done = false;
    if (plan.harvests[i].foreign) {
      st = query(events[i], &done);
      if (st != VPMM_OK) return st;
      if (!done) {
        st = backend_->stream_wait(s, events[i]->handle());
        if (st != VPMM_OK) return st;
        ++c_.n_stream_waits;
      }
    }
  }

  // C. Backend work, undone on failure.
  uint64_t new_chunk_va = 0, new_chunk_size = 0;
  if (!have_hole) {
    vpmm_status st = reserve_chunk(plan.span(), &new_chunk_va, &new_chunk_size);
    if (st != VPMM_OK) return st;
    hole_va = new_chunk_va;
  }
  auto undo_chunk = [&] {
    if (new_chunk_size) backend_->unreserve(new_chunk_va, new_chunk_size);
  };
  std::vector<Mapping> created;
  if (plan.shortfall) {
    vpmm_status st = create_handles(plan.shortfall, growth_handle_size(plan.shortfall, exact), &created);
    if (st != VPMM_OK) {
      undo_chunk();
      return st;
    }
  }
  std::vector<std::pair<uint64_t, Mapping>> placed;  // new VA -> handle
  uint64_t cur = hole_va;
  for (const Harvest& hv : plan.harvests)
    for (const auto& mp : hv.maps) {
      placed.emplace_back(cur, mp.second);
      cur += mp.second.size;
    }
  for (const Mapping& c : created) {
    placed.emplace_back(cur, c);
    cur += c.size;
  }
  size_t n_mapped = 0;
  vpmm_status st = VPMM_OK;
  for (; n_mapped < placed.size(); ++n_mapped) {
    st = backend_->map(placed[n_mapped].first, placed[n_mapped].second.size,
                       placed[n_mapped].second.handle);
    if (st != VPMM_OK) break;
  }
  if (st == VPMM_OK) st = backend_->set_access(hole_va, plan.span());
  if (st != VPMM_OK) {
    for (size_t i = 0; i < n_mapped; ++i) backend_->unmap(placed[i].first, placed[i].second.size);
    release_handles(created);
    undo_chunk();
    return st;
  }

  // D. Commit: nothing below can fail (std::bad_alloc aside, caught at the ABI).
  if (new_chunk_size) {
    Region hole;
    hole.size = new_chunk_size;
    hole.kind = Kind::Hole;
    hole.chunk = static_cast<uint32_t>(m_.chunks.size());
    m_.chunks.push_back({new_chunk_va, new_chunk_size});
    m_.totals.reserved += new_chunk_size;
    m_.insert(new_chunk_va, hole);
  }
  for (size_t i = 0; i < plan.harvests.size(); ++i) {
    const Harvest& hv = plan.harvests[i];
    RegionIt r = m_.regions.find(hv.region_va);
    if (hv.lo > r->first) r = m_.split(r, hv.lo - r->first);
    if (hv.hi < r->first + r->second.size) m_.split(r, hv.hi - r->first);
    Region z;
    z.size = hv.hi - hv.lo;
    z.kind = Kind::Zombie;
    z.chunk = r->second.chunk;
    z.event = events[i];  // null: the region was never used, nothing to wait for
    m_.erase(r);
    m_.insert(hv.lo, z);
    for (const auto& mp : hv.maps) {
      m_.mappings.erase(mp.first);
      m_.zombie_mappings.emplace(mp.first, mp.second);
    }
  }
  for (const auto& p : placed) m_.mappings.emplace(p.first, p.second);
  m_.totals.mapped += plan.shortfall;

  RegionIt hole = m_.regions.find(hole_va);
  if (hole->second.size > plan.span()) m_.split(hole, plan.span());
  hole = m_.regions.find(hole_va);
  Region span;
  span.size = plan.span();
  span.kind = Kind::Free;
  span.chunk = hole->second.chunk;
  span.stream = s;
  span.id = next_id_++;
  // Moved pages may carry foreign work the caller's stream now waits on: a
  // fresh free point makes any later event cover those waits.
  span.seq = plan.moved ? ++m_.streams[s].free_seq : 0;
  m_.erase(hole);
  RegionIt res = m_.insert(hole_va, span);
  if (!exact) res = m_.coalesce(res);  // exact spans stay on their handle boundaries

  if (plan.moved) {
    ++c_.n_defrag;
    c_.bytes_remapped += plan.moved;
  }
  if (plan.shortfall) {
    ++c_.n_grow;
    c_.pages_created += plan.shortfall / opt_.page_size;
    c_.handles_created += created.size();
  }
  note_peaks();
  // Same-stream harvests often have completed events already: unmap their old
  // VAs now so the layout after the call is final ([*X] rather than [~X]).
  if (plan.moved) {
    uint64_t res_va = res->first;
    reap_zombies();
    res = m_.regions.find(res_va);  // reaping never merges mapped regions
  }
  *out = res;
  return VPMM_OK;
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

vpmm_status Pool::create_handles(uint64_t bytes, uint64_t max_handle, std::vector<Mapping>* out) {
  if (lim_.limit && m_.totals.mapped + bytes > lim_.limit)
    return fail(VPMM_ERR_OUT_OF_MEMORY,
                "growing by %" PRIu64 " bytes would exceed the memory limit (%" PRIu64 " of %" PRIu64
                " bytes mapped)",
                bytes, m_.totals.mapped, lim_.limit);
  max_handle = std::max<uint64_t>(opt_.page_size, max_handle / opt_.page_size * opt_.page_size);
  max_handle = std::min(max_handle, std::max<uint64_t>(bytes, 1));
  std::vector<Mapping> hs;
  hs.reserve(bytes / max_handle + 1);
  uint64_t left = bytes;
  while (left) {
    uint64_t sz = std::min(left, max_handle);
    PhysHandle ph = 0;
    vpmm_status st = backend_->create(sz, &ph);
    if (st != VPMM_OK) {
      release_handles(hs);
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

void Pool::release_handle(const Mapping& h) {
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
  c_.peak_mapped = std::max(c_.peak_mapped, m_.totals.mapped);
  c_.peak_live = std::max(c_.peak_live, m_.totals.live + m_.totals.small - small_->empty_bytes());
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
                              const Attrs& a, RegionIt* out) {
  reap_zombies();
  const bool exact = a.tag != 0;
  RegionIt r = best_fit_same_stream(bytes, s, exact);
  if (r == m_.regions.end()) {
    r = best_fit_completed_other(bytes, s, exact);
    if (r != m_.regions.end()) ++c_.n_cross_stream_reuse;
  }
  if (r == m_.regions.end()) {
    std::vector<MergeUndo> merges;
    vpmm_status st = defragment(bytes, s, exact, &merges, &r);
    if (st == kRetryPhase1) {
      // Phase 2 merged free regions that straddled a handle: one of them may
      // now fit in place, with no remap at all.
      r = best_fit_same_stream(bytes, s, exact);
      if (r == m_.regions.end()) r = best_fit_completed_other(bytes, s, exact);
      if (r == m_.regions.end()) st = defragment(bytes, s, exact, nullptr, &r);
      else st = VPMM_OK;
      if (st != VPMM_OK) undo_merges(merges);  // a failed malloc changes nothing
    }
    if (st != VPMM_OK) return st;
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
  m_.retag(r, live);
  *out = r;
  note_peaks();
  return VPMM_OK;
}

void Pool::free_pages(RegionIt it, Stream s) {
  Region fr;
  fr.size = it->second.size;
  fr.kind = Kind::Free;
  fr.chunk = it->second.chunk;
  fr.stream = s;
  fr.id = next_id_++;
  fr.seq = ++m_.streams[s].free_seq;
  m_.retag(it, fr);
  m_.coalesce(it);
}

// ---------------------------------------------------------------------------
// Public operations
// ---------------------------------------------------------------------------

vpmm_status Pool::malloc_locked(uint64_t size, Stream s, const Attrs& a, Reservation* res,
                               void** out) {
  const uint64_t page = opt_.page_size;
  const bool small = size <= opt_.small_size && opt_.small_size >= kSmallMinimum;
  if (!small && size > UINT64_MAX - (page - 1))
    return fail(VPMM_ERR_INVALID_ARGUMENT,
                "size %" PRIu64 " overflows when rounded up to the page size %" PRIu64, size, page);
  const uint64_t bytes = small ? small_charge(size) : (size + page - 1) / page * page;
  vpmm_status st = admit(bytes, res);
  if (st != VPMM_OK) return st;
  if (small) {
    st = small_->malloc(size, s, a, res, out);
  } else {
    RegionIt r;
    st = alloc_pages(bytes, s, Kind::Live, size, a, &r);
    if (st == VPMM_OK) {
      r->second.res = res;
      r->second.charge = bytes;
      *out = reinterpret_cast<void*>(r->first);
    }
  }
  if (st != VPMM_OK) {
    uncharge(bytes, res);
    return st;
  }
  ++c_.n_malloc;
  ++c_.n_live;
  if (small) {
    ++c_.n_small_malloc;
    note_peaks();  // a slab taken back from the empty cache is live again
  }
  c_.requested += size;
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
      std::lock_guard<std::mutex> lock(mu_);
      Attrs a;
      a.flags = flags;
      st = tag ? intern_tag(tag, &a.tag) : VPMM_OK;
      if (a.tag == 0) a.flags = 0;  // flags only mean something for pausable memory
      if (st == VPMM_OK && res && !lim_.reservations.count(res))
        st = fail(VPMM_ERR_INVALID_ARGUMENT, "reservation %p is not a live reservation of this pool",
                  static_cast<void*>(res));
      if (st == VPMM_OK) st = malloc_locked(size, s, a, res, out);
      if (st == VPMM_OK && retries > 0) ++lim_.n_oom_recovered;
      if (st == VPMM_ERR_OUT_OF_MEMORY) ++lim_.n_oom;
      transition = take_transition();
      mapped = m_.totals.mapped;
      oom = oom_fn_;
      oom_user = oom_user_;
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
  if (it == m_.regions.end())
    return fail(VPMM_ERR_UNKNOWN_POINTER, "%s: pointer %p was not allocated by this pool", call, ptr);
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
  RegionIt it = m_.regions.find(va);
  if (it != m_.regions.end() &&
      (it->second.kind == Kind::Live || (it->second.kind == Kind::Paused && !it->second.was_small))) {
    c_.requested -= it->second.requested;
    --c_.n_live;
    ++c_.n_free;
    if (it->second.kind == Kind::Live) uncharge(it->second.charge, it->second.res);  // paused: none held
    if (it->second.kind == Kind::Live)
      free_pages(it, s);
    else
      drop_paused(it);  // freeing a paused allocation returns its VA and drops its backup
    res_cv_.notify_all();
    return VPMM_OK;
  }
  RegionIt in = it != m_.regions.end() ? it : m_.find_containing(va);
  if (in != m_.regions.end() &&
      (in->second.kind == Kind::Small || (in->second.kind == Kind::Paused && in->second.was_small))) {
    uint64_t freed_request = 0;
    Reservation* res = nullptr;
    const bool paused = in->second.kind == Kind::Paused;  // `in` may be gone after the free
    vpmm_status st = small_->free(in, va, s, &freed_request, &res);
    if (st != VPMM_OK) return fail_context(st, "vpmm_pool_free");
    if (!paused) uncharge(small_charge(freed_request), res);  // paused: none held
    res_cv_.notify_all();
    c_.requested -= freed_request;
    --c_.n_live;
    ++c_.n_free;
    return VPMM_OK;
  }
  return fail_unknown_pointer("vpmm_pool_free", ptr);
}

vpmm_status Pool::lookup(const void* ptr, void** base, uint64_t* size) {
  uint64_t va = reinterpret_cast<uint64_t>(ptr);
  std::lock_guard<std::mutex> lock(mu_);
  RegionIt it = m_.find_containing(va);
  bool paused_page = it != m_.regions.end() && it->second.kind == Kind::Paused && !it->second.was_small;
  if (it != m_.regions.end() && (it->second.kind == Kind::Live || paused_page)) {
    if (va >= it->first + it->second.requested)
      return fail(VPMM_ERR_UNKNOWN_POINTER,
                  "vpmm_pool_lookup: pointer %p is in the page padding after the allocation at "
                  "0x%" PRIx64 " (size %" PRIu64 ")",
                  ptr, it->first, it->second.requested);
    if (base) *base = reinterpret_cast<void*>(it->first);
    if (size) *size = it->second.requested;
    return VPMM_OK;
  }
  if (it != m_.regions.end() && (it->second.kind == Kind::Small || it->second.kind == Kind::Paused)) {
    uint64_t b = 0, sz = 0;
    if (small_->lookup(it, va, &b, &sz)) {
      if (base) *base = reinterpret_cast<void*>(b);
      if (size) *size = sz;
      return VPMM_OK;
    }
  }
  return fail(VPMM_ERR_UNKNOWN_POINTER, "vpmm_pool_lookup: pointer %p is not inside a live allocation of this pool", ptr);
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
  auto st = m_.streams.find(s);
  if (st == m_.streams.end()) return VPMM_OK;
  // One record covers every lazy free region of the stream (same stream order).
  std::vector<uint64_t> vas;
  for (const auto& e : st->second.free_by_size) {
    Region& r = m_.regions.find(std::get<2>(e))->second;
    EventRef ev;
    vpmm_status rs = event_of(r, &ev);
    if (rs != VPMM_OK) return fail_context(rs, "vpmm_pool_stream_retire");
    vas.push_back(std::get<2>(e));
  }
  // A new stream may be created at the same address: re-key the regions to a
  // private key so they count as foreign (reused only once their event
  // completed) instead of "same stream, no wait needed".
  retired_keys_.emplace_back(new char);
  Stream key = retired_keys_.back().get();
  for (uint64_t va : vas) {
    RegionIt it = m_.regions.find(va);
    Region r = it->second;
    r.stream = key;
    m_.erase(it);
    m_.insert(va, r);
  }
  m_.streams.erase(s);
  return VPMM_OK;
}

std::string Pool::check() {
  std::lock_guard<std::mutex> lock(mu_);
  std::string e = m_.check(opt_.page_size);
  if (!e.empty()) return e;
  return small_->check();
}

}  // namespace vpmm
