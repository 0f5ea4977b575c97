// Loads the CUDA driver API table (see cuda_driver.hpp) exactly once.
//
// Strategy, in order:
//  1. dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL). Only the versioned
//     soname: the unversioned libcuda.so on library paths is usually the
//     toolkit's link stub. The handle is never closed.
//  2. Resolve the entry-point resolver: dlsym("cuGetProcAddress_v2") (the
//     CUDA 12+ five-argument form with the symbol status), else
//     dlsym("cuGetProcAddress") (the CUDA 11.3+ four-argument form).
//  3. For each entry ask the resolver for the base name ("cuMemcpyDtoHAsync")
//     at kCudaApiVersion with CU_GET_PROC_ADDRESS_LEGACY_STREAM; it returns the
//     ABI version matching our 12.0 typedefs. If there is no resolver, or it
//     does not find the symbol, fall back to dlsym of the exported versioned
//     name (cuMemcpyDtoHAsync_v2, ...) that has the same signature.
//  4. A missing required entry makes the whole table unusable (driver() then
//     returns nullptr with a sentence naming the entry).
// No CUDA call (not even cuInit) is made here: whether a device exists is
// the caller's question.
#include "backend/cuda/cuda_driver.hpp"

#include <dlfcn.h>

#include <cstdio>
#include <cstring>
#include <mutex>

#include "backend/runtime_loading.hpp"

namespace vpmm {
namespace cuda {
namespace {

// CUDA 12+: cuGetProcAddress_v2. The status is an enum in the header; an int*
// is ABI-identical and keeps this file independent of the header version.
using FnGetProcAddressV2 = CUresult(CUDAAPI*)(const char* symbol, void** pfn, int cuda_version,
                                              cuuint64_t flags, int* symbol_status);
// CUDA 11.3 .. 11.8: cuGetProcAddress (exported under the base name).
using FnGetProcAddressV1 = CUresult(CUDAAPI*)(const char* symbol, void** pfn, int cuda_version,
                                              cuuint64_t flags);

constexpr cuuint64_t kLegacyStream = 1;  // CU_GET_PROC_ADDRESS_LEGACY_STREAM
constexpr int kSymbolFound = 0;          // CU_GET_PROC_ADDRESS_SUCCESS

struct Entry {
  const char* name;       // base name for cuGetProcAddress
  const char* versioned;  // exported name with the same signature, for dlsym
  void** slot;
  bool required;
};

Driver g_driver;
const Driver* g_table = nullptr;
char g_why[512] = "";
std::once_flag g_once;

template <typename Fn>
void** slot(Fn* p) {
  return reinterpret_cast<void**>(p);
}

void load() {
  if (!runtime_loading_possible("libcuda.so.1", g_why, sizeof g_why)) return;
  // RTLD_LOCAL: the driver's symbols must not leak into the global namespace
  // of a process that may also load it the usual way (cudart does the same).
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* e = dlerror();
    std::snprintf(g_why, sizeof g_why, "dlopen(\"libcuda.so.1\") failed: %s",
                  e != nullptr ? e : "unknown error");
    return;
  }

  FnGetProcAddressV2 gpa2 = nullptr;
  FnGetProcAddressV1 gpa1 = nullptr;
  if (void* p = dlsym(lib, "cuGetProcAddress_v2")) {
    gpa2 = reinterpret_cast<FnGetProcAddressV2>(p);
  } else if (void* q = dlsym(lib, "cuGetProcAddress")) {
    gpa1 = reinterpret_cast<FnGetProcAddressV1>(q);
  }

  Driver& d = g_driver;
  const Entry entries[] = {
      {"cuInit", "cuInit", slot(&d.Init), true},
      {"cuDriverGetVersion", "cuDriverGetVersion", slot(&d.DriverGetVersion), false},
      {"cuDeviceGet", "cuDeviceGet", slot(&d.DeviceGet), true},
      {"cuDeviceGetCount", "cuDeviceGetCount", slot(&d.DeviceGetCount), true},
      {"cuDeviceGetAttribute", "cuDeviceGetAttribute", slot(&d.DeviceGetAttribute), false},
      {"cuDeviceCanAccessPeer", "cuDeviceCanAccessPeer", slot(&d.DeviceCanAccessPeer), false},
      {"cuDevicePrimaryCtxRetain", "cuDevicePrimaryCtxRetain", slot(&d.DevicePrimaryCtxRetain), true},
      {"cuDevicePrimaryCtxRelease", "cuDevicePrimaryCtxRelease_v2", slot(&d.DevicePrimaryCtxRelease),
       true},
      {"cuCtxGetCurrent", "cuCtxGetCurrent", slot(&d.CtxGetCurrent), true},
      {"cuCtxSetCurrent", "cuCtxSetCurrent", slot(&d.CtxSetCurrent), true},
      {"cuCtxSynchronize", "cuCtxSynchronize", slot(&d.CtxSynchronize), true},
      {"cuMemGetAllocationGranularity", "cuMemGetAllocationGranularity",
       slot(&d.MemGetAllocationGranularity), true},
      {"cuMemCreate", "cuMemCreate", slot(&d.MemCreate), true},
      {"cuMemRelease", "cuMemRelease", slot(&d.MemRelease), true},
      {"cuMemAddressReserve", "cuMemAddressReserve", slot(&d.MemAddressReserve), true},
      {"cuMemAddressFree", "cuMemAddressFree", slot(&d.MemAddressFree), true},
      {"cuMemMap", "cuMemMap", slot(&d.MemMap), true},
      {"cuMemUnmap", "cuMemUnmap", slot(&d.MemUnmap), true},
      {"cuMemSetAccess", "cuMemSetAccess", slot(&d.MemSetAccess), true},
      {"cuEventCreate", "cuEventCreate", slot(&d.EventCreate), true},
      {"cuEventRecord", "cuEventRecord", slot(&d.EventRecord), true},
      {"cuEventQuery", "cuEventQuery", slot(&d.EventQuery), true},
      {"cuEventSynchronize", "cuEventSynchronize", slot(&d.EventSynchronize), true},
      {"cuEventDestroy", "cuEventDestroy_v2", slot(&d.EventDestroy), true},
      {"cuStreamWaitEvent", "cuStreamWaitEvent", slot(&d.StreamWaitEvent), true},
      {"cuStreamSynchronize", "cuStreamSynchronize", slot(&d.StreamSynchronize), true},
      {"cuStreamCreate", "cuStreamCreate", slot(&d.StreamCreate), false},
      {"cuStreamDestroy", "cuStreamDestroy_v2", slot(&d.StreamDestroy), false},
      {"cuMemcpyDtoHAsync", "cuMemcpyDtoHAsync_v2", slot(&d.MemcpyDtoHAsync), true},
      {"cuMemcpyHtoDAsync", "cuMemcpyHtoDAsync_v2", slot(&d.MemcpyHtoDAsync), true},
      {"cuLaunchHostFunc", "cuLaunchHostFunc", slot(&d.LaunchHostFunc), false},
      {"cuMemcpyDtoH", "cuMemcpyDtoH_v2", slot(&d.MemcpyDtoH), false},
      {"cuMemcpyHtoD", "cuMemcpyHtoD_v2", slot(&d.MemcpyHtoD), false},
      {"cuMemHostAlloc", "cuMemHostAlloc", slot(&d.MemHostAlloc), true},
      {"cuMemFreeHost", "cuMemFreeHost", slot(&d.MemFreeHost), true},
      {"cuMemHostRegister", "cuMemHostRegister_v2", slot(&d.MemHostRegister), false},
      {"cuMemHostUnregister", "cuMemHostUnregister", slot(&d.MemHostUnregister), false},
      {"cuMemGetInfo", "cuMemGetInfo_v2", slot(&d.MemGetInfo), true},
      {"cuGetErrorName", "cuGetErrorName", slot(&d.GetErrorName), true},
      {"cuGetErrorString", "cuGetErrorString", slot(&d.GetErrorString), true},
      {"cuMemExportToShareableHandle", "cuMemExportToShareableHandle", slot(&d.MemExportToShareableHandle),
       false},
      {"cuMemImportFromShareableHandle", "cuMemImportFromShareableHandle",
       slot(&d.MemImportFromShareableHandle), false},
      {"cuDeviceGetUuid", "cuDeviceGetUuid_v2", slot(&d.DeviceGetUuid), false},
  };

  for (const Entry& e : entries) {
    void* fn = nullptr;
    if (gpa2 != nullptr) {
      int status = -1;
      if (gpa2(e.name, &fn, kCudaApiVersion, kLegacyStream, &status) != CUDA_SUCCESS ||
          status != kSymbolFound)
        fn = nullptr;
    } else if (gpa1 != nullptr) {
      if (gpa1(e.name, &fn, kCudaApiVersion, kLegacyStream) != CUDA_SUCCESS) fn = nullptr;
    }
    if (fn == nullptr) fn = dlsym(lib, e.versioned);
    if (fn == nullptr && e.required) {
      std::snprintf(g_why, sizeof g_why,
                    "libcuda.so.1 lacks %s (neither cuGetProcAddress(\"%s\", %d) nor dlsym(\"%s\") "
                    "found it): driver too old?",
                    e.name, e.name, kCudaApiVersion, e.versioned);
      return;  // keep lib loaded: harmless, and dlclose of libcuda is unsafe
    }
    *e.slot = fn;
  }
  g_table = &g_driver;
}

// Names for when the driver cannot name a code itself: above all the toolkit's
// stub libcuda, whose cuGetErrorName fails like every other entry point.
struct KnownError {
  int code;
  const char* name;
  const char* text;
};
constexpr KnownError kKnownErrors[] = {
    {1, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {2, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {3, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {4, "CUDA_ERROR_DEINITIALIZED", "driver shutting down"},
    {34, "CUDA_ERROR_STUB_LIBRARY",
     "libcuda.so.1 is the CUDA toolkit's stub library, not a real driver"},
    {100, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {101, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {999, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

}  // namespace

const Driver* driver(const char** why) {
  std::call_once(g_once, load);
  if (g_table == nullptr && why != nullptr) *why = g_why;
  return g_table;
}

const char* format_error(CUresult r, char* buf, size_t capacity) {
  if (buf == nullptr || capacity == 0) return "";
  const Driver* d = driver();
  const char* name = nullptr;
  const char* text = nullptr;
  if (d != nullptr) {
    if (d->GetErrorName(r, &name) != CUDA_SUCCESS) name = nullptr;
    if (d->GetErrorString(r, &text) != CUDA_SUCCESS) text = nullptr;
  }
  if (name == nullptr) {
    for (const KnownError& k : kKnownErrors) {
      if (k.code == static_cast<int>(r)) {
        name = k.name;
        text = k.text;
        break;
      }
    }
  }
  if (name != nullptr)
    std::snprintf(buf, capacity, "%s (%s)", name, text != nullptr ? text : "no description");
  else
    std::snprintf(buf, capacity, "CUresult %d (unrecognized error code)", static_cast<int>(r));
  return buf;
}

}  // namespace cuda
}  // namespace vpmm
