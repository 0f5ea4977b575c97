// Checks of a backend call's status and the message it leaves (internal
// headers: for tests that drive a Backend directly, not the C API).
#pragma once

#include <cstdio>
#include <cstring>

#include "check.hpp"
#include "common/status.hpp"

// The call returns `want`, and a failure comes with a message (cleared first,
// so a stale one from an earlier call cannot pass).
#define CHECK_ST(expr, want)                                                               \
  do {                                                                                     \
    vpmm::fail(VPMM_OK, "%s", "");                                                         \
    vpmm_status st_ = (expr);                                                              \
    if (!(st_ == (want) && (st_ == VPMM_OK || vpmm::last_error()[0] != '\0'))) {           \
      vt::report_fail(__FILE__, __LINE__, #expr " == " #want);                             \
      std::printf("       got %d, last error: %s\n", st_, vpmm::last_error());             \
    }                                                                                      \
  } while (0)

// The last error names `substr`.
#define CHECK_ERR_HAS(substr) \
  CHECK_MSG(std::strstr(vpmm::last_error(), (substr)) != nullptr, "last error: %s", vpmm::last_error())
