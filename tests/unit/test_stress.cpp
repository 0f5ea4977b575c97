// Stress for the sanitizers (TSan above all; scripts/sanitize.sh): sixteen
// threads on four shared host streams use one pool the way GPU programs do.
// test_threads.cpp covers concurrent malloc/free with CPU-side access; this
// one adds what it leaves out:
//  - every access to an allocation is a host "kernel" on its stream (fill
//    after malloc, verify before free), so the pool's stream ordering is
//    what keeps data intact, and a thread may free on a neighbour's stream;
//  - streams are held while work is queued and memory freed, so events stay
//    pending, Phase 2 inserts stream waits and zombies wait to be reaped, all
//    under contention;
//  - per-thread tags with host backups are paused and resumed, the pool is
//    trimmed, its limit moved and capacity reserved, concurrently with all
//    of the above;
//  - a monitor checks invariants, stats, dumps and tag stats all along.
// Calls that wait for stream work (pause, resume, trim, set_limit) hold the
// pool lock while they wait; a thread holding a stream must not call the
// pool then, or the two wait for each other. A reader/writer gate keeps the
// two apart: holders share it, waiting calls take it alone (as a program
// must, by the contract in vpmm.h).
#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <shared_mutex>
#include <string>
#include <thread>
#include <vector>

#include "check.hpp"
#include "pool_util.hpp"
#include "vpmm_host_streams.h"

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define UNDER_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer) || __has_feature(address_sanitizer)
#define UNDER_SANITIZER 1
#endif
#endif
#ifndef UNDER_SANITIZER
#define UNDER_SANITIZER 0
#endif

namespace {

constexpr uint64_t kPage = 16 << 10;
constexpr int kThreads = 16;
constexpr int kStreams = 4;
constexpr int kIters = UNDER_SANITIZER ? 400 : 2000;
constexpr size_t kMaxLive = 8;

std::atomic<uint64_t> g_bad{0};      // wrong bytes seen by a verify kernel
std::atomic<uint64_t> g_errors{0};   // unexpected statuses
std::shared_timed_mutex g_gate;      // shared: a stream is held; exclusive: a waiting call

unsigned char pattern(uint64_t seed, uint64_t i) {
  return static_cast<unsigned char>((seed * 0x9E3779B97F4A7C15ull + i * 0x100000001B3ull) >> 56);
}
// First and last 64 bytes and one in every 509: every 4 KiB page is sampled.
template <class F>
void for_sampled(uint64_t size, F&& f) {
  for (uint64_t i = 0; i < size && i < 64; ++i) f(i);
  for (uint64_t i = 64; i + 64 < size; i += 509) f(i);
  for (uint64_t i = size > 64 ? size - 64 : 64; i < size; ++i) f(i);
}

struct Job {
  unsigned char* p;
  uint64_t size;
  uint64_t seed;
  std::shared_ptr<std::atomic<int>> done;
};
void fill_kernel(void* u) {
  std::unique_ptr<Job> j(static_cast<Job*>(u));
  for_sampled(j->size, [&](uint64_t i) { j->p[i] = pattern(j->seed, i); });
  if (j->done) j->done->store(1, std::memory_order_release);
}
void verify_kernel(void* u) {
  std::unique_ptr<Job> j(static_cast<Job*>(u));
  bool ok = true;
  for_sampled(j->size, [&](uint64_t i) { ok = ok && j->p[i] == pattern(j->seed, i); });
  if (!ok) g_bad.fetch_add(1);
  if (j->done) j->done->store(1, std::memory_order_release);
}

struct Block {
  void* p = nullptr;
  uint64_t size = 0;
  uint64_t seed = 0;
  bool tagged = false, backup = false;
  bool discarded = false;  // paused without a backup: bytes gone by design
};

struct Shared {
  vpmm_pool* pool = nullptr;
  vpmm_stream streams[kStreams] = {};
  std::atomic<bool> stop{false};
};

void expect(bool ok, const char* what, vpmm_status st) {
  if (ok) return;
  if (g_errors.fetch_add(1) < 10) std::printf("  %s -> %s: %s\n", what, vpmm_status_string(st), vpmm_last_error());
}

class Worker {
 public:
  Worker(Shared& sh, int id) : sh_(sh), id_(id), rng_(0x5eed + id) {
    tag_ = "t" + std::to_string(id);
    own_ = sh.streams[id % kStreams];
    other_ = sh.streams[(id + 1) % kStreams];
  }
  uint64_t mallocs = 0, frees = 0, ooms = 0;

  void run() {
    for (int it = 0; it < kIters; ++it) {
      uint32_t r = rng_() % 100;
      if (r < 40) malloc_one(own_);
      else if (r < 70) free_one();
      else if (r < 80) held_section();
      else if (r < 85) waiting_call();
      else if (r < 90) reservations();
      else lookups();
    }
    while (!blocks_.empty()) free_at(blocks_.size() - 1, own_);
    for (vpmm_reservation* r : res_) {
      vpmm_status st = vpmm_reservation_release(sh_.pool, r);
      expect(st == VPMM_OK, "reservation release", st);
    }
    res_.clear();
  }

 private:
  void launch(void (*fn)(void*), const Block& b, vpmm_stream s, std::shared_ptr<std::atomic<int>> done = nullptr) {
    Job* j = new Job{static_cast<unsigned char*>(b.p), b.size, b.seed, std::move(done)};
    vpmm_status st = vpmm_host_stream_launch(s, fn, j);
    expect(st == VPMM_OK, "launch", st);
    if (st != VPMM_OK) delete j;
  }

  void malloc_one(vpmm_stream s) {
    if (blocks_.size() >= kMaxLive) return;
    Block b;
    uint32_t r = static_cast<uint32_t>(rng_());
    b.size = (r & 1) ? r % 6000 + 1 : (r % 12 + 1) * kPage - (r & 2) * 50;
    void* p = nullptr;
    vpmm_status st;
    if (r & 4) {
      vpmm_alloc_attrs a;
      std::memset(&a, 0, sizeof a);
      a.struct_size = sizeof a;
      a.tag = tag_.c_str();
      a.flags = (r & 8) ? VPMM_ALLOC_HOST_BACKUP : 0;
      if ((r & 16) && !res_.empty()) a.reservation = res_[r % res_.size()];
      b.tagged = true;
      b.backup = a.flags != 0;
      st = vpmm_pool_malloc_ex(sh_.pool, b.size, s, &a, &p);
    } else {
      st = vpmm_pool_malloc(sh_.pool, b.size, s, &p);
    }
    if (st == VPMM_ERR_OUT_OF_MEMORY) {
      ++ooms;
      return;
    }
    expect(st == VPMM_OK, "malloc", st);
    if (st != VPMM_OK) return;
    ++mallocs;
    b.p = p;
    b.seed = (static_cast<uint64_t>(id_) << 40) + mallocs;
    launch(fill_kernel, b, s);
    blocks_.push_back(b);
  }

  // Frees blocks_[i] on stream s after a verify kernel on the own stream.
  // Another stream may free it only once that kernel has run.
  void free_at(size_t i, vpmm_stream s) {
    Block b = blocks_[i];
    blocks_.erase(blocks_.begin() + static_cast<long>(i));
    auto done = std::make_shared<std::atomic<int>>(0);
    if (!b.discarded) launch(verify_kernel, b, own_, done);
    else done->store(1);
    if (s != own_) {
      for (int k = 0; k < 200 && !done->load(std::memory_order_acquire); ++k) std::this_thread::yield();
      if (!done->load(std::memory_order_acquire)) s = own_;
    }
    vpmm_status st = vpmm_pool_free(sh_.pool, b.p, s);
    expect(st == VPMM_OK, "free", st);
    ++frees;
  }
  void free_one() {
    if (blocks_.empty()) return;
    free_at(rng_() % blocks_.size(), (rng_() % 4 == 0) ? other_ : own_);
  }

  // Holds the own stream (shared by three other threads) while queueing
  // work, freeing and allocating: events stay pending, harvests wait.
  void held_section() {
    std::shared_lock<std::shared_timed_mutex> gate(g_gate);
    vpmm_status st = vpmm_host_stream_hold(own_);
    expect(st == VPMM_OK, "hold", st);
    for (int k = 0; k < 4; ++k) {
      if (rng_() % 2) malloc_one(own_);
      else if (!blocks_.empty()) free_at(rng_() % blocks_.size(), own_);
    }
    st = vpmm_host_stream_release(own_);
    expect(st == VPMM_OK, "release", st);
  }

  // Calls that wait for stream work, with no stream held anywhere.
  void waiting_call() {
    std::unique_lock<std::shared_timed_mutex> gate(g_gate);
    switch (rng_() % 4) {
      case 0: {  // pause my tag, maybe free one paused block, resume
        vpmm_status st = vpmm_pool_pause(sh_.pool, tag_.c_str());
        expect(st == VPMM_OK || st == VPMM_ERR_INVALID_ARGUMENT ||
                   st == VPMM_ERR_OUT_OF_MEMORY,
               "pause", st);
        if (st == VPMM_OK)
          for (Block& b : blocks_)
            if (b.tagged && !b.backup) b.discarded = true;
        if (st == VPMM_OK && !blocks_.empty() && rng_() % 2) {
          size_t i = rng_() % blocks_.size();
          if (blocks_[i].tagged) {
            st = vpmm_pool_free(sh_.pool, blocks_[i].p, own_);  // a paused one: drop it
            expect(st == VPMM_OK, "free of a paused block", st);
            blocks_.erase(blocks_.begin() + static_cast<long>(i));
            ++frees;
          }
        }
        for (int tries = 0; tries < 4; ++tries) {
          st = vpmm_pool_resume(sh_.pool, tag_.c_str());
          if (st != VPMM_ERR_OUT_OF_MEMORY) break;
          vpmm_pool_trim(sh_.pool, 0);
        }
        expect(st == VPMM_OK || st == VPMM_ERR_INVALID_ARGUMENT ||
                   st == VPMM_ERR_OUT_OF_MEMORY,
               "resume", st);
        if (st == VPMM_ERR_OUT_OF_MEMORY) {
          // Still paused (memory is short under a low limit): drop them.
          for (size_t i = blocks_.size(); i-- > 0;)
            if (blocks_[i].tagged) {
              vpmm_status fs = vpmm_pool_free(sh_.pool, blocks_[i].p, own_);
              expect(fs == VPMM_OK, "free of a paused block", fs);
              blocks_.erase(blocks_.begin() + static_cast<long>(i));
              ++frees;
            }
        }
        break;
      }
      case 1: {
        vpmm_status st = vpmm_pool_trim(sh_.pool, (rng_() % 8) * kPage);
        expect(st == VPMM_OK, "trim", st);
        break;
      }
      case 2: {
        uint64_t lim = (rng_() % 2) ? 0 : (16 + rng_() % 48) << 20;
        vpmm_status st = vpmm_pool_set_limit(sh_.pool, lim);
        expect(st == VPMM_OK || st == VPMM_ERR_WRONG_STATE, "set_limit", st);
        break;
      }
      default: {
        vpmm_status st = vpmm_pool_stream_synchronize(sh_.pool, own_);
        expect(st == VPMM_OK, "pool stream synchronize", st);
      }
    }
  }

  void reservations() {
    if (!res_.empty() && rng_() % 2) {
      size_t i = rng_() % res_.size();
      vpmm_status st = vpmm_reservation_release(sh_.pool, res_[i]);
      expect(st == VPMM_OK, "reservation release", st);
      res_.erase(res_.begin() + static_cast<long>(i));  // its blocks stay valid, unreserved
    } else if (res_.size() < 2) {
      vpmm_reservation* r = nullptr;
      uint32_t flags = (rng_() % 2) ? VPMM_RESERVE_UPTO : VPMM_RESERVE_TRY | VPMM_RESERVE_OVERDRAFT_IGNORE;
      vpmm_status st = vpmm_pool_reserve(sh_.pool, (rng_() % 16 + 1) * kPage, flags, &r);
      expect(st == VPMM_OK || st == VPMM_ERR_OUT_OF_MEMORY, "reserve", st);
      if (st == VPMM_OK) res_.push_back(r);
    }
  }

  void lookups() {
    for (const Block& b : blocks_) {
      void* base = nullptr;
      uint64_t size = 0;
      vpmm_status st = vpmm_pool_lookup(sh_.pool, static_cast<char*>(b.p) + b.size / 2, &base, &size);
      expect(st == VPMM_OK && base == b.p && size == b.size, "lookup", st);
    }
  }

  Shared& sh_;
  int id_;
  std::mt19937_64 rng_;
  std::string tag_;
  vpmm_stream own_, other_;
  std::vector<Block> blocks_;
  std::vector<vpmm_reservation*> res_;
};

void monitor(Shared& sh, uint64_t* rounds) {
  std::vector<char> text(1 << 16);
  while (!sh.stop.load()) {
    vpmm_status st = vpmm_pool_check(sh.pool);
    expect(st == VPMM_OK, "check", st);
    vpmm_stats s = vt::stats(sh.pool);
    expect(s.free_bytes + s.live_bytes <= s.mapped_bytes + s.paused_bytes, "stats: free + live <= mapped",
           VPMM_ERR_INTERNAL);
    // One consistent dump (grow the buffer until it holds every region).
    std::vector<vpmm_region_info> regs = vt::region_buffer(64);
    size_t n = 0;
    for (;;) {
      st = vpmm_pool_dump(sh.pool, regs.data(), regs.size(), &n);
      expect(st == VPMM_OK, "dump", st);
      if (st != VPMM_OK || n <= regs.size()) break;
      regs = vt::region_buffer(2 * n);
    }
    uint64_t reserved = 0;
    for (size_t k = 0; k < n && k < regs.size(); ++k) reserved += regs[k].size;
    // Two snapshots: VA chunks are only ever added in between.
    expect(reserved >= s.reserved_va_bytes, "regions tile the reserved VA", VPMM_ERR_INTERNAL);
    size_t needed = 0;
    st = vpmm_pool_dump_text(sh.pool, text.data(), text.size(), &needed);
    expect(st == VPMM_OK, "dump_text", st);
    vpmm_tag_stats ts;
    std::memset(&ts, 0, sizeof ts);
    ts.struct_size = sizeof ts;
    st = vpmm_pool_tag_stats(sh.pool, nullptr, &ts);
    expect(st == VPMM_OK, "tag_stats", st);
    ++*rounds;
    std::this_thread::yield();
  }
}

}  // namespace

TEST("16 threads, 4 shared streams: kernels, holds, pause/resume, trim, limits, reservations") {
  vt::HostPoolSpec spec;
  spec.page = kPage;
  spec.va_pages = 1024;
  spec.capacity = 64ull << 20;
  spec.max_handle = 4 * kPage;
  Shared sh;
  sh.pool = vt::make_host_pool(spec);
  CHECK(sh.pool != nullptr);
  if (!sh.pool) return;
  for (auto& s : sh.streams) CHECK_OK(vpmm_host_stream_create(&s));
  std::vector<std::unique_ptr<Worker>> workers;
  for (int i = 0; i < kThreads; ++i) workers.emplace_back(new Worker(sh, i));
  uint64_t rounds = 0;
  std::thread mon(monitor, std::ref(sh), &rounds);
  std::vector<std::thread> ts;
  for (auto& w : workers) ts.emplace_back([&w] { w->run(); });
  for (auto& t : ts) t.join();
  sh.stop = true;
  mon.join();
  for (vpmm_stream s : sh.streams) CHECK_OK(vpmm_host_stream_synchronize(s));
  uint64_t mallocs = 0, frees = 0, ooms = 0;
  for (auto& w : workers) {
    mallocs += w->mallocs;
    frees += w->frees;
    ooms += w->ooms;
  }
  std::printf("  %" PRIu64 " mallocs (%" PRIu64 " out of memory), %" PRIu64 " frees, %" PRIu64
              " monitor rounds\n", mallocs, ooms, frees, rounds);
  CHECK_EQ(g_bad.load(), uint64_t(0));
  CHECK_EQ(g_errors.load(), uint64_t(0));
  CHECK_EQ(mallocs, frees);
  CHECK_OK(vpmm_pool_check(sh.pool));
  vpmm_stats st = vt::stats(sh.pool);
  CHECK_EQ(st.n_live, uint64_t(0));
  CHECK_EQ(st.requested_bytes, uint64_t(0));
  CHECK_EQ(st.n_malloc, mallocs);
  CHECK_OK(vpmm_pool_destroy(sh.pool));
  for (vpmm_stream s : sh.streams) CHECK_OK(vpmm_host_stream_destroy(s));
}

TEST_MAIN()
