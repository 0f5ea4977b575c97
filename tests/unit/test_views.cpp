// Views (vpmm_config.view_min_size; src/core/views.hpp): a request that no
// free region fits, from view_min_size on, maps the free handles where they
// lie at a VA of its own instead of moving pages; after the free the view
// keeps its mappings for the next request of its size. Pages of 64 KiB;
// views from 4 pages.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "check.hpp"
#include "pool_inspect.hpp"
#include "pool_util.hpp"
#include "vpmm.h"
#include "vpmm_host_streams.h"

namespace {

constexpr uint64_t kPage = 64 << 10;

vpmm_pool* pool(uint64_t view_min_pages = 4, uint64_t max_handle = 0) {
  vt::HostPoolSpec s;
  s.page = kPage;
  s.va_pages = 512;
  s.max_handle = max_handle;
  s.remap_slack = -1;  // page-exact: no growth instead of a view
  s.view_min_size = view_min_pages == UINT64_MAX ? VPMM_VIEWS_OFF : view_min_pages * kPage;
  return vt::make_host_pool(s);
}

void* take(vpmm_pool* p, uint64_t bytes, vpmm_stream s = nullptr) {
  void* out = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, bytes, s, &out));
  return out;
}

uint64_t addr(const void* p) { return reinterpret_cast<uint64_t>(p); }

// [2][1][2][1][2][1] with the 2-page regions freed: 6 free pages in three
// pieces, none of which fits a 6-page request. The 1-page allocations stay.
struct Scattered {
  vpmm_pool* p = nullptr;
  std::vector<void*> pieces;  // the freed 2-page regions, lowest first
};

Scattered scattered(vpmm_pool* p) {
  Scattered s;
  s.p = p;
  for (int i = 0; i < 3; ++i) {
    s.pieces.push_back(take(p, 2 * kPage));
    take(p, kPage);
  }
  for (void* q : s.pieces) CHECK_OK(vpmm_pool_free(p, q, nullptr));
  return s;
}

bool in_chunks(vpmm_pool* p, const void* ptr) {
  for (const vpmm_region_info& r : vt::regions(p))
    if (r.kind != VPMM_REGION_LIVE && r.va <= addr(ptr) && addr(ptr) < r.va + r.size) return true;
  return false;
}

// The layout is the pool's chunk and a live view's, in VA order (the view's
// VA may lie on either side).
bool same_chunks(vpmm_pool* p, const std::string& pool_chunk, const std::string& view) {
  const std::string got = vt::layout(p);
  if (got == pool_chunk + " | " + view || got == view + " | " + pool_chunk) return true;
  std::printf("  layout %s\n", got.c_str());
  return false;
}

uint64_t bytes_of_kind(vpmm_pool* p, int32_t kind) {
  uint64_t n = 0;
  for (const vpmm_region_info& r : vt::regions(p))
    if (r.kind == kind) n += r.size;
  return n;
}

}  // namespace

TEST("a view serves scattered free memory without moving or growing anything") {
  vpmm_pool* p = pool();
  Scattered s = scattered(p);
  const vpmm_stats before = vt::stats(p);
  void* v = take(p, 6 * kPage);
  const vpmm_stats after = vt::stats(p);
  CHECK_EQ(after.mapped_bytes, before.mapped_bytes);  // no growth
  CHECK_EQ(after.pages_created, before.pages_created);
  CHECK_EQ(after.n_view_malloc, before.n_view_malloc + 1);
  CHECK_EQ(after.n_views, uint64_t{1});
  CHECK_EQ(after.view_va_bytes, 6 * kPage);
  CHECK_EQ(after.reserved_va_bytes, before.reserved_va_bytes + 6 * kPage);
  CHECK_EQ(after.lent_bytes, 6 * kPage);
  CHECK_EQ(after.bytes_remapped, before.bytes_remapped + 6 * kPage);  // mapped once more, at the view
  CHECK_EQ(after.live_bytes, before.live_bytes + 6 * kPage);
  CHECK_EQ(after.free_bytes, before.free_bytes - 6 * kPage);
  CHECK_EQ(after.requested_bytes, before.requested_bytes + 6 * kPage);
  CHECK(!in_chunks(p, v));  // a VA of its own
  // The pieces stay where they were, lent: nothing else may take them.
  CHECK(same_chunks(p, "[l1][l1][1][l1][l1][1][l1][l1][1][*503]", "[6]"));
  CHECK_EQ(bytes_of_kind(p, VPMM_REGION_LENT), after.lent_bytes);
  // Every byte is usable and the view is one allocation to the API.
  vt::fill(v, 6 * kPage, 7);
  CHECK(vt::verify(v, 6 * kPage, 7));
  void* base = nullptr;
  uint64_t size = 0;
  CHECK_OK(vpmm_pool_lookup(p, static_cast<char*>(v) + 5 * kPage + 3, &base, &size));
  CHECK_EQ(addr(base), addr(v));
  CHECK_EQ(size, 6 * kPage);
  CHECK_OK(vpmm_pool_check(p));
  CHECK_OK(vpmm_pool_free(p, v, nullptr));
  const vpmm_stats freed = vt::stats(p);
  CHECK_EQ(freed.lent_bytes, uint64_t{0});
  CHECK_EQ(freed.free_bytes, before.free_bytes);
  CHECK_EQ(freed.n_views, uint64_t{1});  // idle, kept for the next request of its size
  CHECK_OK(vpmm_pool_check(p));
  vpmm_pool_destroy(p);
}

TEST("the view's memory is its pieces' memory: bytes written through it appear at home") {
  vpmm_pool* p = pool();
  Scattered s = scattered(p);
  void* v = take(p, 6 * kPage);
  vt::fill(v, 6 * kPage, 11);
  CHECK_OK(vpmm_pool_free(p, v, nullptr));
  // The three pieces, in order, are the view's pages (smallest regions
  // first, then by address): after the free a 2-page request takes the
  // first piece and finds the view's first two pages there.
  void* q = take(p, 2 * kPage);
  CHECK_EQ(addr(q), addr(s.pieces[0]));
  std::vector<uint64_t> expect(6 * kPage / 8);
  vt::fill(expect.data(), 6 * kPage, 11);
  CHECK(std::memcmp(q, expect.data(), 2 * kPage) == 0);
  vpmm_pool_destroy(p);
}

TEST("a freed view is taken again by the next request of its size with no driver call") {
  vpmm_pool* p = pool();
  scattered(p);
  void* v = take(p, 6 * kPage);
  CHECK_OK(vpmm_pool_free(p, v, nullptr));
  const vpmm_stats before = vt::stats(p);
  void* again = take(p, 5 * kPage + 100);  // a smaller request of the same view
  const vpmm_stats after = vt::stats(p);
  CHECK_EQ(addr(again), addr(v));
  CHECK_EQ(after.n_view_reuse, before.n_view_reuse + 1);
  CHECK_EQ(after.bytes_remapped, before.bytes_remapped);
  CHECK_EQ(after.driver_calls, before.driver_calls);
  CHECK_EQ(after.mapped_bytes, before.mapped_bytes);
  CHECK_EQ(after.n_views, uint64_t{1});
  CHECK_OK(vpmm_pool_check(p));
  vpmm_pool_destroy(p);
}

TEST("reusing a view replaces only the slots whose home something else took") {
  vpmm_pool* p = pool(4, kPage);  // page handles: a slot per page
  scattered(p);
  void* v = take(p, 6 * kPage);
  CHECK_OK(vpmm_pool_free(p, v, nullptr));
  void* small = take(p, kPage);  // best fit: the first page of the first piece
  CHECK(same_chunks(p, "[1][-1][1][-2][1][-2][1][*503]", "[*6]"));  // an idle view: VA only
  const vpmm_stats before = vt::stats(p);
  void* again = take(p, 6 * kPage);
  const vpmm_stats after = vt::stats(p);
  CHECK_EQ(addr(again), addr(v));
  CHECK_EQ(after.n_view_reuse, before.n_view_reuse);  // driver work was needed
  // One slot was taken; no free page is left to replace it, so one page is
  // grown and mapped at the view: one page remapped, not six.
  CHECK_EQ(after.bytes_remapped - before.bytes_remapped, kPage);
  CHECK_EQ(after.mapped_bytes - before.mapped_bytes, kPage);
  CHECK(same_chunks(p, "[1][l1][1][l1][l1][1][l1][l1][1][l1][*502]", "[6]"));
  vt::fill(again, 6 * kPage, 3);
  CHECK(vt::verify(again, 6 * kPage, 3));
  vt::fill(small, kPage, 4);  // the page it lost is the small allocation's own
  CHECK(vt::verify(again, 6 * kPage, 3));
  CHECK(vt::verify(small, kPage, 4));
  CHECK_OK(vpmm_pool_check(p));
  vpmm_pool_destroy(p);
}

TEST("below view_min_size, tagged, with views off or an exportable pool: pages move") {
  struct Case {
    const char* name;
    uint64_t min_pages;
    const char* tag;
    uint64_t bytes;
  } cases[] = {
      {"below the minimum", 8, nullptr, 6 * kPage},
      {"tagged", 4, "weights", 6 * kPage},
      {"views off", UINT64_MAX, nullptr, 6 * kPage},
  };
  for (const Case& c : cases) {
    vpmm_pool* p = pool(c.min_pages);
    scattered(p);
    const vpmm_stats before = vt::stats(p);
    void* q = vt::malloc_tagged(p, c.bytes, c.tag, 0);
    CHECK(q != nullptr);
    const vpmm_stats after = vt::stats(p);
    if (after.n_view_malloc != 0) std::printf("  case: %s\n", c.name);
    CHECK_EQ(after.n_view_malloc, uint64_t{0});
    CHECK_EQ(after.n_views, uint64_t{0});
    CHECK_EQ(after.n_defrag, before.n_defrag + 1);  // Phase 2 moved pages
    CHECK(in_chunks(p, q) || vt::chunk_offset(p, q) != UINT64_MAX);
    CHECK_OK(vpmm_pool_check(p));
    vpmm_pool_destroy(p);
  }
  // The configuration says what the pool does.
  vpmm_config c;
  vpmm_config_init(&c);
  c.backend = VPMM_BACKEND_HOST;
  c.exportable = 1;
  c.view_min_size = 0;
  vpmm_pool* p = nullptr;
  if (vpmm_pool_create(&c, &p) == VPMM_OK) {
    vpmm_config got;
    vpmm_config_init(&got);
    CHECK_OK(vpmm_pool_get_config(p, &got));
    CHECK_EQ(got.view_min_size, uint64_t{VPMM_VIEWS_OFF});
    vpmm_pool_destroy(p);
  }
  vpmm_config_init_defaults(&c);
  c.backend = VPMM_BACKEND_HOST;
  c.view_min_size = 0;
  CHECK_OK(vpmm_pool_create(&c, &p));
  vpmm_config got;
  vpmm_config_init(&got);
  CHECK_OK(vpmm_pool_get_config(p, &got));
  CHECK_EQ(got.view_min_size, uint64_t{VPMM_VIEWS_OFF});  // the default chain has no views step
  vpmm_pool_destroy(p);
  c.placement = VPMM_PLACEMENT_VIEWS;
  CHECK_OK(vpmm_pool_create(&c, &p));
  CHECK_OK(vpmm_pool_get_config(p, &got));
  CHECK_EQ(got.view_min_size, uint64_t{64} << 20);  // the views chain: from 64 MiB
  vpmm_pool_destroy(p);
}

TEST("misuse of a view's allocation gets the errors any allocation gets") {
  vpmm_pool* p = pool();
  scattered(p);
  void* v = take(p, 6 * kPage);
  CHECK_EQ(vpmm_pool_free(p, static_cast<char*>(v) + kPage, nullptr), VPMM_ERR_UNKNOWN_POINTER);
  CHECK(std::string(vpmm_last_error()).find("not its start") != std::string::npos);
  CHECK_OK(vpmm_pool_free(p, v, nullptr));
  const vpmm_stats before = vt::stats(p);
  CHECK_EQ(vpmm_pool_free(p, v, nullptr), VPMM_ERR_UNKNOWN_POINTER);  // double free
  CHECK(std::string(vpmm_last_error()).find("already freed") != std::string::npos);
  void* base = nullptr;
  CHECK_EQ(vpmm_pool_lookup(p, v, &base, nullptr), VPMM_ERR_UNKNOWN_POINTER);
  const vpmm_stats after = vt::stats(p);
  CHECK_EQ(after.free_bytes, before.free_bytes);
  CHECK_EQ(after.n_free, before.n_free);
  CHECK_OK(vpmm_pool_check(p));
  vpmm_pool_destroy(p);
}

TEST("trim releases the memory under idle views and the idle views themselves") {
  vpmm_pool* p = pool();
  scattered(p);
  void* v = take(p, 6 * kPage);
  CHECK_OK(vpmm_pool_free(p, v, nullptr));
  const vpmm_stats before = vt::stats(p);
  CHECK_EQ(before.n_views, uint64_t{1});
  CHECK_OK(vpmm_pool_trim(p, 0));
  const vpmm_stats t = vt::stats(p);
  CHECK_EQ(t.mapped_bytes, 3 * kPage);  // the three 1-page allocations
  CHECK_EQ(t.n_views, uint64_t{0});     // the idle view's VA went back too
  CHECK_EQ(t.view_va_bytes, uint64_t{0});
  CHECK_EQ(t.reserved_va_bytes, before.reserved_va_bytes - 6 * kPage);
  CHECK_OK(vpmm_pool_check(p));
  // The next request of that size grows the pages it needs.
  void* again = take(p, 6 * kPage);
  CHECK_EQ(vt::stats(p).mapped_bytes, 9 * kPage);
  vt::fill(again, 6 * kPage, 5);
  CHECK(vt::verify(again, 6 * kPage, 5));
  CHECK_OK(vpmm_pool_check(p));
  vpmm_pool_destroy(p);
}

TEST("a view freed on a stream that is then retired is reused on another") {
  vpmm_pool* p = pool();
  scattered(p);
  vpmm_stream a = nullptr, b = nullptr;
  CHECK_OK(vpmm_pool_stream_create(p, &a));
  CHECK_OK(vpmm_pool_stream_create(p, &b));
  void* v = take(p, 6 * kPage, a);
  vt::fill(v, 6 * kPage, 9);
  CHECK_OK(vpmm_pool_free(p, v, a));
  CHECK_OK(vpmm_pool_stream_destroy(p, a));  // retires: its events outlive it
  void* again = take(p, 6 * kPage, b);
  CHECK_EQ(addr(again), addr(v));
  CHECK_OK(vpmm_pool_check(p));
  // And a live view on a stream that is retired keeps working.
  CHECK_OK(vpmm_pool_stream_retire(p, b));
  CHECK_OK(vpmm_pool_free(p, again, nullptr));
  CHECK_OK(vpmm_pool_check(p));
  CHECK_OK(vpmm_pool_stream_destroy(p, b));
  vpmm_pool_destroy(p);
}

// A host "kernel": copies a byte pattern into memory, or reads it back.
struct Touch {
  unsigned char* p;
  uint64_t n;
  unsigned char value;
  bool read;
  bool seen = false;
};
void touch(void* u) {
  Touch* t = static_cast<Touch*>(u);
  if (!t->read) {
    std::memset(t->p, t->value, t->n);
    return;
  }
  t->seen = true;
  for (uint64_t i = 0; i < t->n; ++i)
    if (t->p[i] != t->value) t->seen = false;
}

// Live, side streams free memory while the GPU is still behind: a view that
// left such memory alone grew instead (docs/handles.md, "Views"). Now it
// takes it and its stream waits on the GPU for the other stream's work,
// as a Phase 2 harvest does; the CPU never blocks.
TEST("memory freed on another stream with work still queued: the view takes it after a GPU-side wait") {
  vpmm_pool* p = pool();
  vpmm_stream a = nullptr, b = nullptr;
  CHECK_OK(vpmm_host_stream_create(&a));
  CHECK_OK(vpmm_host_stream_create(&b));
  // [2][1][2][1][2][1] on stream a; a is held, its last writes queued, the
  // 2-page pieces freed on it: their free point is pending.
  std::vector<void*> pieces;
  for (int i = 0; i < 3; ++i) {
    pieces.push_back(take(p, 2 * kPage, a));
    take(p, kPage, a);
  }
  CHECK_OK(vpmm_host_stream_hold(a));
  std::vector<Touch> writes;
  writes.reserve(3);
  for (void* q : pieces) writes.push_back({static_cast<unsigned char*>(q), 2 * kPage, 0x5a, false});
  for (Touch& w : writes) CHECK_OK(vpmm_host_stream_launch(a, touch, &w));
  for (void* q : pieces) CHECK_OK(vpmm_pool_free(p, q, a));
  const vpmm_stats before = vt::stats(p);
  void* v = take(p, 6 * kPage, b);
  const vpmm_stats after = vt::stats(p);
  CHECK_EQ(after.n_view_malloc, before.n_view_malloc + 1);
  CHECK_EQ(after.mapped_bytes, before.mapped_bytes);  // nothing grown
  CHECK_EQ(after.n_defrag, before.n_defrag + 1);      // six pages mapped at the view
  CHECK_EQ(after.bytes_remapped, before.bytes_remapped + 6 * kPage);
  CHECK_EQ(after.n_stream_waits, before.n_stream_waits + 1);  // one event covers a's frees
  CHECK(!in_chunks(p, v));
  // Stream b runs after a's queued writes: it reads them through the view.
  Touch read{static_cast<unsigned char*>(v), 6 * kPage, 0x5a, true};
  CHECK_OK(vpmm_host_stream_launch(b, touch, &read));
  CHECK_OK(vpmm_host_stream_release(a));
  CHECK_OK(vpmm_host_stream_synchronize(b));
  CHECK(read.seen);
  CHECK_OK(vpmm_pool_check(p));
  CHECK_OK(vpmm_pool_free(p, v, b));
  CHECK_OK(vpmm_pool_check(p));
  CHECK_OK(vpmm_pool_destroy(p));
  CHECK_OK(vpmm_host_stream_destroy(a));
  CHECK_OK(vpmm_host_stream_destroy(b));
}

// Churn (view_gate.hpp): large requests of sizes that never come back, one
// every few mallocs, beside enough free memory. Views stop after the first
// window of ViewGate::kWindow page-level mallocs and Phase 2 serves the rest;
// a loop whose view-sized requests are rare keeps reusing its views.
TEST("churn of large sizes turns views off; a loop's rare large requests keep them") {
  auto run = [](bool churn) {
    vt::HostPoolSpec spec;
    spec.page = kPage;
    spec.va_pages = 1 << 14;
    spec.capacity = 1ull << 30;
    spec.remap_slack = -1;
    spec.view_min_size = 4 * kPage;
    // Phase 2 serves what views do not whatever the driver time (the gate
    // weighs views against Phase 2, not against the budget's growth, whose
    // charge on the wall clock would depend on this machine's speed).
    spec.driver_budget = VPMM_DRIVER_BUDGET_EXACT;
    vpmm_pool* p = vt::make_host_pool(spec);
    CHECK(p != nullptr);
    std::vector<void*> window(32, nullptr);
    uint64_t rng = 7, views_at_third = 0, reuse_at_third = 0;
    const uint32_t n = 4 * 4096;
    for (uint32_t i = 0; i < n; ++i) {
      if (i == 3 * 4096) {
        views_at_third = vt::stats(p).n_view_malloc;
        reuse_at_third = vt::stats(p).n_view_reuse;
      }
      rng = rng * 6364136223846793005ull + 1442695040888963407ull;
      void*& slot = window[i % window.size()];
      if (slot) CHECK_OK(vpmm_pool_free(p, slot, nullptr));
      uint64_t pages = 1;
      if (churn) pages = 1 + (rng >> 33) % 12;                        // a third of them view-sized
      else if (i % 1024 < 6) pages = 4 + 3 * (i % 1024);             // six sizes, once a round
      slot = take(p, pages * kPage - (rng >> 40) % 1024);
    }
    const vpmm_stats s = vt::stats(p);
    CHECK_OK(vpmm_pool_check(p));
    vpmm_pool_destroy(p);
    return std::make_pair(s.n_view_malloc - views_at_third, s.n_view_reuse - reuse_at_third);
  };
  const auto churned = run(true);
  CHECK_EQ(churned.first, uint64_t{0});  // the last window made no view
  const auto looped = run(false);
  CHECK(looped.first > 0);               // the loop's rounds still take views
  CHECK_EQ(looped.second, looped.first);  // and find them as they left them
}

TEST("a growing request beside too little free memory: the view grows the rest in pages") {
  vpmm_pool* p = pool();
  scattered(p);
  const vpmm_stats before = vt::stats(p);
  void* v = take(p, 9 * kPage);
  const vpmm_stats after = vt::stats(p);
  CHECK_EQ(after.n_view_malloc, uint64_t{1});
  CHECK_EQ(after.mapped_bytes, before.mapped_bytes + 3 * kPage);  // the shortfall only
  CHECK_EQ(after.lent_bytes, 9 * kPage);
  vt::fill(v, 9 * kPage, 13);
  CHECK(vt::verify(v, 9 * kPage, 13));
  CHECK_OK(vpmm_pool_check(p));
  CHECK_OK(vpmm_pool_free(p, v, nullptr));
  CHECK_EQ(vt::stats(p).free_bytes, 9 * kPage);
  CHECK_OK(vpmm_pool_check(p));
  vpmm_pool_destroy(p);
}

TEST("a loop of six sizes: the first pass makes six views, the next passes reuse them unchanged") {
  vpmm_pool* p = pool();
  // Interleave 1-page keepers with freed pieces so there is always scattered
  // free memory, then cycle through request sizes as a loop with changing
  // shapes would, checking the data of everything live.
  std::vector<void*> pieces;
  for (int i = 0; i < 40; ++i) {
    pieces.push_back(take(p, 2 * kPage));
    take(p, kPage);
  }
  for (void* q : pieces) CHECK_OK(vpmm_pool_free(p, q, nullptr));
  uint64_t remapped_after_first = 0;
  for (int round = 0; round < 3; ++round) {
    std::vector<std::pair<void*, uint64_t>> live;
    for (uint64_t pages = 4; pages < 20; pages += 3) {
      void* q = take(p, pages * kPage);
      vt::fill(q, pages * kPage, pages + 100 * round);
      live.push_back({q, pages});
    }
    for (auto& l : live) CHECK(vt::verify(l.first, l.second * kPage, l.second + 100 * round));
    CHECK_OK(vpmm_pool_check(p));
    for (auto& l : live) CHECK_OK(vpmm_pool_free(p, l.first, nullptr));
    if (round == 0) remapped_after_first = vt::stats(p).bytes_remapped;
  }
  const vpmm_stats s = vt::stats(p);
  CHECK_EQ(s.n_view_malloc, uint64_t{18});
  CHECK_EQ(s.n_view_reuse, uint64_t{12});  // the later rounds find their views as they left them
  CHECK_EQ(s.bytes_remapped, remapped_after_first);  // steady state: nothing moves
  CHECK_EQ(s.lent_bytes, uint64_t{0});
  CHECK_EQ(bytes_of_kind(p, VPMM_REGION_LIVE), s.live_bytes);
  CHECK_OK(vpmm_pool_check(p));
  vpmm_pool_destroy(p);
}

TEST("a pool holds at most 32 views, and trim releases the idle ones") {
  vpmm_pool* p = pool(/*view_min_pages=*/2);
  CHECK(p != nullptr);
  // 40 view-sized requests live at once, each over two scattered free pages.
  std::vector<void*> walls, live;
  for (int i = 0; i < 80; ++i) {
    void* piece = take(p, kPage);
    void* wall = take(p, kPage);
    CHECK(piece && wall);
    walls.push_back(wall);
    live.push_back(piece);
  }
  for (void* q : live) CHECK_OK(vpmm_pool_free(p, q, nullptr));
  live.clear();
  for (int i = 0; i < 40; ++i) {
    void* q = take(p, 2 * kPage);
    CHECK(q != nullptr);
    live.push_back(q);
  }
  vpmm_stats st = vt::stats(p);
  CHECK(st.n_views <= 32);
  CHECK_OK(vpmm_pool_check(p));
  for (void* q : live) CHECK_OK(vpmm_pool_free(p, q, nullptr));
  CHECK(vt::stats(p).n_views <= 32);
  CHECK_OK(vpmm_pool_trim(p, 0));
  st = vt::stats(p);
  CHECK_EQ(st.n_views, uint64_t(0));
  CHECK_EQ(st.view_va_bytes, uint64_t(0));
  CHECK_OK(vpmm_pool_check(p));
  for (void* q : walls) CHECK_OK(vpmm_pool_free(p, q, nullptr));
  CHECK_OK(vpmm_pool_destroy(p));
}

TEST_MAIN()
