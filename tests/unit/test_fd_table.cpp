// The descriptor table made ahead (ipc/fd_table.hpp, VPMM_FD_TABLE_AHEAD,
// docs/ipc.md "The descriptor table"): the process's first pool grows the
// table to the option's entries, once; an export or import makes the room
// its descriptors need in one step; neither leaves a descriptor open. The
// table's size is the kernel's FDSize (/proc/self/status). A second thread
// runs throughout, as in any GPU process: the kernel waits at each growth
// only when threads share the table, and the cases must hold there.
// Cases run in order: the first pool of the process is made in the first.
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <mutex>
#include <string>
#include <thread>

#include "check.hpp"
#include "ipc/fd_table.hpp"
#include "pool_util.hpp"
#include "vpmm.h"

namespace {

// The entries the kernel's table holds now.
long fd_table_size() {
  FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return -1;
  char line[256];
  long n = -1;
  while (std::fgets(line, sizeof line, f))
    if (std::strncmp(line, "FDSize:", 7) == 0) n = std::strtol(line + 7, nullptr, 10);
  std::fclose(f);
  return n;
}

int open_descriptors() {
  DIR* d = opendir("/proc/self/fd");
  if (!d) return -1;
  int n = 0;
  while (readdir(d)) ++n;
  closedir(d);
  return n;
}

// Expected entries ahead: the variable's (the suite runs this program with
// it unset, and again with 0 and with 300).
long expected_ahead() {
  const char* v = std::getenv("VPMM_FD_TABLE_AHEAD");
  return v ? std::strtol(v, nullptr, 10) : 4096;
}

// The soft RLIMIT_NOFILE raised to `want` where the hard limit allows; the
// soft limit now.
uint64_t raise_descriptor_limit(uint64_t want) {
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) != 0) return 0;
  if (lim.rlim_cur < want && lim.rlim_max > lim.rlim_cur) {
    lim.rlim_cur = lim.rlim_max < want ? lim.rlim_max : want;
    setrlimit(RLIMIT_NOFILE, &lim);
    getrlimit(RLIMIT_NOFILE, &lim);
  }
  return lim.rlim_cur;
}

vpmm_pool* host_pool() {
  vpmm_config c;
  vpmm_config_init(&c);
  c.backend = VPMM_BACKEND_HOST;
  c.page_size = 64 << 10;
  c.max_handle_size = 64 << 10;  // a handle a page: an export of N pages holds N descriptors
  c.exportable = 1;
  vpmm_pool* p = nullptr;
  if (vpmm_pool_create(&c, &p) != VPMM_OK) std::printf("  vpmm_pool_create: %s\n", vpmm_last_error());
  return p;
}

struct SecondThread {
  std::mutex mu;
  std::condition_variable cv;
  bool stop = false;
  std::thread t{[this] {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [this] { return stop; });
  }};
  ~SecondThread() {
    {
      std::lock_guard<std::mutex> lock(mu);
      stop = true;
    }
    cv.notify_all();
    t.join();
  }
};
SecondThread* g_second = new SecondThread;  // from before the first case to exit

TEST("the process's first pool grows the table to VPMM_FD_TABLE_AHEAD, leaving no descriptor open") {
  const long before = fd_table_size();
  CHECK(before > 0);
  CHECK_MSG(before < 4096, "FDSize %ld before any pool: the case cannot tell growth from none", before);
  const int open_before = open_descriptors();
  vpmm_pool* p = host_pool();
  CHECK(p != nullptr);
  const long after = fd_table_size();
  rlimit lim{};
  getrlimit(RLIMIT_NOFILE, &lim);
  long want = expected_ahead();  // within the soft RLIMIT_NOFILE
  if (lim.rlim_cur != RLIM_INFINITY && want > static_cast<long>(lim.rlim_cur)) want = static_cast<long>(lim.rlim_cur);
  if (want > before)
    CHECK_MSG(after >= want, "FDSize %ld -> %ld, VPMM_FD_TABLE_AHEAD %ld", before, after, want);
  else
    CHECK_MSG(after == before, "FDSize %ld -> %ld with nothing to make ahead", before, after);
  // The pool's own descriptors (the host backend's memfd) are all it adds.
  vpmm_pool_destroy(p);
  CHECK_MSG(open_descriptors() == open_before, "%d descriptors open before, %d after the pool's life",
            open_before, open_descriptors());
}

TEST("a later pool does not grow it again") {
  const long before = fd_table_size();
  vpmm_pool* p = host_pool();
  CHECK(p != nullptr);
  CHECK(fd_table_size() == before);
  vpmm_pool_destroy(p);
}

TEST("make_descriptor_room: room for N above the lowest free number at once, no descriptor left") {
  const uint64_t limit = raise_descriptor_limit(1 << 15);
  const int open_before = open_descriptors();
  const long before = fd_table_size();
  size_t more = static_cast<size_t>(before) * 3;  // past two doublings
  if (more + 64 > limit) more = limit - 64;       // what RLIMIT_NOFILE allows
  CHECK_MSG(more > static_cast<size_t>(before), "RLIMIT_NOFILE %llu leaves no room to grow past %ld",
            static_cast<unsigned long long>(limit), before);
  vpmm::ipc::make_descriptor_room(more);
  const long after = fd_table_size();
  CHECK_MSG(after >= static_cast<long>(more), "FDSize %ld -> %ld for %zu more", before, after, more);
  CHECK(open_descriptors() == open_before);
  vpmm::ipc::make_descriptor_room(0);  // nothing asked: nothing done
  CHECK(fd_table_size() == after);
}

TEST("an export of thousands of handles holds two descriptors a handle and closes them all") {
  const uint64_t limit = raise_descriptor_limit(8192);
  const uint64_t pages = limit >= 8192 ? 3000 : (limit - 64) / 2;
  std::printf("  %llu handles (RLIMIT_NOFILE %llu)\n", static_cast<unsigned long long>(pages),
              static_cast<unsigned long long>(limit));
  const int open_before = open_descriptors();
  vpmm_pool* p = host_pool();
  CHECK(p != nullptr);
  if (!p) return;
  void* ptr = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, pages * (64 << 10), nullptr, &ptr));
  vpmm_export* ex = nullptr;
  CHECK_OK(vpmm_pool_export(p, ptr, &ex));
  // Each handle's kept descriptor and the export's own (plus its two pages).
  CHECK_MSG(open_descriptors() >= open_before + 2 * static_cast<int>(pages), "%d open, %d before",
            open_descriptors(), open_before);
  CHECK(fd_table_size() >= open_before + 2 * static_cast<long>(pages));
  if (ex) CHECK_OK(vpmm_export_close(p, ex));
  CHECK_OK(vpmm_pool_free(p, ptr, nullptr));
  vpmm_pool_destroy(p);
  CHECK_MSG(open_descriptors() == open_before, "%d descriptors open before, %d after", open_before,
            open_descriptors());
}

TEST("a malformed VPMM_FD_TABLE_AHEAD fails vpmm_pool_create with a message naming it") {
  const char* was = std::getenv("VPMM_FD_TABLE_AHEAD");
  const std::string keep = was ? was : "";
  for (const char* bad : {"12x", "-1", "", " 5", "1048577"}) {
    setenv("VPMM_FD_TABLE_AHEAD", bad, 1);
    vpmm_config c;
    vpmm_config_init(&c);
    c.backend = VPMM_BACKEND_HOST;
    vpmm_pool* p = nullptr;
    CHECK_MSG(vpmm_pool_create(&c, &p) == VPMM_ERR_INVALID_ARGUMENT, "\"%s\" accepted", bad);
    CHECK_MSG(std::strstr(vpmm_last_error(), "VPMM_FD_TABLE_AHEAD") != nullptr, "\"%s\": %s", bad,
              vpmm_last_error());
    if (p) vpmm_pool_destroy(p);
  }
  setenv("VPMM_FD_TABLE_AHEAD", "1048576", 1);  // the largest accepted
  vpmm_config c;
  vpmm_config_init(&c);
  CHECK(c.config_error == 0);
  if (was)
    setenv("VPMM_FD_TABLE_AHEAD", keep.c_str(), 1);
  else
    unsetenv("VPMM_FD_TABLE_AHEAD");
}

}  // namespace

int main(int argc, char** argv) { return vt::run_all(argc, argv); }
