// Memory freed on one stream with that stream's work still pending, taken
// again on the same stream (where stream order makes it safe), then freed on
// a second stream: a third stream must not get it before the first stream's
// work ran, whether the memory comes back as the same region, as a Phase 2
// span or as a view, and whether or not the first stream was retired. On
// the host backend, with held host streams standing for late kernels.
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
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

// Page-exact (remap_slack -1: what moves is what the tests say), no small
// objects unless asked for, the environment ignored.
vpmm_pool* host_pool(uint64_t limit_pages = 0, uint64_t small_size = 1, uint64_t view_min_pages = 0) {
  vt::HostPoolSpec s;
  s.page = kPage;
  s.va_pages = 512;
  s.memory_limit = limit_pages * kPage;
  s.small_size = small_size;
  s.remap_slack = -1;
  s.view_min_size = view_min_pages * kPage;
  s.defaults_only = true;
  return vt::make_host_pool(s);
}



// The late-kernel scenario: memory that stream A freed with A's
// work pending is taken again on A by `take_on_a` (which never uses it),
// freed on B, then taken on C. A's late write must not land in C's data.
void cross_stream_case(vpmm_pool* p, uint64_t bytes, void* (*take_on_a)(vpmm_pool*, uint64_t, vpmm_stream)) {
  vpmm_stream a = nullptr, b = nullptr, c = nullptr;
  CHECK_OK(vpmm_pool_stream_create(p, &a));
  CHECK_OK(vpmm_pool_stream_create(p, &b));
  CHECK_OK(vpmm_pool_stream_create(p, &c));
  void* first = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, bytes, a, &first));
  Stamp late{first, bytes, 0x5a};
  CHECK_OK(vpmm_host_stream_hold(a));
  CHECK_OK(vpmm_host_stream_launch(a, stamp, &late));  // A's work on the first allocation, pending
  CHECK_OK(vpmm_pool_free(p, first, a));
  void* again = take_on_a(p, bytes, a);  // stream order on A makes this safe: never used
  CHECK(again != nullptr);
  CHECK_OK(vpmm_pool_free(p, again, b));  // B never used it either: B's event completes at once
  void* mine = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, bytes, c, &mine));
  Fill f{mine, bytes, 3};
  CHECK_OK(vpmm_host_stream_launch(c, fill_on_stream, &f));  // C's data, written on C
  run_unless_waiting(c);
  CHECK_OK(vpmm_host_stream_release(a));  // A's late kernel runs
  CHECK_OK(vpmm_host_stream_synchronize(a));
  CHECK_OK(vpmm_host_stream_synchronize(b));
  CHECK_OK(vpmm_host_stream_synchronize(c));
  CHECK_EQ(late.ran.load(), 1);
  CHECK(vt::verify(mine, bytes, 3));  // A's 0x5a did not overwrite C's bytes
  CHECK_OK(vpmm_pool_free(p, mine, c));
  CHECK_OK(vpmm_pool_check(p));
  CHECK_OK(vpmm_pool_stream_destroy(p, a));
  CHECK_OK(vpmm_pool_stream_destroy(p, b));
  CHECK_OK(vpmm_pool_stream_destroy(p, c));
}

void* take_plain(vpmm_pool* p, uint64_t bytes, vpmm_stream s) {
  void* out = nullptr;
  return vpmm_pool_malloc(p, bytes, s, &out) == VPMM_OK ? out : nullptr;
}

// The setting of the span and view cases: A's pending pages lie in
// two pieces, x and y (two pages each, taken on A) around a live `wall` page,
// with a live `end` page after y; x and y are freed on A while A (held) has
// a late 0x5a stamp pending on each. B and C are streams of the pool too.
struct SplitPending {
  vpmm_pool* p;
  vpmm_stream a = nullptr, b = nullptr, c = nullptr;
  void* wall = nullptr;
  void* end = nullptr;
  Stamp lx{nullptr, 2 * kPage, 0x5a}, ly{nullptr, 2 * kPage, 0x5a};

  explicit SplitPending(vpmm_pool* pool) : p(pool) {
    CHECK_OK(vpmm_pool_stream_create(p, &a));
    CHECK_OK(vpmm_pool_stream_create(p, &b));
    CHECK_OK(vpmm_pool_stream_create(p, &c));
    void* x = take_plain(p, 2 * kPage, a);
    wall = take_plain(p, kPage, a);
    void* y = take_plain(p, 2 * kPage, a);
    end = take_plain(p, kPage, a);
    CHECK(x && wall && y && end);
    lx.block = x;
    ly.block = y;
    CHECK_OK(vpmm_host_stream_hold(a));
    CHECK_OK(vpmm_host_stream_launch(a, stamp, &lx));
    CHECK_OK(vpmm_host_stream_launch(a, stamp, &ly));
    CHECK_OK(vpmm_pool_free(p, x, a));
    CHECK_OK(vpmm_pool_free(p, y, a));
  }
  // A's late stamps run; C's work, launched before, has run too.
  void release_a() {
    CHECK_OK(vpmm_host_stream_release(a));
    CHECK_OK(vpmm_host_stream_synchronize(a));
    CHECK_OK(vpmm_host_stream_synchronize(c));
  }
  // Frees the test's blocks and the two live pages, checks the pool, and
  // destroys the streams and the pool.
  void finish(std::initializer_list<void*> mine) {
    for (void* q : mine) CHECK_OK(vpmm_pool_free(p, q, nullptr));
    for (void* q : {wall, end}) CHECK_OK(vpmm_pool_free(p, q, nullptr));
    CHECK_OK(vpmm_pool_check(p));
    for (vpmm_stream s : {a, b, c}) CHECK_OK(vpmm_pool_stream_destroy(p, s));
    CHECK_OK(vpmm_pool_destroy(p));
  }
};

}  // namespace

TEST("memory freed on A with A's work pending, reused on A, freed on B is not C's until A's work ran") {
  vpmm_pool* p = host_pool();
  CHECK(p != nullptr);
  cross_stream_case(p, 4 * kPage, take_plain);
  CHECK_OK(vpmm_pool_destroy(p));
}

TEST("a Phase 2 span built on A's pending pages, reused on A and freed on B, is not C's until A's work ran") {
  vpmm_pool* p = host_pool();
  CHECK(p != nullptr);
  SplitPending t(p);
  // The 4-page malloc on A remaps A's two pending pieces into one span
  // (Phase 2, no wait on its own stream).
  vpmm_stats before = vt::stats(p);
  void* span = take_plain(p, 4 * kPage, t.a);
  CHECK(span != nullptr);
  CHECK(vt::stats(p).n_defrag > before.n_defrag);  // the pages moved into one span
  CHECK_OK(vpmm_pool_free(p, span, t.b));
  void* mine = take_plain(p, 4 * kPage, t.c);
  CHECK(mine != nullptr);
  Fill f{mine, 4 * kPage, 3};
  CHECK_OK(vpmm_host_stream_launch(t.c, fill_on_stream, &f));
  run_unless_waiting(t.c);
  t.release_a();
  CHECK(vt::verify(mine, 4 * kPage, 3));
  t.finish({mine});
}

TEST("a view assembled from A's pending pages, freed on B, is not C's until A's work ran") {
  vpmm_pool* p = host_pool(0, 1, /*view_min_pages=*/4);
  CHECK(p != nullptr);
  SplitPending t(p);
  vpmm_stats before = vt::stats(p);
  void* view = take_plain(p, 4 * kPage, t.a);  // A's pending pages, where they lie
  CHECK(view != nullptr);
  CHECK_EQ(vt::stats(p).n_view_malloc, before.n_view_malloc + 1);
  CHECK_OK(vpmm_pool_free(p, view, t.b));
  void* m1 = take_plain(p, 2 * kPage, t.c);
  void* m2 = take_plain(p, 2 * kPage, t.c);
  CHECK(m1 && m2);
  Fill f1{m1, 2 * kPage, 3}, f2{m2, 2 * kPage, 4};
  CHECK_OK(vpmm_host_stream_launch(t.c, fill_on_stream, &f1));
  CHECK_OK(vpmm_host_stream_launch(t.c, fill_on_stream, &f2));
  run_unless_waiting(t.c);
  t.release_a();
  CHECK(vt::verify(m1, 2 * kPage, 3));
  CHECK(vt::verify(m2, 2 * kPage, 4));
  t.finish({m1, m2});
}

TEST("a free on the allocating stream adds no wait and records no event") {
  vpmm_pool* p = host_pool();
  CHECK(p != nullptr);
  vpmm_stream a = nullptr;
  CHECK_OK(vpmm_pool_stream_create(p, &a));
  void* first = take_plain(p, 4 * kPage, a);
  CHECK_OK(vpmm_host_stream_hold(a));
  CHECK_OK(vpmm_pool_free(p, first, a));
  const vpmm_stats before = vt::stats(p);
  void* again = take_plain(p, 4 * kPage, a);
  CHECK_EQ(again, first);
  CHECK_OK(vpmm_pool_free(p, again, a));
  const vpmm_stats after = vt::stats(p);
  CHECK_EQ(after.n_stream_waits, before.n_stream_waits);
  CHECK_EQ(after.n_events_recorded, before.n_events_recorded);
  CHECK_OK(vpmm_host_stream_release(a));
  CHECK_OK(vpmm_pool_stream_destroy(p, a));
  CHECK_OK(vpmm_pool_destroy(p));
}

TEST("memory reused on A, A retired, then freed on B is not C's until A's work ran") {
  vpmm_pool* p = host_pool();
  CHECK(p != nullptr);
  vpmm_stream a = nullptr, b = nullptr, c = nullptr;
  CHECK_OK(vpmm_host_stream_create(&a));  // the caller's stream: retired, then destroyed by the caller
  CHECK_OK(vpmm_pool_stream_create(p, &b));
  CHECK_OK(vpmm_pool_stream_create(p, &c));
  void* first = take_plain(p, 4 * kPage, a);
  Stamp late{first, 4 * kPage, 0x5a};
  CHECK_OK(vpmm_host_stream_hold(a));
  CHECK_OK(vpmm_host_stream_launch(a, stamp, &late));
  CHECK_OK(vpmm_pool_free(p, first, a));
  void* again = take_plain(p, 4 * kPage, a);
  CHECK_EQ(again, first);
  CHECK_OK(vpmm_pool_stream_retire(p, a));  // its allocations keep a's last point
  CHECK_OK(vpmm_pool_free(p, again, b));
  void* mine = take_plain(p, 4 * kPage, c);
  CHECK(mine != nullptr);
  Fill f{mine, 4 * kPage, 3};
  CHECK_OK(vpmm_host_stream_launch(c, fill_on_stream, &f));
  run_unless_waiting(c);
  CHECK_OK(vpmm_host_stream_release(a));
  CHECK_OK(vpmm_host_stream_synchronize(a));
  CHECK_OK(vpmm_host_stream_synchronize(c));
  CHECK(vt::verify(mine, 4 * kPage, 3));
  CHECK_OK(vpmm_pool_free(p, mine, c));
  CHECK_OK(vpmm_pool_check(p));
  CHECK_OK(vpmm_host_stream_destroy(a));
  CHECK_OK(vpmm_pool_stream_destroy(p, b));
  CHECK_OK(vpmm_pool_stream_destroy(p, c));
  CHECK_OK(vpmm_pool_destroy(p));
}


TEST_MAIN()
