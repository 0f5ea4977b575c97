// Observability: the stats snapshot and the region walk. Totals are kept
// incrementally by RegionMap, so a stats call costs O(streams), never a scan.
#include <algorithm>
#include <cstring>

#include "core/backups.hpp"
#include "core/pool.hpp"
#include "core/small.hpp"

namespace vpmm {

void Pool::stats(vpmm_stats* out) {
  std::lock_guard<std::mutex> lock(mu_);
  // No side effects: reading the counters must not change what the pool does
  // next (it once settled small blocks here, so `vpmm replay --timeline`
  // changed later placements and peaks). Blocks freed on another stream
  // return to their slabs at the next small malloc, as they would unobserved.
  vpmm_stats s;
  std::memset(&s, 0, sizeof s);
  s.struct_size = sizeof s;
  const Totals& t = m_.totals();
  s.mapped_bytes = t.mapped;
  s.reserved_va_bytes = t.reserved + views_.reserved();
  // Empty small-object slabs are cached memory, not live: they count as free,
  // and so do slabs whose blocks only wait for completed events, and free
  // pages a malloc in flight is moving into its new span.
  const uint64_t small_empty = small_->empty_bytes_if_settled();
  s.live_bytes = t.live + t.small + t.lent - small_empty;
  s.requested_bytes = c_.requested;
  s.free_bytes = t.free + t.moving + small_empty;
  s.hole_bytes = t.hole;
  for (const auto& kv : views_.all())  // a view's VA without its allocation: a hole (snapshot)
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
  s.va_chunks = m_.chunks().size() + views_.size();  // a view is a chunk of its own (snapshot)
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
  s.backup_cache_bytes = backups_->buffers().cached_bytes();
  s.backup_pinned_bytes = backups_->buffers().pinned_bytes();
  s.backup_pageable_bytes = backups_->buffers().pageable_bytes();
  s.backup_mmap_bytes = backups_->stores().mmap_bytes();
  s.backup_disk_bytes = backups_->stores().disk_bytes();
  s.backup_retained_bytes = backups_->stores().retained_bytes();
  s.backup_skipped_bytes = backups_->stores().skipped_bytes();
  s.n_pause = c_.n_pause;
  s.n_resume = c_.n_resume;
  s.n_trim = c_.n_trim;
  s.bytes_trimmed = c_.bytes_trimmed;
  s.driver_ns = c_.driver_ns;
  s.driver_calls = c_.driver_calls;
  s.lent_bytes = t.lent;
  s.n_views = views_.size();
  s.view_va_bytes = views_.reserved();
  s.n_view_malloc = c_.n_view_malloc;
  s.n_view_reuse = c_.n_view_reuse;
  cap_.fill_stats(&s);
  *out = s;
}

std::vector<vpmm_region_info> Pool::snapshot() {
  std::lock_guard<std::mutex> lock(mu_);
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
  for (const auto& kv : views_.all()) {
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

}  // namespace vpmm
