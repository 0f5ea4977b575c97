// The small allocator's slabs through the public API: the order blocks go
// out in, and slabs that are retired and then serve another size class
// (their bookkeeping is recycled, and a slab's never-used blocks are not
// listed anywhere) keep no trace of their previous class.
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "check.hpp"
#include "pool_util.hpp"
#include "vpmm.h"

namespace {

constexpr uint64_t kPage = 64 << 10;  // small allocations: <= 32 KiB (page / 2)

vpmm_pool* pool() {
  vt::HostPoolSpec s;
  s.page = kPage;
  return vt::make_host_pool(s);
}

uint64_t addr(const void* p) { return reinterpret_cast<uint64_t>(p); }

// Slabs under a memory limit: the cached empty ones count against it, so a
// malloc at the limit must give them back before it fails. Page-exact, the
// environment ignored, small objects up to 16 KiB.
vpmm_pool* limited_pool(uint64_t limit_pages) {
  vt::HostPoolSpec s;
  s.page = kPage;
  s.va_pages = 512;
  s.memory_limit = limit_pages * kPage;
  s.small_size = 16 << 10;
  s.remap_slack = -1;
  s.defaults_only = true;
  return vt::make_host_pool(s);
}

struct OomCount {
  int calls = 0;
};
int count_oom(vpmm_pool*, uint64_t, void* user) {
  ++static_cast<OomCount*>(user)->calls;
  return 0;
}


void* alloc_in(vpmm_pool* p, uint64_t size, vpmm_reservation* r) {
  vpmm_alloc_attrs a;
  std::memset(&a, 0, sizeof a);
  a.struct_size = sizeof a;
  a.reservation = r;
  void* out = nullptr;
  vpmm_status st = vpmm_pool_malloc_ex(p, size, nullptr, &a, &out);
  return st == VPMM_OK ? out : nullptr;
}

uint64_t charged(vpmm_pool* p, vpmm_reservation* r) {
  uint64_t used = UINT64_MAX;
  vpmm_reservation_info(p, r, nullptr, &used);
  return used;
}

// A small free finds its slab by a hash of the slab's first page (RegionMap::
// find_small), falling back to a walk of the map. Slabs here start at any
// 512-byte offset (large allocations rounded to 512 bytes lie between them)
// and span one or two pages; on 96 KiB pages (no power of two: the hash's
// granule is 64 KiB) a two-page slab off the grid covers four granules, past
// the hash's three probes, and the walk answers. Every block must come back
// through vpmm_pool_free, in random order, with the pool consistent.
void churn_small_frees(uint64_t page) {
  vt::HostPoolSpec s;
  s.page = page;
  s.va_pages = 2048;
  s.capacity = 512ull << 20;
  s.small_size = page;
  s.large_rounding = 512;
  s.defaults_only = true;
  vpmm_pool* p = vt::make_host_pool(s);
  CHECK(p != nullptr);
  if (!p) return;
  std::mt19937_64 rng(page);
  struct Held {
    void* ptr;
    uint64_t size;
    unsigned char fill;
  };
  std::vector<Held> held;
  for (int i = 0; i < 3000; ++i) {
    if (held.size() > 40 && rng() % 2) {
      const size_t k = rng() % held.size();
      const Held h = held[k];
      held[k] = held.back();
      held.pop_back();
      CHECK_EQ(static_cast<const unsigned char*>(h.ptr)[h.size - 1], h.fill);
      CHECK_OK(vpmm_pool_free(p, h.ptr, nullptr));
    } else {
      // Mostly small blocks of every class, some large ones of odd 512-byte
      // multiples that push the next slab off the page grid.
      const uint64_t size = rng() % 5 ? 1 + rng() % page : 512 * (200 + rng() % 400);
      void* ptr = nullptr;
      CHECK_OK(vpmm_pool_malloc(p, size, nullptr, &ptr));
      if (!ptr) break;
      const unsigned char fill = static_cast<unsigned char>(i);
      static_cast<unsigned char*>(ptr)[size - 1] = fill;
      held.push_back({ptr, size, fill});
    }
    if (i % 250 == 0) CHECK_OK(vpmm_pool_check(p));
  }
  CHECK_OK(vpmm_pool_check(p));
  for (const Held& h : held) CHECK_OK(vpmm_pool_free(p, h.ptr, nullptr));
  CHECK_OK(vpmm_pool_check(p));
  CHECK_EQ(vt::stats(p).small_live_bytes, 0u);
  vpmm_pool_destroy(p);
}

}  // namespace

TEST("a slab hands out its lowest blocks first and reuses the last freed one first") {
  vpmm_pool* p = pool();
  CHECK(p != nullptr);
  void *a = nullptr, *b = nullptr, *c = nullptr, *d = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, 1000, nullptr, &a));  // class 1 KiB
  CHECK_OK(vpmm_pool_malloc(p, 1000, nullptr, &b));
  CHECK_OK(vpmm_pool_malloc(p, 1000, nullptr, &c));
  CHECK_EQ(addr(b), addr(a) + 1024);
  CHECK_EQ(addr(c), addr(b) + 1024);
  CHECK_OK(vpmm_pool_free(p, b, nullptr));
  CHECK_OK(vpmm_pool_malloc(p, 900, nullptr, &d));
  CHECK_EQ(d, b);
  void* e = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, 1000, nullptr, &e));
  CHECK_EQ(addr(e), addr(c) + 1024);  // then the next never-used block
  for (void* x : {a, c, d, e}) CHECK_OK(vpmm_pool_free(p, x, nullptr));
  CHECK_OK(vpmm_pool_check(p));
  vpmm_pool_destroy(p);
}

TEST("a retired slab serving another class keeps nothing of the old one") {
  vpmm_pool* p = pool();
  CHECK(p != nullptr);
  vpmm_reservation* r = nullptr;
  CHECK_OK(vpmm_pool_reserve(p, 8 * kPage, VPMM_RESERVE_TRY, &r));
  // Two slabs of the 3 KiB class (21 blocks each), every block charged to r.
  void* big[40];
  for (void*& x : big) {
    x = alloc_in(p, 3000, r);
    CHECK(x != nullptr);
  }
  CHECK_EQ(charged(p, r), 40u * 3072);
  for (void* x : big) CHECK_OK(vpmm_pool_free(p, x, nullptr));
  CHECK_EQ(charged(p, r), 0u);
  // A slab of another class, freed: the pool keeps one empty slab per
  // stream, so the 3 KiB slabs are both given back by now.
  void* mid = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, 5000, nullptr, &mid));
  CHECK_OK(vpmm_pool_free(p, mid, nullptr));
  CHECK_OK(vpmm_pool_check(p));

  // New slabs of the 768-byte class (85 blocks), without a reservation.
  void* small[3];
  for (void*& x : small) {
    x = alloc_in(p, 700, nullptr);
    CHECK(x != nullptr);
  }
  CHECK_EQ(addr(small[1]), addr(small[0]) + 768);
  CHECK_EQ(charged(p, r), 0u);  // nothing charged to the old blocks' reservation
  for (void* x : small) {
    void* base = nullptr;
    uint64_t size = 0;
    CHECK_OK(vpmm_pool_lookup(p, static_cast<char*>(x) + 699, &base, &size));
    CHECK_EQ(base, x);
    CHECK_EQ(size, 700u);
  }
  // Block 10 of that slab was never handed out: neither live nor freeable.
  void* never = reinterpret_cast<void*>(addr(small[0]) + 10 * 768);
  CHECK_EQ(vpmm_pool_lookup(p, never, nullptr, nullptr), VPMM_ERR_UNKNOWN_POINTER);
  CHECK_EQ(vpmm_pool_free(p, never, nullptr), VPMM_ERR_UNKNOWN_POINTER);
  CHECK_EQ(vpmm_pool_free(p, static_cast<char*>(small[0]) + 256, nullptr), VPMM_ERR_UNKNOWN_POINTER);
  CHECK_EQ(vt::stats(p).small_live_bytes, 3u * 768);
  CHECK_OK(vpmm_reservation_release(p, r));
  for (void* x : small) CHECK_OK(vpmm_pool_free(p, x, nullptr));
  CHECK_EQ(vpmm_pool_free(p, small[0], nullptr), VPMM_ERR_UNKNOWN_POINTER);  // twice
  CHECK_OK(vpmm_pool_check(p));
  CHECK_OK(vpmm_pool_trim(p, 0));
  CHECK_EQ(vt::stats(p).mapped_bytes, 0u);
  vpmm_pool_destroy(p);
}

TEST("slabs recycled across many classes stay consistent") {
  vpmm_pool* p = pool();
  CHECK(p != nullptr);
  // Sizes cycling through most classes, two live at a time, so slabs are
  // retired and re-made for other classes on most calls.
  const uint64_t sizes[] = {300, 5000, 1500, 32768, 700, 12000, 2600, 256, 20000, 9000};
  void* held[2] = {nullptr, nullptr};
  uint64_t held_size[2] = {0, 0};
  for (int i = 0; i < 400; ++i) {
    const uint64_t n = sizes[(i * 7) % 10];
    void*& slot = held[i % 2];
    if (slot) CHECK_OK(vpmm_pool_free(p, slot, nullptr));
    slot = nullptr;
    CHECK_OK(vpmm_pool_malloc(p, n, nullptr, &slot));
    held_size[i % 2] = n;
    std::memset(slot, i & 0xff, n);  // the host backend maps it: writable to the last byte
    uint64_t size = 0;
    CHECK_OK(vpmm_pool_lookup(p, slot, nullptr, &size));
    CHECK_EQ(size, n);
  }
  CHECK_EQ(vt::stats(p).small_live_bytes >= held_size[0] + held_size[1], true);
  CHECK_OK(vpmm_pool_check(p));
  for (void* x : held) CHECK_OK(vpmm_pool_free(p, x, nullptr));
  CHECK_OK(vpmm_pool_check(p));
  vpmm_pool_destroy(p);
}

TEST("a malloc at the memory limit first gives back an empty cached slab (no OOM, no callback)") {
  vpmm_pool* p = limited_pool(/*limit_pages=*/4);
  CHECK(p != nullptr);
  OomCount oc;
  CHECK_OK(vpmm_pool_set_oom_callback(p, count_oom, &oc));
  std::vector<void*> small;
  for (int i = 0; i < 4; ++i) {
    void* q = nullptr;
    CHECK_OK(vpmm_pool_malloc(p, 4096, nullptr, &q));
    small.push_back(q);
  }
  for (void* q : small) CHECK_OK(vpmm_pool_free(p, q, nullptr));
  CHECK(vt::stats(p).small_bytes > 0);  // the empty slab stays cached for the next small request
  void* big = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, 4 * kPage, nullptr, &big));  // the whole limit: the slab must go
  CHECK_EQ(oc.calls, 0);
  CHECK_EQ(vt::stats(p).n_oom, uint64_t(0));
  CHECK(vt::stats(p).mapped_bytes <= 4 * kPage);
  CHECK_OK(vpmm_pool_free(p, big, nullptr));
  // Past the limit with nothing cached: still OUT_OF_MEMORY, callback asked once.
  void* too_big = nullptr;
  CHECK_EQ(vpmm_pool_malloc(p, 5 * kPage, nullptr, &too_big), VPMM_ERR_OUT_OF_MEMORY);
  CHECK_EQ(oc.calls, 1);
  CHECK_OK(vpmm_pool_check(p));
  CHECK_OK(vpmm_pool_destroy(p));
}

TEST("a small malloc at the memory limit first gives back an empty slab of another stream") {
  vpmm_pool* p = limited_pool(/*limit_pages=*/1);
  CHECK(p != nullptr);
  vpmm_stream s = nullptr;
  CHECK_OK(vpmm_pool_stream_create(p, &s));
  void* q = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, 4096, s, &q));
  CHECK_OK(vpmm_pool_free(p, q, s));  // s's slab is empty and cached, the limit's whole page
  void* r = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, 4096, nullptr, &r));  // a slab of the default stream needs that page
  CHECK_EQ(vt::stats(p).n_oom, uint64_t(0));
  CHECK_OK(vpmm_pool_free(p, r, nullptr));
  CHECK_OK(vpmm_pool_check(p));
  CHECK_OK(vpmm_pool_stream_destroy(p, s));
  CHECK_OK(vpmm_pool_destroy(p));
}


TEST("small frees find their slab at any offset and slab size, in any order") {
  churn_small_frees(64 << 10);
  churn_small_frees(96 << 10);
}

TEST_MAIN()
