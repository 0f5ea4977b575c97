// Small allocations: requests of at most PoolOptions::small_size bytes are
// carved from "slabs", page-granular regions of kind Small obtained from the
// pool like any allocation, each serving one size class on one stream.
//
// Why: rounding a 4 KiB request to a 2 MiB page wastes 99.8% of it, and the
// seed's escape hatch (cudaMallocAsync) is both slower than the pool's hot
// path and invisible to its stats and to pause/resume. Slabs keep small
// requests inside the pool's accounting at a bounded waste (size classes
// spaced 1/4 of a power of two apart: at most ~20% rounding).
//
// Stream safety: a block freed on its slab's stream is reusable at once
// (stream order). A block freed on another stream waits in `pending_` behind
// an event recorded on the freeing stream, and returns to its slab only once
// that event completed. A slab whose blocks are all free goes back to the
// pool as an ordinary free region, except the last one of its (stream, class),
// which is kept to avoid churn in alloc/free loops.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <tuple>
#include <string>
#include <unordered_map>
#include <vector>

#include "config/defaults.hpp"
#include "core/state/regions.hpp"

namespace vpmm {

struct Reservation;

// The page level as the small allocator sees it: slab pages in and out, and
// events. The pool implements it; nothing else of the pool is reachable from
// here. All calls are made with the pool mutex held.
class SlabSource {
 public:
  virtual uint64_t page_size() const = 0;
  // A Small region of `bytes` (a page multiple) on stream s for attributes a.
  virtual vpmm_status take_slab_pages(uint64_t bytes, Stream s, const Attrs& a, RegionIt* out) = 0;
  // Gives a slab's region back: freed on stream s, or dropped when paused.
  virtual void return_slab_pages(uint64_t va, Stream s, bool paused) = 0;
  // Every block of the slab at va was freed while it stays cached: what
  // spoke for their bytes (a backup, a disk file most of all) goes now, not
  // when the slab is given back (a trim, the pool's end).
  virtual void slab_emptied(uint64_t va) = 0;
  virtual vpmm_status record_event(Stream s, EventRef* out) = 0;  // counted in the pool's stats
  virtual vpmm_status query(const EventRef& ev, bool* done) = 0;
  virtual void wait(const EventRef& ev) = 0;  // the CPU blocks until ev completed
  // The region starting at va (for check()); null when there is none.
  virtual const Region* region_at(uint64_t va) const = 0;
  virtual size_t count_small_regions() const = 0;  // Small, and Paused that were Small

 protected:
  ~SlabSource() = default;
};

class SmallAllocator {
 public:
  // Requests of at most small_size bytes are served (0 or < kQuantum: none).
  SmallAllocator(SlabSource& pages, uint64_t small_size);

  ~SmallAllocator();

  vpmm_status malloc(uint64_t size, Stream s, const Attrs& a, Reservation* res, void** out);
  // `slab_region` is the Small region containing va.
  vpmm_status free(RegionIt slab_region, uint64_t va, Stream s, uint64_t* requested,
                   Reservation** res);
  // Drops every block's link to `res` (the reservation is being released).
  // Returns the bytes those blocks were charged (blocks of paused slabs hold
  // no charge while paused and count nothing).
  uint64_t forget_reservation(Reservation* res);
  // Calls fn(reservation, bytes) for the charge of every live block of a slab.
  template <typename F>
  void for_each_charge(const void* slab, F&& fn) const;
  bool lookup(RegionIt slab_region, uint64_t va, uint64_t* base, uint64_t* size) const;
  uint64_t live_bytes() const { return live_bytes_; }
  // The stream `old` is retired; its slabs now belong to `key`. They serve
  // no further allocation (a new stream at old's address must not reuse
  // blocks freed in old's order without waiting) and go back to the page
  // level as soon as they are empty.
  void retire_stream(Stream old, Stream key);
  // A paused slab serves no allocation until resumed (its pages are gone).
  void on_pause(void* slab);
  void on_resume(void* slab);
  // A resume has taken the paused slab as a target: while it runs (its
  // steps may give cached memory back, which settles pending blocks) the
  // slab stays, even if its last blocks turn out free. end_resume lets go:
  // a slab still paused and empty then goes back to the pool.
  void begin_resume(void* slab);
  void end_resume(void* slab);
  // Gives every fully free slab back to the pool (trim).
  void release_empty_slabs();
  void settle() {
    if (!pending_.empty()) drain_pending();
  }
  // Bytes of slabs with no block in use or pending: cached free memory.
  uint64_t empty_bytes() const { return empty_bytes_; }
  // empty_bytes() plus the slabs settle() would empty now (every block left
  // is pending on a completed event), computed without settling: stats must
  // not change what the pool does next.
  uint64_t empty_bytes_if_settled();
  uint64_t requested_in(const void* slab) const;  // bytes asked for in a slab
  bool has_pending(const void* slab) const;       // blocks waiting on a foreign event
  // has_pending, but only for events not known to be complete: those that
  // empty_bytes_if_settled (stats) or the pool saw completed count as free.
  // Reads what is known without asking the backend, so a dump agrees with
  // the stats taken just before it even while events complete meanwhile.
  bool waits_on_event(const void* slab) const;
  // No block of the slab in use, and every block freed on a foreign stream
  // waits on an event that has completed: empty, as empty_bytes_if_settled
  // (and so the pool's stats) count it.
  bool empty_if_settled(const void* slab);
  // Appends the events of a slab's blocks freed on foreign streams that are
  // not known to be complete: work queued there before the free may still
  // use those blocks, so nothing may unmap the slab before they complete.
  void foreign_uses(const void* slab, std::vector<EventRef>* out) const;
  // Blocks until the events of blocks freed on foreign streams complete
  // (pool destruction: queued work may still write those blocks).
  void wait_pending();
  std::string check() const;

 private:
  struct Slab;
  struct Pending {
    Slab* slab;
    uint32_t block;
    EventRef event;
  };
  uint32_t class_of(uint64_t size) const;
  vpmm_status new_slab(uint32_t cls, Stream s, const Attrs& a, Slab** out);
  void on_empty(Slab* slab);
  static bool is_empty(const Slab* s);
  static bool has_free_block(const Slab* s);
  static uint32_t slab_blocks(const Slab* s);
  static uint64_t slab_requested(const Slab* s, uint32_t b);
  static Reservation* slab_res(const Slab* s, uint32_t b);
  void drain_pending();
  void make_available(Slab* slab);
  using Lists = std::vector<std::vector<Slab*>>;  // [class] -> slabs with free blocks
  Lists& lists_for(Stream s, const Attrs& a);
  void retire_slab(Slab* slab);

  SlabSource& pages_;
  std::vector<uint64_t> class_size_;
  // Untagged slabs by stream (the hot path); tagged ones by (stream, tag,
  // flags) so a pause of one tag never touches blocks of another.
  std::unordered_map<Stream, Lists> avail_;
  Stream last_avail_key_ = nullptr;
  Lists* last_avail_ = nullptr;  // avail_[last_avail_key_], sized, or null
  std::map<std::tuple<Stream, uint32_t, uint32_t>, Lists> tagged_avail_;
  using SlabMap = std::unordered_map<uint64_t, std::unique_ptr<Slab>>;
  SlabMap slabs_;  // by slab VA
  // Retired slabs, map node and vectors included, for the next new_slab: under
  // mixed sizes most classes hold a block or two, so slabs come and go on most
  // calls, and their heap traffic was a tenth of a churn step.
  static constexpr size_t kSpareSlabs = 8;
  std::vector<SlabMap::node_type> spare_slabs_;
  std::vector<Pending> pending_;
  uint64_t live_bytes_ = 0;
  uint64_t empty_bytes_ = 0;
  std::unordered_map<Stream, Slab*> cached_empty_;  // at most one empty slab kept per stream
};

template <typename F>
void SmallAllocator::for_each_charge(const void* p, F&& fn) const {
  const Slab* slab = static_cast<const Slab*>(p);
  for (uint32_t b = 0; b < slab_blocks(slab); ++b) {
    uint64_t req = slab_requested(slab, b);
    if (req) fn(slab_res(slab, b), small_charge(req));
  }
}

}  // namespace vpmm
