// Probe (not part of the build): does the driver run per-handle VMM calls of
// one process concurrently? A defragmenting malloc that moves N page handles
// pays N x (cuMemMap + cuMemSetAccess) on its thread, and later N x
// cuMemUnmap; set-access is ~41 us a handle whatever its size. If calls on
// disjoint ranges overlap when made from several threads, the call could
// spread its handles over helper threads and wait a fraction of that.
//
// For N pages of 2 MiB (handles created once) mapped into one reserved range,
// median of REPS cycles, us:
//   map       N cuMemMap, on T threads (each a contiguous share)
//   access    cuMemSetAccess: one call over the range (T=0), or one per
//             handle on T threads
//   unmap     one cuMemUnmap per handle on T threads
// and the same cycle run by 4 independent callers at once (4 ranges), the
// multi-stream benchmark's shape: wall time of all four against one alone.
//   nvcc -O2 -std=c++17 bench/probes/parallel_access_probe.cu -lcuda -lpthread -o /tmp/pap && /tmp/pap
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <thread>
#include <vector>

#include <unistd.h>

#include "probe_util.hpp"

static CUcontext g_ctx;
static CUmemAccessDesc g_acc;
static size_t g_page;

// Runs f(i) for i in [0, n) on `threads` threads (0 or 1: the caller alone).
static void spread(int n, int threads, const std::function<void(int)>& f) {
  if (threads <= 1) {
    for (int i = 0; i < n; ++i) f(i);
    return;
  }
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t)
    ts.emplace_back([&, t] {
      cuCtxSetCurrent(g_ctx);
      for (int i = t * n / threads; i < (t + 1) * n / threads; ++i) f(i);
    });
  for (auto& th : ts) th.join();
}

struct Range {
  CUdeviceptr va = 0;
  std::vector<CUmemGenericAllocationHandle> hs;
};

struct Times {
  double map = 0, access = 0, unmap = 0;
};

static Times cycle(Range& r, int n, int threads, bool one_access_call) {
  Times t;
  double t0 = now_us();
  spread(n, threads, [&](int i) { CK(cuMemMap(r.va + i * g_page, g_page, 0, r.hs[i], 0)); });
  double t1 = now_us();
  if (one_access_call)
    CK(cuMemSetAccess(r.va, g_page * n, &g_acc, 1));
  else
    spread(n, threads, [&](int i) { CK(cuMemSetAccess(r.va + i * g_page, g_page, &g_acc, 1)); });
  double t2 = now_us();
  spread(n, threads, [&](int i) { CK(cuMemUnmap(r.va + i * g_page, g_page)); });
  double t3 = now_us();
  t.map = t1 - t0;
  t.access = t2 - t1;
  t.unmap = t3 - t2;
  return t;
}

static double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int main() {
  alarm(300);
  const ProbeDevice d = probe_device();
  g_ctx = d.ctx;
  g_page = d.page;
  g_acc = d.acc;
  CUmemAllocationProp prop = d.prop;

  const int kMax = 64, kCallers = 4, kReps = 15;
  std::vector<Range> ranges(kCallers);
  for (Range& r : ranges) {
    r.hs.resize(kMax);
    for (auto& h : r.hs) CK(cuMemCreate(&h, g_page, &prop, 0));
    CK(cuMemAddressReserve(&r.va, g_page * kMax, g_page, 0, 0));
  }
  for (int i = 0; i < 3; ++i) cycle(ranges[0], 16, 1, false);  // warm-up

  std::printf("one caller: medians of %d cycles, us (access T=0: one call over the range)\n", kReps);
  std::printf("%5s %3s %10s %10s %10s %10s %14s\n", "pages", "T", "map", "access", "unmap", "total",
              "access/handle");
  for (int n : {16, 64})
    for (int threads : {0, 1, 2, 4, 8}) {
      std::vector<double> m, a, u, tot;
      for (int rep = 0; rep < kReps; ++rep) {
        Times t = cycle(ranges[0], n, threads, threads == 0);
        m.push_back(t.map);
        a.push_back(t.access);
        u.push_back(t.unmap);
        tot.push_back(t.map + t.access + t.unmap);
      }
      std::printf("%5d %3d %10.1f %10.1f %10.1f %10.1f %14.2f\n", n, threads, median(m), median(a), median(u),
                  median(tot), median(a) / n);
      std::fflush(stdout);
    }

  std::printf("\n%d callers at once, 16 pages each, each on its own thread: wall us of all, medians of %d\n",
              kCallers, kReps);
  for (int helpers : {1, 4}) {
    std::vector<double> wall, alone;
    for (int rep = 0; rep < kReps; ++rep) {
      double t0 = now_us();
      cycle(ranges[0], 16, helpers, false);
      alone.push_back(now_us() - t0);
      std::atomic<int> ready{0};
      std::vector<std::thread> ts;
      double w0 = 0;
      for (int c = 0; c < kCallers; ++c)
        ts.emplace_back([&, c] {
          cuCtxSetCurrent(g_ctx);
          ++ready;
          while (ready.load() < kCallers) {
          }
          cycle(ranges[c], 16, helpers, false);
        });
      w0 = now_us();
      for (auto& th : ts) th.join();
      wall.push_back(now_us() - w0);
    }
    std::printf("helpers per caller %d: one caller alone %.1f us, %d callers at once %.1f us (%.2fx one)\n",
                helpers, median(alone), kCallers, median(wall), median(wall) / median(alone));
    std::fflush(stdout);
  }
  for (Range& r : ranges) {
    CK(cuMemAddressFree(r.va, g_page * kMax));
    for (auto& h : r.hs) CK(cuMemRelease(h));
  }
  std::printf("probe finished\n");
  return 0;
}
