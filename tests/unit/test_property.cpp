// Randomized malloc/free sequences against a model of what must be live.
//
// Each run (fixed seed) drives a host-backend pool through thousands of
// mallocs and frees over several host streams, some of them held at random
// times (their events stay pending, so cross-stream reuse, GPU-side waits and
// zombies all happen) and released later. After EVERY step it checks:
//  - vpmm_pool_check() == VPMM_OK;
//  - the stats equal the model: requested_bytes, n_live, n_malloc, n_free;
//    live_bytes = page-rounded live allocations + small slabs;
//    mapped_bytes = live + free (zombies are second mappings of the same
//    physical pages, not more memory);
//  - vpmm_pool_dump tiles every VA chunk without gap or overlap, in ascending
//    VA order, and its per-kind sums equal the stats; every live page
//    allocation appears as a LIVE region with its requested size and stream,
//    every small allocation lies inside a SMALL region of its stream, and no
//    two allocations overlap;
//  - every live allocation still holds the unique pattern written through its
//    pointer at malloc time (sampled every 4 KiB each step, in full every 64
//    steps and before each free): defragmentation remaps pages and the data
//    must follow through the double mapping;
//  - memory freed on a held stream is handed to another stream only at a new
//    VA (a Phase 2 span or a view), never in place; a view's pages are its
//    homes (LENT regions), and it takes pending ones of another stream only
//    after a GPU-side wait (its stream's n_stream_waits moved). Two runs
//    turn views on from two pages so that most multi-page requests make or
//    reuse one.
// A second kind of run uses a small host capacity so that mallocs fail with
// OUT_OF_MEMORY; then the pool (stats and dump, event bookkeeping aside) must
// be identical before and after the failed call, and keep working.
//
// A third runs the model of fuzz/fuzz_ops.cpp (compiled in here) on random
// operation sequences: pause, resume, trim and limits while streams are held
// with work and frees queued on them, streams retired and destroyed in the
// middle, reservations released and re-made, stale stream and reservation
// handles, resumes under tight limits; kernels on host streams check every
// byte pattern. VPMM_OPS_SECONDS=T runs it for T seconds instead of a fixed
// number of inputs (e.g. in a release build).
#include <algorithm>
#include <cstddef>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <csignal>
#include <cstdlib>

#include "check.hpp"
#include "pool_util.hpp"
#include "vpmm_host_streams.h"

// The model-based operation sequences of the fuzz target, run here on
// random inputs (its own checks abort with a message on a violation).
#include "../../fuzz/fuzz_ops.cpp"

namespace {

// --- byte patterns ------------------------------------------------------------

inline uint64_t word_of(uint64_t seed, uint64_t i) {
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + (i + 1) * 0xBF58476D1CE4E5B9ull;
  return x ^ (x >> 29);
}
void fill(void* p, uint64_t n, uint64_t seed) {
  uint64_t* w = static_cast<uint64_t*>(p);
  for (uint64_t i = 0; i < n / 8; ++i) w[i] = word_of(seed, i);
  if (n % 8) {
    uint64_t last = word_of(seed, n / 8);
    std::memcpy(static_cast<char*>(p) + n / 8 * 8, &last, n % 8);
  }
}
bool word_ok(const void* p, uint64_t n, uint64_t seed, uint64_t i) {
  if (i < n / 8) return static_cast<const uint64_t*>(p)[i] == word_of(seed, i);
  uint64_t last = word_of(seed, n / 8);
  return std::memcmp(static_cast<const char*>(p) + n / 8 * 8, &last, n % 8) == 0;
}
bool verify_full(const void* p, uint64_t n, uint64_t seed) {
  for (uint64_t i = 0; i < (n + 7) / 8; ++i)
    if (!word_ok(p, n, seed, i)) return false;
  return true;
}
// One word per 4 KiB (the host page, the smallest unit a remap can move) plus
// the first and last: a page left behind by a remap cannot hide.
bool verify_sampled(const void* p, uint64_t n, uint64_t seed) {
  const uint64_t words = (n + 7) / 8;
  for (uint64_t i = 0; i < words; i += 512)
    if (!word_ok(p, n, seed, i)) return false;
  return word_ok(p, n, seed, words - 1);
}

// --- the model ----------------------------------------------------------------

struct Alloc {
  uint64_t size;
  uint64_t seed;
  vpmm_stream stream;
  size_t si;  // index of stream in Run::streams
  bool small;
};
using Ranges = std::vector<std::pair<uint64_t, uint64_t>>;  // [lo, hi)

struct RunSpec {
  uint64_t seed = 1;
  uint64_t page = 4096;
  uint64_t max_handle = 0;
  uint64_t initial_pages = 0;
  uint64_t small_size = 0;  // 0 = default (page / 2); 1 = off
  uint64_t rounding = 0;    // large_rounding: 0 = whole pages
  uint64_t view_min_size = 0;  // 0 = the default (views from 64 MiB: none here)
  uint64_t va_pages = 96;
  uint64_t capacity = 1ull << 30;
  int ops = 2000;
  int n_streams = 3;           // created streams, plus the default stream
  bool random_holds = true;    // hold/release created streams at random
  bool hold_first_always = false;  // OOM runs: stream 0 held for the whole run
  bool expect_oom = false;
};

struct Run {
  RunSpec spec;
  vpmm_pool* pool = nullptr;
  uint64_t small_limit = 0;  // effective small_size (0 = small allocator off)
  std::map<uint64_t, Alloc> live;  // by address
  std::vector<vpmm_stream> streams;  // [0] = default (NULL)
  std::vector<int> held;             // per stream: 0/1
  // Per stream: memory freed on it while it was held (and held ever since).
  // Its work may still use that memory, so no other stream may be handed any
  // byte of it until the stream is released.
  std::vector<Ranges> pending;
  uint64_t n_pending_checks = 0;  // mallocs checked against pending memory
  uint64_t n_pending_handovers = 0;  // of them, handed over in place after a GPU-side wait
  uint64_t n_malloc = 0, n_free = 0, next_seed = 1;
  uint64_t n_oom = 0, n_ok_after_oom = 0;
  vpmm_stats final_stats;  // just before destroy: what the run exercised
  std::string failure;  // first violation; the run stops there
  int step = 0;
  std::string last_op;
};

uint64_t round_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }
// What a page-level allocation of the spec takes: whole pages, or the
// large_rounding quantum (its pages then shared with its neighbours).
uint64_t page_extent(const RunSpec& sp, uint64_t size) { return round_up(size, sp.rounding ? sp.rounding : sp.page); }

bool fail_run(Run& r, const std::string& what) {
  if (r.failure.empty()) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "seed %" PRIu64 " page %" PRIu64 " handle %" PRIu64 " step %d (%s): ",
                  r.spec.seed, r.spec.page, r.spec.max_handle, r.step, r.last_op.c_str());
    r.failure = buf + what;
  }
  return false;
}

std::string u64(uint64_t v) { return std::to_string(v); }
std::string hex(uint64_t v) {
  char b[24];
  std::snprintf(b, sizeof b, "0x%" PRIx64, v);
  return b;
}

#define REQUIRE_EQ(a, b, what)                                                       \
  do {                                                                               \
    uint64_t a_ = (a), b_ = (b);                                                     \
    if (a_ != b_) return fail_run(r, std::string(what) + ": " + u64(a_) + " != " + u64(b_)); \
  } while (0)

// Every invariant of the file comment; false (and r.failure set) on the first
// violation.
bool verify_state(Run& r, bool full_patterns) {
  vpmm_pool* p = r.pool;
  if (vpmm_pool_check(p) != VPMM_OK)
    return fail_run(r, std::string("vpmm_pool_check: ") + vpmm_last_error());
  const vpmm_stats st = vt::stats(p);
  const std::vector<vpmm_region_info> regs = vt::regions(p);
  const uint64_t page = r.spec.page;
  REQUIRE_EQ(st.page_size, page, "page_size");

  // The dump: ascending, page aligned, each chunk one gap-free run from
  // offset 0; per-kind sums.
  uint64_t sum[8] = {0};
  uint64_t empty_small = 0;
  uint64_t total = 0, largest_free = 0;
  std::vector<int> chunk_seen;
  uint64_t chunk_base = 0;
  for (size_t i = 0; i < regs.size(); ++i) {
    const vpmm_region_info& g = regs[i];
    // Live, small and free regions may share pages (large_rounding); every
    // other kind, and the runs the sharing kinds form, are whole pages.
    const bool shares = g.kind == VPMM_REGION_LIVE || g.kind == VPMM_REGION_SMALL || g.kind == VPMM_REGION_FREE;
    const uint64_t unit = shares && r.spec.rounding ? r.spec.rounding : page;
    if (g.size == 0 || g.size % unit || g.va % unit)
      return fail_run(r, "region " + u64(i) + " not aligned to " + u64(unit));
    const bool shared_before = i > 0 && regs[i - 1].chunk == g.chunk && shares &&
                               (regs[i - 1].kind == VPMM_REGION_LIVE || regs[i - 1].kind == VPMM_REGION_SMALL ||
                                regs[i - 1].kind == VPMM_REGION_FREE);
    if (!shared_before && g.va % page)
      return fail_run(r, "mapped run at region " + u64(i) + " does not start on a page");
    if (g.kind < VPMM_REGION_LIVE || g.kind > VPMM_REGION_LENT)
      return fail_run(r, "region kind " + u64(g.kind));
    if (g.kind == VPMM_REGION_PAUSED) return fail_run(r, "paused region without pause");
    sum[g.kind] += g.size;
    // A slab with nothing in use or pending is cached memory: stats count it as free.
    if (g.kind == VPMM_REGION_SMALL && g.requested == 0 && g.event_pending == 0) empty_small += g.size;
    total += g.size;
    if (g.kind == VPMM_REGION_FREE) largest_free = std::max(largest_free, g.size);
    if (g.chunk >= chunk_seen.size()) chunk_seen.resize(g.chunk + 1, 0);
    const bool continues = i > 0 && regs[i - 1].chunk == g.chunk;
    if (continues) {
      if (regs[i - 1].va + regs[i - 1].size != g.va)
        return fail_run(r, "gap or overlap inside chunk " + u64(g.chunk) + " at region " + u64(i));
    } else {
      if (chunk_seen[g.chunk]) return fail_run(r, "chunk " + u64(g.chunk) + " is not one run");
      chunk_seen[g.chunk] = 1;
      if (g.chunk_offset != 0) return fail_run(r, "chunk " + u64(g.chunk) + " does not start at offset 0");
      chunk_base = g.va;
      if (i > 0 && regs[i - 1].va + regs[i - 1].size > g.va)
        return fail_run(r, "chunks overlap at region " + u64(i));
    }
    if (g.chunk_offset != g.va - chunk_base) return fail_run(r, "chunk_offset of region " + u64(i));
    if (i > 0 && regs[i - 1].va >= g.va) return fail_run(r, "dump not in ascending VA order");
  }
  for (size_t c = 0; c < chunk_seen.size(); ++c)
    if (!chunk_seen[c]) return fail_run(r, "chunk index " + u64(c) + " missing");
  REQUIRE_EQ(chunk_seen.size(), st.va_chunks, "va_chunks vs dump");
  REQUIRE_EQ(total, st.reserved_va_bytes, "reserved_va_bytes vs dump");
  REQUIRE_EQ(sum[VPMM_REGION_LIVE] + sum[VPMM_REGION_SMALL] - empty_small, st.live_bytes, "live_bytes vs dump");
  REQUIRE_EQ(sum[VPMM_REGION_SMALL], st.small_bytes, "small_bytes vs dump");
  REQUIRE_EQ(sum[VPMM_REGION_FREE] + empty_small, st.free_bytes, "free_bytes vs dump");
  REQUIRE_EQ(sum[VPMM_REGION_HOLE], st.hole_bytes, "hole_bytes vs dump");
  REQUIRE_EQ(sum[VPMM_REGION_ZOMBIE], st.zombie_bytes, "zombie_bytes vs dump");
  REQUIRE_EQ(largest_free, st.largest_free_bytes, "largest_free_bytes vs dump");
  REQUIRE_EQ(sum[VPMM_REGION_LENT], st.lent_bytes, "lent_bytes vs dump");
  REQUIRE_EQ(st.mapped_bytes, st.live_bytes + st.free_bytes, "mapped = live + free");
  if (st.mapped_bytes > st.peak_mapped_bytes) return fail_run(r, "mapped above its peak");
  if (st.live_bytes > st.peak_live_bytes) return fail_run(r, "live above its peak");

  // The model against the stats and the dump.
  uint64_t requested = 0, page_live = 0, small_floor = 0, small_ceiling = 0, n_page = 0;
  uint64_t prev_end = 0;
  for (const auto& kv : r.live) {
    const Alloc& a = kv.second;
    requested += a.size;
    const uint64_t extent = a.small ? a.size : page_extent(r.spec, a.size);
    if (kv.first < prev_end) return fail_run(r, "allocations overlap at " + hex(kv.first));
    prev_end = kv.first + extent;
    if (a.small) {
      small_floor += round_up(a.size, 256);
      small_ceiling += round_up(a.size, 256) * 5 / 4 + 256;  // size classes waste at most ~25%
    } else {
      page_live += extent;
      ++n_page;
    }
  }
  REQUIRE_EQ(st.requested_bytes, requested, "requested_bytes vs model");
  REQUIRE_EQ(st.n_live, r.live.size(), "n_live vs model");
  REQUIRE_EQ(st.n_malloc, r.n_malloc, "n_malloc vs model");
  REQUIRE_EQ(st.n_free, r.n_free, "n_free vs model");
  // A view's LIVE region is the handles it holds: the last may reach past
  // the allocation's pages (views.hpp).
  if (st.n_views == 0) REQUIRE_EQ(sum[VPMM_REGION_LIVE], page_live, "LIVE regions vs model");
  else if (sum[VPMM_REGION_LIVE] < page_live) return fail_run(r, "LIVE regions below the model");
  if (st.small_live_bytes < small_floor || st.small_live_bytes > small_ceiling ||
      st.small_live_bytes > st.small_bytes)
    return fail_run(r, "small_live_bytes " + u64(st.small_live_bytes) + " outside [" + u64(small_floor) +
                           ", " + u64(small_ceiling) + "] or above small_bytes");
  uint64_t n_live_regions = 0;
  for (const vpmm_region_info& g : regs) {
    if (g.kind != VPMM_REGION_LIVE) continue;
    ++n_live_regions;
    auto it = r.live.find(g.va);
    if (it == r.live.end() || it->second.small)
      return fail_run(r, "LIVE region at " + hex(g.va) + " is not a live page allocation");
    REQUIRE_EQ(g.requested, it->second.size, "LIVE region requested");
    if (st.n_views == 0 || g.size < page_extent(r.spec, it->second.size))
      REQUIRE_EQ(g.size, page_extent(r.spec, it->second.size), "LIVE region size");
    if (g.stream != it->second.stream) return fail_run(r, "LIVE region stream");
  }
  REQUIRE_EQ(n_live_regions, n_page, "LIVE regions vs page allocations");
  for (const auto& kv : r.live) {
    if (!kv.second.small) continue;
    auto it = std::upper_bound(regs.begin(), regs.end(), kv.first,
                               [](uint64_t va, const vpmm_region_info& g) { return va < g.va; });
    if (it == regs.begin()) return fail_run(r, "small allocation outside the pool");
    const vpmm_region_info& g = *std::prev(it);
    if (g.kind != VPMM_REGION_SMALL || kv.first + kv.second.size > g.va + g.size)
      return fail_run(r, "small allocation " + hex(kv.first) + " not inside a SMALL region");
    if (g.stream != kv.second.stream) return fail_run(r, "small allocation in another stream's slab");
  }

  // The bytes.
  for (const auto& kv : r.live) {
    const void* ptr = reinterpret_cast<const void*>(kv.first);
    bool ok = full_patterns ? verify_full(ptr, kv.second.size, kv.second.seed)
                            : verify_sampled(ptr, kv.second.size, kv.second.seed);
    if (!ok) return fail_run(r, "pattern of allocation " + hex(kv.first) + " (size " + u64(kv.second.size) +
                                    ") corrupted");
  }
  return true;
}

// --- OOM atomicity ----------------------------------------------------------------


struct Snap {
  vpmm_stats st;
  std::vector<vpmm_region_info> regs;
};
Snap take(vpmm_pool* p) {
  Snap s;
  s.st = vt::stats(p);
  s.st.n_events_recorded = 0;  // a failed malloc may record lazy events...
  s.st.n_stream_waits = 0;     // ...and queue GPU-side waits before it fails
  s.st.n_oom = 0;
  s.regs = vt::regions(p);
  for (vpmm_region_info& g : s.regs) g.event_pending = 0;
  return s;
}
std::string diff(const Snap& a, const Snap& b) {
  std::string d;
  const uint64_t* x = reinterpret_cast<const uint64_t*>(&a.st);
  const uint64_t* y = reinterpret_cast<const uint64_t*>(&b.st);
  for (size_t i = 0; i < sizeof a.st / 8; ++i)
    if (x[i] != y[i]) d += " " + vt::stat_name(i) + ": " + u64(x[i]) + " -> " + u64(y[i]) + ";";
  if (a.regs.size() != b.regs.size()) return d + " region count " + u64(a.regs.size()) + " -> " + u64(b.regs.size());
  for (size_t i = 0; i < a.regs.size(); ++i)
    if (std::memcmp(&a.regs[i], &b.regs[i], sizeof(vpmm_region_info)) != 0) {
      d += " region " + u64(i) + " (va " + hex(a.regs[i].va) + " kind " + u64(a.regs[i].kind) + " -> " +
           u64(b.regs[i].kind) + ", size " + u64(a.regs[i].size) + " -> " + u64(b.regs[i].size) + ")";
      break;
    }
  return d;
}

// A malloc that ran out of memory may have given empty cached slabs back
// before it failed (vpmm.h, vpmm_pool_malloc: "first releases what it
// can"): memory already counted as free, no allocation or mapping changed.
// The states compare equal once every empty slab is seen as free memory and
// adjacent free regions as one run (ids, streams and handle counts of free
// memory aside).
Snap as_free_runs(Snap s) {
  s.st.small_bytes = 0;
  s.st.largest_free_bytes = 0;
  std::vector<vpmm_region_info> out;
  for (vpmm_region_info g : s.regs) {
    if (g.kind == VPMM_REGION_SMALL && g.requested == 0 && g.event_pending == 0) g.kind = VPMM_REGION_FREE;
    if (g.kind == VPMM_REGION_FREE) {
      g.id = 0;
      g.stream = nullptr;
      g.handles = 0;
      if (!out.empty() && out.back().kind == VPMM_REGION_FREE && out.back().chunk == g.chunk &&
          out.back().va + out.back().size == g.va) {
        out.back().size += g.size;
        continue;
      }
    }
    out.push_back(g);
  }
  s.regs = out;
  return s;
}
std::string diff_after_oom(const Snap& a, const Snap& b) {
  std::string d = diff(a, b);
  return d.empty() ? d : diff(as_free_runs(a), as_free_runs(b));
}

// --- the driver -------------------------------------------------------------------

uint64_t draw_size(std::mt19937_64& rng, const Run& r) {
  const uint64_t page = r.spec.page;
  const int u = static_cast<int>(rng() % 100);
  if (u < 40 && r.small_limit) {
    if (rng() % 4 == 0) return 1 + rng() % 64;  // tiny
    return 1 + rng() % r.small_limit;
  }
  if (u < 55) return (1 + rng() % 6) * page;  // exact pages
  if (u < 60) return 1 + rng() % 16;          // tiny, also when small blocks are off
  return 1 + rng() % (6 * page);
}

bool run_one(Run& r) {
  const RunSpec& sp = r.spec;
  std::mt19937_64 rng(sp.seed * 7919 + 17);
  vt::HostPoolSpec hs;
  hs.page = sp.page;
  hs.va_pages = sp.va_pages;
  hs.initial_pages = sp.initial_pages;
  hs.capacity = sp.capacity;
  hs.max_handle = sp.max_handle;
  hs.small_size = sp.small_size;
  hs.large_rounding = sp.rounding;
  hs.view_min_size = sp.view_min_size;
  r.pool = vt::make_host_pool(hs);
  if (!r.pool) return fail_run(r, std::string("pool creation: ") + vpmm_last_error());
  vpmm_config cfg;
  cfg.struct_size = sizeof cfg;
  vpmm_pool_get_config(r.pool, &cfg);
  r.small_limit = cfg.small_size >= 256 ? cfg.small_size : 0;
  r.streams.push_back(nullptr);
  for (int i = 0; i < sp.n_streams; ++i) {
    vpmm_stream s = nullptr;
    vpmm_host_stream_create(&s);
    r.streams.push_back(s);
  }
  r.held.assign(r.streams.size(), 0);
  r.pending.assign(r.streams.size(), Ranges());
  if (sp.hold_first_always) {
    vpmm_host_stream_hold(r.streams[1]);
    r.held[1] = 1;
  }
  {
    vpmm_stats st = vt::stats(r.pool);
    if (st.mapped_bytes != sp.initial_pages * sp.page || st.free_bytes != st.mapped_bytes)
      fail_run(r, "initial pages not mapped as free memory");
  }
  bool ok = r.failure.empty() && verify_state(r, true);
  for (r.step = 1; ok && r.step <= sp.ops; ++r.step) {
    // Random holds: events recorded on a held stream stay pending.
    if (sp.random_holds && rng() % 100 < 4) {
      size_t i = 1 + rng() % (r.streams.size() - 1);
      if (r.held[i]) {
        vpmm_host_stream_release(r.streams[i]);
        r.held[i] = 0;
        r.pending[i].clear();
      } else {
        vpmm_host_stream_hold(r.streams[i]);
        r.held[i] = 1;
      }
    }
    const size_t n = r.live.size();
    const int p_malloc = n < 4 ? 90 : n > 60 ? 25 : sp.expect_oom ? 50 : 55;
    if (static_cast<int>(rng() % 100) < p_malloc) {
      const uint64_t size = draw_size(rng, r);
      const size_t si = rng() % r.streams.size();
      vpmm_stream s = r.streams[si];
      r.last_op = "malloc " + u64(size);
      void* out = reinterpret_cast<void*>(0x5e47);
      Snap before;
      if (sp.expect_oom) before = take(r.pool);
      const vpmm_stats pre = vt::stats(r.pool);
      vpmm_status st = vpmm_pool_malloc(r.pool, size, s, &out);
      if (st == VPMM_ERR_OUT_OF_MEMORY && sp.expect_oom) {
        ++r.n_oom;
        if (out != reinterpret_cast<void*>(0x5e47)) ok = fail_run(r, "failed malloc wrote *out");
        std::string d = diff_after_oom(before, take(r.pool));
        if (!d.empty()) ok = fail_run(r, "failed malloc changed the pool:" + d);
        if (std::strstr(vpmm_last_error(), "vpmm_pool_malloc") == nullptr)
          ok = fail_run(r, std::string("OOM message does not name the call: ") + vpmm_last_error());
      } else if (st != VPMM_OK) {
        ok = fail_run(r, std::string("malloc failed: ") + vpmm_status_string(st) + " " + vpmm_last_error());
      } else {
        if (r.n_oom) ++r.n_ok_after_oom;
        Alloc a;
        a.size = size;
        a.seed = r.next_seed++;
        a.stream = s;
        a.si = si;
        a.small = r.small_limit && size <= r.small_limit;
        const uint64_t lo = reinterpret_cast<uint64_t>(out);
        const uint64_t hi = lo + (a.small ? size : page_extent(sp, size));
        // A view's memory is its homes (LENT regions of its stream), not its
        // VA: the model follows the homes. One that si freed is handed back
        // to si; one another stream freed with work still queued may be
        // taken only after a GPU-side wait of si on that work (from then on
        // every use of those pages is ordered after it, the view's and any
        // after the view's free); a view that takes one without a wait is a
        // bug. The view's own VA is checked through its homes.
        const vpmm_stats post = vt::stats(r.pool);
        const bool view = post.n_view_malloc > pre.n_view_malloc;
        const bool waited = post.n_stream_waits > pre.n_stream_waits;
        if (view) {
          for (const vpmm_region_info& g : vt::regions(r.pool)) {
            if (g.kind != VPMM_REGION_LENT || g.stream != s) continue;
            for (size_t x = 0; x < r.pending.size(); ++x) {
              Ranges keep;
              for (const auto& rg : r.pending[x]) {
                if (!(g.va < rg.second && rg.first < g.va + g.size)) {
                  keep.push_back(rg);
                  continue;
                }
                if (x != si && !waited)
                  ok = fail_run(r, "a view took memory freed on held stream " + u64(x) + " without a wait");
                if (rg.first < g.va) keep.push_back({rg.first, g.va});
                if (rg.second > g.va + g.size) keep.push_back({g.va + g.size, rg.second});
              }
              r.pending[x].swap(keep);
            }
          }
        }
        for (size_t x = 0; x < r.pending.size(); ++x) {
          Ranges& pr = r.pending[x];
          if (pr.empty()) continue;
          if (x != si) {
            if (view) continue;  // checked through its homes, above
            ++r.n_pending_checks;
            // The budget step, refused a move, takes such a region in place
            // after a GPU-side wait of si on x's work (instead of growing):
            // from then on it is ordered as si's own. Without a wait it is a bug.
            // What si was handed is the region the request landed in: for a
            // small request the whole slab (its later blocks need no wait).
            uint64_t hlo = lo, hhi = hi;
            if (waited && a.small)
              for (const vpmm_region_info& g : vt::regions(r.pool))
                if (g.va <= lo && lo < g.va + g.size) {
                  hlo = g.va;
                  hhi = g.va + g.size;
                }
            bool handed = false;
            Ranges keep;
            for (const auto& rg : pr) {
              const bool over = hlo < rg.second && rg.first < hhi;
              if (over && !waited)
                ok = fail_run(r, "memory freed on held stream " + u64(x) + " handed to stream " + u64(si));
              handed |= over;
              // The whole freed range leaves x's pending list (a split's
              // remainder is si's now too).
              if (!over || !waited) keep.push_back(rg);
            }
            if (handed && waited) ++r.n_pending_handovers;
            pr.swap(keep);
            continue;
          }
          // Handed back to the stream that freed it: its own order covers it.
          Ranges keep;
          for (const auto& rg : pr) {
            if (rg.first < lo) keep.push_back({rg.first, std::min(rg.second, lo)});
            if (rg.second > hi) keep.push_back({std::max(rg.first, hi), rg.second});
          }
          pr.swap(keep);
        }
        fill(out, size, a.seed);
        if (!r.live.emplace(reinterpret_cast<uint64_t>(out), a).second)
          ok = fail_run(r, "malloc returned a live pointer again");
        ++r.n_malloc;
      }
    } else if (n > 0) {
      auto it = std::next(r.live.begin(), static_cast<long>(rng() % n));
      void* ptr = reinterpret_cast<void*>(it->first);
      r.last_op = "free " + u64(it->second.size);
      if (!verify_full(ptr, it->second.size, it->second.seed))
        ok = fail_run(r, "pattern corrupted before free");
      // Mostly the allocating stream; sometimes another (cross-stream free).
      const size_t si = rng() % 4 ? it->second.si : rng() % r.streams.size();
      vpmm_status st = vpmm_pool_free(r.pool, ptr, r.streams[si]);
      if (st != VPMM_OK) ok = fail_run(r, std::string("free failed: ") + vpmm_last_error());
      if (r.held[si]) {
        const uint64_t lo = it->first;
        r.pending[si].push_back({lo, lo + (it->second.small ? it->second.size
                                                            : page_extent(sp, it->second.size))});
      }
      r.live.erase(it);
      ++r.n_free;
    }
    if (ok) ok = verify_state(r, r.step % 64 == 0);
  }
  // Drain: release every hold, let the streams run, free everything.
  for (size_t i = 1; i < r.streams.size(); ++i)
    if (r.held[i]) vpmm_host_stream_release(r.streams[i]);
  for (vpmm_stream s : r.streams) vpmm_host_stream_synchronize(s);
  if (ok) ok = verify_state(r, true);
  r.last_op = "final frees";
  while (ok && !r.live.empty()) {
    auto it = r.live.begin();
    if (vpmm_pool_free(r.pool, reinterpret_cast<void*>(it->first), it->second.stream) != VPMM_OK)
      ok = fail_run(r, std::string("final free: ") + vpmm_last_error());
    r.live.erase(it);
    ++r.n_free;
  }
  if (ok) ok = verify_state(r, false);
  if (ok) {
    // Only small slabs with blocks still waiting on a held stream's event may
    // remain live; empty cached slabs count as free.
    vpmm_stats st = vt::stats(r.pool);
    if (st.requested_bytes != 0 || st.n_live != 0 || st.small_live_bytes != 0 ||
        st.live_bytes > st.small_bytes)
      ok = fail_run(r, "memory still live after freeing everything");
  }
  r.final_stats = vt::stats(r.pool);
  if (vpmm_pool_destroy(r.pool) != VPMM_OK) ok = fail_run(r, std::string("destroy: ") + vpmm_last_error());
  for (size_t i = 1; i < r.streams.size(); ++i) vpmm_host_stream_destroy(r.streams[i]);
  return ok && r.failure.empty();
}

// What a group of runs exercised, so a change that stops (say) defragmenting
// shows up here rather than passing quietly; asserted to be non-trivial.
struct Coverage {
  uint64_t defrag = 0, waits = 0, reaped = 0, cross = 0, chunks = 0, grow = 0, small = 0;
  uint64_t pending_checks = 0, views = 0, handovers = 0;
  void add(const vpmm_stats& s, uint64_t checks, uint64_t handed = 0) {
    pending_checks += checks;
    handovers += handed;
    defrag += s.n_defrag;
    waits += s.n_stream_waits;
    reaped += s.n_zombies_reaped;
    cross += s.n_cross_stream_reuse;
    chunks = std::max<uint64_t>(chunks, s.va_chunks);
    grow += s.n_grow;
    small += s.n_small_malloc;
    views += s.n_view_malloc;
  }
  void print() const {
    std::printf("  exercised: %" PRIu64 " defrags, %" PRIu64 " stream waits, %" PRIu64
                " zombies reaped, %" PRIu64 " cross-stream reuses, %" PRIu64 " grows, %" PRIu64
                " small mallocs, %" PRIu64 " view mallocs, up to %" PRIu64 " VA chunks; %" PRIu64
                " mallocs checked against pending memory (%" PRIu64 " handed over after a wait)\n",
                defrag, waits, reaped, cross, grow, small, views, chunks, pending_checks, handovers);
  }
};

void run_seeds(uint64_t page, uint64_t handle_pages, uint64_t first_seed, uint64_t rounding = 0,
               uint64_t view_pages = 0) {
  Coverage cov;
  for (uint64_t seed = first_seed; seed < first_seed + 5; ++seed) {
    Run r;
    r.spec.seed = seed;
    r.spec.page = page;
    r.spec.max_handle = handle_pages * page;
    r.spec.initial_pages = seed % 2 ? 24 : 0;
    r.spec.small_size = seed % 5 == 3 ? 1 : 0;  // some runs without small blocks
    r.spec.rounding = rounding;
    r.spec.view_min_size = view_pages * page;
    bool ok = run_one(r);
    CHECK(ok);
    if (!ok) std::printf("  %s\n", r.failure.c_str());
    cov.add(r.final_stats, r.n_pending_checks, r.n_pending_handovers);
  }
  cov.print();
  CHECK(cov.defrag > 0);
  CHECK(cov.waits > 0);
  CHECK(cov.reaped > 0);
  CHECK(cov.cross > 0);
  CHECK(cov.chunks > 1);
  CHECK(cov.pending_checks > 0);
  if (view_pages) CHECK(cov.views > 0);
}

}  // namespace

// live_bytes is "page-rounded bytes of live regions": once every allocation
// is freed nothing is live, whatever the pool keeps cached for reuse.
TEST("freeing every allocation brings live_bytes back to 0 (small ones included)") {
  vt::HostPoolSpec hs;
  hs.page = 64 << 10;
  vpmm_pool* p = vt::make_host_pool(hs);
  CHECK(p != nullptr);
  if (!p) return;
  void *a = nullptr, *b = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, 100, nullptr, &a));
  CHECK_OK(vpmm_pool_malloc(p, 3 * hs.page, nullptr, &b));
  CHECK_OK(vpmm_pool_free(p, a, nullptr));
  CHECK_OK(vpmm_pool_free(p, b, nullptr));
  vpmm_stats st = vt::stats(p);
  CHECK_EQ(st.n_live, uint64_t(0));
  CHECK_EQ(st.requested_bytes, uint64_t(0));
  CHECK_EQ(st.small_live_bytes, uint64_t(0));
  CHECK_EQ(st.live_bytes, uint64_t(0));
  CHECK_EQ(st.mapped_bytes, st.free_bytes + st.live_bytes);
  CHECK_OK(vpmm_pool_check(p));
  CHECK_OK(vpmm_pool_destroy(p));
}

// Empty small-object slabs are handed back when the pool would otherwise grow.
// The page allocation that triggers this must still succeed: here the freed
// slab ends right where the chosen hole starts, on the caller's stream.
TEST("a page malloc right after the only small block was freed succeeds") {
  vt::HostPoolSpec hs;
  hs.page = 64 << 10;
  vpmm_pool* p = vt::make_host_pool(hs);
  CHECK(p != nullptr);
  if (!p) return;
  void *s = nullptr, *q = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, 100, nullptr, &s));
  CHECK_OK(vpmm_pool_free(p, s, nullptr));
  CHECK_OK(vpmm_pool_malloc(p, hs.page, nullptr, &q));
  if (q) {
    fill(q, hs.page, 5);
    CHECK(verify_full(q, hs.page, 5));
    CHECK_OK(vpmm_pool_free(p, q, nullptr));
  }
  CHECK_OK(vpmm_pool_check(p));
  CHECK_OK(vpmm_pool_destroy(p));
}

// "A failed call leaves the pool as it was": a malloc that ends in
// OUT_OF_MEMORY may only have given an empty cached slab back to the pool's
// free memory on the way (where it was counted already).
TEST("a malloc failing with OUT_OF_MEMORY changes nothing but empty slabs given back") {
  vt::HostPoolSpec hs;
  hs.page = 64 << 10;
  hs.capacity = 4 * hs.page;
  vpmm_pool* p = vt::make_host_pool(hs);
  CHECK(p != nullptr);
  if (!p) return;
  void *s = nullptr, *q = reinterpret_cast<void*>(0x5e47);
  CHECK_OK(vpmm_pool_malloc(p, 100, nullptr, &s));
  CHECK_OK(vpmm_pool_free(p, s, nullptr));  // the slab stays, empty
  Snap before = take(p);
  CHECK_EQ(vpmm_pool_malloc(p, 8 * hs.page, nullptr, &q), VPMM_ERR_OUT_OF_MEMORY);
  CHECK_EQ(q, reinterpret_cast<void*>(0x5e47));
  CHECK_EQ(diff_after_oom(before, take(p)), std::string());
  const Snap after = take(p);
  CHECK_EQ(after.st.free_bytes, before.st.free_bytes);
  CHECK_EQ(after.st.mapped_bytes, before.st.mapped_bytes);
  CHECK_OK(vpmm_pool_check(p));
  CHECK_OK(vpmm_pool_destroy(p));
}

// vpmm.h: a SMALL region's `requested` is "bytes in use" of the slab.
TEST("dump: a small-object region reports the bytes in use") {
  vt::HostPoolSpec hs;
  hs.page = 64 << 10;
  vpmm_pool* p = vt::make_host_pool(hs);
  CHECK(p != nullptr);
  if (!p) return;
  void *a = nullptr, *b = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, 300, nullptr, &a));
  CHECK_OK(vpmm_pool_malloc(p, 300, nullptr, &b));
  bool found = false;
  for (const vpmm_region_info& g : vt::regions(p)) {
    if (g.kind != VPMM_REGION_SMALL) continue;
    found = true;
    // 600 bytes asked for, 2 x 512 in blocks: either reading of "in use".
    CHECK(g.requested >= 600 && g.requested <= 1024);
  }
  CHECK(found);
  CHECK_OK(vpmm_pool_free(p, a, nullptr));
  CHECK_OK(vpmm_pool_free(p, b, nullptr));
  CHECK_OK(vpmm_pool_destroy(p));
}

TEST("random ops, 4 KiB pages, one handle per growth") { run_seeds(4096, 0, 1); }
TEST("random ops, 4 KiB pages, one handle per page") { run_seeds(4096, 1, 6); }
TEST("random ops, 64 KiB pages, one handle per growth") { run_seeds(64 << 10, 0, 11); }
TEST("random ops, 64 KiB pages, one handle per page") { run_seeds(64 << 10, 1, 16); }
// large_rounding below the page: allocations share pages with their
// neighbours; the same model, data and stream-safety checks hold.
TEST("random ops, 4 KiB pages, 512-byte rounding, scaled handles") { run_seeds(4096, 0, 21, 512); }
TEST("random ops, 64 KiB pages, 512-byte rounding, one handle per page") { run_seeds(64 << 10, 1, 26, 512); }
TEST("random ops, 64 KiB pages, 256-byte rounding, 4-page handles") { run_seeds(64 << 10, 4, 31, 256); }
// Views from two pages: most multi-page requests that no free region fits
// map free pages where they lie, pending memory of held streams included.
TEST("random ops, 64 KiB pages, views from 2 pages, scaled handles") { run_seeds(64 << 10, 0, 36, 0, 2); }
TEST("random ops, 64 KiB pages, 512-byte rounding, views from 2 pages, one handle per page") {
  run_seeds(64 << 10, 1, 41, 512, 2);
}

// Small host capacity: mallocs fail with OUT_OF_MEMORY now and then. In half
// the runs one stream stays held for the whole run so harvests leave pending
// zombies and waits (and its frees stay pending, so the pool stays near its
// limit); nothing is released before the end, so no event completes behind
// the test's back and a failed call can be compared exactly with the state
// before it.
TEST("random ops under a small capacity: a failed malloc changes nothing") {
  for (uint64_t handle_pages : {0, 1}) {
    for (uint64_t seed : {101, 102}) {
      Run r;
      r.spec.hold_first_always = seed == 101;
      r.spec.seed = seed + 10 * handle_pages;
      r.spec.page = 64 << 10;
      r.spec.max_handle = handle_pages * r.spec.page;
      r.spec.capacity = 40 * r.spec.page;
      r.spec.va_pages = 64;
      r.spec.ops = 2000;
      r.spec.random_holds = false;
      r.spec.expect_oom = true;
      bool ok = run_one(r);
      CHECK(ok);
      if (!ok) std::printf("  %s\n", r.failure.c_str());
      Coverage cov;
      cov.add(r.final_stats, r.n_pending_checks, r.n_pending_handovers);
      cov.print();
      CHECK(r.n_oom >= 10);          // the run really hit the limit...
      CHECK(r.n_ok_after_oom >= 10);  // ...and kept working afterwards
      std::printf("  seed %" PRIu64 ": %" PRIu64 " mallocs failed with OOM, %" PRIu64 " succeeded after\n",
                  r.spec.seed, r.n_oom, r.n_ok_after_oom);
    }
  }
}

namespace {

// Which input is running, for the report of a crash or a failed check.
volatile uint64_t g_ops_seed = 0, g_ops_input = 0;
void ops_fatal(int sig) {
  std::fprintf(stderr, "\nmodel ops: signal %d on seed %llu input %llu; replay with VPMM_OPS_SEED=%llu "
               "VPMM_OPS_INPUT=%llu (FUZZ_VERBOSE=1 prints every operation)\n",
               sig, (unsigned long long)g_ops_seed, (unsigned long long)g_ops_input,
               (unsigned long long)g_ops_seed, (unsigned long long)g_ops_input);
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

std::vector<uint8_t> ops_input(uint64_t seed, uint64_t k) {
  std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull ^ (k + 1) * 0xBF58476D1CE4E5B9ull);
  std::vector<uint8_t> in(64 + rng() % 4032);
  for (uint8_t& b : in) b = static_cast<uint8_t>(rng());
  return in;
}

}  // namespace

TEST("model ops: pause/resume/trim with queued work, streams destroyed mid-run, stale handles, tight limits") {
  const char* e = std::getenv("VPMM_OPS_SEED");
  const uint64_t seed = e ? std::strtoull(e, nullptr, 10) : 20261125;
  const char* only = std::getenv("VPMM_OPS_INPUT");
  const char* secs = std::getenv("VPMM_OPS_SECONDS");
  for (int s : {SIGSEGV, SIGBUS, SIGABRT, SIGFPE}) std::signal(s, ops_fatal);
  g_ops_seed = seed;
  const uint64_t ops_before = g_ops.load();
  const auto t0 = std::chrono::steady_clock::now();
  uint64_t k = only ? std::strtoull(only, nullptr, 10) : 0, n = 0;
  for (;; ++k, ++n) {
    if (only && n == 1) break;
    if (!only && !secs && n == 150) break;
    if (secs && std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() >= std::atof(secs))
      break;
    g_ops_input = k;
    std::vector<uint8_t> in = ops_input(seed, k);
    LLVMFuzzerTestOneInput(in.data(), in.size());
  }
  for (int s : {SIGSEGV, SIGBUS, SIGABRT, SIGFPE}) std::signal(s, SIG_DFL);
  const uint64_t ops = g_ops.load() - ops_before;
  std::printf("  seed %" PRIu64 ": %" PRIu64 " inputs, %" PRIu64 " operations in %.1f s\n", seed, n, ops,
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  CHECK(ops >= n * 16);  // the inputs really ran sequences, not only pool creations
}

TEST_MAIN()
