// The CUDA backend: Backend's do_* calls as CUDA driver VMM calls on one
// device, through the run-time loaded table of cuda_driver.hpp.
//
// Invariants:
//  - One backend = one device ordinal and one retain of that device's primary
//    context, taken in make_cuda_backend and released in the destructor.
//  - Every driver call runs with that primary context current and restores the
//    calling thread's previous current context afterwards (gpu::CurrentScope),
//    so the pool neither needs nor disturbs the caller's context; when the primary
//    context already is current (the usual case under the CUDA runtime and
//    PyTorch) only one cheap cuCtxGetCurrent is added.
//  - All state is fixed at construction, except the table of pinned buffers
//    made with cuMemHostRegister (its own mutex), so every method is thread
//    safe as far as the driver is (it is: these calls are thread safe).
//  - No policy: no caching, no retries, no event pools. Each call is exactly
//    the driver call(s) it names; a failure is reported once, through fail(),
//    naming the call, its values and the driver's error name and string.
//  - Exportable (BackendParams::exportable): every cuMemCreate requests
//    POSIX file-descriptor handles, so any handle can be exported with
//    cuMemExportToShareableHandle; checked at creation (device attribute and
//    one probe handle), so an unsupported platform fails there, not at a
//    malloc. Imports (cuMemImportFromShareableHandle) need no flag.
//  - Handles: PhysHandle = CUmemGenericAllocationHandle; EventHandle = CUevent
//    cast to uint64_t; Stream = CUstream (NULL = the legacy default stream of
//    the primary context).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>
#include <unordered_map>

#include "backend/backend.hpp"
#include "backend/cuda/cuda_driver.hpp"
#include "backend/driver_errors.hpp"
#include "backend/exported_fds.hpp"
#include "backend/gpu_common.hpp"
#include "backend/pinnable_pages.hpp"
#include "backend/registry.hpp"
#include "common/status.hpp"

namespace vpmm {
namespace {

using cuda::Driver;

constexpr CUresult kCudaErrorStubLibrary = static_cast<CUresult>(34);  // CUDA_ERROR_STUB_LIBRARY
constexpr CUresult kCudaErrorCallRequiresNewerDriver =
    static_cast<CUresult>(36);  // CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER
constexpr uint64_t kDefaultVaSize = 8ull << 40;  // 8 TiB per chunk (see notes: 64 TiB works)

constexpr DriverErrorCodes<CUresult> kCudaErrors{CUDA_ERROR_OUT_OF_MEMORY, CUDA_ERROR_NOT_SUPPORTED,
                                                 CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_INVALID_HANDLE};

vpmm_status status_of(CUresult r, Blame blame) { return driver_status(r, blame, kCudaErrors); }

using gpu::fail_call;
using gpu::ull;

// The driver API as gpu::GpuBackend uses it (see gpu_common.hpp). Every call
// runs with the backend's primary context current (the scope's Current).
struct Cu {
  using Api = Driver;
  using Error = CUresult;
  using Event = CUevent;
  using NativeStream = CUstream;
  using Current = CUcontext;
  // Not constexpr: under -fsanitize the address of a table row is no constant expression.
  static inline const char* const kDriver = backend_kind_name(VPMM_BACKEND_CUDA);
  static constexpr Error kSuccess = CUDA_SUCCESS;
  static constexpr Error kNotReady = CUDA_ERROR_NOT_READY;
  static constexpr const char* kEventRecord = "cuEventRecord";
  static constexpr const char* kEventQuery = "cuEventQuery";
  static constexpr const char* kEventDestroy = "cuEventDestroy";
  static constexpr const char* kStreamWaitEvent = "cuStreamWaitEvent";
  static constexpr const char* kEventSynchronize = "cuEventSynchronize";
  static constexpr const char* kStreamSynchronize = "cuStreamSynchronize";
  static constexpr const char* kDeviceSynchronize = "cuCtxSynchronize";

  static void format_error(Error r, char* buf, size_t n) { (void)cuda::format_error(r, buf, n); }
  static vpmm_status status_of(Error r, Blame b) { return driver_status(r, b, kCudaErrors); }
  static Error get_current(const Api* d, Current* c) { return d->CtxGetCurrent(c); }
  static Error set_current(const Api* d, Current c) { return d->CtxSetCurrent(c); }
  static vpmm_status fail_get_current(Error r, const char* op, int device) {
    return fail_call<Cu>(VPMM_ERR_BACKEND, r, "cuCtxGetCurrent() before %s on device %d", op, device);
  }
  static vpmm_status fail_set_current(Error r, const char* op, int device) {
    return fail_call<Cu>(VPMM_ERR_BACKEND, r, "cuCtxSetCurrent(primary context of device %d) before %s",
                         device, op);
  }
  static Error event_create(const Api* d, Event* e) { return d->EventCreate(e, CU_EVENT_DISABLE_TIMING); }
  static vpmm_status fail_event_create(Error r, int device) {
    return fail_call<Cu>(status_of(r, Blame::backend), r,
                         "cuEventCreate(CU_EVENT_DISABLE_TIMING) on device %d", device);
  }
  static Error event_record(const Api* d, Event e, NativeStream s) { return d->EventRecord(e, s); }
  static Error event_query(const Api* d, Event e) { return d->EventQuery(e); }
  static Error event_destroy(const Api* d, Event e) { return d->EventDestroy(e); }
  static Error event_sync(const Api* d, Event e) { return d->EventSynchronize(e); }
  static Error stream_wait(const Api* d, NativeStream s, Event e) { return d->StreamWaitEvent(s, e, 0); }
  static Error stream_sync(const Api* d, NativeStream s) { return d->StreamSynchronize(s); }
  static Error device_sync(const Api* d) { return d->CtxSynchronize(); }
  static constexpr const char* kStreamCreate = "cuStreamCreate";
  static constexpr const char* kStreamCreateCall = "cuStreamCreate(CU_STREAM_NON_BLOCKING)";
  static constexpr const char* kStreamDestroy = "cuStreamDestroy";
  static constexpr const char* kNullStream = "default";
  static constexpr const char* kMemGetInfo = "cuMemGetInfo";
  // Optional entries of the driver table (older drivers lack them).
  static bool has_stream_create(const Api* d) { return d->StreamCreate != nullptr; }
  static bool has_stream_destroy(const Api* d) { return d->StreamDestroy != nullptr; }
  static Error stream_create(const Api* d, NativeStream* s) {
    return d->StreamCreate(s, CU_STREAM_NON_BLOCKING);
  }
  static Error stream_destroy(const Api* d, NativeStream s) { return d->StreamDestroy(s); }
  static Error mem_get_info(const Api* d, size_t* f, size_t* t) { return d->MemGetInfo(f, t); }
};

CUstream to_stream(Stream s) { return gpu::to_native<Cu>(s); }

class CudaBackend final : public gpu::GpuBackend<CudaBackend, Cu> {
 public:
  // `peers`: bit d = device d also gets read/write access (checked by the factory).
  CudaBackend(const Driver* d, int ordinal, CUdevice dev, CUcontext ctx, uint64_t gran,
              uint64_t recommended, uint64_t peers, bool exportable)
      : d_(d), ordinal_(ordinal), dev_(dev), ctx_(ctx), gran_(gran), recommended_(recommended),
        exportable_(exportable) {
    std::memset(&prop_, 0, sizeof prop_);
    prop_.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop_.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop_.location.id = ordinal;
    if (exportable) prop_.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    // One descriptor per device, the pool's own first: every map, remap and
    // resume goes through do_set_access, so peers keep access across them.
    for (int id = -1; id < 64; ++id) {
      if (id >= 0 && !(peers & (uint64_t(1) << id))) continue;
      CUmemAccessDesc a;
      std::memset(&a, 0, sizeof a);
      a.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
      a.location.id = id < 0 ? ordinal : id;
      a.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
      access_.push_back(a);
    }
  }

  ~CudaBackend() override {
    // At process exit the driver may already be torn down
    // (CUDA_ERROR_DEINITIALIZED): nothing to do about it then.
    (void)d_->DevicePrimaryCtxRelease(dev_);
  }

  const char* name() const override { return backend_kind_name(VPMM_BACKEND_CUDA); }
  int32_t kind() const override { return VPMM_BACKEND_CUDA; }
  uint64_t granularity() const override { return gran_; }
  uint64_t recommended_page_size() const override { return recommended_; }
  uint64_t default_va_size() const override { return kDefaultVaSize; }
  // Every call these abilities need is a required entry of the driver table
  // (cuMemcpy*Async, cuMemHostAlloc, cuMemGetInfo), so the backend has all.
  uint32_t capabilities() const override {
    return kCapDeviceCopy | kCapPinnedHost | kCapMemInfo | (exportable_ ? kCapExport : 0u);
  }
  int device() const override { return ordinal_; }
  // cuMemCreate takes any multiple of the granularity up to device memory.
  uint64_t max_handle_size() const override { return 0; }

 protected:
  vpmm_status do_reserve(uint64_t size, uint64_t alignment, uint64_t* va) override {
    if (va == nullptr) return null_out("reserve");
    Scope sc = scope();
    if (vpmm_status st = sc.enter("cuMemAddressReserve")) return st;
    CUdeviceptr p = 0;
    CUresult r = d_->MemAddressReserve(&p, size, alignment, 0, 0);
    if (r != CUDA_SUCCESS)
      return fail_call<Cu>(status_of(r, Blame::caller), r,
                           "cuMemAddressReserve(size=%llu, alignment=%llu)", ull(size), ull(alignment));
    *va = static_cast<uint64_t>(p);
    return VPMM_OK;
  }

  vpmm_status do_unreserve(uint64_t va, uint64_t size) override {
    Scope sc = scope();
    if (vpmm_status st = sc.enter("cuMemAddressFree")) return st;
    CUresult r = d_->MemAddressFree(static_cast<CUdeviceptr>(va), size);
    if (r != CUDA_SUCCESS)
      return fail_call<Cu>(status_of(r, Blame::caller), r, "cuMemAddressFree(va=0x%llx, size=%llu)",
                           ull(va), ull(size));
    return VPMM_OK;
  }

  vpmm_status do_create(uint64_t size, PhysHandle* out) override {
    if (out == nullptr) return null_out("create");
    Scope sc = scope();
    if (vpmm_status st = sc.enter("cuMemCreate")) return st;
    CUmemGenericAllocationHandle h = 0;
    CUresult r = d_->MemCreate(&h, size, &prop_, 0);
    if (r != CUDA_SUCCESS)
      return fail_call<Cu>(status_of(r, Blame::backend), r, "cuMemCreate(size=%llu, device=%d)",
                           ull(size), ordinal_);
    if (h == 0) {  // the interface reserves 0 for "no handle"; never seen from the driver
      (void)d_->MemRelease(h);
      return fail(VPMM_ERR_BACKEND, "cuda cuMemCreate(size=%llu, device=%d): returned handle 0",
                  ull(size), ordinal_);
    }
    *out = static_cast<PhysHandle>(h);
    return VPMM_OK;
  }

  vpmm_status do_release(PhysHandle h, uint64_t size) override {
    exported_.forget(h);  // the exporter keeps no reference to memory it releases
    imported_.forget(h);
    Scope sc = scope();
    if (vpmm_status st = sc.enter("cuMemRelease")) return st;
    CUresult r = d_->MemRelease(static_cast<CUmemGenericAllocationHandle>(h));
    if (r != CUDA_SUCCESS)
      return fail_call<Cu>(status_of(r, Blame::caller), r, "cuMemRelease(handle=0x%llx, size=%llu)",
                           ull(h), ull(size));
    return VPMM_OK;
  }

  vpmm_status do_map(uint64_t va, uint64_t size, PhysHandle h) override {
    Scope sc = scope();
    if (vpmm_status st = sc.enter("cuMemMap")) return st;
    CUresult r = d_->MemMap(static_cast<CUdeviceptr>(va), size, 0,
                            static_cast<CUmemGenericAllocationHandle>(h), 0);
    if (r != CUDA_SUCCESS)
      return fail_call<Cu>(status_of(r, Blame::caller), r,
                           "cuMemMap(va=0x%llx, size=%llu, offset=0, handle=0x%llx)", ull(va), ull(size),
                           ull(h));
    return VPMM_OK;
  }

  vpmm_status do_unmap(uint64_t va, uint64_t size) override {
    Scope sc = scope();
    if (vpmm_status st = sc.enter("cuMemUnmap")) return st;
    CUresult r = d_->MemUnmap(static_cast<CUdeviceptr>(va), size);
    if (r != CUDA_SUCCESS)
      return fail_call<Cu>(status_of(r, Blame::caller), r, "cuMemUnmap(va=0x%llx, size=%llu)", ull(va),
                           ull(size));
    return VPMM_OK;
  }

  vpmm_status do_set_access(uint64_t va, uint64_t size) override {
    Scope sc = scope();
    if (vpmm_status st = sc.enter("cuMemSetAccess")) return st;
    CUresult r = d_->MemSetAccess(static_cast<CUdeviceptr>(va), size, access_.data(), access_.size());
    if (r != CUDA_SUCCESS)
      return fail_call<Cu>(status_of(r, Blame::caller), r,
                           "cuMemSetAccess(va=0x%llx, size=%llu, device=%d%s, READWRITE)", ull(va),
                           ull(size), ordinal_, access_.size() > 1 ? " and its peer devices" : "");
    return VPMM_OK;
  }

  vpmm_status do_copy_d2h(void* dst, uint64_t src, uint64_t size, Stream s) override {
    if (size == 0) return VPMM_OK;
    if (dst == nullptr || src == 0)
      return null_copy("copy_d2h", dst == nullptr, size);
    Scope sc = scope();
    if (vpmm_status st = sc.enter("cuMemcpyDtoHAsync")) return st;
    CUresult r = d_->MemcpyDtoHAsync(dst, static_cast<CUdeviceptr>(src), size, to_stream(s));
    if (r != CUDA_SUCCESS)
      return fail_call<Cu>(status_of(r, Blame::caller), r,
                           "cuMemcpyDtoHAsync(dst=%p, src=0x%llx, size=%llu, stream=%p)", dst, ull(src),
                           ull(size), s);
    return VPMM_OK;
  }

  vpmm_status do_copy_h2d(uint64_t dst, const void* src, uint64_t size, Stream s) override {
    if (size == 0) return VPMM_OK;
    if (dst == 0 || src == nullptr)
      return null_copy("copy_h2d", dst == 0, size);
    Scope sc = scope();
    if (vpmm_status st = sc.enter("cuMemcpyHtoDAsync")) return st;
    CUresult r = d_->MemcpyHtoDAsync(static_cast<CUdeviceptr>(dst), src, size, to_stream(s));
    if (r != CUDA_SUCCESS)
      return fail_call<Cu>(status_of(r, Blame::caller), r,
                           "cuMemcpyHtoDAsync(dst=0x%llx, src=%p, size=%llu, stream=%p)", ull(dst), src,
                           ull(size), s);
    return VPMM_OK;
  }

  vpmm_status do_device_id(uint8_t out[16]) override {
    if (d_->DeviceGetUuid == nullptr)
      return fail(VPMM_ERR_UNSUPPORTED, "cuda: the driver has no cuDeviceGetUuid (needed to tell devices "
                                        "apart across processes)");
    CUuuid u;
    CUresult r = d_->DeviceGetUuid(&u, dev_);
    if (r != CUDA_SUCCESS)
      return fail_call<Cu>(status_of(r, Blame::backend), r, "cuDeviceGetUuid(device=%d)", ordinal_);
    std::memcpy(out, u.bytes, 16);
    return VPMM_OK;
  }

  vpmm_status do_export_handle(PhysHandle h, uint64_t size, int* fd) override {
    // The driver's export once per handle; later ones duplicate it.
    vpmm_status kept = VPMM_OK;
    if (exported_.dup_kept(h, fd, &kept, "cuda export_handle")) return kept;
    const uint64_t started = exported_.begin(h);
    Scope sc = scope();
    if (vpmm_status st = sc.enter("cuMemExportToShareableHandle")) {
      exported_.abandon(h);
      return st;
    }
    int f = -1;
    CUresult r = d_->MemExportToShareableHandle(&f, static_cast<CUmemGenericAllocationHandle>(h),
                                                CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
    if (r != CUDA_SUCCESS) {
      exported_.abandon(h);
      return fail_call<Cu>(status_of(r, Blame::caller), r,
                           "cuMemExportToShareableHandle(handle=0x%llx, size=%llu, POSIX_FILE_DESCRIPTOR)",
                           ull(h), ull(size));
    }
    return exported_.finish(h, started, f, fd, "cuda export_handle");
  }

  vpmm_status do_import_handle(int fd, uint64_t size, PhysHandle* out) override {
    if (d_->MemImportFromShareableHandle == nullptr)
      return fail(VPMM_ERR_UNSUPPORTED, "cuda: the driver has no cuMemImportFromShareableHandle");
    Scope sc = scope();
    if (vpmm_status st = sc.enter("cuMemImportFromShareableHandle")) return st;
    CUmemGenericAllocationHandle h = 0;
    // The descriptor is passed by value, cast to a pointer (the driver's convention).
    CUresult r = d_->MemImportFromShareableHandle(&h, reinterpret_cast<void*>(static_cast<intptr_t>(fd)),
                                                  CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    if (r != CUDA_SUCCESS)
      return fail_call<Cu>(status_of(r, Blame::caller), r,
                           "cuMemImportFromShareableHandle(fd=%d, size=%llu, POSIX_FILE_DESCRIPTOR)", fd,
                           ull(size));
    if (h == 0) {
      (void)d_->MemRelease(h);
      return fail(VPMM_ERR_BACKEND, "cuda cuMemImportFromShareableHandle(fd=%d): returned handle 0", fd);
    }
    imported_.keep(static_cast<PhysHandle>(h), fd);
    *out = static_cast<PhysHandle>(h);
    return VPMM_OK;
  }

  bool do_same_memory(PhysHandle h, uint64_t, int fd) override { return imported_.same(h, fd); }

  // Pinned host memory: anonymous huge-page-advised pages registered with
  // cuMemHostRegister where the driver has it, else cuMemHostAlloc. The first
  // pins faster (bench_pause_resume on the H100: 4 GiB in 1.0-1.2 s against
  // 1.5-1.8 s), and pinning is what a first pause with backups of many GiB
  // waits for. PORTABLE: pinned for every context, so buffers may
  // serve pools on several devices.
  vpmm_status do_host_alloc_pinned(uint64_t size, void** out) override {
    if (out == nullptr) return null_out("host_alloc_pinned");
    if (size == 0)
      return fail(VPMM_ERR_INVALID_ARGUMENT, "cuda host_alloc_pinned: size 0 is not allowed");
    Scope sc = scope();
    if (vpmm_status st = sc.enter("cuMemHostAlloc")) return st;
    if (void* p = register_pages(size)) {
      *out = p;
      return VPMM_OK;
    }
    void* p = nullptr;
    CUresult r = d_->MemHostAlloc(&p, size, CU_MEMHOSTALLOC_PORTABLE);
    if (r != CUDA_SUCCESS)
      return fail_call<Cu>(status_of(r, Blame::backend), r,
                           "cuMemHostAlloc(size=%llu, CU_MEMHOSTALLOC_PORTABLE)", ull(size));
    *out = p;
    return VPMM_OK;
  }

  vpmm_status do_host_free_pinned(void* p, uint64_t size) override {
    if (p == nullptr)
      return fail(VPMM_ERR_INVALID_ARGUMENT, "cuda host_free_pinned: null pointer (size %llu)",
                  ull(size));
    Scope sc = scope();
    if (vpmm_status st = sc.enter("cuMemFreeHost")) return st;
    if (pinned_.mapped_length(p) != 0) {
      CUresult r = d_->MemHostUnregister(p);
      if (r != CUDA_SUCCESS)
        return fail_call<Cu>(status_of(r, Blame::caller), r, "cuMemHostUnregister(p=%p, size=%llu)", p,
                             ull(size));
      pinned_.release(p);
      return VPMM_OK;
    }
    CUresult r = d_->MemFreeHost(p);
    if (r != CUDA_SUCCESS)
      return fail_call<Cu>(status_of(r, Blame::caller), r, "cuMemFreeHost(p=%p, size=%llu)", p,
                           ull(size));
    return VPMM_OK;
  }

 private:
  friend class gpu::GpuBackend<CudaBackend, Cu>;
  const Driver* api() const { return d_; }
  int ordinal() const { return ordinal_; }
  CUcontext scope_target() const { return ctx_; }

  // Populated huge-page memory + cuMemHostRegister; nullptr when any step
  // fails (the caller falls back to cuMemHostAlloc, whose error is the one
  // worth reporting). The context is current.
  void* register_pages(uint64_t size) {
    if (d_->MemHostRegister == nullptr || d_->MemHostUnregister == nullptr) return nullptr;
    return pinned_.pin(
        size,
        [&](void* p, uint64_t n) { return d_->MemHostRegister(p, n, CU_MEMHOSTREGISTER_PORTABLE) == CUDA_SUCCESS; },
        [&](void* p) { (void)d_->MemHostUnregister(p); });
  }


  const Driver* d_;
  int ordinal_;
  CUdevice dev_;
  CUcontext ctx_;
  uint64_t gran_;
  uint64_t recommended_;
  bool exportable_;
  CUmemAllocationProp prop_;
  std::vector<CUmemAccessDesc> access_;  // this device, then each peer
  PinnedPages pinned_;  // backups pinned by registration (register_pages)
  ExportedFds exported_;  // each exported handle's descriptor, until its release
  ImportedFds imported_;  // what each imported handle came from, until its release
};

// Status for a failed cuInit: the driver being absent, a stub, too old or
// seeing no device means "CUDA is not available here".
vpmm_status init_status(CUresult r) {
  switch (r) {
    case CUDA_ERROR_NO_DEVICE:
    case CUDA_ERROR_SYSTEM_DRIVER_MISMATCH:
    case CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE:
    case CUDA_ERROR_NOT_SUPPORTED:
      return VPMM_ERR_UNSUPPORTED;
    default:
      // By number: these enumerators are missing from older cuda.h.
      if (r == kCudaErrorStubLibrary || r == kCudaErrorCallRequiresNewerDriver)
        return VPMM_ERR_UNSUPPORTED;
      return status_of(r, Blame::backend);
  }
}

std::unique_ptr<Backend> fail_create(vpmm_status s, vpmm_status* st) {
  if (st != nullptr) *st = s;
  return nullptr;
}

// Queries one granularity of `prop` under the primary context.
vpmm_status query_granularity(const Driver* d, const CUmemAllocationProp& prop,
                              CUmemAllocationGranularity_flags which, const char* which_name,
                              int ordinal, uint64_t* out) {
  size_t g = 0;
  CUresult r = d->MemGetAllocationGranularity(&g, &prop, which);
  if (r != CUDA_SUCCESS)
    return fail_call<Cu>(status_of(r, Blame::backend), r,
                         "cuMemGetAllocationGranularity(PINNED, device=%d, %s)", ordinal, which_name);
  if (g == 0)
    return fail(VPMM_ERR_BACKEND, "cuda cuMemGetAllocationGranularity(PINNED, device=%d, %s): 0",
                ordinal, which_name);
  *out = g;
  return VPMM_OK;
}

// An exportable pool is refused at creation where its handles could not be
// exported: no export entry point, a device without POSIX file-descriptor
// handles, or a platform whose cuMemCreate refuses the request (tried once
// on a handle of the smallest size). The context is current.
vpmm_status check_exportable(const Driver* d, CUdevice dev, const CUmemAllocationProp& prop, int ordinal) {
  if (d->MemExportToShareableHandle == nullptr || d->MemImportFromShareableHandle == nullptr)
    return fail(VPMM_ERR_UNSUPPORTED,
                "cuda: exportable = 1 needs cuMemExportToShareableHandle, which this driver lacks");
  if (d->DeviceGetAttribute != nullptr) {
    int ok = 0;
    CUresult r = d->DeviceGetAttribute(&ok, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, dev);
    if (r != CUDA_SUCCESS)
      return fail_call<Cu>(VPMM_ERR_BACKEND, r,
                           "cuDeviceGetAttribute(HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, device=%d)", ordinal);
    if (!ok)
      return fail(VPMM_ERR_UNSUPPORTED,
                  "cuda: device %d has no POSIX file-descriptor handles "
                  "(CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED = 0): exportable = 1 "
                  "cannot be honoured",
                  ordinal);
  }
  size_t g = 0;
  CUresult r = d->MemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
  CUmemGenericAllocationHandle h = 0;
  if (r == CUDA_SUCCESS) r = d->MemCreate(&h, g, &prop, 0);
  if (r != CUDA_SUCCESS)
    return fail_call<Cu>(status_of(r, Blame::backend) == VPMM_ERR_OUT_OF_MEMORY ? VPMM_ERR_OUT_OF_MEMORY
                                                                                  : VPMM_ERR_UNSUPPORTED,
                         r, "cuMemCreate(size=%llu, device=%d, POSIX_FILE_DESCRIPTOR) for exportable = 1",
                         ull(g), ordinal);
  (void)d->MemRelease(h);
  return VPMM_OK;
}

bool cuda_backend_usable() {
  const Driver* d = cuda::driver();
  if (d == nullptr) return false;
  if (d->Init(0) != CUDA_SUCCESS) return false;
  int count = 0;
  if (d->DeviceGetCount(&count) != CUDA_SUCCESS) return false;
  return count >= 1;
}

std::unique_ptr<Backend> make_cuda_backend(const BackendParams& p, vpmm_status* st) {
  const char* why = nullptr;
  const Driver* d = cuda::driver(&why);
  if (d == nullptr)
    return fail_create(
        fail(VPMM_ERR_UNSUPPORTED, "cuda: the CUDA driver is not usable: %s", why ? why : "?"), st);

  CUresult r = d->Init(0);
  if (r != CUDA_SUCCESS) return fail_create(fail_call<Cu>(init_status(r), r, "cuInit(0)"), st);

  int count = 0;
  r = d->DeviceGetCount(&count);
  if (r != CUDA_SUCCESS)
    return fail_create(fail_call<Cu>(VPMM_ERR_BACKEND, r, "cuDeviceGetCount()"), st);
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  if (count < 1)
    return fail_create(fail(VPMM_ERR_UNSUPPORTED,
                            "cuda: no CUDA device visible (cuDeviceGetCount = 0, "
                            "CUDA_VISIBLE_DEVICES=%s)",
                            visible ? visible : "<unset>"),
                       st);
  if (p.device < 0 || p.device >= count)
    return fail_create(fail(VPMM_ERR_INVALID_ARGUMENT,
                            "cuda: device %d out of range: %d CUDA device%s visible (valid: 0..%d, "
                            "CUDA_VISIBLE_DEVICES=%s)",
                            p.device, count, count == 1 ? "" : "s", count - 1,
                            visible ? visible : "<unset>"),
                       st);

  CUdevice dev = 0;
  r = d->DeviceGet(&dev, p.device);
  if (r != CUDA_SUCCESS)
    return fail_create(fail_call<Cu>(VPMM_ERR_BACKEND, r, "cuDeviceGet(ordinal=%d)", p.device), st);

  if (d->DeviceGetAttribute != nullptr) {
    int vmm = 0;
    r = d->DeviceGetAttribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev);
    if (r != CUDA_SUCCESS)
      return fail_create(
          fail_call<Cu>(VPMM_ERR_BACKEND, r,
                        "cuDeviceGetAttribute(VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, device=%d)", p.device),
          st);
    if (vmm == 0)
      return fail_create(fail(VPMM_ERR_UNSUPPORTED,
                              "cuda: device %d does not support virtual memory management "
                              "(CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED = 0)",
                              p.device),
                         st);
  }

  // Peer devices (vpmm_config.peer_devices): each must exist, differ from
  // this device and be able to reach it, or the pool is not made at all.
  for (int peer = 0; peer < 64; ++peer) {
    if (!(p.peer_devices & (uint64_t(1) << peer))) continue;
    if (peer == p.device || peer >= count)
      return fail_create(fail(VPMM_ERR_INVALID_ARGUMENT,
                              "cuda: peer device %d %s (peer_devices 0x%llx, %d device%s visible)",
                              peer, peer == p.device ? "is the pool's own device" : "does not exist",
                              ull(p.peer_devices), count, count == 1 ? "" : "s"),
                         st);
    CUdevice peer_dev = 0;
    int can = 0;
    if (d->DeviceCanAccessPeer == nullptr)
      return fail_create(fail(VPMM_ERR_UNSUPPORTED, "cuda: the driver has no cuDeviceCanAccessPeer: "
                                                    "peer_devices cannot be checked"),
                         st);
    r = d->DeviceGet(&peer_dev, peer);
    if (r == CUDA_SUCCESS) r = d->DeviceCanAccessPeer(&can, peer_dev, dev);
    if (r != CUDA_SUCCESS)
      return fail_create(fail_call<Cu>(VPMM_ERR_BACKEND, r, "cuDeviceCanAccessPeer(device=%d, peer=%d)",
                                       peer, p.device),
                         st);
    if (!can)
      return fail_create(fail(VPMM_ERR_UNSUPPORTED,
                              "cuda: device %d cannot access device %d's memory "
                              "(cuDeviceCanAccessPeer = 0): no P2P path between them",
                              peer, p.device),
                         st);
  }

  CUcontext ctx = nullptr;
  r = d->DevicePrimaryCtxRetain(&ctx, dev);
  if (r != CUDA_SUCCESS)
    return fail_create(fail_call<Cu>(status_of(r, Blame::backend), r,
                                     "cuDevicePrimaryCtxRetain(device=%d)", p.device),
                       st);

  // From here on the retain must be undone on every failure path.
  CUmemAllocationProp prop;
  std::memset(&prop, 0, sizeof prop);
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = p.device;
  if (p.exportable) prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  uint64_t gran = 0, rec = 0;
  vpmm_status s = VPMM_OK;
  {
    gpu::CurrentScope<Cu> scope(d, ctx, p.device);
    s = scope.enter("cuMemGetAllocationGranularity");
    if (s == VPMM_OK && p.exportable) s = check_exportable(d, dev, prop, p.device);
    if (s == VPMM_OK)
      s = query_granularity(d, prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM, "MINIMUM", p.device, &gran);
    if (s == VPMM_OK)
      s = query_granularity(d, prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED, "RECOMMENDED", p.device,
                            &rec);
  }
  if (s != VPMM_OK) {
    (void)d->DevicePrimaryCtxRelease(dev);
    return fail_create(s, st);
  }
  // The page size must be a multiple of the granularity (Backend's contract);
  // a recommendation that is not one would be a driver oddity: use the minimum.
  if (rec < gran || rec % gran != 0) rec = gran;

  std::unique_ptr<Backend> b;
  try {
    b.reset(new CudaBackend(d, p.device, dev, ctx, gran, rec, p.peer_devices, p.exportable));
  } catch (...) {
    (void)d->DevicePrimaryCtxRelease(dev);
    return fail_create(fail(VPMM_ERR_OUT_OF_MEMORY, "cuda: out of host memory creating the backend"),
                       st);
  }
  if (st != nullptr) *st = VPMM_OK;
  return b;
}

}  // namespace

extern const BackendEntry kCudaBackendEntry;
const BackendEntry kCudaBackendEntry = {VPMM_BACKEND_CUDA, backend_kind_name(VPMM_BACKEND_CUDA), make_cuda_backend,
                                        cuda_backend_usable, nullptr, nullptr};

}  // namespace vpmm
