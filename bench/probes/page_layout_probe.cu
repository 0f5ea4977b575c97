// Probe (not part of the build): do kernels run slower on memory mapped as
// many small handles than on one cudaMalloc? The placement work counts the
// driver time of moving page handles; this asks whether the layout it leaves
// (a tensor's VA backed by scattered 2 MiB handles) also costs kernel time,
// through the GPU's address translation. The same SIZE bytes are laid out as
//   malloc      one cuMemAlloc
//   one         one handle of SIZE, mapped once
//   64m         handles of 64 MiB, mapped in creation order
//   2m          handles of 2 MiB, mapped in creation order
//   2m-shuffle  handles of 2 MiB, mapped in a random order (what a pool that
//               moved pages for a while holds)
// and three kernels time each layout (medians of REPS launches, us):
//   stream      a float4 read-and-sum over all of it (bandwidth)
//   gather      16 Mi reads of a 256-byte row at random rows (an embedding
//               lookup: one translation per row)
//   scatter-mid 64 tensors of 32 MiB at random places, each copied into the
//               next (a training step's mid-size elementwise traffic)
// and three copy-engine transfers (cudaMemcpyAsync, 16 chunks of 64 MiB at
// random places; what an offloading loop's pinned copies do):
//   h2d         pinned host -> the layout
//   d2h         the layout -> pinned host
//   d2d         the layout -> the layout (a copy engine, not a kernel)
//   nvcc -O3 -std=c++17 -arch=sm_90 bench/probes/page_layout_probe.cu -lcuda -o /tmp/plp && /tmp/plp [GiB]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "probe_util.hpp"

__global__ void stream_sum(const float4* p, size_t n, float* out) {
  float acc = 0.f;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    float4 v = p[i];
    acc += v.x + v.y + v.z + v.w;
  }
  if (acc == 12345.f) *out = acc;  // keeps the loads
}

// Each warp copies one 256-byte row (64 floats) from a random row of src.
__global__ void gather_rows(const float* src, size_t rows, const uint32_t* idx, size_t n, float* dst) {
  size_t w = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) / 32;
  unsigned lane = threadIdx.x % 32;
  for (; w < n; w += (size_t)gridDim.x * blockDim.x / 32) {
    const float* r = src + (size_t)(idx[w] % rows) * 64;
    float2 v = reinterpret_cast<const float2*>(r)[lane];
    reinterpret_cast<float2*>(dst + (w % 4096) * 64)[lane] = v;
  }
}

__global__ void copy4(const float4* a, float4* b, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    b[i] = a[i];
}

struct Layout {
  std::string name;
  CUdeviceptr va = 0;
  size_t size = 0;
  std::vector<CUmemGenericAllocationHandle> handles;
  bool malloced = false;
};

static Layout make(const ProbeDevice& d, const std::string& name, size_t size, size_t handle, bool shuffle,
                   std::mt19937_64& rng) {
  Layout L;
  L.name = name;
  L.size = size;
  if (handle == 0) {
    CK(cuMemAlloc(&L.va, size));
    L.malloced = true;
    return L;
  }
  CK(cuMemAddressReserve(&L.va, size, 0, 0, 0));
  size_t n = size / handle;
  L.handles.resize(n);
  for (size_t i = 0; i < n; ++i) CK(cuMemCreate(&L.handles[i], handle, &d.prop, 0));
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  if (shuffle) std::shuffle(order.begin(), order.end(), rng);
  for (size_t i = 0; i < n; ++i) CK(cuMemMap(L.va + i * handle, handle, 0, L.handles[order[i]], 0));
  CK(cuMemSetAccess(L.va, size, &d.acc, 1));
  return L;
}

static void drop(Layout& L) {
  if (L.malloced) {
    CK(cuMemFree(L.va));
    return;
  }
  CK(cuMemUnmap(L.va, L.size));
  for (auto h : L.handles) CK(cuMemRelease(h));
  CK(cuMemAddressFree(L.va, L.size));
}

template <class F>
static double median_us(int reps, F launch) {
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  launch();  // warm
  cudaDeviceSynchronize();
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    cudaEventRecord(a);
    launch();
    cudaEventRecord(b);
    cudaEventSynchronize(b);
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    t.push_back(ms * 1000.0);
  }
  std::sort(t.begin(), t.end());
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return t[t.size() / 2];
}

int main(int argc, char** argv) {
  const size_t gib = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 8;
  const size_t size = gib << 30;
  const int reps = 15;
  ProbeDevice d = probe_device();
  cudaFree(nullptr);  // the runtime on the primary context
  std::mt19937_64 rng(7);
  const size_t n_gather = 16u << 20;
  uint32_t* idx = nullptr;
  float *out = nullptr, *dst = nullptr;
  cudaMalloc(&idx, n_gather * sizeof(uint32_t));
  cudaMalloc(&out, sizeof(float));
  cudaMalloc(&dst, 4096 * 64 * sizeof(float));
  {
    std::vector<uint32_t> h(n_gather);
    for (auto& x : h) x = static_cast<uint32_t>(rng());
    cudaMemcpy(idx, h.data(), h.size() * sizeof(uint32_t), cudaMemcpyHostToDevice);
  }
  const size_t mid = 32u << 20, n_mid = 64;
  std::vector<size_t> mid_at(n_mid);
  for (auto& o : mid_at) o = (rng() % (size / mid)) * mid;

  struct Spec { const char* name; size_t handle; bool shuffle; };
  const Spec specs[] = {{"malloc", 0, false}, {"one", size, false}, {"64m", 64u << 20, false},
                        {"2m", d.page, false}, {"2m-shuffle", d.page, true}};
  std::printf("page_layout_probe: %zu GiB, %d reps, medians in us\n", gib, reps);
  const size_t chunk = 64u << 20, n_chunk = 16;
  std::vector<size_t> chunk_at(n_chunk + 1);
  for (auto& o : chunk_at) o = (rng() % (size / chunk)) * chunk;
  void* pinned = nullptr;
  if (cudaMallocHost(&pinned, chunk * n_chunk) != cudaSuccess) {
    std::printf("FAILED cudaMallocHost of %zu MiB\n", (chunk * n_chunk) >> 20);
    return 1;
  }
  std::printf("%-11s %10s %10s %12s %10s %10s %10s\n", "layout", "stream", "gather", "scatter-mid", "h2d", "d2h",
              "d2d");
  // Two passes, the layouts alternating, to see the run-to-run spread.
  for (int pass = 0; pass < 2; ++pass) {
    for (const Spec& s : specs) {
      Layout L = make(d, s.name, size, s.handle, s.shuffle, rng);
      cudaMemset(reinterpret_cast<void*>(L.va), 0, size);
      cudaDeviceSynchronize();
      double t_stream = median_us(reps, [&] {
        stream_sum<<<132 * 8, 256>>>(reinterpret_cast<const float4*>(L.va), size / 16, out);
      });
      double t_gather = median_us(reps, [&] {
        gather_rows<<<132 * 8, 256>>>(reinterpret_cast<const float*>(L.va), size / 256, idx, n_gather, dst);
      });
      double t_mid = median_us(reps, [&] {
        for (size_t k = 0; k + 1 < n_mid; ++k)
          copy4<<<132 * 4, 256>>>(reinterpret_cast<const float4*>(L.va + mid_at[k]),
                                  reinterpret_cast<float4*>(L.va + mid_at[k + 1]), mid / 16);
      });
      auto at = [&](size_t k) { return reinterpret_cast<char*>(L.va + chunk_at[k]); };
      auto host = [&](size_t k) { return static_cast<char*>(pinned) + k * chunk; };
      double t_h2d = median_us(reps, [&] {
        for (size_t k = 0; k < n_chunk; ++k) cudaMemcpyAsync(at(k), host(k), chunk, cudaMemcpyHostToDevice);
      });
      double t_d2h = median_us(reps, [&] {
        for (size_t k = 0; k < n_chunk; ++k) cudaMemcpyAsync(host(k), at(k), chunk, cudaMemcpyDeviceToHost);
      });
      double t_d2d = median_us(reps, [&] {
        for (size_t k = 0; k < n_chunk; ++k) cudaMemcpyAsync(at(k + 1), at(k), chunk, cudaMemcpyDeviceToDevice);
      });
      cudaError_t e = cudaGetLastError();
      std::printf("%-11s %10.1f %10.1f %12.1f %10.1f %10.1f %10.1f%s\n", s.name, t_stream, t_gather, t_mid, t_h2d,
                  t_d2h, t_d2d, e == cudaSuccess ? "" : cudaGetErrorString(e));
      drop(L);
    }
  }
  cudaFreeHost(pinned);
  return 0;
}
