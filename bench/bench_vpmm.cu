// libvpmm against the CUDA allocators, on one GPU, in one process:
//   hotpath     alloc+free pairs (4 KiB, 1 MiB, 2 MiB, 64 MiB) and the mixed
//               churn, vs cudaMalloc, cudaMallocAsync (default pool, release
//               threshold max, warm) and per-allocation VMM handles
//   frag        peak physical / peak live over the walkthrough and the
//               training-like trace (and any trace files given), libvpmm
//               under every handle policy (default scaled handles, one handle
//               per growth, page handles, a 32 MiB cap) vs cudaMallocAsync;
//               the largest allocation still served after each trace
//   growth      first malloc of 1, 8, 32 GiB on an empty pool (default,
//               growth handles, page handles; with the number of handles) vs
//               one cuMemCreate + Reserve + Map + SetAccess
//   multistream 4 threads x 4 streams allocating and freeing concurrently
// The hot path and multistream run libvpmm's default policy (label "vpmm").
// PyTorch's caching allocator is measured by bench_torch.cpp (same workloads,
// bench_common.hpp). Prints RESULT lines (see bench_common.hpp) and a short
// human summary; bench/report.py builds the markdown table.
//
// Usage: bench_vpmm [--quick] [--only hotpath,frag,growth,multistream]
//                   [trace files...]
#include <cuda.h>
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <atomic>
#include <mutex>
#include <set>
#include <thread>

#include "bench_common.hpp"
#include "vpmm.h"

using namespace bench;

namespace {

bool g_quick = false;

void cuda_check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "CUDA error in %s: %s\n", what, cudaGetErrorString(e));
    std::exit(2);
  }
}

// ---------------------------------------------------------------------------
// Driver API (for per-allocation VMM and the growth baseline), via dlopen so
// the benchmark has no link-time libcuda dependency either.
// ---------------------------------------------------------------------------
struct Drv {
  CUresult (*MemCreate)(CUmemGenericAllocationHandle*, size_t, const CUmemAllocationProp*, unsigned long long);
  CUresult (*MemRelease)(CUmemGenericAllocationHandle);
  CUresult (*MemAddressReserve)(CUdeviceptr*, size_t, size_t, CUdeviceptr, unsigned long long);
  CUresult (*MemAddressFree)(CUdeviceptr, size_t);
  CUresult (*MemMap)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
  CUresult (*MemUnmap)(CUdeviceptr, size_t);
  CUresult (*MemSetAccess)(CUdeviceptr, size_t, const CUmemAccessDesc*, size_t);
  bool ok = false;
};

const Drv& drv() {
  static Drv d = [] {
    Drv x{};
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) return x;
    auto get = [&](const char* n) { return dlsym(lib, n); };
    x.MemCreate = reinterpret_cast<decltype(x.MemCreate)>(get("cuMemCreate"));
    x.MemRelease = reinterpret_cast<decltype(x.MemRelease)>(get("cuMemRelease"));
    x.MemAddressReserve = reinterpret_cast<decltype(x.MemAddressReserve)>(get("cuMemAddressReserve"));
    x.MemAddressFree = reinterpret_cast<decltype(x.MemAddressFree)>(get("cuMemAddressFree"));
    x.MemMap = reinterpret_cast<decltype(x.MemMap)>(get("cuMemMap"));
    x.MemUnmap = reinterpret_cast<decltype(x.MemUnmap)>(get("cuMemUnmap"));
    x.MemSetAccess = reinterpret_cast<decltype(x.MemSetAccess)>(get("cuMemSetAccess"));
    x.ok = x.MemCreate && x.MemRelease && x.MemAddressReserve && x.MemAddressFree && x.MemMap &&
           x.MemUnmap && x.MemSetAccess;
    return x;
  }();
  return d;
}

CUmemAllocationProp vmm_prop() {
  CUmemAllocationProp p;
  std::memset(&p, 0, sizeof p);
  p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  p.location.id = 0;
  return p;
}
CUmemAccessDesc vmm_access() {
  CUmemAccessDesc a;
  std::memset(&a, 0, sizeof a);
  a.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  a.location.id = 0;
  a.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  return a;
}

// One handle + one VA reservation per allocation (what torch_memory_saver and
// naive VMM users do).
class VmmPerAlloc : public Allocator {
 public:
  std::string name() const override { return "vmm_per_alloc"; }
  void* alloc(uint64_t n, cudaStream_t) override {
    const Drv& d = drv();
    uint64_t sz = round_up(n, kPage);
    CUmemAllocationProp prop = vmm_prop();
    CUmemGenericAllocationHandle h = 0;
    if (d.MemCreate(&h, sz, &prop, 0) != CUDA_SUCCESS) return nullptr;
    CUdeviceptr va = 0;
    if (d.MemAddressReserve(&va, sz, kPage, 0, 0) != CUDA_SUCCESS) {
      d.MemRelease(h);
      return nullptr;
    }
    CUmemAccessDesc acc = vmm_access();
    if (d.MemMap(va, sz, 0, h, 0) != CUDA_SUCCESS || d.MemSetAccess(va, sz, &acc, 1) != CUDA_SUCCESS) {
      d.MemUnmap(va, sz);
      d.MemAddressFree(va, sz);
      d.MemRelease(h);
      return nullptr;
    }
    std::lock_guard<std::mutex> g(mu_);
    live_[va] = {h, sz};
    cur_ += sz;
    peak_ = std::max(peak_, cur_);
    return reinterpret_cast<void*>(va);
  }
  void free(void* p, uint64_t, cudaStream_t s) override {
    const Drv& d = drv();
    CUdeviceptr va = reinterpret_cast<CUdeviceptr>(p);
    std::pair<CUmemGenericAllocationHandle, uint64_t> e;
    {
      std::lock_guard<std::mutex> g(mu_);
      e = live_[va];
      live_.erase(va);
      cur_ -= e.second;
    }
    // cuMemUnmap does not wait for queued work: a correct user synchronizes.
    cudaStreamSynchronize(s);
    d.MemUnmap(va, e.second);
    d.MemRelease(e.first);
    d.MemAddressFree(va, e.second);
  }
  void reset_peaks() override { peak_ = cur_; }
  uint64_t peak_physical() override { return peak_; }
  uint64_t physical() override { return cur_; }

 private:
  std::mutex mu_;
  std::unordered_map<CUdeviceptr, std::pair<CUmemGenericAllocationHandle, uint64_t>> live_;
  uint64_t cur_ = 0, peak_ = 0;
};

class CudaMallocAlloc : public Allocator {
 public:
  std::string name() const override { return "cudaMalloc"; }
  void* alloc(uint64_t n, cudaStream_t) override {
    void* p = nullptr;
    if (cudaMalloc(&p, n) != cudaSuccess) {
      cudaGetLastError();
      return nullptr;
    }
    return p;
  }
  void free(void* p, uint64_t, cudaStream_t) override { cudaFree(p); }
  uint64_t peak_physical() override { return 0; }
  uint64_t physical() override { return 0; }
};

// cudaMallocAsync on a memory pool: the device's default pool (hot path) or a
// fresh pool (fragmentation, so each trace starts empty), release threshold
// UINT64_MAX either way (keep everything cached, the warm configuration).
class AsyncAlloc : public Allocator {
 public:
  explicit AsyncAlloc(bool fresh_pool) : own_(fresh_pool) {
    if (fresh_pool) {
      cudaMemPoolProps props;
      std::memset(&props, 0, sizeof props);
      props.allocType = cudaMemAllocationTypePinned;
      props.location.type = cudaMemLocationTypeDevice;
      props.location.id = 0;
      cuda_check(cudaMemPoolCreate(&pool_, &props), "cudaMemPoolCreate");
    } else {
      cuda_check(cudaDeviceGetDefaultMemPool(&pool_, 0), "cudaDeviceGetDefaultMemPool");
    }
    uint64_t thr = UINT64_MAX;
    cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrReleaseThreshold, &thr);
  }
  ~AsyncAlloc() override {
    cudaDeviceSynchronize();
    cudaMemPoolTrimTo(pool_, 0);
    if (own_) cudaMemPoolDestroy(pool_);
  }
  std::string name() const override { return "cudaMallocAsync"; }
  void* alloc(uint64_t n, cudaStream_t s) override {
    void* p = nullptr;
    cudaError_t e = own_ ? cudaMallocFromPoolAsync(&p, n, pool_, s) : cudaMallocAsync(&p, n, s);
    if (e != cudaSuccess) {
      cudaGetLastError();
      return nullptr;
    }
    return p;
  }
  void free(void* p, uint64_t, cudaStream_t s) override { cudaFreeAsync(p, s); }
  void reset_peaks() override {
    uint64_t z = 0;
    cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrReservedMemHigh, &z);
    cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrUsedMemHigh, &z);
  }
  uint64_t peak_physical() override { return attr(cudaMemPoolAttrReservedMemHigh); }
  uint64_t physical() override { return attr(cudaMemPoolAttrReservedMemCurrent); }
  uint64_t peak_rounded_live() override { return attr(cudaMemPoolAttrUsedMemHigh); }
  uint64_t release_all() override {
    cudaDeviceSynchronize();
    cudaMemPoolTrimTo(pool_, 0);
    return physical();
  }

 private:
  uint64_t attr(cudaMemPoolAttr a) {
    uint64_t v = 0;
    cudaMemPoolGetAttribute(pool_, a, &v);
    return v;
  }
  cudaMemPool_t pool_ = nullptr;
  bool own_;
};

// The label of a vpmm_config.max_handle_size value, as the report shows it.
std::string handle_policy_label(uint64_t max_handle) {
  if (max_handle == 0) return "vpmm_default";
  if (max_handle == VPMM_HANDLE_SIZE_UNLIMITED) return "vpmm_growth_handles";
  if (max_handle == kPage) return "vpmm_page_handles";
  char b[64];
  if (max_handle % MiB == 0)
    std::snprintf(b, sizeof b, "vpmm_cap_%lluMiB", (unsigned long long)(max_handle / MiB));
  else
    std::snprintf(b, sizeof b, "vpmm_cap_%.2fMiB", max_handle / double(MiB));
  return b;
}

class VpmmAlloc : public Allocator {
 public:
  // max_handle (vpmm_config.max_handle_size): 0 = the default (scaled
  // handles: a growth of S bytes becomes handles of max(page, S / 128)),
  // VPMM_HANDLE_SIZE_UNLIMITED = one handle per growth, kPage = one handle
  // per page, anything else = handles of at most that size.
  explicit VpmmAlloc(uint64_t max_handle, uint64_t initial_pages = 0, const char* label = nullptr)
      : max_handle_(max_handle) {
    vpmm_config c;
    vpmm_config_init(&c);
    c.backend = VPMM_BACKEND_CUDA;
    c.max_handle_size = max_handle;
    c.initial_pages = initial_pages;
    vpmm_status st = vpmm_pool_create(&c, &pool_);
    if (st != VPMM_OK) {
      std::fprintf(stderr, "vpmm_pool_create: %s\n", vpmm_last_error());
      std::exit(2);
    }
    name_ = label ? label : handle_policy_label(max_handle);
  }
  ~VpmmAlloc() override {
    cudaDeviceSynchronize();
    vpmm_pool_destroy(pool_);
  }
  std::string name() const override { return name_; }
  void* alloc(uint64_t n, cudaStream_t s) override {
    void* p = nullptr;
    if (vpmm_pool_malloc(pool_, n, s, &p) != VPMM_OK) return nullptr;
    return p;
  }
  void free(void* p, uint64_t, cudaStream_t s) override {
    if (vpmm_pool_free(pool_, p, s) != VPMM_OK) {
      std::fprintf(stderr, "vpmm_pool_free: %s\n", vpmm_last_error());
      std::exit(2);
    }
  }
  vpmm_stats stats() {
    vpmm_stats st;
    std::memset(&st, 0, sizeof st);
    st.struct_size = sizeof st;
    vpmm_pool_stats(pool_, &st);
    return st;
  }
  uint64_t peak_physical() override { return stats().peak_mapped_bytes; }
  uint64_t physical() override { return stats().mapped_bytes; }
  uint64_t peak_rounded_live() override { return stats().peak_live_bytes; }
  uint64_t release_all() override {
    cudaDeviceSynchronize();
    vpmm_pool_trim(pool_, 0);
    return stats().mapped_bytes;
  }
  std::string extra() override {
    vpmm_stats st = stats();
    char b[320];
    std::snprintf(b, sizeof b,
                  "handles_created=%llu n_defrag=%llu n_grow=%llu remapped=%.0fMiB "
                  "n_stream_waits=%llu small_pages=%.0fMiB",
                  (unsigned long long)st.handles_created, (unsigned long long)st.n_defrag,
                  (unsigned long long)st.n_grow, st.bytes_remapped / double(MiB),
                  (unsigned long long)st.n_stream_waits, st.small_bytes / double(MiB));
    return b;
  }
  vpmm_pool* pool() { return pool_; }

 private:
  vpmm_pool* pool_ = nullptr;
  uint64_t max_handle_;
  std::string name_;
};

// ---------------------------------------------------------------------------
// 1. Hot path
// ---------------------------------------------------------------------------
void bench_hotpath(cudaStream_t s) {
  struct Size {
    const char* label;
    uint64_t bytes;
  };
  const Size sizes[] = {{"4KiB", 4 * KiB}, {"1MiB", MiB}, {"2MiB", 2 * MiB}, {"64MiB", 64 * MiB}};
  const int fast_n = g_quick ? 2000 : 50000, fast_reps = 7;
  const int slow_n = g_quick ? 50 : 200, slow_reps = 5;

  auto run = [&](Allocator& a, bool slow) {
    std::vector<double> runs;
    for (const Size& sz : sizes) {
      bool ok = false;
      double us = hot_pairs(a, sz.bytes, s, slow ? slow_n : fast_n, slow ? slow_reps : fast_reps,
                            slow ? 5 : 1000, &runs, &ok);
      Result("hotpath").str("alloc", a.name()).str("case", sz.label).boolean("ok", ok).num("us", us)
          .num("min_us", runs.empty() ? NAN : *std::min_element(runs.begin(), runs.end())).nums("runs", runs).emit();
    }
    bool ok = false;
    double us = hot_churn(a, s, slow ? slow_n * 2 : fast_n, slow ? slow_reps : fast_reps,
                          slow ? 20 : 2000, &runs, &ok);
    Result("hotpath").str("alloc", a.name()).str("case", "churn").boolean("ok", ok).num("us", us)
        .num("min_us", runs.empty() ? NAN : *std::min_element(runs.begin(), runs.end())).nums("runs", runs).emit();
    cudaDeviceSynchronize();
  };
  {
    // libvpmm: a fresh pool per case, so one case's cached slabs and free
    // regions never shape the next (the caching allocators below keep theirs,
    // as a long-running process would).
    std::vector<double> runs;
    std::string extras;
    for (const Size& sz : sizes) {
      VpmmAlloc v(0, 0, "vpmm");
      bool ok = false;
      double us = hot_pairs(v, sz.bytes, s, fast_n, fast_reps, 1000, &runs, &ok);
      Result r("hotpath");
      r.str("alloc", "vpmm").str("case", sz.label).boolean("ok", ok).num("us", us)
          .num("min_us", runs.empty() ? NAN : *std::min_element(runs.begin(), runs.end())).nums("runs", runs);
      if (!ok) r.str("error", vpmm_last_error());
      r.emit();
      extras += std::string(sz.label) + ": " + v.extra() + "; ";
    }
    VpmmAlloc v(0, 0, "vpmm");
    bool ok = false;
    double us = hot_churn(v, s, fast_n, fast_reps, 2000, &runs, &ok);
    Result r("hotpath");
    r.str("alloc", "vpmm").str("case", "churn").boolean("ok", ok).num("us", us)
        .num("min_us", runs.empty() ? NAN : *std::min_element(runs.begin(), runs.end())).nums("runs", runs);
    if (!ok) r.str("error", vpmm_last_error());
    r.emit();
    extras += "churn: " + v.extra();
    Result("hotpath_stats").str("alloc", "vpmm").str("extra", extras).emit();
  }
  {
    AsyncAlloc a(false);
    run(a, false);
  }
  {
    CudaMallocAlloc c;
    run(c, true);
  }
  if (drv().ok) {
    VmmPerAlloc m;
    run(m, true);
  }
}

// ---------------------------------------------------------------------------
// 2. Fragmentation
// ---------------------------------------------------------------------------
void bench_frag(cudaStream_t* streams, const std::vector<Trace>& traces) {
  for (const Trace& t : traces) {
    uint64_t cap = trace_cap(t);
    std::printf("# trace %s: %zu ops, %d streams, peak live %.1f MiB, final live %.1f MiB, cap %.1f GiB\n",
                t.name.c_str(), t.ops.size(), t.streams, t.peak_live / double(MiB),
                t.final_live / double(MiB), cap / double(GiB));
    for (uint64_t mh : {uint64_t(0), uint64_t(VPMM_HANDLE_SIZE_UNLIMITED), kPage, 32 * MiB}) {
      Blocker block(cap);
      VpmmAlloc v(mh);
      ReplayResult r = replay(v, t, streams, true, cap);
      emit_frag(v.name(), t, r);
    }
    {
      Blocker block(cap);
      AsyncAlloc a(true);
      ReplayResult r = replay(a, t, streams, true, cap);
      emit_frag(a.name(), t, r);
    }
  }
  // The walkthrough cases A-D as the seed defines them: PAGES = 11 + X pages
  // mapped up front (page handles), the same op sequence.
  Trace w = walkthrough_trace();
  const struct {
    const char* name;
    uint64_t x;
  } cases[] = {{"walkthrough_A_X11", 11}, {"walkthrough_B_X7", 7}, {"walkthrough_C_X4", 4},
               {"walkthrough_D_X2", 2}};
  for (const auto& c : cases) {
    Trace t = w;
    t.name = c.name;
    uint64_t cap = trace_cap(t);
    Blocker block(cap);
    VpmmAlloc v(0, 11 + c.x, "vpmm_initial_pages");
    ReplayResult r = replay(v, t, streams, true, cap);
    emit_frag(v.name(), t, r);
  }
}

// ---------------------------------------------------------------------------
// 3. Growth
// ---------------------------------------------------------------------------
void bench_growth(cudaStream_t s) {
  const uint64_t sizes[] = {1 * GiB, 8 * GiB, 32 * GiB};
  // Single handles, growth handles and the default (at most ~129 handles per
  // growth) are cheap: 7 runs; page handles (up to 16384 handles per run) 3.
  // Released memory seems to be scrubbed by the driver in the background: a
  // create right after a large release was seen taking ~200 ms once in 3
  // runs, hence medians of more runs and the min.
  const int reps_fast = g_quick ? 1 : 7, reps_page = g_quick ? 1 : 3;
  // Released memory seems to be scrubbed in the background, and a create that
  // lands on it waits (run 2 saw ~160 ms stalls on every other 32 GiB run, for
  // the driver calls alone and for libvpmm alike): let it settle between runs.
  auto settle = [] { std::this_thread::sleep_for(std::chrono::milliseconds(g_quick ? 10 : 300)); };
  auto single = [&](uint64_t sz, double* map_us, double* rel_us) {
    const Drv& d = drv();
    CUmemAllocationProp prop = vmm_prop();
    CUmemAccessDesc acc = vmm_access();
    double t0 = now_us();
    CUmemGenericAllocationHandle h = 0;
    CUdeviceptr va = 0;
    bool ok = d.MemCreate(&h, sz, &prop, 0) == CUDA_SUCCESS &&
              d.MemAddressReserve(&va, sz, kPage, 0, 0) == CUDA_SUCCESS &&
              d.MemMap(va, sz, 0, h, 0) == CUDA_SUCCESS && d.MemSetAccess(va, sz, &acc, 1) == CUDA_SUCCESS;
    double t1 = now_us();
    if (!ok) return false;
    d.MemUnmap(va, sz);
    d.MemRelease(h);
    d.MemAddressFree(va, sz);
    *map_us = t1 - t0;
    *rel_us = now_us() - t1;
    settle();
    return true;
  };
  if (drv().ok) {  // warm-up: first VMM calls of the process
    double a, b;
    single(1 * GiB, &a, &b);
  }
  for (uint64_t sz : sizes) {
    if (drv().ok) {
      std::vector<double> map_us, unmap_us;
      for (int r = 0; r < reps_fast; ++r) {
        double a, b;
        if (!single(sz, &a, &b)) break;
        map_us.push_back(a);
        unmap_us.push_back(b);
      }
      Result("growth").str("alloc", "cuMemCreate_single").num("bytes", double(sz))
          .num("us", median(map_us)).num("min_us", map_us.empty() ? NAN : *std::min_element(map_us.begin(), map_us.end()))
          .nums("runs", map_us).num("release_us", median(unmap_us)).emit();
    }
    for (uint64_t mh : {uint64_t(0), uint64_t(VPMM_HANDLE_SIZE_UNLIMITED), kPage}) {
      std::vector<double> grow_us, destroy_us;
      uint64_t handles = 0;
      for (int r = 0; r < (mh == kPage ? reps_page : reps_fast); ++r) {
        VpmmAlloc* v = new VpmmAlloc(mh);
        double t0 = now_us();
        void* p = v->alloc(sz, s);
        double t1 = now_us();
        if (!p) {
          std::printf("# growth: %s malloc(%llu) failed: %s\n", v->name().c_str(), (unsigned long long)sz,
                      vpmm_last_error());
          delete v;
          break;
        }
        handles = v->stats().handles;
        v->free(p, sz, s);
        double t2 = now_us();
        delete v;  // destroy: unmap + release every handle
        destroy_us.push_back(now_us() - t2);
        grow_us.push_back(t1 - t0);
        settle();
      }
      Result("growth").str("alloc", handle_policy_label(mh))
          .num("bytes", double(sz)).num("us", median(grow_us))
          .num("min_us", grow_us.empty() ? NAN : *std::min_element(grow_us.begin(), grow_us.end()))
          .nums("runs", grow_us).num("release_us", median(destroy_us)).num("handles", double(handles)).emit();
    }
  }
}

// ---------------------------------------------------------------------------
// 4. Multi-stream
// ---------------------------------------------------------------------------
void bench_multistream() {
  constexpr int kThreads = 4;
  const int warm = g_quick ? 500 : 2000, iters = g_quick ? 4000 : 20000;
  // libvpmm's default twice (fresh pools), to show the run-to-run spread,
  // then the handle policies that trade memory for fewer handles to move
  // (docs/handles.md, "Tail latency"), then cudaMallocAsync.
  struct Variant {
    uint64_t max_handle;
    const char* label;
  };
  const Variant variants[] = {{0, "vpmm"},
                              {0, "vpmm (2nd run)"},
                              {VPMM_HANDLE_SIZE_UNLIMITED, "vpmm_growth_handles"},
                              {32 * MiB, "vpmm_cap_32MiB"}};
  const int n_variants = sizeof variants / sizeof variants[0];
  for (int which = 0; which <= n_variants; ++which) {
    std::unique_ptr<Allocator> a;
    VpmmAlloc* v = nullptr;
    if (which < n_variants) {
      v = new VpmmAlloc(variants[which].max_handle, 0, variants[which].label);
      a.reset(v);
    } else {
      a.reset(new AsyncAlloc(false));
    }
    vpmm_stats s0{};
    std::vector<std::vector<double>> lat(kThreads), lat_free(kThreads);
    std::atomic<int> ready{0}, failures{0};
    std::atomic<bool> go{false};
    std::vector<double> wall(kThreads);
    std::vector<std::thread> th;
    auto body = [&](int t) {
      cudaSetDevice(0);
      cudaStream_t s;
      cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
      std::mt19937_64 rng(1000 + t);
      std::uniform_real_distribution<double> lg(std::log(4096.0), std::log(32.0 * MiB));
      std::vector<std::pair<void*, uint64_t>> ring;
      auto one = [&](bool timed) {
        uint64_t n = static_cast<uint64_t>(std::exp(lg(rng)));
        double t0 = now_us();
        void* p = a->alloc(n, s);
        double t1 = now_us();
        if (!p) {
          ++failures;
          return;
        }
        if (timed) lat[t].push_back(t1 - t0);
        cudaMemsetAsync(p, 1, std::min<uint64_t>(n, 256), s);
        ring.push_back({p, n});
        if (ring.size() > 16) {
          auto old = ring.front();
          ring.erase(ring.begin());
          double t2 = now_us();
          a->free(old.first, old.second, s);
          if (timed) lat_free[t].push_back(now_us() - t2);
        }
      };
      for (int i = 0; i < warm; ++i) one(false);
      ++ready;
      while (!go.load()) std::this_thread::yield();
      double t0 = now_us();
      for (int i = 0; i < iters; ++i) one(true);
      wall[t] = now_us() - t0;
      for (auto& e : ring) a->free(e.first, e.second, s);
      cudaStreamSynchronize(s);
      if (v) vpmm_pool_stream_retire(v->pool(), s);
      cudaStreamDestroy(s);
    };
    for (int t = 0; t < kThreads; ++t) th.emplace_back(body, t);
    while (ready.load() < kThreads) std::this_thread::yield();
    if (v) s0 = v->stats();
    go = true;
    for (auto& t : th) t.join();
    std::vector<double> all, mallocs, frees;
    for (auto& l : lat) mallocs.insert(mallocs.end(), l.begin(), l.end());
    for (auto& l : lat_free) frees.insert(frees.end(), l.begin(), l.end());
    all = mallocs;
    all.insert(all.end(), frees.begin(), frees.end());
    auto over = [](const std::vector<double>& v) {
      return double(std::count_if(v.begin(), v.end(), [](double x) { return x > 1000.0; }));
    };
    double over1ms = over(all);
    Result r("multistream");
    r.str("alloc", a->name()).num("threads", kThreads).num("iters", iters)
        .num("wall_ms", *std::max_element(wall.begin(), wall.end()) / 1000.0)
        .num("calls", double(all.size())).num("p50_us", percentile(all, 0.5))
        .num("p99_us", percentile(all, 0.99)).num("max_us", all.empty() ? NAN : *std::max_element(all.begin(), all.end()))
        .num("over_1ms", over1ms).num("over_1ms_malloc", over(mallocs)).num("over_1ms_free", over(frees))
        .num("p50_malloc_us", percentile(mallocs, 0.5)).num("p50_free_us", percentile(frees, 0.5))
        .num("failures", failures.load());
    if (v) {
      vpmm_stats s1 = v->stats();
      r.num("n_stream_waits", double(s1.n_stream_waits - s0.n_stream_waits))
          .num("n_events_recorded", double(s1.n_events_recorded - s0.n_events_recorded))
          .num("n_cross_stream_reuse", double(s1.n_cross_stream_reuse - s0.n_cross_stream_reuse))
          .num("n_defrag", double(s1.n_defrag - s0.n_defrag)).num("n_grow", double(s1.n_grow - s0.n_grow));
    }
    // Physical memory held at the peak and the rounded live peak, as the
    // fragmentation table measures them (cudaMallocAsync: its pool's
    // reserved and used high-water marks).
    r.num("peak_mapped", double(a->peak_physical())).num("peak_live", double(a->peak_rounded_live()));
    r.emit();
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::set<std::string> only;
  std::vector<std::string> trace_files;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--quick") {
      g_quick = true;
    } else if (a == "--only" && i + 1 < argc) {
      std::string list = argv[++i];
      size_t pos = 0;
      while (pos != std::string::npos) {
        size_t c = list.find(',', pos);
        only.insert(list.substr(pos, c == std::string::npos ? c : c - pos));
        pos = c == std::string::npos ? c : c + 1;
      }
    } else {
      trace_files.push_back(a);
    }
  }
  auto want = [&](const char* k) { return only.empty() || only.count(k); };
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n < 1) {
    std::printf("SKIP: no CUDA device\n");
    return 77;
  }
  cuda_check(cudaSetDevice(0), "cudaSetDevice");
  cuda_check(cudaFree(nullptr), "cudaFree(0)");  // create the primary context
  cudaDeviceProp prop;
  cudaGetDeviceProperties(&prop, 0);
  int drv_ver = 0, rt_ver = 0;
  cudaDriverGetVersion(&drv_ver);
  cudaRuntimeGetVersion(&rt_ver);
  Result("device").str("name", prop.name).num("total_bytes", double(prop.totalGlobalMem))
      .num("driver", drv_ver).num("runtime", rt_ver).str("vpmm", vpmm_version()).boolean("quick", g_quick).emit();

  cudaStream_t streams[kMaxStreams];
  for (auto& s : streams) cuda_check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stream");

  if (want("hotpath")) bench_hotpath(streams[0]);
  if (want("frag")) {
    std::vector<Trace> traces{walkthrough_trace(), training_trace()};
    for (const std::string& f : trace_files) {
      Trace t;
      std::string e = load_trace(f, &t);
      if (!e.empty()) {
        std::printf("# skipping trace %s\n", e.c_str());
        continue;
      }
      traces.push_back(std::move(t));
    }
    bench_frag(streams, traces);
  }
  if (want("growth")) bench_growth(streams[0]);
  if (want("multistream")) bench_multistream();
  for (auto& s : streams) cudaStreamDestroy(s);
  std::printf("# done\n");
  return 0;
}
