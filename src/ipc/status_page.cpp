// See status_page.hpp.
#include "ipc/status_page.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "common/status.hpp"

namespace vpmm {
namespace ipc {

namespace {

constexpr uint64_t kMagic = 0x314350494d4d5056ull;  // "VPMMIPC1"
constexpr uint32_t kVersion = 1;
constexpr size_t kPageBytes = 4096;
constexpr off_t kExporterByte = 0;
constexpr off_t kFirstSlot = 1, kSlots = 4095;

// A description of the memfd of our own (see the header); -1 without /proc.
int reopen(int fd) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  return ::open(path, O_RDWR | O_CLOEXEC);
}

bool lock_byte(int fd, off_t at) {
  struct flock fl;
  std::memset(&fl, 0, sizeof fl);
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
  fl.l_start = at;
  fl.l_len = 1;
  return fcntl(fd, F_OFD_SETLK, &fl) == 0;
}

// The first lock of another description at or after `from` within `len`
// bytes: its start, or -1 when there is none (or the query failed).
off_t other_lock(int fd, off_t from, off_t len) {
  struct flock fl;
  std::memset(&fl, 0, sizeof fl);
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
  fl.l_start = from;
  fl.l_len = len;
  if (fcntl(fd, F_OFD_GETLK, &fl) != 0 || fl.l_type == F_UNLCK) return -1;
  return fl.l_start;
}

uint64_t random_nonce() {
  uint64_t n = 0;
  if (getrandom(&n, sizeof n, GRND_NONBLOCK) == static_cast<ssize_t>(sizeof n) && n != 0) return n;
  // No entropy yet (early boot): unique enough within one machine's processes.
  static std::atomic<uint64_t> counter{0};
  n = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  n ^= static_cast<uint64_t>(getpid()) << 32;
  n += ++counter * 0x9e3779b97f4a7c15ull;
  return n | 1;
}

}  // namespace

struct StatusPage::Layout {
  uint64_t magic;
  uint32_t version;
  int32_t pid;
  uint64_t nonce;
  std::atomic<uint64_t> word;
  std::atomic<uint64_t> imports;
};
static_assert(sizeof(std::atomic<uint64_t>) == 8, "lock-free 64-bit atomics shared between processes");

StatusPage::~StatusPage() {
  close_locks();
  if (page_) munmap(page_, kPageBytes);
}

vpmm_status StatusPage::create(const char* who, std::unique_ptr<StatusPage>* out) {
  std::unique_ptr<StatusPage> p(new StatusPage);
  p->exporter_ = true;
  p->fd_ = memfd_create("vpmm-export", MFD_CLOEXEC);
  if (p->fd_ < 0) {
    int err = errno;
    return fail(err == EMFILE || err == ENFILE || err == ENOMEM ? VPMM_ERR_OUT_OF_MEMORY : VPMM_ERR_BACKEND,
                "%s: memfd_create of the export's status page failed: %s", who, std::strerror(err));
  }
  if (ftruncate(p->fd_, kPageBytes) != 0) {
    int err = errno;
    return fail(VPMM_ERR_OUT_OF_MEMORY, "%s: sizing the export's status page failed: %s", who, std::strerror(err));
  }
  void* m = mmap(nullptr, kPageBytes, PROT_READ | PROT_WRITE, MAP_SHARED, p->fd_, 0);
  if (m == MAP_FAILED) {
    int err = errno;
    return fail(VPMM_ERR_OUT_OF_MEMORY, "%s: mapping the export's status page failed: %s", who,
                std::strerror(err));
  }
  p->page_ = static_cast<Layout*>(m);
  p->page_->magic = kMagic;
  p->page_->version = kVersion;
  p->page_->pid = static_cast<int32_t>(getpid());
  p->page_->nonce = random_nonce();
  p->page_->word.store(VPMM_EXPORT_ACTIVE);
  p->page_->imports.store(0);
  p->lock_fd_ = reopen(p->fd_);
  if (p->lock_fd_ >= 0 && !lock_byte(p->lock_fd_, kExporterByte)) {
    close(p->lock_fd_);
    p->lock_fd_ = -1;
  }
  *out = std::move(p);
  return VPMM_OK;
}

vpmm_status StatusPage::open(const char* who, int fd, uint64_t nonce, std::unique_ptr<StatusPage>* out) {
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || static_cast<size_t>(st.st_size) < kPageBytes)
    return fail(VPMM_ERR_INVALID_ARGUMENT, "%s: file descriptor %d is not an export's status page", who, fd);
  void* m = mmap(nullptr, kPageBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (m == MAP_FAILED) {
    int err = errno;
    return fail(err == ENOMEM ? VPMM_ERR_OUT_OF_MEMORY : VPMM_ERR_INVALID_ARGUMENT,
                "%s: mapping the status page (file descriptor %d) failed: %s", who, fd, std::strerror(err));
  }
  std::unique_ptr<StatusPage> p(new StatusPage);
  p->page_ = static_cast<Layout*>(m);
  if (p->page_->magic != kMagic || p->page_->version != kVersion || p->page_->nonce != nonce)
    return fail(VPMM_ERR_INVALID_ARGUMENT,
                "%s: file descriptor %d is not the status page of this export (a descriptor of another "
                "export or version, or file descriptors out of order)",
                who, fd);
  p->lock_fd_ = reopen(fd);
  *out = std::move(p);
  return VPMM_OK;
}

uint64_t StatusPage::nonce() const { return page_->nonce; }
int32_t StatusPage::pid() const { return page_->pid; }
uint64_t StatusPage::word() const { return page_->word.load(); }
uint64_t StatusPage::imports() const { return page_->imports.load(); }

void StatusPage::publish(int32_t state) {
  uint64_t w = page_->word.load();
  while ((w & 0xff) == static_cast<uint64_t>(VPMM_EXPORT_ACTIVE) &&
         !page_->word.compare_exchange_weak(w, ((w >> 8) + 1) << 8 | static_cast<uint64_t>(state))) {
  }
}

int32_t StatusPage::state() const {
  if (!page_) return VPMM_EXPORT_CLOSED;
  const int32_t s = static_cast<int32_t>(page_->word.load() & 0xff);
  if (s != VPMM_EXPORT_ACTIVE || exporter_ || lock_fd_ < 0) return s;
  return other_lock(lock_fd_, kExporterByte, 1) < 0 ? VPMM_EXPORT_EXITED : s;
}

uint32_t StatusPage::live_importers() const {
  if (lock_fd_ < 0) return 0;
  uint32_t n = 0;
  for (off_t at = kFirstSlot; at < kFirstSlot + kSlots;) {
    off_t found = other_lock(lock_fd_, at, kFirstSlot + kSlots - at);
    if (found < 0) break;
    ++n;
    at = found + 1;
  }
  return n;
}

void StatusPage::attach() {
  page_->imports.fetch_add(1);
  if (lock_fd_ < 0) return;
  for (off_t at = kFirstSlot; at < kFirstSlot + kSlots; ++at) {
    // Skip taken slots in one query rather than one failed lock each.
    off_t taken = other_lock(lock_fd_, at, 1);
    if (taken < 0 && lock_byte(lock_fd_, at)) return;
  }
}

void StatusPage::close_locks() {
  if (lock_fd_ >= 0) close(lock_fd_);
  lock_fd_ = -1;
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
}

}  // namespace ipc
}  // namespace vpmm
