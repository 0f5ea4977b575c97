// The backend-level leak check shared by the backend tests (host, CUDA, and
// the conformance suite): every live-object counter a backend (or the host
// services) keeps is back to zero once the test has released what it made.
#pragma once

#include <cstdint>

#include "backend/backend.hpp"
#include "backend/host_services/host_services.hpp"
#include "check.hpp"

namespace vt {

inline void check_counters_zero(const vpmm::Backend& b) {
  const vpmm::BackendCounters& c = b.counters();
  CHECK_EQ(c.live_handles.load(), int64_t(0));
  CHECK_EQ(c.live_handle_bytes.load(), int64_t(0));
  CHECK_EQ(c.live_reservations.load(), int64_t(0));
  CHECK_EQ(c.live_mappings.load(), int64_t(0));
  CHECK_EQ(c.live_events.load(), int64_t(0));
  CHECK_EQ(c.live_host_buffers.load(), int64_t(0));
}

// The same for host services (pageable memory and backup files).
inline void check_counters_zero(const vpmm::HostServices& h) {
  const vpmm::HostCounters& c = h.counters();
  CHECK_EQ(c.live_pageable.load(), int64_t(0));
  CHECK_EQ(c.live_files.load(), int64_t(0));
  CHECK_EQ(c.live_file_handles.load(), int64_t(0));
  CHECK_EQ(c.live_dir_handles.load(), int64_t(0));
}

}  // namespace vt
