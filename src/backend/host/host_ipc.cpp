// See host_ipc.hpp.
#include "backend/host/host_ipc.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "common/status.hpp"

namespace vpmm {
namespace host {

namespace {
constexpr int kHandleSeals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;
}

vpmm_status create_handle_memfd(uint64_t size, int* fd, const char* who) {
  int f = memfd_create("vpmm-handle", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (f < 0) {
    int err = errno;
    return fail(err == ENOMEM || err == EMFILE || err == ENFILE ? VPMM_ERR_OUT_OF_MEMORY : VPMM_ERR_BACKEND,
                "%s: memfd_create for an exportable handle failed: %s", who, std::strerror(err));
  }
  if (ftruncate(f, static_cast<off_t>(size)) != 0) {
    int err = errno;
    close(f);
    return fail(VPMM_ERR_OUT_OF_MEMORY, "%s: sizing an exportable handle to %llu bytes failed: %s", who,
                static_cast<unsigned long long>(size), std::strerror(err));
  }
  // Its size is final before anyone else can hold it: a process importing it
  // (perhaps a hostile one) cannot shrink it under the exporter's mapping
  // (a fault at the next touch), grow it, or seal it against writes; as on
  // CUDA, where an imported handle has the size it was created with.
  if (fcntl(f, F_ADD_SEALS, kHandleSeals) != 0) {
    int err = errno;
    close(f);
    return fail(VPMM_ERR_BACKEND, "%s: sealing an exportable handle failed: %s", who, std::strerror(err));
  }
  *fd = f;
  return VPMM_OK;
}

vpmm_status dup_fd(int fd, int* out, const char* who) {
  int d = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (d < 0) {
    int err = errno;
    return fail(err == EMFILE || err == ENFILE ? VPMM_ERR_OUT_OF_MEMORY : VPMM_ERR_INVALID_ARGUMENT,
                "%s: duplicating file descriptor %d failed: %s", who, fd, std::strerror(err));
  }
  *out = d;
  return VPMM_OK;
}

vpmm_status check_handle_fd(int fd, uint64_t size, const char* who) {
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int err = errno;
    return fail(VPMM_ERR_INVALID_ARGUMENT, "%s: file descriptor %d: %s", who, fd, std::strerror(err));
  }
  if (!S_ISREG(st.st_mode))
    return fail(VPMM_ERR_INVALID_ARGUMENT, "%s: file descriptor %d is not a host backend handle (not a memory file)",
                who, fd);
  if (static_cast<uint64_t>(st.st_size) != size)
    return fail(VPMM_ERR_INVALID_ARGUMENT,
                "%s: file descriptor %d holds %llu bytes, not the %llu of the handle it should be", who, fd,
                static_cast<unsigned long long>(st.st_size), static_cast<unsigned long long>(size));
  // One that could still be resized would let its sender fault this process.
  const int seals = fcntl(fd, F_GET_SEALS);
  if (seals < 0 || (seals & kHandleSeals) != kHandleSeals)
    return fail(VPMM_ERR_INVALID_ARGUMENT,
                "%s: file descriptor %d is not a sealed host backend handle (its size could change under the "
                "mapping)",
                who, fd);
  return VPMM_OK;
}

void device_id(int device, uint8_t out[16]) {
  std::memset(out, 0, 16);
  char text[64] = "";
  if (FILE* f = std::fopen("/proc/sys/kernel/random/boot_id", "r")) {
    if (!std::fgets(text, sizeof text, f)) text[0] = '\0';
    std::fclose(f);
  }
  // "xxxxxxxx-xxxx-..." -> 16 bytes; whatever cannot be read stays zero.
  int n = 0, hi = -1;
  for (const char* p = text; *p && n < 16; ++p) {
    int v = *p >= '0' && *p <= '9' ? *p - '0' : *p >= 'a' && *p <= 'f' ? *p - 'a' + 10 : -1;
    if (v < 0) continue;
    if (hi < 0) {
      hi = v;
    } else {
      out[n++] = static_cast<uint8_t>(hi << 4 | v);
      hi = -1;
    }
  }
  for (int i = 0; i < 4; ++i) out[12 + i] ^= static_cast<uint8_t>(static_cast<unsigned>(device) >> (8 * i));
}

}  // namespace host
}  // namespace vpmm
