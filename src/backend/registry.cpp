// The backend registry (see registry.hpp): the table of compiled-in entries
// and the selection that walks it. The entries come from the generated
// backend_entries.h, one VPMM_BACKEND_ENTRY(constant) line per backend that
// meson compiled in, in AUTO order.
#include "backend/registry.hpp"

#include "common/status.hpp"

namespace vpmm {

#define VPMM_BACKEND_ENTRY(e) extern const BackendEntry e;
#include "backend/backend_entries.h"
#undef VPMM_BACKEND_ENTRY

namespace {

const BackendEntry* const kEntries[] = {
#define VPMM_BACKEND_ENTRY(e) &e,
#include "backend/backend_entries.h"
#undef VPMM_BACKEND_ENTRY
};
constexpr size_t kEntryCount = sizeof kEntries / sizeof kEntries[0];

// Names of the kinds the ABI knows, for "not built" messages about a kind
// that has no entry in this build.
const char* kind_label(int32_t kind) {
  switch (kind) {
    case VPMM_BACKEND_CUDA: return "CUDA";
    case VPMM_BACKEND_HIP: return "HIP";
    case VPMM_BACKEND_HOST: return "host";
    default: return nullptr;
  }
}

}  // namespace

const BackendEntry* const* backend_entries(size_t* count) {
  if (count != nullptr) *count = kEntryCount;
  return kEntries;
}

const BackendEntry* find_backend_entry(int32_t kind) {
  for (const BackendEntry* e : kEntries)
    if (e->kind == kind) return e;
  return nullptr;
}

std::unique_ptr<Backend> make_backend(int32_t kind, const BackendParams& p, vpmm_status* st) {
  vpmm_status dummy;
  if (st == nullptr) st = &dummy;
  if (kind == VPMM_BACKEND_AUTO) {
    // The last entry is the host backend, whose probe always succeeds.
    for (const BackendEntry* e : kEntries)
      if (e->usable()) return e->make(p, st);
    *st = fail(VPMM_ERR_UNSUPPORTED, "vpmm_pool_create: no backend of this build is usable");
    return nullptr;
  }
  if (const BackendEntry* e = find_backend_entry(kind)) return e->make(p, st);
  if (const char* label = kind_label(kind)) {
    *st = fail(VPMM_ERR_UNSUPPORTED,
               "vpmm_pool_create: libvpmm was built without the %s backend (device %d requested)",
               label, p.device);
    return nullptr;
  }
  *st = fail(VPMM_ERR_INVALID_ARGUMENT,
             "vpmm_pool_create: backend %d is not a VPMM_BACKEND_* value", kind);
  return nullptr;
}

}  // namespace vpmm
