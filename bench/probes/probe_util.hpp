// What the driver-API probes share: a checked call, a clock, and device 0's
// primary context with the allocation properties and access of a device page.
#pragma once

#include <cuda.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>

#define CK(x)                                                                 \
  do {                                                                        \
    CUresult r_ = (x);                                                        \
    if (r_ != CUDA_SUCCESS) {                                                 \
      const char* s_ = nullptr;                                               \
      cuGetErrorString(r_, &s_);                                              \
      std::printf("FAILED %s: %s (line %d)\n", #x, s_ ? s_ : "?", __LINE__); \
      std::exit(1);                                                           \
    }                                                                         \
  } while (0)

inline double now_us() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct ProbeDevice {
  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  CUmemAllocationProp prop = {};
  CUmemAccessDesc acc = {};
  size_t page = 0;  // the recommended granularity (2 MiB on an H100)
};

// Device 0, its primary context current on the calling thread.
inline ProbeDevice probe_device() {
  ProbeDevice d;
  CK(cuInit(0));
  CK(cuDeviceGet(&d.dev, 0));
  CK(cuDevicePrimaryCtxRetain(&d.ctx, d.dev));
  CK(cuCtxSetCurrent(d.ctx));
  d.prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  d.prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  d.prop.location.id = 0;
  CK(cuMemGetAllocationGranularity(&d.page, &d.prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
  d.acc.location = d.prop.location;
  d.acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  return d;
}
