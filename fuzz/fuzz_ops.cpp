// fuzz_ops: bytes -> a sequence of pool operations on a small host pool
// (16 MiB of host capacity, pages of 4-64 KiB, so growth, defragmentation,
// OOM and the OOM callback are all reached within a few hundred bytes).
//
// The model follows the pool's contract the way a GPU program would: every
// access to an allocation's bytes is a host "kernel" launched on the
// allocation's stream (a fill right after malloc, a verify right before
// free), so stream ordering, held streams (work "in flight"), cross-stream
// reuse, stream waits and zombies are exercised exactly as on a GPU, and a
// verify kernel that sees the wrong bytes aborts. The CPU reads allocations
// directly only when no stream is held and every stream has drained.
//
// After every operation: vpmm_pool_check, the stats against the model (live
// count, requested bytes, the limit), lookup of every allocation, and the
// order of pressure callbacks. Calls that could block forever on a held
// stream (pause, resume, trim, set_limit, destroy, synchronize) are only made
// while nothing is held, as a program must.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
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

constexpr int kStreams = 4;  // slot 0 = default stream (NULL), 1..3 = host streams
constexpr uint64_t kCapacity = 16ull << 20;

struct Block {
  void* p = nullptr;
  uint64_t size = 0;
  uint64_t seed = 0;
  int stream = 0;
  bool tagged = false;
  bool backup = false;
  bool discarded = false;  // paused without a backup: bytes gone by design
};

struct Job {
  unsigned char* p;
  uint64_t size;
  uint64_t seed;
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
  delete j;
}

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
  delete j;
}

struct World {
  vpmm_pool* pool = nullptr;
  vpmm_stream streams[kStreams] = {};
  int holds[kStreams] = {};
  std::vector<Block> blocks;
  std::vector<vpmm_reservation*> reservations;
  uint64_t next_seed = 1;
  uint64_t page = 0;
  uint64_t limit = 0;
  int scopes = 0;
  const char* scope_tag = nullptr;
  uint32_t scope_flags = 0;
  int last_pressure = 0;  // transitions alternate 1, 0, 1, ...
  int oom_calls = 0;
  bool in_oom = false;

  bool any_held() const {
    for (int h : holds)
      if (h) return true;
    return false;
  }
  void launch(int slot, void (*fn)(void*), const Block& b) {
    Job* j = new Job{static_cast<unsigned char*>(b.p), b.size, b.seed};
    vpmm_status st = vpmm_host_stream_launch(streams[slot], fn, j);
    FZ_CHECK(st == VPMM_OK, "launch on slot %d", slot);
  }
  void sync_all() {
    for (int s = 0; s < kStreams; ++s)
      FZ_CHECK(vpmm_host_stream_synchronize(streams[s]) == VPMM_OK, "synchronize slot %d", s);
  }
  // Frees blocks[i] in stream order on its own stream (verify first).
  void free_block(size_t i) {
    Block b = blocks[i];
    blocks.erase(blocks.begin() + static_cast<long>(i));
    bool paused = is_paused(b);
    if (!paused && !b.discarded) launch(b.stream, verify_kernel, b);
    vpmm_status st = vpmm_pool_free(pool, b.p, streams[b.stream]);
    FZ_CHECK(st == VPMM_OK, "free of %p", b.p);
  }
  bool is_paused(const Block& b) {
    size_t n = 0;
    FZ_CHECK(vpmm_pool_dump(pool, nullptr, 0, &n) == VPMM_OK, "dump");
    vpmm_region_info proto{};
    proto.struct_size = sizeof proto;
    std::vector<vpmm_region_info> r(n, proto);
    FZ_CHECK(vpmm_pool_dump(pool, r.data(), r.size(), &n) == VPMM_OK, "dump");
    uint64_t va = reinterpret_cast<uint64_t>(b.p);
    for (size_t k = 0; k < n && k < r.size(); ++k)
      if (va >= r[k].va && va < r[k].va + r[k].size) return r[k].kind == VPMM_REGION_PAUSED;
    return false;
  }
};

int on_oom(vpmm_pool*, uint64_t, void* user) {
  World* w = static_cast<World*>(user);
  ++w->oom_calls;
  if (w->in_oom || w->blocks.empty()) return 0;
  // Spill: free the oldest allocation, then ask for a retry.
  w->in_oom = true;
  w->free_block(0);
  w->in_oom = false;
  return 1;
}

void on_pressure(vpmm_pool*, int under, uint64_t, void* user) {
  World* w = static_cast<World*>(user);
  FZ_CHECK(under == (w->last_pressure ? 0 : 1), "pressure transitions must alternate (got %d)", under);
  w->last_pressure = under;
}

void check_world(World& w) {
  FZ_CHECK(vpmm_pool_check(w.pool) == VPMM_OK, "pool invariants");
  vpmm_stats st;
  std::memset(&st, 0, sizeof st);
  st.struct_size = sizeof st;
  FZ_CHECK(vpmm_pool_stats(w.pool, &st) == VPMM_OK, "stats");
  uint64_t requested = 0;
  for (const Block& b : w.blocks) requested += b.size;
  FZ_CHECK(st.n_live == w.blocks.size(), "n_live %llu, model %zu", (unsigned long long)st.n_live,
           w.blocks.size());
  FZ_CHECK(st.requested_bytes == requested, "requested %llu, model %llu",
           (unsigned long long)st.requested_bytes, (unsigned long long)requested);
  FZ_CHECK(st.mapped_bytes <= kCapacity, "mapped %llu beyond the host capacity",
           (unsigned long long)st.mapped_bytes);
  if (w.limit) FZ_CHECK(st.mapped_bytes <= w.limit, "mapped %llu beyond the limit %llu",
                        (unsigned long long)st.mapped_bytes, (unsigned long long)w.limit);
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

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fz::Reader in(data, size);
  World w;
  static const uint64_t kPages[] = {4 << 10, 16 << 10, 64 << 10, 32 << 10};
  vpmm_config c;
  vpmm_config_init(&c);
  c.backend = VPMM_BACKEND_HOST;
  uint8_t shape = in.u8();
  c.page_size = kPages[shape % 4];
  c.va_size = c.page_size * (16 + (in.u8() % 4) * 64);  // small chunks: several get reserved
  c.host_capacity = kCapacity;
  c.initial_pages = in.u8() % 8;
  c.max_handle_size = (shape >> 2) % 3 == 0 ? 0 : (shape >> 2) % 3 == 1 ? c.page_size : 4 * c.page_size;
  c.small_size = (shape >> 4) % 2 ? 1 : 0;  // 1 = small allocator off
  c.backup_cache_size = (shape >> 5) % 2 ? c.page_size : 0;
  c.large_rounding = (shape >> 6) % 2 ? 512 : 0;  // shared pages, as in the default pools
  w.page = c.page_size;
  VLOG("pool: page %llu va %llu initial %llu max_handle %llu small_size %llu backup_cache %llu "
       "large_rounding %llu\n",
       (unsigned long long)c.page_size, (unsigned long long)c.va_size, (unsigned long long)c.initial_pages,
       (unsigned long long)c.max_handle_size, (unsigned long long)c.small_size,
       (unsigned long long)c.backup_cache_size, (unsigned long long)c.large_rounding);
  if (vpmm_pool_create(&c, &w.pool) != VPMM_OK) return 0;
  for (int s = 1; s < kStreams; ++s)
    FZ_CHECK(vpmm_host_stream_create(&w.streams[s]) == VPMM_OK, "stream create");
  vpmm_pool_set_oom_callback(w.pool, on_oom, &w);
  vpmm_pool_set_pressure_callback(w.pool, on_pressure, &w);

  int ops = 0;
  while (!in.empty() && ops++ < 256) {
    uint8_t op = in.u8();
    int slot = (op >> 4) % kStreams;
    VLOG("op %u (case %u) slot %d\n", op, op % 16, slot);
    switch (op % 16) {
      case 0:
      case 1:
      case 2: {  // malloc (small or pages), possibly tagged
        uint16_t r = in.u16();
        uint64_t sz = (r & 1) ? (r >> 1) % 4096 + 1 : ((r >> 1) % 48 + 1) * w.page - ((r >> 7) % 2) * 100;
        void* p = nullptr;
        Block b;
        vpmm_status st;
        if (op % 16 == 2) {
          vpmm_alloc_attrs a;
          std::memset(&a, 0, sizeof a);
          a.struct_size = sizeof a;
          uint8_t t = in.u8();
          a.tag = (t & 1) ? "a" : "b";
          a.flags = (t & 2) ? VPMM_ALLOC_HOST_BACKUP : 0;
          if ((t & 4) && !w.reservations.empty()) a.reservation = w.reservations[t % w.reservations.size()];
          b.tagged = true;
          b.backup = a.flags != 0;
          st = vpmm_pool_malloc_ex(w.pool, sz, w.streams[slot], &a, &p);
        } else {
          if (w.scopes) {
            b.tagged = w.scope_tag != nullptr;
            b.backup = (w.scope_flags & VPMM_ALLOC_HOST_BACKUP) != 0;
          }
          st = vpmm_pool_malloc(w.pool, sz, w.streams[slot], &p);
        }
        VLOG("  malloc%s(%llu) on slot %d -> %d %p\n", op % 16 == 2 ? "_ex" : "", (unsigned long long)sz, slot,
             st, p);
        FZ_CHECK(st == VPMM_OK || st == VPMM_ERR_OUT_OF_MEMORY, "malloc(%llu) returned %d",
                 (unsigned long long)sz, st);
        if (st == VPMM_OK) {
          b.p = p;
          b.size = sz;
          b.seed = w.next_seed++;
          b.stream = slot;
          w.blocks.push_back(b);
          w.launch(slot, fill_kernel, b);
        }
        break;
      }
      case 3:
      case 4: {  // free on the allocating stream
        if (w.blocks.empty()) break;
        w.free_block(in.u16() % w.blocks.size());
        break;
      }
      case 5: {  // free on another stream, after the allocating stream drained
        if (w.blocks.empty() || w.any_held()) break;
        size_t i = in.u16() % w.blocks.size();
        Block b = w.blocks[i];
        if (!w.is_paused(b) && !b.discarded) w.launch(b.stream, verify_kernel, b);
        w.sync_all();
        w.blocks.erase(w.blocks.begin() + static_cast<long>(i));
        FZ_CHECK(vpmm_pool_free(w.pool, b.p, w.streams[slot]) == VPMM_OK, "cross-stream free");
        break;
      }
      case 6:  // hold
        if (w.holds[slot] < 2) {
          FZ_CHECK(vpmm_host_stream_hold(w.streams[slot]) == VPMM_OK, "hold");
          ++w.holds[slot];
        }
        break;
      case 7:  // release
        if (w.holds[slot]) {
          FZ_CHECK(vpmm_host_stream_release(w.streams[slot]) == VPMM_OK, "release");
          --w.holds[slot];
        } else {
          FZ_CHECK(vpmm_host_stream_release(w.streams[slot]) == VPMM_ERR_WRONG_STATE,
                   "release of a stream that is not held");
        }
        break;
      case 8: {  // pause / resume (never while something is held: they wait)
        if (w.any_held()) break;
        const char* tag = (op >> 6) == 0 ? "a" : (op >> 6) == 1 ? "b" : nullptr;
        vpmm_status st = vpmm_pool_pause(w.pool, tag);
        FZ_CHECK(st == VPMM_OK || st == VPMM_ERR_INVALID_ARGUMENT ||
                     st == VPMM_ERR_OUT_OF_MEMORY,
                 "pause returned %d", st);
        for (Block& b : w.blocks)
          if (!b.backup && b.tagged && w.is_paused(b)) b.discarded = true;
        break;
      }
      case 9: {
        if (w.any_held()) break;
        const char* tag = (op >> 6) == 0 ? "a" : (op >> 6) == 1 ? "b" : nullptr;
        vpmm_status st = vpmm_pool_resume(w.pool, tag);
        FZ_CHECK(st == VPMM_OK || st == VPMM_ERR_INVALID_ARGUMENT ||
                     st == VPMM_ERR_OUT_OF_MEMORY,
                 "resume returned %d", st);
        break;
      }
      case 10: {  // trim or a new limit
        if (w.any_held()) break;
        if (op & 0x40) {
          uint64_t lim = (op & 0x80) ? 0 : (in.u8() % 64 + 1) * w.page * 4;
          vpmm_status st = vpmm_pool_set_limit(w.pool, lim);
          VLOG("  set_limit(%llu) -> %d\n", (unsigned long long)lim, st);
          FZ_CHECK(st == VPMM_OK || st == VPMM_ERR_WRONG_STATE, "set_limit returned %d", st);
          if (st == VPMM_OK) w.limit = lim;
        } else {
          FZ_CHECK(vpmm_pool_trim(w.pool, (in.u8() % 8) * w.page) == VPMM_OK, "trim");
        }
        break;
      }
      case 11: {  // reservations
        uint8_t r = in.u8();
        if ((r & 1) && !w.reservations.empty()) {
          size_t i = r % w.reservations.size();
          uint64_t rs = 0, used = 0;
          FZ_CHECK(vpmm_reservation_info(w.pool, w.reservations[i], &rs, &used) == VPMM_OK, "info");
          FZ_CHECK(vpmm_reservation_release(w.pool, w.reservations[i]) == VPMM_OK, "release");
          w.reservations.erase(w.reservations.begin() + static_cast<long>(i));
        } else if (w.reservations.size() < 3) {
          static const uint32_t kFlags[] = {VPMM_RESERVE_TRY, VPMM_RESERVE_UPTO, VPMM_RESERVE_BLOCK,
                                            VPMM_RESERVE_TRY | VPMM_RESERVE_OVERDRAFT_IGNORE,
                                            VPMM_RESERVE_UPTO | VPMM_RESERVE_OVERDRAFT_GROW};
          uint32_t flags = kFlags[(r >> 1) % 5];
          uint64_t bytes = (in.u8() % 64 + 1) * w.page;
          vpmm_reservation* res = nullptr;
          vpmm_status st = vpmm_pool_reserve_ex(w.pool, bytes, flags, 0, &res);
          VLOG("  reserve(%llu, flags 0x%x) -> %d\n", (unsigned long long)bytes, flags, st);
          FZ_CHECK(st == VPMM_OK || st == VPMM_ERR_OUT_OF_MEMORY || st == VPMM_ERR_TIMEOUT,
                   "reserve returned %d", st);
          if (st == VPMM_OK) w.reservations.push_back(res);
        }
        break;
      }
      case 12: {  // scopes
        if ((op & 0x40) && w.scopes) {
          FZ_CHECK(vpmm_region_pop() == VPMM_OK, "pop");
          --w.scopes;
          if (w.scopes == 0) w.scope_tag = nullptr;
        } else if (w.scopes == 0) {
          w.scope_tag = (op & 0x80) ? "a" : "b";
          w.scope_flags = (op & 0x20) ? VPMM_ALLOC_HOST_BACKUP : 0;
          FZ_CHECK(vpmm_region_push(w.scope_tag, w.scope_flags) == VPMM_OK, "push");
          ++w.scopes;
        }
        break;
      }
      case 13: {  // retire and replace a host stream
        // Only when all is quiet: a stream destroyed with work queued behind
        // a wait on another stream finishes that work in the background,
        // and the blocks of the old stream move to the default stream.
        if (slot == 0 || w.any_held()) break;
        w.sync_all();
        FZ_CHECK(vpmm_pool_stream_retire(w.pool, w.streams[slot]) == VPMM_OK, "retire");
        FZ_CHECK(vpmm_host_stream_destroy(w.streams[slot]) == VPMM_OK, "stream destroy");
        w.holds[slot] = 0;  // destroy drains and drops holds
        // Live blocks of the old stream are used in the default stream's
        // order from now on: everything had drained.
        for (Block& b : w.blocks)
          if (b.stream == slot) b.stream = 0;
        FZ_CHECK(vpmm_host_stream_create(&w.streams[slot]) == VPMM_OK, "stream create");
        break;
      }
      case 14: {  // CPU-side check of every allocation (only when all is quiet)
        if (w.any_held()) break;
        w.sync_all();
        for (const Block& b : w.blocks) {
          if (b.discarded || w.is_paused(b)) continue;
          const unsigned char* q = static_cast<const unsigned char*>(b.p);
          for_sampled(b.size, [&](uint64_t i) {
            FZ_CHECK(q[i] == pattern(b.seed, i), "allocation %p byte %llu is wrong", b.p,
                     (unsigned long long)i);
          });
        }
        break;
      }
      case 15: {  // pool stream synchronize (held: fails fast, never blocks)
        if (w.any_held()) break;
        FZ_CHECK(vpmm_pool_stream_synchronize(w.pool, w.streams[slot]) == VPMM_OK, "synchronize");
        break;
      }
    }
    check_world(w);
  }

  // Teardown: release holds, free everything in stream order, destroy.
  for (int s = 0; s < kStreams; ++s)
    while (w.holds[s]) {
      FZ_CHECK(vpmm_host_stream_release(w.streams[s]) == VPMM_OK, "release");
      --w.holds[s];
    }
  vpmm_pool_set_oom_callback(w.pool, nullptr, nullptr);
  while (!w.blocks.empty()) w.free_block(w.blocks.size() - 1);
  for (vpmm_reservation* r : w.reservations)
    FZ_CHECK(vpmm_reservation_release(w.pool, r) == VPMM_OK, "release reservation");
  check_world(w);
  while (w.scopes--) vpmm_region_pop();
  w.sync_all();
  FZ_CHECK(vpmm_pool_destroy(w.pool) == VPMM_OK, "destroy");
  for (int s = 1; s < kStreams; ++s)
    FZ_CHECK(vpmm_host_stream_destroy(w.streams[s]) == VPMM_OK, "stream destroy");
  return 0;
}
