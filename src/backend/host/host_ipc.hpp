// What the host backend needs to share its memory with other processes:
// one memfd per handle (an exportable backend cannot hand out ranges of its
// single memfd: an importer holding a range would keep nothing alive, and a
// punched hole would zero its view) and the identity of the machine's memory.
#pragma once

#include <cstdint>

#include "vpmm.h"

namespace vpmm {
namespace host {

// A memfd of exactly `size` bytes (sparse: no memory until touched), close
// on exec, named "vpmm-handle" so /proc/PID/fd shows whose it is, sealed so
// that nobody can resize it or add a seal.
vpmm_status create_handle_memfd(uint64_t size, int* fd, const char* who);

// A close-on-exec duplicate of fd.
vpmm_status dup_fd(int fd, int* out, const char* who);

// Checks that fd is a memory file of exactly `size` bytes, sealed as
// create_handle_memfd seals it (what it made, possibly in another process).
vpmm_status check_handle_fd(int fd, uint64_t size, const char* who);

// 16 bytes naming "host memory of device `device` on this boot": the
// kernel's boot id with the ordinal folded in, so two host pools of
// different devices refuse each other's exports as two GPUs would.
void device_id(int device, uint8_t out[16]);

}  // namespace host
}  // namespace vpmm
