// The HIP runtime API, loaded at run time: one function table filled once per
// process by dlopen, so libvpmm has no link-time dependency on libamdhip64 and
// loads on machines without ROCm. The same shape as cuda/cuda_driver.hpp.
//
// Invariants:
//  - The table is filled exactly once (std::call_once) and never changes or is
//    unloaded afterwards (the runtime is never dlclose'd), so any thread may
//    read it without locking once runtime() has returned it.
//  - Every required entry is non-null in a returned table; optional entries
//    (marked below) may be null and must be checked before use.
//  - The pointer types come from the real declarations: this file is only
//    compiled against <hip/hip_runtime_api.h> (Debian's libamdhip64-dev, with
//    -D__HIP_PLATFORM_AMD__). The one structure whose layout changed between
//    ROCm 5 and 6 (hipMemAllocationProp) is declared here for both (see
//    AllocationPropV6): the header describes only the release it came from,
//    the loaded runtime may be another.
#pragma once

#include <hip/hip_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace vpmm {
namespace hip {

using FnGetDeviceCount = hipError_t (*)(int* count);
using FnSetDevice = hipError_t (*)(int device);
using FnGetDevice = hipError_t (*)(int* device);
using FnRuntimeGetVersion = hipError_t (*)(int* version);
using FnDeviceGetAttribute = hipError_t (*)(int* value, hipDeviceAttribute_t attr, int device);
using FnDeviceSynchronize = hipError_t (*)(void);
using FnMemGetAllocationGranularity = hipError_t (*)(size_t* granularity,
                                                     const hipMemAllocationProp* prop,
                                                     hipMemAllocationGranularity_flags option);
using FnMemCreate = hipError_t (*)(hipMemGenericAllocationHandle_t* handle, size_t size,
                                   const hipMemAllocationProp* prop, unsigned long long flags);
using FnMemRelease = hipError_t (*)(hipMemGenericAllocationHandle_t handle);
using FnMemAddressReserve = hipError_t (*)(void** ptr, size_t size, size_t alignment, void* addr,
                                           unsigned long long flags);
using FnMemAddressFree = hipError_t (*)(void* ptr, size_t size);
using FnMemMap = hipError_t (*)(void* ptr, size_t size, size_t offset,
                                hipMemGenericAllocationHandle_t handle, unsigned long long flags);
using FnMemUnmap = hipError_t (*)(void* ptr, size_t size);
using FnMemSetAccess = hipError_t (*)(void* ptr, size_t size, const hipMemAccessDesc* desc,
                                      size_t count);
using FnEventCreateWithFlags = hipError_t (*)(hipEvent_t* event, unsigned flags);
using FnEventRecord = hipError_t (*)(hipEvent_t event, hipStream_t stream);
using FnEventQuery = hipError_t (*)(hipEvent_t event);
using FnEventSynchronize = hipError_t (*)(hipEvent_t event);
using FnEventDestroy = hipError_t (*)(hipEvent_t event);
using FnStreamWaitEvent = hipError_t (*)(hipStream_t stream, hipEvent_t event, unsigned int flags);
using FnStreamSynchronize = hipError_t (*)(hipStream_t stream);
using FnStreamCreateWithFlags = hipError_t (*)(hipStream_t* stream, unsigned int flags);
using FnStreamDestroy = hipError_t (*)(hipStream_t stream);
using FnMemcpyDtoHAsync = hipError_t (*)(void* dst, hipDeviceptr_t src, size_t bytes,
                                         hipStream_t stream);
using FnMemcpyHtoDAsync = hipError_t (*)(hipDeviceptr_t dst, void* src, size_t bytes,
                                         hipStream_t stream);
using FnHostMalloc = hipError_t (*)(void** p, size_t bytes, unsigned int flags);
using FnHostFree = hipError_t (*)(void* p);
using FnHostRegister = hipError_t (*)(void* p, size_t bytes, unsigned int flags);
using FnHostUnregister = hipError_t (*)(void* p);
using FnMemGetInfo = hipError_t (*)(size_t* free_bytes, size_t* total_bytes);
// Not declared by ROCm 5.x headers: typed here after the ROCm 6 declarations.
using FnMemExportToShareableHandle = hipError_t (*)(void* shareable, hipMemGenericAllocationHandle_t handle,
                                                    hipMemAllocationHandleType type, unsigned long long flags);
using FnMemImportFromShareableHandle = hipError_t (*)(hipMemGenericAllocationHandle_t* handle, void* os_handle,
                                                      hipMemAllocationHandleType type);
using FnDeviceGetUuid = hipError_t (*)(hipUUID* uuid, int device);
using FnGetErrorName = const char* (*)(hipError_t error);
using FnGetErrorString = const char* (*)(hipError_t error);

struct Runtime {
  FnGetDeviceCount GetDeviceCount;
  FnSetDevice SetDevice;
  FnGetDevice GetDevice;
  FnRuntimeGetVersion RuntimeGetVersion;
  FnDeviceGetAttribute DeviceGetAttribute;  // optional
  FnDeviceSynchronize DeviceSynchronize;
  FnMemGetAllocationGranularity MemGetAllocationGranularity;
  FnMemCreate MemCreate;
  FnMemRelease MemRelease;
  FnMemAddressReserve MemAddressReserve;
  FnMemAddressFree MemAddressFree;
  FnMemMap MemMap;
  FnMemUnmap MemUnmap;
  FnMemSetAccess MemSetAccess;
  FnEventCreateWithFlags EventCreateWithFlags;
  FnEventRecord EventRecord;
  FnEventQuery EventQuery;
  FnEventSynchronize EventSynchronize;
  FnEventDestroy EventDestroy;
  FnStreamWaitEvent StreamWaitEvent;
  FnStreamSynchronize StreamSynchronize;
  FnStreamCreateWithFlags StreamCreateWithFlags;
  FnStreamDestroy StreamDestroy;
  FnMemcpyDtoHAsync MemcpyDtoHAsync;
  FnMemcpyHtoDAsync MemcpyHtoDAsync;
  FnHostMalloc HostMalloc;          // optional (deprecated name in ROCm 7; pinning then needs HostRegister)
  FnHostFree HostFree;              // optional (with HostMalloc)
  FnHostRegister HostRegister;      // optional (pinning falls back to HostMalloc)
  FnHostUnregister HostUnregister;  // optional (with HostRegister)
  FnMemGetInfo MemGetInfo;
  FnGetErrorName GetErrorName;
  FnGetErrorString GetErrorString;
  FnMemExportToShareableHandle MemExportToShareableHandle;      // optional (exportable pools)
  FnMemImportFromShareableHandle MemImportFromShareableHandle;  // optional (vpmm_pool_import)
  FnDeviceGetUuid DeviceGetUuid;                                // optional (the same)

  char path[256];  // the file that was loaded (dlinfo), or the name dlopen'ed
};

// The process-wide table, loaded on first call: VPMM_HIP_LIBRARY when set
// (a path or a soname; nothing else is tried then), else libamdhip64.so.7,
// .so.6, .so.5 in that order. Returns nullptr when no candidate loads or the
// one that loads lacks a required entry; then *why (if non-null) receives a
// static sentence naming the candidates and dlerror()'s text. No HIP call is
// made here. Never throws; thread safe.
const Runtime* runtime(const char** why = nullptr);

// Writes "hipErrorOutOfMemory (out of memory)" for r into buf (always
// NUL-terminated). Returns buf. Never allocates; thread safe.
const char* format_error(hipError_t r, char* buf, size_t capacity);

// ---- Versions ---------------------------------------------------------------
// hipRuntimeGetVersion returns HIP_VERSION: major * 10^7 + minor * 10^5 + patch.
constexpr int version_major(int v) { return v / 10000000; }
constexpr int version_minor(int v) { return (v / 100000) % 100; }
constexpr int make_version(int major, int minor) { return major * 10000000 + minor * 100000; }

// hipDeviceAttributeVirtualMemoryManagementSupported: 89 in the ROCm 6 and 7
// enumeration (hip_runtime_api.h, CUDA-compatible block). Debian's 5.2
// headers lack it, so it is spelled by number and only asked from ROCm 6.0
// on, where the enumeration has that value (5.x numbers it differently).
constexpr int kAttrVirtualMemoryManagementSupported = 89;
constexpr int kFirstVersionWithVmmAttribute = make_version(6, 0);

// hipMemAllocationProp as ROCm 6.0 and later lay it out (and the CUDA
// CUmemAllocationProp it mirrors). ROCm 5.x headers (Debian's 5.2.3) put
// compressionType first and the location before the type: passing that
// layout to a 6.x runtime would make every hipMemCreate read a garbage type.
// The backend fills the layout of the runtime it loaded (hip_backend.cpp).
struct AllocationPropV6 {
  hipMemAllocationType type;
  hipMemAllocationHandleType requestedHandleType;
  hipMemLocation location;
  void* win32HandleMetaData;
  struct {
    unsigned char compressionType;
    unsigned char gpuDirectRDMACapable;
    unsigned short usage;
  } allocFlags;
};
constexpr int kFirstVersionWithV6Prop = make_version(6, 0);

}  // namespace hip
}  // namespace vpmm
