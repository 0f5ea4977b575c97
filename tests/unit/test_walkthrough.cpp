// The four walkthrough cases of docs/design.md on the host backend.
// One page stands for the seed's "1 GB"; PAGES = 11 + X initial pages; the
// sequence is +10 > +1 > -10 > +4 > +11 on one stream. Each case asserts the
// exact layout (sizes and chunk offsets), the mapped pages, and that the data
// of the surviving allocations ([1] and [4]) is intact after defragmentation.
#include <string>

#include "check.hpp"
#include "pool_util.hpp"
#include "vpmm_host_streams.h"

namespace {

constexpr uint64_t kPage = 64 << 10;
constexpr uint64_t kVaPages = 64;

struct Result {
  std::string layout;
  uint64_t mapped_pages = 0;
  uint64_t off1 = 0, off4 = 0, off11 = 0;  // chunk offsets, in pages
  bool data_ok = false;
  uint64_t n_defrag = 0, n_grow = 0;
  vpmm_status check = -1;
};

Result run_case(uint64_t x, vpmm_stream s = nullptr, uint64_t large_rounding = 0) {
  Result res;
  vt::HostPoolSpec spec;
  spec.page = kPage;
  spec.va_pages = kVaPages;
  spec.initial_pages = 11 + x;
  spec.large_rounding = large_rounding;
  vpmm_pool* p = vt::make_host_pool(spec);
  CHECK(p != nullptr);
  if (!p) return res;
  void *a10 = nullptr, *a1 = nullptr, *a4 = nullptr, *a11 = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, 10 * kPage, s, &a10));
  CHECK_OK(vpmm_pool_malloc(p, 1 * kPage, s, &a1));
  vt::fill(a1, kPage, 1);
  CHECK_OK(vpmm_pool_free(p, a10, s));
  CHECK_OK(vpmm_pool_malloc(p, 4 * kPage, s, &a4));
  vt::fill(a4, 4 * kPage, 4);
  CHECK_OK(vpmm_pool_check(p));
  CHECK_OK(vpmm_pool_malloc(p, 11 * kPage, s, &a11));
  vt::fill(a11, 11 * kPage, 11);  // every page of the new allocation is writable
  res.check = vpmm_pool_check(p);
  res.layout = vt::layout(p);
  vpmm_stats st = vt::stats(p);
  res.mapped_pages = st.mapped_bytes / kPage;
  res.n_defrag = st.n_defrag;
  res.n_grow = st.n_grow;
  res.off1 = vt::chunk_offset(p, a1) / kPage;
  res.off4 = vt::chunk_offset(p, a4) / kPage;
  res.off11 = vt::chunk_offset(p, a11) / kPage;
  res.data_ok = vt::verify(a1, kPage, 1) && vt::verify(a4, 4 * kPage, 4) &&
                vt::verify(a11, 11 * kPage, 11);
  CHECK_EQ(st.live_bytes, 16 * kPage);
  CHECK_EQ(st.requested_bytes, 16 * kPage);
  CHECK_OK(vpmm_pool_free(p, a1, s));
  CHECK_OK(vpmm_pool_free(p, a4, s));
  CHECK_OK(vpmm_pool_free(p, a11, s));
  CHECK_OK(vpmm_pool_check(p));
  CHECK_EQ(vt::stats(p).live_bytes, uint64_t(0));
  CHECK_OK(vpmm_pool_destroy(p));
  return res;
}

std::string hole(uint64_t pages) { return "[*" + std::to_string(pages) + "]"; }

}  // namespace

// Case A, X >= 11: no defragmentation. [4][-6][1][+11][-(X-11)]
TEST("case A: X >= 11, best fit, no defrag") {
  for (uint64_t x : {11u, 12u, 20u}) {
    Result r = run_case(x);
    std::string tail = x > 11 ? "[-" + std::to_string(x - 11) + "]" : "";
    CHECK_EQ(r.layout, "[4][-6][1][11]" + tail + hole(kVaPages - 11 - x));
    CHECK_EQ(r.mapped_pages, 11 + x);
    CHECK_EQ(r.off4, uint64_t(0));
    CHECK_EQ(r.off1, uint64_t(10));
    CHECK_EQ(r.off11, uint64_t(11));
    CHECK_EQ(r.n_defrag, uint64_t(0));
    CHECK_EQ(r.n_grow, uint64_t(0));
    CHECK(r.data_ok);
    CHECK_EQ(r.check, VPMM_OK);
  }
}

// Case B, 5 <= X < 11: [-10] is remapped behind [-(X-4)]; no new pages.
// [*10][1][4][+11][-(X-5)]
TEST("case B: 5 <= X < 11, defragment by remapping, no growth") {
  for (uint64_t x = 5; x < 11; ++x) {
    Result r = run_case(x);
    std::string tail = x > 5 ? "[-" + std::to_string(x - 5) + "]" : "";
    // The moved pages land in the hole right after the old end (11 + X).
    CHECK_EQ(r.layout, "[*10][1][4][11]" + tail + hole(kVaPages - (11 + x) - 10));
    CHECK_EQ(r.mapped_pages, 11 + x);
    CHECK_EQ(r.off1, uint64_t(10));
    CHECK_EQ(r.off4, uint64_t(11));
    CHECK_EQ(r.off11, uint64_t(15));
    CHECK_EQ(r.n_defrag, uint64_t(1));
    CHECK_EQ(r.n_grow, uint64_t(0));
    CHECK(r.data_ok);
    CHECK_EQ(r.check, VPMM_OK);
  }
}

// Case C, X == 4: defragment, then create exactly one page. [*10][1][4][+11]
// Page sharing (large_rounding below the page) changes nothing for requests
// of whole pages: every case ends as with whole-page rounding.
TEST("cases A-D are the same with 512-byte rounding") {
  for (uint64_t x = 0; x <= 14; ++x) {
    Result pages = run_case(x), shared = run_case(x, nullptr, 512);
    CHECK_EQ(shared.layout, pages.layout);
    CHECK_EQ(shared.mapped_pages, pages.mapped_pages);
    CHECK_EQ(shared.off11, pages.off11);
    CHECK(shared.data_ok);
    CHECK_EQ(shared.check, VPMM_OK);
  }
}

TEST("case C: X == 4, defragment then grow by the one-page shortfall") {
  Result r = run_case(4);
  CHECK_EQ(r.layout, "[*10][1][4][11]" + hole(kVaPages - 26));
  CHECK_EQ(r.mapped_pages, uint64_t(16));
  CHECK_EQ(r.off1, uint64_t(10));
  CHECK_EQ(r.off4, uint64_t(11));
  CHECK_EQ(r.off11, uint64_t(15));
  CHECK_EQ(r.n_defrag, uint64_t(1));
  CHECK_EQ(r.n_grow, uint64_t(1));
  CHECK(r.data_ok);
  CHECK_EQ(r.check, VPMM_OK);
}

// Case D, 0 <= X < 4: +4 reuses the front of [-10]; [-6] is remapped behind
// [-X] and 5 - X pages are created. [4][*6][1][+11]
TEST("case D: 0 <= X < 4, defragment the split leftover and grow") {
  for (uint64_t x = 0; x < 4; ++x) {
    Result r = run_case(x);
    CHECK_EQ(r.layout, "[4][*6][1][11]" + hole(kVaPages - 22));
    CHECK_EQ(r.mapped_pages, uint64_t(16));
    CHECK_EQ(r.off4, uint64_t(0));
    CHECK_EQ(r.off1, uint64_t(10));
    CHECK_EQ(r.off11, uint64_t(11));
    CHECK_EQ(r.n_defrag, uint64_t(1));
    CHECK_EQ(r.n_grow, uint64_t(1));
    CHECK(r.data_ok);
    CHECK_EQ(r.check, VPMM_OK);
  }
}

// The same sequence with no initial pages grows by the shortfall only. How
// much can be remapped depends on the handle policy (docs/handles.md): with
// one handle per page, and with the default scaled handles (a growth this
// small is cut into pages), the split leftover [-6] moves and 16 pages serve
// 16 live; with one handle per growth [-6] shares a handle with the live [4],
// cannot move, and the 11-page shortfall is created instead.
static void growth_sequence(uint64_t max_handle, const std::string& want_layout,
                            uint64_t want_pages) {
  vt::HostPoolSpec spec;
  spec.page = kPage;
  spec.va_pages = kVaPages;
  spec.max_handle = max_handle;
  vpmm_pool* p = vt::make_host_pool(spec);
  CHECK(p != nullptr);
  if (!p) return;
  void *a10, *a1, *a4, *a11;
  CHECK_OK(vpmm_pool_malloc(p, 10 * kPage, nullptr, &a10));
  CHECK_OK(vpmm_pool_malloc(p, 1 * kPage, nullptr, &a1));
  CHECK_EQ(vt::stats(p).mapped_bytes, 11 * kPage);
  CHECK_OK(vpmm_pool_free(p, a10, nullptr));
  CHECK_OK(vpmm_pool_malloc(p, 4 * kPage, nullptr, &a4));
  CHECK_EQ(vt::stats(p).mapped_bytes, 11 * kPage);
  CHECK_OK(vpmm_pool_malloc(p, 11 * kPage, nullptr, &a11));
  CHECK_EQ(vt::stats(p).mapped_bytes, want_pages * kPage);
  CHECK_EQ(vt::layout(p), want_layout);
  CHECK_OK(vpmm_pool_check(p));
  vpmm_pool_destroy(p);
}

TEST("growth from empty, one handle per page: page-exact remap") {
  growth_sequence(kPage, "[4][*6][1][11]" + hole(kVaPages - 22), 16);
}

TEST("growth from empty, default scaled handles: page-exact remap") {
  growth_sequence(0, "[4][*6][1][11]" + hole(kVaPages - 22), 16);
}

TEST("growth from empty, one handle per growth: partial handles stay") {
  growth_sequence(VPMM_HANDLE_SIZE_UNLIMITED, "[4][-6][1][11]" + hole(kVaPages - 22), 22);
}

// The same five calls on a stream of the caller's (not the default stream):
// initial pages were used by no stream, so they serve any stream as its own
// and the layouts are the seed's.
TEST("cases A-D on a non-default stream give the same layouts") {
  vpmm_stream st = nullptr;
  CHECK_OK(vpmm_host_stream_create(&st));
  for (uint64_t x : {12u, 7u, 4u, 2u}) {
    Result a = run_case(x, nullptr), b = run_case(x, st);
    CHECK_EQ(b.layout, a.layout);
    CHECK_EQ(b.mapped_pages, a.mapped_pages);
    CHECK(b.data_ok);
  }
  CHECK_OK(vpmm_host_stream_destroy(st));
}


// The default policy: its growths here are small enough to be cut into page handles.
static vpmm_pool* default_policy_pool() {
  vt::HostPoolSpec spec;
  spec.page = kPage;
  spec.va_pages = kVaPages;
  return vt::make_host_pool(spec);
}

// One malloc's driver work is bounded (pool.hpp, kHandleOpsPerCall): the
// pages its request needs always move, but a whole-region move beyond them
// (case B's consolidation) only fits what is left of the budget.
// [A 16][x 1][C 12][y 1], C then A freed; a 20-page malloc moves C (12) and
// needs 8 more from A. Moving A whole would map 28 handles in one call (over
// the 24 of the budget): only A's first 8 pages move, its rest stays free.
TEST("Phase 2 moves what the request needs; whole-region moves stay within the call's budget") {
  vpmm_pool* p = default_policy_pool();
  CHECK(p != nullptr);
  if (!p) return;
  void *a = nullptr, *x = nullptr, *c = nullptr, *y = nullptr, *big = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, 16 * kPage, nullptr, &a));
  CHECK_OK(vpmm_pool_malloc(p, 1 * kPage, nullptr, &x));
  CHECK_OK(vpmm_pool_malloc(p, 12 * kPage, nullptr, &c));
  CHECK_OK(vpmm_pool_malloc(p, 1 * kPage, nullptr, &y));
  CHECK_EQ(vt::stats(p).handles, uint64_t(30));
  CHECK_OK(vpmm_pool_free(p, c, nullptr));
  CHECK_OK(vpmm_pool_free(p, a, nullptr));
  vpmm_stats before = vt::stats(p);
  CHECK_OK(vpmm_pool_malloc(p, 20 * kPage, nullptr, &big));
  vt::fill(big, 20 * kPage, 7);
  vpmm_stats after = vt::stats(p);
  CHECK_EQ(after.n_defrag - before.n_defrag, uint64_t(1));
  CHECK_EQ(after.n_grow, before.n_grow);
  CHECK_EQ((after.bytes_remapped - before.bytes_remapped) / kPage, uint64_t(20));
  CHECK_EQ(after.mapped_bytes, before.mapped_bytes);  // page-exact: nothing grew
  CHECK_EQ(after.free_bytes, 8 * kPage);              // A's other 8 pages, in place
  CHECK(vt::verify(big, 20 * kPage, 7));
  CHECK_OK(vpmm_pool_check(p));
  vpmm_pool_destroy(p);
}

TEST("Phase 2 joins a free region beside a hole: only the pages it lacks move") {
  vpmm_pool* p = default_policy_pool();
  CHECK(p != nullptr);
  if (!p) return;
  void *a, *b, *c, *d, *x, *g, *k, *e, *want;
  CHECK_OK(vpmm_pool_malloc(p, 2 * kPage, nullptr, &a));
  CHECK_OK(vpmm_pool_malloc(p, 2 * kPage, nullptr, &b));
  CHECK_OK(vpmm_pool_malloc(p, 4 * kPage, nullptr, &c));
  CHECK_OK(vpmm_pool_malloc(p, 1 * kPage, nullptr, &d));
  CHECK_OK(vpmm_pool_malloc(p, 1 * kPage, nullptr, &x));
  CHECK_OK(vpmm_pool_malloc(p, 2 * kPage, nullptr, &g));
  CHECK_OK(vpmm_pool_malloc(p, 1 * kPage, nullptr, &k));
  CHECK_OK(vpmm_pool_free(p, a, nullptr));
  CHECK_OK(vpmm_pool_free(p, c, nullptr));
  CHECK_OK(vpmm_pool_malloc(p, 6 * kPage, nullptr, &e));  // a's and c's pages move: their VAs become holes
  CHECK_OK(vpmm_pool_free(p, d, nullptr));
  CHECK_OK(vpmm_pool_free(p, g, nullptr));
  CHECK_EQ(vt::layout(p), std::string("[*2][2][*4][-1][1][-2][1][6][*") + std::to_string(kVaPages - 19) + "]");
  vt::fill(d, kPage, 3);  // free, still mapped: the bytes stay where they are
  vpmm_stats before = vt::stats(p);
  CHECK_OK(vpmm_pool_malloc(p, 3 * kPage, nullptr, &want));
  vpmm_stats after = vt::stats(p);
  // d's page stays; the two it lacks (g's) fill the end of the hole before it.
  CHECK_EQ(reinterpret_cast<uint64_t>(want), reinterpret_cast<uint64_t>(d) - 2 * kPage);
  CHECK_EQ((after.bytes_remapped - before.bytes_remapped) / kPage, uint64_t(2));  // not 3
  CHECK_EQ(after.mapped_bytes, before.mapped_bytes);
  CHECK_EQ(after.n_grow, before.n_grow);
  CHECK(vt::verify(d, kPage, 3));
  vt::fill(want, 3 * kPage, 9);
  CHECK(vt::verify(want, 3 * kPage, 9));
  CHECK_EQ(vt::layout(p), std::string("[*2][2][*2][3][1][*2][1][6][*") + std::to_string(kVaPages - 19) + "]");
  CHECK_OK(vpmm_pool_check(p));
  for (void* q : {b, x, k, e, want}) CHECK_OK(vpmm_pool_free(p, q, nullptr));
  vpmm_pool_destroy(p);
}

TEST_MAIN()
