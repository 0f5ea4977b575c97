// What the HIP backend decides from the runtime it loaded, before any device
// is touched: the runtime's version and file, and which ROCm paths apply
// (chunked handles, the 7.2 VA-recycling workaround, the page floor). One
// place for these decisions, shared by the backend's factory and by
// vpmm_backend_info (the `vpmm info` line), so both always agree.
#pragma once

#include <cstddef>
#include <cstdint>

#include "vpmm.h"

namespace vpmm {
namespace hip {

// The chunk size on ROCm < 7.0 when vpmm_config.hip_chunk_size is 0: 256 MiB,
// vLLM's default on ROCm 6.x (docs/backends.md says why).
constexpr uint64_t kDefaultChunkSize = 256ull << 20;
// The least page: 2 MiB whatever the runtime reports (often 4 KiB; RDNA4
// faults with 4 KiB VMM pages).
constexpr uint64_t kPageFloor = 2ull << 20;

struct HipFacts {
  int version = 0;          // hipRuntimeGetVersion (HIP_VERSION encoding)
  char path[256] = "";      // the runtime file loaded
  uint64_t chunk_size = 0;  // largest hipMemCreate; 0 = no chunking
  bool chunk_forced = false;     // chunk size from the config, not the version
  bool recycle_va = false;       // ROCm 7.2 release workaround on
  bool recycle_forced = false;   // ... set by VPMM_HIP_VA_RECYCLE, not the version
  uint64_t page_floor = kPageFloor;
};

// Loads the runtime (hip_runtime.hpp), asks its version and applies
// `config_chunk` (vpmm_config.hip_chunk_size: 0 = by version,
// VPMM_HANDLE_SIZE_UNLIMITED = never chunk, else chunk at that size on any
// version) and the environment (VPMM_HIP_VA_RECYCLE = auto|on|off|1|0,
// VPMM_HIP_PAGE_FLOOR = a power of two >= 4096 bytes, K/M suffixes allowed).
// Errors (thread-local message set): UNSUPPORTED (no runtime, or it cannot
// say its version), INVALID_ARGUMENT (a malformed variable).
vpmm_status probe(uint64_t config_chunk, HipFacts* out);

// One line for `vpmm info`: the runtime's file and version and the paths it
// takes, or why there is none. Returns the length written (always
// NUL-terminated in buf when capacity > 0).
size_t describe(uint64_t config_chunk, char* buf, size_t capacity);

}  // namespace hip
}  // namespace vpmm
