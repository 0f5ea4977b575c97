// Concurrency: vpmm.h promises that every vpmm_pool_* call (destroy aside)
// may run concurrently on one pool. Sixteen threads, each with its own host
// stream, malloc and free small and page-sized blocks, write a pattern unique
// to each allocation and check it before freeing (two threads handed
// overlapping memory, or a remap that loses bytes, shows up as a wrong
// pattern). Some frees go to a neighbour's stream, so small blocks wait for
// foreign events and free regions are reused across streams. Meanwhile a
// monitor thread reads stats, dumps and checks the pool in a loop: every
// snapshot must be self-consistent and vpmm_pool_check must pass at any time.
// At the end everything is freed and the counters add up exactly.
//
// Meant to be run under -fsanitize=thread too (-Db_sanitize=thread):
// the handoff of memory between threads goes through the pool's lock and the
// streams' events, and TSan must see those as synchronisation.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "check.hpp"
#include "pool_util.hpp"
#include "vpmm_host_streams.h"

#if defined(__SANITIZE_THREAD__)
#define UNDER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define UNDER_TSAN 1
#endif
#endif
#ifndef UNDER_TSAN
#define UNDER_TSAN 0
#endif

namespace {

constexpr uint64_t kPage = 16 << 10;
constexpr int kThreads = 16;
constexpr int kOps = UNDER_TSAN ? 3000 : 20000;  // mallocs + frees per thread
constexpr int kMaxLive = 8;

inline uint64_t word_of(uint64_t seed, uint64_t i) {
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + (i + 1) * 0xBF58476D1CE4E5B9ull;
  return x ^ (x >> 29);
}
void fill(void* p, uint64_t n, uint64_t seed) {
  uint64_t* w = static_cast<uint64_t*>(p);
  for (uint64_t i = 0; i < n / 8; ++i) w[i] = word_of(seed, i);
  unsigned char* b = static_cast<unsigned char*>(p);
  for (uint64_t i = n / 8 * 8; i < n; ++i) b[i] = static_cast<unsigned char>(seed + i);
}
bool verify(const void* p, uint64_t n, uint64_t seed) {
  const uint64_t* w = static_cast<const uint64_t*>(p);
  for (uint64_t i = 0; i < n / 8; ++i)
    if (w[i] != word_of(seed, i)) return false;
  const unsigned char* b = static_cast<const unsigned char*>(p);
  for (uint64_t i = n / 8 * 8; i < n; ++i)
    if (b[i] != static_cast<unsigned char>(seed + i)) return false;
  return true;
}

struct Live {
  void* p;
  uint64_t size, seed;
};

struct Worker {
  int id = 0;
  vpmm_pool* pool = nullptr;
  vpmm_stream own = nullptr, neighbour = nullptr;
  uint64_t mallocs = 0, frees = 0;
  uint64_t errors = 0, corrupted = 0, oom = 0;
  std::string first_error;
  void note(const char* what) {
    if (errors++ == 0) first_error = std::string(what) + ": " + vpmm_last_error();
  }

  void run() {
    std::mt19937_64 rng(1000 + id);
    std::vector<Live> live;
    for (int op = 0; op < kOps; ++op) {
      const bool do_malloc = live.empty() || (live.size() < kMaxLive && rng() % 2 == 0);
      if (do_malloc) {
        uint64_t size;
        switch (rng() % 4) {
          case 0: size = 1 + rng() % 256; break;                // small, tiny
          case 1: size = 257 + rng() % (kPage / 2 - 256); break;  // small, up to the limit
          case 2: size = (1 + rng() % 3) * kPage; break;         // whole pages
          default: size = kPage / 2 + 1 + rng() % (3 * kPage); break;
        }
        void* p = nullptr;
        vpmm_status st = vpmm_pool_malloc(pool, size, own, &p);
        if (st != VPMM_OK) {
          note("malloc");
          continue;
        }
        ++mallocs;
        const uint64_t seed = (uint64_t(id) << 40) | mallocs;
        fill(p, size, seed);
        live.push_back({p, size, seed});
      } else {
        size_t i = rng() % live.size();
        Live l = live[i];
        live[i] = live.back();
        live.pop_back();
        if (!verify(l.p, l.size, l.seed)) ++corrupted;
        vpmm_stream s = rng() % 5 == 0 ? neighbour : own;
        if (vpmm_pool_free(pool, l.p, s) != VPMM_OK)
          note("free");
        else
          ++frees;
      }
    }
    for (const Live& l : live) {
      if (!verify(l.p, l.size, l.seed)) ++corrupted;
      if (vpmm_pool_free(pool, l.p, own) != VPMM_OK)
        note("final free");
      else
        ++frees;
    }
  }
};

// One consistent snapshot: stats and dump each come from the pool's lock,
// but not from the same instant, so only relations within one are checked.
struct Monitor {
  vpmm_pool* pool = nullptr;
  std::atomic<bool>* stop = nullptr;
  uint64_t rounds = 0, bad = 0;
  std::string first_bad;
  void flag(const std::string& what) {
    if (bad++ == 0) first_bad = what;
  }
  void run() {
    std::vector<vpmm_region_info> buf = vt::region_buffer(4096);
    std::vector<char> text(1 << 16);
    while (!stop->load()) {
      ++rounds;
      if (vpmm_pool_check(pool) != VPMM_OK) flag(std::string("check: ") + vpmm_last_error());
      vpmm_stats st;
      std::memset(&st, 0, sizeof st);
      st.struct_size = sizeof st;
      if (vpmm_pool_stats(pool, &st) != VPMM_OK) flag("stats failed");
      if (st.mapped_bytes != st.live_bytes + st.free_bytes) flag("mapped != live + free");
      if (st.live_bytes > st.peak_live_bytes || st.mapped_bytes > st.peak_mapped_bytes) flag("above peak");
      if (st.n_free > st.n_malloc || st.n_live != st.n_malloc - st.n_free) flag("n_live != n_malloc - n_free");
      size_t n = 0;
      if (vpmm_pool_dump(pool, buf.data(), buf.size(), &n) != VPMM_OK) flag("dump failed");
      if (n > buf.size()) {
        buf = vt::region_buffer(n * 2);
        continue;
      }
      uint64_t total = 0;
      for (size_t i = 0; i < n; ++i) {
        total += buf[i].size;
        if (i > 0 && buf[i - 1].chunk == buf[i].chunk && buf[i - 1].va + buf[i - 1].size != buf[i].va)
          flag("dump: gap or overlap in a chunk");
        if (i > 0 && buf[i - 1].va >= buf[i].va) flag("dump: not ascending");
      }
      if (n == 0) flag("empty dump");
      size_t need = 0;
      if (vpmm_pool_dump_text(pool, text.data(), text.size(), &need) != VPMM_OK) flag("dump_text failed");
      std::this_thread::yield();
    }
  }
};

}  // namespace

TEST("16 threads with their own streams malloc and free concurrently; a monitor checks") {
  vt::HostPoolSpec spec;
  spec.page = kPage;
  spec.va_pages = 512;
  spec.capacity = 1ull << 30;
  vpmm_pool* pool = vt::make_host_pool(spec);
  CHECK(pool != nullptr);
  if (!pool) return;
  std::vector<vpmm_stream> streams(kThreads);
  for (auto& s : streams) CHECK_OK(vpmm_host_stream_create(&s));
  std::vector<Worker> workers(kThreads);
  for (int i = 0; i < kThreads; ++i) {
    workers[i].id = i;
    workers[i].pool = pool;
    workers[i].own = streams[i];
    workers[i].neighbour = streams[(i + 1) % kThreads];
  }
  std::atomic<bool> stop{false};
  Monitor mon;
  mon.pool = pool;
  mon.stop = &stop;
  auto t0 = std::chrono::steady_clock::now();
  std::thread mt([&] { mon.run(); });
  std::vector<std::thread> ts;
  for (auto& w : workers) ts.emplace_back([&w] { w.run(); });
  for (auto& t : ts) t.join();
  stop = true;
  mt.join();
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  uint64_t mallocs = 0, frees = 0;
  for (const Worker& w : workers) {
    CHECK_EQ(w.errors, uint64_t(0));
    if (w.errors) std::printf("  worker %d: %s\n", w.id, w.first_error.c_str());
    CHECK_EQ(w.corrupted, uint64_t(0));
    CHECK_EQ(w.mallocs, w.frees);
    mallocs += w.mallocs;
    frees += w.frees;
  }
  CHECK_EQ(mon.bad, uint64_t(0));
  if (mon.bad) std::printf("  monitor: %s\n", mon.first_bad.c_str());
  CHECK(mon.rounds > 0);
  std::printf("  %" PRIu64 " mallocs in %.2f s, %" PRIu64 " monitor rounds\n", mallocs, secs, mon.rounds);

  for (vpmm_stream s : streams) CHECK_OK(vpmm_host_stream_synchronize(s));
  CHECK_OK(vpmm_pool_check(pool));
  vpmm_stats st = vt::stats(pool);
  CHECK_EQ(st.n_malloc, mallocs);
  CHECK_EQ(st.n_free, frees);
  CHECK_EQ(st.n_malloc, st.n_free);
  CHECK_EQ(st.n_live, uint64_t(0));
  CHECK_EQ(st.requested_bytes, uint64_t(0));
  CHECK_EQ(st.small_live_bytes, uint64_t(0));
  CHECK_EQ(st.live_bytes, uint64_t(0));  // fails while empty small slabs count as live
  CHECK_EQ(st.mapped_bytes, st.live_bytes + st.free_bytes);
  CHECK(st.n_cross_stream_reuse > 0);  // the streams really shared memory
  // The pool still works from this thread, and everything comes back.
  void* p = nullptr;
  CHECK_OK(vpmm_pool_malloc(pool, 2 * kPage, nullptr, &p));
  CHECK_OK(vpmm_pool_free(pool, p, nullptr));
  CHECK_OK(vpmm_pool_destroy(pool));
  for (vpmm_stream s : streams) CHECK_OK(vpmm_host_stream_destroy(s));
}

// Threads that share streams: every thread allocates on one of four streams
// and frees on any, so the same stream is used from several threads at once.
TEST("threads sharing streams: same-stream reuse under contention keeps data intact") {
  vt::HostPoolSpec spec;
  spec.page = kPage;
  spec.va_pages = 512;
  spec.max_handle = kPage;  // page-exact remapping: more defragmentation
  vpmm_pool* pool = vt::make_host_pool(spec);
  CHECK(pool != nullptr);
  if (!pool) return;
  std::vector<vpmm_stream> streams(4);
  for (auto& s : streams) CHECK_OK(vpmm_host_stream_create(&s));
  std::vector<Worker> workers(8);
  for (int i = 0; i < 8; ++i) {
    workers[i].id = 100 + i;
    workers[i].pool = pool;
    workers[i].own = streams[i % 4];
    workers[i].neighbour = streams[(i + 1) % 4];
  }
  std::vector<std::thread> ts;
  for (auto& w : workers) ts.emplace_back([&w] { w.run(); });
  for (auto& t : ts) t.join();
  uint64_t mallocs = 0;
  for (const Worker& w : workers) {
    CHECK_EQ(w.errors, uint64_t(0));
    if (w.errors) std::printf("  worker %d: %s\n", w.id, w.first_error.c_str());
    CHECK_EQ(w.corrupted, uint64_t(0));
    mallocs += w.mallocs;
  }
  for (vpmm_stream s : streams) CHECK_OK(vpmm_host_stream_synchronize(s));
  CHECK_OK(vpmm_pool_check(pool));
  vpmm_stats st = vt::stats(pool);
  CHECK_EQ(st.n_malloc, mallocs);
  CHECK_EQ(st.n_free, mallocs);
  CHECK_EQ(st.n_live, uint64_t(0));
  CHECK_EQ(st.requested_bytes, uint64_t(0));
  CHECK_OK(vpmm_pool_destroy(pool));
  for (vpmm_stream s : streams) CHECK_OK(vpmm_host_stream_destroy(s));
}

TEST_MAIN()
