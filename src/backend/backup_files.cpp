// Backup files of the disk store: the host file system calls behind
// HostServices::file_* (see host_services.hpp), the same for every backend. A GPU backend
// moves the bytes between the device and a pinned bounce buffer; these calls
// move them between that buffer and the file, with large sequential I/O.
//
// Direct I/O where the file system takes it: a backup is written once per
// pause and read once per resume, so the page cache would only hold a second
// copy of tens of GiB (and evict everything else) for no later reader.
// tmpfs refuses O_DIRECT at open; a request the file system refuses for
// alignment turns the descriptor buffered and is retried, so direct I/O is
// never a reason to fail.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "backend/host_io.hpp"
#include "common/status.hpp"

namespace vpmm {

namespace {

unsigned long long ull(uint64_t v) { return static_cast<unsigned long long>(v); }

// No room on the file system is the disk store's out-of-memory: nothing is
// paused, as when host memory for a backup runs out.
vpmm_status file_status(int err) {
  return err == ENOSPC || err == EDQUOT || err == ENOMEM || err == EFBIG ? VPMM_ERR_OUT_OF_MEMORY
                                                                          : VPMM_ERR_BACKEND;
}

// A request O_DIRECT refused (EINVAL: the buffer, size or offset is not
// aligned to the file system's block): the descriptor goes buffered.
bool drop_direct(int fd) {
  int fl = fcntl(fd, F_GETFL);
  return fl >= 0 && (fl & O_DIRECT) && fcntl(fd, F_SETFL, fl & ~O_DIRECT) == 0;
}

bool is_direct(int fd) {
  int fl = fcntl(fd, F_GETFL);
  return fl >= 0 && (fl & O_DIRECT);
}

int open_direct_or_buffered(const char* path) {
  int fd = open(path, O_RDWR | O_CLOEXEC | O_DIRECT);
  if (fd < 0 && errno == EINVAL) fd = open(path, O_RDWR | O_CLOEXEC);
  return fd;
}

}  // namespace

vpmm_status host_io::file_create(const std::string& dir, uint64_t size, std::string* path,
                                    FileHandle* out) {
  std::string name = dir;
  if (name.empty()) return fail(VPMM_ERR_INVALID_ARGUMENT, "backup file: the directory is empty");
  if (name.back() != '/') name += '/';
  name += "vpmm-backup-XXXXXX";
  std::vector<char> tmpl(name.begin(), name.end());
  tmpl.push_back('\0');
  int fd = mkostemp(tmpl.data(), O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    return fail(file_status(err), "backup file in directory \"%s\": cannot create a file: %s", dir.c_str(),
                std::strerror(err));
  }
  // The space is taken now, so that a full disk fails the pause before it
  // changes anything; a file system without fallocate gets a sparse file.
  int err = posix_fallocate(fd, 0, static_cast<off_t>(size));
  if (err == EOPNOTSUPP || err == EINVAL)
    err = ftruncate(fd, static_cast<off_t>(size)) == 0 ? 0 : errno;
  if (err != 0) {
    unlink(tmpl.data());
    close(fd);
    return fail(file_status(err), "backup file %s: cannot reserve %llu bytes: %s", tmpl.data(), ull(size),
                std::strerror(err));
  }
  close(fd);
  fd = open_direct_or_buffered(tmpl.data());
  if (fd < 0) {
    err = errno;
    unlink(tmpl.data());
    return fail(file_status(err), "backup file %s: cannot open it: %s", tmpl.data(), std::strerror(err));
  }
  try {
    path->assign(tmpl.data());
  } catch (...) {
    unlink(tmpl.data());
    close(fd);
    throw;
  }
  *out = fd;
  return VPMM_OK;
}

vpmm_status host_io::file_open(const std::string& path, FileHandle* out) {
  int fd = open_direct_or_buffered(path.c_str());
  if (fd < 0) {
    int err = errno;
    return fail(file_status(err), "backup file %s: cannot open it: %s", path.c_str(), std::strerror(err));
  }
  *out = fd;
  return VPMM_OK;
}

vpmm_status host_io::file_write(FileHandle f, const void* src, uint64_t size, uint64_t offset) {
  const int fd = static_cast<int>(f);
  uint64_t done = 0;
  while (done < size) {
    ssize_t n = pwrite(fd, static_cast<const char*>(src) + done, size - done, static_cast<off_t>(offset + done));
    if (n > 0) {
      done += static_cast<uint64_t>(n);
      continue;
    }
    int err = n == 0 ? EIO : errno;
    if (err == EINTR) continue;
    if (err == EINVAL && drop_direct(fd)) continue;
    return fail(file_status(err), "backup file (descriptor %d): writing %llu bytes at offset %llu failed: %s",
                fd, ull(size - done), ull(offset + done), std::strerror(err));
  }
  return VPMM_OK;
}

vpmm_status host_io::file_read(FileHandle f, void* dst, uint64_t size, uint64_t offset) {
  const int fd = static_cast<int>(f);
  uint64_t done = 0;
  while (done < size) {
    ssize_t n = pread(fd, static_cast<char*>(dst) + done, size - done, static_cast<off_t>(offset + done));
    if (n > 0) {
      done += static_cast<uint64_t>(n);
      continue;
    }
    if (n == 0)
      return fail(VPMM_ERR_BACKEND, "backup file (descriptor %d): it ends at %llu, %llu bytes short of the backup",
                  fd, ull(offset + done), ull(size - done));
    int err = errno;
    if (err == EINTR) continue;
    if (err == EINVAL && drop_direct(fd)) continue;
    return fail(VPMM_ERR_BACKEND, "backup file (descriptor %d): reading %llu bytes at offset %llu failed: %s", fd,
                ull(size - done), ull(offset + done), std::strerror(err));
  }
  return VPMM_OK;
}

vpmm_status host_io::file_close(FileHandle f) {
  const int fd = static_cast<int>(f);
  // Buffered writes leave the backup in the page cache too: ask the kernel
  // to write it back and drop it, rather than keep a second copy in memory.
  if (!is_direct(fd)) posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  // Linux releases the descriptor even when close reports an error; only a
  // descriptor that was not open is the caller's mistake.
  if (close(fd) != 0 && errno == EBADF)
    return fail(VPMM_ERR_INVALID_ARGUMENT, "backup file: descriptor %d is not open", fd);
  return VPMM_OK;
}

vpmm_status host_io::file_remove(const std::string& path) {
  if (unlink(path.c_str()) != 0 && errno != ENOENT) {
    int err = errno;
    return fail(VPMM_ERR_BACKEND, "backup file %s: cannot remove it: %s", path.c_str(), std::strerror(err));
  }
  return VPMM_OK;
}

}  // namespace vpmm
