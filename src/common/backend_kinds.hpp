// THE names of the backend kinds (VPMM_BACKEND_*): the one table that the
// option parser (VPMM_BACKEND), the registry's messages, each backend's
// name() and entry, and through vpmm_backend_kind_name the tool and the
// bindings read. A kind the ABI gains is appended here and in vpmm.h
// together. In the bottom layer: a backend names itself without reaching
// into the configuration above it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "vpmm.h"

namespace vpmm {

struct BackendKindName {
  int32_t kind;       // VPMM_BACKEND_*
  const char* name;   // as VPMM_BACKEND, vpmm_pool_backend_name and the tools spell it
  const char* label;  // in prose ("the CUDA backend")
};

inline constexpr BackendKindName kBackendKinds[] = {
    {VPMM_BACKEND_AUTO, "auto", "auto"},
    {VPMM_BACKEND_CUDA, "cuda", "CUDA"},
    {VPMM_BACKEND_HIP, "hip", "HIP"},
    {VPMM_BACKEND_HOST, "host", "host"},
};
inline constexpr size_t kBackendKindCount = sizeof kBackendKinds / sizeof kBackendKinds[0];

// The row of `kind`; nullptr for a value that is no VPMM_BACKEND_*.
constexpr const BackendKindName* backend_kind(int32_t kind) {
  for (const BackendKindName& k : kBackendKinds)
    if (k.kind == kind) return &k;
  return nullptr;
}
// "cuda" for VPMM_BACKEND_CUDA; nullptr for a value that is no kind.
constexpr const char* backend_kind_name(int32_t kind) {
  const BackendKindName* k = backend_kind(kind);
  return k ? k->name : nullptr;
}

}  // namespace vpmm
