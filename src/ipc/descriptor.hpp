// The descriptor of an export: the bytes that travel beside its file
// descriptors (vpmm_export_descriptor, vpmm_pool_import). Fixed-size
// little-endian records, no pointers:
//
//   header   64 bytes: magic "VPMMDSC1", version, header size, backend kind,
//            exporter pid, nonce, device id (16 bytes), handle and entry
//            counts, the exporter's numbers of the status page's and the
//            counter page's descriptors
//   handle   24 bytes each: exporter address, size, exporter's descriptor number
//   entry    32 bytes each: exporter address, size, first handle, offset in it
//
// The file descriptors travel in the order: status page, counter page, then
// handle 0, 1... (version 1 had no counter page: importers wrote their count
// into the status page, which is now sealed against them.)
// Everything in it is checked when decoded: a descriptor is input from
// another process.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/share/channel_interfaces.hpp"
#include "vpmm.h"

namespace vpmm {
namespace ipc {

struct Descriptor {
  int32_t pid = 0;
  int status_fd = -1;           // in the exporter
  int counter_fd = -1;          // in the exporter
  std::vector<int> handle_fds;  // in the exporter
  ImportRequest request;        // fds left empty
};

// The bytes of an export.
std::string encode(const ExportLayout& layout, int32_t pid, uint64_t nonce, int status_fd, int counter_fd,
                   const std::vector<int>& handle_fds);

// Decodes and checks bytes from anywhere; INVALID_ARGUMENT naming the flaw.
vpmm_status decode(const char* who, const void* bytes, size_t size, Descriptor* out);

// How many file descriptors travel with a descriptor of n handles.
inline size_t fds_for(size_t n_handles) { return n_handles + 2; }

}  // namespace ipc
}  // namespace vpmm
