// Pause/resume throughput on one GPU, against the ceilings that matter:
//  1. with host backup: GB/s of pause (D2H) and resume (H2D) for 16 GiB,
//     against a plain pinned cudaMemcpyAsync measured in the same run;
//  2. without backup: pause and resume time of 16 GiB held as 64 x 256 MiB
//     and 4096 x 4 MiB, against one-handle-per-allocation driver calls
//     (unmap + release per handle, create + map + set-access per handle),
//     which is what torch_memory_saver does.
// Prints "PAUSE key value" lines (collected by scripts/gpu-run.sh).
// Medians of repeated cycles after a warm-up cycle (pinning happens once).
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

#include "vpmm.h"

namespace {

constexpr uint64_t MiB = 1ull << 20, GiB = 1ull << 30;

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
#define CK(x)                                                                   \
  do {                                                                          \
    auto e_ = (x);                                                              \
    if (e_ != 0) {                                                              \
      std::printf("FATAL %s:%d: %s -> %d (%s)\n", __FILE__, __LINE__, #x, (int)e_, \
                  vpmm_last_error());                                           \
      std::exit(1);                                                             \
    }                                                                           \
  } while (0)

// Pinned copy ceiling: one device buffer, one pinned buffer, 4 GiB.
void copy_limit(double* d2h, double* h2d) {
  const uint64_t n = 4 * GiB;
  void *dev = nullptr, *host = nullptr;
  CK(cudaMalloc(&dev, n));
  CK(cudaMallocHost(&host, n));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  std::vector<double> a, b;
  for (int i = 0; i < 4; ++i) {
    double t0 = now_ms();
    CK(cudaMemcpyAsync(host, dev, n, cudaMemcpyDeviceToHost, s));
    CK(cudaStreamSynchronize(s));
    double t1 = now_ms();
    CK(cudaMemcpyAsync(dev, host, n, cudaMemcpyHostToDevice, s));
    CK(cudaStreamSynchronize(s));
    double t2 = now_ms();
    if (i) {
      a.push_back(t1 - t0);
      b.push_back(t2 - t1);
    }
  }
  *d2h = n / median(a) / 1e6;
  *h2d = n / median(b) / 1e6;
  cudaFreeHost(host);
  cudaFree(dev);
  cudaStreamDestroy(s);
}

vpmm_pool* cuda_pool() {
  vpmm_config c;
  vpmm_config_init(&c);
  c.backend = VPMM_BACKEND_CUDA;
  vpmm_pool* p = nullptr;
  CK(vpmm_pool_create(&c, &p));
  return p;
}

std::vector<void*> tagged_allocs(vpmm_pool* p, uint64_t n, uint64_t size, const char* tag,
                                 uint32_t flags) {
  std::vector<void*> v;
  vpmm_alloc_attrs a;
  std::memset(&a, 0, sizeof a);
  a.struct_size = sizeof a;
  a.tag = tag;
  a.flags = flags;
  for (uint64_t i = 0; i < n; ++i) {
    void* x = nullptr;
    CK(vpmm_pool_malloc_ex(p, size, nullptr, &a, &x));
    CK(cudaMemsetAsync(x, static_cast<int>(i & 0xff), size, nullptr));
    v.push_back(x);
  }
  CK(cudaDeviceSynchronize());
  return v;
}

struct Cycle {
  double first_pause = 0, first_resume = 0, pause = 0, resume = 0;
};

Cycle pause_cycles(vpmm_pool* p, const char* tag, int cycles) {
  Cycle c;
  std::vector<double> ps, rs;
  for (int i = 0; i < cycles + 1; ++i) {
    double t0 = now_ms();
    CK(vpmm_pool_pause(p, tag));
    double t1 = now_ms();
    CK(vpmm_pool_resume(p, tag));
    double t2 = now_ms();
    if (i == 0) {
      c.first_pause = t1 - t0;
      c.first_resume = t2 - t1;
    } else {
      ps.push_back(t1 - t0);
      rs.push_back(t2 - t1);
    }
  }
  c.pause = median(ps);
  c.resume = median(rs);
  return c;
}

// One handle per allocation with the driver API, as torch_memory_saver does.
Cycle driver_cycles(uint64_t n, uint64_t size, int cycles) {
  CUdevice dev;
  CK(cuDeviceGet(&dev, 0));
  CUmemAllocationProp prop;
  std::memset(&prop, 0, sizeof prop);
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  CUmemAccessDesc acc;
  std::memset(&acc, 0, sizeof acc);
  acc.location = prop.location;
  acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  std::vector<CUdeviceptr> va(n);
  std::vector<CUmemGenericAllocationHandle> h(n);
  for (uint64_t i = 0; i < n; ++i) {
    CK(cuMemAddressReserve(&va[i], size, 0, 0, 0));
    CK(cuMemCreate(&h[i], size, &prop, 0));
    CK(cuMemMap(va[i], size, 0, h[i], 0));
    CK(cuMemSetAccess(va[i], size, &acc, 1));
  }
  Cycle c;
  std::vector<double> ps, rs;
  for (int k = 0; k < cycles + 1; ++k) {
    double t0 = now_ms();
    for (uint64_t i = 0; i < n; ++i) {
      CK(cuMemUnmap(va[i], size));
      CK(cuMemRelease(h[i]));
    }
    double t1 = now_ms();
    for (uint64_t i = 0; i < n; ++i) {
      CK(cuMemCreate(&h[i], size, &prop, 0));
      CK(cuMemMap(va[i], size, 0, h[i], 0));
      CK(cuMemSetAccess(va[i], size, &acc, 1));
    }
    double t2 = now_ms();
    if (k == 0) continue;
    ps.push_back(t1 - t0);
    rs.push_back(t2 - t1);
  }
  c.pause = median(ps);
  c.resume = median(rs);
  for (uint64_t i = 0; i < n; ++i) {
    cuMemUnmap(va[i], size);
    cuMemRelease(h[i]);
    cuMemAddressFree(va[i], size);
  }
  return c;
}

}  // namespace

int main() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    std::printf("SKIP: no CUDA device\n");
    return 77;
  }
  CK(cudaFree(nullptr));
  double lim_d2h = 0, lim_h2d = 0;
  copy_limit(&lim_d2h, &lim_h2d);
  std::printf("PAUSE limit_d2h_gbps %.2f\nPAUSE limit_h2d_gbps %.2f\n", lim_d2h, lim_h2d);

  const int kCycles = 3;
  // 1. With backup, 16 GiB in 64 x 256 MiB.
  {
    vpmm_pool* p = cuda_pool();
    auto v = tagged_allocs(p, 64, 256 * MiB, "b", VPMM_ALLOC_HOST_BACKUP);
    Cycle c = pause_cycles(p, "b", kCycles);
    const double bytes = 16.0 * GiB;
    double d2h = bytes / c.pause / 1e6, h2d = bytes / c.resume / 1e6;
    std::printf("PAUSE backup_pause_gbps %.2f\nPAUSE backup_resume_gbps %.2f\n", d2h, h2d);
    std::printf("PAUSE backup_pause_pct_of_limit %.1f\nPAUSE backup_resume_pct_of_limit %.1f\n",
                100 * d2h / lim_d2h, 100 * h2d / lim_h2d);
    std::printf("PAUSE backup_first_pause_ms %.1f\nPAUSE backup_first_resume_ms %.1f\n",
                c.first_pause, c.first_resume);
    // Bytes survived every cycle.
    std::vector<unsigned char> probe(4096);
    bool ok = true;
    for (size_t i = 0; i < v.size(); ++i) {
      CK(cudaMemcpy(probe.data(), static_cast<char*>(v[i]) + 256 * MiB - 4096, 4096, cudaMemcpyDeviceToHost));
      ok &= probe[0] == (i & 0xff) && probe[4095] == (i & 0xff);
    }
    std::printf("PAUSE backup_data_intact %d\n", ok ? 1 : 0);
    vpmm_pool_destroy(p);
  }
  // 2. Without backup against one handle per allocation.
  struct Shape {
    uint64_t n, size;
    const char* name;
    double target;
  } shapes[] = {{64, 256 * MiB, "64x256MiB", 1.25}, {4096, 4 * MiB, "4096x4MiB", 2.0}};
  for (const Shape& sh : shapes) {
    vpmm_pool* p = cuda_pool();
    auto v = tagged_allocs(p, sh.n, sh.size, "n", 0);
    Cycle c = pause_cycles(p, "n", kCycles);
    vpmm_pool_destroy(p);
    Cycle d = driver_cycles(sh.n, sh.size, kCycles);
    std::printf("PAUSE %s_vpmm_pause_ms %.2f\nPAUSE %s_vpmm_resume_ms %.2f\n", sh.name, c.pause,
                sh.name, c.resume);
    std::printf("PAUSE %s_driver_pause_ms %.2f\nPAUSE %s_driver_resume_ms %.2f\n", sh.name,
                d.pause, sh.name, d.resume);
    double ratio = (c.pause + c.resume) / (d.pause + d.resume);
    std::printf("PAUSE %s_ratio %.3f\nPAUSE %s_target %.2f\n", sh.name, ratio, sh.name,
                sh.target);
  }
  std::printf("bench_pause_resume: done\n");
  return 0;
}
