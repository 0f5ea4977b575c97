// The HIP backend: Backend's do_* calls as HIP virtual-memory calls on one AMD
// device, through the run-time loaded table of hip_runtime.hpp. The same shape
// as the CUDA backend, plus the adaptations ROCm's behaviour requires
// (../shared notes, summarised in docs/backends.md; every one is a fact about
// the driver, none is a pool policy):
//  - Granularity: ROCm reports the 4 KiB "runtime alloc granule", and RDNA4
//    faults with 4 KiB VMM pages; the backend's granularity is at least
//    2 MiB (kPageFloor; VPMM_HIP_PAGE_FLOOR lowers it, for the test emulator).
//  - Chunked handles (ROCm < 7.0): large hipMemCreate calls fail on 6.x, so
//    max_handle_size() states the chunk size and the pool's growth policy
//    never asks for a larger handle. Every map and unmap is then one chunk.
//  - set_access is issued once per mapping (per chunk), never across chunks:
//    ROCm 7.0-7.2 validates coverage from the first sub-buffer
//    (rocm-systems#2516). The backend keeps the table of its mappings for it.
//  - A release that arrives while the handle is still mapped is deferred to
//    the last unmap: the Backend contract allows it (CUDA does), ROCm does
//    not (ROCR-Runtime#257: the VA can then never be freed).
//  - ROCm 7.2 frees nothing on unmap + release while the VA stays reserved
//    (TMS#83): on affected versions (or when forced) an unmap also frees that
//    VA range and reserves the same address again, checking it came back.
//  - hipMemAddressReserve may fail with an explicit alignment where 0 works
//    (vLLM#43022): retried with 0 and the alignment checked here.
//  - hipMemAddressReserve may "succeed" with NULL (ROCm 6.0 and before, VMM
//    not implemented): UNSUPPORTED, naming the runtime version.
//  - hipMemAllocationProp changed layout in ROCm 6.0: filled in the layout of
//    the runtime that was loaded, not of the header compiled against.
//  - Exportable (BackendParams::exportable): hipMemCreate requests POSIX
//    file-descriptor handles; export/import through the optional
//    hipMem{Export,Import}*ShareableHandle entries (fixed for VMM in ROCm
//    6.2). The descriptor is passed to the import by value, as on CUDA.
//
// Invariants:
//  - One backend = one device ordinal. Every runtime call runs with that
//    device current on the calling thread, and the thread's previous device
//    is put back afterwards (gpu::CurrentScope, shared with the CUDA backend).
//  - Fixed at construction: version, granularity, chunk size, workaround
//    switch. Mutable state (mappings, handles) is behind mu_, registered
//    pinned buffers behind PinnedPages' own lock; no runtime call is made
//    while holding mu_ except where the table and the driver must change
//    together (map/unmap/release), so the table never disagrees with it.
//  - Handles: PhysHandle = hipMemGenericAllocationHandle_t; EventHandle =
//    hipEvent_t; Stream = hipStream_t (NULL = the null stream).
#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "backend/backend.hpp"
#include "backend/hip/hip_backend_info.hpp"
#include "backend/hip/hip_runtime.hpp"
#include "backend/driver_errors.hpp"
#include "backend/exported_fds.hpp"
#include "backend/gpu_common.hpp"
#include "backend/pinnable_pages.hpp"
#include "backend/registry.hpp"
#include "common/status.hpp"

namespace vpmm {
namespace {

using hip::Runtime;

constexpr uint64_t kDefaultVaSize = 8ull << 40;  // like CUDA: VA is cheap, more chunks on demand

// hipErrorOutOfMemory is also hipErrorMemoryAllocation (same value): a full VA space.
constexpr DriverErrorCodes<hipError_t> kHipErrors{hipErrorOutOfMemory, hipErrorNotSupported,
                                                  hipErrorInvalidValue, hipErrorInvalidHandle};

vpmm_status status_of(hipError_t r, Blame blame) { return driver_status(r, blame, kHipErrors); }

using gpu::fail_call;
using gpu::ull;

void* vp(uint64_t va) { return reinterpret_cast<void*>(static_cast<uintptr_t>(va)); }
uint64_t u64(const void* p) { return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(p)); }

// The runtime as gpu::GpuBackend uses it (see gpu_common.hpp). Every call
// runs with the backend's device current (the scope's Current).
struct Hip {
  using Api = Runtime;
  using Error = hipError_t;
  using Event = hipEvent_t;
  using NativeStream = hipStream_t;
  using Current = int;
  // Not constexpr: under -fsanitize the address of a table row is no constant expression.
  static inline const char* const kDriver = backend_kind_name(VPMM_BACKEND_HIP);
  static constexpr Error kSuccess = hipSuccess;
  static constexpr Error kNotReady = hipErrorNotReady;
  static constexpr const char* kEventRecord = "hipEventRecord";
  static constexpr const char* kEventQuery = "hipEventQuery";
  static constexpr const char* kEventDestroy = "hipEventDestroy";
  static constexpr const char* kStreamWaitEvent = "hipStreamWaitEvent";
  static constexpr const char* kEventSynchronize = "hipEventSynchronize";
  static constexpr const char* kStreamSynchronize = "hipStreamSynchronize";
  static constexpr const char* kDeviceSynchronize = "hipDeviceSynchronize";

  static void format_error(Error r, char* buf, size_t n) { (void)hip::format_error(r, buf, n); }
  static vpmm_status status_of(Error r, Blame b) { return driver_status(r, b, kHipErrors); }
  static Error get_current(const Api* rt, Current* d) { return rt->GetDevice(d); }
  static Error set_current(const Api* rt, Current d) { return rt->SetDevice(d); }
  static vpmm_status fail_get_current(Error r, const char* op, int) {
    return fail_call<Hip>(VPMM_ERR_BACKEND, r, "hipGetDevice() before %s", op);
  }
  static vpmm_status fail_set_current(Error r, const char* op, int device) {
    return fail_call<Hip>(VPMM_ERR_BACKEND, r, "hipSetDevice(%d) before %s", device, op);
  }
  static Error event_create(const Api* rt, Event* e) {
    return rt->EventCreateWithFlags(e, hipEventDisableTiming);
  }
  static vpmm_status fail_event_create(Error r, int) {
    return fail_call<Hip>(status_of(r, Blame::backend), r, "hipEventCreateWithFlags(hipEventDisableTiming)");
  }
  static Error event_record(const Api* rt, Event e, NativeStream s) { return rt->EventRecord(e, s); }
  static Error event_query(const Api* rt, Event e) { return rt->EventQuery(e); }
  static Error event_destroy(const Api* rt, Event e) { return rt->EventDestroy(e); }
  static Error event_sync(const Api* rt, Event e) { return rt->EventSynchronize(e); }
  static Error stream_wait(const Api* rt, NativeStream s, Event e) { return rt->StreamWaitEvent(s, e, 0); }
  static Error stream_sync(const Api* rt, NativeStream s) { return rt->StreamSynchronize(s); }
  static Error device_sync(const Api* rt) { return rt->DeviceSynchronize(); }
  static constexpr const char* kStreamCreate = "hipStreamCreateWithFlags";
  static constexpr const char* kStreamCreateCall = "hipStreamCreateWithFlags(hipStreamNonBlocking)";
  static constexpr const char* kStreamDestroy = "hipStreamDestroy";
  static constexpr const char* kNullStream = "null";
  static constexpr const char* kMemGetInfo = "hipMemGetInfo";
  // Required entries of the runtime table: always loaded.
  static bool has_stream_create(const Api*) { return true; }
  static bool has_stream_destroy(const Api*) { return true; }
  static Error stream_create(const Api* rt, NativeStream* s) {
    return rt->StreamCreateWithFlags(s, hipStreamNonBlocking);
  }
  static Error stream_destroy(const Api* rt, NativeStream s) { return rt->StreamDestroy(s); }
  static Error mem_get_info(const Api* rt, size_t* f, size_t* t) { return rt->MemGetInfo(f, t); }
};

hipStream_t to_stream(Stream s) { return gpu::to_native<Hip>(s); }
hipMemGenericAllocationHandle_t to_handle(PhysHandle h) {
  return reinterpret_cast<hipMemGenericAllocationHandle_t>(static_cast<uintptr_t>(h));
}

// The facts make_hip_backend established (see HipFacts in hip_backend_info.hpp).
struct Setup {
  int ordinal = 0;
  hip::HipFacts facts;
  uint64_t gran = 0;
  uint64_t recommended = 0;
};

class HipBackend final : public gpu::GpuBackend<HipBackend, Hip> {
 public:
  HipBackend(const Runtime* r, const Setup& s, bool exportable) : r_(r), s_(s), exportable_(exportable) {
    // The allocation properties in the loaded runtime's layout.
    std::memset(prop_, 0, sizeof prop_);
    if (s.facts.version >= hip::kFirstVersionWithV6Prop) {
      hip::AllocationPropV6 p;
      std::memset(&p, 0, sizeof p);
      p.type = hipMemAllocationTypePinned;
      p.location.type = hipMemLocationTypeDevice;
      p.location.id = s.ordinal;
      if (exportable) p.requestedHandleType = hipMemHandleTypePosixFileDescriptor;
      std::memcpy(prop_, &p, sizeof p);
    } else {
      hipMemAllocationProp p;
      std::memset(&p, 0, sizeof p);
      p.type = hipMemAllocationTypePinned;
      p.location.type = hipMemLocationTypeDevice;
      p.location.id = s.ordinal;
      if (exportable) p.requestedHandleType = hipMemHandleTypePosixFileDescriptor;
      std::memcpy(prop_, &p, sizeof p);
    }
    std::memset(&access_, 0, sizeof access_);
    access_.location.type = hipMemLocationTypeDevice;
    access_.location.id = s.ordinal;
    access_.flags = hipMemAccessFlagsProtReadWrite;
  }

  const char* name() const override { return backend_kind_name(VPMM_BACKEND_HIP); }
  int32_t kind() const override { return VPMM_BACKEND_HIP; }
  uint64_t granularity() const override { return s_.gran; }
  uint64_t recommended_page_size() const override { return s_.recommended; }
  uint64_t default_va_size() const override { return kDefaultVaSize; }
  uint32_t capabilities() const override {
    uint32_t c = kCapDeviceCopy | kCapMemInfo;  // hipMemcpy*Async and hipMemGetInfo are required
    if (r_->HostRegister != nullptr || r_->HostMalloc != nullptr) c |= kCapPinnedHost;
    if (exportable_) c |= kCapExport;
    return c;
  }
  int device() const override { return s_.ordinal; }
  // The chunk size on the chunked path (ROCm < 7.0 or forced), else none.
  uint64_t max_handle_size() const override { return s_.facts.chunk_size; }

 protected:
  vpmm_status do_reserve(uint64_t size, uint64_t alignment, uint64_t* va) override {
    if (va == nullptr) return null_out("reserve");
    Scope sc = scope();
    if (vpmm_status st = sc.enter("hipMemAddressReserve")) return st;
    void* p = nullptr;
    hipError_t e = r_->MemAddressReserve(&p, size, alignment, nullptr, 0);
    if (e != hipSuccess && alignment != 0) {
      // vLLM#43022: an explicit alignment can fail where 0 succeeds. Ask
      // again without it and check the alignment ourselves.
      void* q = nullptr;
      hipError_t e0 = r_->MemAddressReserve(&q, size, 0, nullptr, 0);
      if (e0 == hipSuccess && q != nullptr && u64(q) % alignment == 0) {
        e = hipSuccess;
        p = q;
      } else if (e0 == hipSuccess && q != nullptr) {
        (void)r_->MemAddressFree(q, size);
        return fail_call<Hip>(status_of(e, Blame::caller), e,
                              "hipMemAddressReserve(size=%llu, alignment=%llu) (retried with alignment 0: "
                              "got %p, not aligned to %llu)",
                              ull(size), ull(alignment), q, ull(alignment));
      }
    }
    if (e != hipSuccess)
      return fail_call<Hip>(status_of(e, Blame::caller), e,
                            "hipMemAddressReserve(size=%llu, alignment=%llu)", ull(size), ull(alignment));
    if (p == nullptr) return null_reservation(size);
    if (s_.facts.recycle_va) {
      try {
        std::lock_guard<std::mutex> lk(mu_);
        pieces_[u64(p)] = size;
      } catch (...) {
        (void)r_->MemAddressFree(p, size);
        return fail(VPMM_ERR_OUT_OF_MEMORY, "hip reserve: out of host memory for the VA table");
      }
    }
    *va = u64(p);
    return VPMM_OK;
  }

  vpmm_status do_unreserve(uint64_t va, uint64_t size) override {
    Scope sc = scope();
    if (vpmm_status st = sc.enter("hipMemAddressFree")) return st;
    if (s_.facts.recycle_va) return unreserve_pieces(va, size);
    hipError_t e = r_->MemAddressFree(vp(va), size);
    if (e != hipSuccess)
      return fail_call<Hip>(status_of(e, Blame::caller), e, "hipMemAddressFree(va=0x%llx, size=%llu)",
                            ull(va), ull(size));
    return VPMM_OK;
  }

  vpmm_status do_create(uint64_t size, PhysHandle* out) override {
    if (out == nullptr) return null_out("create");
    // No check against the chunk size: it is what the pool asks for at most
    // (max_handle_size), the runtime decides what it can create.
    Scope sc = scope();
    if (vpmm_status st = sc.enter("hipMemCreate")) return st;
    hipMemGenericAllocationHandle_t h = nullptr;
    hipError_t e = r_->MemCreate(&h, size, reinterpret_cast<const hipMemAllocationProp*>(prop_), 0);
    if (e != hipSuccess)
      return fail_call<Hip>(status_of(e, Blame::backend), e, "hipMemCreate(size=%llu, device=%d)",
                            ull(size), s_.ordinal);
    if (h == nullptr)
      return fail(VPMM_ERR_BACKEND, "hip hipMemCreate(size=%llu, device=%d): returned a NULL handle",
                  ull(size), s_.ordinal);
    try {
      std::lock_guard<std::mutex> lk(mu_);
      handles_[u64(h)] = HandleRec{size, 0, false};
    } catch (...) {
      (void)r_->MemRelease(h);
      return fail(VPMM_ERR_OUT_OF_MEMORY, "hip create: out of host memory for the handle table");
    }
    *out = u64(h);
    return VPMM_OK;
  }

  vpmm_status do_release(PhysHandle h, uint64_t size) override {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = handles_.find(h);
    if (it == handles_.end() || it->second.release_pending)
      return fail(VPMM_ERR_INVALID_ARGUMENT, "hip release: handle 0x%llx (size %llu) is not live",
                  ull(h), ull(size));
    exported_.forget(h);  // the exporter keeps no reference to memory it releases
    imported_.forget(h);
    if (it->second.maps > 0) {  // ROCR-Runtime#257: released at the last unmap
      it->second.release_pending = true;
      return VPMM_OK;
    }
    Scope sc = scope();
    if (vpmm_status st = sc.enter("hipMemRelease")) return st;
    hipError_t e = r_->MemRelease(to_handle(h));
    if (e != hipSuccess)
      return fail_call<Hip>(status_of(e, Blame::caller), e, "hipMemRelease(handle=0x%llx, size=%llu)",
                            ull(h), ull(size));
    handles_.erase(it);
    return VPMM_OK;
  }

  vpmm_status do_map(uint64_t va, uint64_t size, PhysHandle h) override {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = handles_.find(h);
    if (it == handles_.end() || it->second.release_pending)
      return fail(VPMM_ERR_INVALID_ARGUMENT, "hip map: handle 0x%llx is not live", ull(h));
    if (it->second.size != size)  // hipMemMap needs offset 0 and the whole handle
      return fail(VPMM_ERR_INVALID_ARGUMENT,
                  "hip map: size %llu differs from the handle's %llu (a handle maps whole)",
                  ull(size), ull(it->second.size));
    Scope sc = scope();
    if (vpmm_status st = sc.enter("hipMemMap")) return st;
    if (s_.facts.recycle_va) {
      if (vpmm_status st = carve(va, size)) return st;
    }
    hipError_t e = r_->MemMap(vp(va), size, 0, to_handle(h), 0);
    if (e != hipSuccess)
      return fail_call<Hip>(status_of(e, Blame::caller), e,
                            "hipMemMap(va=0x%llx, size=%llu, offset=0, handle=0x%llx)", ull(va), ull(size),
                            ull(h));
    try {
      maps_[va] = MapRec{size, h};
    } catch (...) {
      (void)r_->MemUnmap(vp(va), size);
      return fail(VPMM_ERR_OUT_OF_MEMORY, "hip map: out of host memory for the mapping table");
    }
    ++it->second.maps;
    return VPMM_OK;
  }

  vpmm_status do_unmap(uint64_t va, uint64_t size) override {
    std::lock_guard<std::mutex> lk(mu_);
    auto m = maps_.find(va);
    if (m == maps_.end() || m->second.size != size)
      return fail(VPMM_ERR_INVALID_ARGUMENT,
                  "hip unmap: (va=0x%llx, size=%llu) is not one whole mapping", ull(va), ull(size));
    Scope sc = scope();
    if (vpmm_status st = sc.enter("hipMemUnmap")) return st;
    hipError_t e = r_->MemUnmap(vp(va), size);
    if (e != hipSuccess)
      return fail_call<Hip>(status_of(e, Blame::caller), e, "hipMemUnmap(va=0x%llx, size=%llu)", ull(va),
                            ull(size));
    const PhysHandle h = m->second.handle;
    maps_.erase(m);
    auto it = handles_.find(h);
    vpmm_status st = VPMM_OK;
    if (it != handles_.end() && --it->second.maps == 0 && it->second.release_pending) {
      hipError_t re = r_->MemRelease(to_handle(h));
      if (re == hipSuccess)
        handles_.erase(it);
      else  // the handle stays pending: a later unmap cannot retry it, so say so now
        st = fail_call<Hip>(VPMM_ERR_BACKEND, re, "hipMemRelease(handle=0x%llx) deferred to its unmap",
                            ull(h));
    }
    if (s_.facts.recycle_va) {
      vpmm_status rs = recycle(va, size);
      if (st == VPMM_OK) st = rs;
    }
    return st;
  }

  vpmm_status do_set_access(uint64_t va, uint64_t size) override {
    std::lock_guard<std::mutex> lk(mu_);
    // Once per mapping, in address order; the range must be exactly a run of
    // whole mappings (the Backend contract).
    const uint64_t end = va + size;
    uint64_t cur = va;
    auto m = maps_.find(va);
    Scope sc = scope();
    if (vpmm_status st = sc.enter("hipMemSetAccess")) return st;
    while (cur < end) {
      if (m == maps_.end() || m->first != cur || cur + m->second.size > end)
        return fail(VPMM_ERR_INVALID_ARGUMENT,
                    "hip set_access: (va=0x%llx, size=%llu) is not a run of whole mappings "
                    "(at 0x%llx)",
                    ull(va), ull(size), ull(cur));
      hipError_t e = r_->MemSetAccess(vp(cur), m->second.size, &access_, 1);
      if (e != hipSuccess)
        return fail_call<Hip>(status_of(e, Blame::caller), e,
                              "hipMemSetAccess(va=0x%llx, size=%llu, device=%d, ReadWrite)", ull(cur),
                              ull(m->second.size), s_.ordinal);
      cur += m->second.size;
      ++m;
    }
    return VPMM_OK;
  }

  vpmm_status do_copy_d2h(void* dst, uint64_t src, uint64_t size, Stream s) override {
    if (size == 0) return VPMM_OK;
    if (dst == nullptr || src == 0)
      return null_copy("copy_d2h", dst == nullptr, size);
    Scope sc = scope();
    if (vpmm_status st = sc.enter("hipMemcpyDtoHAsync")) return st;
    return per_reservation(src, size, [&](uint64_t off, uint64_t n) -> vpmm_status {
      hipError_t r = r_->MemcpyDtoHAsync(static_cast<char*>(dst) + off, vp(src + off), n, to_stream(s));
      if (r != hipSuccess)
        return fail_call<Hip>(status_of(r, Blame::caller), r,
                              "hipMemcpyDtoHAsync(dst=%p, src=0x%llx, size=%llu, stream=%p)",
                              static_cast<void*>(static_cast<char*>(dst) + off), ull(src + off), ull(n), s);
      return VPMM_OK;
    });
  }

  vpmm_status do_copy_h2d(uint64_t dst, const void* src, uint64_t size, Stream s) override {
    if (size == 0) return VPMM_OK;
    if (dst == 0 || src == nullptr)
      return null_copy("copy_h2d", dst == 0, size);
    Scope sc = scope();
    if (vpmm_status st = sc.enter("hipMemcpyHtoDAsync")) return st;
    return per_reservation(dst, size, [&](uint64_t off, uint64_t n) -> vpmm_status {
      // The HIP signature takes a non-const source it never writes.
      void* from = const_cast<char*>(static_cast<const char*>(src)) + off;
      hipError_t r = r_->MemcpyHtoDAsync(vp(dst + off), from, n, to_stream(s));
      if (r != hipSuccess)
        return fail_call<Hip>(status_of(r, Blame::caller), r,
                              "hipMemcpyHtoDAsync(dst=0x%llx, src=%p, size=%llu, stream=%p)", ull(dst + off),
                              from, ull(n), s);
      return VPMM_OK;
    });
  }

  // Pinned host memory: huge-page-advised anonymous pages registered with
  // hipHostRegister (as on CUDA: pins faster than the runtime's allocator),
  // else hipHostMalloc.
  vpmm_status do_host_alloc_pinned(uint64_t size, void** out) override {
    if (out == nullptr) return null_out("host_alloc_pinned");
    if (size == 0)
      return fail(VPMM_ERR_INVALID_ARGUMENT, "hip host_alloc_pinned: size 0 is not allowed");
    Scope sc = scope();
    if (vpmm_status st = sc.enter("hipHostMalloc")) return st;
    if (void* p = register_pages(size)) {
      *out = p;
      return VPMM_OK;
    }
    if (r_->HostMalloc == nullptr)
      return fail(VPMM_ERR_OUT_OF_MEMORY,
                  "hip host_alloc_pinned: hipHostRegister of %llu bytes failed and the runtime has "
                  "no hipHostMalloc",
                  ull(size));
    void* p = nullptr;
    hipError_t r = r_->HostMalloc(&p, size, hipHostMallocPortable);
    if (r != hipSuccess)
      return fail_call<Hip>(status_of(r, Blame::backend), r, "hipHostMalloc(size=%llu, hipHostMallocPortable)",
                            ull(size));
    *out = p;
    return VPMM_OK;
  }

  vpmm_status do_host_free_pinned(void* p, uint64_t size) override {
    if (p == nullptr)
      return fail(VPMM_ERR_INVALID_ARGUMENT, "hip host_free_pinned: null pointer (size %llu)", ull(size));
    Scope sc = scope();
    if (vpmm_status st = sc.enter("hipHostFree")) return st;
    if (pinned_.mapped_length(p) != 0) {
      hipError_t r = r_->HostUnregister(p);
      if (r != hipSuccess)
        return fail_call<Hip>(status_of(r, Blame::caller), r, "hipHostUnregister(p=%p, size=%llu)", p, ull(size));
      pinned_.release(p);
      return VPMM_OK;
    }
    if (r_->HostFree == nullptr)
      return fail(VPMM_ERR_INVALID_ARGUMENT, "hip host_free_pinned: %p was not allocated here", p);
    hipError_t r = r_->HostFree(p);
    if (r != hipSuccess)
      return fail_call<Hip>(status_of(r, Blame::caller), r, "hipHostFree(p=%p, size=%llu)", p, ull(size));
    return VPMM_OK;
  }

 private:
  struct HandleRec {
    uint64_t size;
    uint32_t maps;          // live mappings of the handle
    bool release_pending;   // released by the pool while mapped: freed at the last unmap
  };
  struct MapRec {
    uint64_t size;
    PhysHandle handle;
  };

  // ---- The ROCm 7.2 workaround (TMS commit 2be7a4e, vLLM #37533) ----------
  // After an unmap, the VA range is freed and the same address reserved
  // again, so the runtime drops its hold on the physical memory. Freeing part
  // of a reservation leaves separate reservations behind, and ROCm maps
  // nothing across two (rocm-systems#6977, intel/llvm#22671), so on this path
  // the backend keeps the invariant: every live mapping is exactly one
  // reservation ("piece"), every other piece has no mapping. A map first
  // carves its range into one piece (only mapping-free pieces are touched),
  // an unmap recycles its piece, and unreserve frees the pieces one by one.
  // mu_ is held throughout, so the pool cannot map into a gap; another user
  // of the runtime could take the address meanwhile, which every re-reserve
  // checks.

  // Reserves exactly [va, va+size) again; on success records the piece.
  vpmm_status rereserve(uint64_t va, uint64_t size) {
    void* p = nullptr;
    hipError_t e = r_->MemAddressReserve(&p, size, 0, vp(va), 0);
    if (e != hipSuccess)
      return fail_call<Hip>(VPMM_ERR_BACKEND, e,
                            "hipMemAddressReserve(size=%llu, addr=0x%llx) (ROCm 7.2 release workaround): "
                            "the pool's VA has a hole now",
                            ull(size), ull(va));
    if (u64(p) != va) {
      if (p != nullptr) (void)r_->MemAddressFree(p, size);
      return fail(VPMM_ERR_BACKEND,
                  "hip hipMemAddressReserve(size=%llu, addr=0x%llx) (ROCm 7.2 release workaround) "
                  "returned %p, not the address asked for: the pool's VA has a hole now",
                  ull(size), ull(va), p);
    }
    pieces_[va] = size;
    return VPMM_OK;
  }

  // Frees one recorded piece.
  vpmm_status free_piece(uint64_t va, uint64_t size) {
    hipError_t e = r_->MemAddressFree(vp(va), size);
    if (e != hipSuccess)
      return fail_call<Hip>(VPMM_ERR_BACKEND, e,
                            "hipMemAddressFree(va=0x%llx, size=%llu) (ROCm 7.2 release workaround)", ull(va),
                            ull(size));
    pieces_.erase(va);
    return VPMM_OK;
  }

  // Makes [va, va+size) exactly one piece. Every piece it overlaps is free of
  // mappings (the invariant, and the core never maps over a mapping).
  vpmm_status carve(uint64_t va, uint64_t size) {
    auto it = pieces_.upper_bound(va);
    if (it == pieces_.begin())
      return fail(VPMM_ERR_INVALID_ARGUMENT, "hip map: va 0x%llx is not reserved by this backend", ull(va));
    --it;
    if (it->first == va && it->second == size) return VPMM_OK;  // already one piece
    std::vector<std::pair<uint64_t, uint64_t>> over;
    for (auto p = it; p != pieces_.end() && p->first < va + size; ++p) {
      if (p->first + p->second <= va) continue;
      auto m = maps_.lower_bound(p->first);
      if (m != maps_.end() && m->first < p->first + p->second)
        return fail(VPMM_ERR_INVALID_ARGUMENT,
                    "hip map: (va=0x%llx, size=%llu) shares a reservation with the mapping at 0x%llx",
                    ull(va), ull(size), ull(m->first));
      if (!over.empty() && over.back().first + over.back().second != p->first)
        return fail(VPMM_ERR_INVALID_ARGUMENT, "hip map: (va=0x%llx, size=%llu) is not all reserved",
                    ull(va), ull(size));
      over.push_back(*p);
    }
    if (over.empty() || over.front().first > va ||
        over.back().first + over.back().second < va + size)
      return fail(VPMM_ERR_INVALID_ARGUMENT, "hip map: (va=0x%llx, size=%llu) is not all reserved",
                  ull(va), ull(size));
    const uint64_t lo = over.front().first, hi = over.back().first + over.back().second;
    for (const auto& p : over)
      if (vpmm_status st = free_piece(p.first, p.second)) return st;
    if (lo < va)
      if (vpmm_status st = rereserve(lo, va - lo)) return st;
    if (vpmm_status st = rereserve(va, size)) return st;
    if (va + size < hi)
      if (vpmm_status st = rereserve(va + size, hi - (va + size))) return st;
    return VPMM_OK;
  }

  vpmm_status unreserve_pieces(uint64_t va, uint64_t size) {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = pieces_.lower_bound(va);
    if (it == pieces_.end() || it->first != va)
      return fail(VPMM_ERR_INVALID_ARGUMENT, "hip unreserve: va 0x%llx is not a reservation", ull(va));
    while (it != pieces_.end() && it->first < va + size) {
      const uint64_t pva = it->first, psize = it->second;
      ++it;
      if (vpmm_status st = free_piece(pva, psize)) return st;
    }
    return VPMM_OK;
  }

  // After the unmap of [va, va+size), which is one piece.
  vpmm_status recycle(uint64_t va, uint64_t size) {
    if (vpmm_status st = free_piece(va, size)) return st;
    return rereserve(va, size);
  }

  // Calls f(offset, bytes) once per reservation the device range [va,
  // va+size) crosses: a copy spanning two reservations fails on ROCm
  // (intel/llvm#22671), and on the VA-recycling path every mapping is its own
  // reservation. Elsewhere the pool's VA chunk is one reservation: one call.
  // The pieces are only read here (the pool does not unmap what it copies).
  template <typename F>
  vpmm_status per_reservation(uint64_t va, uint64_t size, F f) {
    if (!s_.facts.recycle_va) return f(0, size);
    std::vector<std::pair<uint64_t, uint64_t>> parts;
    {
      std::lock_guard<std::mutex> lk(mu_);
      auto it = pieces_.upper_bound(va);
      if (it != pieces_.begin()) --it;
      for (uint64_t cur = va; cur < va + size;) {
        if (it == pieces_.end() || it->first > cur || it->first + it->second <= cur) {
          parts.emplace_back(cur - va, va + size - cur);  // not ours: the runtime will say
          break;
        }
        const uint64_t end = std::min(va + size, it->first + it->second);
        parts.emplace_back(cur - va, end - cur);
        cur = end;
        ++it;
      }
    }
    for (const auto& p : parts)
      if (vpmm_status st = f(p.first, p.second)) return st;
    return VPMM_OK;
  }

  vpmm_status null_reservation(uint64_t size) const {
    return fail(VPMM_ERR_UNSUPPORTED,
                "hip: hipMemAddressReserve(size=%llu) returned success with a NULL address: HIP "
                "virtual memory is not implemented by this runtime (HIP %d.%d, %s); ROCm 6.1 or "
                "later is needed (6.3.4+ recommended)",
                ull(size), hip::version_major(s_.facts.version), hip::version_minor(s_.facts.version),
                s_.facts.path);
  }

  vpmm_status do_device_id(uint8_t out[16]) override {
    if (r_->DeviceGetUuid == nullptr)
      return fail(VPMM_ERR_UNSUPPORTED, "hip: the runtime has no hipDeviceGetUuid (needed to tell devices "
                                        "apart across processes)");
    hipUUID u;
    hipError_t e = r_->DeviceGetUuid(&u, s_.ordinal);
    if (e != hipSuccess)
      return fail_call<Hip>(status_of(e, Blame::backend), e, "hipDeviceGetUuid(device=%d)", s_.ordinal);
    std::memcpy(out, u.bytes, 16);
    return VPMM_OK;
  }

  vpmm_status do_export_handle(PhysHandle h, uint64_t size, int* fd) override {
    {
      std::lock_guard<std::mutex> lk(mu_);
      auto it = handles_.find(h);
      if (it == handles_.end() || it->second.release_pending)
        return fail(VPMM_ERR_INVALID_ARGUMENT, "hip export_handle: handle 0x%llx is not live", ull(h));
    }
    // The runtime's export once per handle; later ones duplicate it.
    vpmm_status kept = VPMM_OK;
    if (exported_.dup_kept(h, fd, &kept, "hip export_handle")) return kept;
    const uint64_t started = exported_.begin(h);
    Scope sc = scope();
    if (vpmm_status st = sc.enter("hipMemExportToShareableHandle")) {
      exported_.abandon(h);
      return st;
    }
    int f = -1;
    hipError_t e = r_->MemExportToShareableHandle(&f, to_handle(h), hipMemHandleTypePosixFileDescriptor, 0);
    if (e != hipSuccess) {
      exported_.abandon(h);
      return fail_call<Hip>(status_of(e, Blame::caller), e,
                            "hipMemExportToShareableHandle(handle=0x%llx, size=%llu, PosixFileDescriptor)",
                            ull(h), ull(size));
    }
    return exported_.finish(h, started, f, fd, "hip export_handle");
  }

  vpmm_status do_import_handle(int fd, uint64_t size, PhysHandle* out) override {
    if (r_->MemImportFromShareableHandle == nullptr)
      return fail(VPMM_ERR_UNSUPPORTED, "hip: the runtime has no hipMemImportFromShareableHandle");
    Scope sc = scope();
    if (vpmm_status st = sc.enter("hipMemImportFromShareableHandle")) return st;
    hipMemGenericAllocationHandle_t h = nullptr;
    hipError_t e = r_->MemImportFromShareableHandle(&h, reinterpret_cast<void*>(static_cast<intptr_t>(fd)),
                                                    hipMemHandleTypePosixFileDescriptor);
    if (e != hipSuccess)
      return fail_call<Hip>(status_of(e, Blame::caller), e,
                            "hipMemImportFromShareableHandle(fd=%d, size=%llu, PosixFileDescriptor)", fd,
                            ull(size));
    if (h == nullptr)
      return fail(VPMM_ERR_BACKEND, "hip hipMemImportFromShareableHandle(fd=%d): returned a NULL handle", fd);
    try {
      std::lock_guard<std::mutex> lk(mu_);
      handles_[u64(h)] = HandleRec{size, 0, false};
    } catch (...) {
      (void)r_->MemRelease(h);
      return fail(VPMM_ERR_OUT_OF_MEMORY, "hip import_handle: out of host memory for the handle table");
    }
    imported_.keep(u64(h), fd);
    *out = u64(h);
    return VPMM_OK;
  }

  bool do_same_memory(PhysHandle h, uint64_t, int fd) override { return imported_.same(h, fd); }

  void* register_pages(uint64_t size) {
    if (r_->HostRegister == nullptr) return nullptr;
    return pinned_.pin(
        size, [&](void* p, uint64_t n) { return r_->HostRegister(p, n, hipHostRegisterPortable) == hipSuccess; },
        [&](void* p) { (void)r_->HostUnregister(p); });
  }

  friend class gpu::GpuBackend<HipBackend, Hip>;
  const Runtime* api() const { return r_; }
  int ordinal() const { return s_.ordinal; }
  int scope_target() const { return s_.ordinal; }

  const Runtime* r_;
  const Setup s_;
  const bool exportable_;
  alignas(8) unsigned char prop_[64];  // hipMemAllocationProp in the runtime's layout
  hipMemAccessDesc access_;
  std::mutex mu_;
  std::unordered_map<PhysHandle, HandleRec> handles_;
  ExportedFds exported_;  // each exported handle's descriptor, until its release
  ImportedFds imported_;  // what each imported handle came from, until its release
  std::map<uint64_t, MapRec> maps_;                  // va -> mapping, for set_access and unmap
  std::map<uint64_t, uint64_t> pieces_;              // VA recycling only: va -> reservation size
  PinnedPages pinned_;  // backups pinned by registration (register_pages)
};
static_assert(sizeof(hip::AllocationPropV6) <= 64 && sizeof(hipMemAllocationProp) <= 64,
              "prop_ holds either layout");

std::unique_ptr<Backend> fail_create(vpmm_status s, vpmm_status* st) {
  if (st != nullptr) *st = s;
  return nullptr;
}

// AUTO's probe: a runtime whose VMM works (ROCm 6.1+) and a device 0 that
// says it supports VMM, so that AUTO falls back to the host backend on
// consumer cards without VMM and on old ROCm instead of failing.
bool hip_backend_usable() {
  const Runtime* r = hip::runtime();
  if (r == nullptr) return false;
  int count = 0, version = 0;
  if (r->GetDeviceCount(&count) != hipSuccess || count < 1) return false;
  if (r->RuntimeGetVersion(&version) != hipSuccess || version < hip::make_version(6, 1)) return false;
  if (r->DeviceGetAttribute == nullptr) return true;
  int vmm = 0;
  return r->DeviceGetAttribute(&vmm, static_cast<hipDeviceAttribute_t>(hip::kAttrVirtualMemoryManagementSupported),
                               0) == hipSuccess &&
         vmm != 0;
}

std::unique_ptr<Backend> make_hip_backend(const BackendParams& p, vpmm_status* st) {
  if (p.peer_devices != 0)
    return fail_create(fail(VPMM_ERR_UNSUPPORTED, "hip: peer_devices 0x%llx: peer access is not "
                                                  "implemented for HIP yet", ull(p.peer_devices)),
                       st);
  hip::HipFacts f;
  if (vpmm_status s = hip::probe(p.hip_chunk_size, &f)) return fail_create(s, st);
  const Runtime* r = hip::runtime();
  const char* visible = std::getenv("HIP_VISIBLE_DEVICES");
  int count = 0;
  hipError_t e = r->GetDeviceCount(&count);
  if (e == hipErrorNoDevice || (e == hipSuccess && count < 1))
    return fail_create(fail(VPMM_ERR_UNSUPPORTED,
                            "hip: no AMD GPU visible to the HIP runtime (%s, HIP %d.%d; "
                            "hipGetDeviceCount: %s; HIP_VISIBLE_DEVICES=%s)",
                            f.path, hip::version_major(f.version), hip::version_minor(f.version),
                            e == hipSuccess ? "0 devices" : "hipErrorNoDevice",
                            visible ? visible : "<unset>"),
                       st);
  if (e != hipSuccess)
    return fail_create(fail_call<Hip>(VPMM_ERR_UNSUPPORTED, e, "hipGetDeviceCount() (%s)", f.path), st);
  if (p.device < 0 || p.device >= count)
    return fail_create(fail(VPMM_ERR_INVALID_ARGUMENT,
                            "hip: device %d out of range: %d AMD GPU%s visible (valid: 0..%d, "
                            "HIP_VISIBLE_DEVICES=%s)",
                            p.device, count, count == 1 ? "" : "s", count - 1,
                            visible ? visible : "<unset>"),
                       st);

  if (p.exportable && (r->MemExportToShareableHandle == nullptr || r->MemImportFromShareableHandle == nullptr))
    return fail_create(fail(VPMM_ERR_UNSUPPORTED,
                            "hip: exportable = 1 needs hipMemExportToShareableHandle, which %s lacks "
                            "(ROCm 6.2 or later has it)",
                            f.path),
                       st);
  Setup s;
  s.ordinal = p.device;
  s.facts = f;
  gpu::CurrentScope<Hip> scope(r, p.device, p.device);
  if (vpmm_status es = scope.enter("the backend's creation")) return fail_create(es, st);

  if (f.version >= hip::kFirstVersionWithVmmAttribute && r->DeviceGetAttribute != nullptr) {
    int vmm = 0;
    e = r->DeviceGetAttribute(
        &vmm, static_cast<hipDeviceAttribute_t>(hip::kAttrVirtualMemoryManagementSupported), p.device);
    if (e != hipSuccess)
      return fail_create(fail_call<Hip>(VPMM_ERR_BACKEND, e,
                                        "hipDeviceGetAttribute(VirtualMemoryManagementSupported, device=%d)",
                                        p.device),
                         st);
    if (vmm == 0)
      return fail_create(fail(VPMM_ERR_UNSUPPORTED,
                              "hip: device %d does not support virtual memory management "
                              "(hipDeviceAttributeVirtualMemoryManagementSupported = 0; HIP %d.%d, %s)",
                              p.device, hip::version_major(f.version), hip::version_minor(f.version),
                              f.path),
                         st);
  }

  // Granularities, in the runtime's layout of the allocation properties.
  alignas(8) unsigned char prop[64] = {};
  if (f.version >= hip::kFirstVersionWithV6Prop) {
    hip::AllocationPropV6 v6{};
    v6.type = hipMemAllocationTypePinned;
    v6.location.type = hipMemLocationTypeDevice;
    v6.location.id = p.device;
    std::memcpy(prop, &v6, sizeof v6);
  } else {
    hipMemAllocationProp v5{};
    v5.type = hipMemAllocationTypePinned;
    v5.location.type = hipMemLocationTypeDevice;
    v5.location.id = p.device;
    std::memcpy(prop, &v5, sizeof v5);
  }
  size_t gmin = 0, grec = 0;
  e = r->MemGetAllocationGranularity(&gmin, reinterpret_cast<const hipMemAllocationProp*>(prop),
                                     hipMemAllocationGranularityMinimum);
  if (e != hipSuccess || gmin == 0)
    return fail_create(fail_call<Hip>(e != hipSuccess ? status_of(e, Blame::backend) : VPMM_ERR_BACKEND, e,
                                      "hipMemGetAllocationGranularity(Pinned, device=%d, Minimum) = %zu",
                                      p.device, gmin),
                       st);
  if (r->MemGetAllocationGranularity(&grec, reinterpret_cast<const hipMemAllocationProp*>(prop),
                                     hipMemAllocationGranularityRecommended) != hipSuccess)
    grec = gmin;
  // Round up to the floor (a multiple of the reported granularity: both are
  // powers of two in practice; a multiple is enforced regardless).
  uint64_t g = std::max<uint64_t>(gmin, f.page_floor);
  g = (g + gmin - 1) / gmin * gmin;
  uint64_t rec = std::max<uint64_t>(grec, g);
  rec = (rec + g - 1) / g * g;
  s.gran = g;
  s.recommended = rec;
  if (s.facts.chunk_size != 0) {
    // A chunk is a whole number of pages of the granularity, at least one.
    s.facts.chunk_size = std::max<uint64_t>(g, s.facts.chunk_size / g * g);
  }

  std::unique_ptr<Backend> b;
  try {
    b.reset(new HipBackend(r, s, p.exportable));
  } catch (...) {
    return fail_create(fail(VPMM_ERR_OUT_OF_MEMORY, "hip: out of host memory creating the backend"), st);
  }
  if (st != nullptr) *st = VPMM_OK;
  return b;
}

size_t describe_hip(const BackendParams& p, char* buf, size_t capacity) {
  return hip::describe(p.hip_chunk_size, buf, capacity);
}

}  // namespace

extern const BackendEntry kHipBackendEntry;
const BackendEntry kHipBackendEntry = {VPMM_BACKEND_HIP, backend_kind_name(VPMM_BACKEND_HIP), make_hip_backend, hip_backend_usable,
                                       nullptr, describe_hip};

}  // namespace vpmm
