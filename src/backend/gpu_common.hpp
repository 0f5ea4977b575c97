// What the CUDA and HIP backends do the same way, written once: the
// "<driver> <call>: <error>" failure message, the scope that makes the
// backend's context (CUDA) or device (HIP) current and puts the caller's
// back, and the Backend methods whose driver calls differ only in name
// (events, streams, device synchronisation, memory info).
//
// A backend supplies a traits type T (its driver's error type, success and
// not-ready codes, call names and the few calls themselves) and derives from
// GpuBackend<Derived, T>, which implements those methods over it. The
// messages are those each backend wrote before, word for word: the call
// names come from the traits.
//
// T provides:
//   using Api, Error, Event, NativeStream, Current;
//   static const char* const kDriver;                 backend_kind_name(): "cuda" / "hip"
//   static constexpr Error kSuccess, kNotReady;
//   static void format_error(Error, char*, size_t);
//   static vpmm_status status_of(Error, Blame);
//   static Error get_current(const Api*, Current*), set_current(const Api*, Current);
//   static vpmm_status fail_get_current(Error, const char* op, int device);
//   static vpmm_status fail_set_current(Error, const char* op, int device);
//   static Error event_create(const Api*, Event*);      timing disabled
//   static vpmm_status fail_event_create(Error, int device);
//   static Error event_record(const Api*, Event, NativeStream), event_query(const Api*, Event),
//                event_destroy(const Api*, Event), event_sync(const Api*, Event),
//                stream_wait(const Api*, NativeStream, Event), stream_sync(const Api*, NativeStream),
//                device_sync(const Api*);
//   static bool has_stream_create(const Api*), has_stream_destroy(const Api*);   loaded?
//   static Error stream_create(const Api*, NativeStream*), stream_destroy(const Api*, NativeStream),
//                mem_get_info(const Api*, size_t* free, size_t* total);
//   static constexpr const char* kEventRecord, kEventQuery, kEventDestroy, kStreamWaitEvent,
//                kEventSynchronize, kStreamSynchronize, kDeviceSynchronize, kStreamCreate,
//                kStreamDestroy, kMemGetInfo;                               the calls' names
//   static constexpr const char* kStreamCreateCall;     the create call with its flags
//   static constexpr const char* kNullStream;           what the driver calls stream NULL
// Derived provides api(), ordinal() and scope_target() (the Current the
// backend's calls need).
#pragma once

#include <sys/mman.h>

#include <cerrno>
#include <cstdarg>
#include <cstdint>
#include <cstring>

#include "backend/backend.hpp"
#include "backend/driver_errors.hpp"
#include "common/status.hpp"

namespace vpmm {
namespace gpu {

inline unsigned long long ull(uint64_t v) { return static_cast<unsigned long long>(v); }

// Records "<driver> <call>: <NAME> (<description>)" and returns st (see
// driver_failv), e.g. call = "cuMemCreate(size=%llu, device=%d)".
template <class T>
vpmm_status fail_call(vpmm_status st, typename T::Error r, const char* call, ...)
    __attribute__((format(printf, 3, 4)));
template <class T>
vpmm_status fail_call(vpmm_status st, typename T::Error r, const char* call, ...) {
  char err[160];
  T::format_error(r, err, sizeof err);
  va_list ap;
  va_start(ap, call);
  st = driver_failv(st, T::kDriver, err, call, ap);
  va_end(ap);
  return st;
}

// Makes the backend's context/device current on the calling thread for the
// scope's lifetime and puts the previous one (possibly none) back at the end.
// Skips both switches when it already is current, the usual case under the
// vendor runtimes and the frameworks, where only one cheap query is added.
template <class T>
class CurrentScope {
 public:
  CurrentScope(const typename T::Api* api, typename T::Current want, int device)
      : api_(api), want_(want), device_(device) {}
  CurrentScope(const CurrentScope&) = delete;
  CurrentScope& operator=(const CurrentScope&) = delete;
  ~CurrentScope() {
    // Nothing useful to report from here: the call itself already returned.
    if (switched_) (void)T::set_current(api_, prev_);
  }

  // `op` names the driver call the context is needed for (for the message).
  vpmm_status enter(const char* op) {
    typename T::Error r = T::get_current(api_, &prev_);
    if (r != T::kSuccess) return T::fail_get_current(r, op, device_);
    if (prev_ == want_) return VPMM_OK;
    r = T::set_current(api_, want_);
    if (r != T::kSuccess) return T::fail_set_current(r, op, device_);
    switched_ = true;
    return VPMM_OK;
  }

 private:
  const typename T::Api* api_;
  typename T::Current want_;
  int device_;
  typename T::Current prev_{};
  bool switched_ = false;
};

template <class T>
typename T::NativeStream to_native(Stream s) {
  return static_cast<typename T::NativeStream>(s);
}
template <class T>
typename T::Event to_event(EventHandle e) {
  return reinterpret_cast<typename T::Event>(static_cast<uintptr_t>(e));
}
template <class T>
EventHandle from_event(typename T::Event e) {
  return static_cast<EventHandle>(reinterpret_cast<uintptr_t>(e));
}

template <class Derived, class T>
class GpuBackend : public Backend {
 protected:
  using Scope = CurrentScope<T>;

  Scope scope() const { return Scope(self().api(), self().scope_target(), self().ordinal()); }

  static vpmm_status null_out(const char* op) {
    return fail(VPMM_ERR_INVALID_ARGUMENT, "%s %s: null output pointer", T::kDriver, op);
  }
  static vpmm_status null_event(const char* op) {
    return fail(VPMM_ERR_INVALID_ARGUMENT, "%s %s: event handle 0 is not an event", T::kDriver, op);
  }
  // A copy's pointers: both set, unless there is nothing to copy.
  static vpmm_status null_copy(const char* op, bool dst_null, uint64_t size) {
    return fail(VPMM_ERR_INVALID_ARGUMENT, "%s %s: null %s pointer (size %llu)", T::kDriver, op,
                dst_null ? "destination" : "source", ull(size));
  }

  vpmm_status do_event_record(Stream s, EventHandle* out) override {
    if (out == nullptr) return null_out("event_record");
    Scope sc = scope();
    if (vpmm_status st = sc.enter(T::kEventRecord)) return st;
    typename T::Event e = nullptr;
    typename T::Error r = T::event_create(self().api(), &e);
    if (r != T::kSuccess) return T::fail_event_create(r, self().ordinal());
    r = T::event_record(self().api(), e, to_native<T>(s));
    if (r != T::kSuccess) {
      (void)T::event_destroy(self().api(), e);
      return fail_call<T>(T::status_of(r, Blame::caller), r, "%s(event=%p, stream=%p)",
                          T::kEventRecord, static_cast<void*>(e), s);
    }
    *out = from_event<T>(e);
    return VPMM_OK;
  }

  vpmm_status do_event_query(EventHandle e, bool* done) override {
    if (done == nullptr) return null_out("event_query");
    if (e == 0) return null_event("event_query");
    Scope sc = scope();
    if (vpmm_status st = sc.enter(T::kEventQuery)) return st;
    typename T::Error r = T::event_query(self().api(), to_event<T>(e));
    if (r == T::kSuccess || r == T::kNotReady) {
      *done = r == T::kSuccess;
      return VPMM_OK;
    }
    return fail_call<T>(T::status_of(r, Blame::caller), r, "%s(event=0x%llx)", T::kEventQuery, ull(e));
  }

  vpmm_status do_event_destroy(EventHandle e) override {
    if (e == 0) return null_event("event_destroy");
    return event_call(T::kEventDestroy, e, T::event_destroy);
  }

  vpmm_status do_stream_wait(Stream s, EventHandle e) override {
    if (e == 0) return null_event("stream_wait");
    Scope sc = scope();
    if (vpmm_status st = sc.enter(T::kStreamWaitEvent)) return st;
    typename T::Error r = T::stream_wait(self().api(), to_native<T>(s), to_event<T>(e));
    if (r != T::kSuccess)
      return fail_call<T>(T::status_of(r, Blame::caller), r, "%s(stream=%p, event=0x%llx)",
                          T::kStreamWaitEvent, s, ull(e));
    return VPMM_OK;
  }

  vpmm_status do_event_sync(EventHandle e) override {
    if (e == 0) return null_event("event_sync");
    return event_call(T::kEventSynchronize, e, T::event_sync);
  }

  vpmm_status do_stream_sync(Stream s) override {
    Scope sc = scope();
    if (vpmm_status st = sc.enter(T::kStreamSynchronize)) return st;
    typename T::Error r = T::stream_sync(self().api(), to_native<T>(s));
    if (r != T::kSuccess)
      return fail_call<T>(T::status_of(r, Blame::caller), r, "%s(stream=%p)", T::kStreamSynchronize, s);
    return VPMM_OK;
  }

  vpmm_status do_stream_create(Stream* out) override {
    if (out == nullptr) return null_out("stream_create");
    if (!T::has_stream_create(self().api()))
      return fail(VPMM_ERR_UNSUPPORTED, "%s stream_create: %s not loaded", T::kDriver, T::kStreamCreate);
    Scope sc = scope();
    if (vpmm_status st = sc.enter(T::kStreamCreate)) return st;
    typename T::NativeStream s = nullptr;
    typename T::Error r = T::stream_create(self().api(), &s);
    if (r != T::kSuccess)
      return fail_call<T>(T::status_of(r, Blame::backend), r, "%s", T::kStreamCreateCall);
    *out = s;
    return VPMM_OK;
  }

  vpmm_status do_stream_destroy(Stream s) override {
    if (s == nullptr)
      return fail(VPMM_ERR_INVALID_ARGUMENT, "%s stream_destroy: the %s stream cannot be destroyed",
                  T::kDriver, T::kNullStream);
    if (!T::has_stream_destroy(self().api()))
      return fail(VPMM_ERR_UNSUPPORTED, "%s stream_destroy: %s not loaded", T::kDriver, T::kStreamDestroy);
    Scope sc = scope();
    if (vpmm_status st = sc.enter(T::kStreamDestroy)) return st;
    typename T::Error r = T::stream_destroy(self().api(), to_native<T>(s));
    if (r != T::kSuccess)
      return fail_call<T>(T::status_of(r, Blame::caller), r, "%s(stream=%p)", T::kStreamDestroy, s);
    return VPMM_OK;
  }

  vpmm_status do_mem_info(uint64_t* free_bytes, uint64_t* total_bytes) override {
    if (free_bytes == nullptr || total_bytes == nullptr) return null_out("mem_info");
    Scope sc = scope();
    if (vpmm_status st = sc.enter(T::kMemGetInfo)) return st;
    size_t f = 0, t = 0;
    typename T::Error r = T::mem_get_info(self().api(), &f, &t);
    if (r != T::kSuccess)
      return fail_call<T>(T::status_of(r, Blame::backend), r, "%s() on device %d", T::kMemGetInfo,
                          self().ordinal());
    *free_bytes = f;
    *total_bytes = t;
    return VPMM_OK;
  }

  vpmm_status do_device_sync() override {
    Scope sc = scope();
    if (vpmm_status st = sc.enter(T::kDeviceSynchronize)) return st;
    typename T::Error r = T::device_sync(self().api());
    if (r != T::kSuccess)
      return fail_call<T>(T::status_of(r, Blame::backend), r, "%s()", T::kDeviceSynchronize);
    return VPMM_OK;
  }

 private:
  const Derived& self() const { return static_cast<const Derived&>(*this); }

  // One call on an event, under the scope, failing with the caller's blame.
  template <typename F>
  vpmm_status event_call(const char* name, EventHandle e, F call) {
    Scope sc = scope();
    if (vpmm_status st = sc.enter(name)) return st;
    typename T::Error r = call(self().api(), to_event<T>(e));
    if (r != T::kSuccess)
      return fail_call<T>(T::status_of(r, Blame::caller), r, "%s(event=0x%llx)", name, ull(e));
    return VPMM_OK;
  }
};

}  // namespace gpu
}  // namespace vpmm
