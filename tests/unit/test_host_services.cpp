// The host services (backend/host_services/host_services.hpp): what the pool asks of the
// host rather than of a device driver, and their fault adaptor.
//  - pageable memory: handed out and freed by its own call and size; a
//    pointer it did not hand out, a wrong size or a second free is refused;
//  - backup files: created at their size, written and read at offsets,
//    closed, removed; the live counters follow;
//  - the counted face refuses null arguments before any work;
//  - FaultHostServices fails the planned call with its status, counts in the
//    control it shares with a FaultBackend, and forwards everything else.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "backend/host_services/host_services.hpp"
#include "backend_counters.hpp"
#include "check.hpp"
#include "support/fault_host_services.hpp"

namespace {

using vpmm::FaultControl;
using vpmm::FaultPlan;
using vpmm::DirHandle;
using vpmm::FileHandle;
using vpmm::FileRef;
using vpmm::HostServices;
using vpmm::Op;

uint64_t calls(const HostServices& h, Op op) { return h.counters().calls[static_cast<int>(op)].load(); }

struct TempDir {
  std::string path;
  TempDir() {
    char t[] = "/tmp/vpmm-host-XXXXXX";
    if (mkdtemp(t)) path = t;
  }
  ~TempDir() {
    std::string cmd = "rm -rf '" + path + "'";
    if (!path.empty()) (void)std::system(cmd.c_str());
  }
};

TEST("pageable memory: freed by its own call and size; a foreign pointer, a wrong size, a second free refused") {
  std::unique_ptr<HostServices> h = vpmm::make_host_services();
  void* p = nullptr;
  CHECK_OK(h->host_alloc_pageable(10000, &p));
  CHECK(p != nullptr);
  if (!p) return;
  std::memset(p, 1, 10000);
  CHECK_EQ(h->counters().live_pageable.load(), int64_t(1));
  void* q = nullptr;
  CHECK_EQ(h->host_alloc_pageable(0, &q), VPMM_ERR_INVALID_ARGUMENT);
  CHECK_EQ(h->host_alloc_pageable(10000, nullptr), VPMM_ERR_INVALID_ARGUMENT);
  CHECK_EQ(h->host_free_pageable(p, 9999), VPMM_ERR_INVALID_ARGUMENT);
  int local = 0;
  CHECK_EQ(h->host_free_pageable(&local, sizeof local), VPMM_ERR_INVALID_ARGUMENT);
  CHECK_OK(h->host_free_pageable(p, 10000));
  CHECK_EQ(h->host_free_pageable(p, 10000), VPMM_ERR_INVALID_ARGUMENT);  // twice
  CHECK(std::strstr(vpmm_last_error(), "host_alloc_pageable") != nullptr);
  CHECK_EQ(calls(*h, Op::pageable_alloc), uint64_t(3));
  vt::check_counters_zero(*h);
}

TEST("backup directories and files: created at their size, written and read at offsets, removed; counters follow") {
  TempDir dir;
  std::unique_ptr<HostServices> h = vpmm::make_host_services();
  DirHandle d = -1;
  CHECK_OK(h->dir_open(dir.path, &d));
  CHECK_EQ(h->counters().live_dir_handles.load(), int64_t(1));
  bool removed = true;
  CHECK_OK(h->dir_check(d, &removed));
  CHECK(!removed);
  DirHandle none = -1;
  CHECK_EQ(h->dir_open(dir.path + "/missing", &none), VPMM_ERR_INVALID_ARGUMENT);
  CHECK(std::strstr(vpmm_last_error(), "missing") != nullptr);
  const uint64_t size = 3 << 20;
  FileRef ref;
  FileHandle f = -1;
  CHECK_OK(h->file_create(d, size, &ref, &f));
  CHECK(f >= 0);
  CHECK(ref.dir == d && !ref.name.empty());
  const std::string path = dir.path + "/" + ref.name;
  struct stat st;
  CHECK(stat(path.c_str(), &st) == 0 && static_cast<uint64_t>(st.st_size) == size);
  CHECK_EQ(h->counters().live_files.load(), int64_t(1));
  CHECK_EQ(h->counters().live_file_handles.load(), int64_t(1));
  // 4 KiB-aligned buffers, sizes and offsets: what direct I/O needs. The
  // descriptor is the file for its whole life (never reopened by name).
  void* buf = nullptr;
  CHECK(posix_memalign(&buf, 4096, 1 << 20) == 0);
  std::memset(buf, 0x3c, 1 << 20);
  CHECK_OK(h->file_write(f, buf, 1 << 20, 2 << 20));
  std::memset(buf, 0, 1 << 20);
  CHECK_OK(h->file_read(f, buf, 1 << 20, 2 << 20));
  CHECK(static_cast<unsigned char*>(buf)[(1 << 20) - 1] == 0x3c);
  CHECK_EQ(h->file_write(f, nullptr, 8, 0), VPMM_ERR_INVALID_ARGUMENT);
  FileRef ref0;
  FileHandle f0 = -1;
  CHECK_EQ(h->file_create(d, 0, &ref0, &f0), VPMM_ERR_INVALID_ARGUMENT);
  CHECK_OK(h->file_remove(ref, f));
  CHECK(stat(path.c_str(), &st) != 0);
  CHECK_OK(h->file_close(f));
  CHECK_OK(h->dir_close(d));
  std::free(buf);
  vt::check_counters_zero(*h);
}

TEST("FaultHostServices fails the planned call, numbers in a shared control, forwards the rest") {
  TempDir dir;
  std::shared_ptr<HostServices> inner = vpmm::make_shared_host_services();
  auto ctl = std::make_shared<FaultControl>();
  vpmm::FaultHostServices h(inner, ctl);
  ctl->arm(FaultPlan{2, static_cast<int>(Op::file_create), VPMM_ERR_OUT_OF_MEMORY});
  DirHandle d = -1;
  CHECK_OK(h.dir_open(dir.path, &d));  // call #1
  FileRef p1, p2;
  FileHandle f1 = -1, f2 = -1;
  CHECK_OK(h.file_create(d, 4096, &p1, &f1));
  CHECK_EQ(h.file_create(d, 4096, &p2, &f2), VPMM_ERR_OUT_OF_MEMORY);
  CHECK(std::strstr(vpmm_last_error(), "fault injection: file_create call #2") != nullptr);
  CHECK_EQ(calls(*inner, Op::file_create), uint64_t(1));  // the failed call never reached the file system
  CHECK_EQ(ctl->calls(), uint64_t(3));  // dir_open and both file_creates
  CHECK_EQ(ctl->injected(), uint64_t(1));
  // host_copy is never a fault point: forwarded, not numbered.
  char a[16] = "fifteen bytes..", b[16] = {};
  CHECK_OK(h.host_copy(b, a, sizeof a));
  CHECK(std::memcmp(a, b, sizeof a) == 0);
  CHECK_EQ(ctl->calls(), uint64_t(3));
  CHECK_OK(h.file_remove(p1, f1));
  CHECK_OK(h.file_close(f1));
  CHECK_OK(h.dir_close(d));
  vt::check_counters_zero(*inner);
  vt::check_counters_zero(h);
}

}  // namespace

int main(int argc, char** argv) { return vt::run_all(argc, argv); }
