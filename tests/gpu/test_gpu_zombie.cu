// Zombie lifetimes on a real GPU: the key proof that remapping is safe.
//
// cuMemUnmap does not wait for kernels (measured on an H100: an unmap returns
// while a kernel still reads the range), so when
// the pool remaps the pages of a freed region to a new VA while a kernel still
// reads the old VA, the old VA must stay mapped (a zombie) until the event of
// that work completes. Here a kernel held at a gate reads a region through its
// original address; meanwhile the CPU frees the region, another stream (or
// the same one) allocates it again through a remap into a hole, writes new
// data there, and keeps allocating and freeing. Then the gate opens: the
// reader must see the original pattern (the old VA still mapped to the same
// pages, and the new owner's writes ordered after the reader) and the context
// must be healthy (an early unmap is an illegal-address error, sticky). The
// last case calls vpmm_pool_destroy while the reader is still held: destroy
// must wait for it.
#include <algorithm>
#include <thread>

#include "gpu_util.cuh"

namespace {

using gt::MiB;
constexpr uint64_t kGateTimeoutNs = 5ull * 1000 * 1000 * 1000;

int pending_zombies(vpmm_pool* p) {
  int n = 0;
  for (const vpmm_region_info& r : gt::regions(p))
    if (r.kind == VPMM_REGION_ZOMBIE && r.event_pending == 1) ++n;
  return n;
}

// True when [va, va + bytes) lies inside zombies whose events are pending.
bool pending_zombie_covers(vpmm_pool* p, const void* ptr, uint64_t bytes) {
  uint64_t va = reinterpret_cast<uint64_t>(ptr), covered = 0;
  for (const vpmm_region_info& r : gt::regions(p)) {
    if (r.kind != VPMM_REGION_ZOMBIE || r.event_pending != 1) continue;
    uint64_t lo = std::max(va, r.va), hi = std::min(va + bytes, r.va + r.size);
    if (hi > lo) covered += hi - lo;
  }
  return covered == bytes;
}

void launch_reader(const gt::Gate& g, int slot, const void* va, uint64_t bytes, uint64_t seed,
                   unsigned long long* bad, cudaStream_t s) {
  gt::gated_verify_kernel<<<1, 1024, 0, s>>>(g.flag(), kGateTimeoutNs, g.timeout_flag(),
                                             static_cast<const uint64_t*>(va), bytes / 8, seed, bad,
                                             g.done_dev(slot));
}

}  // namespace

GPU_TEST("zombie: reader on the old VA while the region is freed, remapped for another stream, rewritten") {
  vpmm_pool* p = gt::make_pool({});
  CHECK(p != nullptr);
  if (!p) return;
  cudaStream_t A = gt::new_stream(), B = gt::new_stream();
  gt::Gate gate;
  gt::Counters bad(2);
  const uint64_t n = 16 * MiB;
  void* r = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, n, A, &r));
  gt::fill(r, n, 21, A);
  launch_reader(gate, 0, r, n, 21, &bad.d[0], A);  // still reads r after all that follows
  CHECK_OK(vpmm_pool_free(p, r, A));

  void* x = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, n, B, &x));
  CHECK(x != r);
  gt::fill(x, n, 22, B);  // the new owner overwrites the same physical pages
  // CPU-side churn while the reader is held: every malloc runs Phase 0 and
  // must leave the zombie alone.
  for (int i = 0; i < 16; ++i) {
    void* t = nullptr;
    CHECK_OK(vpmm_pool_malloc(p, (1 + i % 5) * 2 * MiB, B, &t));
    gt::fill(t, 2 * MiB, 30 + i, B);
    CHECK_OK(vpmm_pool_free(p, t, B));
  }
  std::printf("  while held: %s\n", gt::layout(p).c_str());
  CHECK_MSG(pending_zombie_covers(p, r, n), "the old VA is not a pending zombie: %s",
            gt::layout(p).c_str());
  CHECK(gt::stats(p).zombie_bytes >= n);
  CHECK_EQ(gate.done_host(0), 0);
  CHECK(gt::check_pool(p, "while held"));

  gate.open();
  CUDA_OK(cudaStreamSynchronize(A));
  CUDA_OK(cudaStreamSynchronize(B));
  CHECK(!gate.timed_out());
  CHECK_EQ(gate.done_host(0), 1);
  CHECK_MSG(bad.h[0] == 0, "the reader saw %llu wrong words through the old VA", bad.h[0]);
  gt::verify(x, n, 22, &bad.d[1], B);
  CUDA_OK(cudaStreamSynchronize(B));
  CHECK_EQ(bad.h[1], 0ull);
  void* t = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, 2 * MiB, B, &t));  // Phase 0 reaps it now
  CHECK_EQ(gt::stats(p).zombie_bytes, uint64_t(0));
  CHECK_OK(vpmm_pool_free(p, t, B));
  CHECK_OK(vpmm_pool_free(p, x, B));
  CHECK(gt::check_pool(p, "end"));
  CHECK_OK(vpmm_pool_destroy(p));
  cudaStreamDestroy(A);
  cudaStreamDestroy(B);
}

GPU_TEST("zombie: same-stream defrag moves two regions into a hole while readers hold both old VAs") {
  // Page handles and initial pages: [R1 4][L 1][R2 5][-rest]; the stream then
  // asks for 9 + more than the rest, so Phase 2 remaps R1 and R2 next to the
  // tail (case B of the walkthrough) while their readers are held.
  const uint64_t page = 2 * MiB;
  gt::PoolSpec spec;
  spec.va_size = 64 * page;
  spec.initial_pages = 14;
  vpmm_pool* p = gt::make_pool(spec);
  CHECK(p != nullptr);
  if (!p) return;
  cudaStream_t A = gt::new_stream();
  gt::Gate gate;
  gt::Counters bad(4);
  void *r1 = nullptr, *l = nullptr, *r2 = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, 4 * page, A, &r1));
  CHECK_OK(vpmm_pool_malloc(p, 1 * page, A, &l));
  CHECK_OK(vpmm_pool_malloc(p, 5 * page, A, &r2));
  gt::fill(r1, 4 * page, 41, A);
  gt::fill(l, page, 42, A);
  gt::fill(r2, 5 * page, 43, A);
  launch_reader(gate, 0, r1, 4 * page, 41, &bad.d[0], A);
  launch_reader(gate, 1, r2, 5 * page, 43, &bad.d[1], A);
  CHECK_OK(vpmm_pool_free(p, r1, A));
  CHECK_OK(vpmm_pool_free(p, r2, A));
  // Free now: [-4][1][-9]: never-used initial pages count as every stream's
  // own, so r2 merges with the tail. 12 pages: the [-9] is used in place and
  // R1 is remapped behind it (its readers still hold the old VA).
  void* big = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, 12 * page, A, &big));
  std::printf("  after the remap, readers held: %s\n", gt::layout(p).c_str());
  vpmm_stats st = gt::stats(p);
  CHECK_EQ(st.n_defrag, uint64_t(1));
  CHECK_EQ(st.n_stream_waits, uint64_t(0));  // same stream: ordered, no wait
  CHECK(pending_zombie_covers(p, r1, 4 * page));
  CHECK_EQ(big, r2);  // stream order keeps r2's reader before big's first use
  gt::fill(big, 12 * page, 44, A);  // stream-ordered after the readers
  gate.open();
  CUDA_OK(cudaStreamSynchronize(A));
  CHECK(!gate.timed_out());
  CHECK_EQ(gate.done_host(0), 1);
  CHECK_EQ(gate.done_host(1), 1);
  CHECK_EQ(bad.h[0], 0ull);
  CHECK_EQ(bad.h[1], 0ull);
  gt::verify(big, 12 * page, 44, &bad.d[2], A);
  gt::verify(l, page, 42, &bad.d[3], A);
  CUDA_OK(cudaStreamSynchronize(A));
  CHECK_EQ(bad.h[2], 0ull);
  CHECK_EQ(bad.h[3], 0ull);
  CHECK_OK(vpmm_pool_trim(p, UINT64_MAX));  // reaps the completed zombies
  CHECK_EQ(gt::stats(p).zombie_bytes, uint64_t(0));
  std::printf("  after reaping: %s\n", gt::layout(p).c_str());
  CHECK_OK(vpmm_pool_free(p, big, A));
  CHECK_OK(vpmm_pool_free(p, l, A));
  CHECK(gt::check_pool(p, "end"));
  CHECK_OK(vpmm_pool_destroy(p));
  cudaStreamDestroy(A);
}

GPU_TEST("zombie: vpmm_pool_destroy waits for a reader still using a zombie") {
  vpmm_pool* p = gt::make_pool({});
  CHECK(p != nullptr);
  if (!p) return;
  cudaStream_t A = gt::new_stream(), B = gt::new_stream();
  gt::Gate gate;
  gt::Counters bad(1);
  const uint64_t n = 16 * MiB;
  void* r = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, n, A, &r));
  gt::fill(r, n, 51, A);
  launch_reader(gate, 0, r, n, 51, &bad.d[0], A);
  CHECK_OK(vpmm_pool_free(p, r, A));
  void* x = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, n, B, &x));
  gt::fill(x, n, 52, B);
  CHECK_OK(vpmm_pool_free(p, x, B));  // a free region whose event is pending too
  CHECK(pending_zombie_covers(p, r, n));
  CHECK_EQ(pending_zombies(p), 1);
  const double hold_ms = 300;
  std::thread opener([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(int(hold_ms)));
    gate.open();
  });
  double t0 = gt::now_ms();
  CHECK_OK(vpmm_pool_destroy(p));
  double dt = gt::now_ms() - t0;
  bool done_at_return = gate.done_host(0) == 1;
  opener.join();
  std::printf("  vpmm_pool_destroy returned after %.1f ms (gate opened at %.0f ms); reader done: %d\n",
              dt, hold_ms, int(done_at_return));
  CHECK_MSG(done_at_return, "destroy returned before the reader of the zombie finished");
  CHECK_MSG(dt >= hold_ms * 0.8, "destroy took only %.1f ms", dt);
  CUDA_OK(cudaDeviceSynchronize());
  CHECK(!gate.timed_out());
  CHECK_EQ(bad.h[0], 0ull);
  cudaStreamDestroy(A);
  cudaStreamDestroy(B);
}

GPU_TEST_MAIN()
