// Probe (not part of the build): can a defragmenting malloc return before its
// driver calls? Today the malloc that remaps N scattered pages into a hole
// pays N x (cuMemMap + cuMemSetAccess), ~43 us a page on an H100, on the
// caller's CPU thread: the calls over 1 ms of the multi-stream churn. Pool
// memory is stream-ordered (used on the allocating stream, or after an event
// of it), as cudaMallocAsync's is, so the mapping only has to exist before the
// stream's next work *runs*, not before the call returns.
//
// The primitive measured: the caller enqueues a GPU-side wait on its stream
// and hands the map + set-access to a worker thread, which releases the
// wait when done. Two ways to wait:
//   value   cuStreamWaitValue32 on a flag in pinned, device-mapped host memory;
//           the worker stores the flag after its driver calls
//   hostfn  cuLaunchHostFunc whose function blocks until the worker is done
//           (CUDA forbids API calls inside it; the worker makes them)
// against the synchronous way (sync: the caller maps). For N pages of 2 MiB it
// reports the CPU time of the call, the time until a memset enqueued after it
// completed, and whether the memset's bytes arrived (data check), once on an
// idle stream and once behind a 2 ms kernel (the CPU running ahead of the GPU,
// as a training loop does).
//   nvcc -O2 -std=c++17 bench/probes/async_map_probe.cu -lcuda -o /tmp/amp && /tmp/amp
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include <unistd.h>

#include "probe_util.hpp"

__global__ void fill(uint32_t* p, size_t n, uint32_t v, uint32_t first) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    p[i] = i == 0 ? first : v;
}

__global__ void spin(long long cycles) {
  long long t0 = clock64();
  while (clock64() - t0 < cycles) {
  }
}

struct Worker {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::function<void()>> jobs;
  bool stop = false;
  std::thread th;
  CUcontext ctx;
  explicit Worker(CUcontext c) : ctx(c) {
    th = std::thread([this] {
      cuCtxSetCurrent(ctx);
      for (;;) {
        std::function<void()> j;
        {
          std::unique_lock<std::mutex> l(mu);
          cv.wait(l, [&] { return stop || !jobs.empty(); });
          if (jobs.empty()) return;
          j = std::move(jobs.front());
          jobs.pop_front();
        }
        j();
      }
    });
  }
  void post(std::function<void()> j) {
    {
      std::lock_guard<std::mutex> l(mu);
      jobs.push_back(std::move(j));
    }
    cv.notify_one();
  }
  ~Worker() {
    {
      std::lock_guard<std::mutex> l(mu);
      stop = true;
    }
    cv.notify_one();
    th.join();
  }
};

struct HostWait {
  std::atomic<int> done{0};
};
static void CUDA_CB block_until_done(void* p) {
  auto* w = static_cast<HostWait*>(p);
  while (!w->done.load(std::memory_order_acquire)) std::this_thread::yield();
}

int main() {
  alarm(240);  // a wait that is never released hangs the stream: end the probe instead
  const ProbeDevice d = probe_device();
  const CUdevice dev = d.dev;
  const CUcontext ctx = d.ctx;
  CUmemAllocationProp prop = d.prop;
  const size_t page = d.page;
  const CUmemAccessDesc acc = d.acc;
  cudaSetDevice(0);
  int wait_nor = -1, clock_khz = 0;
  cuDeviceGetAttribute(&wait_nor, CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR, dev);
  cuDeviceGetAttribute(&clock_khz, CU_DEVICE_ATTRIBUTE_CLOCK_RATE, dev);
  std::printf("device attribute CAN_USE_STREAM_WAIT_VALUE_NOR=%d, clock %d kHz\n", wait_nor, clock_khz);

  const int kMaxPages = 16;
  std::vector<CUmemGenericAllocationHandle> hs(kMaxPages);
  for (auto& h : hs) CK(cuMemCreate(&h, page, &prop, 0));
  CUdeviceptr va = 0;
  CK(cuMemAddressReserve(&va, page * kMaxPages, page, 0, 0));

  uint32_t* flag_host = nullptr;
  CK(cuMemHostAlloc(reinterpret_cast<void**>(&flag_host), 4096, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE));
  CUdeviceptr flag_dev = 0;
  CK(cuMemHostGetDevicePointer(&flag_dev, flag_host, 0));
  *flag_host = 0;
  uint32_t gen = 0;

  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  Worker worker(ctx);
  std::vector<uint32_t> back(kMaxPages);

  auto map_all = [&](int n) {
    for (int i = 0; i < n; ++i) CK(cuMemMap(va + i * page, page, 0, hs[i], 0));
    CK(cuMemSetAccess(va, page * n, &acc, 1));
  };
  auto unmap_all = [&](int n) { CK(cuMemUnmap(va, page * n)); };

  const long long busy_cycles = (long long)clock_khz * 2;  // ~2 ms
  // What the call leaves to the worker, and how the stream's work reaches
  // the memory: the first run of this probe found that cuMemsetD32Async on
  // a VA not yet mapped fails at once ("invalid argument": the driver looks
  // the pointer up when the work is enqueued), so a fully deferred mapping
  // is tried with a kernel (which it does not check), and the other modes
  // map in the call (1.6 us a page) and defer only cuMemSetAccess (~41 us).
  struct Mode {
    const char* name;
    int wait;          // 0 none (synchronous), 1 wait-value, 2 host function
    bool defer_map;    // the worker maps too
    bool kernel_fill;  // fill with a kernel instead of memset + copy
  };
  const Mode modes[] = {{"sync", 0, false, false},
                        {"value_map+access_kernel", 1, true, true},
                        {"value_access_memset", 1, false, false},
                        {"hostfn_access_memset", 2, false, false}};
  uint32_t* staged = nullptr;
  CK(cuMemHostAlloc(reinterpret_cast<void**>(&staged), 4096, CU_MEMHOSTALLOC_PORTABLE));
  std::printf("%-24s %-5s %5s %10s %10s %12s %s\n", "mode", "gpu", "pages", "call_us", "done_us",
              "call_max_us", "data");
  for (int busy = 0; busy < 2; ++busy)
    for (int n : {1, 4, 16})
      for (const Mode& m : modes) {
        std::vector<double> call, done;
        bool data_ok = true;
        const char* err = "";
        const int reps = 50;
        for (int r = 0; r < reps + 2; ++r) {
          cudaStreamSynchronize(s);
          if (busy) spin<<<1, 1, 0, s>>>(busy_cycles);
          HostWait hw;
          const uint32_t pattern = 0x5a000000u + r * 64 + n;
          staged[0] = pattern ^ 1u;
          auto work = [&, n, m] {
            if (m.defer_map)
              map_all(n);
            else
              CK(cuMemSetAccess(va, page * n, &acc, 1));
          };
          double t0 = now_us();
          if (m.wait == 0) {
            map_all(n);
          } else {
            if (!m.defer_map)
              for (int i = 0; i < n; ++i) CK(cuMemMap(va + i * page, page, 0, hs[i], 0));
            if (m.wait == 1) {
              const uint32_t g = ++gen;
              CK(cuStreamWaitValue32(s, flag_dev, g, CU_STREAM_WAIT_VALUE_GEQ));
              worker.post([&, work, g] {
                work();
                __atomic_store_n(flag_host, g, __ATOMIC_RELEASE);
              });
            } else {
              CK(cuLaunchHostFunc(s, block_until_done, &hw));
              worker.post([&, work] {
                work();
                hw.done.store(1, std::memory_order_release);
              });
            }
          }
          double t1 = now_us();
          if (m.kernel_fill) {
            fill<<<n * 64, 256, 0, s>>>(reinterpret_cast<uint32_t*>(va), page * n / 4, pattern, pattern ^ 1u);
          } else {
            CUresult e1 = cuMemsetD32Async(va, pattern, page * n / 4, s);
            CUresult e2 = cuMemcpyHtoDAsync(va, staged, 4, s);
            if (e1 != CUDA_SUCCESS || e2 != CUDA_SUCCESS) {
              err = e1 != CUDA_SUCCESS ? " memset refused at enqueue" : " copy refused at enqueue";
              data_ok = false;
            }
          }
          cudaError_t ce = cudaStreamSynchronize(s);
          double t2 = now_us();
          if (ce != cudaSuccess) {
            std::printf("stream error: %s\n", cudaGetErrorString(ce));
            return 1;
          }
          uint32_t first = 0;
          CK(cuMemcpyDtoH(&first, va, 4));
          for (int i = 0; i < n; ++i) CK(cuMemcpyDtoH(&back[i], va + i * page + page - 4, 4));
          data_ok = data_ok && first == (pattern ^ 1u);
          for (int i = 0; i < n; ++i) data_ok = data_ok && back[i] == pattern;
          unmap_all(n);
          if (r >= 2) {
            call.push_back(t1 - t0);
            done.push_back(t2 - t0);
          }
        }
        std::sort(call.begin(), call.end());
        std::sort(done.begin(), done.end());
        std::printf("%-24s %-5s %5d %10.1f %10.1f %12.1f %s%s\n", m.name, busy ? "busy" : "idle", n,
                    call[call.size() / 2], done[done.size() / 2], call.back(), data_ok ? "ok" : "WRONG", err);
        std::fflush(stdout);
      }
  CK(cuMemFreeHost(staged));
  cudaStreamDestroy(s);
  CK(cuMemAddressFree(va, page * kMaxPages));
  for (auto& h : hs) CK(cuMemRelease(h));
  CK(cuMemFreeHost(flag_host));
  std::printf("probe finished\n");
  return 0;
}
