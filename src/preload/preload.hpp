// What the interposer's parts share (src/preload/): the pools it routed
// allocations to, the environment's tag scope and a device synchronisation
// through the real runtime.
#pragma once

#include "vpmm.h"

namespace vpmm_preload {

constexpr int kMaxDevices = 64;  // vpmm_default_pool's range

// The default pool of `device` once an interposed allocation used it, else
// nullptr. Thread safe.
vpmm_pool* used_pool(int device);

// The text of the variable the library's option table names for `option`
// ("preload_tag" -> VPMM_PRELOAD_TAG), nullptr when unset. The interposer
// sees libvpmm through its public ABI only, so its variables are rows of that
// table (listed and documented with every other) and read through it.
const char* option_text(const char* option);

// Opens the environment's tag scope (VPMM_PRELOAD_TAG, or TMS_INIT_ENABLE's
// "default") on the calling thread if it has none yet (scope.cpp).
void open_env_scope();

// Waits for all work on `device` through the real runtime (cudaSetDevice on
// the calling thread, then cudaDeviceSynchronize). Returns false when no
// runtime is loaded below the interposer or a call failed.
bool synchronize_device(int device);

}  // namespace vpmm_preload
