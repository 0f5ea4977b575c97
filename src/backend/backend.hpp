// The backend interface: the only door between the pool (src/core/) and a
// driver. A backend does what it is told and makes no policy: it never picks
// sizes, never caches, never retries. The core decides everything.
//
// Pattern (after RMM): a non-virtual public face that checks the driver's
// rules (alignment to granularity, non-zero sizes), counts every call and
// keeps the live-object counters that leak tests read, then calls a private
// do_*. So a host run checks the same contract a CUDA run does, and a
// fault-injecting adaptor (tests/support/fault_backend.hpp) can fail the Nth
// call of any kind. What the host does for the pool without the driver
// (pageable memory, backup files, host copies) is HostServices' instead
// (host_services/host_services.hpp).
//
// Errors: every call returns a vpmm_status; on failure the backend has set
// the thread-local message (common/status.hpp) naming the driver call and the
// driver's own error string.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "vpmm.h"

namespace vpmm {

using PhysHandle = uint64_t;   // backend-defined physical allocation (never 0 when valid)
using EventHandle = uint64_t;  // backend-defined event (never 0 when valid)
using Stream = vpmm_stream;    // backend-defined stream, nullptr = default
using FileHandle = int64_t;    // an open backup file (a descriptor); -1 = none

// Optional abilities, each one read by the core where it matters. A backend
// claims a bit only when it really has the ability:
//  - kCapDeviceCopy: copy_d2h / copy_h2d work. Without it a pause that keeps
//    a host backup fails with UNSUPPORTED before anything changes (backups
//    are impossible); a pause that discards contents still works.
//  - kCapPinnedHost: host_alloc_pinned gives memory the device copies at full
//    speed (page-locked on a GPU). Without it backups live in pageable memory
//    (HostServices::host_alloc_pageable): slower copies, same bytes; pause
//    never fails for want of pinning.
//  - kCapMemInfo: mem_info reports the device's free/total. Without it the
//    pool has no device total (memory_limit_fraction has nothing to scale).
//  - kCapExport: the handles this backend creates can be exported to other
//    processes (export_handle) and such exports imported (import_handle).
//    Claimed only by a backend made with BackendParams::exportable whose
//    driver offers POSIX file-descriptor handles; without it vpmm_pool_export
//    fails with UNSUPPORTED. Importing needs no creation flag, but the same
//    driver calls: backends that can export can import.
// Events are not optional: zombies and cross-stream reuse are only correct
// when an event completes after the work before it, so every backend must
// implement them for real (bit 0, once kCapEvents, is retired).
enum Capability : uint32_t {
  kCapDeviceCopy = 1u << 1,
  kCapPinnedHost = 1u << 2,
  kCapMemInfo = 1u << 3,
  kCapExport = 1u << 4,
};

// Kinds of call the pool makes, for counters and fault injection: the
// device's (Backend), and the host's (HostServices, host_services/host_services.hpp):
// pageable_alloc, pageable_free, file_*, host_copy.
enum class Op : int {
  reserve, unreserve, create, release, map, unmap, set_access,
  event_record, event_query, event_destroy, stream_wait, event_sync, stream_sync,
  copy, host_alloc, host_free, mem_info,
  stream_create, stream_destroy, device_sync, pageable_alloc, pageable_free,
  file_create, file_write, file_read, file_close, file_remove, host_copy,
  export_handle, import_handle,
  dir_open, dir_close, dir_check,
  count_
};
const char* op_name(Op op);

// The time spent inside the driver calls that map memory and order work
// (reserve, create, release, map, unmap, set-access, event record/query/
// destroy, stream waits), over every backend: each thread keeps what it
// spent and has not handed over yet, and the process counts the calls. The
// pool hands a malloc's or free's over to its statistics
// (vpmm_stats.driver_ns). The process-wide count lets the malloc/free hot
// path, which makes no driver call, skip this thread's storage (a
// thread_local in a shared library costs a __tls_get_addr call): it compares
// two relaxed loads.
struct DriverClock {
  uint64_t ns = 0;
  uint64_t calls = 0;
};
extern std::atomic<uint64_t> g_driver_calls;
inline uint64_t driver_calls_so_far() { return g_driver_calls.load(std::memory_order_relaxed); }
// This thread's driver time and calls since it last took them; zeroes them.
DriverClock take_thread_driver_clock();

struct BackendCounters {
  std::atomic<uint64_t> calls[static_cast<int>(Op::count_)]{};
  // Nanoseconds inside the timed calls (those DriverClock counts), by kind:
  // vpmm_pool_driver_profile.
  std::atomic<uint64_t> ns[static_cast<int>(Op::count_)]{};
  std::atomic<int64_t> live_handles{0};
  std::atomic<int64_t> live_handle_bytes{0};
  std::atomic<int64_t> live_reservations{0};
  std::atomic<int64_t> live_mappings{0};
  std::atomic<int64_t> live_events{0};
  std::atomic<int64_t> live_host_buffers{0};  // pinned buffers not yet freed
};

// vpmm_pool_driver_profile: the timed calls of `c` by kind (a whole struct;
// the API layer copies what the caller has room for).
void fill_driver_profile(const BackendCounters& c, vpmm_driver_profile* out);

class Backend {
 public:
  virtual ~Backend() = default;
  Backend(const Backend&) = delete;
  Backend& operator=(const Backend&) = delete;

  // Identity and static facts (fixed for the backend's lifetime).
  virtual const char* name() const = 0;
  virtual int32_t kind() const = 0;                    // its VPMM_BACKEND_* value (never AUTO)
  virtual uint64_t granularity() const = 0;            // minimum page (sizes/addresses align to it)
  virtual uint64_t recommended_page_size() const = 0;  // default page_size
  virtual uint64_t default_va_size() const = 0;
  virtual uint32_t capabilities() const = 0;
  virtual int device() const = 0;
  // Largest physical handle the driver can create in one call (a multiple of
  // the granularity), 0 = no limit. The pool's growth policy never asks for a
  // larger handle: a backend whose driver caps allocations (HIP's chunking)
  // states its cap here instead of splitting handles behind the core's back.
  virtual uint64_t max_handle_size() const = 0;

  // Virtual address space.
  vpmm_status reserve(uint64_t size, uint64_t alignment, uint64_t* va);
  vpmm_status unreserve(uint64_t va, uint64_t size);

  // Physical memory: a handle maps whole (map size == handle size).
  vpmm_status create(uint64_t size, PhysHandle* out);
  vpmm_status release(PhysHandle h, uint64_t size);  // allowed while mapped: freed at last unmap
  vpmm_status map(uint64_t va, uint64_t size, PhysHandle h);
  vpmm_status unmap(uint64_t va, uint64_t size);      // exactly one whole mapping (va, handle size)
  vpmm_status set_access(uint64_t va, uint64_t size);  // read/write for the pool's device; range of whole mappings

  // Ordering. An event is recorded once and destroyed once.
  vpmm_status event_record(Stream s, EventHandle* out);
  vpmm_status event_query(EventHandle e, bool* done);
  vpmm_status event_destroy(EventHandle e);
  vpmm_status stream_wait(Stream s, EventHandle e);  // GPU-side: s waits, the CPU does not
  vpmm_status event_sync(EventHandle e);             // CPU blocks until e completes
  vpmm_status stream_sync(Stream s);

  // Data (pause/resume backups). dst/src device pointers are pool VAs.
  vpmm_status copy_d2h(void* dst, uint64_t src, uint64_t size, Stream s);
  vpmm_status copy_h2d(uint64_t dst, const void* src, uint64_t size, Stream s);
  // Pinned host memory (kCapPinnedHost): page-locked for the device, so its
  // copies run at full speed. Freed by host_free_pinned with the size it was
  // allocated with. Pageable memory, files and host copies are the host's,
  // not the driver's (backend/host_services/host_services.hpp).
  vpmm_status host_alloc_pinned(uint64_t size, void** out);
  vpmm_status host_free_pinned(void* p, uint64_t size);
  vpmm_status mem_info(uint64_t* free_bytes, uint64_t* total_bytes);

  // Cheap check that a stream value is usable with this backend (host: a live
  // host stream or NULL). Called on malloc/free so a bad stream is reported
  // where it was passed, not later when an event is first recorded. NULL,
  // the default stream, is valid on every backend (the conformance suite
  // checks it) and answered here without a virtual call: it is most
  // programs' stream on every malloc and free.
  bool stream_valid(Stream s) const { return s == nullptr || do_stream_valid(s); }

  // Streams owned by the caller, for users with no runtime of their own
  // (bindings, the replay tool): non-blocking on CUDA, a host stream on host.
  vpmm_status stream_create(Stream* out);
  vpmm_status stream_destroy(Stream s);
  // Waits for all work on the device (the fallback when a stream the pool
  // needs an event from no longer exists).
  vpmm_status device_sync();

  // Sharing physical memory with other processes (docs/ipc.md).
  // device_id: 16 bytes naming the memory this backend's handles live in,
  // the same in every process of the machine (CUDA/HIP: the device's UUID,
  // whatever its ordinal under CUDA_VISIBLE_DEVICES; host: the boot id mixed
  // with the device ordinal), so an importer can refuse another device's
  // handles.
  vpmm_status device_id(uint8_t out[16]);
  // A new close-on-exec file descriptor for handle h (created by this
  // backend while it was exportable: kCapExport), owned by the caller. It
  // refers to the physical memory, not to a mapping: the memory lives while
  // the descriptor, any handle imported from it or any mapping exists.
  // With fd NULL, an export prepared ahead: the backend does what a later
  // export of h would pay for now (the driver's export, kept until h is
  // released) and hands nothing out. May run while another thread releases
  // h: the export then fails, or keeps nothing (WRONG_STATE).
  vpmm_status export_handle(PhysHandle h, uint64_t size, int* fd);
  // A handle of this backend for the `size` bytes of physical memory behind
  // fd (an export, usually of another process). fd stays the caller's. The
  // handle behaves like a created one: it maps whole, is released with
  // release(), and counts as a live handle until then.
  vpmm_status import_handle(int fd, uint64_t size, PhysHandle* out);
  // True when fd (an export, as import_handle takes) is the very memory
  // behind `imported` (a handle import_handle made): an importer that
  // already maps it need not import and map it again. False when it cannot
  // tell. Never a driver call.
  bool same_memory(PhysHandle imported, uint64_t size, int fd);

  const BackendCounters& counters() const { return counters_; }

 protected:
  Backend() = default;

  // A stream other than NULL (stream_valid answers NULL itself).
  virtual bool do_stream_valid(Stream s) const { (void)s; return true; }
  virtual vpmm_status do_reserve(uint64_t size, uint64_t alignment, uint64_t* va) = 0;
  virtual vpmm_status do_unreserve(uint64_t va, uint64_t size) = 0;
  virtual vpmm_status do_create(uint64_t size, PhysHandle* out) = 0;
  virtual vpmm_status do_release(PhysHandle h, uint64_t size) = 0;
  virtual vpmm_status do_map(uint64_t va, uint64_t size, PhysHandle h) = 0;
  virtual vpmm_status do_unmap(uint64_t va, uint64_t size) = 0;
  virtual vpmm_status do_set_access(uint64_t va, uint64_t size) = 0;
  virtual vpmm_status do_event_record(Stream s, EventHandle* out) = 0;
  virtual vpmm_status do_event_query(EventHandle e, bool* done) = 0;
  virtual vpmm_status do_event_destroy(EventHandle e) = 0;
  virtual vpmm_status do_stream_wait(Stream s, EventHandle e) = 0;
  virtual vpmm_status do_event_sync(EventHandle e) = 0;
  virtual vpmm_status do_stream_sync(Stream s) = 0;
  virtual vpmm_status do_copy_d2h(void* dst, uint64_t src, uint64_t size, Stream s) = 0;
  virtual vpmm_status do_copy_h2d(uint64_t dst, const void* src, uint64_t size, Stream s) = 0;
  virtual vpmm_status do_host_alloc_pinned(uint64_t size, void** out) = 0;
  virtual vpmm_status do_host_free_pinned(void* p, uint64_t size) = 0;
  virtual vpmm_status do_mem_info(uint64_t* free_bytes, uint64_t* total_bytes) = 0;
  virtual vpmm_status do_stream_create(Stream* out) = 0;
  virtual vpmm_status do_stream_destroy(Stream s) = 0;
  virtual vpmm_status do_device_sync() = 0;
  virtual vpmm_status do_device_id(uint8_t out[16]) = 0;
  virtual vpmm_status do_export_handle(PhysHandle h, uint64_t size, int* fd) = 0;
  virtual vpmm_status do_import_handle(int fd, uint64_t size, PhysHandle* out) = 0;
  virtual bool do_same_memory(PhysHandle, uint64_t, int) { return false; }

 private:
  void count(Op op) { counters_.calls[static_cast<int>(op)].fetch_add(1, std::memory_order_relaxed); }
  BackendCounters counters_;
};

// What a factory gets. backend/registry.hpp lists the factories.
struct BackendParams {
  int device = 0;
  uint64_t host_capacity = 0;  // host backend only; 0 = default (1 GiB)
  uint64_t hip_chunk_size = 0;  // HIP backend only: vpmm_config.hip_chunk_size
  uint64_t peer_devices = 0;    // vpmm_config.peer_devices: bit d = device d gets access
  bool exportable = false;      // vpmm_config.exportable: create handles other processes can import
};

}  // namespace vpmm
