// Defects a third adversarial review of the public API found in the torch
// hooks, the backup-directory table and the exports' liveness, one test
// each, on the host backend: every test here failed before its fix. The
// preload control channel's are in tests/preload/test_preload_ctl.c. The
// tests that fork come first, before any test starts a thread of the
// library's in this process.
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "check.hpp"
#include "host_kernels.hpp"
#include "pool_util.hpp"
#include "vpmm_host_streams.h"

namespace {

using vt::Fill;
using vt::Stamp;
using vt::fill_on_stream;
using vt::run_unless_waiting;
using vt::stamp;

// Another process's pool, its export and the descriptor sent on `sock`;
// then it waits for one byte and exits without cleaning up, as a crash would.
[[noreturn]] void exporter_process(int sock) {
  vpmm_config c;
  vpmm_config_init_defaults(&c);
  c.backend = VPMM_BACKEND_HOST;
  c.page_size = 64 << 10;
  c.va_size = 64ull << 20;
  c.host_capacity = 16ull << 20;
  c.exportable = 1;
  vpmm_pool* p = nullptr;
  void* x = nullptr;
  vpmm_export* ex = nullptr;
  vpmm_alloc_attrs a = vt::sized<vpmm_alloc_attrs>();
  a.tag = "w";
  a.flags = VPMM_ALLOC_HOST_BACKUP;
  if (vpmm_pool_create(&c, &p) != VPMM_OK || vpmm_pool_malloc_ex(p, 128 << 10, nullptr, &a, &x) != VPMM_OK ||
      vpmm_pool_export(p, x, &ex) != VPMM_OK || vpmm_export_send(ex, sock) != VPMM_OK)
    _exit(2);
  char go;
  _exit(read(sock, &go, 1) == 1 ? 0 : 3);
}

}  // namespace

TEST("42.9: an exporter that exited reads EXITED even when an importer holds the exporter's lock byte") {
  int sv[2];
  CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  std::fflush(stdout);
  const pid_t pid = fork();
  if (pid == 0) {
    close(sv[0]);
    exporter_process(sv[1]);
  }
  close(sv[1]);
  size_t size = 0, n = 0;
  CHECK_OK(vpmm_ipc_recv(sv[0], nullptr, 0, &size, nullptr, 0, &n));
  std::string desc(size, '\0');
  std::vector<int> fds(n, -1);
  CHECK_OK(vpmm_ipc_recv(sv[0], &desc[0], size, &size, fds.data(), n, &n));
  vpmm_config c;
  vpmm_config_init_defaults(&c);
  c.backend = VPMM_BACKEND_HOST;
  c.page_size = 64 << 10;
  c.va_size = 64ull << 20;
  c.host_capacity = 16ull << 20;
  vpmm_pool* pool = nullptr;
  CHECK_OK(vpmm_pool_create(&c, &pool));
  vpmm_import* imp = nullptr;
  vpmm_import* other = nullptr;  // a second importer of the same export, in another pool
  vpmm_pool* pool2 = nullptr;
  CHECK_OK(vpmm_pool_create(&c, &pool2));
  CHECK_OK(vpmm_pool_import(pool, desc.data(), desc.size(), fds.data(), fds.size(), &imp));
  CHECK_OK(vpmm_pool_import(pool2, desc.data(), desc.size(), fds.data(), fds.size(), &other));
  int32_t s = -1;
  CHECK_OK(vpmm_import_state(imp, &s));
  CHECK_EQ(s, VPMM_EXPORT_ACTIVE);
  // The exporter exits; the importer kept the status page's memfd (fds[0]).
  CHECK_EQ(write(sv[0], "x", 1), 1);
  int status = 0;
  CHECK(waitpid(pid, &status, 0) == pid);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  CHECK_OK(vpmm_import_state(imp, &s));
  CHECK_EQ(s, VPMM_EXPORT_EXITED);
  // The old trick: a description of its own of the page, and the lock on
  // the exporter's byte the exporter's death released.
  char path[64];
  std::snprintf(path, sizeof path, "/proc/self/fd/%d", fds[0]);
  const int forged = open(path, O_RDWR | O_CLOEXEC);
  CHECK(forged >= 0);
  struct flock fl;
  std::memset(&fl, 0, sizeof fl);
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
  fl.l_start = 0;
  fl.l_len = 1;
  CHECK_EQ(fcntl(forged, F_OFD_SETLK, &fl), 0);
  for (vpmm_import* i : {imp, other}) {
    s = -1;
    CHECK_OK(vpmm_import_state(i, &s));
    CHECK_EQ(s, VPMM_EXPORT_EXITED);
  }
  // An importer that opens the page only now (the exporter already gone,
  // the lock already forged) is not deceived either.
  vpmm_pool* pool3 = nullptr;
  vpmm_import* late = nullptr;
  CHECK_OK(vpmm_pool_create(&c, &pool3));
  if (vpmm_pool_import(pool3, desc.data(), desc.size(), fds.data(), fds.size(), &late) == VPMM_OK) {
    s = -1;
    CHECK_OK(vpmm_import_state(late, &s));
    CHECK_EQ(s, VPMM_EXPORT_EXITED);
    CHECK_OK(vpmm_import_close(pool3, late));
  }
  close(forged);
  for (int fd : fds) close(fd);
  close(sv[0]);
  CHECK_OK(vpmm_import_close(pool, imp));
  CHECK_OK(vpmm_import_close(pool2, other));
  CHECK_OK(vpmm_pool_destroy(pool));
  CHECK_OK(vpmm_pool_destroy(pool2));
  CHECK_OK(vpmm_pool_destroy(pool3));
}

namespace {

constexpr uint64_t kPage = 64 << 10;
constexpr uint32_t kDisk = VPMM_ALLOC_HOST_BACKUP | VPMM_ALLOC_BACKUP_DISK;

vpmm_pool* host_pool() {
  vt::HostPoolSpec s;
  s.page = kPage;
  s.va_pages = 512;
  s.small_size = 1;
  s.defaults_only = true;
  return vt::make_host_pool(s);
}

void remove_tree(const std::string& path) {
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) return;
  if (S_ISDIR(st.st_mode)) {
    if (DIR* d = opendir(path.c_str())) {
      while (dirent* e = readdir(d)) {
        std::string n = e->d_name;
        if (n != "." && n != "..") remove_tree(path + "/" + n);
      }
      closedir(d);
    }
    rmdir(path.c_str());
  } else {
    unlink(path.c_str());
  }
}

int open_fds() {
  int n = 0;
  if (DIR* d = opendir("/proc/self/fd")) {
    while (dirent* e = readdir(d))
      if (e->d_name[0] != '.') ++n;
    closedir(d);
  }
  return n - 1;  // the listing's own
}

void* malloc_in(vpmm_pool* p, uint64_t bytes, const std::string& dir, vpmm_status* st) {
  vpmm_alloc_attrs a = vt::sized<vpmm_alloc_attrs>();
  a.tag = "ckpt";
  a.flags = kDisk;
  a.backup_dir = dir.c_str();
  void* out = nullptr;
  *st = vpmm_pool_malloc_ex(p, bytes, nullptr, &a, &out);
  return *st == VPMM_OK ? out : nullptr;
}

// Runs `body` in a child process whose RLIMIT_NOFILE is `limit` (the limit
// must not reach the other tests); the child's CHECKs report on stdout and
// its exit status says whether any failed.
template <typename F>
void with_fd_limit(rlim_t limit, F body) {
  std::fflush(stdout);
  const pid_t pid = fork();
  if (pid == 0) {
    struct rlimit rl;
    getrlimit(RLIMIT_NOFILE, &rl);
    rl.rlim_cur = limit;
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0) _exit(3);
    const int before = vt::case_failures();
    body();
    std::fflush(stdout);
    _exit(vt::case_failures() == before ? 0 : 1);
  }
  CHECK(pid > 0);
  int status = 0;
  CHECK(waitpid(pid, &status, 0) == pid);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

// One checkpoint round in `dir`: a disk-backed allocation filled, paused,
// resumed, checked and freed. False (and the status on stdout) on failure.
bool checkpoint_round(vpmm_pool* p, const std::string& dir, uint64_t seed) {
  vpmm_status st;
  void* x = malloc_in(p, kPage, dir, &st);
  if (!x) {
    std::printf("  malloc in %s: %s\n", dir.c_str(), vpmm_last_error());
    return false;
  }
  vt::fill(x, kPage, seed);
  uint64_t n = 0;
  st = vpmm_pool_pause_ex(p, "ckpt", &n);
  if (st != VPMM_OK) std::printf("  pause in %s: %s\n", dir.c_str(), vpmm_last_error());
  bool ok = st == VPMM_OK && vpmm_pool_resume_ex(p, "ckpt", &n) == VPMM_OK && vt::verify(x, kPage, seed);
  return vpmm_pool_free(p, x, nullptr) == VPMM_OK && ok;
}

// Under /dev/shm where there is one: 10,000 rounds of files on a disk would
// wait on the disk, and the test is about descriptors, not I/O.
std::string temp_root() {
  struct stat st;
  char shm[] = "/dev/shm/vpmm-rel3-XXXXXX", tmp[] = "/tmp/vpmm-rel3-XXXXXX";
  char* t = stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) && access("/dev/shm", W_OK) == 0 ? shm : tmp;
  return mkdtemp(t) ? std::string(t) : std::string();
}

}  // namespace

TEST("42.8: 10,000 rounds of a recreated backup directory under RLIMIT_NOFILE 64: every pause succeeds") {
  const std::string root = temp_root();
  CHECK(!root.empty());
  with_fd_limit(64, [&] {
    vpmm_pool* p = host_pool();
    CHECK(p != nullptr);
    if (!p) return;
    const std::string dir = root + "/ckpt";
    const int fds = open_fds();
    int failed = 0, most = fds;
    for (int round = 0; round < 10000 && failed < 3; ++round) {
      CHECK_EQ(mkdir(dir.c_str(), 0700), 0);
      if (!checkpoint_round(p, dir, round)) ++failed;
      remove_tree(dir);
      most = std::max(most, open_fds());
    }
    CHECK_EQ(failed, 0);
    std::printf("  open descriptors: %d before, at most %d during\n", fds, most);
    CHECK(most <= fds + 4);
    CHECK_OK(vpmm_pool_destroy(p));
    CHECK(open_fds() <= fds);
  });
  remove_tree(root);
}

TEST("42.8: recreated while a backup file in the old one lives: the old descriptor closes with that file") {
  const std::string root = temp_root();
  with_fd_limit(64, [&] {
    vpmm_pool* p = host_pool();
    if (!p) return;
    const std::string dir = root + "/ckpt";
    CHECK_EQ(mkdir(dir.c_str(), 0700), 0);
    vpmm_status st;
    void* keep = malloc_in(p, kPage, dir, &st);  // its file (kept after resume) names the first directory
    CHECK(keep != nullptr);
    if (!keep) return;
    vt::fill(keep, kPage, 7);
    uint64_t n = 0;
    CHECK_OK(vpmm_pool_pause_ex(p, "ckpt", &n));
    CHECK_OK(vpmm_pool_resume_ex(p, "ckpt", &n));
    const int fds = open_fds();
    int failed = 0, most = fds;
    for (int round = 0; round < 2000 && failed < 3; ++round) {
      remove_tree(dir);  // the kept file's name goes with it; the pool still holds the file
      CHECK_EQ(mkdir(dir.c_str(), 0700), 0);
      if (!checkpoint_round(p, dir, round)) ++failed;  // pauses `keep` too, into its own file
      most = std::max(most, open_fds());
    }
    CHECK_EQ(failed, 0);
    CHECK(most <= fds + 4);
    CHECK(vt::verify(keep, kPage, 7));
    CHECK_OK(vpmm_pool_free(p, keep, nullptr));
    CHECK(open_fds() <= fds);  // the first directory's descriptor went with its last file
    CHECK_OK(vpmm_pool_destroy(p));
  });
  remove_tree(root);
}

TEST("42.8: a new backup directory per round, the old one removed: descriptors stay bounded") {
  const std::string root = temp_root();
  with_fd_limit(64, [&] {
    vpmm_pool* p = host_pool();
    if (!p) return;
    const int fds = open_fds();
    int failed = 0, most = fds;
    for (int round = 0; round < 2000 && failed < 3; ++round) {
      const std::string dir = root + "/ckpt-" + std::to_string(round);
      CHECK_EQ(mkdir(dir.c_str(), 0700), 0);
      if (!checkpoint_round(p, dir, round)) ++failed;
      remove_tree(dir);
      most = std::max(most, open_fds());
    }
    CHECK_EQ(failed, 0);
    std::printf("  open descriptors: %d before, at most %d during\n", fds, most);
    CHECK(most <= fds + 40);
    // A removed directory closed as unused still says what happened, and
    // naming a path again opens the directory there now.
    const std::string dir = root + "/ckpt-0";
    CHECK_EQ(mkdir(dir.c_str(), 0700), 0);
    CHECK(checkpoint_round(p, dir, 1));
    CHECK_OK(vpmm_pool_destroy(p));
  });
  remove_tree(root);
}

namespace {


bool host_default_pool(vpmm_pool** dp) {
  *dp = nullptr;
  CHECK_OK(vpmm_default_pool(0, dp));
  // On a GPU machine the default pool is the device's: host streams are not its.
  return *dp && std::strcmp(vpmm_pool_backend_name(*dp), "host") == 0;
}

// PyTorch's pattern: a tensor allocated on A, its own kernel still queued on
// A (held: a GPU that is behind), used on the streams `recorded`
// (Tensor.record_stream, whose work may be held too), freed by PyTorch on A;
// then a tensor of the same size on a third stream C, filled there at once.
// Wherever the two overlap, C's fill must run after A's kernel (and after
// every recorded stream's work): C's bytes must be intact at the end.
void record_then_third_stream(const std::vector<vpmm_stream>& recorded, const std::vector<vpmm_stream>& held) {
  vpmm_pool* dp = nullptr;
  if (!host_default_pool(&dp)) return;
  vpmm_stream a = nullptr, c = nullptr;
  CHECK_OK(vpmm_host_stream_create(&a));
  CHECK_OK(vpmm_host_stream_create(&c));
  const ptrdiff_t n = 4 << 20;
  void* p = vpmm_torch_malloc(n, 0, a);
  CHECK(p != nullptr);
  if (!p) return;
  Stamp late{p, static_cast<uint64_t>(n), 0x5a};
  CHECK_OK(vpmm_host_stream_hold(a));
  CHECK_OK(vpmm_host_stream_launch(a, stamp, &late));  // the tensor's own kernel, pending
  for (vpmm_stream s : held) CHECK_OK(vpmm_host_stream_hold(s));
  for (vpmm_stream s : recorded) vpmm_torch_record_stream(p, s);
  vpmm_torch_free(p, n, 0, a);
  void* q = vpmm_torch_malloc(n, 0, c);
  CHECK(q != nullptr);
  if (!q) return;
  Fill mine{q, static_cast<uint64_t>(n), 42};
  CHECK_OK(vpmm_host_stream_launch(c, fill_on_stream, &mine));
  const char* pc = static_cast<const char*>(p);
  const char* qc = static_cast<const char*>(q);
  const bool overlap = qc < pc + n && pc < qc + n;
  // Reused: C's fill waits for held A (synchronize says so instead of
  // running it). Not reused: nothing to wait for. No race decides this.
  if (overlap) CHECK_EQ(vpmm_host_stream_synchronize(c), VPMM_ERR_WRONG_STATE);
  CHECK_EQ(late.ran.load(), 0);
  CHECK_OK(vpmm_host_stream_release(a));
  for (vpmm_stream s : held) CHECK_OK(vpmm_host_stream_release(s));
  CHECK_OK(vpmm_host_stream_synchronize(a));
  for (vpmm_stream s : recorded) CHECK_OK(vpmm_host_stream_synchronize(s));
  CHECK_OK(vpmm_host_stream_synchronize(c));
  CHECK_EQ(late.ran.load(), 1);
  CHECK(vt::verify(q, n, 42));  // A's late kernel did not land in C's tensor
  vpmm_torch_free(q, n, 0, c);
  CHECK_OK(vpmm_pool_check(dp));
  CHECK_OK(vpmm_pool_stream_retire(dp, a));
  CHECK_OK(vpmm_pool_stream_retire(dp, c));
  for (vpmm_stream s : recorded) CHECK_OK(vpmm_pool_stream_retire(dp, s));
  CHECK_OK(vpmm_host_stream_destroy(a));
  CHECK_OK(vpmm_host_stream_destroy(c));
}

}  // namespace

TEST("42.2: freed after record_stream on B, a tensor is not a third stream's before its own stream's work") {
  vpmm_stream b = nullptr;
  CHECK_OK(vpmm_host_stream_create(&b));
  record_then_third_stream({b}, {});
  CHECK_OK(vpmm_host_stream_destroy(b));
}

TEST("42.2: recorded on two streams, the first held: the free orders after it without blocking the CPU") {
  vpmm_stream b = nullptr, d = nullptr;
  CHECK_OK(vpmm_host_stream_create(&b));
  CHECK_OK(vpmm_host_stream_create(&d));
  // d's held work keeps d's point pending: a CPU wait could not complete
  // (synchronize refuses a held stream), a GPU-side one can.
  record_then_third_stream({d, b}, {d});
  CHECK_OK(vpmm_host_stream_destroy(d));
  CHECK_OK(vpmm_host_stream_destroy(b));
}

TEST_MAIN()
