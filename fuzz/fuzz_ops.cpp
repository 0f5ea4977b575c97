// fuzz_ops: bytes -> a sequence of pool operations on a small host pool
// (16 MiB of host capacity, pages of 4-64 KiB, so growth, defragmentation,
// OOM and the OOM callback are all reached within a few hundred bytes).
//
// The model follows the pool's contract the way a GPU program would: every
// access to an allocation's bytes is a host "kernel" launched on a stream (a
// fill right after malloc, a verify right before free, on the freeing stream
// when that is another one), so stream ordering, held streams (work "in
// flight"), cross-stream reuse, stream waits and zombies are exercised exactly
// as on a GPU, and a kernel that sees the wrong bytes aborts (one that touches
// memory the pool unmapped under it faults). The CPU reads allocations
// directly only when no stream is held and every stream has drained.
//
// Calls that wait for stream work (pause, resume, trim, set_limit, stream
// destroy) are also made while streams are held, with work and frees queued
// on them: a helper thread releases the holds a little later, as the GPU
// would finish its work. A pause or trim that unmaps memory before the work
// queued on any stream that may still use it has run makes that work fault.
//
// Streams are retired and destroyed in the middle of everything (held, with
// work queued, with live and freed allocations), reservations released and
// re-created, limits set tight before resumes of many allocations; stale
// stream and reservation handles are passed back and must be rejected
// without touching the objects made since.
//
// After every operation: vpmm_pool_check, the stats against the model (live
// count, requested bytes, mapped bytes against every explicit limit), lookup
// of every allocation, and the order of pressure callbacks.
//
// Views (view_min_size the default, 2 or 8 pages, or off: the initial
// byte's bits 3-4) take other streams' pending frees, held or not, with a
// wait of the caller's stream; the fills and verifies of the blocks they
// serve find any ordering they miss.
//
// Kind 31 drives the PyTorch hooks on the process's default pool (host
// backend): tensors allocated on one of three streams of their own, read on
// others (vpmm_torch_record_stream, the read queued there), freed by
// "PyTorch" on the allocating stream with their last use still queued (held
// or not), while tensors of third streams take the memory: a free moved to
// a recorded stream that skips the allocating stream's work shows as a
// verify kernel seeing another tensor's bytes.
//
// Input layout: [shape, va, initial, limits] then operations; an operation
// byte is kind (low 5 bits), stream slot (bits 5-6) and a flag (bit 7),
// followed by the kind's own bytes (fuzz/make_seeds.py writes seeds).
//
// FUZZ_SKIP=name,... leaves out the checks and operations that stop on known
// defects (see kSkipNames), to look past them while they are open.
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "fuzz_common.hpp"
#include "vpmm.h"
#include "vpmm_host_streams.h"

namespace {

// FUZZ_VERBOSE=1 prints every operation (to replay a crash by hand).
const bool g_verbose = std::getenv("FUZZ_VERBOSE") != nullptr;
#define VLOG(...) \
  do {            \
    if (g_verbose) std::fprintf(stderr, __VA_ARGS__); \
  } while (0)

// Known defects to look past while they are open: FUZZ_SKIP=name,name,...
// (or "all") leaves out the operations or checks that would stop on them.
enum Skip {
  kForeignWork,   // pause/trim unmapping memory that work queued on another stream uses
  kResumeLimit,   // resume mapping past the limit
  kResumeOomCb,   // a resume out of memory without calling the OOM callback
  kStaleHandles,  // destroyed streams / released reservations reused by new objects
  kRetiredPause,  // pause of allocations whose stream was retired and destroyed
  kDestroyDrain,  // stream destroy returning before its queued work ran
  kSyncHeldWait,  // synchronize of a stream that waits on a held stream
  kTinyFraction,  // a tiny memory_limit_fraction removing the limit
  kTagStats,      // tag stats counting an empty cached slab as live
  kResumeSlab,    // a resume that gives cached memory back to fit under the limit
                  // releases a paused slab whose blocks were freed on another stream
  kSkips
};
const char* const kSkipNames[kSkips] = {"foreign-work", "resume-limit", "resume-oom-callback", "stale-handles",
                                        "retired-pause", "destroy-drain", "sync-held-wait", "tiny-fraction",
                                        "tag-stats", "resume-slab"};
struct Skips {
  bool on[kSkips] = {};
  Skips() {
    const char* e = std::getenv("FUZZ_SKIP");
    std::string all = e ? e : "";
    for (int k = 0; k < kSkips; ++k)
      if (all == "all" || ("," + all + ",").find(std::string(",") + kSkipNames[k] + ",") != std::string::npos)
        on[k] = true;
  }
};
const Skips g_skip;
bool skip(Skip n) { return g_skip.on[n]; }

// Operations run, reported at exit (libFuzzer exits through exit()).
std::atomic<uint64_t> g_ops{0};
std::atomic<uint64_t> g_inputs{0};
struct Report {
  ~Report() {
    std::fprintf(stderr, "fuzz_ops: %llu operations over %llu inputs\n",
                 static_cast<unsigned long long>(g_ops.load()), static_cast<unsigned long long>(g_inputs.load()));
  }
} g_report;

constexpr int kStreams = 4;  // slot 0 = default stream (NULL), 1..3 = host streams
constexpr uint64_t kCapacity = 16ull << 20;
constexpr size_t kMaxDead = 64;

struct Block {
  void* p = nullptr;
  uint64_t size = 0;
  uint64_t seed = 0;
  int stream = 0;
  const char* tag = nullptr;  // "a", "b" or nullptr
  bool backup = false;
  bool discarded = false;  // paused without a backup: bytes gone by design
  bool orphan = false;     // its stream was destroyed: a pause waits for no other stream's work on it
};

// Counts the kernels a stream ran; shared with the jobs, which may outlive
// the stream's slot (a destroy that returns early lets them run later).
using Counter = std::shared_ptr<std::atomic<uint64_t>>;

struct Job {
  unsigned char* p;
  uint64_t size;
  uint64_t seed;
  Counter done;
};

unsigned char pattern(uint64_t seed, uint64_t i) {
  return static_cast<unsigned char>((seed * 0x9E3779B97F4A7C15ull + i * 0x100000001B3ull) >> 56);
}

// The bytes a kernel touches: the first and last 64 and one in every 509
// (a prime stride, so every 4 KiB page is sampled at varying offsets).
// Whole buffers cost too much under ASan and coverage instrumentation.
template <class F>
void for_sampled(uint64_t size, F&& f) {
  for (uint64_t i = 0; i < size && i < 64; ++i) f(i);
  for (uint64_t i = 64; i + 64 < size; i += 509) f(i);
  for (uint64_t i = size > 64 ? size - 64 : 64; i < size; ++i) f(i);
}

void fill_kernel(void* u) {
  Job* j = static_cast<Job*>(u);
  for_sampled(j->size, [j](uint64_t i) { j->p[i] = pattern(j->seed, i); });
  j->done->fetch_add(1);
  delete j;
}

void noop_kernel(void*) {}

void verify_kernel(void* u) {
  Job* j = static_cast<Job*>(u);
  for_sampled(j->size, [j](uint64_t i) {
    if (j->p[i] != pattern(j->seed, i)) {
      std::fprintf(stderr, "FUZZ: verify kernel: allocation %p (%llu bytes) byte %llu is wrong\n",
                   static_cast<void*>(j->p), static_cast<unsigned long long>(j->size),
                   static_cast<unsigned long long>(i));
      std::abort();
    }
  });
  j->done->fetch_add(1);
  delete j;
}

struct Slot {
  vpmm_stream s = nullptr;
  int holds = 0;
  bool pool_made = false;  // from vpmm_pool_stream_create: destroyed through the pool
  bool tagged = false;     // a tagged allocation was made on it (kRetiredPause)
  uint64_t launched = 0;
  Counter done = std::make_shared<std::atomic<uint64_t>>(0);
};

// The PyTorch hooks' side of an input (kind 31): the default pool of device 0
// and three host streams of its own (never the World's slots: the default
// pool outlives every input, so its streams are retired from it at the end).
constexpr int kTorchStreams = 3;
struct TorchBlock {
  void* p = nullptr;
  uint64_t size = 0;
  uint64_t seed = 0;
  int stream = 0;
};
struct TorchSide {
  bool tried = false;
  vpmm_pool* pool = nullptr;  // null: no host default pool here (a GPU machine): kind 31 does nothing
  vpmm_stream s[kTorchStreams] = {};
  int holds[kTorchStreams] = {};
  uint64_t launched[kTorchStreams] = {};
  Counter done[kTorchStreams];
  std::vector<TorchBlock> blocks;
};

struct World {
  vpmm_pool* pool = nullptr;
  TorchSide torch;
  Slot slots[kStreams];
  std::vector<Block> blocks;
  std::vector<vpmm_reservation*> reservations;
  std::vector<vpmm_reservation*> released;  // stale reservation handles
  std::vector<vpmm_stream> dead;            // stale stream handles
  uint64_t next_seed = 1;
  uint64_t page = 0;
  uint64_t limit = 0;         // explicit limit in force (0 = none)
  uint64_t config_cap = 0;    // the cap pool creation must enforce (0 = none)
  int scopes = 0;
  const char* scope_tag = nullptr;
  uint32_t scope_flags = 0;
  int last_pressure = 0;  // transitions alternate 1, 0, 1, ...
  int oom_calls = 0;
  bool in_oom = false;
  bool limit_check = true;  // off for good once a resume may have mapped past the limit (kResumeLimit)
  std::thread releaser;
  bool used_tag[2] = {};

  vpmm_stream st(int slot) const { return slots[slot].s; }
  bool any_held() const {
    for (const Slot& s : slots)
      if (s.holds) return true;
    return false;
  }
  void launch(int slot, void (*fn)(void*), const Block& b) {
    Job* j = new Job{static_cast<unsigned char*>(b.p), b.size, b.seed, slots[slot].done};
    vpmm_status st = vpmm_host_stream_launch(slots[slot].s, fn, j);
    FZ_CHECK(st == VPMM_OK, "launch on slot %d", slot);
    ++slots[slot].launched;
  }
  // Drains one stream. False when it cannot drain now (held, or waiting on
  // a held stream: the host streams answer WRONG_STATE instead of blocking).
  bool drain(int slot) {
    if (slots[slot].holds) return false;
    if (skip(kSyncHeldWait) && any_held()) return false;
    vpmm_status st = vpmm_host_stream_synchronize(slots[slot].s);
    FZ_CHECK(st == VPMM_OK || (st == VPMM_ERR_WRONG_STATE && any_held()), "synchronize slot %d -> %d", slot, st);
    if (st == VPMM_OK)
      FZ_CHECK(slots[slot].done->load() == slots[slot].launched, "slot %d synchronized with %llu of %llu kernels run",
               slot, (unsigned long long)slots[slot].done->load(), (unsigned long long)slots[slot].launched);
    return st == VPMM_OK;
  }
  void sync_all() {
    FZ_CHECK(!any_held(), "sync_all with a held stream");
    for (int s = 0; s < kStreams; ++s) FZ_CHECK(drain(s), "synchronize slot %d", s);
  }
  // Every hold is released by a helper thread after `us` microseconds, so
  // that a call that waits for held work can be made now (join_releaser
  // after it). The helper also reads the pool's configuration and stats
  // while that call runs: both are documented as safe from any thread.
  void release_later(unsigned us) {
    std::vector<std::pair<vpmm_stream, int>> todo;
    for (Slot& s : slots)
      if (s.holds) {
        todo.push_back({s.s, s.holds});
        s.holds = 0;
      }
    vpmm_pool* p = pool;
    releaser = std::thread([todo, us, p] {
      // Releases first: the call may hold the pool's lock while it waits
      // for the held work, and these reads take that lock.
      if (!todo.empty()) {
        std::this_thread::sleep_for(std::chrono::microseconds(us));
        for (const auto& t : todo)
          for (int k = 0; k < t.second; ++k)
            FZ_CHECK(vpmm_host_stream_release(t.first) == VPMM_OK, "delayed release");
      }
      vpmm_config c;
      std::memset(&c, 0, sizeof c);
      c.struct_size = sizeof c;
      FZ_CHECK(vpmm_pool_get_config(p, &c) == VPMM_OK, "get_config from another thread");
      vpmm_stats st;
      std::memset(&st, 0, sizeof st);
      st.struct_size = sizeof st;
      FZ_CHECK(vpmm_pool_stats(p, &st) == VPMM_OK, "stats from another thread");
    });
  }
  void join_releaser() {
    if (releaser.joinable()) releaser.join();
  }
  // Frees blocks[i] on stream slot `on` in stream order (a verify first,
  // queued on the freeing stream: the work that still uses the memory).
  void free_block(size_t i, int on) {
    Block b = blocks[i];
    blocks.erase(blocks.begin() + static_cast<long>(i));
    bool paused = is_paused(b);
    VLOG("  free %p (%llu bytes, seed %llu, tag %s, slot %d%s%s) on slot %d%s\n", b.p, (unsigned long long)b.size,
         (unsigned long long)b.seed, b.tag ? b.tag : "-", b.stream, paused ? ", paused" : "",
         b.discarded ? ", discarded" : "", on, slots[on].holds ? " (held)" : "");
    if (!paused && !b.discarded) launch(on, verify_kernel, b);
    vpmm_status st = vpmm_pool_free(pool, b.p, st_(on));
    FZ_CHECK(st == VPMM_OK, "free of %p on slot %d", b.p, on);
    // Looking past the pause that does not wait for the freeing stream:
    // let the queued work finish now.
    if (skip(kForeignWork) && on != b.stream && !slots[on].holds) drain(on);
  }
  vpmm_stream st_(int slot) const { return slots[slot].s; }
  std::vector<vpmm_region_info> dump() {
    size_t n = 0;
    FZ_CHECK(vpmm_pool_dump(pool, nullptr, 0, &n) == VPMM_OK, "dump");
    vpmm_region_info proto{};
    proto.struct_size = sizeof proto;
    std::vector<vpmm_region_info> r(n + 16, proto);
    FZ_CHECK(vpmm_pool_dump(pool, r.data(), r.size(), &n) == VPMM_OK, "dump");
    r.resize(n < r.size() ? n : r.size());
    return r;
  }
  static bool paused_in(const std::vector<vpmm_region_info>& r, const Block& b) {
    uint64_t va = reinterpret_cast<uint64_t>(b.p);
    size_t lo = 0, hi = r.size();
    while (lo < hi) {  // the dump is in ascending VA order
      size_t mid = (lo + hi) / 2;
      if (r[mid].va + r[mid].size <= va) lo = mid + 1;
      else hi = mid;
    }
    return lo < r.size() && va >= r[lo].va && r[lo].kind == VPMM_REGION_PAUSED;
  }
  bool is_paused(const Block& b) { return paused_in(dump(), b); }
  void note_discarded() {
    std::vector<vpmm_region_info> r = dump();
    for (Block& b : blocks)
      if (!b.backup && b.tag && paused_in(r, b)) b.discarded = true;
  }
  bool is_dead(vpmm_stream s) const {
    for (vpmm_stream d : dead)
      if (d == s) return true;
    return false;
  }
  void add_dead(vpmm_stream s) {
    if (dead.size() >= kMaxDead) dead.erase(dead.begin());
    dead.push_back(s);
  }
  bool is_released(const vpmm_reservation* r) const {
    for (const vpmm_reservation* d : released)
      if (d == r) return true;
    return false;
  }
  void add_released(vpmm_reservation* r) {
    if (released.size() >= kMaxDead) released.erase(released.begin());
    released.push_back(r);
  }
  // Reads every active allocation on the CPU (only when all is quiet).
  void cpu_check() {
    sync_all();
    std::vector<vpmm_region_info> r = dump();
    for (const Block& b : blocks) {
      if (b.discarded || paused_in(r, b)) continue;
      const unsigned char* q = static_cast<const unsigned char*>(b.p);
      for_sampled(b.size, [&](uint64_t i) {
        FZ_CHECK(q[i] == pattern(b.seed, i), "allocation %p (%llu bytes, tag %s) byte %llu is wrong", b.p,
                 (unsigned long long)b.size, b.tag ? b.tag : "-", (unsigned long long)i);
      });
    }
  }
};

int on_oom(vpmm_pool*, uint64_t, void* user) {
  World* w = static_cast<World*>(user);
  ++w->oom_calls;
  if (w->in_oom || w->blocks.empty()) return 0;
  // Spill: free the oldest allocation, then ask for a retry.
  w->in_oom = true;
  w->free_block(0, w->blocks[0].stream);
  w->in_oom = false;
  return 1;
}

void on_pressure(vpmm_pool*, int under, uint64_t, void* user) {
  World* w = static_cast<World*>(user);
  FZ_CHECK(under == (w->last_pressure ? 0 : 1), "pressure transitions must alternate (got %d)", under);
  w->last_pressure = under;
}

vpmm_stats get_stats(vpmm_pool* p) {
  vpmm_stats st;
  std::memset(&st, 0, sizeof st);
  st.struct_size = sizeof st;
  FZ_CHECK(vpmm_pool_stats(p, &st) == VPMM_OK, "stats");
  return st;
}

void check_world(World& w) {
  FZ_CHECK(vpmm_pool_check(w.pool) == VPMM_OK, "pool invariants");
  vpmm_stats st = get_stats(w.pool);
  uint64_t requested = 0;
  for (const Block& b : w.blocks) requested += b.size;
  FZ_CHECK(st.n_live == w.blocks.size(), "n_live %llu, model %zu", (unsigned long long)st.n_live,
           w.blocks.size());
  FZ_CHECK(st.requested_bytes == requested, "requested %llu, model %llu",
           (unsigned long long)st.requested_bytes, (unsigned long long)requested);
  FZ_CHECK(st.mapped_bytes <= kCapacity, "mapped %llu beyond the host capacity",
           (unsigned long long)st.mapped_bytes);
  if (w.limit_check) {
    if (w.limit)
      FZ_CHECK(st.mapped_bytes <= w.limit, "mapped %llu beyond the limit %llu", (unsigned long long)st.mapped_bytes,
               (unsigned long long)w.limit);
    if (w.config_cap)
      FZ_CHECK(st.mapped_bytes <= w.config_cap, "mapped %llu beyond the configured cap %llu",
               (unsigned long long)st.mapped_bytes, (unsigned long long)w.config_cap);
  }
  FZ_CHECK(st.under_pressure == static_cast<uint64_t>(w.last_pressure), "pressure flag %llu, callbacks say %d",
           (unsigned long long)st.under_pressure, w.last_pressure);
  for (const Block& b : w.blocks) {
    void* base = nullptr;
    uint64_t size = 0;
    FZ_CHECK(vpmm_pool_lookup(w.pool, b.p, &base, &size) == VPMM_OK, "lookup of %p", b.p);
    FZ_CHECK(base == b.p && size == b.size, "lookup of %p gave %p/%llu", b.p, base,
             (unsigned long long)size);
    if (b.size > 1) {
      void* mid = static_cast<char*>(b.p) + b.size / 2;
      FZ_CHECK(vpmm_pool_lookup(w.pool, mid, &base, &size) == VPMM_OK && base == b.p,
               "interior lookup of %p", mid);
    }
  }
}

// What a refused call must leave as it was (byte counts of slabs may move
// on their own as other streams' work completes).
struct Counts {
  uint64_t n_live, requested, n_malloc, n_free, reserved, n_pause, n_resume, paused;
};
Counts counts(vpmm_pool* p) {
  vpmm_stats s = get_stats(p);
  return {s.n_live, s.requested_bytes, s.n_malloc, s.n_free, s.reserved_bytes, s.n_pause, s.n_resume,
          s.paused_bytes};
}
bool same(const Counts& a, const Counts& b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// The limit set at run time replaces the caps given at creation.
void set_limit_model(World& w, uint64_t lim) {
  w.limit = lim;
  w.config_cap = 0;
}

const char* pick_tag(uint8_t v) { return v % 3 == 0 ? "a" : v % 3 == 1 ? "b" : nullptr; }

// A new stream for a slot: a host stream, or one the pool makes. It must not
// be the value of any stream destroyed before (a stale handle would then
// act on it).
void new_stream(World& w, int slot, bool through_pool) {
  Slot& s = w.slots[slot];
  s = Slot();
  vpmm_status st = through_pool ? vpmm_pool_stream_create(w.pool, &s.s) : vpmm_host_stream_create(&s.s);
  FZ_CHECK(st == VPMM_OK, "stream create (%s)", through_pool ? "pool" : "host");
  s.pool_made = through_pool;
  if (!skip(kStaleHandles)) FZ_CHECK(!w.is_dead(s.s), "new stream %p has the value of a destroyed one", s.s);
}

// Retire and destroy the stream of a slot in the middle of everything (held,
// with work queued, with live and freed allocations), then put a new stream
// in its place.
void retire_destroy(World& w, int slot, uint8_t how) {
  Slot& s = w.slots[slot];
  if (skip(kRetiredPause)) {
    if (s.tagged) return;
    for (const Block& b : w.blocks)
      if (b.stream == slot && b.tag) return;
  }
  if (skip(kDestroyDrain) || skip(kSyncHeldWait)) {
    if (w.any_held()) return;
    w.sync_all();
  }
  // Destroy drains the stream even when held; one whose work waits on
  // another held stream refuses until the helper has released that one.
  s.holds = 0;  // destroy drops the stream's own holds
  const bool others_held = w.any_held();
  vpmm_stream old = s.s;
  VLOG("  destroy slot %d (%p, %s)\n", slot, old, s.pool_made ? "pool made" : "host");
  const bool through_pool = s.pool_made && (how & 8);
  vpmm_status st;
  if (through_pool) {
    st = vpmm_pool_stream_destroy(w.pool, old);
  } else {
    FZ_CHECK(vpmm_pool_stream_retire(w.pool, old) == VPMM_OK, "retire");
    st = vpmm_host_stream_destroy(old);
  }
  w.release_later(100 + (how % 8) * 100);
  // A destroy that would wait on a held stream refuses (the stream stays
  // alive); once the holds are gone it drains.
  FZ_CHECK(st == VPMM_OK || (st == VPMM_ERR_WRONG_STATE && others_held), "stream destroy -> %d", st);
  if (st != VPMM_OK) {
    w.join_releaser();
    st = through_pool ? vpmm_pool_stream_destroy(w.pool, old) : vpmm_host_stream_destroy(old);
    FZ_CHECK(st == VPMM_OK, "stream destroy once nothing is held -> %d", st);
  }
  uint64_t done = s.done->load();
  w.join_releaser();
  FZ_CHECK(done == s.launched, "stream destroy returned with %llu of %llu kernels run",
           (unsigned long long)done, (unsigned long long)s.launched);
  w.add_dead(old);
  // Live allocations of the old stream are used in the default stream's
  // order from now on: their work has run.
  for (Block& b : w.blocks)
    if (b.stream == slot) {
      b.stream = 0;
      b.orphan = true;
    }
  // The stale handle, right away: rejected by every call that takes a stream.
  if (!skip(kStaleHandles)) {
    void* p = reinterpret_cast<void*>(0x5e47);
    FZ_CHECK(vpmm_pool_malloc(w.pool, 100, old, &p) == VPMM_ERR_INVALID_ARGUMENT, "malloc on a destroyed stream");
    FZ_CHECK(p == reinterpret_cast<void*>(0x5e47), "malloc wrote *out on error");
    FZ_CHECK(vpmm_pool_stream_synchronize(w.pool, old) == VPMM_ERR_INVALID_ARGUMENT, "sync of a destroyed stream");
  }
  new_stream(w, slot, (how & 16) != 0);
}

// One call with a stale handle (a destroyed stream or a released
// reservation): INVALID_ARGUMENT (retire: OK, a no-op), and nothing changes.
void stale_call(World& w, fz::Reader& in) {
  if (skip(kStaleHandles)) return;
  uint8_t k = in.u8();
  Counts before = counts(w.pool);
  vpmm_status st;
  if ((k & 1) && !w.dead.empty()) {
    vpmm_stream d = w.dead[in.u8() % w.dead.size()];
    switch ((k >> 1) % 9) {
      case 0: {
        void* p = reinterpret_cast<void*>(0x5e47);
        st = vpmm_pool_malloc(w.pool, 1 + in.u16(), d, &p);
        FZ_CHECK(p == reinterpret_cast<void*>(0x5e47), "malloc wrote *out on error");
        break;
      }
      case 1: {
        if (w.blocks.empty()) return;
        const Block& b = w.blocks[in.u8() % w.blocks.size()];
        st = vpmm_pool_free(w.pool, b.p, d);
        break;
      }
      case 2: st = vpmm_pool_stream_synchronize(w.pool, d); break;
      case 3: st = vpmm_pool_stream_destroy(w.pool, d); break;
      case 4: st = vpmm_host_stream_hold(d); break;
      case 5: st = vpmm_host_stream_release(d); break;
      case 6: st = vpmm_host_stream_launch(d, noop_kernel, nullptr); break;
      case 7: st = vpmm_host_stream_destroy(d); break;
      default:
        FZ_CHECK(vpmm_pool_stream_retire(w.pool, d) == VPMM_OK, "retire of a destroyed stream is a no-op");
        st = VPMM_ERR_INVALID_ARGUMENT;
        break;
    }
    VLOG("  stale stream %p call %d -> %d\n", d, (k >> 1) % 9, st);
    FZ_CHECK(st == VPMM_ERR_INVALID_ARGUMENT, "call %d with destroyed stream %p returned %d", (k >> 1) % 9, d, st);
  } else if (!w.released.empty()) {
    vpmm_reservation* r = w.released[in.u8() % w.released.size()];
    switch ((k >> 1) % 3) {
      case 0: {
        uint64_t a = 7, b = 7;
        st = vpmm_reservation_info(w.pool, r, &a, &b);
        break;
      }
      case 1: st = vpmm_reservation_release(w.pool, r); break;
      default: {
        vpmm_alloc_attrs a;
        std::memset(&a, 0, sizeof a);
        a.struct_size = sizeof a;
        a.reservation = r;
        void* p = reinterpret_cast<void*>(0x5e47);
        st = vpmm_pool_malloc_ex(w.pool, w.page, nullptr, &a, &p);
        FZ_CHECK(p == reinterpret_cast<void*>(0x5e47), "malloc_ex wrote *out on error");
        break;
      }
    }
    VLOG("  stale reservation %p call %d -> %d\n", static_cast<void*>(r), (k >> 1) % 3, st);
    FZ_CHECK(st == VPMM_ERR_INVALID_ARGUMENT, "call %d with released reservation %p returned %d", (k >> 1) % 3,
             static_cast<void*>(r), st);
  } else {
    return;
  }
  FZ_CHECK(same(before, counts(w.pool)), "a call with a stale handle changed the pool");
  for (vpmm_reservation* r : w.reservations) {
    uint64_t a = 0, b = 0;
    FZ_CHECK(vpmm_reservation_info(w.pool, r, &a, &b) == VPMM_OK, "live reservation lost");
  }
}

// A pause, resume, trim or new limit while streams may be held: the holds
// are released a little later by a helper thread.
vpmm_status blocking(World& w, unsigned delay_us, vpmm_status (*fn)(World&, const char*, uint64_t),
                     const char* tag, uint64_t arg) {
  w.release_later(delay_us);
  vpmm_status st = fn(w, tag, arg);
  w.join_releaser();
  return st;
}
vpmm_status do_pause(World& w, const char* tag, uint64_t) { return vpmm_pool_pause(w.pool, tag); }
vpmm_status do_resume(World& w, const char* tag, uint64_t) {
  // Looking past kResumeSlab: empty paused slabs go before the resume runs.
  if (skip(kResumeSlab)) FZ_CHECK(vpmm_pool_trim(w.pool, UINT64_MAX) == VPMM_OK, "trim");
  return vpmm_pool_resume(w.pool, tag);
}
vpmm_status do_trim(World& w, const char*, uint64_t keep) { return vpmm_pool_trim(w.pool, keep); }
vpmm_status do_limit(World& w, const char*, uint64_t lim) { return vpmm_pool_set_limit(w.pool, lim); }

void check_pause_status(World& w, vpmm_status st, const char* tag) {
  // A tag no allocation ever had is unknown to the pool.
  bool known = tag == nullptr || w.used_tag[tag[0] - 'a'];
  FZ_CHECK(st == VPMM_OK || st == VPMM_ERR_OUT_OF_MEMORY || (st == VPMM_ERR_INVALID_ARGUMENT && !known),
           "pause(%s) returned %d", tag ? tag : "NULL", st);
  w.note_discarded();
}

void check_resume_status(World& w, vpmm_status st, const char* tag, int oom_before) {
  if (skip(kResumeLimit)) w.limit_check = false;
  bool known = tag == nullptr || w.used_tag[tag[0] - 'a'];
  FZ_CHECK(st == VPMM_OK || st == VPMM_ERR_OUT_OF_MEMORY || (st == VPMM_ERR_INVALID_ARGUMENT && !known),
           "resume(%s) returned %d", tag ? tag : "NULL", st);
  if (st == VPMM_ERR_OUT_OF_MEMORY && !skip(kResumeOomCb))
    FZ_CHECK(w.oom_calls > oom_before, "resume ran out of memory without calling the OOM callback");
}

// Work queued on a stream still uses a block when the block is freed (on
// that stream) or, on its own stream, rewrites it; then the block's tag is
// paused (or free memory trimmed) while the stream is held. The pause or
// trim must wait for that work.
void queued_then_pause(World& w, fz::Reader& in, int slot) {
  if (w.blocks.empty()) return;
  size_t i = in.u16() % w.blocks.size();
  uint8_t how = in.u8();
  Block& b = w.blocks[i];
  if (b.discarded || w.is_paused(b)) return;
  const bool foreign = slot != b.stream;
  if (foreign && skip(kForeignWork)) return;
  // Work on an orphan's new stream is not the allocation's stream work: a
  // program synchronises it before a pause, as with any other stream.
  if (!foreign && b.orphan) return;
  // The block's fill must have run before other work reads it.
  if (foreign && !w.drain(b.stream)) return;
  FZ_CHECK(vpmm_host_stream_hold(w.st(slot)) == VPMM_OK, "hold");
  ++w.slots[slot].holds;
  const char* tag = b.tag;
  if (foreign) {
    w.free_block(i, slot);  // verify queued on the held stream, then the free
  } else {
    b.seed = w.next_seed++;  // the queued kernel rewrites the block
    VLOG("  rewrite %p (%llu bytes) with seed %llu on slot %d\n", b.p, (unsigned long long)b.size,
         (unsigned long long)b.seed, slot);
    w.launch(slot, fill_kernel, b);
  }
  unsigned delay = 200 + (how % 8) * 200;
  vpmm_status st;
  if (tag && !(how & 8)) {
    VLOG("  queued work on slot %d (%s), then pause(%s)\n", slot, foreign ? "free" : "rewrite", tag);
    st = blocking(w, delay, do_pause, (how & 16) ? nullptr : tag, 0);
    check_pause_status(w, st, (how & 16) ? nullptr : tag);
    if (how & 32) {
      int oom_before = w.oom_calls;
      st = do_resume(w, (how & 16) ? nullptr : tag, 0);
      check_resume_status(w, st, (how & 16) ? nullptr : tag, oom_before);
    }
  } else {
    VLOG("  queued work on slot %d (%s), then trim\n", slot, foreign ? "free" : "rewrite");
    st = blocking(w, delay, do_trim, nullptr, (how >> 6) * w.page);
    FZ_CHECK(st == VPMM_OK, "trim returned %d", st);
  }
  FZ_CHECK(w.drain(slot), "drain slot %d", slot);
}

// Resume everything paused under a limit just above what is mapped now:
// several allocations that each fit alone must not all be mapped.
void tight_resume(World& w, fz::Reader& in) {
  uint8_t k = in.u8();
  vpmm_stats st0 = get_stats(w.pool);
  if (st0.paused_bytes == 0) return;
  const char* tag = pick_tag(k >> 4);
  uint64_t lim = st0.mapped_bytes + (k % 8) * w.page;
  if (lim < w.page) lim = w.page;
  if (w.config_cap && lim > w.config_cap) lim = w.config_cap;
  vpmm_status st = blocking(w, 100, do_limit, nullptr, lim);
  VLOG("  tight limit %llu (mapped %llu, paused %llu) -> %d\n", (unsigned long long)lim,
       (unsigned long long)st0.mapped_bytes, (unsigned long long)st0.paused_bytes, st);
  FZ_CHECK(st == VPMM_OK || st == VPMM_ERR_WRONG_STATE, "set_limit returned %d", st);
  if (st != VPMM_OK) return;
  set_limit_model(w, lim);
  if (g_verbose) {
    static char text[1 << 16];
    size_t need = 0;
    if (vpmm_pool_dump_text(w.pool, text, sizeof text, &need) == VPMM_OK) VLOG("  %s\n", text);
  }
  int oom_before = w.oom_calls;
  st = blocking(w, 100, do_resume, tag, 0);
  VLOG("  resume(%s) under the limit -> %d\n", tag ? tag : "NULL", st);
  check_resume_status(w, st, tag, oom_before);
  if (k & 8) {
    // Lift the limit: what stayed paused comes back with its bytes.
    FZ_CHECK(vpmm_pool_set_limit(w.pool, 0) == VPMM_OK, "set_limit(0)");
    set_limit_model(w, 0);
    st = do_resume(w, nullptr, 0);
    FZ_CHECK(st == VPMM_OK || st == VPMM_ERR_OUT_OF_MEMORY, "resume after the limit was lifted -> %d", st);
    w.cpu_check();
  }
}

bool torch_start(TorchSide& t) {
  if (t.tried) return t.pool != nullptr;
  t.tried = true;
  vpmm_pool* dp = nullptr;
  if (vpmm_default_pool(0, &dp) != VPMM_OK || std::strcmp(vpmm_pool_backend_name(dp), "host") != 0) return false;
  for (int k = 0; k < kTorchStreams; ++k) {
    FZ_CHECK(vpmm_host_stream_create(&t.s[k]) == VPMM_OK, "torch stream create");
    t.done[k] = std::make_shared<std::atomic<uint64_t>>(0);
  }
  t.pool = dp;
  return true;
}

void torch_launch(TorchSide& t, int k, void (*fn)(void*), const TorchBlock& b) {
  Job* j = new Job{static_cast<unsigned char*>(b.p), b.size, b.seed, t.done[k]};
  FZ_CHECK(vpmm_host_stream_launch(t.s[k], fn, j) == VPMM_OK, "torch launch on %d", k);
  ++t.launched[k];
}

// Whether torch stream k has run everything queued on it (false: held, or
// waiting on a held stream through a wait the pool inserted).
bool torch_drain(TorchSide& t, int k) {
  if (t.holds[k]) return false;
  vpmm_status st = vpmm_host_stream_synchronize(t.s[k]);
  FZ_CHECK(st == VPMM_OK || st == VPMM_ERR_WRONG_STATE, "torch synchronize %d -> %d", k, st);
  return st == VPMM_OK;
}

void torch_free(TorchSide& t, size_t i) {
  TorchBlock b = t.blocks[i];
  t.blocks.erase(t.blocks.begin() + static_cast<long>(i));
  // Its last use, queued on the allocating stream (held: still to run).
  torch_launch(t, b.stream, verify_kernel, b);
  VLOG("  torch free %p (%llu bytes) on stream %d%s\n", b.p, (unsigned long long)b.size, b.stream,
       t.holds[b.stream] ? " (held)" : "");
  vpmm_torch_free(b.p, static_cast<ptrdiff_t>(b.size), 0, t.s[b.stream]);
}

void torch_op(World& w, fz::Reader& in) {
  TorchSide& t = w.torch;
  if (!torch_start(t)) return;
  // The byte: what (bits 0-2), stream k (bits 3-4), stream j (bits 5-6),
  // a flag (bit 7).
  const uint8_t b = in.u8();
  const int k = ((b >> 3) & 3) % kTorchStreams, j = ((b >> 5) & 3) % kTorchStreams;
  switch (b & 7) {
    case 0:
    case 1:
    case 5: {  // a tensor on stream k, written there at once
      const uint16_t r = in.u16();
      const uint64_t sz = (r & 1) ? ((r >> 1) % 2048 + 1) * 64 : (((r >> 1) % 4) + 1) * (1ull << 20) - (r >> 3) % 2 * 100;
      void* p = vpmm_torch_malloc(static_cast<ptrdiff_t>(sz), 0, t.s[k]);
      VLOG("  torch malloc(%llu) on stream %d -> %p\n", (unsigned long long)sz, k, p);
      if (!p) break;  // out of memory: PyTorch raises
      TorchBlock blk;
      blk.p = p;
      blk.size = sz;
      blk.seed = w.next_seed++;
      blk.stream = k;
      t.blocks.push_back(blk);
      torch_launch(t, k, fill_kernel, blk);
      break;
    }
    case 2: {  // used on stream j too: Tensor.record_stream, and j's read queued
      if (t.blocks.empty()) break;
      const TorchBlock& blk = t.blocks[in.u8() % t.blocks.size()];
      // The program orders j's read after the tensor's writes (an event,
      // wait_stream): here the allocating stream runs them first.
      if (j != blk.stream && torch_drain(t, blk.stream)) torch_launch(t, j, verify_kernel, blk);
      vpmm_torch_record_stream(blk.p, t.s[j]);
      break;
    }
    case 3:
    case 6: {  // freed by PyTorch on its allocating stream
      if (t.blocks.empty()) break;
      torch_free(t, in.u8() % t.blocks.size());
      break;
    }
    case 4:  // hold or release stream k
      if ((b & 0x80) && t.holds[k]) {
        FZ_CHECK(vpmm_host_stream_release(t.s[k]) == VPMM_OK, "torch release");
        --t.holds[k];
      } else if (t.holds[k] < 2) {
        FZ_CHECK(vpmm_host_stream_hold(t.s[k]) == VPMM_OK, "torch hold");
        ++t.holds[k];
      }
      break;
    default: {  // every hold released; once all drained, the CPU reads every tensor
      for (int x = 0; x < kTorchStreams; ++x)
        for (; t.holds[x]; --t.holds[x]) FZ_CHECK(vpmm_host_stream_release(t.s[x]) == VPMM_OK, "torch release");
      for (int x = 0; x < kTorchStreams; ++x) {
        FZ_CHECK(torch_drain(t, x), "torch stream %d does not drain with nothing held", x);
        FZ_CHECK(t.done[x]->load() == t.launched[x], "torch stream %d ran %llu of %llu kernels", x,
                 (unsigned long long)t.done[x]->load(), (unsigned long long)t.launched[x]);
      }
      for (const TorchBlock& blk : t.blocks) {
        const unsigned char* q = static_cast<const unsigned char*>(blk.p);
        for_sampled(blk.size, [&](uint64_t i) {
          FZ_CHECK(q[i] == pattern(blk.seed, i), "tensor %p (%llu bytes) byte %llu is wrong", blk.p,
                   (unsigned long long)blk.size, (unsigned long long)i);
        });
      }
      break;
    }
  }
}

// The end of an input: every tensor freed, the streams drained, retired from
// the default pool (which outlives the input) and destroyed.
void torch_end(TorchSide& t) {
  if (!t.pool) return;
  for (int x = 0; x < kTorchStreams; ++x)
    for (; t.holds[x]; --t.holds[x]) FZ_CHECK(vpmm_host_stream_release(t.s[x]) == VPMM_OK, "torch release");
  while (!t.blocks.empty()) torch_free(t, t.blocks.size() - 1);
  for (int x = 0; x < kTorchStreams; ++x) FZ_CHECK(torch_drain(t, x), "torch stream %d drains at the end", x);
  FZ_CHECK(vpmm_pool_check(t.pool) == VPMM_OK, "default pool invariants");
  for (int x = 0; x < kTorchStreams; ++x) {
    FZ_CHECK(vpmm_pool_stream_retire(t.pool, t.s[x]) == VPMM_OK, "torch stream retire");
    FZ_CHECK(vpmm_host_stream_destroy(t.s[x]) == VPMM_OK, "torch stream destroy");
  }
  t.pool = nullptr;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fz::Reader in(data, size);
  World w;
  g_inputs.fetch_add(1, std::memory_order_relaxed);
  static const uint64_t kPages[] = {4 << 10, 16 << 10, 64 << 10, 32 << 10};
  vpmm_config c;
  vpmm_config_init(&c);
  c.backend = VPMM_BACKEND_HOST;
  uint8_t shape = in.u8();
  c.page_size = kPages[shape % 4];
  c.va_size = c.page_size * (16 + (in.u8() % 4) * 64);  // small chunks: several get reserved
  c.host_capacity = kCapacity;
  const uint8_t initial = in.u8();
  c.initial_pages = initial % 8;
  // Views: the default (64 MiB: none in this 16 MiB pool), over 2 or 8
  // pages, or off.
  static const uint64_t kViewPages[] = {0, 2, 8, UINT64_MAX};
  const uint64_t view_pages = kViewPages[(initial >> 3) % 4];
  if (view_pages == UINT64_MAX)
    c.view_min_size = VPMM_VIEWS_OFF;
  else if (view_pages)
    c.view_min_size = view_pages * c.page_size;
  c.max_handle_size = (shape >> 2) % 3 == 0 ? 0 : (shape >> 2) % 3 == 1 ? c.page_size : 4 * c.page_size;
  c.small_size = (shape >> 4) % 2 ? 1 : 0;  // 1 = small allocator off
  c.backup_cache_size = (shape >> 5) % 2 ? c.page_size : 0;
  c.large_rounding = (shape >> 6) % 2 ? 512 : 0;  // shared pages, as in the default pools
  // Limits given at creation: an explicit cap, a fraction of the capacity
  // (tiny ones included), both (the smaller wins).
  uint8_t lim = in.u8();
  if (lim & 1) c.memory_limit = (8 + (lim >> 3) % 32 * 8) * c.page_size;
  if ((lim & 6) == 2 && !skip(kTinyFraction)) c.memory_limit_fraction = 1e-9;
  if ((lim & 6) == 4) c.memory_limit_fraction = 0.25;
  w.page = c.page_size;
  VLOG("pool: page %llu va %llu initial %llu max_handle %llu small_size %llu backup_cache %llu "
       "large_rounding %llu limit %llu fraction %g view_min_size %llu\n",
       (unsigned long long)c.page_size, (unsigned long long)c.va_size, (unsigned long long)c.initial_pages,
       (unsigned long long)c.max_handle_size, (unsigned long long)c.small_size,
       (unsigned long long)c.backup_cache_size, (unsigned long long)c.large_rounding,
       (unsigned long long)c.memory_limit, c.memory_limit_fraction, (unsigned long long)c.view_min_size);
  vpmm_status cst = vpmm_pool_create(&c, &w.pool);
  if (cst != VPMM_OK) {
    FZ_CHECK(cst == VPMM_ERR_INVALID_ARGUMENT && (c.memory_limit || c.memory_limit_fraction > 0),
             "pool create returned %d", cst);
    return 0;
  }
  // The cap creation promised: the explicit limit, and a fraction's share of
  // the capacity (at least a page: a pool may round a cap up to one page).
  w.config_cap = c.memory_limit;
  if (c.memory_limit_fraction > 0) {
    uint64_t f = static_cast<uint64_t>(c.memory_limit_fraction * static_cast<double>(kCapacity));
    if (f < w.page) f = w.page;
    if (!w.config_cap || f < w.config_cap) w.config_cap = f;
  }
  for (int s = 1; s < kStreams; ++s) new_stream(w, s, false);
  vpmm_pool_set_oom_callback(w.pool, on_oom, &w);
  vpmm_pool_set_pressure_callback(w.pool, on_pressure, &w);

  int ops = 0;
  while (!in.empty() && ops++ < 256) {
    g_ops.fetch_add(1, std::memory_order_relaxed);
    const uint8_t op = in.u8();
    const int kind = op & 31;
    const int slot = (op >> 5) & 3;
    const bool flag = (op >> 7) != 0;
    VLOG("op %u (kind %d) slot %d flag %d; holds %d%d%d%d, %zu blocks\n", op, kind, slot, flag, w.slots[0].holds,
         w.slots[1].holds, w.slots[2].holds, w.slots[3].holds, w.blocks.size());
    switch (kind) {
      case 0:
      case 1:
      case 2:
      case 3: {  // malloc (small or pages), possibly tagged
        uint16_t r = in.u16();
        uint64_t sz = (r & 1) ? (r >> 1) % 4096 + 1 : ((r >> 1) % 48 + 1) * w.page - ((r >> 7) % 2) * 100;
        void* p = nullptr;
        Block b;
        vpmm_status st;
        const bool ex = kind >= 2;
        if (ex) {
          vpmm_alloc_attrs a;
          std::memset(&a, 0, sizeof a);
          a.struct_size = sizeof a;
          uint8_t t = in.u8();
          a.tag = (t & 1) ? "a" : "b";
          a.flags = (t & 2) ? VPMM_ALLOC_HOST_BACKUP : 0;
          if ((t & 4) && !w.reservations.empty()) a.reservation = w.reservations[t % w.reservations.size()];
          b.tag = a.tag;
          b.backup = a.flags != 0;
          st = vpmm_pool_malloc_ex(w.pool, sz, w.st(slot), &a, &p);
        } else {
          if (w.scopes) {
            b.tag = w.scope_tag;
            b.backup = (w.scope_flags & VPMM_ALLOC_HOST_BACKUP) != 0;
          }
          st = vpmm_pool_malloc(w.pool, sz, w.st(slot), &p);
        }
        VLOG("  malloc%s(%llu) on slot %d -> %d %p\n", ex ? "_ex" : "", (unsigned long long)sz, slot, st, p);
        FZ_CHECK(st == VPMM_OK || st == VPMM_ERR_OUT_OF_MEMORY, "malloc(%llu) returned %d",
                 (unsigned long long)sz, st);
        if (st == VPMM_OK) {
          if (b.tag) w.used_tag[b.tag[0] - 'a'] = w.slots[slot].tagged = true;
          b.p = p;
          b.size = sz;
          b.seed = w.next_seed++;
          b.stream = slot;
          w.blocks.push_back(b);
          w.launch(slot, fill_kernel, b);
          VLOG("  seed %llu tag %s%s\n", (unsigned long long)b.seed, b.tag ? b.tag : "-", b.backup ? " backup" : "");
        }
        break;
      }
      case 4:
      case 5: {  // free on the allocating stream
        if (w.blocks.empty()) break;
        size_t i = in.u16() % w.blocks.size();
        w.free_block(i, w.blocks[i].stream);
        break;
      }
      case 6: {  // free on another stream, with the verify queued there (held or not)
        if (w.blocks.empty()) break;
        size_t i = in.u16() % w.blocks.size();
        if (skip(kForeignWork) && w.slots[slot].holds) break;
        // The other stream's read must come after the fill: the allocating
        // stream drains first.
        if (w.blocks[i].stream != slot && !w.drain(w.blocks[i].stream)) break;
        w.free_block(i, slot);
        break;
      }
      case 7:  // hold
        if (w.slots[slot].holds < 2) {
          FZ_CHECK(vpmm_host_stream_hold(w.st(slot)) == VPMM_OK, "hold");
          ++w.slots[slot].holds;
        }
        break;
      case 8:  // release
        if (w.slots[slot].holds) {
          FZ_CHECK(vpmm_host_stream_release(w.st(slot)) == VPMM_OK, "release");
          --w.slots[slot].holds;
        } else {
          FZ_CHECK(vpmm_host_stream_release(w.st(slot)) == VPMM_ERR_WRONG_STATE,
                   "release of a stream that is not held");
        }
        break;
      case 9: {  // pause, with whatever is held released a little later
        uint8_t t = in.u8();
        const char* tag = pick_tag(t);
        vpmm_status st = blocking(w, 50 + (t >> 2) % 8 * 100, do_pause, tag, 0);
        VLOG("  pause(%s) -> %d\n", tag ? tag : "NULL", st);
        check_pause_status(w, st, tag);
        break;
      }
      case 10: {  // resume
        uint8_t t = in.u8();
        const char* tag = pick_tag(t);
        int oom_before = w.oom_calls;
        vpmm_status st = blocking(w, 50 + (t >> 2) % 8 * 100, do_resume, tag, 0);
        VLOG("  resume(%s) -> %d\n", tag ? tag : "NULL", st);
        check_resume_status(w, st, tag, oom_before);
        break;
      }
      case 11: {  // trim
        uint8_t t = in.u8();
        vpmm_status st = blocking(w, 50 + (t >> 3) % 8 * 100, do_trim, nullptr, (t % 8) * w.page);
        FZ_CHECK(st == VPMM_OK, "trim returned %d", st);
        break;
      }
      case 12: {  // a new limit
        uint8_t t = in.u8();
        uint64_t lim = flag ? 0 : (t % 64 + 1) * w.page * 4;
        vpmm_status st = blocking(w, 100, do_limit, nullptr, lim);
        VLOG("  set_limit(%llu) -> %d\n", (unsigned long long)lim, st);
        FZ_CHECK(st == VPMM_OK || st == VPMM_ERR_WRONG_STATE, "set_limit returned %d", st);
        if (st == VPMM_OK) set_limit_model(w, lim);
        break;
      }
      case 13: {  // reservations: release (the handle goes stale) or create
        uint8_t r = in.u8();
        if ((r & 1) && !w.reservations.empty()) {
          size_t i = r % w.reservations.size();
          uint64_t rs = 0, used = 0;
          FZ_CHECK(vpmm_reservation_info(w.pool, w.reservations[i], &rs, &used) == VPMM_OK, "info");
          FZ_CHECK(vpmm_reservation_release(w.pool, w.reservations[i]) == VPMM_OK, "release");
          w.add_released(w.reservations[i]);
          w.reservations.erase(w.reservations.begin() + static_cast<long>(i));
        } else if (w.reservations.size() < 3) {
          static const uint32_t kFlags[] = {VPMM_RESERVE_TRY, VPMM_RESERVE_UPTO, VPMM_RESERVE_BLOCK,
                                            VPMM_RESERVE_TRY | VPMM_RESERVE_OVERDRAFT_IGNORE,
                                            VPMM_RESERVE_UPTO | VPMM_RESERVE_OVERDRAFT_GROW};
          uint32_t flags = kFlags[(r >> 1) % 5];
          uint64_t bytes = (in.u8() % 64 + 1) * w.page;
          vpmm_reservation* res = nullptr;
          vpmm_status st = vpmm_pool_reserve_ex(w.pool, bytes, flags, 0, &res);
          VLOG("  reserve(%llu, flags 0x%x) -> %d %p\n", (unsigned long long)bytes, flags, st,
               static_cast<void*>(res));
          FZ_CHECK(st == VPMM_OK || st == VPMM_ERR_OUT_OF_MEMORY || st == VPMM_ERR_TIMEOUT,
                   "reserve returned %d", st);
          if (st == VPMM_OK) {
            if (!skip(kStaleHandles))
              FZ_CHECK(!w.is_released(res), "new reservation %p has the value of a released one",
                       static_cast<void*>(res));
            w.reservations.push_back(res);
          }
        }
        break;
      }
      case 14: {  // scopes
        if (flag && w.scopes) {
          FZ_CHECK(vpmm_region_pop() == VPMM_OK, "pop");
          --w.scopes;
          if (w.scopes == 0) w.scope_tag = nullptr;
        } else if (w.scopes == 0) {
          w.scope_tag = (slot & 1) ? "a" : "b";
          w.scope_flags = (slot & 2) ? VPMM_ALLOC_HOST_BACKUP : 0;
          FZ_CHECK(vpmm_region_push(w.scope_tag, w.scope_flags) == VPMM_OK, "push");
          ++w.scopes;
        }
        break;
      }
      case 15:
      case 16: {  // retire and destroy a stream in the middle of everything
        uint8_t how = in.u8();
        if (slot == 0) break;
        retire_destroy(w, slot, how);
        break;
      }
      case 17: {  // CPU-side check of every allocation (only when all is quiet)
        if (w.any_held()) break;
        w.cpu_check();
        break;
      }
      case 18: {  // synchronize a stream that is not held (others may be)
        if (w.slots[slot].holds) {
          FZ_CHECK(vpmm_pool_stream_synchronize(w.pool, w.st(slot)) == VPMM_ERR_WRONG_STATE,
                   "synchronize of a held stream");
          break;
        }
        if (skip(kSyncHeldWait) && w.any_held()) break;
        vpmm_status st = flag ? vpmm_pool_stream_synchronize(w.pool, w.st(slot)) : vpmm_host_stream_synchronize(w.st(slot));
        FZ_CHECK(st == VPMM_OK || (st == VPMM_ERR_WRONG_STATE && w.any_held()), "synchronize -> %d", st);
        break;
      }
      case 19:
      case 20:  // stale handles
        stale_call(w, in);
        break;
      case 21:
      case 22:  // work queued on a held stream uses a block, then pause or trim
        queued_then_pause(w, in, slot);
        break;
      case 23:  // resume under a tight limit
        tight_resume(w, in);
        break;
      case 24: {  // release a reservation and make another at once (same size)
        if (w.reservations.empty()) break;
        size_t i = in.u8() % w.reservations.size();
        uint64_t rs = 0, used = 0;
        FZ_CHECK(vpmm_reservation_info(w.pool, w.reservations[i], &rs, &used) == VPMM_OK, "info");
        FZ_CHECK(vpmm_reservation_release(w.pool, w.reservations[i]) == VPMM_OK, "release");
        vpmm_reservation* old = w.reservations[i];
        w.add_released(old);
        w.reservations.erase(w.reservations.begin() + static_cast<long>(i));
        vpmm_reservation* res = nullptr;
        vpmm_status st = vpmm_pool_reserve_ex(w.pool, rs ? rs : w.page, VPMM_RESERVE_UPTO, 0, &res);
        FZ_CHECK(st == VPMM_OK || st == VPMM_ERR_OUT_OF_MEMORY, "reserve again -> %d", st);
        if (st == VPMM_OK) {
          if (!skip(kStaleHandles))
            FZ_CHECK(res != old && !w.is_released(res), "new reservation %p has the value of a released one",
                     static_cast<void*>(res));
          w.reservations.push_back(res);
        }
        break;
      }
      case 31:  // the PyTorch hooks on the default pool
        torch_op(w, in);
        break;
      default: {  // 25-30: more mallocs and frees, the bulk of a program
        if (kind < 29 || w.blocks.empty()) {
          uint16_t r = in.u16();
          uint64_t sz = (r & 1) ? (r >> 1) % 2048 + 1 : ((r >> 1) % 16 + 1) * w.page;
          void* p = nullptr;
          vpmm_status st = vpmm_pool_malloc(w.pool, sz, w.st(slot), &p);
          VLOG("  malloc(%llu) on slot %d -> %d %p\n", (unsigned long long)sz, slot, st, p);
          FZ_CHECK(st == VPMM_OK || st == VPMM_ERR_OUT_OF_MEMORY, "malloc(%llu) returned %d",
                   (unsigned long long)sz, st);
          if (st == VPMM_OK) {
            Block b;
            if (w.scopes) {
              b.tag = w.scope_tag;
              b.backup = (w.scope_flags & VPMM_ALLOC_HOST_BACKUP) != 0;
            }
            if (b.tag) w.used_tag[b.tag[0] - 'a'] = w.slots[slot].tagged = true;
            b.p = p;
            b.size = sz;
            b.seed = w.next_seed++;
            b.stream = slot;
            w.blocks.push_back(b);
            w.launch(slot, fill_kernel, b);
          }
        } else {
          size_t i = in.u16() % w.blocks.size();
          w.free_block(i, w.blocks[i].stream);
        }
        break;
      }
    }
    check_world(w);
  }

  // Teardown: release holds, free everything in stream order, destroy.
  torch_end(w.torch);
  for (int s = 0; s < kStreams; ++s)
    while (w.slots[s].holds) {
      FZ_CHECK(vpmm_host_stream_release(w.st(s)) == VPMM_OK, "release");
      --w.slots[s].holds;
    }
  vpmm_pool_set_oom_callback(w.pool, nullptr, nullptr);
  while (!w.blocks.empty()) w.free_block(w.blocks.size() - 1, w.blocks.back().stream);
  for (vpmm_reservation* r : w.reservations)
    FZ_CHECK(vpmm_reservation_release(w.pool, r) == VPMM_OK, "release reservation");
  w.reservations.clear();
  check_world(w);
  while (w.scopes--) vpmm_region_pop();
  w.sync_all();
  if (!skip(kTagStats)) {
    // Nothing of any tag is allocated any more: tags report nothing live
    // or paused once the pool itself counts nothing live (a slab whose
    // blocks were freed on another stream stays live in both until the pool
    // learns that stream's work is done).
    vpmm_stats ps = get_stats(w.pool);
    for (int t = 0; t < 2; ++t) {
      if (!w.used_tag[t]) continue;
      vpmm_tag_stats ts;
      std::memset(&ts, 0, sizeof ts);
      ts.struct_size = sizeof ts;
      const char* tag = t ? "b" : "a";
      FZ_CHECK(vpmm_pool_tag_stats(w.pool, tag, &ts) == VPMM_OK, "tag_stats(%s)", tag);
      FZ_CHECK(ts.n_paused == 0 && ts.paused_bytes == 0, "tag %s: %llu paused after every allocation was freed", tag,
               (unsigned long long)ts.n_paused);
      FZ_CHECK(ts.live_bytes <= ps.live_bytes, "tag %s: %llu bytes live, the pool %llu", tag,
               (unsigned long long)ts.live_bytes, (unsigned long long)ps.live_bytes);
      if (ps.live_bytes == 0)
        FZ_CHECK(ts.n_live == 0, "tag %s: %llu live regions when the pool counts nothing live", tag,
                 (unsigned long long)ts.n_live);
    }
  }
  for (int s = 1; s < kStreams; ++s)
    if (w.slots[s].pool_made) {
      FZ_CHECK(vpmm_pool_stream_destroy(w.pool, w.st(s)) == VPMM_OK, "pool stream destroy");
      w.slots[s].s = nullptr;
    }
  FZ_CHECK(vpmm_pool_destroy(w.pool) == VPMM_OK, "destroy");
  for (int s = 1; s < kStreams; ++s)
    if (w.slots[s].s) FZ_CHECK(vpmm_host_stream_destroy(w.st(s)) == VPMM_OK, "stream destroy");
  return 0;
}
