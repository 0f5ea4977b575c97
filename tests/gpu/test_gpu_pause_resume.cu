// Pause/resume on the H100: kernels write and verify the data, the driver
// sees the memory come back (cudaMemGetInfo), addresses stay the same, out of
// memory in the middle of a resume leaves the rest paused with intact
// backups, and a pause never waits for unrelated streams.
#include <chrono>
#include <thread>
#include <vector>

#include "gpu_util.cuh"

using namespace gt;

namespace {

vpmm_pool* pool_with_limit(uint64_t limit) {
  vpmm_config c;
  vpmm_config_init(&c);
  c.backend = VPMM_BACKEND_CUDA;
  c.memory_limit = limit;
  vpmm_pool* p = nullptr;
  vpmm_status st = vpmm_pool_create(&c, &p);
  if (st != VPMM_OK) std::printf("  create: %s\n", vpmm_last_error());
  return p;
}

void* tagged(vpmm_pool* p, uint64_t size, const char* tag, uint32_t flags, cudaStream_t s = nullptr) {
  vpmm_alloc_attrs a;
  std::memset(&a, 0, sizeof a);
  a.struct_size = sizeof a;
  a.tag = tag;
  a.flags = flags;
  void* out = nullptr;
  vpmm_status st = vpmm_pool_malloc_ex(p, size, s, &a, &out);
  if (st != VPMM_OK) std::printf("  malloc_ex(%llu): %s\n", (unsigned long long)size, vpmm_last_error());
  return out;
}

uint64_t device_free() {
  size_t f = 0, t = 0;
  cudaMemGetInfo(&f, &t);
  return f;
}

// What the pool controls is asserted exactly (its mapped bytes and handles);
// the driver's own free count is only asked to move by as much give or take
// this: the driver keeps bookkeeping of its own in device memory and moves
// it as it likes between two readings (seen: a pause that released 1026 MiB
// showed 1022 MiB more free on a two-GPU H200, issue 35 item 15).
constexpr uint64_t kDriverSlack = 32 * MiB;

}  // namespace

GPU_TEST("pause with backup: driver sees the memory free; resume restores bytes at the same VA") {
  vpmm_pool* p = pool_with_limit(0);
  CHECK(p != nullptr);
  if (!p) return;
  std::vector<void*> w;
  for (int i = 0; i < 4; ++i) w.push_back(tagged(p, 256 * MiB, "weights", VPMM_ALLOC_HOST_BACKUP));
  void* small = tagged(p, 4096, "weights", VPMM_ALLOC_HOST_BACKUP);
  for (size_t i = 0; i < w.size(); ++i) fill(w[i], 256 * MiB, 10 + i, nullptr);
  fill(small, 4096, 99, nullptr);
  CUDA_OK(cudaDeviceSynchronize());
  Counters bad(8);
  const uint64_t paused = 1024 * MiB + 2 * MiB;  // four 256 MiB handles and the small-object page
  for (int cycle = 0; cycle < 3; ++cycle) {
    const vpmm_stats s0 = stats(p);
    uint64_t before = device_free();
    CHECK_OK(vpmm_pool_pause(p, "weights"));
    uint64_t after = device_free();
    // The pool: exactly the paused bytes unmapped and their handles released.
    const vpmm_stats s1 = stats(p);
    CHECK_EQ(s1.paused_bytes, paused);
    CHECK_EQ(s0.mapped_bytes - s1.mapped_bytes, paused);
    CHECK(s1.handles < s0.handles);  // their handles released, not only unmapped
    CHECK(check_pool(p, "paused"));
    // The driver: that much more free, within its own slack. compute-sanitizer
    // keeps device allocations of its own that move the count too: plain runs only.
    if (!under_sanitizer())
      CHECK_MSG(after + kDriverSlack >= before + paused, "cycle %d: free grew by %llu MiB for %llu MiB released",
                cycle, (unsigned long long)((after - before) >> 20), (unsigned long long)(paused >> 20));
    CHECK_OK(vpmm_pool_resume(p, "weights"));
    CHECK_EQ(stats(p).mapped_bytes, s0.mapped_bytes);
    if (!under_sanitizer()) CHECK(device_free() + paused <= after + kDriverSlack);
    for (size_t i = 0; i < w.size(); ++i) verify(w[i], 256 * MiB, 10 + i, bad.d + i, nullptr);
    verify(small, 4096, 99, bad.d + 7, nullptr);
    CUDA_OK(cudaDeviceSynchronize());
    for (int i = 0; i < 8; ++i) CHECK_EQ(bad.h[i], 0ull);
    void* base = nullptr;
    CHECK_OK(vpmm_pool_lookup(p, static_cast<char*>(w[2]) + 100, &base, nullptr));
    CHECK_EQ(base, w[2]);
  }
  CHECK(check_pool(p, "end"));
  vpmm_pool_destroy(p);
}

GPU_TEST("pause without backup releases memory; resumed memory is usable; free while paused") {
  vpmm_pool* p = pool_with_limit(0);
  if (!p) return;
  void* kv = tagged(p, 512 * MiB, "kv", 0);
  void* gone = tagged(p, 128 * MiB, "kv", 0);
  uint64_t before = device_free();
  const uint64_t mapped = stats(p).mapped_bytes;
  CHECK_OK(vpmm_pool_pause(p, "kv"));
  CHECK_EQ(mapped - stats(p).mapped_bytes, 640 * MiB);
  if (!under_sanitizer()) CHECK(device_free() + kDriverSlack >= before + 640 * MiB);
  CHECK_OK(vpmm_pool_free(p, gone, nullptr));  // VA returned, nothing to restore
  CHECK_EQ(stats(p).paused_bytes, 512 * MiB);
  CHECK_OK(vpmm_pool_resume(p, "kv"));
  Counters bad(1);
  fill(kv, 512 * MiB, 5, nullptr);
  verify(kv, 512 * MiB, 5, bad.d, nullptr);
  CUDA_OK(cudaDeviceSynchronize());
  CHECK_EQ(bad.h[0], 0ull);
  CHECK(check_pool(p, "end"));
  vpmm_pool_destroy(p);
}

GPU_TEST("nested scopes and mixed tags pause independently") {
  vpmm_pool* p = pool_with_limit(0);
  if (!p) return;
  void *a = nullptr, *b = nullptr;
  CHECK_OK(vpmm_region_push("outer", VPMM_ALLOC_HOST_BACKUP));
  CHECK_OK(vpmm_pool_malloc(p, 64 * MiB, nullptr, &a));
  CHECK_OK(vpmm_region_push("inner", VPMM_ALLOC_HOST_BACKUP));
  CHECK_OK(vpmm_pool_malloc(p, 64 * MiB, nullptr, &b));
  CHECK_OK(vpmm_region_pop());
  CHECK_OK(vpmm_region_pop());
  fill(a, 64 * MiB, 1, nullptr);
  fill(b, 64 * MiB, 2, nullptr);
  CUDA_OK(cudaDeviceSynchronize());
  CHECK_OK(vpmm_pool_pause(p, "inner"));
  Counters bad(2);
  verify(a, 64 * MiB, 1, bad.d, nullptr);  // outer still active
  CUDA_OK(cudaDeviceSynchronize());
  CHECK_EQ(bad.h[0], 0ull);
  CHECK_OK(vpmm_pool_pause(p, "outer"));
  CHECK_OK(vpmm_pool_resume(p, nullptr));
  verify(a, 64 * MiB, 1, bad.d, nullptr);
  verify(b, 64 * MiB, 2, bad.d + 1, nullptr);
  CUDA_OK(cudaDeviceSynchronize());
  CHECK_EQ(bad.h[0], 0ull);
  CHECK_EQ(bad.h[1], 0ull);
  vpmm_pool_destroy(p);
}

GPU_TEST("resume out of memory: the rest stays paused with backups; retry restores all") {
  vpmm_pool* p = pool_with_limit(1024 * MiB);
  if (!p) return;
  std::vector<void*> t;
  for (int i = 0; i < 3; ++i) {
    t.push_back(tagged(p, 256 * MiB, "t", VPMM_ALLOC_HOST_BACKUP));
    fill(t.back(), 256 * MiB, 40 + i, nullptr);
  }
  CUDA_OK(cudaDeviceSynchronize());
  CHECK_OK(vpmm_pool_pause(p, "t"));
  void* filler = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, 600 * MiB, nullptr, &filler));  // room for one resume
  CHECK_EQ(vpmm_pool_resume(p, "t"), VPMM_ERR_OUT_OF_MEMORY);
  vpmm_tag_stats ts;
  std::memset(&ts, 0, sizeof ts);
  ts.struct_size = sizeof ts;
  CHECK_OK(vpmm_pool_tag_stats(p, "t", &ts));
  CHECK_EQ(ts.n_live, 1ull);
  CHECK_EQ(ts.n_paused, 2ull);
  CHECK_EQ(ts.backup_bytes, 512 * MiB);
  CHECK(stats(p).mapped_bytes <= 1024 * MiB);
  CHECK(check_pool(p, "partial resume"));
  CHECK_OK(vpmm_pool_free(p, filler, nullptr));
  CHECK_OK(vpmm_pool_resume(p, "t"));
  Counters bad(3);
  for (int i = 0; i < 3; ++i) verify(t[i], 256 * MiB, 40 + i, bad.d + i, nullptr);
  CUDA_OK(cudaDeviceSynchronize());
  for (int i = 0; i < 3; ++i) CHECK_EQ(bad.h[i], 0ull);
  vpmm_pool_destroy(p);
}

GPU_TEST("pause waits for its own stream only, not for a busy unrelated stream") {
  vpmm_pool* p = pool_with_limit(0);
  if (!p) return;
  cudaStream_t mine = new_stream(), other = new_stream();
  void* a = tagged(p, 64 * MiB, "t", VPMM_ALLOC_HOST_BACKUP, mine);
  fill(a, 64 * MiB, 7, mine);
  Gate gate;
  gate_kernel<<<1, 1, 0, other>>>(gate.flag(), 5000000000ull, gate.timeout_flag());  // busy until opened
  // The gate is the check: a pause that waited for `other` could only
  // return once the gate kernel gave up, which timed_out() reports. The
  // time is information, not a bound.
  double t0 = now_ms();
  CHECK_OK(vpmm_pool_pause(p, "t"));
  std::printf("INFO: pause took %.1f ms while an unrelated stream was busy\n", now_ms() - t0);
  gate.open();
  CUDA_OK(cudaStreamSynchronize(other));
  CHECK_MSG(!gate.timed_out(), "the gate timed out: pause waited for the unrelated stream");
  CHECK_OK(vpmm_pool_resume(p, "t"));
  Counters bad(1);
  verify(a, 64 * MiB, 7, bad.d, mine);
  CUDA_OK(cudaStreamSynchronize(mine));
  CHECK_EQ(bad.h[0], 0ull);
  CHECK_OK(vpmm_pool_free(p, a, mine));
  vpmm_pool_destroy(p);
  cudaStreamDestroy(mine);
  cudaStreamDestroy(other);
}

GPU_TEST("pipelined pause/resume: 600 allocations, work still queued at pause, backed and unbacked") {
  // 512 x 2 MiB with backups are 16 pipeline batches of 64 MiB; 64 more of
  // the same tag without backup; 24 small ones share slabs. The pattern is
  // written behind a 100 ms kernel on the allocations' stream, so every
  // batch of copies must wait for that stream on the GPU.
  vpmm_pool* p = pool_with_limit(0);
  if (!p) return;
  cudaStream_t s = new_stream();
  std::vector<void*> backed, plain, small;
  for (int i = 0; i < 512; ++i) backed.push_back(tagged(p, 2 * MiB, "pipe", VPMM_ALLOC_HOST_BACKUP, s));
  for (int i = 0; i < 64; ++i) plain.push_back(tagged(p, 2 * MiB, "pipe", 0, s));
  for (int i = 0; i < 24; ++i) small.push_back(tagged(p, 8192, "pipe", VPMM_ALLOC_HOST_BACKUP, s));
  for (void* x : backed) CHECK(x != nullptr);
  for (void* x : small) CHECK(x != nullptr);
  sleep_kernel<<<1, 1, 0, s>>>(100000000ull);
  for (size_t i = 0; i < backed.size(); ++i) fill(backed[i], 2 * MiB, 1000 + i, s);
  for (size_t i = 0; i < small.size(); ++i) fill(small[i], 8192, 5000 + i, s);
  uint64_t live = stats(p).live_bytes;
  for (int cycle = 0; cycle < 2; ++cycle) {
    CHECK_OK(vpmm_pool_pause(p, "pipe"));
    vpmm_tag_stats ts;
    std::memset(&ts, 0, sizeof ts);
    ts.struct_size = sizeof ts;
    CHECK_OK(vpmm_pool_tag_stats(p, "pipe", &ts));
    CHECK_EQ(ts.n_live, 0ull);
    CHECK_EQ(ts.paused_bytes, live);
    CHECK_EQ(ts.backup_bytes, live - 64 * 2 * MiB);
    CHECK(check_pool(p, "paused"));
    CHECK_OK(vpmm_pool_resume(p, "pipe"));
    CHECK(check_pool(p, "resumed"));
    Counters bad(2);
    for (size_t i = 0; i < backed.size(); ++i) verify(backed[i], 2 * MiB, 1000 + i, bad.d, s);
    for (size_t i = 0; i < small.size(); ++i) verify(small[i], 8192, 5000 + i, bad.d + 1, s);
    for (void* x : plain) fill(x, 2 * MiB, 7, s);  // unbacked: writable again
    CUDA_OK(cudaStreamSynchronize(s));
    CHECK_MSG(bad.h[0] == 0 && bad.h[1] == 0, "cycle %d: %llu + %llu words differ", cycle, bad.h[0],
              bad.h[1]);
  }
  for (void* x : backed) CHECK_OK(vpmm_pool_free(p, x, s));
  for (void* x : plain) CHECK_OK(vpmm_pool_free(p, x, s));
  for (void* x : small) CHECK_OK(vpmm_pool_free(p, x, s));
  vpmm_pool_destroy(p);
  cudaStreamDestroy(s);
}

GPU_TEST("pinned limit: backups past it go to pageable memory and come back intact") {
  vpmm_config c;
  vpmm_config_init(&c);
  c.backend = VPMM_BACKEND_CUDA;
  c.backup_pinned_limit = 300 * MiB;  // one 256 MiB backup fits, the other three do not
  vpmm_pool* p = nullptr;
  CHECK_OK(vpmm_pool_create(&c, &p));
  if (!p) return;
  std::vector<void*> w;
  for (int i = 0; i < 4; ++i) {
    w.push_back(tagged(p, 256 * MiB, "w", VPMM_ALLOC_HOST_BACKUP));
    fill(w.back(), 256 * MiB, 60 + i, nullptr);
  }
  CUDA_OK(cudaDeviceSynchronize());
  for (int cycle = 0; cycle < 2; ++cycle) {
    double t0 = now_ms();
    CHECK_OK(vpmm_pool_pause(p, "w"));
    double t1 = now_ms();
    vpmm_stats st = stats(p);
    CHECK_EQ(st.backup_pinned_bytes, 256 * MiB);
    CHECK_EQ(st.backup_pageable_bytes, 768 * MiB);
    CHECK_OK(vpmm_pool_resume(p, "w"));
    double t2 = now_ms();
    std::printf("  cycle %d: pause %.1f ms, resume %.1f ms (1 GiB, 3/4 pageable)\n", cycle, t1 - t0, t2 - t1);
    CHECK_EQ(stats(p).backup_pageable_bytes, 0ull);
    Counters bad(4);
    for (int i = 0; i < 4; ++i) verify(w[i], 256 * MiB, 60 + i, bad.d + i, nullptr);
    CUDA_OK(cudaDeviceSynchronize());
    for (int i = 0; i < 4; ++i) CHECK_EQ(bad.h[i], 0ull);
  }
  vpmm_pool_destroy(p);
}

// A kernel on stream B still reads a small block when B frees it; its slab
// (tag "w", allocated on the default stream) is then paused. The pause must
// wait for B's kernel before it unmaps the slab: the kernel finishes with the
// right bytes, no illegal address, and only then does the pause return.
GPU_TEST("pause of a slab waits for a kernel on another stream that still uses a freed block") {
  for (uint32_t flags : {0u, VPMM_ALLOC_HOST_BACKUP}) {
    vpmm_pool* p = pool_with_limit(0);
    CHECK(p != nullptr);
    if (!p) return;
    cudaStream_t B = new_stream();
    void* keep = tagged(p, 4096, "w", flags);
    void* used = tagged(p, 64 << 10, "w", flags);
    CHECK(keep && used);
    fill(used, 64 << 10, 41, nullptr);
    CUDA_OK(cudaDeviceSynchronize());
    Gate gate;
    Counters bad(1);
    gated_verify_kernel<<<1, 256, 0, B>>>(gate.flag(), 5ull * 1000 * 1000 * 1000, gate.timeout_flag(),
                                         static_cast<const uint64_t*>(used), (64 << 10) / 8, 41,
                                         &bad.d[0], gate.done_dev(0));
    CHECK_OK(vpmm_pool_free(p, used, B));  // B's kernel may still read the block
    std::thread opener([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      gate.open();
    });
    uint64_t n = 0;
    CHECK_OK(vpmm_pool_pause_ex(p, "w", &n));
    CHECK_MSG(gate.done_host(0) == 1, "the pause returned before B's kernel finished (flags %u)", flags);
    opener.join();
    CUDA_OK(cudaStreamSynchronize(B));  // an illegal address would surface here
    CHECK_EQ(n, uint64_t(2));  // the two blocks' size classes: two slabs
    CHECK(!gate.timed_out());
    CHECK_EQ(bad.h[0], 0ull);
    CHECK_OK(vpmm_pool_resume(p, "w"));
    CHECK_OK(vpmm_pool_free(p, keep, nullptr));
    CHECK(check_pool(p, "end"));
    CHECK_OK(vpmm_pool_destroy(p));
    cudaStreamDestroy(B);
  }
}

GPU_TEST_MAIN()
