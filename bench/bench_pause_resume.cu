// Pause/resume throughput on one GPU, against the ceilings that matter:
//  1. with host backup: GB/s of pause (D2H) and resume (H2D) for 16 GiB held
//     as 64 x 256 MiB and as 4096 x 4 MiB, against a plain pinned
//     cudaMemcpyAsync measured in the same run, and against one handle per
//     allocation with a blocking copy each (torch_memory_saver's way);
//  2. without backup: pause and resume time of 16 GiB held as 64 x 256 MiB
//     and 4096 x 4 MiB, against one-handle-per-allocation driver calls
//     (unmap + release per handle, create + map + set-access per handle),
//     which is what torch_memory_saver does.
// Prints "PAUSE key value" lines (collected by scripts/gpu-run.sh).
// Medians of 5 cycles after a warm-up cycle (pinning happens once).
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
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

// n allocations of `size`, each one VA reservation and one handle, as
// torch_memory_saver makes them; release(i) pauses one, restore(i) resumes it.
class PerAllocHandles {
 public:
  PerAllocHandles(uint64_t n, uint64_t size) : size_(size), va_(n), h_(n) {
    std::memset(&prop_, 0, sizeof prop_);
    prop_.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop_.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop_.location.id = 0;
    std::memset(&acc_, 0, sizeof acc_);
    acc_.location = prop_.location;
    acc_.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    for (uint64_t i = 0; i < n; ++i) {
      CK(cuMemAddressReserve(&va_[i], size, 0, 0, 0));
      restore(i);
    }
  }
  ~PerAllocHandles() {
    for (uint64_t i = 0; i < va_.size(); ++i) {
      release(i);
      cuMemAddressFree(va_[i], size_);
    }
  }
  void release(uint64_t i) {
    CK(cuMemUnmap(va_[i], size_));
    CK(cuMemRelease(h_[i]));
  }
  void restore(uint64_t i) {
    CK(cuMemCreate(&h_[i], size_, &prop_, 0));
    CK(cuMemMap(va_[i], size_, 0, h_[i], 0));
    CK(cuMemSetAccess(va_[i], size_, &acc_, 1));
  }
  void* ptr(uint64_t i) const { return reinterpret_cast<void*>(va_[i]); }

 private:
  uint64_t size_;
  std::vector<CUdeviceptr> va_;
  std::vector<CUmemGenericAllocationHandle> h_;
  CUmemAllocationProp prop_;
  CUmemAccessDesc acc_;
};

// Medians of `cycles` pause/resume cycles after a warm-up one (the first
// cycle pins the backup buffers).
template <typename Pause, typename Resume>
Cycle timed_cycles(int cycles, Pause pause, Resume resume) {
  Cycle c;
  std::vector<double> ps, rs;
  for (int k = 0; k < cycles + 1; ++k) {
    double t0 = now_ms();
    pause();
    double t1 = now_ms();
    resume();
    double t2 = now_ms();
    if (k == 0) {
      c.first_pause = t1 - t0;
      c.first_resume = t2 - t1;
      continue;
    }
    ps.push_back(t1 - t0);
    rs.push_back(t2 - t1);
  }
  c.pause = median(ps);
  c.resume = median(rs);
  return c;
}

Cycle pause_cycles(vpmm_pool* p, const char* tag, int cycles) {
  return timed_cycles(cycles, [&] { CK(vpmm_pool_pause(p, tag)); }, [&] { CK(vpmm_pool_resume(p, tag)); });
}

// One handle per allocation with the driver API, as torch_memory_saver does.
Cycle driver_cycles(uint64_t n, uint64_t size, int cycles) {
  PerAllocHandles a(n, size);
  return timed_cycles(
      cycles, [&] { for (uint64_t i = 0; i < n; ++i) a.release(i); },
      [&] { for (uint64_t i = 0; i < n; ++i) a.restore(i); });
}

// The same with a host backup, as torch_memory_saver does it (a blocking
// cudaMemcpy per allocation before its unmap + release; on resume after its
// create + map + set-access), but with the pinned buffers registered once up
// front (torch_memory_saver pins at every pause, which this leaves out in its
// favour).
Cycle driver_backup_cycles(uint64_t n, uint64_t size, int cycles) {
  char* host = static_cast<char*>(std::aligned_alloc(2 * MiB, n * size));
  CK(cudaHostRegister(host, n * size, cudaHostRegisterPortable));
  Cycle c;
  {
    PerAllocHandles a(n, size);
    c = timed_cycles(
        cycles,
        [&] {
          for (uint64_t i = 0; i < n; ++i) {
            CK(cudaMemcpy(host + i * size, a.ptr(i), size, cudaMemcpyDeviceToHost));
            a.release(i);
          }
        },
        [&] {
          for (uint64_t i = 0; i < n; ++i) {
            a.restore(i);
            CK(cudaMemcpy(a.ptr(i), host + i * size, size, cudaMemcpyHostToDevice));
          }
        });
  }
  cudaHostUnregister(host);
  std::free(host);
  return c;
}

// Pinning cost of one 4 GiB buffer both ways (what a first pause waits for).
void pin_cost(double* host_alloc_ms, double* register_ms) {
  const uint64_t n = 4 * GiB;
  double t0 = now_ms();
  void* a = nullptr;
  CK(cudaHostAlloc(&a, n, cudaHostAllocPortable));
  double t1 = now_ms();
  CK(cudaFreeHost(a));
  void* b = std::aligned_alloc(2 * MiB, n);
  double t2 = now_ms();
  CK(cudaHostRegister(b, n, cudaHostRegisterPortable));
  double t3 = now_ms();
  CK(cudaHostUnregister(b));
  std::free(b);
  *host_alloc_ms = t1 - t0;
  *register_ms = t3 - t2;
}

struct Shape {
  uint64_t n, size;
  const char* name;
  double target;  // without backup: vpmm / one-handle-per-allocation
};
const Shape kShapes[] = {{64, 256 * MiB, "64x256MiB", 1.25}, {4096, 4 * MiB, "4096x4MiB", 2.0}};

// Bytes survived every cycle: each allocation's last 4 KiB holds its index.
bool data_intact(const std::vector<void*>& v, uint64_t size) {
  std::vector<unsigned char> probe(4096);
  bool ok = true;
  for (size_t i = 0; i < v.size(); ++i) {
    CK(cudaMemcpy(probe.data(), static_cast<char*>(v[i]) + size - 4096, 4096, cudaMemcpyDeviceToHost));
    ok &= probe[0] == (i & 0xff) && probe[4095] == (i & 0xff);
  }
  return ok;
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
  double pin_alloc = 0, pin_register = 0;
  pin_cost(&pin_alloc, &pin_register);
  std::printf("PAUSE pin_4GiB_hostalloc_ms %.1f\nPAUSE pin_4GiB_register_ms %.1f\n", pin_alloc,
              pin_register);

  const int kCycles = 5;
  const double bytes = 16.0 * GiB;
  // 1. With backup, 16 GiB in each shape, against the pinned copy limit and
  //    against one handle per allocation with blocking copies.
  for (const Shape& sh : kShapes) {
    vpmm_pool* p = cuda_pool();
    auto v = tagged_allocs(p, sh.n, sh.size, "b", VPMM_ALLOC_HOST_BACKUP);
    Cycle c = pause_cycles(p, "b", kCycles);
    bool ok = data_intact(v, sh.size);
    vpmm_pool_destroy(p);
    Cycle d = driver_backup_cycles(sh.n, sh.size, kCycles);
    double d2h = bytes / c.pause / 1e6, h2d = bytes / c.resume / 1e6;
    std::printf("PAUSE %s_backup_pause_gbps %.2f\nPAUSE %s_backup_resume_gbps %.2f\n", sh.name, d2h,
                sh.name, h2d);
    std::printf("PAUSE %s_backup_pause_pct_of_limit %.1f\nPAUSE %s_backup_resume_pct_of_limit %.1f\n",
                sh.name, 100 * d2h / lim_d2h, sh.name, 100 * h2d / lim_h2d);
    std::printf("PAUSE %s_backup_first_pause_ms %.1f\nPAUSE %s_backup_first_resume_ms %.1f\n",
                sh.name, c.first_pause, sh.name, c.first_resume);
    std::printf("PAUSE %s_backup_driver_pause_gbps %.2f\nPAUSE %s_backup_driver_resume_gbps %.2f\n",
                sh.name, bytes / d.pause / 1e6, sh.name, bytes / d.resume / 1e6);
    std::printf("PAUSE %s_backup_data_intact %d\n", sh.name, ok ? 1 : 0);
  }
  // 2. Without backup against one handle per allocation.
  for (const Shape& sh : kShapes) {
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
