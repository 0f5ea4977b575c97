// The four walkthrough cases of docs/design.md on a real GPU (CUDA backend,
// 2 MiB pages): PAGES = 11 + X initial pages, then +10 > +1 > -10 > +4 > +11 on
// one stream. Kernels write a pattern into every allocation as soon as it is
// handed out (queued, not synchronized: the defragmentation in step 5 runs
// while that work may still be in flight), and verify [1], [4] and [11] after
// the defragmentation. Each case asserts the layout of the host test
// (tests/unit/test_walkthrough.cpp), on the legacy default stream (NULL) like
// the host test: the initial pages belong to that stream, and best fit runs
// per stream first (Phase 1a), so only on that stream do the seed's layouts
// come out (the last case runs the sequence on another stream and checks
// memory and data only). Right after step 5 the old VA of a
// same-stream harvest may still be a zombie ([~10]) because the fill kernels
// may not have finished; after a synchronize and a trim(UINT64_MAX) (which
// reaps zombies and releases nothing) it must be exactly the host layout.
#include <algorithm>

#include "gpu_util.cuh"

namespace {

using gt::MiB;
constexpr uint64_t kPage = 2 * MiB;
constexpr uint64_t kVaPages = 64;

struct Result {
  std::string layout_now;    // right after +11
  std::string layout_final;  // after sync + reap
  uint64_t mapped_pages = 0;
  uint64_t off1 = 0, off4 = 0, off11 = 0;
  unsigned long long bad1 = 1, bad4 = 1, bad11 = 1;
  uint64_t n_defrag = 0, n_grow = 0, n_waits = 0;
  bool check_ok = false;
};

Result run_case(uint64_t initial_pages, uint64_t max_handle, bool own_stream = false) {
  Result res;
  gt::PoolSpec spec;
  spec.page = kPage;
  spec.va_size = kVaPages * kPage;
  spec.initial_pages = initial_pages;
  spec.max_handle = max_handle;
  vpmm_pool* p = gt::make_pool(spec);
  CHECK(p != nullptr);
  if (!p) return res;
  cudaStream_t s = own_stream ? gt::new_stream() : nullptr;
  gt::Counters bad(3);
  void *a10 = nullptr, *a1 = nullptr, *a4 = nullptr, *a11 = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, 10 * kPage, s, &a10));
  gt::fill(a10, 10 * kPage, 10, s);
  CHECK_OK(vpmm_pool_malloc(p, 1 * kPage, s, &a1));
  gt::fill(a1, kPage, 1, s);
  CHECK_OK(vpmm_pool_free(p, a10, s));
  CHECK_OK(vpmm_pool_malloc(p, 4 * kPage, s, &a4));
  gt::fill(a4, 4 * kPage, 4, s);
  CHECK(gt::check_pool(p, "after +4"));
  CHECK_OK(vpmm_pool_malloc(p, 11 * kPage, s, &a11));
  res.layout_now = gt::layout(p);
  gt::fill(a11, 11 * kPage, 11, s);  // every page of the new span is writable
  gt::verify(a1, kPage, 1, &bad.d[0], s);
  gt::verify(a4, 4 * kPage, 4, &bad.d[1], s);
  gt::verify(a11, 11 * kPage, 11, &bad.d[2], s);
  CUDA_OK(cudaStreamSynchronize(s));
  CHECK_OK(vpmm_pool_trim(p, UINT64_MAX));  // reaps completed zombies, releases nothing
  res.layout_final = gt::layout(p);
  res.check_ok = gt::check_pool(p, "after +11");
  vpmm_stats st = gt::stats(p);
  res.mapped_pages = st.mapped_bytes / kPage;
  res.n_defrag = st.n_defrag;
  res.n_grow = st.n_grow;
  res.n_waits = st.n_stream_waits;
  res.off1 = gt::chunk_offset(p, a1) / kPage;
  res.off4 = gt::chunk_offset(p, a4) / kPage;
  res.off11 = gt::chunk_offset(p, a11) / kPage;
  res.bad1 = bad.h[0];
  res.bad4 = bad.h[1];
  res.bad11 = bad.h[2];
  CHECK_EQ(st.live_bytes, 16 * kPage);
  CHECK_EQ(st.zombie_bytes, uint64_t(0));
  CHECK_OK(vpmm_pool_free(p, a1, s));
  CHECK_OK(vpmm_pool_free(p, a4, s));
  CHECK_OK(vpmm_pool_free(p, a11, s));
  CHECK(gt::check_pool(p, "after freeing all"));
  CHECK_EQ(gt::stats(p).live_bytes, uint64_t(0));
  CHECK_OK(vpmm_pool_destroy(p));
  if (s) CUDA_OK(cudaStreamDestroy(s));
  std::printf("  PAGES=%llu max_handle=%llu %s: after +11 %s, final %s, mapped %llu pages\n",
              (unsigned long long)initial_pages, (unsigned long long)max_handle,
              own_stream ? "own stream" : "NULL stream",
              res.layout_now.c_str(), res.layout_final.c_str(),
              (unsigned long long)res.mapped_pages);
  return res;
}

std::string hole(uint64_t pages) { return "[*" + std::to_string(pages) + "]"; }

// Right after step 5 the harvested old VA is either reaped or still a zombie.
bool now_matches(const std::string& now, const std::string& final_layout, uint64_t moved) {
  if (now == final_layout) return true;
  std::string star = "[*" + std::to_string(moved) + "]";
  std::string tilde = "[~" + std::to_string(moved) + "]";
  std::string alt = final_layout;
  size_t at = alt.find(star);
  if (at == std::string::npos) return false;
  alt.replace(at, star.size(), tilde);
  return now == alt;
}

void expect_data(const Result& r) {
  CHECK_EQ(r.bad1, 0ull);
  CHECK_EQ(r.bad4, 0ull);
  CHECK_EQ(r.bad11, 0ull);
  CHECK(r.check_ok);
  CHECK_EQ(r.n_waits, uint64_t(0));  // one stream: never a GPU-side wait
}

}  // namespace

GPU_TEST("case A: X >= 11, best fit, no defrag") {
  for (uint64_t x : {11u, 12u, 20u}) {
    Result r = run_case(11 + x, 0);
    std::string tail = x > 11 ? "[-" + std::to_string(x - 11) + "]" : "";
    std::string want = "[4][-6][1][11]" + tail + hole(kVaPages - 11 - x);
    CHECK_EQ(r.layout_final, want);
    CHECK_EQ(r.layout_now, want);
    CHECK_EQ(r.mapped_pages, 11 + x);
    CHECK_EQ(r.off4, uint64_t(0));
    CHECK_EQ(r.off1, uint64_t(10));
    CHECK_EQ(r.off11, uint64_t(11));
    CHECK_EQ(r.n_defrag, uint64_t(0));
    CHECK_EQ(r.n_grow, uint64_t(0));
    expect_data(r);
  }
}

GPU_TEST("case B: 5 <= X < 11, defragment by remapping, no growth") {
  for (uint64_t x = 5; x < 11; ++x) {
    Result r = run_case(11 + x, 0);
    std::string tail = x > 5 ? "[-" + std::to_string(x - 5) + "]" : "";
    std::string want = "[*10][1][4][11]" + tail + hole(kVaPages - (11 + x) - 10);
    CHECK_EQ(r.layout_final, want);
    CHECK_MSG(now_matches(r.layout_now, want, 10), "layout right after +11: %s", r.layout_now.c_str());
    CHECK_EQ(r.mapped_pages, 11 + x);
    CHECK_EQ(r.off1, uint64_t(10));
    CHECK_EQ(r.off4, uint64_t(11));
    CHECK_EQ(r.off11, uint64_t(15));
    CHECK_EQ(r.n_defrag, uint64_t(1));
    CHECK_EQ(r.n_grow, uint64_t(0));
    expect_data(r);
  }
}

GPU_TEST("case C: X == 4, defragment then grow by the one-page shortfall") {
  Result r = run_case(15, 0);
  std::string want = "[*10][1][4][11]" + hole(kVaPages - 26);
  CHECK_EQ(r.layout_final, want);
  CHECK_MSG(now_matches(r.layout_now, want, 10), "layout right after +11: %s", r.layout_now.c_str());
  CHECK_EQ(r.mapped_pages, uint64_t(16));
  CHECK_EQ(r.off1, uint64_t(10));
  CHECK_EQ(r.off4, uint64_t(11));
  CHECK_EQ(r.off11, uint64_t(15));
  CHECK_EQ(r.n_defrag, uint64_t(1));
  CHECK_EQ(r.n_grow, uint64_t(1));
  expect_data(r);
}

GPU_TEST("case D: 0 <= X < 4, defragment the split leftover and grow") {
  for (uint64_t x = 0; x < 4; ++x) {
    Result r = run_case(11 + x, 0);
    std::string want = "[4][*6][1][11]" + hole(kVaPages - 22);
    CHECK_EQ(r.layout_final, want);
    CHECK_MSG(now_matches(r.layout_now, want, 6), "layout right after +11: %s", r.layout_now.c_str());
    CHECK_EQ(r.mapped_pages, uint64_t(16));
    CHECK_EQ(r.off4, uint64_t(0));
    CHECK_EQ(r.off1, uint64_t(10));
    CHECK_EQ(r.off11, uint64_t(11));
    CHECK_EQ(r.n_defrag, uint64_t(1));
    CHECK_EQ(r.n_grow, uint64_t(1));
    expect_data(r);
  }
}

GPU_TEST("growth from empty, one handle per page: page-exact remap (16 pages)") {
  Result r = run_case(0, kPage);
  std::string want = "[4][*6][1][11]" + hole(kVaPages - 22);
  CHECK_EQ(r.layout_final, want);
  CHECK_EQ(r.mapped_pages, uint64_t(16));
  expect_data(r);
}

GPU_TEST("growth from empty, default scaled handles: page-exact remap (16 pages)") {
  Result r = run_case(0, 0);
  std::string want = "[4][*6][1][11]" + hole(kVaPages - 22);
  CHECK_EQ(r.layout_final, want);
  CHECK_EQ(r.mapped_pages, uint64_t(16));
  expect_data(r);
}

GPU_TEST("growth from empty, one handle per growth: partial handles stay (22 pages)") {
  Result r = run_case(0, VPMM_HANDLE_SIZE_UNLIMITED);
  std::string want = "[4][-6][1][11]" + hole(kVaPages - 22);
  CHECK_EQ(r.layout_final, want);
  CHECK_EQ(r.mapped_pages, uint64_t(22));
  expect_data(r);
}

// The same sequence on a non-default stream: the initial pages are the NULL
// stream's, so Phase 1a prefers the caller's own [-10] and the layout differs
// from the seed's (more is remapped); physical memory and data must not.
GPU_TEST("walkthrough on a non-default stream: same physical memory, data intact") {
  for (uint64_t x : {2u, 4u, 7u, 12u}) {
    Result r = run_case(11 + x, 0, true);
    CHECK_EQ(r.mapped_pages, std::max<uint64_t>(11 + x, 16));
    CHECK_EQ(r.bad1, 0ull);
    CHECK_EQ(r.bad4, 0ull);
    CHECK_EQ(r.bad11, 0ull);
    CHECK(r.check_ok);
  }
}

GPU_TEST_MAIN()
