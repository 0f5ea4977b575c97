// Pointers (docs/misuse.md rows 4-8, 26, 28, 30): a free or lookup of a
// pointer the pool did not hand out, or no longer holds (freed, interior,
// padding, one past the end, another pool's, foreign memory), is
// UNKNOWN_POINTER and changes nothing; the pointer is looked up, never
// dereferenced. free(NULL) is a no-op.
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "contract.hpp"

using namespace ct;

TEST("double free, foreign, interior and another pool's pointers are UNKNOWN_POINTER") {
  vpmm_pool* p = make_pool();
  vpmm_pool* other = make_pool();
  if (!p || !other) return;
  void *big = nullptr, *gone = nullptr, *sm = nullptr, *sm_gone = nullptr, *theirs = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, 3 * kPage + 10, nullptr, &big));
  CHECK_OK(vpmm_pool_malloc(p, 2 * kPage, nullptr, &gone));
  CHECK_OK(vpmm_pool_malloc(p, 300, nullptr, &sm));
  CHECK_OK(vpmm_pool_malloc(p, 300, nullptr, &sm_gone));
  CHECK_OK(vpmm_pool_malloc(other, 2 * kPage, nullptr, &theirs));
  vt::fill(big, 3 * kPage, 1);
  CHECK_OK(vpmm_pool_free(p, gone, nullptr));
  CHECK_OK(vpmm_pool_free(p, sm_gone, nullptr));
  char* c_big = static_cast<char*>(big);
  char* c_sm = static_cast<char*>(sm);
  EXPECT_ERR_MSG(p, vpmm_pool_free(p, gone, nullptr), UP, "vpmm_pool_free", "freed");
  EXPECT_ERR_MSG(p, vpmm_pool_free(p, sm_gone, nullptr), UP, "vpmm_pool_free", "freed");
  int on_stack = 0;
  void* on_heap = std::malloc(64);
  EXPECT_ERR(p, vpmm_pool_free(p, &on_stack, nullptr), UP, "vpmm_pool_free");
  EXPECT_ERR(p, vpmm_pool_free(p, on_heap, nullptr), UP, "vpmm_pool_free");
  std::free(on_heap);
  EXPECT_ERR(p, vpmm_pool_free(p, c_big + 8, nullptr), UP, "vpmm_pool_free");
  EXPECT_ERR(p, vpmm_pool_free(p, c_big + kPage, nullptr), UP, "vpmm_pool_free");
  EXPECT_ERR(p, vpmm_pool_free(p, c_big + 3 * kPage + 100, nullptr), UP, "vpmm_pool_free");  // padding
  EXPECT_ERR(p, vpmm_pool_free(p, c_sm + 16, nullptr), UP, "vpmm_pool_free");
  EXPECT_ERR(p, vpmm_pool_free(p, c_sm + 256, nullptr), UP, "vpmm_pool_free");
  // A block start in the slab that was never handed out.
  EXPECT_ERR(p, vpmm_pool_free(p, c_sm + 4 * 512, nullptr), UP, "vpmm_pool_free");
  // Another pool's pointer, both ways; neither pool changes.
  Snap theirs_before = take(other);
  EXPECT_ERR(p, vpmm_pool_free(p, theirs, nullptr), UP, "vpmm_pool_free");
  EXPECT_ERR(other, vpmm_pool_free(other, big, nullptr), UP, "vpmm_pool_free");
  CHECK_EQ(same(theirs_before, take(other)), std::string());
  // Nothing above freed anything: the real frees still work and data survived.
  CHECK(vt::verify(big, 3 * kPage, 1));
  CHECK_OK(vpmm_pool_free(p, big, nullptr));
  CHECK_OK(vpmm_pool_free(p, sm, nullptr));
  CHECK_OK(vpmm_pool_free(other, theirs, nullptr));
  CHECK_EQ(vt::stats(p).n_live, uint64_t(0));
  CHECK_OK(vpmm_pool_check(p));
  CHECK_OK(vpmm_pool_check(other));
  CHECK_OK(vpmm_pool_destroy(p));
  CHECK_OK(vpmm_pool_destroy(other));
}

TEST("row 28: free of the address one past the end of an allocation is UNKNOWN_POINTER") {
  vpmm_pool* p = suite_pool().make();
  if (!p) return;
  // One past a's end is where `gap` began: freed, so no allocation starts
  // there (a fresh pool hands out pages in order, as the walkthrough pins).
  void *a = nullptr, *gap = nullptr, *b = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, kPage, nullptr, &a));
  CHECK_OK(vpmm_pool_malloc(p, kPage, nullptr, &gap));
  CHECK_OK(vpmm_pool_malloc(p, 2 * kPage, nullptr, &b));
  CHECK_EQ(gap, static_cast<void*>(static_cast<char*>(a) + kPage));
  CHECK_OK(vpmm_pool_free(p, gap, nullptr));
  EXPECT_STATUS(vpmm_pool_free(p, static_cast<char*>(a) + kPage, nullptr), UP, "vpmm_pool_free");
  EXPECT_STATUS(vpmm_pool_free(p, static_cast<char*>(b) + 2 * kPage, nullptr), UP, "vpmm_pool_free");
  CHECK_EQ(vt::stats(p).n_live, uint64_t(2));
  CHECK_OK(vpmm_pool_free(p, a, nullptr));
  CHECK_OK(vpmm_pool_free(p, b, nullptr));
  CHECK_OK(vpmm_pool_check(p));
  CHECK_OK(vpmm_pool_destroy(p));
}

TEST("row 30: free(NULL) on a live pool is a no-op returning VPMM_OK") {
  vpmm_pool* p = suite_pool().make();
  if (!p) return;
  vpmm_stats before = vt::stats(p);
  EXPECT_STATUS(vpmm_pool_free(p, nullptr, nullptr), VPMM_OK, "");
  CHECK_EQ(vt::stats(p).n_free, before.n_free);
  CHECK_OK(vpmm_pool_destroy(p));
}

TEST("lookup: interior pointers resolve; padding, free, hole and foreign memory do not") {
  vpmm_pool* p = make_pool();
  if (!p) return;
  void *big = nullptr, *sm = nullptr, *gone = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, kPage + 100, nullptr, &big));
  CHECK_OK(vpmm_pool_malloc(p, 300, nullptr, &sm));
  CHECK_OK(vpmm_pool_malloc(p, 2 * kPage, nullptr, &gone));
  CHECK_OK(vpmm_pool_free(p, gone, nullptr));
  char* b = static_cast<char*>(big);
  char* s = static_cast<char*>(sm);
  struct Hit {
    const void* ptr;
    void* base;
    uint64_t size;
  };
  for (const Hit& h : {Hit{b, big, kPage + 100}, Hit{b + 50, big, kPage + 100},
                       Hit{b + kPage + 99, big, kPage + 100}, Hit{s, sm, 300}, Hit{s + 299, sm, 300}}) {
    void* base = nullptr;
    uint64_t size = 0;
    CHECK_OK(vpmm_pool_lookup(p, h.ptr, &base, &size));
    CHECK_EQ(base, h.base);
    CHECK_EQ(size, h.size);
    CHECK_OK(vpmm_pool_lookup(p, h.ptr, nullptr, nullptr));  // outs are optional
  }
  // The hole at the end of the chunk.
  const vpmm_region_info last = vt::regions(p).back();
  CHECK_EQ(last.kind, VPMM_REGION_HOLE);
  int on_stack = 0;
  const std::vector<const void*> misses = {
      b + kPage + 100, b + 2 * kPage - 1,          // page padding after the allocation
      s + 300, s + 511,                            // class padding after the small block
      s + 512,                                     // a freed small block
      gone, static_cast<char*>(gone) + kPage,      // a free region
      reinterpret_cast<const void*>(last.va + 8),  // a hole
      &on_stack};
  for (const void* miss : misses) {
    void* base = kSentinel;
    uint64_t size = 77;
    EXPECT_ERR(p, vpmm_pool_lookup(p, miss, &base, &size), UP, "vpmm_pool_lookup");
    CHECK_EQ(base, kSentinel);
    CHECK_EQ(size, uint64_t(77));
  }
  CHECK_OK(vpmm_pool_free(p, big, nullptr));
  CHECK_OK(vpmm_pool_free(p, sm, nullptr));
  CHECK_OK(vpmm_pool_destroy(p));
}
