// The CUDA driver API, loaded at run time: one function table filled once per
// process from dlopen("libcuda.so.1"), so libvpmm has no link-time dependency
// on libcuda or libcudart and loads on machines without CUDA.
//
// Invariants:
//  - The table is filled exactly once (std::call_once) and never changes or is
//    unloaded afterwards (libcuda is never dlclose'd), so any thread may read
//    it without locking once driver() has returned it.
//  - Every required entry is non-null in a returned table; optional entries
//    (marked below) may be null and must be checked before use.
//  - The pointer types are our own, written against the CUDA 12.0 signatures,
//    and each entry is resolved with cuGetProcAddress at kCudaApiVersion. So
//    the driver hands back the ABI version of each symbol that matches these
//    typedefs (e.g. "cuMemcpyDtoHAsync" -> cuMemcpyDtoHAsync_v2), whatever
//    the header's CUDA_VERSION and its #define cuX cuX_v2 renamings are.
//    The member names drop the "cu" prefix on purpose: cuda.h #defines many of
//    the base names (cuMemGetInfo -> cuMemGetInfo_v2, ...), which would
//    silently rename members spelled like the driver functions.
//  - Stream-taking entries are resolved with CU_GET_PROC_ADDRESS_LEGACY_STREAM:
//    a NULL stream is the legacy default stream of the current context.
#pragma once

#include <cuda.h>

#include <cstddef>

namespace vpmm {
namespace cuda {

// Driver ABI version the typedefs below match (passed to cuGetProcAddress).
constexpr int kCudaApiVersion = 12000;

using FnInit = CUresult(CUDAAPI*)(unsigned int flags);
using FnDriverGetVersion = CUresult(CUDAAPI*)(int* version);
using FnDeviceGet = CUresult(CUDAAPI*)(CUdevice* dev, int ordinal);
using FnDeviceGetCount = CUresult(CUDAAPI*)(int* count);
using FnDeviceGetAttribute = CUresult(CUDAAPI*)(int* value, CUdevice_attribute attrib, CUdevice dev);
using FnDeviceCanAccessPeer = CUresult(CUDAAPI*)(int* can, CUdevice dev, CUdevice peer);
using FnDevicePrimaryCtxRetain = CUresult(CUDAAPI*)(CUcontext* ctx, CUdevice dev);
using FnDevicePrimaryCtxRelease = CUresult(CUDAAPI*)(CUdevice dev);
using FnCtxGetCurrent = CUresult(CUDAAPI*)(CUcontext* ctx);
using FnCtxSetCurrent = CUresult(CUDAAPI*)(CUcontext ctx);
using FnCtxSynchronize = CUresult(CUDAAPI*)(void);
using FnMemGetAllocationGranularity = CUresult(CUDAAPI*)(size_t* granularity,
                                                         const CUmemAllocationProp* prop,
                                                         CUmemAllocationGranularity_flags option);
using FnMemCreate = CUresult(CUDAAPI*)(CUmemGenericAllocationHandle* handle, size_t size,
                                       const CUmemAllocationProp* prop, unsigned long long flags);
using FnMemRelease = CUresult(CUDAAPI*)(CUmemGenericAllocationHandle handle);
using FnMemAddressReserve = CUresult(CUDAAPI*)(CUdeviceptr* ptr, size_t size, size_t alignment,
                                               CUdeviceptr addr, unsigned long long flags);
using FnMemAddressFree = CUresult(CUDAAPI*)(CUdeviceptr ptr, size_t size);
using FnMemMap = CUresult(CUDAAPI*)(CUdeviceptr ptr, size_t size, size_t offset,
                                    CUmemGenericAllocationHandle handle, unsigned long long flags);
using FnMemUnmap = CUresult(CUDAAPI*)(CUdeviceptr ptr, size_t size);
using FnMemSetAccess = CUresult(CUDAAPI*)(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc,
                                          size_t count);
using FnEventCreate = CUresult(CUDAAPI*)(CUevent* event, unsigned int flags);
using FnEventRecord = CUresult(CUDAAPI*)(CUevent event, CUstream stream);
using FnEventQuery = CUresult(CUDAAPI*)(CUevent event);
using FnEventSynchronize = CUresult(CUDAAPI*)(CUevent event);
using FnEventDestroy = CUresult(CUDAAPI*)(CUevent event);
using FnStreamWaitEvent = CUresult(CUDAAPI*)(CUstream stream, CUevent event, unsigned int flags);
using FnStreamSynchronize = CUresult(CUDAAPI*)(CUstream stream);
using FnStreamCreate = CUresult(CUDAAPI*)(CUstream* stream, unsigned int flags);
using FnStreamDestroy = CUresult(CUDAAPI*)(CUstream stream);
using FnMemcpyDtoHAsync = CUresult(CUDAAPI*)(void* dst, CUdeviceptr src, size_t bytes, CUstream stream);
using FnMemcpyHtoDAsync = CUresult(CUDAAPI*)(CUdeviceptr dst, const void* src, size_t bytes,
                                             CUstream stream);
using FnLaunchHostFunc = CUresult(CUDAAPI*)(CUstream stream, CUhostFn fn, void* user);
using FnMemcpyDtoH = CUresult(CUDAAPI*)(void* dst, CUdeviceptr src, size_t bytes);
using FnMemcpyHtoD = CUresult(CUDAAPI*)(CUdeviceptr dst, const void* src, size_t bytes);
using FnMemHostAlloc = CUresult(CUDAAPI*)(void** p, size_t bytes, unsigned int flags);
using FnMemFreeHost = CUresult(CUDAAPI*)(void* p);
using FnMemHostRegister = CUresult(CUDAAPI*)(void* p, size_t bytes, unsigned int flags);
using FnMemHostUnregister = CUresult(CUDAAPI*)(void* p);
using FnMemGetInfo = CUresult(CUDAAPI*)(size_t* free_bytes, size_t* total_bytes);
using FnMemExportToShareableHandle = CUresult(CUDAAPI*)(void* shareable, CUmemGenericAllocationHandle handle,
                                                        CUmemAllocationHandleType type,
                                                        unsigned long long flags);
using FnMemImportFromShareableHandle = CUresult(CUDAAPI*)(CUmemGenericAllocationHandle* handle, void* os_handle,
                                                          CUmemAllocationHandleType type);
using FnDeviceGetUuid = CUresult(CUDAAPI*)(CUuuid* uuid, CUdevice dev);
using FnGetErrorName = CUresult(CUDAAPI*)(CUresult error, const char** str);
using FnGetErrorString = CUresult(CUDAAPI*)(CUresult error, const char** str);

struct Driver {
  FnInit Init;
  FnDriverGetVersion DriverGetVersion;      // optional
  FnDeviceGet DeviceGet;
  FnDeviceGetCount DeviceGetCount;
  FnDeviceGetAttribute DeviceGetAttribute;  // optional
  FnDeviceCanAccessPeer DeviceCanAccessPeer;  // optional (peer_devices needs it)
  FnDevicePrimaryCtxRetain DevicePrimaryCtxRetain;
  FnDevicePrimaryCtxRelease DevicePrimaryCtxRelease;
  FnCtxGetCurrent CtxGetCurrent;
  FnCtxSetCurrent CtxSetCurrent;
  FnCtxSynchronize CtxSynchronize;
  FnMemGetAllocationGranularity MemGetAllocationGranularity;
  FnMemCreate MemCreate;
  FnMemRelease MemRelease;
  FnMemAddressReserve MemAddressReserve;
  FnMemAddressFree MemAddressFree;
  FnMemMap MemMap;
  FnMemUnmap MemUnmap;
  FnMemSetAccess MemSetAccess;
  FnEventCreate EventCreate;
  FnEventRecord EventRecord;
  FnEventQuery EventQuery;
  FnEventSynchronize EventSynchronize;
  FnEventDestroy EventDestroy;
  FnStreamWaitEvent StreamWaitEvent;
  FnStreamSynchronize StreamSynchronize;
  FnStreamCreate StreamCreate;    // optional (tests)
  FnStreamDestroy StreamDestroy;  // optional (tests)
  FnMemcpyDtoHAsync MemcpyDtoHAsync;
  FnMemcpyHtoDAsync MemcpyHtoDAsync;
  FnLaunchHostFunc LaunchHostFunc;  // optional (tests: hold a stream busy)
  FnMemcpyDtoH MemcpyDtoH;  // optional (tests)
  FnMemcpyHtoD MemcpyHtoD;  // optional (tests)
  FnMemHostAlloc MemHostAlloc;
  FnMemFreeHost MemFreeHost;
  FnMemHostRegister MemHostRegister;      // optional (pinning falls back to MemHostAlloc)
  FnMemHostUnregister MemHostUnregister;  // optional (with MemHostRegister)
  FnMemGetInfo MemGetInfo;
  FnGetErrorName GetErrorName;
  FnGetErrorString GetErrorString;
  FnMemExportToShareableHandle MemExportToShareableHandle;      // optional (exportable pools)
  FnMemImportFromShareableHandle MemImportFromShareableHandle;  // optional (vpmm_pool_import)
  FnDeviceGetUuid DeviceGetUuid;                                // optional (the same)
};

// The process-wide table, loaded on first call. Returns nullptr when libcuda
// cannot be loaded or lacks a required entry; then *why (if non-null) receives
// a static sentence saying which (e.g. the dlerror() text). Never throws,
// never crashes; thread safe.
const Driver* driver(const char** why = nullptr);

// Writes "CUDA_ERROR_OUT_OF_MEMORY (out of memory)" for r into buf (always
// NUL-terminated; "CUresult 12345 (unrecognized error code)" when the driver
// does not know the code or is not loaded). Returns buf. Never allocates;
// thread safe.
const char* format_error(CUresult r, char* buf, size_t capacity);

}  // namespace cuda
}  // namespace vpmm
