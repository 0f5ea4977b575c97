// Defrag: Phase 0 and Phase 2 (see defrag.hpp).
//
// Everything decided is decided under the mutex (plan, wait, claim); the
// claim takes the plan's regions out of every index, so no other thread can
// touch them while this one maps; the commit or the abandon, again under the
// mutex, puts them back as the new span or exactly as they were.
#include <algorithm>
#include <cinttypes>
#include <new>

#include "common/status.hpp"
#include "core/alloc/defrag.hpp"

namespace vpmm {

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
  size_t moved_handles = 0;
  uint64_t shortfall = 0;
  uint64_t span() const { return moved + shortfall; }
};

}  // namespace

// One Phase 2 from plan to commit.
struct Transit {
  uint64_t bytes = 0;
  Stream stream = nullptr;
  bool exact = false;
  size_t max_moved = SIZE_MAX;  // handles this Phase 2 may move (see defragment)
  Plan plan;
  bool have_hole = false;  // false: map_transit reserves a new chunk
  uint64_t hole_va = 0;
  std::vector<EventRef> events;  // per harvest: what its zombie waits for
  std::vector<Region> originals; // per harvest: the free region it was, for abandon
  uint64_t chunk_va = 0, chunk_size = 0;
  std::vector<Mapping> created;
  std::vector<std::pair<uint64_t, Mapping>> placed;  // new VA -> handle
  std::vector<Mapping> orphans;  // handles the driver refused to release meanwhile
};

Defrag::Defrag(PoolState& st, const SmallAllocator& small)
    : StateRefs(st),
      small_(small) {}

// ---------------------------------------------------------------------------
// Phase 0
// ---------------------------------------------------------------------------

size_t Defrag::reap_completed_zombies(LockWindow* window, size_t budget) {
  if (budget == 0) return 0;
  struct Job {
    uint64_t va;
    std::vector<std::pair<uint64_t, Mapping>> maps;  // a prefix of the zombie's mappings
    size_t unmapped = 0;
  };
  std::vector<Job> jobs;
  size_t handles = 0;
  for (uint64_t va : m_.zombies()) {
    if (handles >= budget) break;
    Region& z = m_.find(va)->second;
    bool done = false;
    if (z.busy || st_.query(z.event, &done) != VPMM_OK || !done) continue;
    Job j{va, {}, 0};
    const auto& zm = m_.zombie_mappings();
    for (auto mp = zm.find(va); mp != zm.end() && mp->first < va + z.size && handles < budget; ++mp, ++handles)
      j.maps.push_back(*mp);
    jobs.push_back(std::move(j));
  }
  if (jobs.empty()) return 0;
  // Unmap in order and stop at a zombie's first failure: its rest stays a
  // zombie, so no VA is handed out while still mapped.
  auto unmap_all = [&] {
    for (Job& j : jobs)
      for (const auto& mp : j.maps) {
        if (backend_->unmap(mp.first, mp.second.size) != VPMM_OK) break;
        ++j.unmapped;
      }
    return VPMM_OK;
  };
  if (window) {
    for (Job& j : jobs) m_.find(j.va)->second.busy = true;
    window->outside(m_, unmap_all);
    for (Job& j : jobs) m_.find(j.va)->second.busy = false;
  } else {
    unmap_all();
  }
  size_t unmapped = 0;
  for (Job& j : jobs) {
    unmapped += j.unmapped;
    if (j.unmapped == 0) continue;
    uint64_t end = j.va;
    for (size_t i = 0; i < j.unmapped; ++i) {
      m_.drop_zombie_mapping(j.maps[i].first);
      end += j.maps[i].second.size;
    }
    RegionIt z = m_.find(j.va);
    if (end < j.va + z->second.size) m_.split(z, end - j.va);
    m_.make_hole(m_.find(j.va));
    ++c_.n_zombies_reaped;
  }
  return unmapped;
}

// ---------------------------------------------------------------------------
// Phase 2: plan
// ---------------------------------------------------------------------------

// Plans which free pages move into the hole. A region is moved whole (it
// consolidates free memory in one span, as in the walkthrough's case B) unless
// it is more than twice what is still needed or that would move more than
// kWholeMoveExtraHandles extra handles; then only the needed handles
// from its start are detached and the rest stays in place, keeping its stream,
// event and id. Only whole handles can move (a handle maps whole).
// In `exact` mode (tagged allocations, which must own whole handles so a
// pause releases exactly their memory) only handles no larger than what is
// still needed move, so the span never exceeds the request.
// At most `max_handles` handles move (see defragment).
// A need that is no page multiple (large_rounding below the page) is met by
// whole pages: the shortfall rounds up, and the span's tail stays free.
static Plan plan_harvest(RegionMap& m, uint64_t need, uint64_t page, Stream s, uint64_t exclude_va,
                         bool exact, size_t max_handles) {
  struct Cand {
    bool foreign;
    uint64_t id;
    uint64_t va;
  };
  std::vector<Cand> cands;
  for (const auto& kv : m.streams())
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
    if (remaining == 0 || plan.moved_handles >= max_handles) break;
    const size_t allowance = max_handles - plan.moved_handles;
    const Region& r = m.find(c.va)->second;
    auto maps = m.whole_mappings_in(c.va, r.size);
    if (maps.empty()) continue;
    Harvest h;
    h.region_va = c.va;
    h.foreign = c.foreign;
    bool whole = !exact && r.size <= 2 * remaining;
    if (whole) {
      uint64_t needed = 0;
      size_t n_needed = 0;
      for (const auto& mp : maps) {
        if (needed >= remaining) break;
        needed += mp.second.size;
        ++n_needed;
      }
      whole = maps.size() - n_needed <= kWholeMoveExtraHandles && maps.size() <= allowance;
    }
    uint64_t taken = 0;
    for (auto& mp : maps) {
      if (h.maps.size() >= allowance) break;
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
    plan.moved_handles += h.maps.size();
    remaining = taken >= remaining ? 0 : remaining - taken;
    plan.harvests.push_back(std::move(h));
  }
  plan.shortfall = (remaining + page - 1) / page * page;
  return plan;
}

bool Defrag::merge_completed_straddles(std::vector<MergeUndo>* journal) {
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
  for (auto it = m_.begin(); it != m_.end();) {
    auto nx = std::next(it);
    if (nx == m_.end()) break;
    if (!adjacent_free(it, nx)) {
      it = nx;
      continue;
    }
    if (RegionMap::coalescable(it->second, nx->second)) {  // left by a merge below
      it = merge(it, nx, true);
      continue;
    }
    auto mp = m_.mappings().upper_bound(nx->first);
    bool straddles = mp != m_.mappings().begin() && std::prev(mp)->first < nx->first &&
                     std::prev(mp)->first + std::prev(mp)->second.size > nx->first;
    bool done_a = false, done_b = false;
    if (straddles && st_.is_complete(it->second, &done_a) == VPMM_OK && done_a &&
        st_.is_complete(nx->second, &done_b) == VPMM_OK && done_b) {
      it = merge(it, nx, false);
      if (it != m_.begin()) {
        auto pv = std::prev(it);
        if (adjacent_free(pv, it) && RegionMap::coalescable(pv->second, it->second)) it = pv;
      }
      continue;  // it may touch, or straddle, its new neighbour too
    }
    it = nx;
  }
  return changed;
}

void Defrag::undo_merges(const std::vector<MergeUndo>& journal) {
  for (auto u = journal.rbegin(); u != journal.rend(); ++u) {
    RegionIt it = m_.find(u->left_va);
    m_.split(it, u->left.size);
    m_.retag(m_.find(u->left_va), u->left);
    m_.retag(m_.find(u->right_va), u->right);
  }
}

// A free region of the caller's stream (or never-used memory) with a hole
// beside it that can take what it lacks: the span fills that part of the
// hole, coalesces with the region, and only the missing pages move.
struct Defrag::Join {
  uint64_t region_va = 0, region_size = 0;
  uint64_t hole_va = 0, hole_size = 0;
  bool hole_after = true;  // the hole follows the region (else it precedes it)
};

bool Defrag::best_join(uint64_t bytes, Stream s, Join* out) {
  // The largest region moves the fewest handles; regions as large as the
  // request would have fit in Phase 1.
  bool found = false;
  for (Stream key : {s, clean_stream()}) {
    const StreamState* st = m_.find_stream(key);
    if (!st) continue;
    auto& idx = st->free_by_size;
    for (auto e = std::make_reverse_iterator(idx.lower_bound(std::make_tuple(bytes, uint64_t(0), uint64_t(0))));
         e != idx.rend(); ++e) {
      const uint64_t size = std::get<0>(*e), va = std::get<2>(*e);
      if (found && size <= out->region_size) break;
      RegionIt r = m_.find(va);
      const uint64_t lacking = bytes - size;
      auto hole_room = [&](RegionIt h) {
        return h->second.kind == Kind::Hole && h->second.chunk == r->second.chunk &&
               h->second.size >= lacking;
      };
      RegionIt next = std::next(r);
      if (next != m_.end() && next->first == va + size && hole_room(next)) {
        *out = {va, size, next->first, next->second.size, true};
        found = true;
        break;
      }
      if (r != m_.begin()) {
        RegionIt prev = std::prev(r);
        if (prev->first + prev->second.size == va && hole_room(prev)) {
          *out = {va, size, prev->first, prev->second.size, false};
          found = true;
          break;
        }
      }
    }
  }
  return found;
}

// Chooses the hole and the plan: with page handles first a join
// (best_join), a free region of the caller's that stays in place beside a
// hole so that only what it lacks moves; with larger handles the smallest
// hole that fits the request, joined by a free region of the caller's that
// ends where it starts. Else the smallest hole that takes the whole span.
void Defrag::plan_defrag(Transit* t) {
  const uint64_t bytes = t->bytes;
  // Joins anywhere are for the default and page handles: with large handles
  // left in place (growth handles, caps) they changed later layouts both
  // ways (peaks +12% / -9% on synthetic traces), without a pattern.
  const bool page_handles = opt_.max_handle_size == 0 || opt_.max_handle_size <= opt_.page_size;
  if (!t->exact && page_handles) {
    t->plan = plan_harvest(m_, bytes, opt_.page_size, t->stream, UINT64_MAX, false, t->max_moved);
    auto h = m_.holes().lower_bound({t->plan.span(), 0});
    t->have_hole = h != m_.holes().end();
    if (t->have_hole) t->hole_va = h->second;
    Join j;
    if (!best_join(bytes, t->stream, &j)) return;
    // Memory first: the join must not grow more than moving everything would.
    Plan joined = plan_harvest(m_, bytes - j.region_size, opt_.page_size, t->stream, j.region_va, false,
                                t->max_moved);
    const uint64_t span = joined.span();
    if (span == 0 || span > j.hole_size || joined.shortfall > t->plan.shortfall) return;
    t->plan = std::move(joined);
    t->hole_va = j.hole_after ? j.hole_va : j.hole_va + j.hole_size - span;
    t->have_hole = true;
    return;
  }
  auto h = m_.holes().lower_bound({bytes, 0});
  if (!t->exact && h != m_.holes().end()) {
    RegionIt hole = m_.find(h->second);
    uint64_t prefix_va = UINT64_MAX, prefix = 0;
    if (hole != m_.begin()) {
      RegionIt pv = std::prev(hole);
      if (pv->second.kind == Kind::Free &&
          (pv->second.stream == t->stream || pv->second.stream == clean_stream()) &&
          pv->second.chunk == hole->second.chunk && pv->first + pv->second.size == hole->first) {
        prefix_va = pv->first;
        prefix = pv->second.size;
      }
    }
    t->plan = plan_harvest(m_, bytes - std::min(prefix, bytes - std::min(bytes, opt_.page_size)),
                           opt_.page_size, t->stream, prefix_va, false, t->max_moved);
    if (t->plan.span() > 0 && t->plan.span() <= hole->second.size) {
      t->hole_va = hole->first;
      t->have_hole = true;
      return;
    }
  }
  t->plan = plan_harvest(m_, bytes, opt_.page_size, t->stream, UINT64_MAX, t->exact, t->max_moved);
  auto h2 = m_.holes().lower_bound({t->plan.span(), 0});
  if (h2 != m_.holes().end()) {
    t->hole_va = h2->second;
    t->have_hole = true;
  }
}

// Growing by what a span lacks, instead of moving free pages into it, when
// the growth keeps the mapped bytes within (1 + remap_slack) x the bytes
// asked for (this request included). A training loop's peak moments come
// back every step: a span grown once stays, where one assembled by moving
// pages is taken apart again by the next step's smaller allocations and
// assembled anew (the "conveyor" of docs/handles.md). Past the slack the
// pool stays page-exact and moves.
void Defrag::plan_with_slack(Transit* t) {
  if (t->exact || opt_.remap_slack <= 0.0) return plan_defrag(t);
  const size_t max_moved = t->max_moved;
  t->max_moved = 0;
  plan_defrag(t);
  const double cap = (1.0 + opt_.remap_slack) * static_cast<double>(c_.requested + t->bytes);
  if (static_cast<double>(m_.totals().mapped + t->plan.shortfall) <= cap) return;
  t->max_moved = max_moved;
  t->plan = Plan();
  t->have_hole = false;
  t->hole_va = 0;
  plan_defrag(t);
}

// Zombies need the event of each moved region; a pending foreign one also
// makes the caller's stream wait on the GPU (the CPU never blocks).
vpmm_status Defrag::wait_for_harvest(Transit* t) {
  t->events.resize(t->plan.harvests.size());
  for (size_t i = 0; i < t->plan.harvests.size(); ++i) {
    const Harvest& hv = t->plan.harvests[i];
    Region& r = m_.find(hv.region_va)->second;
    vpmm_status st = st_.event_of(r, &t->events[i]);
    if (st != VPMM_OK) return st;
    if (!t->events[i] || !hv.foreign) continue;  // never used, or the caller's own stream
    bool done = false;
    st = st_.query(t->events[i], &done);
    if (st != VPMM_OK) return st;
    if (!done) {
      st = backend_->stream_wait(t->stream, t->events[i]->handle());
      if (st != VPMM_OK) return st;
      ++c_.n_stream_waits;
    }
  }
  return VPMM_OK;
}

// ---------------------------------------------------------------------------
// Phase 2: claim, map, commit or abandon
// ---------------------------------------------------------------------------

vpmm_status Defrag::claim(Transit* t) {
  if (t->plan.shortfall) {
    vpmm_status st = st_.check_growth_limit(t->plan.shortfall);
    if (st != VPMM_OK) return st;
  }
  // Nothing below fails (std::bad_alloc aside, caught at the ABI).
  // The moved ranges become busy zombies at once: their handles leave the
  // primary side, their old VAs stay mapped until reaped.
  t->originals.reserve(t->plan.harvests.size());
  for (size_t i = 0; i < t->plan.harvests.size(); ++i) {
    const Harvest& hv = t->plan.harvests[i];
    RegionIt r = m_.find(hv.region_va);
    if (hv.lo > r->first) r = m_.split(r, hv.lo - r->first);
    if (hv.hi < r->first + r->second.size) m_.split(r, hv.hi - r->first);
    t->originals.push_back(r->second);
    Region z;
    z.size = hv.hi - hv.lo;
    z.kind = Kind::Zombie;
    z.chunk = r->second.chunk;
    z.event = t->events[i];  // null: the region was never used, nothing to wait for
    z.busy = true;
    m_.erase(r);
    m_.insert(hv.lo, z);
    for (const auto& mp : hv.maps) m_.start_move(mp.first);
  }
  if (t->have_hole) {
    RegionIt hole = m_.find_containing(t->hole_va);
    if (hole->first < t->hole_va) hole = m_.split(hole, t->hole_va - hole->first);  // a join's tail
    if (hole->second.size > t->plan.span()) m_.split(hole, t->plan.span());
    hole = m_.find(t->hole_va);
    Region transit = hole->second;
    transit.kind = Kind::Transit;
    m_.retag(hole, transit);
  }
  cap_.creating(t->plan.shortfall);
  return VPMM_OK;
}

vpmm_status Defrag::map_transit(Transit* t) {
  // Runs without the mutex, so an exception must not escape it: the claim
  // would be stranded. Whatever was done is undone here on any failure.
  size_t n_mapped = 0;
  vpmm_status st;
  try {
    st = map_transit_steps(t, &n_mapped);
  } catch (const std::bad_alloc&) {
    st = fail(VPMM_ERR_OUT_OF_MEMORY, "out of host memory mapping a span of %" PRIu64 " bytes",
              t->plan.span());
  }
  if (st != VPMM_OK) {
    for (size_t i = 0; i < n_mapped; ++i) backend_->unmap(t->placed[i].first, t->placed[i].second.size);
    t->placed.clear();
    st_.release_handles_into(t->created, &t->orphans);
    t->created.clear();
    if (t->chunk_size) backend_->unreserve(t->chunk_va, t->chunk_size);
    t->chunk_size = 0;
  }
  return st;
}

vpmm_status Defrag::map_transit_steps(Transit* t, size_t* n_mapped) {
  const uint64_t span = t->plan.span();
  if (!t->have_hole) {
    vpmm_status st = st_.reserve_chunk(span, &t->chunk_va, &t->chunk_size);
    if (st != VPMM_OK) return st;
    t->hole_va = t->chunk_va;
  }
  if (t->plan.shortfall) {
    // Memory a view may later assemble grows in pages (views take whole
    // handles of free regions; see views.hpp).
    const bool view_sized = opt_.view_min_size && !t->exact && t->bytes >= opt_.view_min_size;
    const uint64_t handle = view_sized ? opt_.page_size : st_.growth_handle_size(t->plan.shortfall, t->exact);
    vpmm_status st = st_.create_handles(t->plan.shortfall, handle,
                                    &t->created, &t->orphans);
    if (st != VPMM_OK) return st;
  }
  uint64_t cur = t->hole_va;
  for (const Harvest& hv : t->plan.harvests)
    for (const auto& mp : hv.maps) {
      t->placed.emplace_back(cur, mp.second);
      cur += mp.second.size;
    }
  for (const Mapping& c : t->created) {
    t->placed.emplace_back(cur, c);
    cur += c.size;
  }
  for (; *n_mapped < t->placed.size(); ++*n_mapped) {
    const auto& p = t->placed[*n_mapped];
    vpmm_status st = backend_->map(p.first, p.second.size, p.second.handle);
    if (st != VPMM_OK) return st;
  }
  return backend_->set_access(t->hole_va, span);
}

void Defrag::abandon(Transit* t) {
  st_.keep_orphans(t->orphans);
  cap_.created(t->plan.shortfall);
  for (size_t i = t->plan.harvests.size(); i-- > 0;) {
    const Harvest& hv = t->plan.harvests[i];
    for (const auto& mp : hv.maps) m_.cancel_move(mp.first);
    Region back = t->originals[i];
    // Retired meanwhile (vpmm_pool_stream_retire): a fresh key, as retire
    // gives the stream's other regions, so a new stream at the same address
    // never takes it as its own.
    if (back.stream != clean_stream() && !m_.streams().count(back.stream)) {
      back.stream = st_.retired_key();
    }
    m_.erase(m_.find(hv.lo));
    m_.coalesce(m_.insert(hv.lo, back));
  }
  if (t->have_hole) m_.make_hole(m_.find(t->hole_va));
}

RegionIt Defrag::commit(Transit* t) {
  st_.keep_orphans(t->orphans);
  const uint64_t span_bytes = t->plan.span();
  if (t->chunk_size) {
    RegionIt it = m_.add_chunk(t->chunk_va, t->chunk_size);
    if (t->chunk_size > span_bytes) m_.split(it, span_bytes);
  }
  for (const Harvest& hv : t->plan.harvests) m_.find(hv.lo)->second.busy = false;
  // The moved handles come first in `placed`, then the created ones.
  size_t i = 0;
  for (const Harvest& hv : t->plan.harvests)
    for (size_t k = 0; k < hv.maps.size(); ++k, ++i) m_.place_moved(t->placed[i].first, t->placed[i].second);
  for (; i < t->placed.size(); ++i) m_.map_new(t->placed[i].first, t->placed[i].second);
  cap_.created(t->plan.shortfall);

  RegionIt hole = m_.find(t->hole_va);
  Region span;
  span.size = span_bytes;
  span.kind = Kind::Free;
  span.chunk = hole->second.chunk;
  span.stream = t->stream;
  span.id = st_.next_id();
  // Moved pages may carry foreign work the caller's stream now waits on: a
  // fresh free point makes any later event cover those waits.
  span.seq = t->plan.moved ? ++m_.stream(t->stream).free_seq : 0;
  m_.erase(hole);
  RegionIt res = m_.insert(t->hole_va, span);
  if (!t->exact) res = m_.coalesce(res);  // exact spans stay on their handle boundaries

  if (t->plan.moved) {
    ++c_.n_defrag;
    c_.bytes_remapped += t->plan.moved;
    c_.handles_moved += t->plan.moved_handles;
  }
  if (t->plan.shortfall) {
    ++c_.n_grow;
    c_.pages_created += t->plan.shortfall / opt_.page_size;
    c_.handles_created += t->created.size();
  }
  st_.note_peaks(small_.empty_bytes());
  return res;
}

void Defrag::start(Transit* t, uint64_t bytes, Stream s, bool exact, const size_t* handle_ops) const {
  t->bytes = bytes;
  t->stream = s;
  t->exact = exact;
  // The default policy bounds a call's driver work (kHandleOpsPerCall): the
  // request's own pages may always move, whole-region moves beyond them only
  // within what Phase 0 left of the budget. An explicit handle size is the
  // user's choice of handles, honoured whatever the count, and tagged spans
  // keep their own handles (exact).
  if (!exact && opt_.max_handle_size == 0 && handle_ops)
    t->max_moved = std::max<size_t>(kHandleOpsPerCall - std::min(kHandleOpsPerCall, *handle_ops),
                                    (bytes + opt_.page_size - 1) / opt_.page_size);
}

size_t Defrag::planned_handle_ops(uint64_t bytes, Stream s, bool exact, size_t handle_ops) {
  Transit t;
  start(&t, bytes, s, exact, &handle_ops);
  plan_with_slack(&t);
  size_t created = 0;
  if (t.plan.shortfall) {
    // Growth past the limit: this Phase 2 would fail where a view may not.
    if (!st_.growth_fits(t.plan.shortfall)) return SIZE_MAX;
    const uint64_t h = std::max<uint64_t>(opt_.page_size, st_.growth_handle_size(t.plan.shortfall, exact));
    created = (t.plan.shortfall + h - 1) / h;
  }
  return 2 * t.plan.moved_handles + 2 * created;
}

Defrag::PlanCost Defrag::plan_costs(uint64_t bytes, Stream s, size_t handle_ops) {
  PlanCost cost;
  Transit moving;
  start(&moving, bytes, s, false, &handle_ops);
  plan_with_slack(&moving);
  cost.moved_handles = moving.plan.moved_handles;
  Transit growing;
  start(&growing, bytes, s, false, &handle_ops);
  growing.max_moved = 0;
  plan_defrag(&growing);
  cost.growth = growing.plan.shortfall;
  return cost;
}

vpmm_status Defrag::defragment(uint64_t bytes, Stream s, bool exact, std::vector<MergeUndo>* merges,
                             LockWindow* window, RegionIt* out, size_t* handle_ops, bool grow_only) {
  if (merges && merge_completed_straddles(merges)) return kRetryPhase1;
  Transit t;
  start(&t, bytes, s, exact, handle_ops);
  if (grow_only) {
    t.max_moved = 0;
    plan_defrag(&t);
  } else {
    plan_with_slack(&t);
  }
  vpmm_status st = wait_for_harvest(&t);
  if (st == VPMM_OK) st = claim(&t);
  if (st != VPMM_OK) return st;
  st = window ? window->outside(m_, [&] { return map_transit(&t); }) : map_transit(&t);
  if (st != VPMM_OK) {
    abandon(&t);
    return st;
  }
  *out = commit(&t);
  if (handle_ops) *handle_ops += t.placed.size();
  return VPMM_OK;
}

}  // namespace vpmm
