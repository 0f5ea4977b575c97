// Copies through pool memory made of many physical handles, under every
// handle policy: what a framework does to a tensor the moment it has one
// (parameters copied in from pageable host memory, results copied out,
// device-to-device clones, memsets), on spans that were freshly grown and on
// spans assembled by Phase 2 from remapped handles (with the old VAs still
// mapped as zombies, and after they were reaped).
//
// Each copy goes through the CUDA runtime exactly as PyTorch's would:
// cudaMemcpy (pageable and pinned), cudaMemcpyAsync on a non-blocking
// stream, cudaMemset, and kernels; every byte is checked, on the device by a
// kernel and on the host after a copy back. A copy that starts or ends in
// the middle of a handle and crosses several handle boundaries is the
// interesting case: the runtime must treat the range as one allocation.
#include "gpu_util.cuh"

namespace {
using gt::MiB;
constexpr uint64_t kPage = 2 * MiB;

struct Policy {
  const char* name;
  uint64_t max_handle;  // vpmm_config.max_handle_size; UINT64_MAX: leave the library default
};
const Policy kPolicies[] = {
    {"default", UINT64_MAX},
    {"growth handles (0)", 0},
    {"32 MiB cap", 32 * MiB},
    {"page handles", kPage},
};

vpmm_pool* make(const Policy& pol) {
  vpmm_config c;
  vpmm_config_init(&c);
  c.backend = VPMM_BACKEND_CUDA;
  c.device = 0;
  if (pol.max_handle != UINT64_MAX) c.max_handle_size = pol.max_handle;
  vpmm_pool* p = nullptr;
  vpmm_status st = vpmm_pool_create(&c, &p);
  if (st != VPMM_OK) std::printf("  vpmm_pool_create: %s: %s\n", vpmm_status_string(st), vpmm_last_error());
  return p;
}

std::vector<uint8_t> host_pattern(uint64_t n, uint64_t seed) {
  std::vector<uint8_t> v(n);
  for (uint64_t i = 0; i < n; ++i) v[i] = gt::byte_pattern(seed, i);
  return v;
}

// Counts bytes of [p, p+n) that differ from the pattern, on the device.
unsigned long long device_mismatches(const void* p, uint64_t n, uint64_t seed, cudaStream_t s) {
  gt::Counters bad(1);
  gt::verify_bytes(p, n, seed, &bad.d[0], s);
  CUDA_OK(cudaStreamSynchronize(s));
  return bad.h[0];
}

uint64_t host_mismatches(const std::vector<uint8_t>& v, uint64_t seed) {
  uint64_t bad = 0;
  for (uint64_t i = 0; i < v.size(); ++i) bad += v[i] != gt::byte_pattern(seed, i);
  return bad;
}

// Every kind of copy into and out of [dst, dst+n), which lies in pool memory.
// `what` names the span in messages.
void copy_matrix(void* dst, uint64_t n, void* other, const char* what, cudaStream_t s) {
  const uint64_t seed = n ^ reinterpret_cast<uint64_t>(dst);
  std::vector<uint8_t> src = host_pattern(n, seed);
  // 1. cudaMemcpy from pageable memory (model.cuda() does this).
  CUDA_OK(cudaMemset(dst, 0, n));
  cudaError_t e = cudaMemcpy(dst, src.data(), n, cudaMemcpyHostToDevice);
  CHECK_MSG(e == cudaSuccess, "%s: cudaMemcpy H2D pageable of %llu bytes: %s", what,
            (unsigned long long)n, cudaGetErrorString(e));
  CHECK_EQ(device_mismatches(dst, n, seed, s), 0ull);
  // 2. cudaMemcpy back to pageable memory.
  std::vector<uint8_t> back(n, 0);
  e = cudaMemcpy(back.data(), dst, n, cudaMemcpyDeviceToHost);
  CHECK_MSG(e == cudaSuccess, "%s: cudaMemcpy D2H pageable: %s", what, cudaGetErrorString(e));
  CHECK_EQ(host_mismatches(back, seed), uint64_t(0));
  // 3. cudaMemcpyAsync from and to pinned memory on a non-blocking stream.
  uint8_t* pinned = nullptr;
  CUDA_OK(cudaHostAlloc(reinterpret_cast<void**>(&pinned), n, cudaHostAllocDefault));
  if (pinned) {
    std::memcpy(pinned, src.data(), n);
    CUDA_OK(cudaMemsetAsync(dst, 0, n, s));
    e = cudaMemcpyAsync(dst, pinned, n, cudaMemcpyHostToDevice, s);
    CHECK_MSG(e == cudaSuccess, "%s: cudaMemcpyAsync H2D pinned: %s", what, cudaGetErrorString(e));
    CHECK_EQ(device_mismatches(dst, n, seed, s), 0ull);
    std::memset(pinned, 0, n);
    e = cudaMemcpyAsync(pinned, dst, n, cudaMemcpyDeviceToHost, s);
    CHECK_MSG(e == cudaSuccess, "%s: cudaMemcpyAsync D2H pinned: %s", what, cudaGetErrorString(e));
    CUDA_OK(cudaStreamSynchronize(s));
    CHECK_EQ(host_mismatches(std::vector<uint8_t>(pinned, pinned + n), seed), uint64_t(0));
    // 4. cudaMemcpyAsync from pageable memory on a stream (staged by the runtime).
    CUDA_OK(cudaMemsetAsync(dst, 0, n, s));
    e = cudaMemcpyAsync(dst, src.data(), n, cudaMemcpyHostToDevice, s);
    CHECK_MSG(e == cudaSuccess, "%s: cudaMemcpyAsync H2D pageable: %s", what, cudaGetErrorString(e));
    CHECK_EQ(device_mismatches(dst, n, seed, s), 0ull);
    cudaFreeHost(pinned);
  }
  // 5. Device to device, both ways, synchronous and on the stream.
  if (other) {
    CUDA_OK(cudaMemset(other, 0, n));
    e = cudaMemcpy(other, dst, n, cudaMemcpyDeviceToDevice);
    CHECK_MSG(e == cudaSuccess, "%s: cudaMemcpy D2D out: %s", what, cudaGetErrorString(e));
    CHECK_EQ(device_mismatches(other, n, seed, s), 0ull);
    CUDA_OK(cudaMemsetAsync(dst, 0, n, s));
    e = cudaMemcpyAsync(dst, other, n, cudaMemcpyDeviceToDevice, s);
    CHECK_MSG(e == cudaSuccess, "%s: cudaMemcpyAsync D2D in: %s", what, cudaGetErrorString(e));
    CHECK_EQ(device_mismatches(dst, n, seed, s), 0ull);
  }
  // 6. A kernel writes, the host reads back through a copy.
  gt::fill_bytes(dst, n, seed + 1, s);
  CUDA_OK(cudaStreamSynchronize(s));
  e = cudaMemcpy(back.data(), dst, n, cudaMemcpyDeviceToHost);
  CHECK_MSG(e == cudaSuccess, "%s: cudaMemcpy D2H after a kernel: %s", what, cudaGetErrorString(e));
  CHECK_EQ(host_mismatches(back, seed + 1), uint64_t(0));
  // 7. A window that starts mid-handle and crosses several handle boundaries.
  if (n > 3 * kPage) {
    uint64_t off = kPage - 4096 + 3, len = n - kPage - 8191;
    std::vector<uint8_t> win = host_pattern(len, seed + 2);
    e = cudaMemcpy(static_cast<uint8_t*>(dst) + off, win.data(), len, cudaMemcpyHostToDevice);
    CHECK_MSG(e == cudaSuccess, "%s: cudaMemcpy H2D of an unaligned window: %s", what, cudaGetErrorString(e));
    CHECK_EQ(device_mismatches(static_cast<uint8_t*>(dst) + off, len, seed + 2, s), 0ull);
  }
}

void fresh_growth(const Policy& pol) {
  vpmm_pool* p = make(pol);
  CHECK(p != nullptr);
  if (!p) return;
  cudaStream_t s = gt::new_stream();
  const uint64_t n = 40 * MiB + 12345;  // a ragged size: the last page is partly used
  void *a = nullptr, *b = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, n, s, &a));
  CHECK_OK(vpmm_pool_malloc(p, n, s, &b));
  vpmm_stats st = gt::stats(p);
  std::printf("  %s: two fresh %llu-byte spans, %llu handle(s): %s\n", pol.name, (unsigned long long)n,
              (unsigned long long)st.handles, gt::layout(p).c_str());
  if (a && b) copy_matrix(a, n, b, "fresh span", s);
  CHECK_OK(vpmm_pool_free(p, a, s));
  CHECK_OK(vpmm_pool_free(p, b, s));
  CHECK(gt::check_pool(p, "end"));
  CHECK_OK(vpmm_pool_destroy(p));
  cudaStreamDestroy(s);
}

// A span assembled by Phase 2: [-16][1] then malloc(24 pages) moves the 16
// free pages into a hole and grows 8. While a gated kernel holds the freeing
// stream, the old VA stays mapped (a zombie): copies must work on the new VA
// during the double mapping, and after the zombie is reaped.
void remapped_span(const Policy& pol) {
  vpmm_pool* p = make(pol);
  CHECK(p != nullptr);
  if (!p) return;
  cudaStream_t s = gt::new_stream(), t = gt::new_stream();
  gt::Gate gate;
  void *a = nullptr, *b = nullptr, *c = nullptr, *other = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, 16 * kPage, s, &a));
  CHECK_OK(vpmm_pool_malloc(p, kPage, s, &b));
  gt::gate_kernel<<<1, 1, 0, s>>>(gate.flag(), 20ull * 1000 * 1000 * 1000, gate.timeout_flag());
  CHECK_OK(vpmm_pool_free(p, a, s));  // pending: the gate runs on s
  const uint64_t n = 24 * kPage - 777;
  CHECK_OK(vpmm_pool_malloc(p, n, t, &c));  // foreign pending region: Phase 2 waits on the GPU
  vpmm_stats st = gt::stats(p);
  std::printf("  %s: remapped span %s, zombie %llu MiB, remapped %llu MiB\n", pol.name,
              gt::layout(p).c_str(), (unsigned long long)(st.zombie_bytes / MiB),
              (unsigned long long)(st.bytes_remapped / MiB));
  CHECK_OK(vpmm_pool_malloc(p, n, t, &other));
  // t waits on the gate (Phase 2 made it wait on the GPU): copies on the
  // default stream must not deadlock on it, so open the gate first.
  gate.open();
  CUDA_OK(cudaDeviceSynchronize());
  if (c && other) copy_matrix(c, n, other, "remapped span (zombie era)", t);
  // A malloc reaps completed zombies.
  void* d = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, kPage, t, &d));
  st = gt::stats(p);
  CHECK_EQ(st.zombie_bytes, uint64_t(0));
  if (c && other) copy_matrix(c, n, other, "remapped span (reaped)", t);
  CHECK_OK(vpmm_pool_free(p, d, t));
  CHECK_OK(vpmm_pool_free(p, c, t));
  CHECK_OK(vpmm_pool_free(p, other, t));
  CHECK_OK(vpmm_pool_free(p, b, s));
  CHECK(gt::check_pool(p, "end"));
  CUDA_OK(cudaDeviceSynchronize());
  CHECK_OK(vpmm_pool_destroy(p));
  cudaStreamDestroy(s);
  cudaStreamDestroy(t);
}

// Many live tensors of ragged sizes carved from freed memory: the layout a
// model's parameters get after an earlier, larger allocation was freed.
void carved_tensors(const Policy& pol) {
  vpmm_pool* p = make(pol);
  CHECK(p != nullptr);
  if (!p) return;
  cudaStream_t s = gt::new_stream();
  void* big = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, 256 * MiB, s, &big));
  CHECK_OK(vpmm_pool_free(p, big, s));
  std::vector<void*> ts;
  std::vector<uint64_t> sizes;
  for (int i = 0; i < 24; ++i) {
    uint64_t n = (3 + (i * 7) % 11) * MiB + 4096 * i + 512;
    void* q = nullptr;
    CHECK_OK(vpmm_pool_malloc(p, n, s, &q));
    if (!q) break;
    ts.push_back(q);
    sizes.push_back(n);
  }
  std::printf("  %s: %zu carved tensors: %s\n", pol.name, ts.size(), gt::layout(p).c_str());
  for (size_t i = 0; i + 1 < ts.size(); i += 2) copy_matrix(ts[i], sizes[i], nullptr, "carved tensor", s);
  for (void* q : ts) CHECK_OK(vpmm_pool_free(p, q, s));
  CHECK(gt::check_pool(p, "end"));
  CHECK_OK(vpmm_pool_destroy(p));
  cudaStreamDestroy(s);
}

}  // namespace

GPU_TEST("copies: fresh growth, every handle policy") {
  for (const Policy& pol : kPolicies) fresh_growth(pol);
}
GPU_TEST("copies: a span remapped by Phase 2, zombie and reaped, every handle policy") {
  for (const Policy& pol : kPolicies) remapped_span(pol);
}
GPU_TEST("copies: tensors carved from freed memory, every handle policy") {
  for (const Policy& pol : kPolicies) carved_tensors(pol);
}

GPU_TEST_MAIN()
