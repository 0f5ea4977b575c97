// Views on the CUDA driver (src/core/views.hpp): free handles mapped a second
// time, at a VA of the view's own, next to their mapping in the pool's chunk.
// What the host backend cannot show: the driver accepts one handle mapped at
// two VAs, kernels read and write through the view, the bytes are the
// handles' own (seen at home after the free), a reuse costs no driver call,
// stale slots are replaced, and trim and destroy leave nothing mapped.
// Pages of 2 MiB; views from 4 pages.
#include "gpu_util.cuh"

namespace {
using gt::MiB;
constexpr uint64_t kPage = 2 * MiB;

struct Scattered {
  vpmm_pool* p = nullptr;
  cudaStream_t s = nullptr;
  std::vector<void*> pieces;  // the freed 2-page regions, lowest first
};

// [2][1][2][1][2][1], the 2-page regions freed and their work completed.
Scattered scattered(uint64_t max_handle) {
  Scattered x;
  gt::PoolSpec spec;
  spec.va_size = 128 * kPage;
  spec.max_handle = max_handle;
  spec.view_min_size = 4 * kPage;
  x.p = gt::make_pool(spec);
  if (!x.p) return x;
  x.s = gt::new_stream();
  for (int i = 0; i < 3; ++i) {
    void *piece = nullptr, *keep = nullptr;
    CHECK_OK(vpmm_pool_malloc(x.p, 2 * kPage, x.s, &piece));
    CHECK_OK(vpmm_pool_malloc(x.p, kPage, x.s, &keep));
    x.pieces.push_back(piece);
  }
  for (void* q : x.pieces) CHECK_OK(vpmm_pool_free(x.p, q, x.s));
  CUDA_OK(cudaStreamSynchronize(x.s));
  return x;
}

void done(Scattered& x) {
  CHECK(gt::check_pool(x.p, "end"));
  CHECK_OK(vpmm_pool_destroy(x.p));
  cudaStreamDestroy(x.s);
}

}  // namespace

GPU_TEST("a view maps scattered free handles a second time; kernels use it; its bytes are theirs") {
  gt::Counters bad(3);
  Scattered x = scattered(0);
  if (!x.p) return;
  const vpmm_stats b = gt::stats(x.p);
  void* v = nullptr;
  CHECK_OK(vpmm_pool_malloc(x.p, 6 * kPage, x.s, &v));
  const vpmm_stats a = gt::stats(x.p);
  std::printf("  view of 6 pages: %s\n", gt::layout(x.p).c_str());
  CHECK_EQ(a.n_view_malloc, b.n_view_malloc + 1);
  CHECK_EQ(a.mapped_bytes, b.mapped_bytes);
  CHECK_EQ(a.lent_bytes, 6 * kPage);
  gt::fill(v, 6 * kPage, 21, x.s);
  gt::verify(v, 6 * kPage, 21, &bad.d[0], x.s);
  CHECK_OK(vpmm_pool_free(x.p, v, x.s));
  // The first piece is the view's first two pages: a 2-page request on the
  // same stream takes it and finds the view's bytes.
  void* q = nullptr;
  CHECK_OK(vpmm_pool_malloc(x.p, 2 * kPage, x.s, &q));
  CHECK_EQ(q, x.pieces[0]);
  gt::verify(q, 2 * kPage, 21, &bad.d[1], x.s);
  CHECK_OK(vpmm_pool_free(x.p, q, x.s));
  // Taken again: no driver call, same pointer, kernels still work.
  const vpmm_stats c = gt::stats(x.p);
  void* again = nullptr;
  CHECK_OK(vpmm_pool_malloc(x.p, 6 * kPage, x.s, &again));
  const vpmm_stats d = gt::stats(x.p);
  CHECK_EQ(again, v);
  CHECK_EQ(d.n_view_reuse, c.n_view_reuse + 1);
  CHECK_EQ(d.driver_calls, c.driver_calls);
  gt::fill(again, 6 * kPage, 22, x.s);
  gt::verify(again, 6 * kPage, 22, &bad.d[2], x.s);
  CUDA_OK(cudaStreamSynchronize(x.s));
  CHECK_EQ(bad.h[0], 0ull);
  CHECK_EQ(bad.h[1], 0ull);
  CHECK_EQ(bad.h[2], 0ull);
  CHECK_OK(vpmm_pool_free(x.p, again, x.s));
  done(x);
}

GPU_TEST("page handles: a taken slot is replaced, the rest stay; trim leaves nothing mapped") {
  gt::Counters bad(2);
  Scattered x = scattered(kPage);
  if (!x.p) return;
  void* v = nullptr;
  CHECK_OK(vpmm_pool_malloc(x.p, 6 * kPage, x.s, &v));
  gt::fill(v, 6 * kPage, 31, x.s);
  CHECK_OK(vpmm_pool_free(x.p, v, x.s));
  void* small = nullptr;
  CHECK_OK(vpmm_pool_malloc(x.p, kPage, x.s, &small));  // one page of the first piece
  const vpmm_stats b = gt::stats(x.p);
  void* again = nullptr;
  CHECK_OK(vpmm_pool_malloc(x.p, 6 * kPage, x.s, &again));
  const vpmm_stats a = gt::stats(x.p);
  std::printf("  reuse with one slot taken: %s, remapped %llu page(s)\n", gt::layout(x.p).c_str(),
              (unsigned long long)((a.bytes_remapped - b.bytes_remapped) / kPage));
  CHECK_EQ(again, v);
  CHECK_EQ(a.bytes_remapped - b.bytes_remapped, kPage);
  gt::fill(small, kPage, 32, x.s);
  gt::fill(again, 6 * kPage, 33, x.s);
  gt::verify(small, kPage, 32, &bad.d[0], x.s);
  gt::verify(again, 6 * kPage, 33, &bad.d[1], x.s);
  CUDA_OK(cudaStreamSynchronize(x.s));
  CHECK_EQ(bad.h[0], 0ull);
  CHECK_EQ(bad.h[1], 0ull);
  CHECK_OK(vpmm_pool_free(x.p, again, x.s));
  CHECK_OK(vpmm_pool_free(x.p, small, x.s));
  CUDA_OK(cudaStreamSynchronize(x.s));
  // Free everything the scattered setup kept, then trim: the views' second
  // mappings go with their handles.
  CHECK_OK(vpmm_pool_trim(x.p, 0));
  const vpmm_stats t = gt::stats(x.p);
  CHECK_EQ(t.mapped_bytes, 3 * kPage);  // the three 1-page allocations
  CHECK_EQ(t.handles, uint64_t(3));
  done(x);
}

GPU_TEST_MAIN()
