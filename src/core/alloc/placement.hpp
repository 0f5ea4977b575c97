// Placement policies: the one place where a new way of choosing where a
// page-level allocation goes plugs in (docs/design.md, "Adding a placement
// policy").
//
// The default placement is phases 0-2 (Phase 0 reaps zombies, Phase 1 best
// fit, Phase 2 remaps within the remap slack, views for large requests): the
// allocator's own path, which runs when no policy is chosen. Views are the
// allocator's own placement for Phase 1's large misses, chosen by
// view_min_size (ViewAllocator, view_alloc.hpp). A policy is
// consulted before it: it sees every page-level request and free of the pool
// in order (size, stream, kind, tag and flags, sequence numbers and region
// ids, so lifetimes can be known), may serve a request from memory it
// arranged itself, may leave the request to the default phases, and may do
// work when memory is freed. It reaches the pool only through PlacementOps:
// the region map read-only, the default phases, Phase 0 and Phase 2 on
// demand. It never sees the pool, the mutex or the other collaborators.
//
// A policy is chosen per pool by PoolOptions::placement, a name in the
// registry below; "default" (or none) means no policy. Every call is made
// with the pool mutex held, from the thread of the malloc or free.
#pragma once

#include <cstdint>
#include <memory>

#include "config/pool_options.hpp"
#include "core/state/regions.hpp"

namespace vpmm {

// A page-level request, as a policy sees it.
struct PageRequest {
  uint64_t seq = 0;        // position among the pool's page-level requests and frees (from 1)
  uint64_t bytes = 0;      // what the region must hold (page multiple, or of large_rounding when untagged)
  uint64_t requested = 0;  // the caller's size (0: slab pages for the small allocator)
  Stream stream = nullptr;
  Kind kind = Kind::Live;  // Live, or Small (slab pages)
  Attrs attrs;             // tag (0 = untagged) and VPMM_ALLOC_* flags; a tagged request owns whole handles
};

// A page-level free, after the memory became free.
struct PageFree {
  uint64_t seq = 0;
  uint64_t va = 0;          // where the allocation was (a view's address for a view)
  uint64_t bytes = 0;
  uint64_t id = 0;          // the id placed() reported for it
  Stream stream = nullptr;  // the freeing stream
  Kind kind = Kind::Live;   // Live, or Small (a slab's pages given back)
  bool view = false;        // it lived in a view (its homes are free again, not va)
};

// What a policy may ask of the allocator. Implemented by the Allocator.
class PlacementOps {
 public:
  // Every region of the pool, read only: changes go through the calls below
  // and the allocation that place() returns.
  virtual const RegionMap& regions() const = 0;
  virtual const PoolOptions& options() const = 0;
  // Whether the free region starting at va may serve stream s without any
  // wait: freed on s, never used, or freed elsewhere by work that completed.
  virtual bool usable(uint64_t va, Stream s) = 0;
  // The default phases 0-2 for r: *out is a free region of at least r.bytes
  // that r.stream may use. Views are not tried (they are a phase of the
  // default path for requests no policy serves).
  virtual vpmm_status default_place(const PageRequest& r, RegionIt* out) = 0;
  // Phase 0 now: unmaps up to `budget` handles of completed zombies.
  virtual size_t reap(size_t budget) = 0;
  // Phase 2 now: a free region of at least `bytes` on stream s, assembled by
  // moving free pages and growing (ahead of the request that will need it).
  virtual vpmm_status assemble(uint64_t bytes, Stream s, RegionIt* out) = 0;

 protected:
  ~PlacementOps() = default;
};

class PlacementPolicy {
 public:
  virtual ~PlacementPolicy() = default;
  // place(): leave the request to the default phases.
  static constexpr vpmm_status kDecline = -103;

  // Every page-level request, in order, before the default phases: kDecline
  // leaves it to them; VPMM_OK with *out, a free region (Kind::Free) of at
  // least r.bytes that r.stream may use, serves it from that region's front
  // (for a tagged request the region must hold a run of whole handles of
  // exactly r.bytes); any other status fails the malloc.
  virtual vpmm_status place(const PageRequest& r, PlacementOps& ops, RegionIt* out) = 0;
  // Every page-level allocation made, by the policy or the default phases:
  // where it went and the id its free will carry.
  virtual void placed(const PageRequest& r, uint64_t va, uint64_t id) {
    (void)r, (void)va, (void)id;
  }
  // Every page-level free, after its memory became free. Work done here
  // (ops.reap, ops.assemble) runs with the mutex held, in the free's time.
  virtual void freed(const PageFree& f, PlacementOps& ops) { (void)f, (void)ops; }
};

// The registry: a policy is one file that defines a PlacementPolicy and one
// line in placement.cpp's table.
using PlacementFactory = std::unique_ptr<PlacementPolicy> (*)(const PoolOptions& opt);
struct PlacementEntry {
  const char* name;
  PlacementFactory make;  // null: no policy (the default phases alone)
  const char* help;
};
// The entry named `name` (null or "": "default"); null when there is none.
const PlacementEntry* find_placement(const char* name);
// Adds a policy that lives outside the library (a test's, a benchmark's),
// before any pool uses it. False if the name is taken.
bool register_placement(const PlacementEntry& e);

}  // namespace vpmm
