// Fault injection: every backend call that a pool operation makes is failed
// once, and the pool must survive it.
//
// Each scenario is a row of the table at the bottom: pool options, a setup
// (built with faults off) and one operation. The operation is first run
// unfaulted to count its backend calls (FaultControl numbers them); then,
// for every N in 1..count and for both injected statuses (OUT_OF_MEMORY and
// BACKEND), a fresh pool is built, call N of the operation fails, and:
//
//  - either the operation returned an error: the status is the injected one
//    (a failed VA reservation is reported as OUT_OF_MEMORY, see
//    Pool::reserve_chunk), vpmm_last_error names the injected fault, and the
//    region dump and the stats are those from before the call. Tolerated
//    differences, none of which changes what a caller can observe: event
//    counters (n_events_recorded, n_stream_waits: a GPU-side wait cannot be
//    taken back and is harmless), zombies reaped by Phase 0 before the
//    failing call (zombie -> hole, n_zombies_reaped), event_pending flags
//    (events are recorded lazily), n_oom, the pinned backup cache, and
//    empty small-object slabs given back by the retry after OUT_OF_MEMORY
//    (small -> free: cached memory, no allocation changes);
//  - or it succeeded, which is allowed only where the failed call was not
//    essential (an event query or record the pool can do without, a zombie
//    unmap retried later: then the zombie remains, an event destroy, a
//    release/unmap during cleanup) or where the pool retried after an
//    OUT_OF_MEMORY (its documented reaction);
//  - in both cases check() holds and every live allocation (and, after a
//    final resume, every paused one: its host backup) holds its bytes;
//  - once faults stop the pool keeps working: a failed operation succeeds
//    when repeated, malloc/free succeed, everything is freed;
//  - after the pool is destroyed the host backend's live counters (handles,
//    mappings, reservations, events, pinned buffers) are all zero.
//
// The scenarios use the core API (Pool with a FaultBackend around a shared
// host backend); the C API adds no backend calls of its own.
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "backend/backend.hpp"
#include "support/fault_backend.hpp"
#include "support/fault_host_services.hpp"
#include "backend/host/host_streams.hpp"
#include "check.hpp"
#include "common/status.hpp"
#include "core/pause/stores/store_table.hpp"
#include "core/pool.hpp"
#include "pool_util.hpp"
#include "thread_state.hpp"

using vpmm::Backend;
using vpmm::FaultBackend;
using vpmm::FaultControl;
using vpmm::FaultPlan;
using vpmm::Pool;
using vpmm::PoolOptions;
using vpmm::Stream;

namespace {

constexpr uint64_t kPage = 64 << 10;

vpmm_status pool_malloc(Pool& p, uint64_t size, Stream s, const char* tag, uint32_t flags,
                        void** out) {
  return p.malloc("vpmm_pool_malloc", size, s, tag, flags, nullptr, out);
}

// n_oom exists once limits are in; zero it where it does.
template <class S>
auto zero_oom(S& s, int) -> decltype(s.n_oom, void()) {
  s.n_oom = 0;
}
template <class S>
void zero_oom(S&, long) {}

// ---------------------------------------------------------------------------
// The world a scenario runs in
// ---------------------------------------------------------------------------

struct Alloc {
  void* p = nullptr;
  uint64_t size = 0;
  uint64_t seed = 0;
  Stream stream = nullptr;
  bool pausable_without_backup = false;  // tagged, no VPMM_ALLOC_HOST_BACKUP
  bool discarded = false;  // was paused without a backup: its bytes are gone by design
};

struct Ctx {
  std::shared_ptr<Backend> host;
  // Files, pageable memory and host copies: numbered and failed in the same
  // control as the backend's calls.
  std::shared_ptr<vpmm::HostServices> services = vpmm::make_shared_host_services();
  std::shared_ptr<FaultControl> ctl = std::make_shared<FaultControl>();
  std::unique_ptr<Pool> pool;
  PoolOptions opt;
  std::vector<Alloc> live;
  std::vector<Stream> streams;  // host streams made for the scenario
  std::vector<Stream> held;     // holds to undo before the pool is destroyed
  uint64_t next_seed = 1;
  bool pool_destroyed = false;  // the operation was the destroy

  std::unique_ptr<Backend> backend() { return std::unique_ptr<Backend>(new FaultBackend(host, ctl)); }
  // Flags of a disk-store allocation in the scenarios' backup directory.
  uint32_t disk(uint32_t flags) {
    uint32_t id = 0;
    CHECK_OK(pool->backup_dir_id("test", backup_dir(), &id));
    return flags | VPMM_ALLOC_HOST_BACKUP | VPMM_ALLOC_BACKUP_DISK | (id << vpmm::kBackupDirShift);
  }
  static const char* backup_dir() {
    static const std::string dir = [] {
      char t[] = "/tmp/vpmm-faults-XXXXXX";
      return std::string(mkdtemp(t) ? t : "/tmp");
    }();
    return dir.c_str();
  }
  std::unique_ptr<vpmm::HostServices> host_services() {
    return std::unique_ptr<vpmm::HostServices>(new vpmm::FaultHostServices(services, ctl));
  }
  vpmm_status create_pool() { return Pool::create(backend(), host_services(), opt, &pool); }

  // malloc + fill with a pattern + remember. Sizes are multiples of 8.
  vpmm_status alloc(uint64_t size, Stream s = nullptr, const char* tag = nullptr, uint32_t flags = 0) {
    void* p = nullptr;
    vpmm_status st = pool_malloc(*pool, size, s, tag, flags, &p);
    if (st != VPMM_OK) return st;
    Alloc a;
    a.p = p;
    a.size = size;
    a.seed = next_seed++;
    a.stream = s;
    a.pausable_without_backup = tag && *tag && !(flags & VPMM_ALLOC_HOST_BACKUP);
    vt::fill(p, size, a.seed);
    live.push_back(a);
    return VPMM_OK;
  }
  // Frees live[i] on stream s; forgets it on success.
  vpmm_status release(size_t i, Stream s) {
    vpmm_status st = pool->free(live[i].p, s);
    if (st == VPMM_OK) live.erase(live.begin() + static_cast<long>(i));
    return st;
  }
  Stream stream(size_t i) {
    while (streams.size() <= i) {
      Stream s = nullptr;
      CHECK_OK(vpmm::host::stream_create(&s));
      streams.push_back(s);
    }
    return streams[i];
  }
  void hold(Stream s) {
    CHECK_OK(vpmm::host::stream_hold(s));
    held.push_back(s);
  }
  void release_holds() {
    for (Stream s : held) CHECK_OK(vpmm::host::stream_release(s));
    held.clear();
    for (Stream s : streams) CHECK_OK(vpmm::host::stream_synchronize(s));
  }
  // Runs f, a call that waits for work queued on held streams, while a
  // helper thread releases the holds once this thread blocks in it (as a
  // GPU finishes its work while the caller waits), or once f returned
  // without blocking (a fault failed it first, or it does not wait: the
  // case's checks judge that). Observed, not timed: a delay could release
  // before the call waits, and the waiting path would go untested.
  vpmm_status released_later(const std::function<vpmm_status()>& f) {
    if (held.empty()) return f();
    std::vector<Stream> h;
    h.swap(held);
    std::atomic<pid_t> caller{vt::thread_id()};
    std::atomic<bool> returned{false};
    std::thread t([h, &caller, &returned] {
      vt::wait_until_blocked_or(caller, returned);
      for (Stream s : h) vpmm::host::stream_release(s);
    });
    vpmm_status st = f();
    returned = true;
    t.join();
    for (Stream s : h) vpmm::host::stream_synchronize(s);  // their work has run when this returns
    return st;
  }
};

// A host "kernel" that reads an allocation's pattern, queued on a stream:
// work that still uses the memory. Reading unmapped memory faults; a wrong
// byte is counted.
std::atomic<int> g_kernel_errors{0};
std::atomic<int> g_kernels_run{0};
struct ReadJob {
  const void* p;
  uint64_t size, seed;
  bool rewrite;  // write a new pattern instead of reading
};
void job_kernel(void* u) {
  ReadJob* j = static_cast<ReadJob*>(u);
  if (j->rewrite) vt::fill(const_cast<void*>(j->p), j->size, j->seed);
  else if (!vt::verify(j->p, j->size, j->seed)) ++g_kernel_errors;
  ++g_kernels_run;
  delete j;
}
void queue_read(Stream s, const Alloc& a) {
  CHECK_OK(vpmm::host::stream_launch(s, job_kernel, new ReadJob{a.p, a.size, a.seed, false}));
}

// Is the allocation's memory paused (not mapped)? Then its bytes cannot be
// read until resume.
bool is_paused(const std::vector<vpmm_region_info>& regions, const Alloc& a) {
  uint64_t va = reinterpret_cast<uint64_t>(a.p);
  for (const vpmm_region_info& r : regions)
    if (va >= r.va && va < r.va + r.size) return r.kind == VPMM_REGION_PAUSED;
  return false;
}

// Every readable live allocation holds its pattern. Returns the first bad one.
// An allocation paused without a backup has lost its bytes by design: it is
// not checked again.
std::string data_errors(Ctx& c, const std::vector<vpmm_region_info>& regions) {
  for (Alloc& a : c.live) {
    if (is_paused(regions, a)) {
      if (a.pausable_without_backup) a.discarded = true;
      continue;
    }
    if (a.discarded) continue;
    if (!vt::verify(a.p, a.size, a.seed)) {
      char b[96];
      std::snprintf(b, sizeof b, "allocation %p (%" PRIu64 " bytes) lost its bytes", a.p, a.size);
      return b;
    }
  }
  return "";
}

// ---------------------------------------------------------------------------
// State capture and comparison
// ---------------------------------------------------------------------------

struct State {
  std::vector<vpmm_region_info> regions;
  vpmm_stats stats;
};

State capture(Ctx& c) {
  c.ctl->set_counting(false);  // snapshot() queries events: not part of the operation
  State s;
  s.regions = c.pool->snapshot();
  std::memset(&s.stats, 0, sizeof s.stats);
  c.pool->stats(&s.stats);
  c.ctl->set_counting(true);
  return s;
}

bool mapped_kind(int32_t k) { return k != VPMM_REGION_HOLE && k != VPMM_REGION_ZOMBIE; }

std::string region_text(const vpmm_region_info& r) {
  char b[160];
  std::snprintf(b, sizeof b, "{va +0x%" PRIx64 " chunk %u size %" PRIu64 " kind %d handles %u id %" PRIu64
                " requested %" PRIu64 "}",
                r.chunk_offset, r.chunk, r.size, r.kind, r.handles, r.id, r.requested);
  return b;
}

bool same_region(const vpmm_region_info& x, const vpmm_region_info& y) {
  return x.va == y.va && x.size == y.size && x.kind == y.kind && x.chunk == y.chunk &&
         x.chunk_offset == y.chunk_offset && x.handles == y.handles && x.stream == y.stream &&
         x.id == y.id && x.requested == y.requested;
}

// Pages [va, va+size) of every region whose kind is in `kinds`.
std::map<uint64_t, uint64_t> pages_of(const std::vector<vpmm_region_info>& rs,
                                      std::initializer_list<int32_t> kinds) {
  std::map<uint64_t, uint64_t> out;
  for (const vpmm_region_info& r : rs)
    for (int32_t k : kinds)
      if (r.kind == k) out[r.va] = r.size;
  return out;
}

bool covered_by(uint64_t va, uint64_t size, const std::map<uint64_t, uint64_t>& m) {
  uint64_t cur = va, end = va + size;
  while (cur < end) {
    auto it = m.upper_bound(cur);
    if (it == m.begin()) return false;
    --it;
    if (it->first + it->second <= cur) return false;
    cur = it->first + it->second;
  }
  return true;
}

// What a failed operation may have done anyway, by contract.
enum class Partial {
  none,    // nothing (housekeeping aside)
  pause,   // some targets paused (live/small -> paused): the unmap of another failed
  resume,  // some targets resumed (paused -> live/small): vpmm.h, vpmm_pool_resume
  trim,    // some free memory released (free -> hole)
  resume_trim,  // a resume that gave cached free memory back to fit under the limit
};

// "" when `after` equals `before` up to the tolerated differences listed at
// the top of this file and the partial progress `p` allows; else the first
// difference.
std::string diff_state(const State& before, const State& after, Partial p) {
  // Region kinds a region may turn into (and come from) under `p`.
  auto may_become = [p](int32_t from, int32_t to) {
    // Any operation that ran out of memory may give back empty small slabs
    // (Pool::malloc_locked, release_empty_slabs) before it fails.
    if (from == VPMM_REGION_SMALL && to == VPMM_REGION_FREE) return true;
    switch (p) {
      case Partial::pause:
        return (from == VPMM_REGION_LIVE || from == VPMM_REGION_SMALL) && to == VPMM_REGION_PAUSED;
      case Partial::resume:
        return from == VPMM_REGION_PAUSED && (to == VPMM_REGION_LIVE || to == VPMM_REGION_SMALL);
      case Partial::trim:
        return from == VPMM_REGION_FREE && (to == VPMM_REGION_HOLE || to == VPMM_REGION_FREE);
      case Partial::resume_trim:
        return (from == VPMM_REGION_PAUSED && (to == VPMM_REGION_LIVE || to == VPMM_REGION_SMALL)) ||
               (from == VPMM_REGION_FREE && (to == VPMM_REGION_HOLE || to == VPMM_REGION_FREE));
      case Partial::none:
        break;
    }
    return false;
  };
  bool moved = false;  // partial progress happened
  // 1. Mapped regions (live, small, free, paused) are identical, or made a
  //    transition the contract allows.
  for (const vpmm_region_info& x : before.regions) {
    if (!mapped_kind(x.kind)) continue;
    bool same = false;
    for (const vpmm_region_info& y : after.regions)
      if (y.va == x.va && same_region(x, y)) same = true;
    if (same) continue;
    // Every page of x now lies in regions x may have become (a free region
    // may also have merged with a neighbour that became free).
    std::vector<int32_t> to_kinds;
    for (int32_t to : {VPMM_REGION_LIVE, VPMM_REGION_SMALL, VPMM_REGION_PAUSED, VPMM_REGION_HOLE,
                       VPMM_REGION_FREE})
      if (may_become(x.kind, to) || (x.kind == VPMM_REGION_FREE && to == VPMM_REGION_FREE))
        to_kinds.push_back(to);
    std::map<uint64_t, uint64_t> dest;
    for (int32_t to : to_kinds) {
      auto m = pages_of(after.regions, {to});
      dest.insert(m.begin(), m.end());
    }
    bool ok = !to_kinds.empty() && covered_by(x.va, x.size, dest);
    if (x.kind == VPMM_REGION_SMALL && x.requested != 0 && p != Partial::pause)
      ok = false;  // a slab still in use never becomes free
    if (!ok) return "region " + region_text(x) + " changed";
    moved = true;
  }
  for (const vpmm_region_info& y : after.regions) {
    if (!mapped_kind(y.kind)) continue;
    bool same = false;
    for (const vpmm_region_info& x : before.regions)
      if (x.va == y.va && same_region(x, y)) same = true;
    if (same) continue;
    std::map<uint64_t, uint64_t> src;
    for (int32_t from : {VPMM_REGION_LIVE, VPMM_REGION_SMALL, VPMM_REGION_PAUSED, VPMM_REGION_FREE})
      if (may_become(from, y.kind) || (from == VPMM_REGION_FREE && y.kind == VPMM_REGION_FREE)) {
        auto m = pages_of(before.regions, {from});
        src.insert(m.begin(), m.end());
      }
    if (!covered_by(y.va, y.size, src)) return "region " + region_text(y) + " appeared";
    moved = true;
  }
  // 2. Zombies may only have become holes; holes stay holes (trim: free
  //    pages may have become holes too).
  auto zb = pages_of(before.regions, {VPMM_REGION_ZOMBIE});
  auto holes_from = p == Partial::trim || p == Partial::resume_trim
                        ? pages_of(before.regions, {VPMM_REGION_ZOMBIE, VPMM_REGION_HOLE, VPMM_REGION_FREE})
                        : pages_of(before.regions, {VPMM_REGION_ZOMBIE, VPMM_REGION_HOLE});
  for (const vpmm_region_info& r : after.regions) {
    if (r.kind == VPMM_REGION_ZOMBIE && !covered_by(r.va, r.size, zb))
      return "zombie " + region_text(r) + " is new";
    if (r.kind == VPMM_REGION_HOLE && !covered_by(r.va, r.size, holes_from))
      return "hole " + region_text(r) + " is new";
  }
  // 3. Stats, less the tolerated counters. After partial progress only the
  //    counts of allocations are compared.
  vpmm_stats x = before.stats, y = after.stats;
  if (p == Partial::trim)  // trim gives idle views back first (their VA only)
    for (vpmm_stats* s : {&x, &y}) {
      s->reserved_va_bytes -= s->view_va_bytes;
      s->n_views = s->view_va_bytes = 0;
    }
  if (moved) {
    if (x.n_malloc != y.n_malloc || x.n_free != y.n_free || x.n_live != y.n_live ||
        x.requested_bytes != y.requested_bytes || x.reserved_va_bytes != y.reserved_va_bytes)
      return "allocation counts changed";
    if (p == Partial::none &&
        (x.mapped_bytes != y.mapped_bytes || x.live_bytes + x.free_bytes != y.live_bytes + y.free_bytes))
      return "mapped bytes changed";
    return "";
  }
  for (vpmm_stats* s : {&x, &y}) {
    s->n_events_recorded = 0;
    s->n_stream_waits = 0;
    s->n_zombies_reaped = 0;
    s->backup_cache_bytes = 0;
    s->backup_pinned_bytes = 0;  // the cache again, with the buffers in use
    if (p == Partial::trim) s->n_trim = 0;  // counts calls, failed ones too
    if (p == Partial::resume_trim) s->bytes_trimmed = 0;
    zero_oom(*s, 0);
  }
  if (x.zombie_bytes + x.hole_bytes != y.zombie_bytes + y.hole_bytes)
    return "zombie + hole bytes changed";
  x.zombie_bytes = y.zombie_bytes = x.hole_bytes = y.hole_bytes = 0;
  static const struct {
    const char* name;
    size_t off;
  } named[] = {
#define F(f) {#f, offsetof(vpmm_stats, f)}
      F(mapped_bytes), F(reserved_va_bytes), F(live_bytes), F(requested_bytes), F(free_bytes),
      F(peak_mapped_bytes), F(peak_live_bytes), F(n_malloc), F(n_free), F(n_defrag), F(n_grow),
      F(pages_created), F(bytes_remapped), F(handles), F(handles_created), F(va_chunks),
      F(largest_free_bytes), F(small_bytes), F(small_live_bytes), F(n_small_malloc),
      F(n_cross_stream_reuse), F(n_live), F(paused_bytes), F(backup_bytes), F(n_pause),
      F(n_resume), F(n_trim), F(bytes_trimmed),
#undef F
  };
  const auto* xb = reinterpret_cast<const unsigned char*>(&x);
  const auto* yb = reinterpret_cast<const unsigned char*>(&y);
  for (size_t off = 8; off + 8 <= sizeof x; off += 8) {
    uint64_t u, v;
    std::memcpy(&u, xb + off, 8);
    std::memcpy(&v, yb + off, 8);
    if (u == v) continue;
    const char* name = nullptr;
    for (const auto& n : named)
      if (n.off == off) name = n.name;
    std::string field = name ? name : "field@" + std::to_string(off);
    char buf[160];
    std::snprintf(buf, sizeof buf, "stats.%s changed: %" PRIu64 " -> %" PRIu64, field.c_str(), u, v);
    return buf;
  }
  return "";
}

// ---------------------------------------------------------------------------
// Scenarios
// ---------------------------------------------------------------------------

struct Scenario {
  const char* name = "";
  PoolOptions opt;
  uint64_t capacity = 64ull << 20;
  std::function<void(Ctx&)> setup;      // faults off; the pool exists unless creates_pool
  std::function<vpmm_status(Ctx&)> op;  // the faulted operation
  // Extra post-condition when the operation returned VPMM_OK.
  std::function<std::string(Ctx&)> on_success;
  Partial partial = Partial::none;
  bool creates_pool = false;   // the operation is Pool::create
  bool destroys_pool = false;  // the operation is the destroy (cannot report failure)
};

PoolOptions options(uint64_t va_pages = 64, uint64_t initial = 0, uint64_t max_handle = 0,
                    uint64_t small = 0) {
  PoolOptions o;
  o.page_size = kPage;
  o.va_size = va_pages * kPage;
  o.initial_pages = initial;
  o.max_handle_size = max_handle;
  o.small_size = small;
  return o;
}

// Kinds whose failure an operation may absorb and still succeed.
bool non_essential(int kind) {
  using vpmm::Op;
  switch (kind) {
    case static_cast<int>(Op::event_query):    // completion unknown: treated as pending
    case static_cast<int>(Op::event_record):   // Phase 1 probe: region skipped
    case static_cast<int>(Op::event_destroy):  // nothing to undo
    case static_cast<int>(Op::unmap):          // zombie kept, unmapped later
    case static_cast<int>(Op::release):
    case static_cast<int>(Op::unreserve):
    case static_cast<int>(Op::host_free):
    case static_cast<int>(Op::pageable_free):
    case static_cast<int>(Op::file_close):   // retried once
    case static_cast<int>(Op::file_remove):  // retried once
    case static_cast<int>(Op::dir_close):    // retried once
    case static_cast<int>(Op::dir_check):    // unknown: the directory is taken as it is
    case vpmm::kFaultStreamDestroy:
      return true;
    default:
      return false;
  }
}

// Kinds whose calls undo or tear down (never failed "from then on": a
// rollback that cannot run leaks by necessity).
bool rollback_kind(int kind) {
  using vpmm::Op;
  return kind == static_cast<int>(Op::unmap) || kind == static_cast<int>(Op::release) ||
         kind == static_cast<int>(Op::unreserve) || kind == static_cast<int>(Op::event_destroy) ||
         kind == static_cast<int>(Op::host_free) || kind == static_cast<int>(Op::pageable_free) ||
         kind == static_cast<int>(Op::file_close) || kind == static_cast<int>(Op::file_remove) ||
         kind == static_cast<int>(Op::dir_close) || kind == vpmm::kFaultStreamDestroy;
}

// The kinds of a FaultControl trace, in order.
std::vector<int> trace_kinds(const std::string& trace) {
  std::vector<int> out;
  size_t i = 0;
  while (i < trace.size()) {
    size_t j = trace.find(' ', i);
    if (j == std::string::npos) j = trace.size();
    std::string name = trace.substr(i, j - i);
    for (int k = 0; k < vpmm::kFaultKinds; ++k)
      if (name == vpmm::fault_kind_name(k)) out.push_back(k);
    i = j + 1;
  }
  return out;
}

struct Tally {
  uint64_t points = 0, errors = 0, absorbed = 0, retried = 0, failing = 0;
  std::map<std::string, std::string> outcomes;  // kind -> "E" error / "A" absorbed / "R" retried, per point
};
Tally g_total;

// Builds the world up to the operation. False if the setup itself failed.
bool build(const Scenario& sc, Ctx& c) {
  vpmm::BackendParams bp;
  bp.host_capacity = sc.capacity;
  vpmm_status st = VPMM_OK;
  c.host = vt::make_shared_test_backend(bp, &st);
  if (!c.host) return false;
  c.opt = sc.opt;
  c.ctl->arm(FaultPlan{});  // no faults during the setup
  if (!sc.creates_pool) {
    vpmm_status cs = c.create_pool();
    if (cs != VPMM_OK) {
      std::printf("  %s: pool creation failed: %s\n", sc.name, vpmm::last_error());
      return false;
    }
  }
  int before = vt::case_failures();
  if (sc.setup) sc.setup(c);
  return vt::case_failures() == before;
}

// Marks allocations paused without a backup (their bytes are gone).
void note_discarded(Ctx& c) {
  if (!c.pool) return;
  c.ctl->set_counting(false);
  data_errors(c, c.pool->snapshot());
}

// Everything after the operation: recovery, cleanup, destroy, leak check.
void finish(const Scenario& sc, Ctx& c, vpmm_status op_status, const char* where) {
  c.ctl->disarm();
  c.ctl->set_counting(false);
  c.release_holds();
  if (!c.pool_destroyed && op_status != VPMM_OK) {
    // The failed operation succeeds once the backend does.
    vpmm_status again = sc.op(c);
    if (again != VPMM_OK)
      std::printf("  %s [%s]: retry failed: %s\n", sc.name, where, vpmm::last_error());
    CHECK_OK(again);
    note_discarded(c);
  }
  if (c.pool) {
    // Backups of anything paused come back byte-exact.
    vpmm_status rs = c.pool->resume(nullptr);
    CHECK_OK(rs);
    std::string bad = data_errors(c, c.pool->snapshot());
    if (!bad.empty()) std::printf("  %s [%s]: %s\n", sc.name, where, bad.c_str());
    CHECK(bad.empty());
    // The pool keeps working.
    void* p = nullptr;
    CHECK_OK(pool_malloc(*c.pool, 3 * kPage, nullptr, nullptr, 0, &p));
    if (p) vt::fill(p, 3 * kPage, 99);
    CHECK_OK(c.pool->free(p, nullptr));
    while (!c.live.empty()) CHECK_OK(c.release(c.live.size() - 1, c.live.back().stream));
    std::string e = c.pool->check();
    if (!e.empty()) std::printf("  %s [%s]: check after cleanup: %s\n", sc.name, where, e.c_str());
    CHECK_EQ(e, std::string());
    c.pool.reset();
  }
  for (Stream s : c.streams) CHECK_OK(vpmm::host::stream_destroy(s));
  c.streams.clear();
  bool clean = vpmm::live_counts_zero(c.host->counters()) && vpmm::live_counts_zero(c.services->counters());
  if (!clean)
    std::printf("  %s [%s]: leaked after destroy: %s; %s\n", sc.name, where,
                vpmm::live_counts(c.host->counters()).c_str(), vpmm::live_counts(c.services->counters()).c_str());
  CHECK(clean);
}

void run_scenario(const Scenario& sc) {
  // 1. Unfaulted: count the operation's backend calls. The same captures as
  //    in the faulted runs (a snapshot caches completed events).
  uint64_t count = 0;
  std::string trace;
  State ref;  // after the unfaulted operation
  {
    Ctx c;
    CHECK(build(sc, c));
    if (!c.host) return;
    if (c.pool) capture(c);
    c.ctl->arm(FaultPlan{});
    vpmm_status st = sc.op(c);
    count = c.ctl->calls();
    trace = c.ctl->trace();
    if (sc.destroys_pool) c.pool_destroyed = true;
    if (st != VPMM_OK) std::printf("  %s: unfaulted operation failed: %s\n", sc.name, vpmm::last_error());
    CHECK_OK(st);
    if (c.pool) {
      ref = capture(c);
      CHECK_EQ(c.pool->check(), std::string());
      if (sc.on_success) CHECK_EQ(sc.on_success(c), std::string());
    }
    note_discarded(c);
    finish(sc, c, VPMM_OK, "unfaulted");
  }
  CHECK(count > 0);
  Tally t;
  // 2. Fail each call once, with each status.
  // Modes: call N fails once with OUT_OF_MEMORY, once with BACKEND, and
  // (so that the pool's retry after OUT_OF_MEMORY fails too) every call of
  // call N's kind from that one on fails with OUT_OF_MEMORY. The last mode
  // skips the kinds that rollbacks and cleanups use themselves.
  std::vector<int> kinds = trace_kinds(trace);
  struct Mode {
    vpmm_status status;
    bool persistent;
    const char* name;
  };
  for (const Mode& mode : {Mode{VPMM_ERR_OUT_OF_MEMORY, false, "OOM once"},
                           Mode{VPMM_ERR_BACKEND, false, "BACKEND once"},
                           Mode{VPMM_ERR_OUT_OF_MEMORY, true, "OOM from then on"}}) {
    const vpmm_status inject = mode.status;
    for (uint64_t n = 1; n <= count; ++n) {
      FaultPlan plan{n, vpmm::kFaultAny, inject};
      if (mode.persistent) {
        if (n > kinds.size() || rollback_kind(kinds[n - 1])) continue;
        plan.kind = kinds[n - 1];
        plan.nth = 0;
        for (uint64_t i = 0; i < n; ++i) plan.nth += kinds[i] == plan.kind;
        plan.persistent = true;
      }
      const int failures_before = vt::case_failures();
      Ctx c;
      if (!build(sc, c)) {
        CHECK(false);
        return;
      }
      State before;
      if (c.pool) before = capture(c);
      c.ctl->arm(plan);
      vpmm::fail(VPMM_OK, "%s", "");
      vpmm_status st = sc.op(c);
      std::string msg = vpmm::last_error();
      c.ctl->disarm();
      const int kind = c.ctl->last_fault_kind();
      const bool continued = c.ctl->calls() > n;
      if (sc.destroys_pool) c.pool_destroyed = true;
      char where[128];
      std::snprintf(where, sizeof where, "call %" PRIu64 "/%" PRIu64 " %s, %s", n, count,
                    vpmm::fault_kind_name(kind), mode.name);
      // The same prefix of calls as the unfaulted run: the fault was injected.
      const bool injected = mode.persistent ? c.ctl->injected() >= 1 : c.ctl->injected() == 1;
      if (!injected)
        std::printf("  %s [%s]: %" PRIu64 " faults injected (trace: %s)\n", sc.name, where,
                    c.ctl->injected(), c.ctl->trace().c_str());
      CHECK(injected);
      ++t.points;
      char outcome = 'E';
      if (st != VPMM_OK) {
        ++t.errors;
        vpmm_status want = kind == static_cast<int>(vpmm::Op::reserve) ? VPMM_ERR_OUT_OF_MEMORY : inject;
        if (st != want)
          std::printf("  %s [%s]: returned %s\n", sc.name, where, vpmm_status_string(st));
        CHECK_EQ(st, want);
        if (msg.find("fault injection") == std::string::npos)
          std::printf("  %s [%s]: message does not name the fault: \"%s\"\n", sc.name, where, msg.c_str());
        CHECK(msg.find("fault injection") != std::string::npos);
        if (c.pool) {
          State after = capture(c);
          std::string d = diff_state(before, after, sc.partial);
          if (!d.empty()) std::printf("  %s [%s]: pool changed: %s\n", sc.name, where, d.c_str());
          CHECK_EQ(d, std::string());
        }
      } else if (sc.destroys_pool || non_essential(kind)) {
        // Absorbed: the operation did without the call.
        ++t.absorbed;
        outcome = 'A';
        if (kind == static_cast<int>(vpmm::Op::unmap) && c.pool && sc.partial == Partial::none) {
          // A zombie whose unmap failed stays a zombie (retried later).
          State after = capture(c);
          if (after.stats.zombie_bytes <= ref.stats.zombie_bytes)
            std::printf("  %s [%s]: failed unmap left no zombie\n", sc.name, where);
          CHECK(after.stats.zombie_bytes > ref.stats.zombie_bytes);
        }
      } else {
        // An essential call failed and the operation still succeeded: only
        // right for a retry after OUT_OF_MEMORY (a failed VA reservation
        // is reported as one). A malloc's retry after giving back an empty
        // cached slab may need no further call: the slab's pages fit in place.
        ++t.retried;
        outcome = 'R';
        bool slab_given_back = false;  // an empty cached slab (vpmm.h, vpmm_region_info.requested)
        for (const vpmm_region_info& r : before.regions)
          if (r.kind == VPMM_REGION_SMALL && r.requested == 0 && !r.event_pending) slab_given_back = true;
        bool ok = (continued || slab_given_back) && (inject == VPMM_ERR_OUT_OF_MEMORY ||
                                                     kind == static_cast<int>(vpmm::Op::reserve));
        if (!ok)
          std::printf("  %s [%s]: succeeded although an essential call failed (trace: %s)\n",
                      sc.name, where, c.ctl->trace().c_str());
        CHECK(ok);
      }
      if (st == VPMM_OK && c.pool && sc.on_success) {
        c.ctl->set_counting(false);
        std::string e = sc.on_success(c);
        if (!e.empty()) std::printf("  %s [%s]: succeeded, but %s\n", sc.name, where, e.c_str());
        CHECK_EQ(e, std::string());
      }
      t.outcomes[vpmm::fault_kind_name(kind)] += outcome;
      if (c.pool) {
        std::string e = c.pool->check();
        if (!e.empty()) std::printf("  %s [%s]: check: %s\n", sc.name, where, e.c_str());
        CHECK_EQ(e, std::string());
        c.ctl->set_counting(false);
        std::string bad = data_errors(c, c.pool->snapshot());
        if (!bad.empty()) std::printf("  %s [%s]: %s\n", sc.name, where, bad.c_str());
        CHECK(bad.empty());
      }
      finish(sc, c, st, where);
      if (vt::case_failures() != failures_before) {
        ++t.failing;
        std::printf("  %s [%s]: unfaulted trace: %s\n", sc.name, where, trace.c_str());
      }
    }
  }
  std::string by_kind;
  for (const auto& kv : t.outcomes) {
    size_t e = 0, a = 0, r = 0;
    for (char ch : kv.second) (ch == 'E' ? e : ch == 'A' ? a : r) += 1;
    char b[96];
    std::snprintf(b, sizeof b, " %s:%zuE/%zuA/%zuR", kv.first.c_str(), e, a, r);
    by_kind += b;
  }
  std::printf("  %s: %" PRIu64 " calls, %" PRIu64 " fault points (%" PRIu64 " errors, %" PRIu64
              " absorbed, %" PRIu64 " retried), %" PRIu64 " failing\n   by kind (Error/Absorbed/Retried):%s\n",
              sc.name, count, t.points, t.errors, t.absorbed, t.retried, t.failing, by_kind.c_str());
  g_total.points += t.points;
  g_total.errors += t.errors;
  g_total.absorbed += t.absorbed;
  g_total.retried += t.retried;
  g_total.failing += t.failing;
}
// ---------------------------------------------------------------------------
// The table
// ---------------------------------------------------------------------------

std::vector<Scenario> scenarios() {
  std::vector<Scenario> v;
  auto add = [&](Scenario s) { v.push_back(std::move(s)); };

  // (a) growth from empty
  {
    Scenario s;
    s.name = "a1 growth from empty";
    s.opt = options();
    s.op = [](Ctx& c) { return c.alloc(3 * kPage); };
    add(s);
    s.name = "a2 growth, one handle per page";
    s.opt = options(64, 0, kPage);
    s.op = [](Ctx& c) { return c.alloc(4 * kPage); };
    add(s);
    s.name = "a3 growth into a new VA chunk";
    s.opt = options(4, 0, kPage);
    s.setup = [](Ctx& c) { CHECK_OK(c.alloc(3 * kPage)); };
    s.op = [](Ctx& c) { return c.alloc(6 * kPage); };
    add(s);
  }
  // (b) the walkthrough: PAGES = 11 + X, +10 > +1 > -10 > +4 > +11 (faulted)
  auto walkthrough = [] {
    return [](Ctx& c) {
      CHECK_OK(c.alloc(10 * kPage));
      CHECK_OK(c.alloc(1 * kPage));
      CHECK_OK(c.release(0, nullptr));
      CHECK_OK(c.alloc(4 * kPage));
    };
  };
  {
    Scenario s;
    s.name = "b1 walkthrough case C (defrag + grow)";
    s.opt = options(64, 11 + 4);
    s.setup = walkthrough();
    s.op = [](Ctx& c) { return c.alloc(11 * kPage); };
    add(s);
    s.name = "b2 walkthrough case B (defrag only)";
    s.opt = options(64, 11 + 7);
    s.setup = walkthrough();
    add(s);
    s.name = "b3 walkthrough case D (split leftover + grow)";
    s.opt = options(64, 11 + 2);
    s.setup = walkthrough();
    add(s);
    s.name = "b4 growth sequence, one handle per page";
    s.opt = options(64, 0, kPage);
    s.setup = walkthrough();
    add(s);
  }
  // (b') shared pages (large_rounding 512): [1.5][1.5][1.5][-0.5], the middle
  // one freed; a 2-page malloc joins the free tail with the hole behind it
  // and moves the freed region's one whole page (tests/unit/test_large_rounding).
  {
    Scenario s;
    s.name = "b5 shared pages: join a half-page tail, move a whole page";
    s.opt = options(64, 0, kPage);
    s.opt.large_rounding = 512;
    s.setup = [](Ctx& c) {
      for (int i = 0; i < 3; ++i) CHECK_OK(c.alloc(kPage + kPage / 2));
      CHECK_OK(c.release(1, nullptr));
    };
    s.op = [](Ctx& c) { return c.alloc(2 * kPage); };
    add(s);
    s.name = "b6 shared pages: growth beside a half-page tail";
    s.setup = [](Ctx& c) { CHECK_OK(c.alloc(kPage + kPage / 2)); };
    s.op = [](Ctx& c) { return c.alloc(kPage + kPage / 2); };
    add(s);
  }
  // (c) several streams, a held one: Phase 2 waits on the GPU, zombies pend.
  auto held_setup = [](Ctx& c) {
    Stream a = c.stream(0), b = c.stream(1);
    CHECK_OK(c.alloc(2 * kPage, a));
    CHECK_OK(c.alloc(4 * kPage, b));
    c.hold(b);
    CHECK_OK(c.release(1, b));  // free on the held stream: its event stays pending
  };
  {
    Scenario s;
    s.name = "c1 harvest a held stream's region";
    s.opt = options();
    s.setup = held_setup;
    s.op = [](Ctx& c) { return c.alloc(6 * kPage, c.stream(0)); };
    add(s);
    s.name = "c2 malloc while zombies are pending";
    s.setup = [held_setup](Ctx& c) {
      held_setup(c);
      CHECK_OK(c.alloc(6 * kPage, c.stream(0)));
    };
    s.op = [](Ctx& c) { return c.alloc(2 * kPage, c.stream(2)); };
    add(s);
    s.name = "c3 release, then reap zombies";
    s.setup = [held_setup](Ctx& c) {
      held_setup(c);
      CHECK_OK(c.alloc(6 * kPage, c.stream(0)));
      c.release_holds();
    };
    s.op = [](Ctx& c) { return c.alloc(1 * kPage, c.stream(0)); };
    add(s);
    s.name = "c4 cross-stream reuse of a completed region";
    s.setup = [](Ctx& c) {
      CHECK_OK(c.alloc(4 * kPage, c.stream(1)));
      CHECK_OK(c.release(0, c.stream(1)));
    };
    s.op = [](Ctx& c) { return c.alloc(3 * kPage, c.stream(0)); };
    add(s);
    s.name = "c5 retire a stream with lazy free regions";
    s.setup = [](Ctx& c) {
      CHECK_OK(c.alloc(4 * kPage, c.stream(1)));
      CHECK_OK(c.alloc(2 * kPage, c.stream(1)));
      CHECK_OK(c.release(0, c.stream(1)));
      c.hold(c.stream(1));
    };
    s.op = [](Ctx& c) { return c.pool->stream_retire(c.stream(1)); };
    add(s);
  }
  // (d) small allocations
  {
    Scenario s;
    s.name = "d1 small malloc, new slab";
    s.opt = options(64, 0, 0, kPage / 2);
    s.setup = [](Ctx& c) {
      CHECK_OK(c.alloc(1000));
      CHECK_OK(c.alloc(1000));
    };
    s.op = [](Ctx& c) { return c.alloc(3000); };
    add(s);
    s.name = "d2 small free on another stream";
    s.setup = [](Ctx& c) {
      CHECK_OK(c.alloc(1000, c.stream(0)));
      CHECK_OK(c.alloc(1000, c.stream(0)));
    };
    s.op = [](Ctx& c) { return c.release(0, c.stream(1)); };
    add(s);
    s.name = "d3 small malloc with pending foreign frees";
    s.setup = [](Ctx& c) {
      CHECK_OK(c.alloc(1000, c.stream(0)));
      CHECK_OK(c.alloc(1000, c.stream(0)));
      c.hold(c.stream(1));
      CHECK_OK(c.release(0, c.stream(1)));
    };
    s.op = [](Ctx& c) { return c.alloc(2000, c.stream(0)); };
    add(s);
    s.name = "d4 page malloc beside small slabs";
    s.setup = [](Ctx& c) {
      CHECK_OK(c.alloc(1000));
      CHECK_OK(c.alloc(5000));
      CHECK_OK(c.release(0, nullptr));
    };
    s.op = [](Ctx& c) { return c.alloc(2 * kPage); };
    add(s);
    // The pool's only slab emptied; a request of another class needs a new
    // slab: growth gives the empty one back and plans again (f712b37).
    s.name = "d5 small malloc after the only slab emptied";
    s.setup = [](Ctx& c) {
      CHECK_OK(c.alloc(832));
      CHECK_OK(c.release(0, nullptr));
    };
    s.op = [](Ctx& c) { return c.alloc(1030); };
    add(s);
  }
  // (e) pool creation with initial pages
  {
    Scenario s;
    s.name = "e1 create, 6 initial pages (a handle each)";
    s.opt = options(64, 6);
    s.creates_pool = true;
    s.op = [](Ctx& c) { return c.create_pool(); };
    add(s);
    s.name = "e2 create, 6 initial pages (2-page handles)";
    s.opt = options(64, 6, 2 * kPage);
    add(s);
    s.name = "e3 create, no initial pages";
    s.opt = options(64, 0);
    add(s);
  }
  // (f) destroy with everything in it
  {
    Scenario s;
    s.name = "f1 destroy a busy pool";
    s.opt = options(64, 4, 0, kPage / 2);
    s.destroys_pool = true;
    s.setup = [](Ctx& c) {
      Stream a = c.stream(0), b = c.stream(1);
      CHECK_OK(c.alloc(2 * kPage, a));
      CHECK_OK(c.alloc(4 * kPage, b));
      CHECK_OK(c.alloc(1000, a));
      CHECK_OK(c.alloc(3 * kPage, a, "w", VPMM_ALLOC_HOST_BACKUP));
      CHECK_OK(c.pool->pause("w"));
      c.hold(b);
      CHECK_OK(c.release(1, b));
      CHECK_OK(c.alloc(6 * kPage, a));  // harvests b's region: a pending zombie
    };
    s.op = [](Ctx& c) {
      c.release_holds();
      c.pool.reset();
      c.live.clear();
      return VPMM_OK;
    };
    add(s);
  }
  // Pause, resume, trim.
  {
    Scenario s;
    s.name = "g1 pause with host backups";
    s.opt = options(64, 0, 0, kPage / 2);
    s.setup = [](Ctx& c) {
      CHECK_OK(c.alloc(3 * kPage, nullptr, "w", VPMM_ALLOC_HOST_BACKUP));
      CHECK_OK(c.alloc(1000, nullptr, "w", VPMM_ALLOC_HOST_BACKUP));
      CHECK_OK(c.alloc(2 * kPage, nullptr, "w", 0));
      CHECK_OK(c.alloc(2 * kPage));
    };
    s.op = [](Ctx& c) { return c.pool->pause("w"); };
    s.partial = Partial::pause;
    add(s);
    s.name = "g2 resume with host backups";
    s.setup = [](Ctx& c) {
      CHECK_OK(c.alloc(3 * kPage, nullptr, "w", VPMM_ALLOC_HOST_BACKUP));
      CHECK_OK(c.alloc(1000, nullptr, "w", VPMM_ALLOC_HOST_BACKUP));
      CHECK_OK(c.alloc(2 * kPage));
      CHECK_OK(c.pool->pause("w"));
    };
    s.op = [](Ctx& c) { return c.pool->resume("w"); };
    s.partial = Partial::resume;
    add(s);
    // Pipelines of several batches: one event per batch of D2H copies, the
    // release of a batch overlapping the copies of the next (pause_locked);
    // each H2D copy queued right after its map (resume_locked). A fault in
    // batch k leaves earlier batches paused, with whole backups.
    s.name = "g4 pause pipeline over several batches";
    s.opt = options(64, 0, 0, kPage / 2);
    s.opt.pause_batch_bytes = kPage;  // 6 batches: more than are queued ahead at once
    s.setup = [](Ctx& c) {
      for (int i = 0; i < 4; ++i) CHECK_OK(c.alloc((i % 2 + 1) * kPage, nullptr, "w", VPMM_ALLOC_HOST_BACKUP));
      CHECK_OK(c.alloc(1000, nullptr, "w", VPMM_ALLOC_HOST_BACKUP));
      CHECK_OK(c.alloc(2 * kPage, c.stream(0), "w", 0));
      CHECK_OK(c.alloc(2 * kPage));
    };
    s.op = [](Ctx& c) { return c.pool->pause("w"); };
    s.partial = Partial::pause;
    add(s);
    s.name = "g5 resume pipeline over several batches";
    s.setup = [](Ctx& c) {
      for (int i = 0; i < 4; ++i) CHECK_OK(c.alloc((i % 2 + 1) * kPage, nullptr, "w", VPMM_ALLOC_HOST_BACKUP));
      CHECK_OK(c.alloc(1000, nullptr, "w", VPMM_ALLOC_HOST_BACKUP));
      CHECK_OK(c.alloc(2 * kPage, nullptr, "w", 0));
      CHECK_OK(c.pool->pause("w"));
      data_errors(c, c.pool->snapshot());  // marks the one without a backup: its bytes are gone
    };
    s.op = [](Ctx& c) { return c.pool->resume("w"); };
    s.partial = Partial::resume;
    add(s);
    // The mmap and disk stores: staged through slots over several chunks
    // (host_copy for mmap, file writes and reads for disk), files created
    // at the first pause and kept by the active allocation after a resume;
    // retained backups re-written in place, or not written at all when the
    // pause is declared unchanged.
    s.name = "g6 pause to the mmap and disk stores, staged";
    s.opt = options(64, 0, 0, kPage / 2);
    s.opt.pause_batch_bytes = kPage;  // one-page slots: several chunks per allocation
    s.setup = [](Ctx& c) {
      CHECK_OK(c.alloc(3 * kPage, nullptr, "w", VPMM_ALLOC_HOST_BACKUP | VPMM_ALLOC_BACKUP_MMAP));
      CHECK_OK(c.alloc(2 * kPage, nullptr, "w", c.disk(0)));
      CHECK_OK(c.alloc(1000, nullptr, "w", c.disk(0)));
      CHECK_OK(c.alloc(2 * kPage, nullptr, "w", VPMM_ALLOC_HOST_BACKUP));
      CHECK_OK(c.alloc(kPage, nullptr, "w", 0));
    };
    s.op = [](Ctx& c) { return c.pool->pause("w"); };
    s.partial = Partial::pause;
    add(s);
    s.name = "g7 resume from the mmap and disk stores, staged";
    s.setup = [](Ctx& c) {
      CHECK_OK(c.alloc(3 * kPage, nullptr, "w", VPMM_ALLOC_HOST_BACKUP | VPMM_ALLOC_BACKUP_MMAP));
      CHECK_OK(c.alloc(2 * kPage, nullptr, "w", c.disk(0)));
      CHECK_OK(c.alloc(1000, nullptr, "w", c.disk(0)));
      CHECK_OK(c.alloc(2 * kPage, nullptr, "w", VPMM_ALLOC_HOST_BACKUP));
      CHECK_OK(c.pool->pause("w"));
    };
    s.op = [](Ctx& c) { return c.pool->resume("w"); };
    s.partial = Partial::resume;
    add(s);
    s.name = "g8 second pause into retained backups and kept disk files";
    s.setup = [](Ctx& c) {
      CHECK_OK(c.alloc(3 * kPage, nullptr, "w",
                       VPMM_ALLOC_HOST_BACKUP | VPMM_ALLOC_BACKUP_MMAP | VPMM_ALLOC_RETAIN_BACKUP));
      CHECK_OK(c.alloc(2 * kPage, nullptr, "w", c.disk(0)));
      CHECK_OK(c.alloc(2 * kPage, nullptr, "w", VPMM_ALLOC_HOST_BACKUP | VPMM_ALLOC_RETAIN_BACKUP));
      CHECK_OK(c.pool->pause("w"));
      CHECK_OK(c.pool->resume("w"));
      for (Alloc& a : c.live) {  // new bytes: the pause must write them over the old backups
        a.seed = c.next_seed++;
        vt::fill(a.p, a.size, a.seed);
      }
    };
    s.op = [](Ctx& c) { return c.pool->pause("w"); };
    s.partial = Partial::pause;
    add(s);
    s.name = "g9 unchanged re-pause: retained backups released without a copy, the rest copied";
    s.setup = [](Ctx& c) {
      CHECK_OK(c.alloc(3 * kPage, nullptr, "w",
                       VPMM_ALLOC_HOST_BACKUP | VPMM_ALLOC_BACKUP_MMAP | VPMM_ALLOC_RETAIN_BACKUP));
      CHECK_OK(c.alloc(2 * kPage, nullptr, "w", c.disk(VPMM_ALLOC_RETAIN_BACKUP)));
      CHECK_OK(c.alloc(2 * kPage, nullptr, "w", VPMM_ALLOC_HOST_BACKUP | VPMM_ALLOC_RETAIN_BACKUP));
      CHECK_OK(c.pool->pause("w"));
      CHECK_OK(c.pool->resume("w"));
      CHECK_OK(c.alloc(2 * kPage, nullptr, "w", c.disk(VPMM_ALLOC_RETAIN_BACKUP)));  // never paused
    };
    s.op = [](Ctx& c) { return c.pool->pause("w", nullptr, VPMM_PAUSE_BACKUP_UNCHANGED); };
    s.partial = Partial::pause;
    add(s);
    // A malloc that names a backup directory the pool has not met opens it
    // (issue 36 item 6: a missing one fails here, not at the pause).
    s.name = "g10 malloc naming a new backup directory";
    s.setup = [](Ctx& c) { CHECK_OK(c.alloc(kPage, nullptr, "w", c.disk(0))); };
    s.op = [](Ctx& c) {
      static const std::string dir = std::string(Ctx::backup_dir()) + "/g10";
      mkdir(dir.c_str(), 0700);
      uint32_t id = 0;
      vpmm_status st = c.pool->backup_dir_id("test", dir.c_str(), &id);
      if (st != VPMM_OK) return st;
      return c.alloc(2 * kPage, nullptr, "w",
                     VPMM_ALLOC_HOST_BACKUP | VPMM_ALLOC_BACKUP_DISK | (id << vpmm::kBackupDirShift));
    };
    add(s);
    s.opt = options(64, 0, 0, kPage / 2);
    s.name = "g3 trim free memory";
    s.setup = [](Ctx& c) {
      CHECK_OK(c.alloc(3 * kPage));
      CHECK_OK(c.alloc(2 * kPage));
      CHECK_OK(c.alloc(2 * kPage, c.stream(0)));
      CHECK_OK(c.release(0, nullptr));
      CHECK_OK(c.release(1, c.stream(0)));
    };
    s.op = [](Ctx& c) { return c.pool->trim(0); };
    s.partial = Partial::trim;
    // vpmm.h: trim releases "until at most keep_bytes stay mapped in free regions".
    s.on_success = [](Ctx& c) -> std::string {
      vpmm_stats st;
      c.pool->stats(&st);
      return st.free_bytes == 0 ? "" : "trim(0) returned VPMM_OK with " + std::to_string(st.free_bytes) +
                                           " free bytes still mapped";
    };
    add(s);
  }
  // Pause, trim and resume with work queued on other streams, under limits,
  // and after a stream was retired: the calls wait for the queued work
  // (released 30 ms into the call), so a read still queued when the memory
  // is unmapped faults, and a rewrite queued before a pause is what the
  // backup holds.
  {
    Scenario s;
    s.name = "h1 pause: a slab's block freed on a held stream that still reads it";
    s.opt = options(64, 0, 0, kPage / 2);
    s.setup = [](Ctx& c) {
      Stream a = c.stream(0), b = c.stream(1);
      CHECK_OK(c.alloc(1000, a, "w", VPMM_ALLOC_HOST_BACKUP));
      CHECK_OK(c.alloc(1000, a, "w", VPMM_ALLOC_HOST_BACKUP));
      CHECK_OK(c.alloc(2 * kPage, a, "w", VPMM_ALLOC_HOST_BACKUP));
      CHECK_OK(vpmm::host::stream_synchronize(a));
      c.hold(b);
      queue_read(b, c.live[0]);
      CHECK_OK(c.release(0, b));
    };
    s.op = [](Ctx& c) { return c.released_later([&c] { return c.pool->pause("w"); }); };
    s.partial = Partial::pause;
    s.on_success = [](Ctx&) -> std::string {
      return g_kernel_errors == 0 ? "" : "a read queued before the free saw the wrong bytes";
    };
    add(s);
    s.name = "h2 pause: a rewrite queued on the allocation's held stream";
    s.setup = [](Ctx& c) {
      Stream a = c.stream(0);
      CHECK_OK(c.alloc(2 * kPage, a, "w", VPMM_ALLOC_HOST_BACKUP));
      CHECK_OK(c.alloc(1000, a, "w", VPMM_ALLOC_HOST_BACKUP));
      CHECK_OK(vpmm::host::stream_synchronize(a));
      c.hold(a);
      for (Alloc& x : c.live) {
        x.seed = c.next_seed++;  // what the backup must hold
        CHECK_OK(vpmm::host::stream_launch(a, job_kernel, new ReadJob{x.p, x.size, x.seed, true}));
      }
    };
    add(s);
    s.name = "h3 trim: a region freed on a held stream that still reads it";
    s.setup = [](Ctx& c) {
      Stream a = c.stream(0), b = c.stream(1);
      CHECK_OK(c.alloc(3 * kPage, a));
      CHECK_OK(c.alloc(2 * kPage, a));
      CHECK_OK(vpmm::host::stream_synchronize(a));
      c.hold(b);
      queue_read(b, c.live[0]);
      CHECK_OK(c.release(0, b));
    };
    s.op = [](Ctx& c) { return c.released_later([&c] { return c.pool->trim(0); }); };
    s.partial = Partial::trim;
    add(s);
    // Three paused allocations that fit under the limit only once the
    // cached free pages are given back; mapped bytes never pass the limit.
    s.name = "h4 resume under a tight limit: cached memory given back first";
    s.opt = options(64, 0, kPage);
    s.setup = [](Ctx& c) {
      for (int i = 0; i < 3; ++i) CHECK_OK(c.alloc(2 * kPage, nullptr, "w", VPMM_ALLOC_HOST_BACKUP));
      CHECK_OK(c.alloc(8 * kPage));
      CHECK_OK(c.release(3, nullptr));  // 8 free pages stay mapped
      CHECK_OK(c.pool->pause("w"));
      CHECK_OK(c.pool->set_limit(10 * kPage));
    };
    s.op = [](Ctx& c) {
      vpmm_status st = c.pool->resume("w");
      vpmm_stats x;
      c.pool->stats(&x);
      if (x.mapped_bytes > 10 * kPage)
        std::printf("  h4: %" PRIu64 " bytes mapped under a limit of %" PRIu64 "\n", x.mapped_bytes, 10 * kPage);
      CHECK(x.mapped_bytes <= 10 * kPage);
      return st;
    };
    s.partial = Partial::resume_trim;
    s.on_success = nullptr;
    add(s);
    // The allocating stream was retired and destroyed (its work drained):
    // the pause must not need it.
    s.name = "h5 pause after the allocating stream was retired and destroyed";
    s.opt = options(64, 0, 0, kPage / 2);
    s.setup = [](Ctx& c) {
      Stream a = c.stream(0);
      CHECK_OK(c.alloc(2 * kPage, a, "w", VPMM_ALLOC_HOST_BACKUP));
      CHECK_OK(c.alloc(1000, a, "w", VPMM_ALLOC_HOST_BACKUP));
      CHECK_OK(c.alloc(3 * kPage, a, "w", 0));
      CHECK_OK(c.alloc(500, a));
      c.hold(a);  // work still queued when the stream is retired and destroyed
      CHECK_OK(c.release(3, a));
      c.held.clear();  // the destroy drops the hold
      CHECK_OK(c.pool->stream_retire(a));
      CHECK_OK(vpmm::host::stream_destroy(a));
      c.streams.erase(c.streams.begin());
      for (Alloc& x : c.live) x.stream = nullptr;  // used in the default stream's order from now on
    };
    s.op = [](Ctx& c) { return c.pool->pause("w"); };
    s.partial = Partial::pause;
    add(s);
  }
  // (v) views (views.hpp): free memory in three 2-page pieces between live
  // pages; a request of 4 pages or more maps them at a VA of its own.
  auto scattered = [](Ctx& c) {
    for (int i = 0; i < 3; ++i) {
      CHECK_OK(c.alloc(2 * kPage));
      CHECK_OK(c.alloc(kPage));
    }
    for (int i = 2; i >= 0; --i) CHECK_OK(c.release(static_cast<size_t>(2 * i), nullptr));
  };
  {
    Scenario s;
    s.name = "v1 a view of scattered free memory";
    s.opt = options();
    s.opt.view_min_size = 4 * kPage;
    s.setup = scattered;
    s.op = [](Ctx& c) { return c.alloc(6 * kPage); };
    add(s);
    s.name = "v2 a view that grows what free memory lacks";
    s.op = [](Ctx& c) { return c.alloc(8 * kPage); };
    add(s);
    s.name = "v3 reuse of a view whose slot was taken";
    s.setup = [scattered](Ctx& c) {
      scattered(c);
      CHECK_OK(c.alloc(6 * kPage));
      CHECK_OK(c.release(c.live.size() - 1, nullptr));
      CHECK_OK(c.alloc(kPage));  // a piece of one slot's home: that slot is stale
    };
    s.op = [](Ctx& c) { return c.alloc(6 * kPage); };
    add(s);
    s.name = "v4 trim under an idle view";
    s.setup = [scattered](Ctx& c) {
      scattered(c);
      CHECK_OK(c.alloc(6 * kPage));
      CHECK_OK(c.release(c.live.size() - 1, nullptr));
    };
    s.op = [](Ctx& c) { return c.pool->trim(0); };
    s.partial = Partial::trim;
    add(s);
    s.partial = Partial::none;
    s.name = "v5 destroy with a live view and an idle one";
    s.setup = [scattered](Ctx& c) {
      scattered(c);
      CHECK_OK(c.alloc(6 * kPage));
      CHECK_OK(c.release(c.live.size() - 1, nullptr));
      CHECK_OK(c.alloc(kPage));
      CHECK_OK(c.alloc(8 * kPage));
    };
    s.destroys_pool = true;
    s.op = [](Ctx& c) {
      c.pool.reset();
      c.live.clear();
      return VPMM_OK;
    };
    add(s);
    s.destroys_pool = false;
    // The pieces freed on a held stream: the view on another stream records
    // that stream's event and waits for it on the GPU (event_record,
    // stream_wait) before it claims anything.
    s.name = "v6 a view of memory another stream freed with work still queued";
    s.setup = [](Ctx& c) {
      Stream a = c.stream(0);
      for (int i = 0; i < 3; ++i) {
        CHECK_OK(c.alloc(2 * kPage, a));
        CHECK_OK(c.alloc(kPage, a));
      }
      c.hold(a);
      for (int i = 2; i >= 0; --i) CHECK_OK(c.release(static_cast<size_t>(2 * i), a));
    };
    s.op = [](Ctx& c) { return c.alloc(6 * kPage, c.stream(1)); };
    add(s);
  }
  return v;
}

}  // namespace

// One test per row, then the total.
const bool g_registered = [] {
  static std::vector<Scenario> table = scenarios();
  static std::vector<std::string> names;
  names.reserve(table.size());
  for (const Scenario& sc : table) {
    names.push_back(std::string("fault: ") + sc.name);
    const Scenario* row = &sc;
    vt::cases().push_back({names.back().c_str(), [row] { run_scenario(*row); }});
  }
  return true;
}();

// The pipeline's promise, stated directly: with one event per page of
// copies (8 batches, more than are queued ahead at once), failing the sixth
// batch's wait pauses exactly the first five allocations (their backups
// complete), keeps the other three active and intact, and reports the
// failure; the pool then pauses the rest.
TEST("pause pipeline: a failed batch leaves earlier batches paused, later ones active") {
  static_assert(vpmm::kPauseBatchesAhead < 6, "batch 6 must be queued after a release");
  Ctx c;
  vpmm::BackendParams bp;
  vpmm_status st = VPMM_OK;
  c.host = vt::make_shared_test_backend(bp, &st);
  c.opt = options(64, 0, 0, kPage / 2);
  c.opt.pause_batch_bytes = kPage;
  CHECK_OK(c.create_pool());
  for (int i = 0; i < 8; ++i) CHECK_OK(c.alloc(kPage, nullptr, "w", VPMM_ALLOC_HOST_BACKUP));
  c.ctl->arm(FaultPlan{6, static_cast<int>(vpmm::Op::event_sync), VPMM_ERR_BACKEND});
  CHECK_EQ(c.pool->pause("w"), VPMM_ERR_BACKEND);
  CHECK(std::string(vpmm::last_error()).find("fault injection") != std::string::npos);
  c.ctl->disarm();
  auto regions = c.pool->snapshot();
  for (size_t i = 0; i < 8; ++i) CHECK_EQ(is_paused(regions, c.live[i]), i < 5);
  vpmm_tag_stats ts;
  ts.struct_size = sizeof ts;
  CHECK_OK(c.pool->tag_stats("w", &ts));
  CHECK_EQ(ts.n_paused, uint64_t(5));
  CHECK_EQ(ts.backup_bytes, 5 * kPage);
  for (size_t i = 5; i < 8; ++i) CHECK(vt::verify(c.live[i].p, kPage, c.live[i].seed));
  CHECK_EQ(c.pool->check(), std::string());
  CHECK_OK(c.pool->pause("w"));  // the rest
  CHECK_OK(c.pool->tag_stats("w", &ts));
  CHECK_EQ(ts.n_paused, uint64_t(8));
  CHECK_OK(c.pool->resume("w"));
  for (const Alloc& a : c.live) CHECK(vt::verify(a.p, a.size, a.seed));
  while (!c.live.empty()) CHECK_OK(c.release(c.live.size() - 1, nullptr));
  c.pool.reset();
  CHECK(vpmm::live_counts_zero(c.host->counters()));
}

// A resume under a limit that fits only some of the paused allocations:
// each one is resumed with its bytes or stays paused with its backup, and
// mapped bytes never pass the limit; the same with each backend call of the
// resume failed once. Then, the limit lifted, everything comes back intact.
TEST("resume under a tight limit: what does not fit stays paused with its backup, with or without faults") {
  auto setup = [](Ctx& c) {
    vpmm::BackendParams bp;
    vpmm_status st = VPMM_OK;
    c.host = vt::make_shared_test_backend(bp, &st);
    c.opt = options(64, 0, kPage, kPage / 2);
    CHECK_OK(c.create_pool());
    c.ctl->arm(FaultPlan{});
    for (int i = 0; i < 4; ++i) CHECK_OK(c.alloc(3 * kPage, nullptr, "w", VPMM_ALLOC_HOST_BACKUP));
    CHECK_OK(c.alloc(1000, nullptr, "w", VPMM_ALLOC_HOST_BACKUP));
    CHECK_OK(c.alloc(2 * kPage));
    CHECK_OK(c.pool->pause("w"));
    vpmm_stats x;
    c.pool->stats(&x);
    CHECK_OK(c.pool->set_limit(x.mapped_bytes + 7 * kPage));  // two of the four, and the slab
    return x.mapped_bytes + 7 * kPage;
  };
  auto after = [](Ctx& c, uint64_t limit, vpmm_status st, vpmm_status injected, const char* where) {
    vpmm_stats x;
    c.pool->stats(&x);
    if (x.mapped_bytes > limit)
      std::printf("  [%s]: %" PRIu64 " bytes mapped under a limit of %" PRIu64 "\n", where, x.mapped_bytes, limit);
    CHECK(x.mapped_bytes <= limit);
    if (st != VPMM_ERR_OUT_OF_MEMORY && st != injected)
      std::printf("  [%s]: resume returned %s (%s)\n", where, vpmm_status_string(st), vpmm::last_error());
    CHECK(st == VPMM_ERR_OUT_OF_MEMORY || st == injected);
    CHECK_EQ(c.pool->check(), std::string());
    c.ctl->set_counting(false);
    auto regions = c.pool->snapshot();
    size_t paused = 0;
    for (const Alloc& a : c.live) {
      if (is_paused(regions, a)) ++paused;
      else CHECK(vt::verify(a.p, a.size, a.seed));
    }
    CHECK(paused >= 1);  // four times three pages never fit in seven
    vpmm_tag_stats ts;
    ts.struct_size = sizeof ts;
    CHECK_OK(c.pool->tag_stats("w", &ts));
    CHECK_EQ(ts.backup_bytes, ts.paused_bytes);  // every paused one keeps a whole backup
    CHECK_OK(c.pool->set_limit(0));
    CHECK_OK(c.pool->resume("w"));
    for (const Alloc& a : c.live) CHECK(vt::verify(a.p, a.size, a.seed));
    while (!c.live.empty()) CHECK_OK(c.release(c.live.size() - 1, nullptr));
    CHECK_EQ(c.pool->check(), std::string());
    c.pool.reset();
    CHECK(vpmm::live_counts_zero(c.host->counters()));
  };
  uint64_t count = 0;
  {
    Ctx c;
    uint64_t limit = setup(c);
    c.ctl->arm(FaultPlan{});
    vpmm_status st = c.pool->resume("w");
    count = c.ctl->calls();
    c.ctl->disarm();
    after(c, limit, st, VPMM_ERR_OUT_OF_MEMORY, "unfaulted");
  }
  CHECK(count > 0);
  for (vpmm_status inject : {VPMM_ERR_OUT_OF_MEMORY, VPMM_ERR_BACKEND})
    for (uint64_t n = 1; n <= count; ++n) {
      Ctx c;
      uint64_t limit = setup(c);
      c.ctl->arm(FaultPlan{n, vpmm::kFaultAny, inject});
      vpmm_status st = c.pool->resume("w");
      c.ctl->disarm();
      char where[64];
      std::snprintf(where, sizeof where, "call %" PRIu64 "/%" PRIu64 " %s", n, count, vpmm_status_string(inject));
      after(c, limit, st, inject, where);
    }
}

TEST("fault points covered") {
  std::printf("fault points covered: %" PRIu64 " (%" PRIu64 " errors, %" PRIu64 " absorbed, %" PRIu64
              " retried after OUT_OF_MEMORY); %" PRIu64 " failing\n",
              g_total.points, g_total.errors, g_total.absorbed, g_total.retried, g_total.failing);
  CHECK(g_total.points > 0);
  // Every pool removed its backup files: the directories are empty.
  rmdir((std::string(Ctx::backup_dir()) + "/g10").c_str());
  CHECK_EQ(rmdir(Ctx::backup_dir()), 0);
}

TEST_MAIN()
