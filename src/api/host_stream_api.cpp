// Exported host-stream functions (include/vpmm_host_streams.h): thin wrappers
// over the host backend's HostStreamControl extension, reached through the
// backend registry, behind the same exception firewall as the pool API. This
// file knows no backend's internals: a build without the host backend would
// answer UNSUPPORTED.
#include <exception>
#include <new>

#include "backend/registry.hpp"
#include "common/status.hpp"
#include "vpmm.h"
#include "vpmm_host_streams.h"

namespace {

// The extension, looked up once (the registry is a compile-time table).
const vpmm::HostStreamControl* host_streams() {
  static const vpmm::HostStreamControl* const ctl = [] {
    const vpmm::BackendEntry* e = vpmm::find_backend_entry(VPMM_BACKEND_HOST);
    return e != nullptr ? e->host_streams : nullptr;
  }();
  return ctl;
}

template <typename F>
vpmm_status guarded(const char* call, F&& f) noexcept {
  try {
    const vpmm::HostStreamControl* ctl = host_streams();
    if (ctl == nullptr)
      return vpmm::fail(VPMM_ERR_UNSUPPORTED, "%s: libvpmm was built without host streams", call);
    return f(*ctl);
  } catch (const std::bad_alloc&) {
    return vpmm::fail(VPMM_ERR_OUT_OF_MEMORY, "%s: out of host memory", call);
  } catch (...) {
    return vpmm::fail(VPMM_ERR_INTERNAL, "%s: internal error", call);
  }
}

using Ctl = vpmm::HostStreamControl;

}  // namespace

extern "C" {

VPMM_API vpmm_status vpmm_host_stream_create(vpmm_stream* out) {
  return guarded("vpmm_host_stream_create", [&](const Ctl& c) { return c.create(out); });
}
VPMM_API vpmm_status vpmm_host_stream_destroy(vpmm_stream s) {
  return guarded("vpmm_host_stream_destroy", [&](const Ctl& c) { return c.destroy(s); });
}
VPMM_API vpmm_status vpmm_host_stream_hold(vpmm_stream s) {
  return guarded("vpmm_host_stream_hold", [&](const Ctl& c) { return c.hold(s); });
}
VPMM_API vpmm_status vpmm_host_stream_release(vpmm_stream s) {
  return guarded("vpmm_host_stream_release", [&](const Ctl& c) { return c.release(s); });
}
VPMM_API vpmm_status vpmm_host_stream_launch(vpmm_stream s, void (*fn)(void*), void* user) {
  return guarded("vpmm_host_stream_launch", [&](const Ctl& c) { return c.launch(s, fn, user); });
}
VPMM_API vpmm_status vpmm_host_stream_synchronize(vpmm_stream s) {
  return guarded("vpmm_host_stream_synchronize", [&](const Ctl& c) { return c.synchronize(s); });
}

}  // extern "C"
