// Growth across several VA chunks on a real GPU: with va_size = 64 MiB the
// pool must reserve more chunks on demand (also one larger than va_size for a
// request that does not fit a chunk), keep every allocation's data intact,
// and defragment across chunks: free regions harvested from two chunks are
// remapped into a fresh chunk for a request larger than any free region.
#include "gpu_util.cuh"

namespace {
using gt::MiB;
constexpr uint64_t kPage = 2 * MiB;
}  // namespace

GPU_TEST("growth: several VA chunks of 64 MiB, one larger chunk, cross-chunk remap") {
  gt::PoolSpec spec;
  spec.va_size = 64 * MiB;
  vpmm_pool* p = gt::make_pool(spec);
  CHECK(p != nullptr);
  if (!p) return;
  cudaStream_t s = gt::new_stream();
  gt::Counters bad(16);
  std::vector<void*> small;
  for (int i = 0; i < 10; ++i) {
    void* q = nullptr;
    CHECK_OK(vpmm_pool_malloc(p, 20 * MiB, s, &q));
    if (q) gt::fill(q, 20 * MiB, 100 + i, s);
    small.push_back(q);
  }
  void* big = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, 200 * MiB, s, &big));  // larger than va_size
  if (big) gt::fill(big, 200 * MiB, 7, s);
  vpmm_stats st = gt::stats(p);
  std::printf("  after 10 x 20 MiB + 200 MiB: %llu chunks, %.0f MiB VA: %s\n",
              (unsigned long long)st.va_chunks, st.reserved_va_bytes / double(MiB),
              gt::layout(p).c_str());
  CHECK_EQ(st.va_chunks, uint64_t(5));
  CHECK_EQ(st.mapped_bytes, 400 * MiB);
  CHECK(gt::check_pool(p, "after growth"));
  for (int i = 0; i < 10; ++i)
    if (small[i]) gt::verify(small[i], 20 * MiB, 100 + i, &bad.d[0], s);
  if (big) gt::verify(big, 200 * MiB, 7, &bad.d[1], s);

  // Free the 20 MiB ones: [-30][*2] in three chunks, [-10][*22] in the fourth.
  for (void* q : small) CHECK_OK(vpmm_pool_free(p, q, s));
  vpmm_stats before = gt::stats(p);
  void* mid = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, 100 * MiB, s, &mid));  // > any free region, no hole fits
  vpmm_stats after = gt::stats(p);
  std::printf("  after malloc(100 MiB): %s\n", gt::layout(p).c_str());
  CHECK_EQ(after.n_defrag, before.n_defrag + 1);
  CHECK_EQ(after.n_grow, before.n_grow);  // remapped, nothing created
  CHECK_EQ(after.mapped_bytes, before.mapped_bytes);
  CHECK(after.va_chunks >= before.va_chunks + 1);
  if (mid) {
    gt::fill(mid, 100 * MiB, 8, s);
    gt::verify(mid, 100 * MiB, 8, &bad.d[2], s);
  }
  if (big) gt::verify(big, 200 * MiB, 7, &bad.d[3], s);
  CUDA_OK(cudaStreamSynchronize(s));
  for (int i = 0; i < 4; ++i) CHECK_EQ(bad.h[i], 0ull);
  CHECK(gt::check_pool(p, "after cross-chunk remap"));

  // And once more across every chunk: everything free, one allocation of all
  // mapped memory.
  CHECK_OK(vpmm_pool_free(p, mid, s));
  CHECK_OK(vpmm_pool_free(p, big, s));
  void* all = nullptr;
  uint64_t mapped = gt::stats(p).mapped_bytes;
  CHECK_OK(vpmm_pool_malloc(p, mapped, s, &all));
  CHECK_EQ(gt::stats(p).mapped_bytes, mapped);
  if (all) {
    gt::fill(all, mapped, 9, s);
    gt::verify(all, mapped, 9, &bad.d[4], s);
  }
  CUDA_OK(cudaStreamSynchronize(s));
  CHECK_EQ(bad.h[4], 0ull);
  std::printf("  one allocation of all %llu MiB: %s\n", (unsigned long long)(mapped / MiB),
              gt::layout(p).c_str());
  CHECK_OK(vpmm_pool_free(p, all, s));
  CHECK(gt::check_pool(p, "end"));
  CHECK_OK(vpmm_pool_destroy(p));
  cudaStreamDestroy(s);
}

GPU_TEST("growth: page handles across chunks (max_handle_size = page)") {
  gt::PoolSpec spec;
  spec.va_size = 32 * MiB;
  spec.max_handle = kPage;
  vpmm_pool* p = gt::make_pool(spec);
  CHECK(p != nullptr);
  if (!p) return;
  cudaStream_t s = gt::new_stream();
  gt::Counters bad(2);
  std::vector<void*> v;
  for (int i = 0; i < 12; ++i) {
    void* q = nullptr;
    CHECK_OK(vpmm_pool_malloc(p, (3 + i % 4) * kPage, s, &q));
    if (q) gt::fill(q, (3 + i % 4) * kPage, 200 + i, s);
    v.push_back(q);
  }
  vpmm_stats st = gt::stats(p);
  CHECK_EQ(st.handles, st.mapped_bytes / kPage);
  CHECK(st.va_chunks >= 3);
  for (int i = 0; i < 12; i += 2) CHECK_OK(vpmm_pool_free(p, v[i], s));
  void* q = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, 20 * kPage, s, &q));  // remap page handles from every chunk
  if (q) {
    gt::fill(q, 20 * kPage, 300, s);
    gt::verify(q, 20 * kPage, 300, &bad.d[0], s);
  }
  for (int i = 1; i < 12; i += 2)
    if (v[i]) gt::verify(v[i], (3 + i % 4) * kPage, 200 + i, &bad.d[1], s);
  CUDA_OK(cudaStreamSynchronize(s));
  CHECK_EQ(bad.h[0], 0ull);
  CHECK_EQ(bad.h[1], 0ull);
  std::printf("  %s\n", gt::layout(p).c_str());
  CHECK(gt::check_pool(p, "end"));
  CHECK_OK(vpmm_pool_destroy(p));
  cudaStreamDestroy(s);
}

GPU_TEST_MAIN()
