// The backend registry: every backend compiled into this build, one entry
// each, in the order VPMM_BACKEND_AUTO tries them (CUDA, then HIP, then the
// host backend, which is always there). Nothing outside this table knows
// which backends are compiled in; the public kinds and their names (vpmm.h,
// the option table, the tools and bindings) know which exist, so that a kind
// not built here is UNSUPPORTED rather than unknown (docs/backends.md,
// "Adding a backend", lists them). Adding one is its directory (sources, and a
// meson.build that appends to vpmm_sources, vpmm_backend_deps and
// vpmm_backend_entries) plus its entry constant; meson writes the compiled-in
// entries, in AUTO order, into the generated backend_entries.h that
// registry.cpp includes.
//
// An entry is a constant defined in the backend's own directory; the table
// is built at compile time, so reading it needs no locking and no
// initialisation order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "backend/backend.hpp"
#include "backend/host_stream_control.hpp"
#include "common/backend_kinds.hpp"
#include "vpmm.h"

namespace vpmm {

struct BackendEntry {
  int32_t kind;      // VPMM_BACKEND_* (never AUTO)
  const char* name;  // backend_kind_name(kind): Backend::name() of what make() returns
  // Creates a backend, or returns nullptr with *st set and the thread-local
  // error naming the reason (library missing, no device, bad parameter).
  std::unique_ptr<Backend> (*make)(const BackendParams& p, vpmm_status* st);
  // Cheap probe for AUTO: true when make() can be expected to succeed on
  // this machine (driver loads, a device exists). Sets no error.
  bool (*usable)();
  // Extension: the process-wide test streams of vpmm_host_streams.h, or
  // nullptr when the backend has none (every backend but host).
  const HostStreamControl* host_streams;
  // Optional (nullptr = nothing to say): one line about the driver this
  // backend would use (file, version, the paths it takes), for `vpmm info`
  // through vpmm_backend_info. Returns the length written; buf is always
  // NUL-terminated. Never fails: a missing driver is described, not an error.
  size_t (*describe)(const BackendParams& p, char* buf, size_t capacity);
};

// The compiled-in entries in AUTO order; *count receives their number.
const BackendEntry* const* backend_entries(size_t* count);

// The entry of a VPMM_BACKEND_* kind, nullptr when it is not compiled in.
const BackendEntry* find_backend_entry(int32_t kind);

// Creates the backend of `kind`. AUTO takes the first usable entry (the host
// backend's probe always says yes). Errors (nullptr, *st set, message naming
// `vpmm_pool_create`): INVALID_ARGUMENT for a value that is no VPMM_BACKEND_*,
// UNSUPPORTED for a backend not compiled in, else the factory's own.
std::unique_ptr<Backend> make_backend(int32_t kind, const BackendParams& p, vpmm_status* st);

}  // namespace vpmm
