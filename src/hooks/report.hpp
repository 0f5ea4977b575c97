// Failure reports of the allocator hooks (PyTorch, CuPy): a hook returns
// NULL and cannot say why, so the reason goes to stderr as VPMM_LOG allows.
//
// The hooks see the library through vpmm.h only (tests/check_layering.sh).
// The things they need that vpmm.h does not offer, the calling thread's last
// error, the VPMM_LOG level and a GPU-side wait of one stream for another,
// are declared here and defined by the C API layer (src/api/hook_support.cpp),
// which owns them: the hooks are entry points of the ABI like any other and
// must report the same way.
#pragma once

#include "vpmm.h"

namespace vpmm {

// Sets the calling thread's vpmm_last_error() text and returns `status`, as
// every exported function does on failure.
vpmm_status hook_fail(vpmm_status status, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

// The VPMM_LOG levels a hook reports at (the option table's order).
enum class HookLog : int { kError = 1, kWarn = 2, kInfo = 3, kDebug = 4 };

// Whether VPMM_LOG lets the library say things at `level` on stderr.
bool hook_log_enabled(HookLog level);

// `waiter` waits on the GPU for the work queued on `waited` so far; the CPU
// does not. Errors: INVALID_ARGUMENT (bad pool, a stream the pool's backend
// does not know), BACKEND; the last error says why.
vpmm_status hook_stream_wait(vpmm_pool* pool, vpmm_stream waiter, vpmm_stream waited);

// Report on stderr, as VPMM_LOG allows, why `hook` returned NULL (defined
// in default_pools.cpp).
void report_hook_failure(const char* hook, vpmm_status st);

}  // namespace vpmm
