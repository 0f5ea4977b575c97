// Probe (not part of the build): how should pause interleave D2H backup
// copies with unmap/release of 4096 x 4 MiB handles so that the copy engine
// keeps its speed? Driver API only; prints one line per variant.
//   nvcc -O2 -std=c++17 bench/probes/pause_pipeline_probe.cu -lcuda -o /tmp/probe && /tmp/probe
// Variants (all copies queued up front on one stream, one event per batch):
//   copies_only        no unmap: the copy engine alone
//   unmap_each         per batch: wait, then unmap + release each handle
//   unmap_range        per batch: wait, one cuMemUnmap over the batch, then releases
//   unmap_range_later  per batch: wait, one cuMemUnmap over the batch; releases after the last copy
//   unmap_each_later   per batch: wait, unmap each handle; releases after the last copy
//   all_after          wait for every copy, then unmap + release each (no overlap)
#include <cuda.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#define CK(x)                                                                   \
  do {                                                                          \
    CUresult r_ = (x);                                                          \
    if (r_ != CUDA_SUCCESS) {                                                   \
      std::printf("FATAL %s:%d %s -> %d\n", __FILE__, __LINE__, #x, (int)r_);   \
      std::exit(1);                                                             \
    }                                                                           \
  } while (0)

static double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

int main(int argc, char** argv) {
  const uint64_t MiB = 1ull << 20;
  const uint64_t size = (argc > 1 ? std::strtoull(argv[1], nullptr, 0) : 4) * MiB;
  const uint64_t total = 16ull << 30, n = total / size;
  const uint64_t per_batch = std::max<uint64_t>(1, (64 * MiB) / size);
  CK(cuInit(0));
  CUdevice dev;
  CK(cuDeviceGet(&dev, 0));
  CUcontext ctx;
  CK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CK(cuCtxSetCurrent(ctx));
  CUmemAllocationProp prop;
  std::memset(&prop, 0, sizeof prop);
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  CUmemAccessDesc acc;
  std::memset(&acc, 0, sizeof acc);
  acc.location = prop.location;
  acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CUdeviceptr va;
  CK(cuMemAddressReserve(&va, total, 0, 0, 0));
  void* host = nullptr;
  CK(cuMemHostAlloc(&host, total, CU_MEMHOSTALLOC_PORTABLE));
  CUstream s;
  CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  std::vector<CUmemGenericAllocationHandle> h(n);
  auto map_all = [&] {
    for (uint64_t i = 0; i < n; ++i) {
      CK(cuMemCreate(&h[i], size, &prop, 0));
      CK(cuMemMap(va + i * size, size, 0, h[i], 0));
      CK(cuMemSetAccess(va + i * size, size, &acc, 1));
    }
  };
  const char* names[] = {"copies_only", "unmap_each", "unmap_range", "unmap_range_later",
                         "unmap_each_later", "all_after"};
  std::printf("handle %llu MiB, %llu handles, %llu per batch\n", (unsigned long long)(size / MiB),
              (unsigned long long)n, (unsigned long long)per_batch);
  for (int rep = 0; rep < 2; ++rep)
    for (int v = 0; v < 6; ++v) {
      map_all();
      CK(cuCtxSynchronize());
      double t0 = now_ms();
      std::vector<CUevent> ev;
      for (uint64_t i = 0; i < n; ++i) {
        CK(cuMemcpyDtoHAsync(static_cast<char*>(host) + i * size, va + i * size, size, s));
        if ((i + 1) % per_batch == 0 || i + 1 == n) {
          CUevent e;
          CK(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
          CK(cuEventRecord(e, s));
          ev.push_back(e);
        }
      }
      double t_queued = now_ms();
      std::vector<uint64_t> later;
      uint64_t next = 0;
      if (v == 5) CK(cuEventSynchronize(ev.back()));
      for (size_t b = 0; b < ev.size(); ++b) {
        if (v != 5) CK(cuEventSynchronize(ev[b]));
        uint64_t end = std::min(n, next + per_batch);
        if (v == 0) {
          next = end;
          continue;
        }
        if (v == 2 || v == 3) {
          CK(cuMemUnmap(va + next * size, (end - next) * size));
          for (uint64_t i = next; i < end; ++i)
            if (v == 2) CK(cuMemRelease(h[i])); else later.push_back(i);
        } else {
          for (uint64_t i = next; i < end; ++i) {
            CK(cuMemUnmap(va + i * size, size));
            if (v == 4) later.push_back(i); else CK(cuMemRelease(h[i]));
          }
        }
        next = end;
      }
      double t_copies = now_ms();
      for (uint64_t i : later) CK(cuMemRelease(h[i]));
      double t1 = now_ms();
      if (v == 0)
        for (uint64_t i = 0; i < n; ++i) {
          CK(cuMemUnmap(va + i * size, size));
          CK(cuMemRelease(h[i]));
        }
      for (CUevent e : ev) CK(cuEventDestroy(e));
      std::printf("%-18s rep %d: total %.1f ms = %.2f GB/s (queue %.1f ms, through last batch %.1f ms)\n",
                  names[v], rep, t1 - t0, total / (t1 - t0) / 1e6, t_queued - t0, t_copies - t0);
    }
  return 0;
}
