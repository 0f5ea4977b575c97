// More than one GPU: one default pool per device, pools that share nothing,
// VPMM_DEVICE, and peer access (vpmm_config.peer_devices: kernels and P2P
// copies on device 1 over device 0's pool memory, before and after a
// defragmentation and a pause/resume). Needs two CUDA devices: with fewer it
// prints the reason and exits 77 (SKIP), never passes.
#include <cstdlib>
#include <cstring>

#include "gpu_util.cuh"

namespace {

// Writes then verifies pattern(seed) through `p` with kernels on `device`.
uint64_t bad_words_after_fill(int device, void* p, uint64_t bytes, uint64_t seed, bool fill) {
  CUDA_OK(cudaSetDevice(device));
  unsigned long long* bad = nullptr;
  CUDA_OK(cudaMalloc(&bad, sizeof *bad));  // the real allocator of this device
  CUDA_OK(cudaMemset(bad, 0, sizeof *bad));
  if (fill) gt::fill_kernel<<<256, 256>>>(static_cast<uint64_t*>(p), bytes / 8, seed);
  gt::verify_kernel<<<256, 256>>>(static_cast<const uint64_t*>(p), bytes / 8, seed, bad);
  unsigned long long host = ~0ull;
  CUDA_OK(cudaMemcpy(&host, bad, sizeof host, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaFree(bad));
  return host;
}

int pointer_device(const void* p) {
  cudaPointerAttributes a{};
  return cudaPointerGetAttributes(&a, p) == cudaSuccess && a.type == cudaMemoryTypeDevice ? a.device : -1;
}

}  // namespace

GPU_TEST("one default pool per device, memory on that device") {
  vpmm_pool *p0 = nullptr, *p1 = nullptr;
  CHECK_OK(vpmm_default_pool(0, &p0));
  CHECK_OK(vpmm_default_pool(1, &p1));
  CHECK(p0 && p1 && p0 != p1);
  vpmm_pool* again = nullptr;
  CHECK_OK(vpmm_default_pool(1, &again));
  CHECK(again == p1);
  void *a = nullptr, *b = nullptr;
  CHECK_OK(vpmm_pool_malloc(p0, 64 * gt::MiB, nullptr, &a));
  CUDA_OK(cudaSetDevice(1));
  CHECK_OK(vpmm_pool_malloc(p1, 64 * gt::MiB, nullptr, &b));
  CHECK_EQ(pointer_device(a), 0);
  CHECK_EQ(pointer_device(b), 1);
  CHECK_EQ(bad_words_after_fill(0, a, 64 * gt::MiB, 11, true), 0ull);
  CHECK_EQ(bad_words_after_fill(1, b, 64 * gt::MiB, 12, true), 0ull);
  CHECK(vpmm_pool_lookup(p0, b, nullptr, nullptr) == VPMM_ERR_UNKNOWN_POINTER);
  CHECK(vpmm_pool_lookup(p1, a, nullptr, nullptr) == VPMM_ERR_UNKNOWN_POINTER);
  CHECK_OK(vpmm_pool_free(p0, a, nullptr));
  CUDA_OK(cudaSetDevice(1));
  CHECK_OK(vpmm_pool_free(p1, b, nullptr));
  CUDA_OK(cudaSetDevice(0));
}

GPU_TEST("pausing a tag on device 1 leaves device 0's pool alone") {
  vpmm_config c;
  vpmm_config_init(&c);
  c.backend = VPMM_BACKEND_CUDA;
  vpmm_pool *p0 = nullptr, *p1 = nullptr;
  c.device = 0;
  CHECK_OK(vpmm_pool_create(&c, &p0));
  c.device = 1;
  CHECK_OK(vpmm_pool_create(&c, &p1));
  if (!p0 || !p1) return;
  vpmm_alloc_attrs attrs{};
  attrs.struct_size = sizeof attrs;
  attrs.flags = VPMM_ALLOC_HOST_BACKUP;
  attrs.tag = "kv";
  void *a = nullptr, *b = nullptr;
  CHECK_OK(vpmm_pool_malloc_ex(p0, 32 * gt::MiB, nullptr, &attrs, &a));
  CUDA_OK(cudaSetDevice(1));
  CHECK_OK(vpmm_pool_malloc_ex(p1, 32 * gt::MiB, nullptr, &attrs, &b));
  CHECK_EQ(bad_words_after_fill(0, a, 32 * gt::MiB, 21, true), 0ull);
  CHECK_EQ(bad_words_after_fill(1, b, 32 * gt::MiB, 22, true), 0ull);
  const uint64_t mapped0 = gt::stats(p0).mapped_bytes;
  uint64_t n = 0;
  CHECK_OK(vpmm_pool_pause_ex(p1, "kv", &n));
  CHECK_EQ(n, 1ull);
  CHECK_EQ(gt::stats(p0).mapped_bytes, mapped0);  // the same tag on device 0 is untouched
  CHECK_EQ(gt::stats(p0).paused_bytes, 0ull);
  CHECK_EQ(bad_words_after_fill(0, a, 32 * gt::MiB, 21, false), 0ull);
  CHECK_OK(vpmm_pool_resume_ex(p1, "kv", &n));
  CHECK_EQ(n, 1ull);
  CHECK_EQ(bad_words_after_fill(1, b, 32 * gt::MiB, 22, false), 0ull);
  CHECK_EQ(pointer_device(b), 1);
  CHECK_OK(vpmm_pool_check(p0));
  CHECK_OK(vpmm_pool_check(p1));
  CHECK_OK(vpmm_pool_destroy(p1));
  CHECK_OK(vpmm_pool_destroy(p0));
  CUDA_OK(cudaSetDevice(0));
}

GPU_TEST("VPMM_DEVICE selects the device of vpmm_config_init") {
  setenv("VPMM_DEVICE", "1", 1);
  vpmm_config c;
  vpmm_config_init(&c);
  unsetenv("VPMM_DEVICE");
  CHECK_EQ(c.device, 1);
  c.backend = VPMM_BACKEND_CUDA;
  vpmm_pool* p = nullptr;
  CHECK_OK(vpmm_pool_create(&c, &p));
  if (!p) return;
  vpmm_config got{};
  got.struct_size = sizeof got;
  CHECK_OK(vpmm_pool_get_config(p, &got));
  CHECK_EQ(got.device, 1);
  void* x = nullptr;
  CUDA_OK(cudaSetDevice(1));
  CHECK_OK(vpmm_pool_malloc(p, 8 * gt::MiB, nullptr, &x));
  CHECK_EQ(pointer_device(x), 1);
  CHECK_EQ(bad_words_after_fill(1, x, 8 * gt::MiB, 31, true), 0ull);
  CHECK_OK(vpmm_pool_free(p, x, nullptr));
  CHECK_OK(vpmm_pool_destroy(p));
  CUDA_OK(cudaSetDevice(0));
}

GPU_TEST("peer_devices: device 1 reads and writes device 0's pool across remap and resume") {
  int can = 0;
  CUDA_OK(cudaDeviceCanAccessPeer(&can, 1, 0));
  if (!can) {
    std::printf("  (devices 0 and 1 have no P2P path: checking that pool creation says so)\n");
  }
  vpmm_config c;
  vpmm_config_init(&c);
  c.backend = VPMM_BACKEND_CUDA;
  c.device = 0;
  c.peer_devices = 1ull << 1;
  c.max_handle_size = 2 * gt::MiB;  // page handles: the remap below moves single pages
  vpmm_pool* p = nullptr;
  vpmm_status st = vpmm_pool_create(&c, &p);
  if (!can) {
    CHECK_EQ(st, VPMM_ERR_UNSUPPORTED);
    CHECK(std::strstr(vpmm_last_error(), "cannot access") != nullptr);
    return;
  }
  CHECK_OK(st);
  if (!p) return;
  // Fragment, so that the next malloc remaps: [a][x][b] with a and b freed.
  void *a = nullptr, *x = nullptr, *b = nullptr, *span = nullptr, *keep = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, 8 * gt::MiB, nullptr, &a));
  CHECK_OK(vpmm_pool_malloc(p, 2 * gt::MiB, nullptr, &x));
  CHECK_OK(vpmm_pool_malloc(p, 8 * gt::MiB, nullptr, &b));
  CHECK_EQ(bad_words_after_fill(1, a, 8 * gt::MiB, 41, true), 0ull);  // a kernel on the peer
  CHECK_OK(vpmm_pool_free(p, a, nullptr));
  CHECK_OK(vpmm_pool_free(p, b, nullptr));
  CUDA_OK(cudaSetDevice(0));
  CUDA_OK(cudaDeviceSynchronize());
  const uint64_t remapped = gt::stats(p).bytes_remapped;
  CHECK_OK(vpmm_pool_malloc(p, 16 * gt::MiB, nullptr, &span));  // harvests a and b
  CHECK(gt::stats(p).bytes_remapped > remapped);
  CHECK_EQ(bad_words_after_fill(1, span, 16 * gt::MiB, 42, true), 0ull);  // remapped pages
  // A P2P copy from device 1 into the remapped span, read back on device 0.
  CUDA_OK(cudaSetDevice(1));
  void* peer_buf = nullptr;
  CUDA_OK(cudaMalloc(&peer_buf, 16 * gt::MiB));
  gt::fill_kernel<<<256, 256>>>(static_cast<uint64_t*>(peer_buf), 16 * gt::MiB / 8, 43);
  CUDA_OK(cudaDeviceSynchronize());
  CUDA_OK(cudaMemcpyPeer(span, 0, peer_buf, 1, 16 * gt::MiB));
  CHECK_EQ(bad_words_after_fill(0, span, 16 * gt::MiB, 43, false), 0ull);
  CUDA_OK(cudaSetDevice(1));
  CUDA_OK(cudaFree(peer_buf));
  // Pause with backup and resume: fresh handles at the same VA, access granted again.
  vpmm_alloc_attrs attrs{};
  attrs.struct_size = sizeof attrs;
  attrs.flags = VPMM_ALLOC_HOST_BACKUP;
  attrs.tag = "peer";
  CUDA_OK(cudaSetDevice(0));
  CHECK_OK(vpmm_pool_malloc_ex(p, 8 * gt::MiB, nullptr, &attrs, &keep));
  CHECK_EQ(bad_words_after_fill(1, keep, 8 * gt::MiB, 44, true), 0ull);
  CUDA_OK(cudaSetDevice(0));
  CUDA_OK(cudaDeviceSynchronize());
  uint64_t n = 0;
  CHECK_OK(vpmm_pool_pause_ex(p, "peer", &n));
  CHECK_EQ(n, 1ull);
  CHECK_OK(vpmm_pool_resume_ex(p, "peer", &n));
  CHECK_EQ(n, 1ull);
  CHECK_EQ(bad_words_after_fill(1, keep, 8 * gt::MiB, 44, false), 0ull);  // restored, readable on the peer
  CUDA_OK(cudaSetDevice(0));
  CHECK_OK(vpmm_pool_free(p, keep, nullptr));
  CHECK_OK(vpmm_pool_free(p, span, nullptr));
  CHECK_OK(vpmm_pool_free(p, x, nullptr));
  CUDA_OK(cudaDeviceSynchronize());
  CHECK_OK(vpmm_pool_check(p));
  CHECK_OK(vpmm_pool_destroy(p));
}

GPU_TEST("peer_devices naming the pool's own device or a missing one is refused") {
  int n = 0;
  CUDA_OK(cudaGetDeviceCount(&n));
  vpmm_config c;
  vpmm_config_init(&c);
  c.backend = VPMM_BACKEND_CUDA;
  c.device = 0;
  c.peer_devices = 1ull << 0;  // itself
  vpmm_pool* p = nullptr;
  CHECK_EQ(vpmm_pool_create(&c, &p), VPMM_ERR_INVALID_ARGUMENT);
  CHECK(std::strstr(vpmm_last_error(), "own device") != nullptr);
  if (n < 64) {
    c.peer_devices = 1ull << 63;  // no such device
    CHECK_EQ(vpmm_pool_create(&c, &p), VPMM_ERR_INVALID_ARGUMENT);
    CHECK(std::strstr(vpmm_last_error(), "does not exist") != nullptr);
  }
  CHECK(p == nullptr);
}

int main(int argc, char** argv) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n < 2) {
    std::printf("SKIP: needs two CUDA devices, found %d\n", n);
    return 77;
  }
  return gt::run_all(argc, argv);
}
