// The pool's bookkeeping: one ordered map of regions that partitions every
// reserved VA chunk, the physical mappings under them, and the indexes that
// keep best fit O(log n). Pure data structure: no backend calls.
//
// Its containers are private: every change goes through the operations
// below, which keep the indexes and the running totals in step with the map.
//
// Invariants (checked by RegionMap::check, called by vpmm_pool_check):
//  - regions are non-empty, never straddle a chunk, and tile each chunk
//    exactly (no gap, no overlap); they are page aligned, except that live,
//    small and free regions only need the large_rounding quantum (their
//    maximal runs are whole pages: the mapping tiling below);
//  - free regions appear in exactly one per-stream size index, holes in the
//    hole size index, zombies in the zombie list; nothing else is indexed;
//  - adjacent free regions of one stream are one region (coalesced), so a
//    handle is split across free regions only where their streams differ;
//  - the primary mappings tile exactly the union of live, small and free
//    regions (every mapped page belongs to exactly one of them); zombie
//    mappings tile exactly the zombie regions; transit regions (holes a
//    malloc in flight is mapping) have no mapping yet;
//  - the running byte totals equal the sums over the maps (mapped = primary
//    mappings + handles moving between their old and new VA).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <tuple>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "backend/backend.hpp"
#include "core/state/start_index.hpp"

namespace vpmm {

// A backend event shared by every region that relies on it; destroyed with
// its last owner.
class Event {
 public:
  Event(Backend* b, EventHandle h) : backend_(b), handle_(h) {}
  // Retried once: there is no later point at which to give the event back.
  ~Event() {
    if (backend_->event_destroy(handle_) != VPMM_OK) backend_->event_destroy(handle_);
  }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  EventHandle handle() const { return handle_; }
  // Cached after the first positive answer: an event never un-completes.
  bool done_cached() const { return done_; }
  void mark_done() { done_ = true; }

 private:
  Backend* backend_;
  EventHandle handle_;
  bool done_ = false;
};
using EventRef = std::shared_ptr<Event>;

// Live/Small/Free are mapped; Hole/Paused are reserved VA with nothing mapped;
// Zombie is an old VA still mapped after a remap. Transit is a hole claimed by
// a Phase 2 whose driver calls run without the pool mutex: nothing is mapped
// there yet as far as the map knows, and nobody else may take it.
// Lent is mapped primary memory whose handles a live view (core/alloc/views.hpp)
// maps at its own VA: neither free nor a live region of this map.
enum class Kind : uint8_t { Live = 1, Free = 2, Hole = 3, Zombie = 4, Small = 5, Paused = 6, Transit = 7, Lent = 8 };

// Free regions of one stream: (size, id, va). Among equal sizes the oldest
// region wins: its event is the likeliest to have completed, and it matches
// the walkthrough's choice of the older [-X] over a just-freed [-10].
using FreeIndex = std::set<std::tuple<uint64_t, uint64_t, uint64_t>>;
struct Backup;  // a backup of an allocation's bytes (core/pause/stores/store.hpp)

struct Region {
  uint64_t size = 0;
  Kind kind = Kind::Hole;
  uint32_t chunk = 0;
  Stream stream = nullptr;  // live/small: allocating stream; free: freeing stream
  uint64_t id = 0;          // free: creation order (split leftovers keep it); live: alloc order
  uint64_t seq = 0;         // free: the stream's free sequence at free time (0 = never used);
                            // live: that of the memory it was given on its own stream, whose
                            // work before that free may still be running (0 = none)
  EventRef event;           // free/zombie: materialised event (may be null for free: lazy)
  uint64_t requested = 0;   // live: bytes asked for
  void* owner = nullptr;    // small: the Slab serving this region
  uint32_t tag = 0;         // live/small/paused: index into the pool's tag table (0 = none)
  uint32_t flags = 0;       // live/small/paused: VPMM_ALLOC_* flags (the top 16 bits: the
                            // backup directory's id, core/pause/stores/store_table.hpp)
  bool was_small = false;   // paused: the region was a small-object slab
  Backup* backup = nullptr; // paused with VPMM_ALLOC_HOST_BACKUP: its backup
                            // (core/pause/stores/store.hpp); live/small: a retained backup or
                            // a disk backup's file, kept for the next pause
  struct Reservation* res = nullptr;  // live/paused: charged reservation (null: unreserved)
  uint64_t charge = 0;      // live/paused: bytes charged at malloc
  bool busy = false;        // zombie: a call working outside the mutex owns it (its
                            // harvest may still be undone, or it is being unmapped)
  // free: its entry in its stream's FreeIndex, set whenever RegionMap files
  // it (meaningless otherwise, copies included): taking a region out of the
  // index is then no walk of it.
  FreeIndex::const_iterator free_pos{};
};

// Per-allocation attributes as the core sees them: the tag interned to an
// index (0 = untagged, not pausable) and the VPMM_ALLOC_* flags.
struct Attrs {
  uint32_t tag = 0;
  uint32_t flags = 0;
};

struct Mapping {
  PhysHandle handle = 0;
  uint64_t size = 0;
};

struct Chunk {
  uint64_t va = 0;
  uint64_t size = 0;
};

using RegionIt = std::map<uint64_t, Region>::iterator;

// The stream key of memory no stream has used yet (initial pages): no event
// to wait for, so it is every stream's "own" memory: best fit on any stream
// considers it, and it merges with any stream's free neighbour.
extern char clean_stream_key;
inline Stream clean_stream() { return &clean_stream_key; }
using SizeIndex = std::set<std::pair<uint64_t, uint64_t>>;  // holes: (size, va)

// Per-stream state: its free regions by size and its lazily recorded event.
struct StreamState {
  FreeIndex free_by_size;
  uint64_t free_seq = 0;        // bumped on every free on this stream
  EventRef last_event;          // the newest event recorded on this stream by the pool
  uint64_t last_event_seq = 0;  // free_seq when last_event was recorded
  uint64_t clean_upto = 0;      // frees up to this seq need no event (device synchronised)
};

// `hole` counts transit regions too (reserved VA with nothing mapped yet).
// `moving` is mapped bytes whose handles a Phase 2 in flight took off their
// old regions and has not placed yet: counted in `mapped`, in no primary mapping.
struct Totals {
  uint64_t live = 0, small = 0, free = 0, hole = 0, zombie = 0, paused = 0, mapped = 0, reserved = 0;
  uint64_t lent = 0;
  uint64_t moving = 0;
};

class RegionMap {
 public:
  RegionMap() {
    spare_regions_.reserve(kSpareNodes);
    spare_free_.reserve(kSpareNodes);
  }
  // Reads. Regions are reached through iterators: their index fields (kind,
  // size, stream, id; what index() files them by) change only through
  // insert/erase/retag/resize/split/coalesce; other fields (event, res,
  // backup, busy...) may be written in place.
  // The region starting at va, else end(): a hash probe, not a walk of the
  // tree (StartIndex says why).
  RegionIt find(uint64_t va) { return starts_.find(va, regions_.end()); }
  RegionIt begin() { return regions_.begin(); }
  RegionIt end() { return regions_.end(); }
  const std::map<uint64_t, Region>& regions() const { return regions_; }
  const std::map<uint64_t, Mapping>& mappings() const { return mappings_; }              // live/small/free pages
  const std::map<uint64_t, Mapping>& zombie_mappings() const { return zombie_mappings_; }  // old VAs awaiting unmap
  const std::vector<Chunk>& chunks() const { return chunks_; }
  const std::unordered_map<Stream, StreamState>& streams() const { return streams_; }
  const SizeIndex& holes() const { return holes_by_size_; }
  const std::set<uint64_t>& zombies() const { return zombies_; }  // VAs of zombie regions
  const Totals& totals() const { return totals_; }
  // Where a handle is mapped on the primary side (UINT64_MAX: nowhere, e.g.
  // moving): views find their pages' homes through it.
  uint64_t primary_va_of(PhysHandle h) const {
    auto it = handle_va_.find(h);
    return it == handle_va_.end() ? UINT64_MAX : it->second;
  }

  // A stream's state, made on first use; null when it has none. The last
  // stream looked up is remembered: a malloc/free pair asks for the same one
  // four to six times, and the hash lookups were a sixth of the pair's cost.
  // (A state's address is stable until forget_stream: the map is node-based.)
  StreamState& stream(Stream s) {
    if (last_state_ && last_key_ == s) return *last_state_;
    StreamState& st = streams_[s];
    last_key_ = s;
    last_state_ = &st;
    if (s == clean_stream()) clean_state_ = &st;
    return st;
  }
  // The never-used memory's state, or null: every best fit asks, and most
  // pools have none (only initial pages and merged clean regions make one).
  const StreamState* clean_state() const { return clean_state_; }
  StreamState* find_stream(Stream s) {
    if (last_state_ && last_key_ == s) return last_state_;
    auto it = streams_.find(s);
    if (it == streams_.end()) return nullptr;
    last_key_ = s;
    last_state_ = &it->second;
    return last_state_;
  }
  void forget_stream(Stream s) {  // its regions were re-keyed first
    streams_.erase(s);
    last_state_ = nullptr;
    if (s == clean_stream()) clean_state_ = nullptr;
  }

  // A new VA chunk, whole a hole; returns the hole.
  RegionIt add_chunk(uint64_t va, uint64_t size);

  // Physical mappings, each with the totals it changes.
  void map_new(uint64_t va, const Mapping& m);       // new memory: mapped grows
  void unmap_released(uint64_t va);                  // memory given back: mapped shrinks
  void start_move(uint64_t va);                      // primary -> zombie side; the handle is moving
  void cancel_move(uint64_t va);                     // zombie -> primary side; it stays
  void place_moved(uint64_t va, const Mapping& m);   // a moving handle's new VA
  void drop_zombie_mapping(uint64_t va);             // the old VA was unmapped

  // Everything, for the pool's destructor (events die while the backend lives).
  void clear() {
    starts_.clear();
    small_starts_.clear();
    regions_.clear();
    spare_regions_.clear();
    streams_.clear();
    last_state_ = nullptr;
    clean_state_ = nullptr;
  }

  // Region insertion/removal keeps indexes and totals in step.
  RegionIt insert(uint64_t va, const Region& r);
  void erase(RegionIt it);
  // Replaces a region's fields in place (same start and size): no node is
  // allocated or freed, which keeps malloc/free off the heap.
  void retag(RegionIt it, const Region& r) {
    unindex(it);
    it->second = r;
    index(it);
  }
  // What retag(it, r) does for an r that keeps its size and chunk, sets
  // `kind` and what `fill` sets, every other field at its default. Built in
  // place: a Region made on the stack is zeroed whole first (GCC emits a
  // `rep stos` for its 120 bytes), which cost the 2 MiB alloc+free pair of
  // bench/host_hot_path.c ~1.5 ns of its ~48.
  template <class Fill>
  void remake(RegionIt it, Kind kind, Fill&& fill) {
    unindex(it);
    reset_keeping_place(it->second, kind);
    fill(it->second);
    index(it);
  }
  // remake(it, kind, fill), then coalesce: the result is filed in its index
  // once, merged, where remake + coalesce filed it, took it out again to
  // merge and filed the merged region (each a walk of a size index: a free's
  // path, where every walk costs cache misses inside a program's step).
  // Returns the merged region.
  template <class Fill>
  RegionIt remake_coalesced(RegionIt it, Kind kind, Fill&& fill) {
    unindex(it);
    reset_keeping_place(it->second, kind);
    fill(it->second);
    return merge_and_index(it);
  }
  // The first `bytes` of `it` (less than or all of its size) become a region
  // of `kind` with what `fill` sets, every other field at its default; the
  // rest stays a region of it as it was, right after. What split(it, bytes)
  // and remake of the head do, with the rest filed once and the head's old
  // entry taken out once (a best-fit malloc's carve).
  template <class Fill>
  RegionIt carve(RegionIt it, uint64_t bytes, Kind kind, Fill&& fill) {
    unindex(it);
    if (it->second.size > bytes) {
      Region rest = it->second;
      rest.size -= bytes;
      it->second.size = bytes;
      insert_before(std::next(it), it->first + bytes, rest);
    }
    reset_keeping_place(it->second, kind);
    fill(it->second);
    index(it);
    return it;
  }
  // Gives `it`'s VA back to its chunk: a hole of the same size and chunk
  // (nothing else kept), merged with neighbouring holes. Returns the merged
  // hole. Unmapping the VA is the caller's (it did, or nothing was mapped).
  RegionIt make_hole(RegionIt it) { return remake_coalesced(it, Kind::Hole, [](Region&) {}); }
  // Changes the size of a region in place (its start stays).
  void resize(RegionIt it, uint64_t new_size);
  // Splits `it` at offset `at` (0 < at < size); returns the tail. Both halves
  // keep kind, stream, event, id and seq.
  RegionIt split(RegionIt it, uint64_t at);
  // Merges a free region with same-stream free neighbours, or a hole with
  // neighbouring holes, within its chunk. Returns the merged region.
  RegionIt coalesce(RegionIt it);
  // The rules coalesce merges by: same kind and chunk; holes always; free
  // regions of one stream (memory no stream used joins any). absorb folds
  // `from`'s free point (the newest wins), id and stream into `into`.
  static bool coalescable(const Region& a, const Region& b);
  static void absorb(Region& into, const Region& from);

  RegionIt find_containing(uint64_t va);  // end() if none
  // The Small region (a slab) containing va, else end(): a probe or two of
  // a hash by the slab's first page, not a walk of the map. A free of a
  // small block names an address inside its slab, and find_containing's
  // walk missed the cache a level at a time (~12 misses a small free with
  // the caches evicted between calls). end() also where the hash cannot
  // say (a slab over more than kSmallProbes granules): the caller walks then.
  RegionIt find_small(uint64_t va) {
    if (!small_granule_) return end();
    uint64_t key = va & ~(small_granule_ - 1);
    for (uint32_t k = 0; k < kSmallProbes && key; ++k, key -= small_granule_) {
      RegionIt c = small_starts_.find(key, end());
      if (c == end()) continue;
      // Regions do not overlap: one that starts at or before va is the only
      // candidate, whether it holds va or not.
      if (c->first <= va) return va - c->first < c->second.size ? c : end();
    }
    return end();
  }
  // Small regions are hashed by their start rounded down to the largest
  // power of two at most `page` (every slab is at least a page, so two
  // never share a key). Called once, before the first region.
  void index_small_by_page(uint64_t page) {
    small_granule_ = 1;
    while (page / 2 >= small_granule_) small_granule_ *= 2;
  }
  uint32_t chunk_of(uint64_t va) const;   // index; chunks.size() if none

  // Handles fully inside [va, va+size).
  std::vector<std::pair<uint64_t, Mapping>> whole_mappings_in(uint64_t va, uint64_t size) const;
  static uint32_t count_mappings_in(const std::map<uint64_t, Mapping>& m, uint64_t va, uint64_t size);

  // Returns "" when every invariant holds, else the first violation. Live,
  // small and free regions are multiples of `quantum` (large_rounding).
  std::string check(uint64_t page_size, uint64_t quantum) const;

  // Bumped by every change to the region tiling: a caller that let go of the
  // pool mutex compares it to learn whether another thread changed the map.
  uint64_t changes() const { return changes_; }

 private:
  // Every field but size and chunk back to its default (remake's first step).
  static void reset_keeping_place(Region& g, Kind kind) {
    static_assert(sizeof(void*) != 8 || sizeof(Region) == 128, "a new Region field: reset it here too");
    g.kind = kind;
    g.stream = nullptr;
    g.id = 0;
    g.seq = 0;
    g.event.reset();
    g.requested = 0;
    g.owner = nullptr;
    g.tag = 0;
    g.flags = 0;
    g.was_small = false;
    g.backup = nullptr;
    g.res = nullptr;
    g.charge = 0;
    g.busy = false;
    // free_pos: only read while filed, and set when filed
  }
  using RegionNode = std::map<uint64_t, Region>::node_type;
  using FreeNode = FreeIndex::node_type;
  // Nodes of erased regions and free-index entries, kept for the next
  // insert: a churn step (free, coalesce, best fit, split) erases and inserts
  // a few of each, and their heap calls were ~8% of it. Reserved up front so
  // keeping one never allocates (erase cannot throw).
  static constexpr size_t kSpareNodes = 32;
  std::vector<RegionNode> spare_regions_;
  std::vector<FreeNode> spare_free_;
  std::map<uint64_t, Region> regions_;
  std::map<uint64_t, Mapping> mappings_;
  std::map<uint64_t, Mapping> zombie_mappings_;
  std::unordered_map<PhysHandle, uint64_t> handle_va_;  // primary mappings by handle
  std::vector<Chunk> chunks_;
  std::unordered_map<Stream, StreamState> streams_;
  Stream last_key_ = nullptr;
  StreamState* last_state_ = nullptr;  // streams_[last_key_], or null
  StreamState* clean_state_ = nullptr;  // streams_[clean_stream()], or null
  SizeIndex holes_by_size_;
  std::set<uint64_t> zombies_;
  Totals totals_;
  uint64_t changes_ = 0;
  void index(RegionIt it);
  void unindex(RegionIt it);
  // insert() of a region that goes just before `hint` (the first region after it).
  RegionIt insert_before(RegionIt hint, uint64_t va, const Region& r);
  // Whether `it` merges with the region before / after it.
  bool merges_with_prev(RegionIt it);
  bool merges_with_next(RegionIt it);
  // `it`, in no index, merged with the neighbours it merges with (each taken
  // out of its index first), then the result filed.
  RegionIt merge_and_index(RegionIt it);
  // erase() of a region already taken out of its index.
  void drop_node(RegionIt it);
  StartIndex<RegionIt> starts_;  // every region of regions_ by its start
  // Small regions by their start's granule (find_small), kept by
  // index/unindex; granule 0: not kept (never set, or two slabs shared a
  // granule, which a slab below a page would make: find_small then walks).
  static constexpr uint32_t kSmallProbes = 3;
  uint64_t small_granule_ = 0;
  StartIndex<RegionIt> small_starts_;
  void index_small(RegionIt it);
  void unindex_small(RegionIt it);
};

}  // namespace vpmm
