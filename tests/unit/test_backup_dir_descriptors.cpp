// Backup directories that a checkpoint loop removes and makes again (or
// makes new) every round, on the host backend: the pool's descriptors of
// directories stay bounded, each closing with its last file, so every pause
// succeeds under a low RLIMIT_NOFILE (docs/misuse.md, row S8). Each test
// runs in a child process of its own (the limit must not reach the others),
// forked before any thread of the library's starts in this process.
#include <dirent.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdint>
#include <string>

#include "check.hpp"
#include "pool_util.hpp"

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
  char shm[] = "/dev/shm/vpmm-dirfds-XXXXXX", tmp[] = "/tmp/vpmm-dirfds-XXXXXX";
  char* t = stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) && access("/dev/shm", W_OK) == 0 ? shm : tmp;
  return mkdtemp(t) ? std::string(t) : std::string();
}

}  // namespace

TEST("10,000 rounds of a recreated backup directory under RLIMIT_NOFILE 64: every pause succeeds") {
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

TEST("recreated while a backup file in the old one lives: the old descriptor closes with that file") {
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

TEST("a new backup directory per round, the old one removed: descriptors stay bounded") {
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

TEST_MAIN()
