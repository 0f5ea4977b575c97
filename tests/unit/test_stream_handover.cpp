// Memory between streams (docs/design.md, "Memory between streams"): memory
// that reaches a stream while another stream's work on it is still queued
// is ordered after that work, whatever step of the placement chain found it
// (Phase 1, pending reuse, views, Phase 2) and whichever stream frees it
// later. On the host backend, whose held host streams play a GPU that is
// behind: a held stream's queued "kernels" write late, and no test here
// breaks stream order on its own side (an allocation written by a stream is
// freed on that stream; one never touched may be freed anywhere).
// Every chain (VPMM_PLACEMENT_*) runs every case. Pages of 64 KiB.
#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "check.hpp"
#include "host_kernels.hpp"
#include "pool_util.hpp"
#include "vpmm_host_streams.h"

namespace {

using vt::Fill;
using vt::Stamp;
using vt::fill_on_stream;
using vt::run_unless_waiting;
using vt::stamp;

constexpr uint64_t kPage = 64 << 10;
constexpr int32_t kChains[] = {VPMM_PLACEMENT_DEFAULT, VPMM_PLACEMENT_EXACT, VPMM_PLACEMENT_VIEWS,
                               VPMM_PLACEMENT_PENDING};

vpmm_pool* host_pool(int32_t chain, uint64_t view_pages) {
  vt::HostPoolSpec s;
  s.page = kPage;
  s.va_pages = 1024;
  s.capacity = 256ull << 20;
  s.small_size = 1;
  s.remap_slack = -1;
  s.placement = chain;
  s.view_min_size = view_pages * kPage;
  s.defaults_only = true;
  return vt::make_host_pool(s);
}



struct Streams {
  vpmm_pool* p;
  std::vector<vpmm_stream> s;
  Streams(vpmm_pool* pool, int n) : p(pool), s(n, nullptr) {
    for (auto& x : s) CHECK_OK(vpmm_pool_stream_create(p, &x));
  }
  ~Streams() {
    for (auto x : s) vpmm_host_stream_synchronize(x);
    for (auto x : s) CHECK_OK(vpmm_pool_stream_destroy(p, x));
  }
};

void* take(vpmm_pool* p, uint64_t pages, vpmm_stream s) {
  void* out = nullptr;
  return vpmm_pool_malloc(p, pages * kPage, s, &out) == VPMM_OK ? out : nullptr;
}

// The review's case: B frees two 8-page pieces with its late writes still
// queued; A asks for 16 pages, which no free region holds (a view takes B's
// pieces where views are on, Phase 2 moves them elsewhere, pending reuse
// cannot: neither fits whole), never touches them and frees them on a third
// stream D; E then asks for 16 pages and fills them on E. B's late writes
// must not reach E's bytes.
void borrowed_then_freed_on_third(int32_t chain) {
  vpmm_pool* p = host_pool(chain, chain == VPMM_PLACEMENT_VIEWS || chain == VPMM_PLACEMENT_PENDING ? 8 : 0);
  CHECK(p != nullptr);
  if (!p) return;
  {
    Streams st(p, 4);
    vpmm_stream a = st.s[0], b = st.s[1], d = st.s[2], e = st.s[3];
    void* x1 = take(p, 8, b);
    void* wall = take(p, 1, b);
    void* x2 = take(p, 8, b);
    void* end = take(p, 1, b);
    CHECK(x1 && wall && x2 && end);
    Stamp l1{x1, 8 * kPage, 0x5a}, l2{x2, 8 * kPage, 0x5a};
    CHECK_OK(vpmm_host_stream_hold(b));
    CHECK_OK(vpmm_host_stream_launch(b, stamp, &l1));
    CHECK_OK(vpmm_host_stream_launch(b, stamp, &l2));
    CHECK_OK(vpmm_pool_free(p, x1, b));
    CHECK_OK(vpmm_pool_free(p, x2, b));
    void* borrowed = take(p, 16, a);
    CHECK(borrowed != nullptr);
    CHECK_OK(vpmm_pool_free(p, borrowed, d));  // never touched: any stream may free it
    void* mine = take(p, 16, e);
    CHECK(mine != nullptr);
    Fill f{mine, 16 * kPage, 11};
    CHECK_OK(vpmm_host_stream_launch(e, fill_on_stream, &f));
    run_unless_waiting(e);
    CHECK_OK(vpmm_host_stream_release(b));
    for (auto x : st.s) CHECK_OK(vpmm_host_stream_synchronize(x));
    CHECK_EQ(l1.ran.load() + l2.ran.load(), 2);
    CHECK(vt::verify(mine, 16 * kPage, 11));
    CHECK_OK(vpmm_pool_free(p, mine, e));
    CHECK_OK(vpmm_pool_free(p, wall, b));
    CHECK_OK(vpmm_pool_free(p, end, b));
    CHECK_OK(vpmm_pool_check(p));
  }
  CHECK_OK(vpmm_pool_destroy(p));
}

// The same through a region that fits whole: the pending chain takes B's
// pending 16 pages in place for A.
void whole_region_then_freed_on_third(int32_t chain) {
  vpmm_pool* p = host_pool(chain, 0);
  CHECK(p != nullptr);
  if (!p) return;
  {
    Streams st(p, 4);
    vpmm_stream a = st.s[0], b = st.s[1], d = st.s[2], e = st.s[3];
    void* x = take(p, 16, b);
    void* end = take(p, 1, b);
    CHECK(x && end);
    Stamp late{x, 16 * kPage, 0x5a};
    CHECK_OK(vpmm_host_stream_hold(b));
    CHECK_OK(vpmm_host_stream_launch(b, stamp, &late));
    CHECK_OK(vpmm_pool_free(p, x, b));
    void* borrowed = take(p, 16, a);
    CHECK(borrowed != nullptr);
    CHECK_OK(vpmm_pool_free(p, borrowed, d));
    void* mine = take(p, 16, e);
    CHECK(mine != nullptr);
    Fill f{mine, 16 * kPage, 12};
    CHECK_OK(vpmm_host_stream_launch(e, fill_on_stream, &f));
    run_unless_waiting(e);
    CHECK_OK(vpmm_host_stream_release(b));
    for (auto s : st.s) CHECK_OK(vpmm_host_stream_synchronize(s));
    CHECK_EQ(late.ran.load(), 1);
    CHECK(vt::verify(mine, 16 * kPage, 12));
    CHECK_OK(vpmm_pool_free(p, mine, e));
    CHECK_OK(vpmm_pool_free(p, end, b));
    CHECK_OK(vpmm_pool_check(p));
  }
  CHECK_OK(vpmm_pool_destroy(p));
}

// A model of a program behind its GPU: random allocations on four streams,
// each filled on its own stream; before a written allocation is freed (on
// its own stream) a late write of its own pattern is queued, so the stream's
// queue still uses the memory when the pool may hand it out; untouched
// allocations are freed on a random stream; streams are held and released
// at random. After every round all streams drain and every live
// allocation's bytes are checked.
void model(int32_t chain, uint32_t seed) {
  vpmm_pool* p = host_pool(chain, 0);
  CHECK(p != nullptr);
  if (!p) return;
  std::mt19937 rng(seed);
  struct Live {
    void* ptr;
    uint64_t bytes;
    uint64_t seed;
    int stream;
    bool written;
  };
  std::vector<Live> live;
  std::vector<std::unique_ptr<Fill>> work;  // kept until the round drained
  uint64_t next_seed = 100;
  int failures = 0;
  {
    Streams st(p, 4);
    std::vector<int> held(4, 0);
    for (int round = 0; round < 12; ++round) {
      for (int op = 0; op < 60; ++op) {
        const int s = static_cast<int>(rng() % 4);
        const uint32_t what = rng() % 10;
        if (what < 5 || live.empty()) {
          const uint64_t pages = 1 + rng() % 24;
          void* q = take(p, pages, st.s[s]);
          if (!q) continue;  // the host capacity: a later free makes room
          Live l{q, pages * kPage, next_seed++, s, rng() % 4 != 0};
          if (l.written) {
            work.emplace_back(new Fill{q, l.bytes, l.seed});
            CHECK_OK(vpmm_host_stream_launch(st.s[s], fill_on_stream, work.back().get()));
          }
          live.push_back(l);
        } else if (what < 8) {
          const size_t k = rng() % live.size();
          Live l = live[k];
          live.erase(live.begin() + static_cast<long>(k));
          int on = l.stream;
          if (l.written) {
            // Its stream still uses it: a late write of its own bytes.
            work.emplace_back(new Fill{l.ptr, l.bytes, l.seed});
            CHECK_OK(vpmm_host_stream_launch(st.s[on], fill_on_stream, work.back().get()));
          } else {
            on = static_cast<int>(rng() % 4);  // never touched: freed on any stream
          }
          CHECK_OK(vpmm_pool_free(p, l.ptr, st.s[on]));
        } else if (what == 8) {
          if (!held[s]) {
            CHECK_OK(vpmm_host_stream_hold(st.s[s]));
            held[s] = 1;
          }
        } else if (held[s]) {
          CHECK_OK(vpmm_host_stream_release(st.s[s]));
          held[s] = 0;
        }
      }
      for (int s = 0; s < 4; ++s)
        if (held[s]) {
          CHECK_OK(vpmm_host_stream_release(st.s[s]));
          held[s] = 0;
        }
      for (auto x : st.s) CHECK_OK(vpmm_host_stream_synchronize(x));
      for (const Live& l : live)
        if (l.written && !vt::verify(l.ptr, l.bytes, l.seed)) ++failures;
      work.clear();
      CHECK_OK(vpmm_pool_check(p));
    }
    for (const Live& l : live) CHECK_OK(vpmm_pool_free(p, l.ptr, st.s[l.stream]));
  }
  CHECK_EQ(failures, 0);
  CHECK_OK(vpmm_pool_destroy(p));
}

}  // namespace

TEST("memory a request borrowed from another stream's pending frees and freed on a third is ordered, every chain") {
  for (int32_t chain : kChains) borrowed_then_freed_on_third(chain);
}

TEST("a pending region taken whole and freed on a third stream is ordered, every chain") {
  for (int32_t chain : kChains) whole_region_then_freed_on_third(chain);
}

TEST("a program behind its GPU: random frees on third streams, every byte checked, every chain") {
  for (int32_t chain : kChains)
    for (uint32_t seed : {1u, 2u, 3u}) model(chain, seed);
}

TEST_MAIN()
