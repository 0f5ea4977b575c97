// The backend conformance suite's view of "a backend under test": a row of
// the target table (targets.cpp) says how to make one and what the suite may
// expect of it; the cases (test_backend_contract.cpp) are written once,
// against the Backend interface only, and read the row where backends
// legitimately differ.
//
// What differs, and why:
//  - strict: the backend checks every driver rule itself, before anything
//    reaches memory (the host backend, and any emulator of a driver): refused
//    calls have exact statuses and messages, released memory is poisoned, a
//    mapping of an unknown handle is refused. A real driver (CUDA) leaves
//    some misuse undefined (double frees, unmapping what is not mapped), so
//    those cases run on strict targets only; the rules every driver enforces
//    (whole-handle map/unmap, granularity, out of memory) run everywhere.
//  - cpu_addressable: pool VAs are host pointers (host backend), so bytes are
//    written and read in place; elsewhere through copy_h2d/copy_d2h.
//  - hold/release: a way to keep a stream busy so that events stay pending
//    (host: vpmm_host_stream_hold; CUDA: a host function that blocks the
//    stream until released). nullptr: the pending-event checks are skipped.
#pragma once

#include <cstdint>
#include <memory>

#include "backend/backend.hpp"
#include "vpmm.h"

namespace conformance {

struct Target {
  const char* name;          // the command-line name: "host", "host+fault", "cuda"
  int32_t kind;              // VPMM_BACKEND_* the registry makes it from
  bool fault_wrapped;        // wrapped in tests/support's FaultBackend, no fault armed
  bool strict;               // see above
  bool cpu_addressable;      // see above
  // Facts the backend must report (0 / nullptr: not checked).
  const char* backend_name;
  uint64_t default_va_size;
  uint32_t capabilities;
  uint64_t max_handle_size;  // checked always: 0 = the backend states no cap
  // Keeps a stream busy until release(s); false when it cannot.
  bool (*hold)(vpmm::Stream s);
  void (*release)(vpmm::Stream s);
};

// The table, in the order the suites name them; *n receives the count.
const Target* targets(size_t* n);
const Target* find_target(const char* name);

// The target this run tests (set once by main).
const Target& target();
void set_target(const Target* t);

// A fresh backend of the current target (device 0, default parameters;
// exportable: BackendParams::exportable), or
// nullptr with *st and the thread-local message set. For a fault-wrapped
// target the result is a vpmm::FaultBackend with nothing armed.
std::unique_ptr<vpmm::Backend> make_backend(vpmm_status* st, bool exportable = false);

}  // namespace conformance
