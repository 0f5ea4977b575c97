// FaultBackend: a Backend adaptor that forwards every call to an inner
// backend and fails a chosen call with a chosen status. It is how the tests
// prove "a failed call leaves the pool as it was" for every backend call a
// pool operation makes (tests/unit/test_fault_injection.cpp). Its twin for
// the host's calls (pageable memory, files, host copies) is
// FaultHostServices (fault_host_services.hpp); both number their calls in
// one FaultControl when they share it. Test code only: it is not part of
// the library (tests/meson.build builds it into the tests' support library).
//
// Counting. Every do_* call but device_sync is one call, of one kind: the Op
// of backend.hpp (kStreamCreate/kStreamDestroy name two of them). Calls are
// numbered from 1 since the last arm()/reset(), globally and per kind. Calls
// made while counting is paused (set_counting(false)) are forwarded and not
// numbered, so a test can snapshot the pool (snapshot() queries events)
// between "before" and "after" without moving the numbering.
//
// Failing. A FaultPlan names the nth call (1-based) of a kind (kAny: of any
// kind) and the status to return (VPMM_ERR_OUT_OF_MEMORY or VPMM_ERR_BACKEND
// in practice). A failed call does not reach the inner backend; it sets the
// thread-local message ("fault injection: map call #3 failed ...") with
// vpmm::fail, as a driver failure would. `persistent` fails every matching
// call from the nth on (a driver that stays broken); `one_in` > 0 instead
// fails each matching call with probability 1/one_in from a seeded PRNG (the
// fuzzers' mode).
//
// Ownership. The pool owns its Backend through a unique_ptr and destroys it
// with itself, but a leak test must read the live-object counters after the
// pool is gone. So the inner backend is shared: the test keeps a
// std::shared_ptr<Backend> to it and reads inner->counters() after the pool
// (and with it the FaultBackend) was destroyed:
//
//   std::shared_ptr<Backend> host = make_shared_host_backend(params, &st);
//   auto ctl = std::make_shared<FaultControl>();
//   Pool::create(std::make_unique<FaultBackend>(host, ctl), opt, &pool);
//   ... ctl->arm({n, kFaultAny, VPMM_ERR_OUT_OF_MEMORY}); ...
//   pool.reset();
//   live_counts_zero(host->counters());      // true when nothing leaked
//
// The plan and the numbering live in a FaultControl that may be shared too,
// so they can be read after a failed Pool::create destroyed the backend.
//
// Facts. By default the inner backend's. A test can make the wrapper claim
// fewer capabilities (drop_capabilities: the core then takes its fallback,
// e.g. pageable backups without kCapPinnedHost) or report a max_handle_size
// (set_max_handle_size: a driver that caps handles, as HIP's chunking does).
// Facts are read when a pool is created: set them before handing the
// backend to Pool::create.
//
// Thread safety: every method may be called from any thread (one mutex),
// except the two fact setters, which run before the backend is shared.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "backend/backend.hpp"

namespace vpmm {

struct FaultPlan {
  uint64_t nth = 0;    // 1-based index of the matching call to fail; 0 = none
  int kind = -1;       // kFaultAny or an Op / kFaultStream* value
  vpmm_status status = VPMM_ERR_OUT_OF_MEMORY;
  bool persistent = false;  // also fail every later matching call
  uint32_t one_in = 0;      // > 0: random mode, each matching call fails with p = 1/one_in
  uint64_t seed = 1;        // PRNG seed of the random mode
};

// Call kinds: the values of Op, plus "any". The stream calls keep their own
// names, from when they were not Ops.
constexpr int kFaultAny = -1;
constexpr int kFaultStreamCreate = static_cast<int>(Op::stream_create);
constexpr int kFaultStreamDestroy = static_cast<int>(Op::stream_destroy);
constexpr int kFaultKinds = static_cast<int>(Op::count_);
// "map", "stream_create", "any", ...
const char* fault_kind_name(int kind);

// The plan and the numbering, shared between a FaultBackend and whoever
// drives it; it outlives the backend (a failed Pool::create destroys the
// backend it was given, and the test still wants to know what was injected).
class FaultControl {
 public:
  // Replaces the plan and zeroes the numbering.
  void arm(const FaultPlan& plan);
  // No more faults; numbering goes on.
  void disarm();
  // Zeroes the numbering (the plan stays).
  void reset();
  // Paused counting: calls are forwarded, neither numbered nor failed.
  void set_counting(bool on);

  uint64_t calls() const;          // numbered calls since arm()/reset(), all kinds
  uint64_t calls(int kind) const;  // of one kind
  uint64_t injected() const;       // faults injected since arm()/reset()
  // The most recent injected fault: its kind (kFaultAny when none yet) and
  // its global call number.
  int last_fault_kind() const;
  uint64_t last_fault_call() const;
  // Kind of every numbered call so far, in order ("reserve map set_access"),
  // capped at the first 4096 calls: a readable trace for test failures.
  std::string trace() const;

  // Numbers a call of `kind`; returns VPMM_OK to forward it, else the
  // injected status (the thread-local message is already set).
  vpmm_status enter(int kind);

  // Runs `hook(kind)` at the start of every call, counted or not, outside the
  // control's mutex: a test can hold a call of one thread at a known point
  // (a map in the middle of a defragmentation) while other threads go on.
  // Set it before the threads start; null removes it.
  void set_hook(std::function<void(int kind)> hook);

 private:
  std::function<void(int)> hook_;
  mutable std::mutex mu_;
  FaultPlan plan_;
  bool counting_ = true;
  uint64_t calls_ = 0;
  uint64_t kind_calls_[kFaultKinds] = {};
  uint64_t injected_ = 0;
  int last_kind_ = kFaultAny;
  uint64_t last_call_ = 0;
  uint64_t rng_ = 0;
  std::string trace_;
};

// The body of an adaptor's forwarding do_*: the call is numbered in ctl_,
// failed if the plan says so, else made on inner_ (FaultBackend and
// FaultHostServices).
#define VPMM_FAULT_FORWARD(kind, call)                      \
  do {                                                      \
    vpmm_status fst_ = ctl_->enter(static_cast<int>(kind)); \
    if (fst_ != VPMM_OK) return fst_;                       \
    return inner_->call;                                    \
  } while (0)

class FaultBackend final : public Backend {
 public:
  static constexpr int kAny = kFaultAny;
  static constexpr int kStreamCreate = kFaultStreamCreate;
  static constexpr int kStreamDestroy = kFaultStreamDestroy;

  // control may be null: the backend then makes its own.
  explicit FaultBackend(std::shared_ptr<Backend> inner,
                        std::shared_ptr<FaultControl> control = nullptr);
  ~FaultBackend() override;

  FaultControl& control() { return *ctl_; }
  // Shorthands for control().
  void arm(const FaultPlan& plan) { ctl_->arm(plan); }
  void disarm() { ctl_->disarm(); }
  uint64_t calls() const { return ctl_->calls(); }
  uint64_t injected() const { return ctl_->injected(); }

  Backend& inner() { return *inner_; }

  // Test facts (see the file comment): clear `bits` from the inner
  // backend's capabilities; report `bytes` as max_handle_size.
  void drop_capabilities(uint32_t bits) { dropped_caps_ |= bits; }
  void set_max_handle_size(uint64_t bytes) {
    max_handle_ = bytes;
    max_handle_set_ = true;
  }

  // Identity: the inner backend's, less what the test changed.
  const char* name() const override { return inner_->name(); }
  int32_t kind() const override { return inner_->kind(); }
  uint64_t granularity() const override { return inner_->granularity(); }
  uint64_t recommended_page_size() const override { return inner_->recommended_page_size(); }
  uint64_t default_va_size() const override { return inner_->default_va_size(); }
  uint32_t capabilities() const override { return inner_->capabilities() & ~dropped_caps_; }
  int device() const override { return inner_->device(); }
  uint64_t max_handle_size() const override {
    return max_handle_set_ ? max_handle_ : inner_->max_handle_size();
  }
 protected:
  bool do_stream_valid(Stream s) const override { return inner_->stream_valid(s); }
  vpmm_status do_reserve(uint64_t size, uint64_t alignment, uint64_t* va) override;
  vpmm_status do_unreserve(uint64_t va, uint64_t size) override;
  vpmm_status do_create(uint64_t size, PhysHandle* out) override;
  vpmm_status do_release(PhysHandle h, uint64_t size) override;
  vpmm_status do_map(uint64_t va, uint64_t size, PhysHandle h) override;
  vpmm_status do_unmap(uint64_t va, uint64_t size) override;
  vpmm_status do_set_access(uint64_t va, uint64_t size) override;
  vpmm_status do_event_record(Stream s, EventHandle* out) override;
  vpmm_status do_event_query(EventHandle e, bool* done) override;
  vpmm_status do_event_destroy(EventHandle e) override;
  vpmm_status do_stream_wait(Stream s, EventHandle e) override;
  vpmm_status do_event_sync(EventHandle e) override;
  vpmm_status do_stream_sync(Stream s) override;
  vpmm_status do_copy_d2h(void* dst, uint64_t src, uint64_t size, Stream s) override;
  vpmm_status do_copy_h2d(uint64_t dst, const void* src, uint64_t size, Stream s) override;
  vpmm_status do_host_alloc_pinned(uint64_t size, void** out) override;
  vpmm_status do_host_free_pinned(void* p, uint64_t size) override;
  vpmm_status do_mem_info(uint64_t* free_bytes, uint64_t* total_bytes) override;
  vpmm_status do_stream_create(Stream* out) override;
  vpmm_status do_stream_destroy(Stream s) override;
  vpmm_status do_device_sync() override { return inner_->device_sync(); }  // not a fault point
  vpmm_status do_device_id(uint8_t out[16]) override { return inner_->device_id(out); }  // a fact
  vpmm_status do_export_handle(PhysHandle h, uint64_t size, int* fd) override;
  vpmm_status do_import_handle(int fd, uint64_t size, PhysHandle* out) override;
  bool do_same_memory(PhysHandle h, uint64_t size, int fd) override { return inner_->same_memory(h, size, fd); }

 private:
  std::shared_ptr<Backend> inner_;
  std::shared_ptr<FaultControl> ctl_;
  uint32_t dropped_caps_ = 0;
  uint64_t max_handle_ = 0;
  bool max_handle_set_ = false;
};

// A host backend the caller shares with a FaultBackend (see above).
std::shared_ptr<Backend> make_shared_host_backend(const BackendParams& p, vpmm_status* st);

// True when every live-object counter of `c` is zero (nothing leaked).
bool live_counts_zero(const BackendCounters& c);
// "handles 0, handle_bytes 0, reservations 0, mappings 0, events 0, host_buffers 0".
std::string live_counts(const BackendCounters& c);

}  // namespace vpmm
