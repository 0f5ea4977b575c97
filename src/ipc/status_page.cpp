// See status_page.hpp.
#include "ipc/status_page.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>

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
// bytes: its start (and in *end the byte after it; 0 for a lock to the end
// of the file), or -1 when there is none (or the query failed).
off_t other_lock(int fd, off_t from, off_t len, off_t* end = nullptr) {
  struct flock fl;
  std::memset(&fl, 0, sizeof fl);
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
  fl.l_start = from;
  fl.l_len = len;
  if (fcntl(fd, F_OFD_GETLK, &fl) != 0 || fl.l_type == F_UNLCK) return -1;
  if (end) *end = fl.l_len == 0 ? std::numeric_limits<off_t>::max() : fl.l_start + fl.l_len;
  return fl.l_start;
}

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434  // the same number on every architecture (since 5.3)
#endif

// The start time of process `pid` (field 22 of /proc/PID/stat, clock ticks
// since boot): with the pid, it names one process for the machine's life
// (a recycled pid starts later). 0 when there is no such process, it has
// exited (a zombie), or /proc is missing.
uint64_t start_time_of(int32_t pid) {
  char path[64], buf[1024];
  std::snprintf(path, sizeof path, "/proc/%d/stat", static_cast<int>(pid));
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  const ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return 0;
  buf[n] = '\0';
  const char* p = std::strrchr(buf, ')');  // the command name may hold spaces and parentheses
  if (!p) return 0;
  ++p;
  // Fields 3 (state) to 22 (starttime) follow, one space before each.
  char state = 0;
  for (int field = 3; field <= 22; ++field) {
    while (*p == ' ') ++p;
    if (!*p) return 0;
    if (field == 3) state = *p;
    if (field == 22) return (state == 'Z' || state == 'X') ? 0 : std::strtoull(p, nullptr, 10);
    while (*p && *p != ' ') ++p;
  }
  return 0;
}

// The inode of this process's pid namespace: pids name the same processes
// for two processes only when theirs are the same. 0 without /proc.
uint64_t pid_namespace() {
  struct stat st;
  return stat("/proc/self/ns/pid", &st) == 0 ? static_cast<uint64_t>(st.st_ino) : 0;
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
  // Appended (version 1 pages of earlier libraries read 0 here): who the
  // exporter is, for liveness an importer cannot forge (status_page.hpp).
  uint64_t start_time;  // the exporter's, 0 when unknown
  uint64_t pid_ns;      // the inode of the exporter's pid namespace, 0 when unknown
};
static_assert(sizeof(std::atomic<uint64_t>) == 8, "lock-free 64-bit atomics shared between processes");

namespace {

constexpr unsigned kResizeSeals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;

vpmm_status os_fail(const char* who, const char* what, int err) {
  return fail(err == EMFILE || err == ENFILE || err == ENOMEM ? VPMM_ERR_OUT_OF_MEMORY : VPMM_ERR_BACKEND,
              "%s: %s failed: %s", who, what, std::strerror(err));
}

// A memfd of one page that can be sealed, mapped writable at *map.
vpmm_status sealable_page(const char* who, const char* name, int* fd, void** map) {
  *fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (*fd < 0) return os_fail(who, "memfd_create of the export's status page", errno);
  if (ftruncate(*fd, kPageBytes) != 0) return os_fail(who, "sizing the export's status page", errno);
  void* m = mmap(nullptr, kPageBytes, PROT_READ | PROT_WRITE, MAP_SHARED, *fd, 0);
  if (m == MAP_FAILED) return os_fail(who, "mapping the export's status page", errno);
  *map = m;
  return VPMM_OK;
}

// Checks what an importer received is a memfd of one page that cannot be
// resized under it: a shrunk page would fault the importer.
vpmm_status check_page(const char* who, int fd, const char* what) {
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || static_cast<size_t>(st.st_size) != kPageBytes)
    return fail(VPMM_ERR_INVALID_ARGUMENT, "%s: file descriptor %d is not an export's %s", who, fd, what);
  const int seals = fcntl(fd, F_GET_SEALS);
  if (seals < 0 || (seals & static_cast<int>(kResizeSeals)) != static_cast<int>(kResizeSeals))
    return fail(VPMM_ERR_INVALID_ARGUMENT, "%s: file descriptor %d is not an export's sealed %s", who, fd, what);
  return VPMM_OK;
}

}  // namespace

StatusPage::~StatusPage() {
  close_locks();
  if (page_) munmap(const_cast<Layout*>(page_), kPageBytes);
  if (counter_) munmap(counter_, kPageBytes);
}

vpmm_status StatusPage::create(const char* who, std::unique_ptr<StatusPage>* out) {
  std::unique_ptr<StatusPage> p(new StatusPage);
  p->exporter_ = true;
  void* m = nullptr;
  vpmm_status st = sealable_page(who, "vpmm-export", &p->fd_, &m);
  if (st != VPMM_OK) return st;
  p->own_ = static_cast<Layout*>(m);
  p->page_ = p->own_;
  p->own_->magic = kMagic;
  p->own_->version = kVersion;
  p->own_->pid = p->pid_ = static_cast<int32_t>(getpid());
  p->own_->nonce = p->nonce_ = random_nonce();
  p->own_->word.store(VPMM_EXPORT_ACTIVE);
  p->own_->start_time = start_time_of(p->pid_);
  p->own_->pid_ns = p->own_->start_time ? pid_namespace() : 0;
  // From here on only the exporter's mapping writes the page. Kernels before
  // 5.1 have no F_SEAL_FUTURE_WRITE: the page is then writable by importers,
  // which can mislead other importers but never the exporter (published_).
  if (fcntl(p->fd_, F_ADD_SEALS, kResizeSeals | F_SEAL_FUTURE_WRITE) != 0 &&
      (errno != EINVAL || fcntl(p->fd_, F_ADD_SEALS, kResizeSeals) != 0))
    return os_fail(who, "sealing the export's status page", errno);
  if ((st = sealable_page(who, "vpmm-export-imports", &p->counter_fd_, &m)) != VPMM_OK) return st;
  p->counter_ = static_cast<std::atomic<uint64_t>*>(m);
  if (fcntl(p->counter_fd_, F_ADD_SEALS, kResizeSeals) != 0)
    return os_fail(who, "sealing the export's counter page", errno);
  p->lock_fd_ = reopen(p->fd_);
  if (p->lock_fd_ >= 0 && !lock_byte(p->lock_fd_, kExporterByte)) {
    close(p->lock_fd_);
    p->lock_fd_ = -1;
  }
  *out = std::move(p);
  return VPMM_OK;
}

vpmm_status StatusPage::open(const char* who, int fd, int counter_fd, uint64_t nonce,
                             std::unique_ptr<StatusPage>* out) {
  vpmm_status st = check_page(who, fd, "status page");
  if (st == VPMM_OK) st = check_page(who, counter_fd, "counter page");
  if (st != VPMM_OK) return st;
  std::unique_ptr<StatusPage> p(new StatusPage);
  void* m = mmap(nullptr, kPageBytes, PROT_READ, MAP_SHARED, fd, 0);
  if (m == MAP_FAILED) {
    int err = errno;
    return fail(err == ENOMEM ? VPMM_ERR_OUT_OF_MEMORY : VPMM_ERR_INVALID_ARGUMENT,
                "%s: mapping the status page (file descriptor %d) failed: %s", who, fd, std::strerror(err));
  }
  p->page_ = static_cast<const Layout*>(m);
  if (p->page_->magic != kMagic || p->page_->version != kVersion || p->page_->nonce != nonce)
    return fail(VPMM_ERR_INVALID_ARGUMENT,
                "%s: file descriptor %d is not the status page of this export (a descriptor of another "
                "export or version, or file descriptors out of order)",
                who, fd);
  p->nonce_ = nonce;
  p->pid_ = p->page_->pid;
  m = mmap(nullptr, kPageBytes, PROT_READ | PROT_WRITE, MAP_SHARED, counter_fd, 0);
  if (m == MAP_FAILED) {
    int err = errno;
    return fail(err == ENOMEM ? VPMM_ERR_OUT_OF_MEMORY : VPMM_ERR_INVALID_ARGUMENT,
                "%s: mapping the counter page (file descriptor %d) failed: %s", who, counter_fd,
                std::strerror(err));
  }
  p->counter_ = static_cast<std::atomic<uint64_t>*>(m);
  p->lock_fd_ = reopen(fd);
  p->watch_exporter();
  *out = std::move(p);
  return VPMM_OK;
}

void StatusPage::watch_exporter() {
  const uint64_t start = page_->start_time, ns = page_->pid_ns;
  // Another pid namespace (or an exporter that could not say who it is):
  // the pid names no process here; the locks alone tell.
  if (start == 0 || ns == 0 || ns != pid_namespace()) return;
  identified_ = true;
  // A pidfd names the process itself, never a later one with its pid: taken
  // now and then checked to be the exporter (the start time), it becomes
  // readable when the exporter exits, whatever any importer does.
  const long fd = syscall(SYS_pidfd_open, static_cast<pid_t>(pid_), 0);
  if (start_time_of(pid_) != start) {
    exited_.store(true);
    if (fd >= 0) close(static_cast<int>(fd));
    return;
  }
  pidfd_ = static_cast<int>(fd);  // -1 (kernels before 5.3): the start time is read at each look
}

bool StatusPage::exporter_gone() const {
  if (!identified_) return false;
  if (exited_.load()) return true;
  bool gone;
  if (pidfd_ >= 0) {
    struct pollfd pf;
    pf.fd = pidfd_;
    pf.events = POLLIN;
    pf.revents = 0;
    gone = poll(&pf, 1, 0) == 1 && (pf.revents & (POLLIN | POLLHUP | POLLERR));
  } else {
    gone = start_time_of(pid_) != page_->start_time;
  }
  if (gone) exited_.store(true);
  return gone;
}

uint64_t StatusPage::word() const { return page_->word.load(); }
uint64_t StatusPage::imports() const { return counter_ ? counter_->load(std::memory_order_relaxed) : 0; }

void StatusPage::publish(int32_t state) {
  int32_t active = VPMM_EXPORT_ACTIVE;
  if (!published_.compare_exchange_strong(active, state)) return;
  uint64_t w = own_->word.load();
  while (!own_->word.compare_exchange_weak(w, ((w >> 8) + 1) << 8 | static_cast<uint64_t>(state))) {
  }
}

int32_t StatusPage::state() const {
  if (exporter_) return published_.load();
  if (!page_) return VPMM_EXPORT_CLOSED;
  const int32_t s = static_cast<int32_t>(page_->word.load() & 0xff);
  if (s != VPMM_EXPORT_ACTIVE) return s;
  // The exporter process itself first: any importer may hold a lock on the
  // exporter's byte once the exporter dropped it (it has the page's memfd).
  if (exporter_gone()) return VPMM_EXPORT_EXITED;
  if (lock_fd_ < 0) return s;
  return other_lock(lock_fd_, kExporterByte, 1) < 0 ? VPMM_EXPORT_EXITED : s;
}

uint32_t StatusPage::live_importers() const {
  if (lock_fd_ < 0) return 0;
  // Each query names the first lock of another description at or after
  // `at`, and one description's adjacent locks read as one range (the kernel
  // merges them): step past each range, so any set of locks an importer
  // takes costs at most one query per slot.
  uint32_t n = 0;
  for (off_t at = kFirstSlot; at < kFirstSlot + kSlots;) {
    off_t end = 0;
    off_t found = other_lock(lock_fd_, at, kFirstSlot + kSlots - at, &end);
    if (found < 0) break;
    ++n;
    at = std::max(at + 1, end);
  }
  return n;
}

void StatusPage::attach() {
  if (counter_) counter_->fetch_add(1);
  if (lock_fd_ < 0) return;
  for (off_t at = kFirstSlot; at < kFirstSlot + kSlots; ++at) {
    // Skip taken slots in one query rather than one failed lock each.
    off_t taken = other_lock(lock_fd_, at, 1);
    if (taken < 0 && lock_byte(lock_fd_, at)) return;
  }
}

void StatusPage::close_locks() {
  for (int* fd : {&lock_fd_, &fd_, &counter_fd_, &pidfd_}) {
    if (*fd >= 0) close(*fd);
    *fd = -1;
  }
}

}  // namespace ipc
}  // namespace vpmm
