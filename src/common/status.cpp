// Status names and the thread-local last error (see status.hpp).
#include "common/status.hpp"

#include <cstdio>
#include <algorithm>
#include <cstring>

namespace vpmm {

// In code order, one name per status of vpmm.h; a new status is appended
// here and in vpmm.h together (check_status_names.py compares the two).
const char* const kStatusNames[] = {
    "VPMM_OK",                   // 0
    "VPMM_ERR_INVALID_ARGUMENT", // 1
    "VPMM_ERR_OUT_OF_MEMORY",    // 2
    "VPMM_ERR_UNKNOWN_POINTER",  // 3
    "VPMM_ERR_WRONG_STATE",      // 4
    "VPMM_ERR_UNSUPPORTED",      // 5
    "VPMM_ERR_BACKEND",          // 6
    "VPMM_ERR_INTERNAL",         // 7
    "VPMM_ERR_TIMEOUT",          // 8
};
const int kStatusNameCount = static_cast<int>(sizeof kStatusNames / sizeof kStatusNames[0]);
static_assert(sizeof kStatusNames / sizeof kStatusNames[0] == VPMM_ERR_TIMEOUT + 1,
              "one name per status, in code order");

const char* status_name(vpmm_status status) {
  if (status < 0 || status >= kStatusNameCount) return "VPMM_ERR_UNKNOWN";
  return kStatusNames[status];
}

namespace {
constexpr size_t kErrorCapacity = 512;
thread_local char t_error[kErrorCapacity] = "";
}  // namespace

vpmm_status vfail(vpmm_status status, const char* fmt, va_list ap) {
  std::vsnprintf(t_error, kErrorCapacity, fmt, ap);
  return status;
}

vpmm_status fail(vpmm_status status, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vfail(status, fmt, ap);
  va_end(ap);
  return status;
}

vpmm_status fail_context(vpmm_status status, const char* context) {
  // Shift the current message right and write the context in front, without
  // allocating (this runs on out-of-memory paths too).
  size_t cl = std::strlen(context);
  size_t ml = std::strlen(t_error);
  if (cl + 2 >= kErrorCapacity) cl = kErrorCapacity - 3;
  size_t keep = std::min(ml, kErrorCapacity - 1 - cl - 2);
  std::memmove(t_error + cl + 2, t_error, keep);
  std::memcpy(t_error, context, cl);
  t_error[cl] = ':';
  t_error[cl + 1] = ' ';
  t_error[cl + 2 + keep] = '\0';
  return status;
}

const char* last_error() { return t_error; }

void FirstFailure::note(vpmm_status s) {
  if (s == VPMM_OK || st_ != VPMM_OK) return;
  st_ = s;
  std::snprintf(msg_, sizeof msg_, "%s", t_error);
}

vpmm_status FirstFailure::finish() {
  if (st_ != VPMM_OK) std::snprintf(t_error, kErrorCapacity, "%s", msg_);
  return st_;
}

}  // namespace vpmm
