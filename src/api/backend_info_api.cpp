// vpmm_backend_info (vpmm.h): the describe line of a compiled-in backend's
// registry entry. The API layer asks the registry; it knows no backend.
// vpmm_backend_kind_name: the kinds' one name table (common/backend_kinds.hpp).
#include <cstring>

#include "backend/registry.hpp"
#include "common/backend_kinds.hpp"
#include "common/status.hpp"
#include "config/config.hpp"
#include "vpmm.h"

extern "C" {

VPMM_API vpmm_status vpmm_backend_info(int32_t backend, char* buf, size_t capacity, size_t* length) {
  const char* call = "vpmm_backend_info";
  if (buf == nullptr && capacity > 0)
    return vpmm::fail(VPMM_ERR_INVALID_ARGUMENT, "%s: buf is NULL with capacity %zu", call, capacity);
  if (!vpmm::backend_kind_name(backend))
    return vpmm::fail(VPMM_ERR_INVALID_ARGUMENT, "%s: backend %d is not a VPMM_BACKEND_* value",
                      call, backend);
  const vpmm::BackendEntry* e = vpmm::find_backend_entry(backend);
  if (e == nullptr || e->describe == nullptr)
    return vpmm::fail(VPMM_ERR_UNSUPPORTED, "%s: backend %d %s", call, backend,
                      e == nullptr ? "is not built into this libvpmm" : "has nothing to describe");
  vpmm_config c;
  vpmm_config_init(&c);  // the environment, as a pool would read it
  const vpmm::BackendParams p = vpmm::config_backend_params(c);
  // Measure first, so *length is the full length even when buf is short.
  char full[1024];
  size_t n = e->describe(p, full, sizeof full);
  if (length != nullptr) *length = n;
  if (capacity > 0) {
    size_t k = n < capacity - 1 ? n : capacity - 1;
    std::memcpy(buf, full, k);
    buf[k] = '\0';
  }
  return VPMM_OK;
}

VPMM_API const char* vpmm_backend_kind_name(int32_t kind) { return vpmm::backend_kind_name(kind); }

}  // extern "C"
