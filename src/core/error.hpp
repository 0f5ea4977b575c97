// The thread-local last error. Every failing path in the library calls
// fail(status, fmt, ...) exactly once, at the point that knows which value was
// wrong; vpmm_last_error() returns that text. The buffer is a fixed-size
// thread_local array so recording an out-of-memory error never allocates.
#pragma once

#include <cstdarg>

#include "vpmm.h"

namespace vpmm {

// Formats the message into this thread's buffer and returns `status`, so a
// failing path reads: `return fail(VPMM_ERR_..., "vpmm_x: size %llu ...", v);`
vpmm_status fail(vpmm_status status, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
vpmm_status vfail(vpmm_status status, const char* fmt, va_list ap);

// Prefixes the current message with "context: " (keeps the status).
vpmm_status fail_context(vpmm_status status, const char* context);

const char* last_error();

}  // namespace vpmm
