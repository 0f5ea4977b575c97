// A fully free physical handle whose pages lie in free regions of two
// different streams. Once a bug (fixed: Pool::merge_completed_straddles merges
// such regions once both events completed), now a regression test.
//
// With one handle per growth (VPMM_HANDLE_SIZE_UNLIMITED) a 4-page
// allocation on stream A is one handle. Freed on A and completed, its front
// half is reused by stream B (Phase 1b) and freed on B: the handle is now
// covered by [-2 on B][-2 on A], two free regions that do not coalesce
// (different streams), both completed, nothing live in the handle.
//
// The pool looks for whole handles one free region at a time
// (RegionMap::whole_mappings_in per region in plan_harvest and release_free),
// so before the fix neither region "contained" the handle and:
//  - malloc(4 pages) on a third stream grew 4 new pages instead of using the
//    4 free ones (at the device limit an OOM with memory cached), and
//  - vpmm_pool_trim(pool, 0) released nothing.
// Page handles and the default scaled handles (a 4-page growth is 4 page
// handles) never had the problem; they are checked too.
#include "gpu_util.cuh"

namespace {
using gt::MiB;
constexpr uint64_t kPage = 2 * MiB;

struct Split {
  vpmm_pool* p = nullptr;
  cudaStream_t A = nullptr, B = nullptr, C = nullptr;
};

// Leaves one 4-page handle as [-2 on B][-2 on A], every event completed.
Split make_split(uint64_t max_handle, gt::Counters& bad) {
  Split s;
  gt::PoolSpec spec;
  spec.va_size = 64 * kPage;
  spec.max_handle = max_handle;
  s.p = gt::make_pool(spec);
  if (!s.p) return s;
  s.A = gt::new_stream();
  s.B = gt::new_stream();
  s.C = gt::new_stream();
  void *x = nullptr, *y = nullptr;
  CHECK_OK(vpmm_pool_malloc(s.p, 4 * kPage, s.A, &x));
  gt::fill(x, 4 * kPage, 1, s.A);
  CHECK_OK(vpmm_pool_free(s.p, x, s.A));
  CUDA_OK(cudaStreamSynchronize(s.A));
  CHECK_OK(vpmm_pool_malloc(s.p, 2 * kPage, s.B, &y));  // Phase 1b: front of A's region
  CHECK_EQ(y, x);
  gt::fill(y, 2 * kPage, 2, s.B);
  gt::verify(y, 2 * kPage, 2, &bad.d[0], s.B);
  CHECK_OK(vpmm_pool_free(s.p, y, s.B));
  CUDA_OK(cudaStreamSynchronize(s.B));
  vpmm_stats st = gt::stats(s.p);
  CHECK_EQ(st.free_bytes, 4 * kPage);
  CHECK_EQ(st.live_bytes, uint64_t(0));
  std::printf("  max_handle_size=%llu: %s, %llu handle(s), all free\n",
              (unsigned long long)max_handle, gt::layout(s.p).c_str(),
              (unsigned long long)st.handles);
  return s;
}

void done(Split& s) {
  CHECK(gt::check_pool(s.p, "end"));
  CHECK_OK(vpmm_pool_destroy(s.p));
  cudaStreamDestroy(s.A);
  cudaStreamDestroy(s.B);
  cudaStreamDestroy(s.C);
}

void harvest_case(uint64_t max_handle) {
  gt::Counters bad(2);
  Split s = make_split(max_handle, bad);
  if (!s.p) return;
  vpmm_stats b = gt::stats(s.p);
  void* z = nullptr;
  CHECK_OK(vpmm_pool_malloc(s.p, 4 * kPage, s.C, &z));
  vpmm_stats a = gt::stats(s.p);
  std::printf("  malloc(4 pages) on a third stream: %s, mapped %llu -> %llu pages\n",
              gt::layout(s.p).c_str(), (unsigned long long)(b.mapped_bytes / kPage),
              (unsigned long long)(a.mapped_bytes / kPage));
  CHECK_MSG(a.mapped_bytes == b.mapped_bytes,
            "grew %llu pages although 4 free pages of one fully free handle were cached",
            (unsigned long long)((a.mapped_bytes - b.mapped_bytes) / kPage));
  CHECK_EQ(a.n_grow, b.n_grow);
  if (z) {
    gt::fill(z, 4 * kPage, 3, s.C);
    gt::verify(z, 4 * kPage, 3, &bad.d[1], s.C);
  }
  CUDA_OK(cudaStreamSynchronize(s.C));
  CHECK_EQ(bad.h[0], 0ull);
  CHECK_EQ(bad.h[1], 0ull);
  CHECK_OK(vpmm_pool_free(s.p, z, s.C));
  done(s);
}

void trim_case(uint64_t max_handle) {
  gt::Counters bad(1);
  Split s = make_split(max_handle, bad);
  if (!s.p) return;
  CHECK_OK(vpmm_pool_trim(s.p, 0));
  vpmm_stats a = gt::stats(s.p);
  std::printf("  after vpmm_pool_trim(0): %s, mapped %llu pages, %llu handle(s)\n",
              gt::layout(s.p).c_str(), (unsigned long long)(a.mapped_bytes / kPage),
              (unsigned long long)a.handles);
  CHECK_MSG(a.mapped_bytes == 0, "trim(0) left %llu free pages mapped",
            (unsigned long long)(a.mapped_bytes / kPage));
  CHECK_EQ(a.handles, uint64_t(0));
  CHECK_EQ(bad.h[0], 0ull);
  done(s);
}

}  // namespace

GPU_TEST("control, page handles: a free handle split across two streams is reused") {
  harvest_case(kPage);
}
GPU_TEST("control, page handles: trim(0) releases it") { trim_case(kPage); }

GPU_TEST("growth handles: a fully free handle split across two streams is reused, not grown") {
  harvest_case(VPMM_HANDLE_SIZE_UNLIMITED);
}
GPU_TEST("growth handles: trim(0) releases a fully free handle split across two streams") {
  trim_case(VPMM_HANDLE_SIZE_UNLIMITED);
}
GPU_TEST("default scaled handles: a free handle split across two streams is reused") { harvest_case(0); }
GPU_TEST("default scaled handles: trim(0) releases it") { trim_case(0); }

GPU_TEST_MAIN()
