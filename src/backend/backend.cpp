// The non-virtual face of Backend: contract checks shared by every backend,
// call counters and live-object counters (read by leak and fault tests).
#include "backend/backend.hpp"

#include <chrono>
#include <cstddef>
#include <cstring>

#include "common/status.hpp"

namespace vpmm {

const char* op_name(Op op) {
  static const char* const names[] = {
      "reserve", "unreserve", "create", "release", "map", "unmap", "set_access",
      "event_record", "event_query", "event_destroy", "stream_wait", "event_sync", "stream_sync",
      "copy", "host_alloc", "host_free", "mem_info",
      "stream_create", "stream_destroy", "device_sync", "pageable_alloc", "pageable_free",
      "file_create", "file_write", "file_read", "file_close", "file_remove", "host_copy",
      "export_handle", "import_handle", "dir_open", "dir_close", "dir_check"};
  static_assert(sizeof names / sizeof names[0] == static_cast<size_t>(Op::count_),
                "one name per Op");
  int i = static_cast<int>(op);
  return (i >= 0 && i < static_cast<int>(Op::count_)) ? names[i] : "unknown";
}

namespace {
bool aligned(uint64_t v, uint64_t g) { return g != 0 && v % g == 0; }

thread_local DriverClock tl_driver;

// Adds the driver call it spans to this thread's DriverClock and to the
// backend's time for its kind of call.
class Timed {
 public:
  explicit Timed(std::atomic<uint64_t>& kind_ns) : kind_ns_(kind_ns), t0_(std::chrono::steady_clock::now()) {}
  ~Timed() {
    const uint64_t ns = static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0_).count());
    tl_driver.ns += ns;
    ++tl_driver.calls;
    kind_ns_.fetch_add(ns, std::memory_order_relaxed);
    g_driver_calls.fetch_add(1, std::memory_order_relaxed);
  }
  Timed(const Timed&) = delete;
  Timed& operator=(const Timed&) = delete;

 private:
  std::atomic<uint64_t>& kind_ns_;
  std::chrono::steady_clock::time_point t0_;
};
}  // namespace

std::atomic<uint64_t> g_driver_calls{0};

void fill_driver_profile(const BackendCounters& c, vpmm_driver_profile* out) {
  auto calls = [&](Op op) { return c.calls[static_cast<int>(op)].load(std::memory_order_relaxed); };
  auto ns = [&](Op op) { return c.ns[static_cast<int>(op)].load(std::memory_order_relaxed); };
  std::memset(out, 0, sizeof *out);
  out->struct_size = sizeof *out;
  out->create_calls = calls(Op::create), out->create_ns = ns(Op::create);
  out->release_calls = calls(Op::release), out->release_ns = ns(Op::release);
  out->map_calls = calls(Op::map), out->map_ns = ns(Op::map);
  out->unmap_calls = calls(Op::unmap), out->unmap_ns = ns(Op::unmap);
  out->set_access_calls = calls(Op::set_access), out->set_access_ns = ns(Op::set_access);
  out->reserve_calls = calls(Op::reserve) + calls(Op::unreserve);
  out->reserve_ns = ns(Op::reserve) + ns(Op::unreserve);
  out->event_record_calls = calls(Op::event_record), out->event_record_ns = ns(Op::event_record);
  out->event_query_calls = calls(Op::event_query), out->event_query_ns = ns(Op::event_query);
  out->event_destroy_calls = calls(Op::event_destroy), out->event_destroy_ns = ns(Op::event_destroy);
  out->stream_wait_calls = calls(Op::stream_wait), out->stream_wait_ns = ns(Op::stream_wait);
}

DriverClock take_thread_driver_clock() {
  const DriverClock c = tl_driver;
  tl_driver = DriverClock{};
  return c;
}

vpmm_status Backend::reserve(uint64_t size, uint64_t alignment, uint64_t* va) {
  count(Op::reserve);
  if (size == 0 || !aligned(size, granularity()))
    return fail(VPMM_ERR_INVALID_ARGUMENT, "%s reserve: size %llu is not a non-zero multiple of %llu",
                name(), (unsigned long long)size, (unsigned long long)granularity());
  vpmm_status st;
  {
    Timed t(counters_.ns[static_cast<int>(Op::reserve)]);
    st = do_reserve(size, alignment, va);
  }
  if (st == VPMM_OK) counters_.live_reservations.fetch_add(1);
  return st;
}

vpmm_status Backend::unreserve(uint64_t va, uint64_t size) {
  count(Op::unreserve);
  vpmm_status st;
  {
    Timed t(counters_.ns[static_cast<int>(Op::unreserve)]);
    st = do_unreserve(va, size);
  }
  if (st == VPMM_OK) counters_.live_reservations.fetch_sub(1);
  return st;
}

vpmm_status Backend::create(uint64_t size, PhysHandle* out) {
  count(Op::create);
  if (size == 0 || !aligned(size, granularity()))
    return fail(VPMM_ERR_INVALID_ARGUMENT, "%s create: size %llu is not a non-zero multiple of %llu",
                name(), (unsigned long long)size, (unsigned long long)granularity());
  vpmm_status st;
  {
    Timed t(counters_.ns[static_cast<int>(Op::create)]);
    st = do_create(size, out);
  }
  if (st == VPMM_OK) {
    counters_.live_handles.fetch_add(1);
    counters_.live_handle_bytes.fetch_add(static_cast<int64_t>(size));
  }
  return st;
}

vpmm_status Backend::release(PhysHandle h, uint64_t size) {
  count(Op::release);
  vpmm_status st;
  {
    Timed t(counters_.ns[static_cast<int>(Op::release)]);
    st = do_release(h, size);
  }
  if (st == VPMM_OK) {
    counters_.live_handles.fetch_sub(1);
    counters_.live_handle_bytes.fetch_sub(static_cast<int64_t>(size));
  }
  return st;
}

vpmm_status Backend::map(uint64_t va, uint64_t size, PhysHandle h) {
  count(Op::map);
  if (!aligned(va, granularity()) || size == 0 || !aligned(size, granularity()))
    return fail(VPMM_ERR_INVALID_ARGUMENT, "%s map: va 0x%llx size %llu not aligned to %llu", name(),
                (unsigned long long)va, (unsigned long long)size, (unsigned long long)granularity());
  vpmm_status st;
  {
    Timed t(counters_.ns[static_cast<int>(Op::map)]);
    st = do_map(va, size, h);
  }
  if (st == VPMM_OK) counters_.live_mappings.fetch_add(1);
  return st;
}

vpmm_status Backend::unmap(uint64_t va, uint64_t size) {
  count(Op::unmap);
  if (!aligned(va, granularity()) || size == 0 || !aligned(size, granularity()))
    return fail(VPMM_ERR_INVALID_ARGUMENT, "%s unmap: va 0x%llx size %llu not aligned to %llu",
                name(), (unsigned long long)va, (unsigned long long)size,
                (unsigned long long)granularity());
  vpmm_status st;
  {
    Timed t(counters_.ns[static_cast<int>(Op::unmap)]);
    st = do_unmap(va, size);
  }
  if (st == VPMM_OK) counters_.live_mappings.fetch_sub(1);
  return st;
}

vpmm_status Backend::set_access(uint64_t va, uint64_t size) {
  count(Op::set_access);
  if (!aligned(va, granularity()) || size == 0 || !aligned(size, granularity()))
    return fail(VPMM_ERR_INVALID_ARGUMENT, "%s set_access: va 0x%llx size %llu not aligned to %llu",
                name(), (unsigned long long)va, (unsigned long long)size,
                (unsigned long long)granularity());
  Timed t(counters_.ns[static_cast<int>(Op::set_access)]);
  return do_set_access(va, size);
}

vpmm_status Backend::event_record(Stream s, EventHandle* out) {
  count(Op::event_record);
  vpmm_status st;
  {
    Timed t(counters_.ns[static_cast<int>(Op::event_record)]);
    st = do_event_record(s, out);
  }
  if (st == VPMM_OK) counters_.live_events.fetch_add(1);
  return st;
}

vpmm_status Backend::event_query(EventHandle e, bool* done) {
  count(Op::event_query);
  Timed t(counters_.ns[static_cast<int>(Op::event_query)]);
  return do_event_query(e, done);
}

vpmm_status Backend::event_destroy(EventHandle e) {
  count(Op::event_destroy);
  vpmm_status st;
  {
    Timed t(counters_.ns[static_cast<int>(Op::event_destroy)]);
    st = do_event_destroy(e);
  }
  if (st == VPMM_OK) counters_.live_events.fetch_sub(1);
  return st;
}

vpmm_status Backend::stream_wait(Stream s, EventHandle e) {
  count(Op::stream_wait);
  Timed t(counters_.ns[static_cast<int>(Op::stream_wait)]);
  return do_stream_wait(s, e);
}

vpmm_status Backend::event_sync(EventHandle e) {
  count(Op::event_sync);
  return do_event_sync(e);
}

vpmm_status Backend::stream_sync(Stream s) {
  count(Op::stream_sync);
  return do_stream_sync(s);
}

vpmm_status Backend::copy_d2h(void* dst, uint64_t src, uint64_t size, Stream s) {
  count(Op::copy);
  return do_copy_d2h(dst, src, size, s);
}

vpmm_status Backend::copy_h2d(uint64_t dst, const void* src, uint64_t size, Stream s) {
  count(Op::copy);
  return do_copy_h2d(dst, src, size, s);
}

vpmm_status Backend::host_alloc_pinned(uint64_t size, void** out) {
  count(Op::host_alloc);
  vpmm_status st = do_host_alloc_pinned(size, out);
  if (st == VPMM_OK) counters_.live_host_buffers.fetch_add(1);
  return st;
}

vpmm_status Backend::host_free_pinned(void* p, uint64_t size) {
  count(Op::host_free);
  vpmm_status st = do_host_free_pinned(p, size);
  if (st == VPMM_OK) counters_.live_host_buffers.fetch_sub(1);
  return st;
}

vpmm_status Backend::stream_create(Stream* out) {
  count(Op::stream_create);
  if (out == nullptr) return fail(VPMM_ERR_INVALID_ARGUMENT, "%s stream_create: out is NULL", name());
  return do_stream_create(out);
}

vpmm_status Backend::stream_destroy(Stream s) {
  count(Op::stream_destroy);
  return do_stream_destroy(s);
}

vpmm_status Backend::device_sync() {
  count(Op::device_sync);
  return do_device_sync();
}

vpmm_status Backend::mem_info(uint64_t* free_bytes, uint64_t* total_bytes) {
  count(Op::mem_info);
  return do_mem_info(free_bytes, total_bytes);
}

vpmm_status Backend::device_id(uint8_t out[16]) {
  if (out == nullptr) return fail(VPMM_ERR_INVALID_ARGUMENT, "%s device_id: out is NULL", name());
  return do_device_id(out);
}

vpmm_status Backend::export_handle(PhysHandle h, uint64_t size, int* fd) {
  count(Op::export_handle);
  if (!(capabilities() & kCapExport))
    return fail(VPMM_ERR_UNSUPPORTED,
                "%s export_handle: this backend's handles are not exportable (a pool made with "
                "exportable = 0, or a driver without POSIX file-descriptor handles)",
                name());
  if (h == 0 || size == 0 || !aligned(size, granularity()))
    return fail(VPMM_ERR_INVALID_ARGUMENT, "%s export_handle: handle %llu of %llu bytes is not a handle",
                name(), (unsigned long long)h, (unsigned long long)size);
  return do_export_handle(h, size, fd);
}

bool Backend::same_memory(PhysHandle imported, uint64_t size, int fd) {
  return imported != 0 && fd >= 0 && size != 0 && do_same_memory(imported, size, fd);
}

vpmm_status Backend::import_handle(int fd, uint64_t size, PhysHandle* out) {
  count(Op::import_handle);
  if (out == nullptr) return fail(VPMM_ERR_INVALID_ARGUMENT, "%s import_handle: out is NULL", name());
  if (fd < 0)
    return fail(VPMM_ERR_INVALID_ARGUMENT, "%s import_handle: %d is not a file descriptor", name(), fd);
  if (size == 0 || !aligned(size, granularity()))
    return fail(VPMM_ERR_INVALID_ARGUMENT,
                "%s import_handle: size %llu is not a non-zero multiple of the granularity %llu", name(),
                (unsigned long long)size, (unsigned long long)granularity());
  vpmm_status st = do_import_handle(fd, size, out);
  if (st == VPMM_OK) {
    counters_.live_handles.fetch_add(1);
    counters_.live_handle_bytes.fetch_add(static_cast<int64_t>(size));
  }
  return st;
}

}  // namespace vpmm
