// What sharing pool memory between processes costs on one GPU (docs/ipc.md):
//  1. handles: cuMemCreate / cuMemRelease with and without the POSIX
//     file-descriptor handle type (requestedHandleTypes), interleaved in one
//     run; cuMemExportToShareableHandle and cuMemImportFromShareableHandle;
//  2. pools: the first malloc of 256 MiB (128 page handles) and of 8 GiB
//     (128 handles of 64 MiB), and the malloc/free hot path, in pools with
//     exportable 0 and 1, alternated;
//  3. weight sync of 4 GiB: a device-to-device copy in one process, against
//     the rollout process copying from an import (100 updates through one
//     import), and against sharing anew every update (export, send, import,
//     copy, close: 20 updates);
//  4. exports: what a send of 128 handles costs, by driver call and through
//     the pool (vpmm_pool_export_many), first, again, after a pause/resume,
//     and after a pause/resume with the exports prepared ahead.
// `bench_ipc handles|pools|sync|exports` runs one part. Prints "IPC key value" lines (collected by scripts/gpu-ipc.sh); medians.
#include <cuda.h>
#include <cuda_runtime.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <thread>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "../tests/gpu/ipc_rollout.cuh"
#include "vpmm.h"

namespace {

constexpr uint64_t MiB = 1ull << 20, GiB = 1ull << 30;

double now_us() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
double pct(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * v.size()))];
}
#define CK(x)                                                                                        \
  do {                                                                                               \
    auto e_ = (x);                                                                                   \
    if (e_ != 0) {                                                                                   \
      std::printf("FATAL %s:%d: %s -> %d (%s)\n", __FILE__, __LINE__, #x, (int)e_, vpmm_last_error()); \
      std::exit(1);                                                                                  \
    }                                                                                                \
  } while (0)

void handles() {
  CUdevice dev;
  CK(cuDeviceGet(&dev, 0));
  int posix = 0, fabric = 0;
  cuDeviceGetAttribute(&posix, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, dev);
  cuDeviceGetAttribute(&fabric, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED, dev);
  std::printf("IPC attr_posix_fd_supported %d\nIPC attr_fabric_supported %d\n", posix, fabric);
  CUmemAllocationProp prop;
  std::memset(&prop, 0, sizeof prop);
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  {  // Fabric handles need IMEX channels: a single node usually refuses them.
    CUmemAllocationProp f = prop;
    f.requestedHandleTypes = CU_MEM_HANDLE_TYPE_FABRIC;
    CUmemGenericAllocationHandle h = 0;
    CUresult r = cuMemCreate(&h, 2 * MiB, &f, 0);
    std::printf("IPC fabric_create_result %d\n", static_cast<int>(r));
    if (r == CUDA_SUCCESS) cuMemRelease(h);
  }
  CUmemAccessDesc access;
  std::memset(&access, 0, sizeof access);
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = 0;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  for (uint64_t size : {2 * MiB, 64 * MiB, 1 * GiB}) {
    const int reps = size >= GiB ? 20 : 200;
    std::vector<double> create[2], release[2], exp, imp, map_access;
    for (int r = 0; r < reps; ++r)
      for (int t = 0; t < 2; ++t) {
        const int type = (r + t) % 2;  // alternate which goes first
        CUmemAllocationProp p = prop;
        if (type) p.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
        CUmemGenericAllocationHandle h = 0;
        double t0 = now_us();
        CK(cuMemCreate(&h, size, &p, 0));
        double t1 = now_us();
        create[type].push_back(t1 - t0);
        if (type) {
          int fd = -1;
          double e0 = now_us();
          CK(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
          double e1 = now_us();
          exp.push_back(e1 - e0);
          CUmemGenericAllocationHandle h2 = 0;
          // An import in the exporting process itself: what an importer's
          // driver call costs, without a second process.
          CUresult ir = cuMemImportFromShareableHandle(&h2, reinterpret_cast<void*>(static_cast<intptr_t>(fd)),
                                                       CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
          double e2 = now_us();
          if (ir != CUDA_SUCCESS) {
            if (r == 0) std::printf("IPC import_same_process_result %d\n", static_cast<int>(ir));
          } else {
            imp.push_back(e2 - e1);
            CUdeviceptr va = 0;
            CK(cuMemAddressReserve(&va, size, 0, 0, 0));
            double m0 = now_us();
            CK(cuMemMap(va, size, 0, h2, 0));
            CK(cuMemSetAccess(va, size, &access, 1));
            map_access.push_back(now_us() - m0);
            CK(cuMemUnmap(va, size));
            CK(cuMemAddressFree(va, size));
            CK(cuMemRelease(h2));
          }
          close(fd);
        }
        double r0 = now_us();
        CK(cuMemRelease(h));
        release[type].push_back(now_us() - r0);
      }
    const unsigned long long mib = size / MiB;
    std::printf("IPC create_us_%lluM_plain %.1f\nIPC create_us_%lluM_posix %.1f\n", mib, median(create[0]), mib,
                median(create[1]));
    std::printf("IPC create_p90_us_%lluM_plain %.1f\nIPC create_p90_us_%lluM_posix %.1f\n", mib,
                pct(create[0], 0.9), mib, pct(create[1], 0.9));
    std::printf("IPC release_us_%lluM_plain %.1f\nIPC release_us_%lluM_posix %.1f\n", mib, median(release[0]), mib,
                median(release[1]));
    std::printf("IPC export_us_%lluM %.1f\nIPC import_us_%lluM %.1f\nIPC import_map_access_us_%lluM %.1f\n", mib,
                median(exp), mib, median(imp), mib, median(map_access));
  }
}

vpmm_pool* pool_of(bool exportable) {
  vpmm_pool* p = gt::ipc_cuda_pool(exportable);
  if (!p) std::exit(1);
  return p;
}

void pools() {
  for (uint64_t size : {256 * MiB, 8 * GiB}) {
    std::vector<double> first[2];
    for (int r = 0; r < 5; ++r)
      for (int e = 0; e < 2; ++e) {
        const int ex = (r + e) % 2;
        vpmm_pool* p = pool_of(ex != 0);
        void* ptr = nullptr;
        double t0 = now_us();
        CK(vpmm_pool_malloc(p, size, nullptr, &ptr));
        first[ex].push_back(now_us() - t0);
        CK(vpmm_pool_free(p, ptr, nullptr));
        CK(vpmm_pool_destroy(p));
      }
    const unsigned long long mib = size / MiB;
    std::printf("IPC first_malloc_ms_%lluM_plain %.3f\nIPC first_malloc_ms_%lluM_exportable %.3f\n", mib,
                median(first[0]) / 1000, mib, median(first[1]) / 1000);
  }
  for (int e = 0; e < 2; ++e) {  // the hot path: no driver call, so no difference expected
    vpmm_pool* p = pool_of(e != 0);
    void* ptr = nullptr;
    CK(vpmm_pool_malloc(p, 64 * MiB, nullptr, &ptr));
    CK(vpmm_pool_free(p, ptr, nullptr));
    const int n = 200000;
    double t0 = now_us();
    for (int i = 0; i < n; ++i) {
      vpmm_pool_malloc(p, 1 * MiB, nullptr, &ptr);
      vpmm_pool_free(p, ptr, nullptr);
    }
    std::printf("IPC hot_pair_ns_%s %.1f\n", e ? "exportable" : "plain", (now_us() - t0) * 1000 / n);
    CK(vpmm_pool_destroy(p));
  }
}

void weight_sync() {
  const uint64_t n = 4 * GiB;
  // One process: device to device, cudaMalloc to cudaMalloc and pool to cudaMalloc.
  void *a = nullptr, *b = nullptr;
  CK(cudaMalloc(&a, n));
  CK(cudaMalloc(&b, n));
  std::vector<double> local;
  for (int i = 0; i < 20; ++i) {
    double t0 = now_us();
    CK(cudaMemcpyAsync(b, a, n, cudaMemcpyDeviceToDevice, nullptr));
    CK(cudaStreamSynchronize(nullptr));
    local.push_back(now_us() - t0);
  }
  std::printf("IPC d2d_local_GBps %.1f\n", n / median(local) / 1000);
  CK(cudaFree(b));
  vpmm_pool* pool = pool_of(true);
  void* w = nullptr;
  CK(vpmm_pool_malloc(pool, n, nullptr, &w));
  gt::fill_words(w, n, 1);
  CK(cudaDeviceSynchronize());
  std::vector<double> from_pool;
  for (int i = 0; i < 20; ++i) {
    double t0 = now_us();
    CK(cudaMemcpyAsync(a, w, n, cudaMemcpyDeviceToDevice, nullptr));
    CK(cudaStreamSynchronize(nullptr));
    from_pool.push_back(now_us() - t0);
  }
  std::printf("IPC d2d_pool_local_GBps %.1f\n", n / median(from_pool) / 1000);
  CK(cudaFree(a));

  // Two processes: the rollout copies from its import of the trainer's weights.
  vt::Child ch = vt::spawn_child();
  vpmm_export* ex = nullptr;
  CK(vpmm_pool_export(pool, w, &ex));
  int64_t i = -1;
  double s0 = now_us();
  CK(gt::send_to(ch, ex, &i));
  std::printf("IPC share_4G_first_ms %.3f\n", (now_us() - s0) / 1000);
  std::vector<double> steady;
  for (int u = 0; u < 100; ++u) {
    int64_t r = -1, ns = 0;
    ch.ask('U', i, u == 99 ? 1 : 0, &r, &ns);
    if (r != 0) std::printf("IPC error_update %d %lld\n", u, static_cast<long long>(r));
    steady.push_back(ns / 1000.0);
  }
  std::printf("IPC d2d_import_GBps %.1f\n", n / median(steady) / 1000);
  int64_t st = -1;
  ch.ask('C', i, 0, &st);
  CK(vpmm_export_close(pool, ex));
  // Sharing anew at every update, as reducers that re-export each step do.
  std::vector<double> each, share_only;
  for (int u = 0; u < 20; ++u) {
    double t0 = now_us();
    CK(vpmm_pool_export(pool, w, &ex));
    CK(gt::send_to(ch, ex, &i));
    int64_t r = -1, ns = 0;
    ch.ask('U', i, 0, &r, &ns);
    ch.ask('C', i, 0, &st);
    CK(vpmm_export_close(pool, ex));
    const double t = now_us() - t0;
    each.push_back(t);
    share_only.push_back(t - ns / 1000.0);
  }
  std::printf("IPC update_with_new_share_ms %.3f\nIPC share_overhead_ms %.3f\n", median(each) / 1000,
              median(share_only) / 1000);
  ch.quit();
  CK(vpmm_pool_free(pool, w, nullptr));
  CK(vpmm_pool_destroy(pool));
}

// Where the time of sending N handles goes (the colocated RL sync sends a
// model of ~115 tagged allocations, a handle each): the driver's first export
// of a handle, a second export of the same handle, the same N first exports
// from 4 threads at once, and the pool's one-export-for-all path
// (vpmm_pool_export_many) first, again (the backend keeps each handle's
// descriptor), and after a pause/resume (new handles), each sent to and
// imported by a second process.
void exports() {
  constexpr int kN = 128;
  CUmemAllocationProp prop;
  std::memset(&prop, 0, sizeof prop);
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  for (uint64_t size : {2 * MiB, 32 * MiB}) {
    std::vector<CUmemGenericAllocationHandle> hs(kN);
    for (auto& h : hs) CK(cuMemCreate(&h, size, &prop, 0));
    std::vector<double> first, again;
    std::vector<int> fds;
    double t0 = now_us();
    for (auto h : hs) {
      int fd = -1;
      double e0 = now_us();
      CK(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
      first.push_back(now_us() - e0);
      fds.push_back(fd);
    }
    const double serial = now_us() - t0;
    for (auto h : hs) {
      int fd = -1;
      double e0 = now_us();
      CK(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
      again.push_back(now_us() - e0);
      fds.push_back(fd);
    }
    for (int fd : fds) close(fd);
    for (auto h : hs) CK(cuMemRelease(h));
    // The same count of fresh handles exported from 4 threads at once.
    for (auto& h : hs) CK(cuMemCreate(&h, size, &prop, 0));
    std::vector<int> pfds(kN, -1);
    CUcontext ctx = nullptr;
    CK(cuCtxGetCurrent(&ctx));
    double p0 = now_us();
    std::vector<std::thread> ts;
    for (int t = 0; t < 4; ++t)
      ts.emplace_back([&, t] {
        cuCtxSetCurrent(ctx);
        for (int i = t; i < kN; i += 4)
          cuMemExportToShareableHandle(&pfds[i], hs[i], CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
      });
    for (auto& t : ts) t.join();
    const double parallel = now_us() - p0;
    for (int fd : pfds)
      if (fd >= 0) close(fd);
    for (auto h : hs) CK(cuMemRelease(h));
    const unsigned long long mib = size / MiB;
    std::printf("IPC export_first_us_%lluM %.1f\nIPC export_again_us_%lluM %.1f\n"
                "IPC export_%d_serial_ms_%lluM %.2f\nIPC export_%d_4threads_ms_%lluM %.2f\n",
                mib, median(first), mib, median(again), kN, mib, serial / 1000, kN, mib, parallel / 1000);
  }
  // The pool: kN tagged allocations of 12 MiB (a model's weights), one
  // export for all, sent to and imported by a second process.
  vpmm_pool* pool = pool_of(true);
  std::vector<const void*> ptrs;
  vpmm_alloc_attrs a;
  std::memset(&a, 0, sizeof a);
  a.struct_size = sizeof a;
  a.tag = "weights";
  a.flags = VPMM_ALLOC_HOST_BACKUP;
  for (int i = 0; i < kN; ++i) {
    void* p = nullptr;
    CK(vpmm_pool_malloc_ex(pool, 12 * MiB, nullptr, &a, &p));
    ptrs.push_back(p);
  }
  vt::Child ch = vt::spawn_child();
  auto one = [&](const char* what) {
    vpmm_export* ex = nullptr;
    double t0 = now_us();
    CK(vpmm_pool_export_many(pool, ptrs.data(), ptrs.size(), &ex));
    double t1 = now_us();
    int64_t i = -1, st = -1;
    CK(gt::send_to(ch, ex, &i));
    double t2 = now_us();
    std::printf("IPC pool_export_many_%d_%s_ms %.2f\nIPC pool_send_import_%d_%s_ms %.2f\n", kN, what,
                (t1 - t0) / 1000, kN, what, (t2 - t1) / 1000);
    ch.ask('C', i, 0, &st);
    CK(vpmm_export_close(pool, ex));
  };
  one("first");
  one("again");
  CK(vpmm_pool_pause(pool, "weights"));
  CK(vpmm_pool_resume(pool, "weights"));
  one("after_resume");
  // After a resume again, the exports prepared ahead (what a trainer does on
  // a thread of its own while it trains): the send then duplicates.
  CK(vpmm_pool_pause(pool, "weights"));
  CK(vpmm_pool_resume(pool, "weights"));
  uint64_t prepared = 0;
  double p0 = now_us();
  CK(vpmm_pool_prepare_export(pool, "weights", &prepared));
  std::printf("IPC pool_prepare_export_%d_ms %.2f (%llu handles)\n", kN, (now_us() - p0) / 1000,
              static_cast<unsigned long long>(prepared));
  one("prepared");
  ch.quit();
  for (const void* p : ptrs) CK(vpmm_pool_free(pool, const_cast<void*>(p), nullptr));
  CK(vpmm_pool_destroy(pool));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::strcmp(argv[1], "--child") == 0) return gt::rollout_main(std::atoi(argv[2]));
  CK(cudaSetDevice(0));
  CK(cudaFree(nullptr));  // the primary context, current for the driver calls below
  const char* only = argc > 1 ? argv[1] : "";
  if (!*only || std::strstr(only, "handles")) handles();
  if (!*only || std::strstr(only, "pools")) pools();
  if (!*only || std::strstr(only, "sync")) weight_sync();
  if (!*only || std::strstr(only, "exports")) exports();
  return 0;
}
