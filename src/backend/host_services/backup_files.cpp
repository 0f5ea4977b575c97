// Backup files of the disk store: the host file system calls behind
// HostServices::dir_* and file_* (see host_services.hpp), the same for every backend. A GPU backend
// moves the bytes between the device and a pinned bounce buffer; these calls
// move them between that buffer and the file, with large sequential I/O.
//
// Direct I/O where the file system takes it: a backup is written once per
// pause and read once per resume, so the page cache would only hold a second
// copy of tens of GiB (and evict everything else) for no later reader.
// tmpfs refuses O_DIRECT at open; a request the file system refuses for
// alignment turns the descriptor buffered and is retried, so direct I/O is
// never a reason to fail.
//
// Names are resolved once. A backup directory is opened when the pool first
// meets it (O_PATH: no read access needed) and every file is made and
// removed relative to that descriptor (openat, unlinkat): a relative path
// means the working directory of that moment, and a later chdir, or a
// rename of the directory, changes nothing. Files are made with O_EXCL and
// mode 0600 under a random name.
//
// A file is never opened again by its name: whoever may write the directory
// could put something else there between two pauses (a symbolic link to any
// file the process may write, and the next pause would write model weights
// into it; a file of their own, and the resume would load it as the
// allocation's bytes). The descriptor file_create returns is the file for
// its whole life, and since it stays open the file's inode cannot be
// reused: a remove compares the name's inode with the descriptor's and
// unlinks only a match.
#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "backend/host_services/host_io.hpp"
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

// "vpmm-backup-" and six characters of [A-Za-z0-9], as mkostemp makes them
// (mkostemp takes a path, not a directory descriptor).
std::string random_name() {
  static const char kChars[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  unsigned char r[6];
  if (getrandom(r, sizeof r, GRND_NONBLOCK) != static_cast<ssize_t>(sizeof r)) {
    uint64_t t = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) ^
                 (static_cast<uint64_t>(getpid()) << 32);
    for (unsigned char& c : r) {
      t = t * 6364136223846793005ull + 1442695040888963407ull;
      c = static_cast<unsigned char>(t >> 56);
    }
  }
  std::string name = "vpmm-backup-";
  for (unsigned char c : r) name += kChars[c % (sizeof kChars - 1)];
  return name;
}

}  // namespace

vpmm_status host_io::dir_open(const std::string& path, DirHandle* out) {
  if (path.empty()) return fail(VPMM_ERR_INVALID_ARGUMENT, "backup directory: the path is empty");
  int fd = open(path.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  int err = fd < 0 ? errno : 0;
  // Files are made in it: it must be writable and searchable (as the
  // process's effective ids, which make the files).
  if (fd >= 0 && faccessat(fd, ".", W_OK | X_OK, AT_EACCESS) != 0) {
    err = errno;
    close(fd);
    fd = -1;
  }
  if (fd < 0) {
    const bool callers = err == ENOENT || err == ENOTDIR || err == EACCES || err == EPERM || err == ELOOP ||
                         err == ENAMETOOLONG || err == EROFS;
    return fail(callers ? VPMM_ERR_INVALID_ARGUMENT : err == ENOMEM ? VPMM_ERR_OUT_OF_MEMORY : VPMM_ERR_BACKEND,
                "backup directory \"%s\": %s%s", path.c_str(), std::strerror(err),
                err == ENOENT ? " (it must exist: the pool makes files in it, not directories)"
                : err == EACCES || err == EROFS ? " (the process may not create files in it)"
                                                : "");
  }
  *out = fd;
  return VPMM_OK;
}

vpmm_status host_io::dir_close(DirHandle d) {
  if (close(static_cast<int>(d)) != 0 && errno == EBADF)
    return fail(VPMM_ERR_INVALID_ARGUMENT, "backup directory: descriptor %lld is not open",
                static_cast<long long>(d));
  return VPMM_OK;
}

vpmm_status host_io::dir_check(DirHandle d, bool* removed) {
  struct stat st;
  if (fstat(static_cast<int>(d), &st) != 0) {
    int err = errno;
    return fail(VPMM_ERR_BACKEND, "backup directory (descriptor %lld): %s", static_cast<long long>(d),
                std::strerror(err));
  }
  *removed = st.st_nlink == 0;
  return VPMM_OK;
}

vpmm_status host_io::file_create(DirHandle dir, uint64_t size, FileRef* ref, FileHandle* out) {
  const int dfd = static_cast<int>(dir);
  std::string name;
  int fd = -1, err = EEXIST;
  for (int tries = 0; fd < 0 && err == EEXIST && tries < 100; ++tries) {
    name = random_name();
    fd = openat(dfd, name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    err = fd < 0 ? errno : 0;
  }
  if (fd < 0) {
    // A directory removed since it was opened: ENOENT. Too many open files:
    // each disk backup keeps its file open while it exists.
    return fail(file_status(err), "cannot create a file: %s%s", std::strerror(err),
                err == EMFILE || err == ENFILE
                    ? " (each disk backup keeps its file open: raise the limit, e.g. ulimit -n)"
                    : "");
  }
  // The space is taken now, so that a full disk fails the pause before it
  // changes anything; a file system without fallocate gets a sparse file.
  err = posix_fallocate(fd, 0, static_cast<off_t>(size));
  if (err == EOPNOTSUPP || err == EINVAL)
    err = ftruncate(fd, static_cast<off_t>(size)) == 0 ? 0 : errno;
  if (err != 0) {
    unlinkat(dfd, name.c_str(), 0);
    close(fd);
    return fail(file_status(err), "backup file %s: cannot reserve %llu bytes: %s", name.c_str(), ull(size),
                std::strerror(err));
  }
  // Direct I/O on the descriptor just made (never a reopen by name);
  // refused (tmpfs), it stays buffered.
  int fl = fcntl(fd, F_GETFL);
  if (fl >= 0) fcntl(fd, F_SETFL, fl | O_DIRECT);
  try {
    ref->dir = dir;
    ref->name = name;
  } catch (...) {
    unlinkat(dfd, name.c_str(), 0);
    close(fd);
    throw;
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

vpmm_status host_io::file_remove(const FileRef& ref, FileHandle f) {
  const int fd = static_cast<int>(f);
  struct stat mine, there;
  if (fstat(fd, &mine) != 0) {
    int err = errno;
    return fail(err == EBADF ? VPMM_ERR_INVALID_ARGUMENT : VPMM_ERR_BACKEND,
                "backup file %s (descriptor %d): %s", ref.name.c_str(), fd, std::strerror(err));
  }
  const bool at_name = fstatat(static_cast<int>(ref.dir), ref.name.c_str(), &there, AT_SYMLINK_NOFOLLOW) == 0 &&
                       there.st_dev == mine.st_dev && there.st_ino == mine.st_ino;
  if (!at_name) {
    // Moved or removed by someone else, and something else (or nothing) put
    // at its name: that is not the pool's to remove. The file itself, which
    // may still be reachable where it was moved, keeps no bytes.
    if (ftruncate(fd, 0) != 0 && errno != EINVAL) {
      int err = errno;
      return fail(VPMM_ERR_BACKEND, "backup file %s (moved away): cannot empty it: %s", ref.name.c_str(),
                  std::strerror(err));
    }
    return VPMM_OK;
  }
  if (unlinkat(static_cast<int>(ref.dir), ref.name.c_str(), 0) != 0 && errno != ENOENT) {
    int err = errno;
    return fail(VPMM_ERR_BACKEND, "backup file %s: cannot remove it: %s", ref.name.c_str(), std::strerror(err));
  }
  return VPMM_OK;
}

}  // namespace vpmm
