// See fd_passing.hpp.
#include "ipc/fd_passing.hpp"

#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>

#include "common/status.hpp"
#include "ipc/fd_table.hpp"

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434  // the same number on every architecture (since 5.3)
#endif
#ifndef SYS_pidfd_getfd
#define SYS_pidfd_getfd 438  // (since 5.6)
#endif

namespace vpmm {
namespace ipc {

namespace {

constexpr uint32_t kMagic = 0x494d5056;  // "VPMI"
constexpr uint32_t kVersion = 1;

struct Header {
  uint32_t magic;
  uint32_t version;
  uint64_t size;
  uint32_t n_fds;
  uint32_t reserved;
};
static_assert(sizeof(Header) == 24, "the socket header is 24 bytes");

vpmm_status check_socket(const char* who, int sock) {
  int type = 0;
  socklen_t len = sizeof type;
  sockaddr_storage addr;
  socklen_t alen = sizeof addr;
  if (getsockopt(sock, SOL_SOCKET, SO_TYPE, &type, &len) != 0 ||
      getsockname(sock, reinterpret_cast<sockaddr*>(&addr), &alen) != 0 || addr.ss_family != AF_UNIX ||
      (type != SOCK_STREAM && type != SOCK_SEQPACKET))
    return fail(VPMM_ERR_INVALID_ARGUMENT,
                "%s: %d is not a Unix-domain stream or seqpacket socket (file descriptors travel only there)",
                who, sock);
  return VPMM_OK;
}

// One sendmsg of the whole buffer with the descriptors attached, retried on
// EINTR; the rest of a partial stream write follows without descriptors.
vpmm_status send_part(const char* who, int sock, const char* data, size_t len, const int* fds, size_t n) {
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kFdsPerMessage)];
  while (len > 0) {
    iovec iov{const_cast<char*>(data), len};
    msghdr msg;
    std::memset(&msg, 0, sizeof msg);
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    if (n > 0) {
      std::memset(control, 0, sizeof control);
      msg.msg_control = control;
      msg.msg_controllen = CMSG_SPACE(sizeof(int) * n);
      cmsghdr* c = CMSG_FIRSTHDR(&msg);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(sizeof(int) * n);
      std::memcpy(CMSG_DATA(c), fds, sizeof(int) * n);
    }
    ssize_t sent = sendmsg(sock, &msg, MSG_NOSIGNAL);
    if (sent < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      return fail(err == EBADF && n > 0 ? VPMM_ERR_INVALID_ARGUMENT : VPMM_ERR_BACKEND,
                  "%s: sendmsg on socket %d failed: %s", who, sock, std::strerror(err));
    }
    data += sent;
    len -= static_cast<size_t>(sent);
    n = 0;
  }
  return VPMM_OK;
}

// Reads exactly len bytes (one sendmsg's worth), collecting descriptors.
vpmm_status recv_part(const char* who, int sock, char* data, size_t len, std::vector<int>* got) {
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * (kFdsPerMessage + 3))];
  while (len > 0) {
    iovec iov{data, len};
    msghdr msg;
    std::memset(&msg, 0, sizeof msg);
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    ssize_t r = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
    if (r < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      return fail(VPMM_ERR_BACKEND, "%s: recvmsg on socket %d failed: %s", who, sock, std::strerror(err));
    }
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c))
      if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
        size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < k; ++i) {
          int fd;
          std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
          got->push_back(fd);
        }
      }
    if (msg.msg_flags & MSG_CTRUNC)
      return fail(VPMM_ERR_OUT_OF_MEMORY,
                  "%s: the file descriptors of the message were cut short (the process's descriptor limit, "
                  "RLIMIT_NOFILE, is reached?)",
                  who);
    if (r == 0) return fail(VPMM_ERR_BACKEND, "%s: the peer closed socket %d mid-message", who, sock);
    data += r;
    len -= static_cast<size_t>(r);
  }
  return VPMM_OK;
}

}  // namespace

void close_all(const std::vector<int>& fds) {
  for (int fd : fds)
    if (fd >= 0) close(fd);
}

vpmm_status send_message(const char* who, int sock, const void* desc, size_t size, const int* fds, size_t n_fds) {
  vpmm_status st = check_socket(who, sock);
  if (st != VPMM_OK) return st;
  std::string first(sizeof(Header) + size, '\0');
  Header h{kMagic, kVersion, size, static_cast<uint32_t>(n_fds), 0};
  std::memcpy(&first[0], &h, sizeof h);
  if (size) std::memcpy(&first[sizeof h], desc, size);
  size_t sent = std::min(n_fds, kFdsPerMessage);
  if ((st = send_part(who, sock, first.data(), first.size(), fds, sent)) != VPMM_OK) return st;
  while (sent < n_fds) {
    const size_t n = std::min(n_fds - sent, kFdsPerMessage);
    const char one = 0;
    if ((st = send_part(who, sock, &one, 1, fds + sent, n)) != VPMM_OK) return st;
    sent += n;
  }
  return VPMM_OK;
}

vpmm_status recv_message(const char* who, int sock, bool peek, void* desc, size_t capacity, size_t* size,
                         int* fds, size_t fd_capacity, size_t* n_fds) {
  vpmm_status st = check_socket(who, sock);
  if (st != VPMM_OK) return st;
  Header h;
  for (;;) {  // no control buffer: peeking installs no descriptor
    ssize_t r = recv(sock, &h, sizeof h, MSG_PEEK | MSG_WAITALL);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      int err = errno;
      return fail(VPMM_ERR_BACKEND, "%s: recv on socket %d failed: %s", who, sock, std::strerror(err));
    }
    if (r == 0) return fail(VPMM_ERR_BACKEND, "%s: the peer closed socket %d", who, sock);
    if (static_cast<size_t>(r) < sizeof h)
      return fail(VPMM_ERR_INVALID_ARGUMENT, "%s: a message of %zd bytes is not a descriptor", who, r);
    break;
  }
  if (h.magic != kMagic || h.version != kVersion)
    return fail(VPMM_ERR_INVALID_ARGUMENT, "%s: the message on socket %d is not a libvpmm descriptor", who, sock);
  if (peek) {
    *size = h.size;
    *n_fds = h.n_fds;
    return VPMM_OK;
  }
  if (capacity < h.size || fd_capacity < h.n_fds)
    return fail(VPMM_ERR_INVALID_ARGUMENT,
                "%s: the message needs %llu bytes and %u file descriptors, the buffers hold %zu and %zu "
                "(nothing was received: call again with larger ones)",
                who, static_cast<unsigned long long>(h.size), h.n_fds, capacity, fd_capacity);
  std::string first(sizeof h + h.size, '\0');
  make_descriptor_room(2 * static_cast<size_t>(h.n_fds));  // received, then kept by an import
  std::vector<int> got;
  st = recv_part(who, sock, &first[0], first.size(), &got);
  while (st == VPMM_OK && got.size() < h.n_fds) {
    char one;
    st = recv_part(who, sock, &one, 1, &got);
  }
  if (st == VPMM_OK && got.size() != h.n_fds)
    st = fail(VPMM_ERR_INVALID_ARGUMENT, "%s: the message carried %zu file descriptors, its header says %u", who,
              got.size(), h.n_fds);
  if (st != VPMM_OK) {
    close_all(got);
    return st;
  }
  if (h.size) std::memcpy(desc, first.data() + sizeof h, h.size);
  for (size_t i = 0; i < got.size(); ++i) fds[i] = got[i];
  *size = h.size;
  *n_fds = got.size();
  return VPMM_OK;
}

PidFd::~PidFd() {
  if (fd_ >= 0) close(fd_);
}

vpmm_status PidFd::open(const char* who, int32_t pid) {
  pid_ = pid;
  long r = syscall(SYS_pidfd_open, static_cast<pid_t>(pid), 0);
  if (r < 0) {
    int err = errno;
    if (err == ESRCH)
      return fail(VPMM_ERR_WRONG_STATE, "%s: the exporting process %d no longer exists", who, pid);
    if (err == ENOSYS)
      return fail(VPMM_ERR_UNSUPPORTED,
                  "%s: this kernel has no pidfd_open (Linux 5.3+): pass the file descriptors (send them over a "
                  "Unix socket, vpmm_export_send / vpmm_ipc_recv)",
                  who);
    return fail(err == EMFILE || err == ENFILE ? VPMM_ERR_OUT_OF_MEMORY : VPMM_ERR_UNSUPPORTED,
                "%s: pidfd_open(%d) failed: %s", who, pid, std::strerror(err));
  }
  fd_ = static_cast<int>(r);
  return VPMM_OK;
}

vpmm_status PidFd::fetch(const char* who, const std::vector<int>& numbers, std::vector<int>* out) {
  std::vector<int> got;
  for (int n : numbers) {
    long r = syscall(SYS_pidfd_getfd, fd_, n, 0);
    if (r >= 0) {
      got.push_back(static_cast<int>(r));
      continue;
    }
    int err = errno;
    close_all(got);
    if (err == ENOSYS)
      return fail(VPMM_ERR_UNSUPPORTED,
                  "%s: this kernel has no pidfd_getfd (Linux 5.6+): pass the file descriptors (send them over a "
                  "Unix socket, vpmm_export_send / vpmm_ipc_recv)",
                  who);
    if (err == EPERM)
      return fail(VPMM_ERR_UNSUPPORTED,
                  "%s: pidfd_getfd on process %d: %s (it needs permission to ptrace the exporter: the same user, "
                  "and Yama's kernel.yama.ptrace_scope 0 unless the exporter is a descendant; containers often "
                  "forbid it): pass the file descriptors over a Unix socket instead (vpmm_export_send / "
                  "vpmm_ipc_recv)",
                  who, pid_, std::strerror(err));
    if (err == EBADF || err == ESRCH)
      return fail(VPMM_ERR_WRONG_STATE,
                  "%s: process %d no longer has file descriptor %d of the export (the export was closed, paused "
                  "or freed, or the process exited)",
                  who, pid_, n);
    return fail(err == EMFILE || err == ENFILE ? VPMM_ERR_OUT_OF_MEMORY : VPMM_ERR_BACKEND,
                "%s: pidfd_getfd(process %d, file descriptor %d) failed: %s", who, pid_, n, std::strerror(err));
  }
  *out = std::move(got);
  return VPMM_OK;
}

}  // namespace ipc
}  // namespace vpmm
