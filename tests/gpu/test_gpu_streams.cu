// Multi-stream behaviour on a real GPU:
//  - Phase 2 under load: a kernel on stream A is held at a gate (a spin on a
//    mapped host flag) while A frees a region; stream B's malloc harvests that
//    region by remapping. B must not block the CPU (the gate is still closed
//    when malloc returns), must wait on the GPU (n_stream_waits grows, B's
//    kernels run only after A's), and must see A's last writes through the
//    new VA; the old VA stays a zombie until A's event completes.
//  - Phase 1b: a region freed on A whose event completed is reused by B at
//    the same address, without a wait or a remap.
//  - Four threads on four streams allocating, writing, verifying and freeing
//    concurrently; every byte verified by kernels.
#include <atomic>
#include <random>
#include <thread>

#include "gpu_util.cuh"

namespace {

using gt::MiB;
constexpr uint64_t kGateTimeoutNs = 5ull * 1000 * 1000 * 1000;  // safety net only

bool has_pending_zombie(vpmm_pool* p, uint64_t bytes) {
  for (const vpmm_region_info& r : gt::regions(p))
    if (r.kind == VPMM_REGION_ZOMBIE && r.size >= bytes && r.event_pending == 1) return true;
  return false;
}

}  // namespace

GPU_TEST("phase 2 harvests a region with a pending event: GPU wait, no CPU block") {
  vpmm_pool* p = gt::make_pool({});
  CHECK(p != nullptr);
  if (!p) return;
  cudaStream_t A = gt::new_stream(), B = gt::new_stream();
  gt::Gate gate;
  gt::Counters bad(3);
  const uint64_t n = 32 * MiB;

  void* r = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, n, A, &r));
  gt::fill(r, n, 1, A);
  gt::gate_kernel<<<1, 1, 0, A>>>(gate.flag(), kGateTimeoutNs, gate.timeout_flag());
  gt::fill(r, n, 2, A);  // A's last use: runs only once the gate opens
  CHECK_OK(vpmm_pool_free(p, r, A));
  vpmm_stats before = gt::stats(p);

  double t0 = gt::now_ms();
  void* x = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, n, B, &x));
  double dt = gt::now_ms() - t0;
  vpmm_stats after = gt::stats(p);
  std::printf("  B malloc with A held at the gate: %.3f ms; %s\n", dt, gt::layout(p).c_str());
  CHECK_MSG(gate.h[0] == 0 && !gate.timed_out(), "the gate opened early?");
  if (!gt::under_sanitizer()) CHECK_MSG(dt < 50.0, "malloc on B took %.1f ms: blocked on A?", dt);
  CHECK(x != r);  // remapped to a new VA, not reused in place (A's event is pending)
  CHECK_EQ(after.n_stream_waits, before.n_stream_waits + 1);
  CHECK_EQ(after.n_defrag, before.n_defrag + 1);
  CHECK_EQ(after.n_grow, before.n_grow);
  CHECK_EQ(after.mapped_bytes, before.mapped_bytes);
  CHECK_EQ(after.n_cross_stream_reuse, before.n_cross_stream_reuse);
  CHECK(after.zombie_bytes >= n);
  CHECK_MSG(has_pending_zombie(p, n), "expected a zombie with a pending event: %s",
            gt::layout(p).c_str());

  // A further malloc must not reap the zombie while A is still held.
  void* y = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, 2 * MiB, B, &y));
  CHECK(gt::stats(p).zombie_bytes >= n);
  // B's kernels: the first sees A's post-gate write (B waited for A on the
  // GPU). Under compute-sanitizer a launch behind a held stream blocks the
  // CPU until the gate's timeout, so there they are queued after the gate.
  auto queue_b = [&] {
    gt::verify(x, n, 2, &bad.d[0], B);
    gt::fill(x, n, 3, B);
    gt::verify(x, n, 3, &bad.d[1], B);
  };
  if (!gt::under_sanitizer()) {
    queue_b();
    cudaError_t q = cudaStreamQuery(B);
    CHECK_MSG(q == cudaErrorNotReady, "B ran ahead of A's gate: cudaStreamQuery(B) = %s",
              cudaGetErrorName(q));
  }
  gate.open();
  if (gt::under_sanitizer()) queue_b();
  CUDA_OK(cudaStreamSynchronize(A));
  CUDA_OK(cudaStreamSynchronize(B));
  CHECK(!gate.timed_out());
  CHECK_EQ(bad.h[0], 0ull);
  CHECK_EQ(bad.h[1], 0ull);
  // The next malloc reaps the zombie (Phase 0).
  void* z = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, 2 * MiB, B, &z));
  vpmm_stats end = gt::stats(p);
  CHECK_EQ(end.zombie_bytes, uint64_t(0));
  CHECK(end.n_zombies_reaped >= 1);
  CHECK_OK(vpmm_pool_free(p, x, B));
  CHECK_OK(vpmm_pool_free(p, y, B));
  CHECK_OK(vpmm_pool_free(p, z, B));
  CHECK(gt::check_pool(p, "end"));
  CHECK_OK(vpmm_pool_destroy(p));
  cudaStreamDestroy(A);
  cudaStreamDestroy(B);
}

GPU_TEST("phase 2 harvest plus growth in one span, several pending foreign regions") {
  vpmm_pool* p = gt::make_pool({});
  CHECK(p != nullptr);
  if (!p) return;
  cudaStream_t A = gt::new_stream(), C = gt::new_stream(), B = gt::new_stream();
  gt::Gate gate;
  gt::Counters bad(4);
  void *ra = nullptr, *rc = nullptr, *keep = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, 16 * MiB, A, &ra));
  CHECK_OK(vpmm_pool_malloc(p, 2 * MiB, A, &keep));  // separates ra and rc
  CHECK_OK(vpmm_pool_malloc(p, 8 * MiB, C, &rc));
  gt::fill(keep, 2 * MiB, 7, A);
  gt::gate_kernel<<<1, 1, 0, A>>>(gate.flag(), kGateTimeoutNs, gate.timeout_flag());
  gt::fill(ra, 16 * MiB, 11, A);
  gt::gate_kernel<<<1, 1, 0, C>>>(gate.flag(), kGateTimeoutNs, gate.timeout_flag());
  gt::fill(rc, 8 * MiB, 12, C);
  CHECK_OK(vpmm_pool_free(p, ra, A));
  CHECK_OK(vpmm_pool_free(p, rc, C));
  vpmm_stats before = gt::stats(p);
  double t0 = gt::now_ms();
  void* x = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, 40 * MiB, B, &x));  // 24 MiB harvested + 16 MiB created
  double dt = gt::now_ms() - t0;
  vpmm_stats after = gt::stats(p);
  std::printf("  malloc 40 MiB on B: %.3f ms; %s\n", dt, gt::layout(p).c_str());
  if (!gt::under_sanitizer()) CHECK_MSG(dt < 50.0, "malloc took %.1f ms: blocked?", dt);
  CHECK(!gate.timed_out() && gate.h[0] == 0);
  CHECK_EQ(after.n_stream_waits, before.n_stream_waits + 2);
  CHECK_EQ(after.n_grow, before.n_grow + 1);
  CHECK_EQ(after.mapped_bytes, before.mapped_bytes + 16 * MiB);
  CHECK(after.zombie_bytes >= 24 * MiB);
  gt::fill(x, 40 * MiB, 13, B);
  gt::verify(x, 40 * MiB, 13, &bad.d[0], B);
  gt::verify(keep, 2 * MiB, 7, &bad.d[1], A);
  gate.open();
  CUDA_OK(cudaDeviceSynchronize());
  CHECK_EQ(bad.h[0], 0ull);
  CHECK_EQ(bad.h[1], 0ull);
  CHECK(!gate.timed_out());
  CHECK_OK(vpmm_pool_free(p, x, B));
  CHECK_OK(vpmm_pool_free(p, keep, A));
  CHECK(gt::check_pool(p, "end"));
  CHECK_OK(vpmm_pool_destroy(p));
  cudaStreamDestroy(A);
  cudaStreamDestroy(B);
  cudaStreamDestroy(C);
}

GPU_TEST("phase 1b: completed region of another stream reused in place (event recorded while pending)") {
  // The event is recorded while A is still busy (stream_retire records the
  // lazy events of a stream now), so once A is idle the event has completed
  // and B must take the region as is: same VA, no wait, no remap.
  vpmm_pool* p = gt::make_pool({});
  CHECK(p != nullptr);
  if (!p) return;
  cudaStream_t A = gt::new_stream(), B = gt::new_stream();
  gt::Counters bad(1);
  const uint64_t n = 24 * MiB;
  void* r = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, n, A, &r));
  gt::sleep_kernel<<<1, 1, 0, A>>>(20ull * 1000 * 1000);
  gt::fill(r, n, 5, A);
  CHECK_OK(vpmm_pool_free(p, r, A));
  CHECK_OK(vpmm_pool_stream_retire(p, A));
  CUDA_OK(cudaStreamSynchronize(A));
  vpmm_stats before = gt::stats(p);
  void* x = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, n, B, &x));
  vpmm_stats after = gt::stats(p);
  CHECK_EQ(x, r);
  CHECK_EQ(after.n_cross_stream_reuse, before.n_cross_stream_reuse + 1);
  CHECK_EQ(after.n_stream_waits, before.n_stream_waits);
  CHECK_EQ(after.n_defrag, before.n_defrag);
  gt::verify(x, n, 5, &bad.d[0], B);  // A's data, stream ordered by the completed event
  CUDA_OK(cudaStreamSynchronize(B));
  CHECK_EQ(bad.h[0], 0ull);
  CHECK_OK(vpmm_pool_free(p, x, B));
  CHECK(gt::check_pool(p, "end"));
  CHECK_OK(vpmm_pool_destroy(p));
  cudaStreamDestroy(A);
  cudaStreamDestroy(B);
}

GPU_TEST("phase 1b: region freed on an idle stream is reused by another stream without a wait") {
  // The common pattern: A frees, A's work completes, later B allocates. The
  // pool records A's event lazily (at B's malloc); a region whose stream is
  // idle must still count as completed rather than go through a Phase 2
  // remap with a GPU wait. Alternates the direction for 20 rounds.
  vpmm_pool* p = gt::make_pool({});
  CHECK(p != nullptr);
  if (!p) return;
  cudaStream_t s[2] = {gt::new_stream(), gt::new_stream()};
  gt::Counters bad(1);
  const uint64_t n = 8 * MiB;
  void* cur = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, n, s[0], &cur));
  int hits = 0, rounds = 20;
  for (int i = 0; i < rounds; ++i) {
    cudaStream_t from = s[i % 2], to = s[(i + 1) % 2];
    gt::fill(cur, n, 100 + i, from);
    CHECK_OK(vpmm_pool_free(p, cur, from));
    CUDA_OK(cudaStreamSynchronize(from));
    vpmm_stats b = gt::stats(p);
    void* next = nullptr;
    CHECK_OK(vpmm_pool_malloc(p, n, to, &next));
    vpmm_stats a = gt::stats(p);
    bool hit = next == cur && a.n_cross_stream_reuse == b.n_cross_stream_reuse + 1 &&
               a.n_stream_waits == b.n_stream_waits;
    hits += hit;
    gt::verify(next, n, 100 + i, &bad.d[0], to);
    cur = next;
  }
  CUDA_OK(cudaDeviceSynchronize());
  vpmm_stats st = gt::stats(p);
  std::printf("  Phase 1b hits: %d of %d; n_stream_waits %llu, n_defrag %llu, n_events_recorded %llu\n",
              hits, rounds, (unsigned long long)st.n_stream_waits, (unsigned long long)st.n_defrag,
              (unsigned long long)st.n_events_recorded);
  CHECK_EQ(bad.h[0], 0ull);
  CHECK_MSG(hits == rounds,
            "only %d of %d mallocs reused an idle stream's region in place; the rest went "
            "through Phase 2 (remap + GPU wait)", hits, rounds);
  CHECK_OK(vpmm_pool_free(p, cur, s[rounds % 2]));
  CHECK(gt::check_pool(p, "end"));
  CHECK_OK(vpmm_pool_destroy(p));
  cudaStreamDestroy(s[0]);
  cudaStreamDestroy(s[1]);
}

GPU_TEST("4 threads x 4 streams: concurrent malloc / kernel / free, every byte verified") {
  vpmm_pool* p = gt::make_pool({});
  CHECK(p != nullptr);
  if (!p) return;
  constexpr int kThreads = 4;
  const int iters = gt::under_sanitizer() ? 150 : 600;
  gt::Counters bad(kThreads);
  std::atomic<int> api_errors{0};
  std::vector<std::thread> th;
  for (int t = 0; t < kThreads; ++t) {
    th.emplace_back([&, t] {
      cudaStream_t s = gt::new_stream();
      std::mt19937_64 rng(1234 + t);
      struct Live {
        void* p;
        uint64_t n;
        uint64_t seed;
      };
      std::vector<Live> live;
      for (int i = 0; i < iters; ++i) {
        uint64_t n;
        int kind = rng() % 4;
        if (kind == 0) n = 256 + rng() % (512 * 1024);           // small path
        else n = (64 << 10) + rng() % (24 * MiB);                 // page path
        n &= ~uint64_t(7);
        void* q = nullptr;
        if (vpmm_pool_malloc(p, n, s, &q) != VPMM_OK) {
          ++api_errors;
          std::printf("  thread %d: malloc(%llu) failed: %s\n", t, (unsigned long long)n, vpmm_last_error());
          continue;
        }
        uint64_t seed = (uint64_t(t) << 32) | uint64_t(i);
        gt::fill(q, n, seed, s);
        gt::verify(q, n, seed, &bad.d[t], s);
        live.push_back({q, n, seed});
        if (live.size() > 6) {
          Live old = live.front();
          live.erase(live.begin());
          gt::verify(old.p, old.n, old.seed, &bad.d[t], s);
          if (vpmm_pool_free(p, old.p, s) != VPMM_OK) ++api_errors;
        }
      }
      for (Live& l : live) {
        gt::verify(l.p, l.n, l.seed, &bad.d[t], s);
        if (vpmm_pool_free(p, l.p, s) != VPMM_OK) ++api_errors;
      }
      cudaStreamSynchronize(s);
      // The pool keeps this stream's free regions: retire it before destroying.
      if (vpmm_pool_stream_retire(p, s) != VPMM_OK) ++api_errors;
      cudaStreamDestroy(s);
    });
  }
  for (auto& t : th) t.join();
  CUDA_OK(cudaDeviceSynchronize());
  CHECK_EQ(api_errors.load(), 0);
  for (int t = 0; t < kThreads; ++t) CHECK_EQ(bad.h[t], 0ull);
  vpmm_stats st = gt::stats(p);
  std::printf("  n_malloc %llu, n_defrag %llu, n_grow %llu, n_stream_waits %llu, cross-stream reuse %llu, "
              "peak mapped %.0f MiB, peak live %.0f MiB\n",
              (unsigned long long)st.n_malloc, (unsigned long long)st.n_defrag,
              (unsigned long long)st.n_grow, (unsigned long long)st.n_stream_waits,
              (unsigned long long)st.n_cross_stream_reuse, st.peak_mapped_bytes / double(MiB),
              st.peak_live_bytes / double(MiB));
  CHECK_EQ(st.n_live, uint64_t(0));
  CHECK(gt::check_pool(p, "end"));
  CHECK_OK(vpmm_pool_destroy(p));
}

GPU_TEST_MAIN()
