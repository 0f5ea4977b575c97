// Arguments (docs/misuse.md rows 9-13, 32, 33, 39): NULL out-pointers and
// NULL required arguments, sizes that are 0, overflow when rounded or exceed
// the VA or the capacity, and the struct_size of every growable struct: too
// small or absurd is INVALID_ARGUMENT with nothing written; larger than the
// library's (a caller built against a newer header) is fine, and only the
// library's own bytes are read or written.
#include <cstring>
#include <string>

#include "contract.hpp"

using namespace ct;

TEST("NULL out pointers and NULL required arguments") {
  vpmm_pool* p = make_pool();
  if (!p) return;
  vpmm_config c = PoolSpec().config();
  vpmm_alloc_attrs attrs;
  std::memset(&attrs, 0, sizeof attrs);
  attrs.struct_size = sizeof attrs;
  EXPECT_ERR(nullptr, vpmm_pool_create(&c, nullptr), IA, "vpmm_pool_create");
  EXPECT_ERR(p, vpmm_pool_malloc(p, 8, nullptr, nullptr), IA, "vpmm_pool_malloc");
  EXPECT_ERR(p, vpmm_pool_malloc(p, 4 * kPage, nullptr, nullptr), IA, "vpmm_pool_malloc");
  EXPECT_ERR(p, vpmm_pool_malloc_ex(p, 8, nullptr, &attrs, nullptr), IA, "vpmm_pool_malloc_ex");
  EXPECT_ERR(p, vpmm_pool_stream_create(p, nullptr), IA, "vpmm_pool_stream_create");
  EXPECT_ERR(p, vpmm_pool_stats(p, nullptr), IA, "vpmm_pool_stats");
  EXPECT_ERR(p, vpmm_pool_dump(p, nullptr, 0, nullptr), IA, "vpmm_pool_dump");
  EXPECT_ERR(p, vpmm_pool_visit(p, nullptr, nullptr), IA, "vpmm_pool_visit");
  EXPECT_ERR(p, vpmm_pool_get_config(p, nullptr), IA, "vpmm_pool_get_config");
  EXPECT_ERR(p, vpmm_pool_tag_stats(p, nullptr, nullptr), IA, "vpmm_pool_tag_stats");
  EXPECT_ERR(p, vpmm_pool_lookup(p, nullptr, nullptr, nullptr), IA, "vpmm_pool_lookup");
  EXPECT_ERR(nullptr, vpmm_host_stream_create(nullptr), IA, "vpmm_host_stream_create");
  EXPECT_ERR(nullptr, vpmm_host_stream_launch(nullptr, nullptr, nullptr), IA, "vpmm_host_stream_launch");
  // Struct sizes the library cannot have been compiled against.
  vpmm_stats st;
  st.struct_size = 0;
  EXPECT_ERR_MSG(p, vpmm_pool_stats(p, &st), IA, "vpmm_pool_stats", "struct_size");
  vpmm_config got;
  got.struct_size = 0;
  EXPECT_ERR_MSG(p, vpmm_pool_get_config(p, &got), IA, "vpmm_pool_get_config", "struct_size");
  vpmm_tag_stats ts;
  ts.struct_size = 0;
  EXPECT_ERR_MSG(p, vpmm_pool_tag_stats(p, nullptr, &ts), IA, "vpmm_pool_tag_stats", "struct_size");
  CHECK_OK(vpmm_pool_check(p));
  CHECK_OK(vpmm_pool_destroy(p));
}

TEST("size 0, sizes that overflow when rounded, and sizes beyond VA or capacity") {
  vpmm_pool* p = make_pool();  // 64 KiB pages, 64-page VA chunks, 16 pages of capacity
  if (!p) return;
  void* keep = nullptr;  // some state worth preserving
  CHECK_OK(vpmm_pool_malloc(p, 3 * kPage, nullptr, &keep));
  void* small = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, 100, nullptr, &small));
  vpmm_alloc_attrs attrs;
  std::memset(&attrs, 0, sizeof attrs);
  attrs.struct_size = sizeof attrs;
  void* out = kSentinel;
  EXPECT_ERR_MSG(p, vpmm_pool_malloc(p, 0, nullptr, &out), IA, "vpmm_pool_malloc", "size 0");
  EXPECT_ERR(p, vpmm_pool_malloc_ex(p, 0, nullptr, &attrs, &out), IA, "vpmm_pool_malloc_ex");
  EXPECT_ERR_MSG(p, vpmm_pool_malloc(p, UINT64_MAX, nullptr, &out), IA, "vpmm_pool_malloc",
                 "18446744073709551615");
  EXPECT_ERR(p, vpmm_pool_malloc(p, UINT64_MAX - kPage + 2, nullptr, &out), IA, "vpmm_pool_malloc");
  EXPECT_ERR(p, vpmm_pool_malloc_ex(p, UINT64_MAX, nullptr, &attrs, &out), IA, "vpmm_pool_malloc_ex");
  // Page-aligned but absurd: no VA for it.
  EXPECT_ERR(p, vpmm_pool_malloc(p, UINT64_MAX - kPage + 1, nullptr, &out), OOM, "vpmm_pool_malloc");
  EXPECT_ERR(p, vpmm_pool_malloc(p, 1ull << 62, nullptr, &out), OOM, "vpmm_pool_malloc");
  // Beyond the VA chunk (a new chunk would be needed) and beyond capacity.
  EXPECT_ERR(p, vpmm_pool_malloc(p, 65 * kPage, nullptr, &out), OOM, "vpmm_pool_malloc");
  EXPECT_ERR(p, vpmm_pool_malloc(p, 1ull << 40, nullptr, &out), OOM, "vpmm_pool_malloc");
  // Inside VA, beyond capacity (16 pages: 3 + 1 small page in use).
  EXPECT_ERR(p, vpmm_pool_malloc(p, 13 * kPage, nullptr, &out), OOM, "vpmm_pool_malloc");
  EXPECT_ERR(p, vpmm_pool_malloc(p, 20 * kPage, nullptr, &out), OOM, "vpmm_pool_malloc");
  CHECK_EQ(out, kSentinel);
  // The pool still works, up to exactly its capacity.
  void* rest = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, 12 * kPage, nullptr, &rest));
  vt::fill(rest, 12 * kPage, 1);
  CHECK(vt::verify(rest, 12 * kPage, 1));
  CHECK_EQ(vt::stats(p).mapped_bytes, 16 * kPage);
  EXPECT_ERR(p, vpmm_pool_malloc(p, kPage, nullptr, &out), OOM, "vpmm_pool_malloc");
  CHECK_OK(vpmm_pool_free(p, rest, nullptr));
  CHECK_OK(vpmm_pool_free(p, keep, nullptr));
  CHECK_OK(vpmm_pool_free(p, small, nullptr));
  CHECK_OK(vpmm_pool_check(p));
  CHECK_OK(vpmm_pool_destroy(p));
}

namespace {
// A struct as a caller compiled against a newer header has it: the
// library's fields, then 64 bytes the library must neither read nor write.
// Every byte starts as `fill`; struct_size is the whole.
template <class T>
struct Longer {
  T s;
  unsigned char tail[64];
  explicit Longer(unsigned char fill) {
    std::memset(&s, fill, sizeof s);
    std::memset(tail, fill, sizeof tail);
    s.struct_size = sizeof *this;
  }
  bool tail_is(unsigned char fill) const {
    for (unsigned char t : tail)
      if (t != fill) return false;
    return true;
  }
};
}  // namespace

TEST("row 32: a struct_size larger than the library's is accepted; bytes beyond it are untouched") {
  Longer<vpmm_config> bc(0);
  bc.s = suite_pool().config();
  bc.s.struct_size = sizeof bc;
  vpmm_pool* p = nullptr;
  EXPECT_STATUS(vpmm_pool_create(&bc.s, &p), VPMM_OK, "");
  if (!p) return;
  Longer<vpmm_stats> bs(0xab);
  EXPECT_STATUS(vpmm_pool_stats(p, &bs.s), VPMM_OK, "");
  CHECK_EQ(bs.s.struct_size, uint32_t(sizeof bs));  // kept as the caller set it
  CHECK_EQ(bs.s.page_size, kPage);
  CHECK(bs.tail_is(0xab));
  Longer<vpmm_driver_profile> bd(0xef);
  EXPECT_STATUS(vpmm_pool_driver_profile(p, &bd.s), VPMM_OK, "");
  CHECK_EQ(bd.s.struct_size, uint32_t(sizeof bd));
  CHECK(bd.tail_is(0xef));
  Longer<vpmm_config> bo(0xcd);
  EXPECT_STATUS(vpmm_pool_get_config(p, &bo.s), VPMM_OK, "");
  CHECK_EQ(bo.s.page_size, kPage);
  CHECK(bo.tail_is(0xcd));
  CHECK_OK(vpmm_pool_destroy(p));
}

TEST("row 33: an absurd struct_size (> 64 KiB) is INVALID_ARGUMENT, nothing written") {
  vpmm_pool* p = suite_pool().make();
  if (!p) return;
  vpmm_stats st;
  std::memset(&st, 0x11, sizeof st);
  st.struct_size = 0x7fffffff;
  EXPECT_STATUS(vpmm_pool_stats(p, &st), IA, "vpmm_pool_stats");
  CHECK_EQ(st.mapped_bytes, uint64_t(0x1111111111111111ull));
  vpmm_driver_profile prof;
  std::memset(&prof, 0x11, sizeof prof);
  prof.struct_size = 0x7fffffff;
  EXPECT_STATUS(vpmm_pool_driver_profile(p, &prof), IA, "vpmm_pool_driver_profile");
  CHECK_EQ(prof.create_calls, uint64_t(0x1111111111111111ull));
  vpmm_config cfg;
  std::memset(&cfg, 0x11, sizeof cfg);
  cfg.struct_size = 0x7fffffff;
  EXPECT_STATUS(vpmm_pool_get_config(p, &cfg), IA, "vpmm_pool_get_config");
  CHECK_EQ(cfg.page_size, uint64_t(0x1111111111111111ull));
  vpmm_config c = suite_pool().config();
  c.struct_size = 0x7fffffff;
  vpmm_pool* out = static_cast<vpmm_pool*>(kSentinel);
  EXPECT_STATUS(vpmm_pool_create(&c, &out), IA, "vpmm_pool_create");
  CHECK(out == nullptr);  // a failed create sets *out to NULL (vpmm.h)
  CHECK_OK(vpmm_pool_destroy(p));
}

TEST("row 39: malloc_ex attrs with a struct_size too small or too large is INVALID_ARGUMENT") {
  vpmm_pool* p = suite_pool().make();
  if (!p) return;
  vpmm_alloc_attrs a;
  std::memset(&a, 0, sizeof a);
  for (uint32_t bad : {0u, 4u, 8u, 5000u, 0xffffffffu}) {
    a.struct_size = bad;
    void* out = kSentinel;
    EXPECT_STATUS(vpmm_pool_malloc_ex(p, kPage, nullptr, &a, &out), IA, "vpmm_pool_malloc_ex");
    CHECK_EQ(out, kSentinel);
  }
  CHECK_EQ(vt::stats(p).n_malloc, uint64_t(0));
  CHECK_OK(vpmm_pool_destroy(p));
}
