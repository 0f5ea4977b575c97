// Exported host-stream functions: thin wrappers over backend/host/host_streams
// behind the same exception firewall as the pool API.
#include <exception>
#include <new>

#include "backend/host/host_streams.hpp"
#include "core/error.hpp"
#include "vpmm.h"

namespace {
template <typename F>
vpmm_status guarded(const char* call, F&& f) noexcept {
  try {
    return f();
  } catch (const std::bad_alloc&) {
    return vpmm::fail(VPMM_ERR_OUT_OF_MEMORY, "%s: out of host memory", call);
  } catch (...) {
    return vpmm::fail(VPMM_ERR_INTERNAL, "%s: internal error", call);
  }
}
}  // namespace

extern "C" {

VPMM_API vpmm_status vpmm_host_stream_create(vpmm_stream* out) {
  return guarded("vpmm_host_stream_create", [&] { return vpmm::host::stream_create(out); });
}
VPMM_API vpmm_status vpmm_host_stream_destroy(vpmm_stream s) {
  return guarded("vpmm_host_stream_destroy", [&] { return vpmm::host::stream_destroy(s); });
}
VPMM_API vpmm_status vpmm_host_stream_hold(vpmm_stream s) {
  return guarded("vpmm_host_stream_hold", [&] { return vpmm::host::stream_hold(s); });
}
VPMM_API vpmm_status vpmm_host_stream_release(vpmm_stream s) {
  return guarded("vpmm_host_stream_release", [&] { return vpmm::host::stream_release(s); });
}
VPMM_API vpmm_status vpmm_host_stream_launch(vpmm_stream s, void (*fn)(void*), void* user) {
  return guarded("vpmm_host_stream_launch", [&] { return vpmm::host::stream_launch(s, fn, user); });
}
VPMM_API vpmm_status vpmm_host_stream_synchronize(vpmm_stream s) {
  return guarded("vpmm_host_stream_synchronize", [&] { return vpmm::host::stream_synchronize(s); });
}

}  // extern "C"
