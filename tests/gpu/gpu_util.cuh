// Shared helpers of the GPU test suite (tests/gpu/*.cu): the skip protocol
// over the shared harness (tests/unit/check.hpp), CUDA-backend pools, the
// region layout (the library's own, vpmm_pool_layout), and the kernels that
// write and verify patterns through pool memory.
//
// Conventions every GPU test follows:
//  - No usable CUDA device (no driver, no GPU, or a libvpmm built without the
//    CUDA backend): print "SKIP: no CUDA device (...)" and exit 77, which meson
//    counts as SKIP, never as a pass.
//  - Data is written and read by kernels only (the host never touches pool
//    memory), so every check goes through the real GPU mappings.
//  - A CUDA runtime error is a failure of the test that saw it; a sticky one
//    (illegal address: memory unmapped under a running kernel) ends the
//    program, since nothing after it can run.
//  - Long-running kernels spin on a flag in mapped host memory that the CPU
//    sets, bounded by %globaltimer, so a test never deadlocks even when the
//    library gets it wrong.
//  - VPMM_GPU_SANITIZER=1 (set by scripts/gpu-run.sh under compute-sanitizer)
//    relaxes wall-clock assertions, which the tool's instrumentation skews.
#pragma once

#include <cuda_runtime.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "../unit/check.hpp"
#include "../unit/pool_inspect.hpp"
#include "vpmm.h"

namespace gt {

// Statistics, the region dump and the layout, as the unit tests read them.
using vt::layout;
using vt::regions;
using vt::stats;

// ---------------------------------------------------------------------------
// Harness: tests/unit/check.hpp (CHECK, CHECK_MSG, CHECK_EQ, CHECK_OK, the
// "N passed, N failed" line), plus what only a GPU needs: the skip protocol
// before the first case, a device sync after each case, CUDA_OK.
// ---------------------------------------------------------------------------
#define GPU_TEST(name) TEST(name)

inline void die_if_sticky(cudaError_t e) {
  if (e == cudaErrorIllegalAddress || e == cudaErrorLaunchFailure ||
      e == cudaErrorIllegalInstruction || e == cudaErrorMisalignedAddress ||
      e == cudaErrorHardwareStackError || e == cudaErrorAssert) {
    std::printf("FATAL: sticky CUDA error %s: the context is unusable; stopping.\n",
                cudaGetErrorName(e));
    std::printf("0 passed, 1 failed\n");
    std::fflush(stdout);
    std::_Exit(1);
  }
}

// CUDA runtime call that must succeed. A sticky error ends the program.
#define CUDA_OK(expr)                                                               \
  do {                                                                              \
    cudaError_t gt_e_ = (expr);                                                     \
    if (gt_e_ != cudaSuccess) {                                                     \
      vt::report_fail(__FILE__, __LINE__, #expr " == cudaSuccess");                 \
      std::printf("       got %s: %s\n", cudaGetErrorName(gt_e_), cudaGetErrorString(gt_e_)); \
      gt::die_if_sticky(gt_e_);                                                     \
    }                                                                               \
  } while (0)

inline bool under_sanitizer() {
  const char* v = std::getenv("VPMM_GPU_SANITIZER");
  return v && *v && *v != '0';
}

// Exits 77 when no CUDA device is usable. Called first by every test program.
inline void require_gpu() {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n < 1) {
    std::printf("SKIP: no CUDA device (cudaGetDeviceCount: %s, count %d)\n",
                e == cudaSuccess ? "ok" : cudaGetErrorName(e), n);
    std::fflush(stdout);
    std::exit(77);
  }
  cudaDeviceProp p;
  if (cudaGetDeviceProperties(&p, 0) == cudaSuccess)
    std::printf("device 0: %s, sm_%d%d, %.1f GiB\n", p.name, p.major, p.minor,
                p.totalGlobalMem / double(1ull << 30));
  // A probe pool: a libvpmm without the CUDA backend (or a device without VMM
  // support) answers UNSUPPORTED; that is a skip too, not a failure.
  vpmm_config c;
  vpmm_config_init(&c);
  c.backend = VPMM_BACKEND_CUDA;
  vpmm_pool* pool = nullptr;
  vpmm_status st = vpmm_pool_create(&c, &pool);
  if (st == VPMM_ERR_UNSUPPORTED) {
    std::printf("SKIP: no CUDA device usable by libvpmm (%s)\n", vpmm_last_error());
    std::fflush(stdout);
    std::exit(77);
  }
  if (st != VPMM_OK) {
    std::printf("FATAL: vpmm_pool_create(CUDA) failed: %s: %s\n", vpmm_status_string(st),
                vpmm_last_error());
    std::exit(1);
  }
  vpmm_pool_destroy(pool);
}

// Every failure also shows the library's last error, when there is one.
inline void print_last_error() {
  const char* le = vpmm_last_error();
  if (le && *le) std::printf("       vpmm_last_error: %s\n", le);
}

// After each case: the device must be healthy (an asynchronous kernel error
// fails the case that launched it).
inline void sync_after_case() {
  cudaError_t e = cudaDeviceSynchronize();
  if (e != cudaSuccess) {
    vt::report_fail(__FILE__, __LINE__, "cudaDeviceSynchronize() after the case");
    std::printf("       got %s\n", cudaGetErrorName(e));
    die_if_sticky(e);
  }
}

inline int run_all(int argc, char** argv) {
  vt::fail_hook() = print_last_error;
  vt::RunOptions o;
  o.before_all = require_gpu;
  o.after_case = sync_after_case;
  o.banner = true;
  o.timing = true;
  return vt::run_all(argc, argv, o);
}

#define GPU_TEST_MAIN() \
  int main(int argc, char** argv) { return gt::run_all(argc, argv); }

// ---------------------------------------------------------------------------
// Pools
// ---------------------------------------------------------------------------
constexpr uint64_t MiB = 1ull << 20;
constexpr uint64_t GiB = 1ull << 30;

struct PoolSpec {
  uint64_t page = 0;        // 0 = backend default (2 MiB)
  uint64_t va_size = 0;     // 0 = backend default (8 TiB)
  uint64_t initial_pages = 0;
  uint64_t max_handle = 0;
  uint64_t small_size = 0;
  uint64_t view_min_size = 0;  // 0 = the default
};

inline vpmm_pool* make_pool(const PoolSpec& s) {
  vpmm_config c;
  vpmm_config_init(&c);
  c.backend = VPMM_BACKEND_CUDA;
  c.device = 0;
  c.page_size = s.page;
  c.va_size = s.va_size;
  c.initial_pages = s.initial_pages;
  c.max_handle_size = s.max_handle;
  c.small_size = s.small_size;
  if (s.view_min_size) c.view_min_size = s.view_min_size;
  vpmm_pool* p = nullptr;
  vpmm_status st = vpmm_pool_create(&c, &p);
  if (st != VPMM_OK) {
    std::printf("  vpmm_pool_create failed: %s: %s\n", vpmm_status_string(st), vpmm_last_error());
    return nullptr;
  }
  return p;
}

inline const vpmm_region_info* find_region(const std::vector<vpmm_region_info>& rs, const void* ptr) {
  for (const vpmm_region_info& r : rs)
    if (r.va == reinterpret_cast<uint64_t>(ptr)) return &r;
  return nullptr;
}

inline uint64_t chunk_offset(vpmm_pool* p, const void* ptr) {
  auto rs = regions(p);
  const vpmm_region_info* r = find_region(rs, ptr);
  return r ? r->chunk_offset : UINT64_MAX;
}

inline std::string text_dump(vpmm_pool* p) {
  size_t need = 0;
  vpmm_pool_dump_text(p, nullptr, 0, &need);
  std::string s(need + 1, '\0');
  vpmm_pool_dump_text(p, &s[0], s.size(), &need);
  s.resize(std::strlen(s.c_str()));
  return s;
}

inline bool check_pool(vpmm_pool* p, const char* where) {
  vpmm_status st = vpmm_pool_check(p);
  if (st != VPMM_OK) {
    std::printf("  vpmm_pool_check (%s): %s: %s\n", where, vpmm_status_string(st), vpmm_last_error());
    return false;
  }
  return true;
}

inline double now_ms() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// ---------------------------------------------------------------------------
// Kernels
// ---------------------------------------------------------------------------
__host__ __device__ inline uint64_t pattern(uint64_t seed, uint64_t i) {
  return (seed * 0x9E3779B97F4A7C15ull) ^ (i * 0xD1B54A32D192ED03ull) ^ i;
}
__host__ __device__ inline uint8_t byte_pattern(uint64_t seed, uint64_t i) {
  return static_cast<uint8_t>((seed * 131u + i * 7u + (i >> 8)) & 0xff);
}

__device__ inline uint64_t globaltimer_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Writes pattern(seed, i) into every 8-byte word of [p, p + words).
__global__ void fill_kernel(uint64_t* p, uint64_t words, uint64_t seed) {
  for (uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; i < words;
       i += uint64_t(gridDim.x) * blockDim.x)
    p[i] = pattern(seed, i);
}

// Counts words that differ from pattern(seed, i) into *bad.
__global__ void verify_kernel(const uint64_t* p, uint64_t words, uint64_t seed,
                              unsigned long long* bad) {
  unsigned long long local = 0;
  for (uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; i < words;
       i += uint64_t(gridDim.x) * blockDim.x)
    if (p[i] != pattern(seed, i)) ++local;
  if (local) atomicAdd(bad, local);
}

__global__ void fill_bytes_kernel(uint8_t* p, uint64_t n, uint64_t seed) {
  for (uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; i < n;
       i += uint64_t(gridDim.x) * blockDim.x)
    p[i] = byte_pattern(seed, i);
}

__global__ void verify_bytes_kernel(const uint8_t* p, uint64_t n, uint64_t seed,
                                    unsigned long long* bad) {
  unsigned long long local = 0;
  for (uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; i < n;
       i += uint64_t(gridDim.x) * blockDim.x)
    if (p[i] != byte_pattern(seed, i)) ++local;
  if (local) atomicAdd(bad, local);
}

// One word per `stride` bytes: proves every page is mapped and writable
// without streaming through tens of GiB.
__global__ void touch_kernel(uint8_t* p, uint64_t bytes, uint64_t stride, uint64_t seed) {
  uint64_t n = bytes / stride;
  for (uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; i < n;
       i += uint64_t(gridDim.x) * blockDim.x)
    *reinterpret_cast<uint64_t*>(p + i * stride) = pattern(seed, i);
}
__global__ void check_touch_kernel(const uint8_t* p, uint64_t bytes, uint64_t stride,
                                   uint64_t seed, unsigned long long* bad) {
  uint64_t n = bytes / stride;
  unsigned long long local = 0;
  for (uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; i < n;
       i += uint64_t(gridDim.x) * blockDim.x)
    if (*reinterpret_cast<const uint64_t*>(p + i * stride) != pattern(seed, i)) ++local;
  if (local) atomicAdd(bad, local);
}

// Spins until *flag != 0 or timeout_ns passed (a safety net: a test that
// forgets to open the gate still ends). Writes 1 to *timed_out on timeout.
__device__ inline void gate_wait(const volatile int* flag, uint64_t timeout_ns, int* timed_out) {
  uint64_t t0 = globaltimer_ns();
  while (*flag == 0) {
    if (globaltimer_ns() - t0 > timeout_ns) {
      if (timed_out) *timed_out = 1;
      return;
    }
    __nanosleep(1000);
  }
}

__global__ void gate_kernel(const volatile int* flag, uint64_t timeout_ns, int* timed_out) {
  gate_wait(flag, timeout_ns, timed_out);
}

// Spins for ns nanoseconds (no gate).
__global__ void sleep_kernel(uint64_t ns) {
  uint64_t t0 = globaltimer_ns();
  while (globaltimer_ns() - t0 < ns) __nanosleep(1000);
}

// The zombie reader: waits at the gate, then verifies the pattern through
// its pointer (the old VA) and writes the mismatch count and a done flag.
__global__ void gated_verify_kernel(const volatile int* flag, uint64_t timeout_ns, int* timed_out,
                                    const uint64_t* p, uint64_t words, uint64_t seed,
                                    unsigned long long* bad, int* done) {
  if (threadIdx.x == 0) gate_wait(flag, timeout_ns, timed_out);
  __syncthreads();  // every thread reads only after the gate opened
  unsigned long long local = 0;
  for (uint64_t i = threadIdx.x; i < words; i += blockDim.x)
    if (p[i] != pattern(seed, i)) ++local;
  if (local) atomicAdd(bad, local);
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence_system();
    *done = 1;
  }
}

// Host wrappers (grid sized for the H100; correctness does not depend on it).
inline void fill(void* p, uint64_t bytes, uint64_t seed, cudaStream_t s) {
  uint64_t words = bytes / 8;
  unsigned blocks = static_cast<unsigned>(std::min<uint64_t>(1024, (words + 255) / 256 + 1));
  fill_kernel<<<blocks, 256, 0, s>>>(static_cast<uint64_t*>(p), words, seed);
}
inline void fill_bytes(void* p, uint64_t n, uint64_t seed, cudaStream_t s) {
  unsigned blocks = static_cast<unsigned>(std::min<uint64_t>(256, (n + 255) / 256 + 1));
  fill_bytes_kernel<<<blocks, 256, 0, s>>>(static_cast<uint8_t*>(p), n, seed);
}

// Mismatch counters in mapped pinned host memory: readable by the CPU after
// a synchronize, with no extra copy.
struct Counters {
  unsigned long long* h = nullptr;
  unsigned long long* d = nullptr;
  size_t n = 0;
  explicit Counters(size_t count) : n(count) {
    cudaHostAlloc(reinterpret_cast<void**>(&h), count * sizeof *h, cudaHostAllocMapped);
    std::memset(h, 0, count * sizeof *h);
    cudaHostGetDevicePointer(reinterpret_cast<void**>(&d), h, 0);
  }
  ~Counters() { cudaFreeHost(h); }
  Counters(const Counters&) = delete;
  Counters& operator=(const Counters&) = delete;
};

inline void verify(const void* p, uint64_t bytes, uint64_t seed, unsigned long long* bad_dev,
                   cudaStream_t s) {
  uint64_t words = bytes / 8;
  unsigned blocks = static_cast<unsigned>(std::min<uint64_t>(1024, (words + 255) / 256 + 1));
  verify_kernel<<<blocks, 256, 0, s>>>(static_cast<const uint64_t*>(p), words, seed, bad_dev);
}
inline void verify_bytes(const void* p, uint64_t n, uint64_t seed, unsigned long long* bad_dev,
                         cudaStream_t s) {
  unsigned blocks = static_cast<unsigned>(std::min<uint64_t>(256, (n + 255) / 256 + 1));
  verify_bytes_kernel<<<blocks, 256, 0, s>>>(static_cast<const uint8_t*>(p), n, seed, bad_dev);
}

// A gate: mapped host int the CPU opens; kernels wait on it.
struct Gate {
  int* h = nullptr;  // [0] = open flag, [1] = timed out, [2..] = done flags
  int* d = nullptr;
  Gate() {
    cudaHostAlloc(reinterpret_cast<void**>(&h), 16 * sizeof(int), cudaHostAllocMapped);
    std::memset(h, 0, 16 * sizeof(int));
    cudaHostGetDevicePointer(reinterpret_cast<void**>(&d), h, 0);
  }
  ~Gate() {
    open();
    cudaDeviceSynchronize();
    cudaFreeHost(h);
  }
  Gate(const Gate&) = delete;
  Gate& operator=(const Gate&) = delete;
  void open() { __atomic_store_n(&h[0], 1, __ATOMIC_SEQ_CST); }
  bool timed_out() const { return __atomic_load_n(&h[1], __ATOMIC_SEQ_CST) != 0; }
  const volatile int* flag() const { return d; }
  int* timeout_flag() const { return d + 1; }
  int* done_dev(int i) const { return d + 2 + i; }
  int done_host(int i) const { return __atomic_load_n(&h[2 + i], __ATOMIC_SEQ_CST); }
};

inline cudaStream_t new_stream() {
  cudaStream_t s = nullptr;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  return s;
}

}  // namespace gt
