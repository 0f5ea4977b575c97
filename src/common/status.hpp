// The bottom layer (src/common/): status names and the thread-local last error,
// shared by every layer above it (backends, core, C API). It includes nothing
// of the library but vpmm.h, so a backend can report errors without reaching
// into the core.
//
// The thread-local last error. Every failing path in the library calls
// fail(status, fmt, ...) exactly once, at the point that knows which value was
// wrong; vpmm_last_error() returns that text. The buffer is a fixed-size
// thread_local array so recording an out-of-memory error never allocates.
#pragma once

#include <cstdarg>

#include "vpmm.h"

namespace vpmm {

// The one table of status names: vpmm_status_string, the fault backend's
// messages and (through vpmm_status_string, or checked against this table by
// tests/api/check_status_names.py) every binding read it. Indexed by code,
// VPMM_OK first; kStatusNameCount codes from 0 up have a name.
extern const char* const kStatusNames[];
extern const int kStatusNameCount;

// "VPMM_ERR_OUT_OF_MEMORY" for VPMM_ERR_OUT_OF_MEMORY; "VPMM_ERR_UNKNOWN"
// for a code the table lacks. Never NULL; static strings.
const char* status_name(vpmm_status status);

// Formats the message into this thread's buffer and returns `status`, so a
// failing path reads: `return fail(VPMM_ERR_..., "vpmm_x: size %llu ...", v);`
vpmm_status fail(vpmm_status status, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
vpmm_status vfail(vpmm_status status, const char* fmt, va_list ap);

// Prefixes the current message with "context: " (keeps the status).
vpmm_status fail_context(vpmm_status status, const char* context);

const char* last_error();

// The first failure of a call that goes on after failing (pause, resume):
// later best-effort steps may fail too and overwrite the thread-local
// message; finish() puts the first one back. Never allocates.
class FirstFailure {
 public:
  // Records s with the current message if it is a failure and the first one.
  void note(vpmm_status s);
  bool failed() const { return st_ != VPMM_OK; }
  // VPMM_OK if nothing failed; else the first status, its message restored.
  vpmm_status finish();

 private:
  vpmm_status st_ = VPMM_OK;
  char msg_[512] = "";
};

}  // namespace vpmm
