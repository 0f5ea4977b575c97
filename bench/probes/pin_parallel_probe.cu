// Probe (not part of the build): does pinning backup buffers on several
// threads shorten a first pause? 16 GiB as N buffers, each mmap'ed
// (huge-page advised) and cuMemHostRegister'ed, on 1, 4 and 8 threads.
//   nvcc -O2 -std=c++17 bench/probes/pin_parallel_probe.cu -lcuda -o /tmp/pin && /tmp/pin
#include <cuda.h>
#include <sys/mman.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

static double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

int main() {
  cuInit(0);
  CUdevice dev;
  cuDeviceGet(&dev, 0);
  CUcontext ctx;
  cuDevicePrimaryCtxRetain(&ctx, dev);
  cuCtxSetCurrent(ctx);
  const uint64_t total = 16ull << 30;
  for (uint64_t size : {4ull << 20, 256ull << 20}) {
    const uint64_t n = total / size;
    for (int threads : {1, 4, 8, 16}) {
      std::vector<void*> p(n, nullptr);
      double t0 = now_ms();
      std::vector<std::thread> ts;
      for (int t = 0; t < threads; ++t)
        ts.emplace_back([&, t] {
          cuCtxSetCurrent(ctx);
          for (uint64_t i = t; i < n; i += threads) {
            p[i] = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            madvise(p[i], size, MADV_HUGEPAGE);
            if (cuMemHostRegister(p[i], size, CU_MEMHOSTREGISTER_PORTABLE) != CUDA_SUCCESS) std::abort();
          }
        });
      for (auto& t : ts) t.join();
      double t1 = now_ms();
      for (uint64_t i = 0; i < n; ++i) {
        cuMemHostUnregister(p[i]);
        munmap(p[i], size);
      }
      double t2 = now_ms();
      std::printf("%4llu MiB x %5llu, %2d threads: pin %.0f ms (%.1f GB/s), unpin %.0f ms\n",
                  (unsigned long long)(size >> 20), (unsigned long long)n, threads, t1 - t0,
                  total / (t1 - t0) / 1e6, t2 - t1);
    }
  }
  return 0;
}
