// Remap under in-flight work (issue 42, deliverable 7): the workload that
// tests/gpu/test_gpu_remap_under_load.cu runs for a minute and
// bench/probes/remap_under_load_probe.cu for as long as it is told.
//
// libvpmm unmaps, remaps and releases *free* pages (their last users' events
// completed) while unrelated kernels run on other streams, and a cross-stream
// reuse waits on the GPU rather than the CPU. Others call a remap while
// kernels are in flight undefined behaviour (openvm's VPMM `fix_concurrency`
// branch syncs the host first; kvcached #465 saw a background VA edit fault a
// running kernel on Volta). This shows it or refutes it: kernels of several
// worker streams keep writing and verifying patterns they own over live
// allocations of one pool, replacing one now and then (a stream-ordered free
// behind their own queued kernel), while a churn thread on streams of its own
// makes the pool do every kind of VA and handle edit around them:
//   - Phase 0: the zombies older remaps left are reaped by later mallocs;
//   - Phase 2: pages fragmented (one-page pieces freed between live ones,
//     some behind a kernel still queued), then a span larger than any free
//     region under a limit that forbids growing, so free pages move;
//   - views: the same request in a pool with views on (view_min_size), which
//     maps the free handles where they lie at a VA of its own;
//   - trim: free handles unmapped and released;
//   - pause and resume of another tag (unmapped, released, recreated and
//     mapped again at the same VA, its bytes through host backups).
// At the end no kernel may have faulted (cudaDeviceSynchronize), no worker
// or churn kernel may have seen a byte it did not write, and every worker
// allocation holds its last pattern.
//
// Self-contained (the CUDA runtime and vpmm.h): the probe builds with plain
// nvcc against an installed or built libvpmm.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "vpmm.h"

namespace remap_load {

constexpr uint64_t kMiB = 1ull << 20;
constexpr int kMaxBufs = 4;

__host__ __device__ inline uint64_t pattern(uint64_t seed, uint64_t i) {
  return (seed * 0x9E3779B97F4A7C15ull) ^ (i * 0xD1B54A32D192ED03ull) ^ (i + 1);
}

__device__ inline uint64_t timer_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// A worker's allocations, passed by value to its kernels.
struct Bufs {
  uint64_t* p[kMaxBufs];
  uint64_t words[kMaxBufs];
  uint64_t seed[kMaxBufs];
  int n;
};

// For `ns` nanoseconds, pass after pass: each thread writes its words of
// every buffer with the pass's pattern and reads them back (through
// volatile: the loads reach memory). Ends with each buffer's own pattern
// (seed), which the host verifies at the end. Mismatches go to *bad, passes
// to *passes.
__global__ void hammer_kernel(Bufs b, uint64_t ns, unsigned long long* bad, unsigned long long* passes) {
  const uint64_t t0 = timer_ns();
  const uint64_t tid = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x;
  const uint64_t stride = uint64_t(gridDim.x) * blockDim.x;
  unsigned long long local = 0, r = 0;
  do {
    ++r;
    for (int k = 0; k < b.n; ++k) {
      volatile uint64_t* p = b.p[k];
      const uint64_t s = b.seed[k] + r;
      for (uint64_t i = tid; i < b.words[k]; i += stride) p[i] = pattern(s, i);
      for (uint64_t i = tid; i < b.words[k]; i += stride)
        if (p[i] != pattern(s, i)) ++local;
    }
  } while (timer_ns() - t0 < ns);
  for (int k = 0; k < b.n; ++k)
    for (uint64_t i = tid; i < b.words[k]; i += stride) b.p[k][i] = pattern(b.seed[k], i);
  if (local) atomicAdd(bad, local);
  if (tid == 0) atomicAdd(passes, r);
}

__global__ void fill_kernel(uint64_t* p, uint64_t words, uint64_t seed) {
  for (uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; i < words; i += uint64_t(gridDim.x) * blockDim.x)
    p[i] = pattern(seed, i);
}

__global__ void verify_kernel(const uint64_t* p, uint64_t words, uint64_t seed, unsigned long long* bad) {
  unsigned long long local = 0;
  for (uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; i < words; i += uint64_t(gridDim.x) * blockDim.x)
    if (p[i] != pattern(seed, i)) ++local;
  if (local) atomicAdd(bad, local);
}

__global__ void spin_kernel(uint64_t ns) {
  const uint64_t t0 = timer_ns();
  while (timer_ns() - t0 < ns) __nanosleep(1000);
}

inline void fill(void* p, uint64_t bytes, uint64_t seed, cudaStream_t s) {
  fill_kernel<<<64, 256, 0, s>>>(static_cast<uint64_t*>(p), bytes / 8, seed);
}
inline void verify(const void* p, uint64_t bytes, uint64_t seed, unsigned long long* bad, cudaStream_t s) {
  verify_kernel<<<64, 256, 0, s>>>(static_cast<const uint64_t*>(p), bytes / 8, seed, bad);
}

struct Options {
  double seconds = 30;        // of churn, per pool
  bool views = false;         // view_min_size on (else VPMM_VIEWS_OFF: Phase 2 moves pages)
  int workers = 4;            // worker streams, one host thread each
  int bufs = kMaxBufs;        // allocations per worker
  uint64_t kernel_ns = 20000000;  // a hammer kernel's length (20 ms)
  int fragments = 48;         // one-page pieces fragmented per churn round
  bool verbose = false;
};

struct Result {
  cudaError_t device = cudaSuccess;  // cudaDeviceSynchronize at the end (a fault is sticky)
  cudaError_t launch = cudaSuccess;  // the first launch error seen
  unsigned long long worker_bad = 0, churn_bad = 0, final_bad = 0;
  unsigned long long passes = 0, launches = 0, replaced = 0, worker_oom = 0;
  unsigned long long rounds = 0, big_served = 0, big_oom = 0, pauses = 0, trims = 0;
  unsigned long long unexpected = 0;  // pool calls that failed where they must not
  std::string first_error;
  vpmm_stats stats{};
  std::string check;  // vpmm_pool_check's complaint, if any
  bool ok() const {
    return device == cudaSuccess && launch == cudaSuccess && worker_bad == 0 && churn_bad == 0 && final_bad == 0 &&
           unexpected == 0 && check.empty();
  }
};

// Mapped pinned counters: kernels add, the host reads after a synchronize.
struct Counters {
  unsigned long long* h = nullptr;
  unsigned long long* d = nullptr;
  explicit Counters(size_t n) {
    cudaHostAlloc(reinterpret_cast<void**>(&h), n * sizeof *h, cudaHostAllocMapped);
    std::memset(h, 0, n * sizeof *h);
    cudaHostGetDevicePointer(reinterpret_cast<void**>(&d), h, 0);
  }
  ~Counters() { cudaFreeHost(h); }
  Counters(const Counters&) = delete;
  Counters& operator=(const Counters&) = delete;
};

inline vpmm_stream vs(cudaStream_t s) { return reinterpret_cast<vpmm_stream>(s); }

// A pool call of the churn thread failed where it must not.
inline void note(Result* r, const char* what) {
  ++r->unexpected;
  if (r->first_error.empty()) r->first_error = std::string(what) + ": " + vpmm_last_error();
}

// One worker stream: hammer kernels back to back (two in flight), and every
// eighth launch one allocation replaced: the new one made on the stream,
// the old one freed on it behind the kernels still queued that use it.
struct Worker {
  int id = 0;
  cudaStream_t s = nullptr;
  Bufs b{};
  uint64_t bytes[kMaxBufs] = {};
  unsigned long long launches = 0, replaced = 0, oom = 0, unexpected = 0;
  cudaError_t launch = cudaSuccess;
  std::string error;
};

inline uint64_t worker_bytes(int worker, int buf, uint64_t round) {
  // 3-10 MiB and an odd tail: allocations that do not end on a page.
  return (3 + (worker * 3 + buf * 5 + round) % 8) * kMiB + 8 * ((worker + buf + round) % 7);
}

inline void worker_loop(vpmm_pool* p, const Options& o, Worker* w, std::atomic<bool>* stop,
                        unsigned long long* bad_dev, unsigned long long* passes_dev) {
  cudaSetDevice(0);
  cudaEvent_t ring[2];
  for (cudaEvent_t& e : ring) cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
  uint64_t next_seed = 1000003ull * (w->id + 1);
  bool unwritten = false;  // an allocation replaced since the last kernel: no kernel wrote it yet
  while (!stop->load(std::memory_order_relaxed)) {
    cudaEvent_t& slot = ring[w->launches % 2];
    if (w->launches >= 2) cudaEventSynchronize(slot);  // at most two kernels queued
    hammer_kernel<<<8, 256, 0, w->s>>>(w->b, o.kernel_ns, bad_dev, passes_dev);
    cudaError_t e = cudaPeekAtLastError();
    if (e != cudaSuccess) {
      w->launch = e;
      break;
    }
    cudaEventRecord(slot, w->s);
    ++w->launches;
    unwritten = false;
    if (w->launches % 8 == 0) {
      const int j = static_cast<int>((w->launches / 8) % w->b.n);
      const uint64_t bytes = worker_bytes(w->id, j, w->launches / 8);
      void* fresh = nullptr;
      vpmm_status st = vpmm_pool_malloc(p, bytes, vs(w->s), &fresh);
      if (st == VPMM_ERR_OUT_OF_MEMORY) {
        ++w->oom;  // the churn thread's limit of the moment: keep the old one
      } else if (st != VPMM_OK) {
        ++w->unexpected;
        if (w->error.empty()) w->error = std::string("worker malloc: ") + vpmm_last_error();
      } else {
        if (vpmm_pool_free(p, w->b.p[j], vs(w->s)) != VPMM_OK) {
          ++w->unexpected;
          if (w->error.empty()) w->error = std::string("worker free: ") + vpmm_last_error();
        }
        // The next kernel writes before it reads: the new bytes need no fill.
        w->b.p[j] = static_cast<uint64_t*>(fresh);
        w->b.words[j] = bytes / 8;
        w->b.seed[j] = next_seed++;
        w->bytes[j] = bytes;
        ++w->replaced;
        unwritten = true;
      }
    }
  }
  // The final check reads every allocation's last pattern: one replaced
  // after the last kernel gets that pattern from one more kernel (without
  // it the check counted the fresh allocation's words as bad: seen on the
  // H200, 786,435 words of one 6 MiB allocation, the pool not at fault).
  if (unwritten && w->launch == cudaSuccess) hammer_kernel<<<8, 256, 0, w->s>>>(w->b, o.kernel_ns, bad_dev, passes_dev);
  cudaStreamSynchronize(w->s);
  for (cudaEvent_t e : ring) cudaEventDestroy(e);
}

inline double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

inline vpmm_stats pool_stats(vpmm_pool* p) {
  vpmm_stats s;
  std::memset(&s, 0, sizeof s);
  s.struct_size = sizeof s;
  vpmm_pool_stats(p, &s);
  return s;
}

// The whole workload on one new pool of device 0.
inline Result run(const Options& o) {
  Result r;
  cudaSetDevice(0);
  cudaFree(nullptr);  // the primary context, before the pool's first driver call
  vpmm_config c;
  vpmm_config_init(&c);
  c.backend = VPMM_BACKEND_CUDA;
  c.device = 0;
  c.page_size = 2 * kMiB;
  c.va_size = 16ull << 30;
  c.view_min_size = o.views ? 8 * kMiB : VPMM_VIEWS_OFF;
  vpmm_pool* p = nullptr;
  if (vpmm_pool_create(&c, &p) != VPMM_OK) {
    ++r.unexpected;
    r.first_error = std::string("vpmm_pool_create: ") + vpmm_last_error();
    return r;
  }
  const uint64_t page = 2 * kMiB;
  const int nw = std::max(1, std::min(o.workers, 16));
  Counters worker_bad(nw), passes(nw), churn_bad(4), final_bad(1);

  // Another tag's allocations, paused and resumed under the workers' feet.
  std::vector<void*> other;
  cudaStream_t c1 = nullptr, c2 = nullptr;
  cudaStreamCreateWithFlags(&c1, cudaStreamNonBlocking);
  cudaStreamCreateWithFlags(&c2, cudaStreamNonBlocking);
  vpmm_alloc_attrs a;
  std::memset(&a, 0, sizeof a);
  a.struct_size = sizeof a;
  a.tag = "other";
  a.flags = VPMM_ALLOC_HOST_BACKUP;
  const uint64_t other_bytes = 16 * kMiB + 4096;
  for (int i = 0; i < 4; ++i) {
    void* x = nullptr;
    if (vpmm_pool_malloc_ex(p, other_bytes, vs(c1), &a, &x) != VPMM_OK) {
      note(&r, "other-tag malloc");
      continue;
    }
    fill(x, other_bytes, 500 + i, c1);
    other.push_back(x);
  }

  // The workers' allocations, first written by their first kernel.
  std::vector<Worker> ws(nw);
  for (int i = 0; i < nw; ++i) {
    Worker& w = ws[i];
    w.id = i;
    cudaStreamCreateWithFlags(&w.s, cudaStreamNonBlocking);
    w.b.n = std::max(1, std::min(o.bufs, kMaxBufs));
    for (int j = 0; j < w.b.n; ++j) {
      const uint64_t bytes = worker_bytes(i, j, 0);
      void* x = nullptr;
      if (vpmm_pool_malloc(p, bytes, vs(w.s), &x) != VPMM_OK) {
        note(&r, "worker's first malloc");
        w.b.n = j;
        break;
      }
      w.b.p[j] = static_cast<uint64_t*>(x);
      w.b.words[j] = bytes / 8;
      w.b.seed[j] = 77 * (i + 1) + j;
      w.bytes[j] = bytes;
    }
  }
  cudaStreamSynchronize(c1);
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  for (int i = 0; i < nw; ++i)
    threads.emplace_back(worker_loop, p, std::cref(o), &ws[i], &stop, worker_bad.d + i, passes.d + i);

  // The churn: fragment, a large request under a limit that forbids
  // growing (Phase 2, or a view), trim, pause and resume of the other tag.
  const double deadline = now_s() + o.seconds;
  std::vector<void*> pieces, keep;
  uint64_t seed = 1;
  while (now_s() < deadline) {
    ++r.rounds;
    pieces.clear();
    keep.clear();
    for (int i = 0; i < o.fragments; ++i) {
      void *x = nullptr, *y = nullptr;
      if (vpmm_pool_malloc(p, page, vs(c1), &x) != VPMM_OK || vpmm_pool_malloc(p, page, vs(c1), &y) != VPMM_OK) {
        if (x) vpmm_pool_free(p, x, vs(c1));
        note(&r, "fragment malloc");
        break;
      }
      fill(x, page, seed + 2 * i, c1);
      fill(y, page, seed + 2 * i + 1, c1);
      pieces.push_back(x);
      keep.push_back(y);
    }
    // Every other round the pieces are freed behind a kernel still queued on
    // c1: the large request takes pending memory with a GPU-side wait.
    if (r.rounds % 2 == 0) spin_kernel<<<1, 32, 0, c1>>>(2000000);
    for (size_t i = 0; i < pieces.size(); ++i) {
      verify(pieces[i], page, seed + 2 * i, churn_bad.d + 0, c1);
      if (vpmm_pool_free(p, pieces[i], vs(c1)) != VPMM_OK) note(&r, "fragment free");
    }
    // No free region fits the request, and the limit forbids growing: the
    // pool must move free pages (or map them in a view).
    const vpmm_stats before = pool_stats(p);
    const bool limited = vpmm_pool_set_limit(p, before.mapped_bytes + page) == VPMM_OK;
    const uint64_t big_bytes = (pieces.size() > 4 ? pieces.size() - 2 : 2) * page;
    void* big = nullptr;
    vpmm_status st = vpmm_pool_malloc(p, big_bytes, vs(c2), &big);
    if (limited && vpmm_pool_set_limit(p, 0) != VPMM_OK) note(&r, "set_limit(0)");
    if (st == VPMM_OK) {
      ++r.big_served;
      fill(big, big_bytes, seed + 9999, c2);
      verify(big, big_bytes, seed + 9999, churn_bad.d + 1, c2);
      if (vpmm_pool_free(p, big, vs(c2)) != VPMM_OK) note(&r, "large free");
    } else if (st == VPMM_ERR_OUT_OF_MEMORY) {
      ++r.big_oom;  // the workers took the memory meanwhile
    } else {
      note(&r, "large malloc");
    }
    for (size_t i = 0; i < keep.size(); ++i) {
      verify(keep[i], page, seed + 2 * i + 1, churn_bad.d + 2, c1);
      if (vpmm_pool_free(p, keep[i], vs(c1)) != VPMM_OK) note(&r, "keeper free");
    }
    if (r.rounds % 3 == 0) {
      if (vpmm_pool_trim(p, 0) != VPMM_OK) note(&r, "trim");
      ++r.trims;
    }
    if (r.rounds % 4 == 0 && !other.empty()) {
      // The other tag's last users are the churn streams' kernels.
      cudaStreamSynchronize(c1);
      cudaStreamSynchronize(c2);
      if (vpmm_pool_pause(p, "other") != VPMM_OK) note(&r, "pause");
      if (vpmm_pool_resume(p, "other") != VPMM_OK) note(&r, "resume");
      ++r.pauses;
      for (size_t i = 0; i < other.size(); ++i) verify(other[i], other_bytes, 500 + i, churn_bad.d + 3, c1);
    }
    seed += 4 * o.fragments + 17;
    // Keep the churn streams' queues short (their kernels are short).
    cudaStreamSynchronize(c1);
    cudaStreamSynchronize(c2);
    if (o.verbose && r.rounds % 100 == 0) {
      const vpmm_stats s = pool_stats(p);
      std::printf("  round %llu: defrags %llu, views %llu, zombies reaped %llu, mapped %llu MiB\n", r.rounds,
                  (unsigned long long)s.n_defrag, (unsigned long long)s.n_view_malloc,
                  (unsigned long long)s.n_zombies_reaped, (unsigned long long)(s.mapped_bytes >> 20));
      std::fflush(stdout);
    }
  }
  stop.store(true);
  for (std::thread& t : threads) t.join();
  r.device = cudaDeviceSynchronize();
  if (r.device == cudaSuccess) {
    // Every worker allocation holds its last pattern.
    for (Worker& w : ws)
      for (int j = 0; j < w.b.n; ++j) verify(w.b.p[j], w.b.words[j] * 8, w.b.seed[j], final_bad.d, w.s);
    r.device = cudaDeviceSynchronize();
    r.final_bad = final_bad.h[0];
  }
  for (int i = 0; i < nw; ++i) {
    r.worker_bad += worker_bad.h[i];
    r.passes += passes.h[i];
    r.launches += ws[i].launches;
    r.replaced += ws[i].replaced;
    r.worker_oom += ws[i].oom;
    r.unexpected += ws[i].unexpected;
    if (ws[i].launch != cudaSuccess && r.launch == cudaSuccess) r.launch = ws[i].launch;
    if (!ws[i].error.empty() && r.first_error.empty()) r.first_error = ws[i].error;
  }
  for (int i = 0; i < 4; ++i) r.churn_bad += churn_bad.h[i];
  r.stats = pool_stats(p);
  if (r.device == cudaSuccess) {
    if (vpmm_pool_check(p) != VPMM_OK) r.check = vpmm_last_error();
    for (Worker& w : ws)
      for (int j = 0; j < w.b.n; ++j) vpmm_pool_free(p, w.b.p[j], vs(w.s));
    for (void* x : other) vpmm_pool_free(p, x, vs(c1));
    cudaDeviceSynchronize();
    vpmm_pool_destroy(p);
  }
  for (Worker& w : ws) cudaStreamDestroy(w.s);
  cudaStreamDestroy(c1);
  cudaStreamDestroy(c2);
  return r;
}

inline void print(const char* what, const Options& o, const Result& r) {
  std::printf(
      "  %s (%.0f s, %d worker streams): %llu churn rounds, %llu large requests served (%llu refused: "
      "out of memory), %llu trims, %llu pause/resume of another tag; %llu worker kernels, %llu passes, "
      "%llu allocations replaced (%llu refused); pool: %llu Phase 2 runs, %llu views, %llu MiB remapped, "
      "%llu zombies reaped, %llu stream waits; device %s, launch %s; mismatches: workers %llu, churn %llu, "
      "final %llu; unexpected failures %llu%s%s%s%s\n",
      what, o.seconds, o.workers, r.rounds, r.big_served, r.big_oom, r.trims, r.pauses, r.launches, r.passes,
      r.replaced, r.worker_oom, (unsigned long long)r.stats.n_defrag, (unsigned long long)r.stats.n_view_malloc,
      (unsigned long long)(r.stats.bytes_remapped >> 20), (unsigned long long)r.stats.n_zombies_reaped,
      (unsigned long long)r.stats.n_stream_waits, cudaGetErrorName(r.device), cudaGetErrorName(r.launch),
      r.worker_bad, r.churn_bad, r.final_bad, r.unexpected, r.first_error.empty() ? "" : " (first: ",
      r.first_error.c_str(), r.first_error.empty() ? "" : ")", r.check.empty() ? "" : (" check: " + r.check).c_str());
  std::fflush(stdout);
}

}  // namespace remap_load
