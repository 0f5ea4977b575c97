// Moving file descriptors between processes: SCM_RIGHTS over a Unix-domain
// socket (vpmm_ipc_send / vpmm_ipc_recv) and pidfd_getfd (an importer taking
// an exporter's descriptors by number, Linux 5.6+).
//
// The socket message: a 24-byte header (magic, version, descriptor size,
// descriptor count), the descriptor, and the file descriptors in groups of
// at most kFdsPerMessage (the kernel takes at most 253 per message): the
// first group rides on the header and descriptor, each further group on one
// byte of its own. Works on SOCK_STREAM and SOCK_SEQPACKET sockets: every
// read asks for exactly the bytes of one sendmsg.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "vpmm.h"

namespace vpmm {
namespace ipc {

constexpr size_t kFdsPerMessage = 250;

vpmm_status send_message(const char* who, int sock, const void* desc, size_t size, const int* fds, size_t n_fds);

// Waits for a message; with `peek` only reports its sizes (nothing consumed).
// Otherwise desc must hold *size bytes and fds *n_fds entries (checked
// against the header first, nothing consumed when too small).
vpmm_status recv_message(const char* who, int sock, bool peek, void* desc, size_t capacity, size_t* size,
                         int* fds, size_t fd_capacity, size_t* n_fds);

// Duplicates the exporter's descriptors `numbers` into this process (all or
// none; close-on-exec). UNSUPPORTED when pidfd_getfd is missing or refused
// (the message says why and what to do instead), WRONG_STATE when the
// process is gone or no longer has a descriptor of that number.
class PidFd {
 public:
  ~PidFd();
  vpmm_status open(const char* who, int32_t pid);
  vpmm_status fetch(const char* who, const std::vector<int>& numbers, std::vector<int>* out);

 private:
  int fd_ = -1;
  int32_t pid_ = 0;
};

void close_all(const std::vector<int>& fds);

}  // namespace ipc
}  // namespace vpmm
