// How a GPU driver's error becomes a status and a message, the same way for
// the CUDA and the HIP backends (each passes its own error codes and names).
#pragma once

#include <cstdarg>

#include "vpmm.h"

namespace vpmm {

// Who supplied the values a failing call was given. "Invalid value" and
// "invalid handle" mean "bad argument": the caller's fault when the values
// came from the caller (an address, a handle, a stream, an event), a backend
// bug or driver problem when they are ours (allocation properties, flags).
enum class Blame { caller, backend };

// A driver's error codes that have a status of their own.
template <typename E>
struct DriverErrorCodes {
  E out_of_memory, not_supported, invalid_value, invalid_handle;
};

template <typename E>
vpmm_status driver_status(E r, Blame blame, const DriverErrorCodes<E>& c) {
  if (r == c.out_of_memory) return VPMM_ERR_OUT_OF_MEMORY;
  if (r == c.not_supported) return VPMM_ERR_UNSUPPORTED;
  if (r == c.invalid_value || r == c.invalid_handle)
    return blame == Blame::caller ? VPMM_ERR_INVALID_ARGUMENT : VPMM_ERR_BACKEND;
  return VPMM_ERR_BACKEND;
}

// Records "<driver> <call>: <error>" and returns st. `call` is a printf
// format describing the call and its values, e.g. "cuMemCreate(size=%llu)";
// `error` is the driver's name and description of the error. Stack buffers
// only: never allocates, so the out-of-memory path is safe.
vpmm_status driver_failv(vpmm_status st, const char* driver, const char* error, const char* call, va_list ap);

}  // namespace vpmm
