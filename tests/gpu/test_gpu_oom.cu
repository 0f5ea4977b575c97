// Out of memory at the device's real limit: allocate 1 GiB blocks, then ever
// smaller ones, until the pool answers VPMM_ERR_OUT_OF_MEMORY at each size.
// Each failure must leave the pool exactly as it was (same mapped bytes,
// handles, counters) and the pool must keep working: every allocation is
// written and read back by kernels, everything is freed, and then one
// allocation of all the mapped memory succeeds without creating anything
// (every handle remapped into one span). After destroy, cudaMemGetInfo must
// show the memory back.
#include "gpu_util.cuh"

namespace {
using gt::GiB;
using gt::MiB;
constexpr uint64_t kStride = 64 << 10;  // touch one word per 64 KiB
}  // namespace

GPU_TEST("OOM at the device limit, then the pool still works and destroy gives it all back") {
  // Lazy module loading needs device memory at a kernel's first launch: load
  // the kernels before the device is full.
  gt::Counters bad(4);
  gt::touch_kernel<<<1, 32>>>(nullptr, 0, kStride, 0);
  gt::check_touch_kernel<<<1, 32>>>(nullptr, 0, kStride, 0, bad.d);
  CUDA_OK(cudaDeviceSynchronize());
  size_t free0 = 0, total = 0;
  CUDA_OK(cudaMemGetInfo(&free0, &total));
  std::printf("  before: %.2f GiB free of %.2f GiB\n", free0 / double(GiB), total / double(GiB));

  vpmm_pool* p = gt::make_pool({});
  CHECK(p != nullptr);
  if (!p) return;
  cudaStream_t s = gt::new_stream();
  struct A {
    void* p;
    uint64_t n;
  };
  std::vector<A> live;
  const uint64_t sizes[] = {1 * GiB, 256 * MiB, 64 * MiB, 16 * MiB, 4 * MiB, 2 * MiB};
  int n_oom = 0;
  for (uint64_t sz : sizes) {
    for (int guard = 0; guard < 100000; ++guard) {
      vpmm_stats b = gt::stats(p);
      void* q = nullptr;
      vpmm_status st = vpmm_pool_malloc(p, sz, s, &q);
      if (st == VPMM_OK) {
        live.push_back({q, sz});
        continue;
      }
      vpmm_stats a = gt::stats(p);
      std::printf("  malloc(%llu MiB) -> %s after %zu allocations: %s\n",
                  (unsigned long long)(sz / MiB), vpmm_status_string(st), live.size(),
                  vpmm_last_error());
      CHECK_EQ(st, VPMM_ERR_OUT_OF_MEMORY);
      CHECK(std::strlen(vpmm_last_error()) > 0);
      CHECK(q == nullptr);
      // A failed call leaves the pool as it was.
      CHECK_EQ(a.mapped_bytes, b.mapped_bytes);
      CHECK_EQ(a.handles, b.handles);
      CHECK_EQ(a.n_malloc, b.n_malloc);
      CHECK_EQ(a.live_bytes, b.live_bytes);
      ++n_oom;
      break;
    }
  }
  CHECK_EQ(n_oom, 6);
  // Small requests too (slabs need a page of their own).
  int n_small = 0;
  for (; n_small < 100000; ++n_small) {
    void* q = nullptr;
    vpmm_status st = vpmm_pool_malloc(p, 64 << 10, s, &q);
    if (st != VPMM_OK) {
      CHECK_EQ(st, VPMM_ERR_OUT_OF_MEMORY);
      break;
    }
    live.push_back({q, 64 << 10});
  }
  vpmm_stats full = gt::stats(p);
  size_t free_full = 0;
  cudaMemGetInfo(&free_full, &total);
  std::printf("  full: %zu allocations (%d small), %.2f GiB mapped in %llu handles, device free %.0f MiB\n",
              live.size(), n_small, full.mapped_bytes / double(GiB),
              (unsigned long long)full.handles, free_full / double(MiB));
  CHECK(full.mapped_bytes > free0 / 2);
  CHECK(gt::check_pool(p, "at OOM"));

  // Every allocation is usable.
  for (size_t i = 0; i < live.size(); ++i) {
    uint64_t n = live[i].n < kStride ? 8 : live[i].n;
    gt::touch_kernel<<<256, 256, 0, s>>>(static_cast<uint8_t*>(live[i].p), n,
                                        live[i].n < kStride ? 8 : kStride, i);
  }
  for (size_t i = 0; i < live.size(); ++i) {
    uint64_t n = live[i].n < kStride ? 8 : live[i].n;
    gt::check_touch_kernel<<<256, 256, 0, s>>>(static_cast<uint8_t*>(live[i].p), n,
                                              live[i].n < kStride ? 8 : kStride, i, &bad.d[0]);
  }
  CUDA_OK(cudaStreamSynchronize(s));
  CHECK_EQ(bad.h[0], 0ull);

  // At the limit nothing can be created: free every other page allocation and
  // ask for their sum; Phase 2 must remap the freed handles into one span.
  uint64_t freed = 0;
  std::vector<A> kept;
  for (size_t i = 0; i < live.size(); ++i) {
    if (i % 2 == 0 && live[i].n >= 2 * MiB) {
      CHECK_OK(vpmm_pool_free(p, live[i].p, s));
      freed += live[i].n;
    } else {
      kept.push_back({live[i].p, i});  // n reused as the seed index
    }
  }
  vpmm_stats b = gt::stats(p);
  void* all = nullptr;
  double t0 = gt::now_ms();
  CHECK_OK(vpmm_pool_malloc(p, freed, s, &all));
  double dt = gt::now_ms() - t0;
  vpmm_stats a = gt::stats(p);
  std::printf("  at the limit, malloc(%.2f GiB) from freed holes: %.1f ms, n_defrag %llu -> %llu, "
              "n_grow %llu -> %llu, remapped %.2f GiB\n",
              freed / double(GiB), dt, (unsigned long long)b.n_defrag,
              (unsigned long long)a.n_defrag, (unsigned long long)b.n_grow,
              (unsigned long long)a.n_grow, (a.bytes_remapped - b.bytes_remapped) / double(GiB));
  CHECK_EQ(a.n_grow, b.n_grow);
  CHECK_EQ(a.mapped_bytes, b.mapped_bytes);
  CHECK(a.n_defrag == b.n_defrag + 1);
  if (all) {
    gt::touch_kernel<<<1024, 256, 0, s>>>(static_cast<uint8_t*>(all), freed, kStride, 77);
    gt::check_touch_kernel<<<1024, 256, 0, s>>>(static_cast<uint8_t*>(all), freed, kStride, 77,
                                               &bad.d[1]);
  }
  // The allocations that stayed live kept their data.
  for (const A& k : kept) {
    uint64_t n = live[k.n].n;
    gt::check_touch_kernel<<<256, 256, 0, s>>>(static_cast<uint8_t*>(k.p), n < kStride ? 8 : n,
                                              n < kStride ? 8 : kStride, k.n, &bad.d[2]);
  }
  CUDA_OK(cudaStreamSynchronize(s));
  CHECK_EQ(bad.h[1], 0ull);
  CHECK_EQ(bad.h[2], 0ull);
  CHECK(gt::check_pool(p, "after the remap at the limit"));

  // Free everything; the pool still serves requests.
  CHECK_OK(vpmm_pool_free(p, all, s));
  for (const A& k : kept) CHECK_OK(vpmm_pool_free(p, k.p, s));
  live.clear();
  CHECK(gt::check_pool(p, "after freeing everything"));
  CHECK_EQ(gt::stats(p).live_bytes, uint64_t(0));
  // Allocate again after the OOM cycle: served from the cache.
  void* again = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, 1 * GiB, s, &again));
  CHECK_OK(vpmm_pool_free(p, again, s));
  CHECK(gt::check_pool(p, "end"));
  CHECK_OK(vpmm_pool_destroy(p));
  cudaStreamDestroy(s);
  size_t free1 = 0;
  CUDA_OK(cudaMemGetInfo(&free1, &total));
  std::printf("  after destroy: %.2f GiB free (before: %.2f GiB)\n", free1 / double(GiB),
              free0 / double(GiB));
  CHECK_MSG(free1 + 64 * MiB >= free0, "only %.2f of %.2f GiB came back", free1 / double(GiB),
            free0 / double(GiB));
}

GPU_TEST_MAIN()
