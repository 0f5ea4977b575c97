// RegionMap: the region tiling, its indexes and its invariant checker.
// Every mutation goes through insert/erase/resize so the size indexes and the
// running totals_ can never drift from the map itself.
#include "core/state/regions.hpp"

#include <cinttypes>
#include <cstdio>

namespace vpmm {

char clean_stream_key;

namespace {
uint64_t* total_for(Totals& t, Kind k) {
  switch (k) {
    case Kind::Live: return &t.live;
    case Kind::Small: return &t.small;
    case Kind::Free: return &t.free;
    case Kind::Hole: return &t.hole;
    case Kind::Transit: return &t.hole;
    case Kind::Zombie: return &t.zombie;
    case Kind::Paused: return &t.paused;
    case Kind::Lent: return &t.lent;
  }
  return &t.hole;
}

}  // namespace

void RegionMap::index(RegionIt it) {
  ++changes_;
  const Region& r = it->second;
  *total_for(totals_, r.kind) += r.size;
  switch (r.kind) {
    case Kind::Free: {
      FreeIndex& idx = stream(r.stream).free_by_size;
      auto key = std::make_tuple(r.size, r.id, it->first);
      if (spare_free_.empty()) {
        it->second.free_pos = idx.insert(key).first;
      } else {
        FreeNode node = std::move(spare_free_.back());
        spare_free_.pop_back();
        node.value() = key;
        it->second.free_pos = idx.insert(std::move(node)).position;
      }
      break;
    }
    case Kind::Hole: holes_by_size_.emplace(r.size, it->first); break;
    case Kind::Zombie: zombies_.insert(it->first); break;
    case Kind::Small: index_small(it); break;
    default: break;
  }
}

void RegionMap::index_small(RegionIt it) {
  if (!small_granule_) return;
  const uint64_t key = it->first & ~(small_granule_ - 1);
  if (small_starts_.find(key, regions_.end()) == regions_.end()) {
    small_starts_.insert(key, it);
    return;
  }
  // Two slabs in one granule: the hash cannot tell them apart, so it is no
  // longer kept and find_small leaves every small free to the walk.
  small_granule_ = 0;
  small_starts_.clear();
}

void RegionMap::unindex_small(RegionIt it) {
  if (!small_granule_) return;
  const uint64_t key = it->first & ~(small_granule_ - 1);
  if (small_starts_.find(key, regions_.end()) == it) small_starts_.erase(key);
}

void RegionMap::unindex(RegionIt it) {
  const Region& r = it->second;
  *total_for(totals_, r.kind) -= r.size;
  switch (r.kind) {
    case Kind::Free: {
      FreeNode node = stream(r.stream).free_by_size.extract(r.free_pos);
      if (spare_free_.size() < kSpareNodes) spare_free_.push_back(std::move(node));
      break;
    }
    case Kind::Hole: holes_by_size_.erase({r.size, it->first}); break;
    case Kind::Zombie: zombies_.erase(it->first); break;
    case Kind::Small: unindex_small(it); break;
    default: break;
  }
}

RegionIt RegionMap::insert(uint64_t va, const Region& r) { return insert_before(regions_.upper_bound(va), va, r); }

RegionIt RegionMap::insert_before(RegionIt hint, uint64_t va, const Region& r) {
  RegionIt it;
  if (spare_regions_.empty()) {
    it = regions_.emplace_hint(hint, va, r);
  } else {
    RegionNode node = std::move(spare_regions_.back());
    spare_regions_.pop_back();
    node.key() = va;
    node.mapped() = r;
    it = regions_.insert(hint, std::move(node));
  }
  starts_.insert(va, it);
  index(it);
  return it;
}

void RegionMap::erase(RegionIt it) {
  unindex(it);
  drop_node(it);
}

void RegionMap::drop_node(RegionIt it) {
  starts_.erase(it->first);
  if (spare_regions_.size() == kSpareNodes) {
    regions_.erase(it);
    return;
  }
  RegionNode node = regions_.extract(it);
  node.mapped().event.reset();  // the event dies with its region, as on a plain erase
  spare_regions_.push_back(std::move(node));
}

void RegionMap::resize(RegionIt it, uint64_t new_size) {
  unindex(it);
  it->second.size = new_size;
  index(it);
}

RegionIt RegionMap::split(RegionIt it, uint64_t at) {
  Region tail = it->second;
  tail.size = it->second.size - at;
  uint64_t tail_va = it->first + at;
  resize(it, at);
  // The tail goes right after `it`: a hinted insert, not a walk from the
  // root (one a split, which is most best-fit mallocs).
  return insert_before(std::next(it), tail_va, tail);
}

bool RegionMap::coalescable(const Region& a, const Region& b) {
  if (a.kind != b.kind || a.chunk != b.chunk) return false;
  if (a.kind == Kind::Hole) return true;
  return a.kind == Kind::Free &&
         (a.stream == b.stream || a.stream == clean_stream() || b.stream == clean_stream());
}

// Same-stream merge keeps the newest free point: on one stream an event
// recorded after the later free also covers the earlier one. Clean memory
// joins the used side and takes its stream.
void RegionMap::absorb(Region& into, const Region& from) {
  if (into.stream == clean_stream()) into.stream = from.stream;
  if (from.seq > into.seq || (from.seq == into.seq && !into.event)) {
    into.seq = from.seq;
    into.event = from.event;
  }
  if (from.id > into.id) into.id = from.id;
}

bool RegionMap::merges_with_prev(RegionIt it) {
  if (it == regions_.begin()) return false;
  auto prev = std::prev(it);
  return prev->first + prev->second.size == it->first && coalescable(prev->second, it->second);
}

bool RegionMap::merges_with_next(RegionIt it) {
  auto next = std::next(it);
  return next != regions_.end() && it->first + it->second.size == next->first &&
         coalescable(it->second, next->second);
}

RegionIt RegionMap::coalesce(RegionIt it) {
  if (!merges_with_prev(it) && !merges_with_next(it)) return it;  // nothing to merge: stays filed
  unindex(it);
  return merge_and_index(it);
}

RegionIt RegionMap::merge_and_index(RegionIt it) {
  if (merges_with_prev(it)) {
    RegionIt prev = std::prev(it);
    unindex(prev);
    prev->second.size += it->second.size;
    absorb(prev->second, it->second);
    drop_node(it);
    it = prev;
  }
  if (merges_with_next(it)) {
    RegionIt next = std::next(it);
    unindex(next);
    it->second.size += next->second.size;
    absorb(it->second, next->second);
    drop_node(next);
  }
  index(it);
  return it;
}

RegionIt RegionMap::add_chunk(uint64_t va, uint64_t size) {
  Region hole;
  hole.size = size;
  hole.kind = Kind::Hole;
  hole.chunk = static_cast<uint32_t>(chunks_.size());
  chunks_.push_back({va, size});
  totals_.reserved += size;
  return insert(va, hole);
}

void RegionMap::map_new(uint64_t va, const Mapping& m) {
  mappings_.emplace(va, m);
  handle_va_[m.handle] = va;
  totals_.mapped += m.size;
}

void RegionMap::unmap_released(uint64_t va) {
  auto it = mappings_.find(va);
  totals_.mapped -= it->second.size;
  handle_va_.erase(it->second.handle);
  mappings_.erase(it);
}

void RegionMap::start_move(uint64_t va) {
  auto it = mappings_.find(va);
  zombie_mappings_.emplace(va, it->second);
  handle_va_.erase(it->second.handle);
  totals_.moving += it->second.size;
  mappings_.erase(it);
}

void RegionMap::cancel_move(uint64_t va) {
  auto it = zombie_mappings_.find(va);
  mappings_.emplace(va, it->second);
  handle_va_[it->second.handle] = va;
  totals_.moving -= it->second.size;
  zombie_mappings_.erase(it);
}

void RegionMap::place_moved(uint64_t va, const Mapping& m) {
  mappings_.emplace(va, m);
  handle_va_[m.handle] = va;
  totals_.moving -= m.size;
}

void RegionMap::drop_zombie_mapping(uint64_t va) { zombie_mappings_.erase(va); }

RegionIt RegionMap::find_containing(uint64_t va) {
  auto it = regions_.upper_bound(va);
  if (it == regions_.begin()) return regions_.end();
  --it;
  if (va >= it->first + it->second.size) return regions_.end();
  return it;
}

uint32_t RegionMap::chunk_of(uint64_t va) const {
  for (uint32_t i = 0; i < chunks_.size(); ++i)
    if (va >= chunks_[i].va && va < chunks_[i].va + chunks_[i].size) return i;
  return static_cast<uint32_t>(chunks_.size());
}

std::vector<std::pair<uint64_t, Mapping>> RegionMap::whole_mappings_in(uint64_t va,
                                                                       uint64_t size) const {
  std::vector<std::pair<uint64_t, Mapping>> out;
  for (auto it = mappings_.lower_bound(va); it != mappings_.end() && it->first < va + size; ++it)
    if (it->first + it->second.size <= va + size) out.push_back(*it);
  return out;
}

uint32_t RegionMap::count_mappings_in(const std::map<uint64_t, Mapping>& m, uint64_t va,
                                      uint64_t size) {
  uint32_t n = 0;
  auto it = m.upper_bound(va);
  if (it != m.begin()) {
    auto p = std::prev(it);
    if (p->first + p->second.size > va) ++n;  // a mapping that starts before va
  }
  for (; it != m.end() && it->first < va + size; ++it) ++n;
  return n;
}

std::string RegionMap::check(uint64_t page, uint64_t quantum) const {
  char buf[256];
  auto bad = [&](const char* fmt, uint64_t a, uint64_t b) {
    std::snprintf(buf, sizeof buf, fmt, a, b);
    return std::string(buf);
  };
  Totals sum;
  size_t n_free = 0, n_holes = 0, n_zombies = 0;
  // 1. Regions tile each chunk.
  for (uint32_t c = 0; c < chunks_.size(); ++c) {
    uint64_t cursor = chunks_[c].va, end = chunks_[c].va + chunks_[c].size;
    auto it = regions_.find(cursor);
    if (it == regions_.end()) return bad("chunk %" PRIu64 " at 0x%" PRIx64 " has no first region", c, cursor);
    while (cursor < end) {
      if (it == regions_.end() || it->first != cursor)
        return bad("gap or overlap at 0x%" PRIx64 " in chunk %" PRIu64, cursor, c);
      const Region& r = it->second;
      // Pages are counted from the chunk start: a page size that is no power
      // of two cannot be aligned in absolute addresses.
      // Live, small and free regions may share pages (large_rounding below
      // the page); the runs they form, and every other kind, are whole pages
      // (the mapping check below).
      const bool shares = r.kind == Kind::Live || r.kind == Kind::Small || r.kind == Kind::Free;
      const uint64_t unit = shares ? quantum : page;
      if (r.size == 0 || r.size % unit || (it->first - chunks_[c].va) % unit)
        return bad("region 0x%" PRIx64 " size %" PRIu64 " not aligned to its unit", it->first, r.size);
      if (r.chunk != c) return bad("region 0x%" PRIx64 " claims chunk %" PRIu64, it->first, r.chunk);
      if (cursor + r.size > end) return bad("region 0x%" PRIx64 " straddles chunk end (size %" PRIu64 ")", it->first, r.size);
      *total_for(sum, r.kind) += r.size;
      switch (r.kind) {
        case Kind::Free: {
          ++n_free;
          auto s = streams_.find(r.stream);
          if (s == streams_.end() || !s->second.free_by_size.count(std::make_tuple(r.size, r.id, it->first)))
            return bad("free region 0x%" PRIx64 " (size %" PRIu64 ") missing from its stream index", it->first, r.size);
          // Compared, never dereferenced: a stale position would be a bug this reports.
          if (s->second.free_by_size.find(std::make_tuple(r.size, r.id, it->first)) != r.free_pos)
            return bad("free region 0x%" PRIx64 " (size %" PRIu64 ") has a stale index position", it->first, r.size);
          // Same-stream neighbours are one region (coalesce): two would split
          // a handle that neither holds whole, which trim and harvest skip.
          auto nx = std::next(it);
          if (nx != regions_.end() && nx->first == it->first + r.size && nx->second.kind == Kind::Free &&
              nx->second.chunk == c &&
              (nx->second.stream == r.stream || r.stream == clean_stream() || nx->second.stream == clean_stream()))
            return bad("free regions_ 0x%" PRIx64 " and 0x%" PRIx64 " of one stream are not coalesced", it->first,
                       nx->first);
          break;
        }
        case Kind::Hole:
          ++n_holes;
          if (!holes_by_size_.count({r.size, it->first}))
            return bad("hole 0x%" PRIx64 " (size %" PRIu64 ") missing from the hole index", it->first, r.size);
          break;
        case Kind::Zombie:
          ++n_zombies;
          if (!zombies_.count(it->first))
            return bad("zombie 0x%" PRIx64 " not in the zombie list (size %" PRIu64 ")", it->first, r.size);
          break;
        default: break;
      }
      cursor += r.size;
      ++it;
    }
  }
  size_t indexed_free = 0;
  for (const auto& s : streams_) indexed_free += s.second.free_by_size.size();
  if (indexed_free != n_free) return bad("free index holds %" PRIu64 " entries, map %" PRIu64, indexed_free, n_free);
  if (holes_by_size_.size() != n_holes) return bad("hole index holds %" PRIu64 " entries, map %" PRIu64, holes_by_size_.size(), n_holes);
  if (zombies_.size() != n_zombies) return bad("zombie list holds %" PRIu64 " entries, map %" PRIu64, zombies_.size(), n_zombies);
  // Distinct keys, each naming the region of that start, as many as the map
  // has: the start index holds exactly the map's regions.
  if (starts_.size() != regions_.size())
    return bad("start index holds %" PRIu64 " entries, map %" PRIu64 " regions", uint64_t(starts_.size()),
               uint64_t(regions_.size()));
  std::string stale;
  starts_.for_each([&](uint64_t va, RegionIt r) {
    if (stale.empty() && r->first != va)
      stale = bad("start index entry 0x%" PRIx64 " names the region at 0x%" PRIx64, va, r->first);
  });
  if (!stale.empty()) return stale;
  // The slab hash, while kept, names each Small region once, under its
  // granule: entries that each name a distinct Small region of their key
  // (keys are distinct), as many as there are Small regions.
  if (small_granule_) {
    size_t n_small = 0;
    for (const auto& r : regions_) n_small += r.second.kind == Kind::Small;
    small_starts_.for_each([&](uint64_t key, RegionIt r) {
      if (stale.empty() && (r->second.kind != Kind::Small || (r->first & ~(small_granule_ - 1)) != key))
        stale = bad("slab hash entry 0x%" PRIx64 " names the region at 0x%" PRIx64, key, r->first);
    });
    if (!stale.empty()) return stale;
    if (small_starts_.size() != n_small)
      return bad("slab hash holds %" PRIu64 " entries, map %" PRIu64 " small regions", uint64_t(small_starts_.size()),
                 uint64_t(n_small));
  }
  uint64_t region_bytes = 0;
  for (const auto& r : regions_) region_bytes += r.second.size;
  uint64_t chunk_bytes = 0;
  for (const auto& c : chunks_) chunk_bytes += c.size;
  if (region_bytes != chunk_bytes) return bad("regions_ cover %" PRIu64 " bytes, chunks_ %" PRIu64, region_bytes, chunk_bytes);

  // 2. Mappings tile exactly the mapped regions_. Build the maximal runs of
  // mapped regions; a handle may straddle two regions_ of one run (a live
  // region and its free tail) but must tile the run with no gap.
  auto tiles = [&](const std::map<uint64_t, Mapping>& m, bool zombie_side, std::string* err) {
    std::vector<std::pair<uint64_t, uint64_t>> runs;  // [lo, hi)
    for (const auto& r : regions_) {
      Kind k = r.second.kind;
      bool mapped = zombie_side ? k == Kind::Zombie
                                : (k == Kind::Live || k == Kind::Small || k == Kind::Free || k == Kind::Lent);
      if (!mapped) continue;
      if (!runs.empty() && runs.back().second == r.first)
        runs.back().second += r.second.size;
      else
        runs.emplace_back(r.first, r.first + r.second.size);
    }
    uint64_t bytes = 0;
    auto mit = m.begin();
    for (const auto& run : runs) {
      uint64_t cur = run.first;
      while (cur < run.second) {
        if (mit == m.end() || mit->first != cur) {
          *err = bad("page 0x%" PRIx64 " of a mapped run is not the start of a mapping (run ends 0x%" PRIx64 ")", cur, run.second);
          return uint64_t(0);
        }
        cur += mit->second.size;
        ++mit;
      }
      if (cur != run.second) {
        *err = bad("mapping ending at 0x%" PRIx64 " runs past mapped run end 0x%" PRIx64, cur, run.second);
        return uint64_t(0);
      }
      bytes += run.second - run.first;
    }
    if (mit != m.end()) {
      *err = bad("mapping 0x%" PRIx64 " (size %" PRIu64 ") lies over no mapped region", mit->first, mit->second.size);
      return uint64_t(0);
    }
    return bytes;
  };
  std::string err;
  uint64_t primary = tiles(mappings_, false, &err);
  if (!err.empty()) return err;
  tiles(zombie_mappings_, true, &err);
  if (!err.empty()) return "zombie side: " + err;

  // 3. Running totals_ equal the sums.
  if (sum.live != totals_.live) return bad("live total %" PRIu64 " != sum %" PRIu64, totals_.live, sum.live);
  if (sum.small != totals_.small) return bad("small total %" PRIu64 " != sum %" PRIu64, totals_.small, sum.small);
  if (sum.free != totals_.free) return bad("free total %" PRIu64 " != sum %" PRIu64, totals_.free, sum.free);
  if (sum.hole != totals_.hole) return bad("hole total %" PRIu64 " != sum %" PRIu64, totals_.hole, sum.hole);
  if (sum.zombie != totals_.zombie) return bad("zombie total %" PRIu64 " != sum %" PRIu64, totals_.zombie, sum.zombie);
  if (sum.lent != totals_.lent) return bad("lent total %" PRIu64 " != sum %" PRIu64, totals_.lent, sum.lent);
  if (sum.paused != totals_.paused) return bad("paused total %" PRIu64 " != sum %" PRIu64, totals_.paused, sum.paused);
  if (primary + totals_.moving != totals_.mapped)
    return bad("mapped total %" PRIu64 " != mapping sum + moving %" PRIu64, totals_.mapped, primary + totals_.moving);
  if (chunk_bytes != totals_.reserved) return bad("reserved total %" PRIu64 " != chunk sum %" PRIu64, totals_.reserved, chunk_bytes);
  return "";
}

}  // namespace vpmm
