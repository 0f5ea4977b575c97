// See driver_errors.hpp.
#include "backend/driver_errors.hpp"

#include <cstdio>

#include "common/status.hpp"

namespace vpmm {

vpmm_status driver_failv(vpmm_status st, const char* driver, const char* error, const char* call, va_list ap) {
  char what[256];
  std::vsnprintf(what, sizeof what, call, ap);
  return fail(st, "%s %s: %s", driver, what, error);
}

}  // namespace vpmm
