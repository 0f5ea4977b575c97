// FaultBackend (see fault_backend.hpp).
#include "backend/fault/fault_backend.hpp"

#include <cinttypes>
#include <cstdio>
#include <utility>

#include "backend/registry.hpp"
#include "common/status.hpp"

namespace vpmm {

namespace {
constexpr size_t kTraceCalls = 4096;

// splitmix64: small, seedable, good enough to pick fault points.
uint64_t next_random(uint64_t* state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
}  // namespace

const char* fault_kind_name(int kind) {
  if (kind == kFaultAny) return "any";
  return op_name(static_cast<Op>(kind));
}

// ---------------------------------------------------------------------------
// FaultControl
// ---------------------------------------------------------------------------

void FaultControl::arm(const FaultPlan& plan) {
  std::lock_guard<std::mutex> lk(mu_);
  plan_ = plan;
  rng_ = plan.seed;
  calls_ = 0;
  for (uint64_t& c : kind_calls_) c = 0;
  injected_ = 0;
  last_kind_ = kFaultAny;
  last_call_ = 0;
  trace_.clear();
}

void FaultControl::disarm() {
  std::lock_guard<std::mutex> lk(mu_);
  plan_.nth = 0;
  plan_.one_in = 0;
}

void FaultControl::reset() {
  std::lock_guard<std::mutex> lk(mu_);
  calls_ = 0;
  for (uint64_t& c : kind_calls_) c = 0;
  injected_ = 0;
  last_kind_ = kFaultAny;
  last_call_ = 0;
  trace_.clear();
}

void FaultControl::set_counting(bool on) {
  std::lock_guard<std::mutex> lk(mu_);
  counting_ = on;
}

uint64_t FaultControl::calls() const {
  std::lock_guard<std::mutex> lk(mu_);
  return calls_;
}

uint64_t FaultControl::calls(int kind) const {
  std::lock_guard<std::mutex> lk(mu_);
  if (kind == kFaultAny) return calls_;
  return kind >= 0 && kind < kFaultKinds ? kind_calls_[kind] : 0;
}

uint64_t FaultControl::injected() const {
  std::lock_guard<std::mutex> lk(mu_);
  return injected_;
}

int FaultControl::last_fault_kind() const {
  std::lock_guard<std::mutex> lk(mu_);
  return last_kind_;
}

uint64_t FaultControl::last_fault_call() const {
  std::lock_guard<std::mutex> lk(mu_);
  return last_call_;
}

std::string FaultControl::trace() const {
  std::lock_guard<std::mutex> lk(mu_);
  return trace_;
}

void FaultControl::set_hook(std::function<void(int kind)> hook) {
  std::lock_guard<std::mutex> lk(mu_);
  hook_ = std::move(hook);
}

vpmm_status FaultControl::enter(int kind) {
  if (hook_) hook_(kind);
  uint64_t global = 0, nth = 0;
  vpmm_status status = VPMM_OK;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (!counting_) return VPMM_OK;
    global = ++calls_;
    const uint64_t of_kind = ++kind_calls_[kind];
    if (global <= kTraceCalls) {
      if (!trace_.empty()) trace_ += ' ';
      trace_ += fault_kind_name(kind);
    }
    if (plan_.kind != kFaultAny && plan_.kind != kind) return VPMM_OK;
    nth = plan_.kind == kFaultAny ? global : of_kind;
    bool hit = false;
    if (plan_.one_in > 0)
      hit = next_random(&rng_) % plan_.one_in == 0;
    else if (plan_.nth > 0)
      hit = plan_.persistent ? nth >= plan_.nth : nth == plan_.nth;
    if (!hit) return VPMM_OK;
    ++injected_;
    last_kind_ = kind;
    last_call_ = global;
    status = plan_.status;
  }
  return fail(status, "fault injection: %s call #%" PRIu64 " (call #%" PRIu64 " overall) failed with %s",
              fault_kind_name(kind), nth, global, status_name(status));
}

// ---------------------------------------------------------------------------
// FaultBackend
// ---------------------------------------------------------------------------

FaultBackend::FaultBackend(std::shared_ptr<Backend> inner, std::shared_ptr<FaultControl> control)
    : inner_(std::move(inner)), ctl_(control ? std::move(control) : std::make_shared<FaultControl>()) {}

FaultBackend::~FaultBackend() = default;

#define VPMM_FAULT_FORWARD(kind, call)                \
  do {                                                \
    vpmm_status fst_ = ctl_->enter(static_cast<int>(kind)); \
    if (fst_ != VPMM_OK) return fst_;                 \
    return inner_->call;                              \
  } while (0)

vpmm_status FaultBackend::do_stream_create(Stream* out) {
  VPMM_FAULT_FORWARD(kStreamCreate, stream_create(out));
}
vpmm_status FaultBackend::do_stream_destroy(Stream s) {
  VPMM_FAULT_FORWARD(kStreamDestroy, stream_destroy(s));
}
vpmm_status FaultBackend::do_reserve(uint64_t size, uint64_t alignment, uint64_t* va) {
  VPMM_FAULT_FORWARD(Op::reserve, reserve(size, alignment, va));
}
vpmm_status FaultBackend::do_unreserve(uint64_t va, uint64_t size) {
  VPMM_FAULT_FORWARD(Op::unreserve, unreserve(va, size));
}
vpmm_status FaultBackend::do_create(uint64_t size, PhysHandle* out) {
  VPMM_FAULT_FORWARD(Op::create, create(size, out));
}
vpmm_status FaultBackend::do_release(PhysHandle h, uint64_t size) {
  VPMM_FAULT_FORWARD(Op::release, release(h, size));
}
vpmm_status FaultBackend::do_map(uint64_t va, uint64_t size, PhysHandle h) {
  VPMM_FAULT_FORWARD(Op::map, map(va, size, h));
}
vpmm_status FaultBackend::do_unmap(uint64_t va, uint64_t size) {
  VPMM_FAULT_FORWARD(Op::unmap, unmap(va, size));
}
vpmm_status FaultBackend::do_set_access(uint64_t va, uint64_t size) {
  VPMM_FAULT_FORWARD(Op::set_access, set_access(va, size));
}
vpmm_status FaultBackend::do_event_record(Stream s, EventHandle* out) {
  VPMM_FAULT_FORWARD(Op::event_record, event_record(s, out));
}
vpmm_status FaultBackend::do_event_query(EventHandle e, bool* done) {
  VPMM_FAULT_FORWARD(Op::event_query, event_query(e, done));
}
vpmm_status FaultBackend::do_event_destroy(EventHandle e) {
  VPMM_FAULT_FORWARD(Op::event_destroy, event_destroy(e));
}
vpmm_status FaultBackend::do_stream_wait(Stream s, EventHandle e) {
  VPMM_FAULT_FORWARD(Op::stream_wait, stream_wait(s, e));
}
vpmm_status FaultBackend::do_event_sync(EventHandle e) {
  VPMM_FAULT_FORWARD(Op::event_sync, event_sync(e));
}
vpmm_status FaultBackend::do_stream_sync(Stream s) {
  VPMM_FAULT_FORWARD(Op::stream_sync, stream_sync(s));
}
vpmm_status FaultBackend::do_copy_d2h(void* dst, uint64_t src, uint64_t size, Stream s) {
  VPMM_FAULT_FORWARD(Op::copy, copy_d2h(dst, src, size, s));
}
vpmm_status FaultBackend::do_copy_h2d(uint64_t dst, const void* src, uint64_t size, Stream s) {
  VPMM_FAULT_FORWARD(Op::copy, copy_h2d(dst, src, size, s));
}
vpmm_status FaultBackend::do_host_alloc_pinned(uint64_t size, void** out) {
  VPMM_FAULT_FORWARD(Op::host_alloc, host_alloc_pinned(size, out));
}
vpmm_status FaultBackend::do_host_free_pinned(void* p, uint64_t size) {
  VPMM_FAULT_FORWARD(Op::host_free, host_free_pinned(p, size));
}
vpmm_status FaultBackend::do_host_alloc_pageable(uint64_t size, void** out) {
  VPMM_FAULT_FORWARD(Op::pageable_alloc, host_alloc_pageable(size, out));
}
vpmm_status FaultBackend::do_host_free_pageable(void* p, uint64_t size) {
  VPMM_FAULT_FORWARD(Op::pageable_free, host_free_pageable(p, size));
}
vpmm_status FaultBackend::do_mem_info(uint64_t* free_bytes, uint64_t* total_bytes) {
  VPMM_FAULT_FORWARD(Op::mem_info, mem_info(free_bytes, total_bytes));
}
vpmm_status FaultBackend::do_export_handle(PhysHandle h, uint64_t size, int* fd) {
  VPMM_FAULT_FORWARD(Op::export_handle, export_handle(h, size, fd));
}
vpmm_status FaultBackend::do_import_handle(int fd, uint64_t size, PhysHandle* out) {
  VPMM_FAULT_FORWARD(Op::import_handle, import_handle(fd, size, out));
}

vpmm_status FaultBackend::do_dir_open(const std::string& path, DirHandle* out) {
  VPMM_FAULT_FORWARD(Op::dir_open, dir_open(path, out));
}
vpmm_status FaultBackend::do_dir_close(DirHandle d) {
  VPMM_FAULT_FORWARD(Op::dir_close, dir_close(d));
}
vpmm_status FaultBackend::do_dir_check(DirHandle d, bool* removed) {
  VPMM_FAULT_FORWARD(Op::dir_check, dir_check(d, removed));
}
vpmm_status FaultBackend::do_file_create(DirHandle dir, uint64_t size, FileRef* ref, FileHandle* out) {
  VPMM_FAULT_FORWARD(Op::file_create, file_create(dir, size, ref, out));
}
vpmm_status FaultBackend::do_file_write(FileHandle f, const void* src, uint64_t size, uint64_t offset) {
  VPMM_FAULT_FORWARD(Op::file_write, file_write(f, src, size, offset));
}
vpmm_status FaultBackend::do_file_read(FileHandle f, void* dst, uint64_t size, uint64_t offset) {
  VPMM_FAULT_FORWARD(Op::file_read, file_read(f, dst, size, offset));
}
vpmm_status FaultBackend::do_file_close(FileHandle f) {
  VPMM_FAULT_FORWARD(Op::file_close, file_close(f));
}
vpmm_status FaultBackend::do_file_remove(const FileRef& ref, FileHandle f) {
  VPMM_FAULT_FORWARD(Op::file_remove, file_remove(ref, f));
}

#undef VPMM_FAULT_FORWARD

std::shared_ptr<Backend> make_shared_host_backend(const BackendParams& p, vpmm_status* st) {
  std::unique_ptr<Backend> b = make_backend(VPMM_BACKEND_HOST, p, st);
  return std::shared_ptr<Backend>(std::move(b));
}

bool live_counts_zero(const BackendCounters& c) {
  return c.live_handles.load() == 0 && c.live_handle_bytes.load() == 0 &&
         c.live_reservations.load() == 0 && c.live_mappings.load() == 0 &&
         c.live_events.load() == 0 && c.live_host_buffers.load() == 0 && c.live_files.load() == 0 &&
         c.live_file_handles.load() == 0 && c.live_dir_handles.load() == 0;
}

std::string live_counts(const BackendCounters& c) {
  char buf[320];
  std::snprintf(buf, sizeof buf,
                "handles %lld, handle_bytes %lld, reservations %lld, mappings %lld, events %lld, "
                "host_buffers %lld, files %lld, open_files %lld, open_dirs %lld",
                static_cast<long long>(c.live_handles.load()),
                static_cast<long long>(c.live_handle_bytes.load()),
                static_cast<long long>(c.live_reservations.load()),
                static_cast<long long>(c.live_mappings.load()),
                static_cast<long long>(c.live_events.load()),
                static_cast<long long>(c.live_host_buffers.load()),
                static_cast<long long>(c.live_files.load()),
                static_cast<long long>(c.live_file_handles.load()),
                static_cast<long long>(c.live_dir_handles.load()));
  return buf;
}

}  // namespace vpmm
