// Backup stores on the host backend: where a paused allocation's bytes live
// (pinned, mmap, disk), retained backups, and the unchanged re-pause that
// copies nothing.
//  - every store keeps the bytes across pauses, through the staging slots
//    over several chunks;
//  - mmap: host RSS (/proc/self/status VmRSS) returns to its level before
//    the pause once the allocation resumed; the pinned store keeps its
//    buffers cached (resident);
//  - disk: one file per allocation, overwritten in place (the footprint is
//    constant over cycles), removed when the allocation is freed or the pool
//    destroyed; a missing directory, a full disk, write and read errors keep
//    the failure rules (paused with a whole backup, or active and intact);
//  - retained backups outlive the resume (vpmm_pool_backup_lookup finds the
//    bytes of the last pause at the same address), and a pause declared
//    unchanged releases them without a copy (counted in the backend's copy
//    counters);
//  - the flags, directories and scopes are checked at the C API.
// The core tests use a Pool over a FaultBackend around a shared host
// backend (its counters outlive the pool); the API tests use vpmm.h only.
#include <dirent.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "backend/backend.hpp"
#include "support/fault_backend.hpp"
#include "support/fault_host_services.hpp"
#include "check.hpp"
#include "common/status.hpp"
#include "core/pause/stores/store_table.hpp"
#include "core/pool.hpp"
#include "pool_util.hpp"

namespace {

using vpmm::Backend;
using vpmm::FaultBackend;
using vpmm::FaultPlan;
using vpmm::Op;
using vpmm::Pool;
using vpmm::PoolOptions;

constexpr uint64_t kPage = 64 << 10;
constexpr uint32_t kBackup = VPMM_ALLOC_HOST_BACKUP;
constexpr uint32_t kMmap = VPMM_ALLOC_HOST_BACKUP | VPMM_ALLOC_BACKUP_MMAP;
constexpr uint32_t kDisk = VPMM_ALLOC_HOST_BACKUP | VPMM_ALLOC_BACKUP_DISK;
constexpr uint32_t kRetain = VPMM_ALLOC_RETAIN_BACKUP;

// A directory of its own under /tmp, emptied and removed at the end.
struct TempDir {
  std::string path;
  TempDir() {
    char t[] = "/tmp/vpmm-stores-XXXXXX";
    if (mkdtemp(t)) path = t;
  }
  ~TempDir() {
    for (const auto& f : files()) unlink((path + "/" + f.first).c_str());
    rmdir(path.c_str());
  }
  // name -> size of every file in it
  std::map<std::string, uint64_t> files() const {
    std::map<std::string, uint64_t> out;
    DIR* d = opendir(path.c_str());
    if (!d) return out;
    while (dirent* e = readdir(d)) {
      std::string n = e->d_name;
      if (n == "." || n == "..") continue;
      struct stat st;
      if (stat((path + "/" + n).c_str(), &st) == 0) out[n] = static_cast<uint64_t>(st.st_size);
    }
    closedir(d);
    return out;
  }
  uint64_t bytes() const {
    uint64_t n = 0;
    for (const auto& f : files()) n += f.second;
    return n;
  }
};

uint64_t calls(const Backend& b, Op op) { return b.counters().calls[static_cast<int>(op)].load(); }
uint64_t calls(const vpmm::HostServices& h, Op op) { return h.counters().calls[static_cast<int>(op)].load(); }

// A pool over a FaultBackend around a shared host backend, and the host
// services (files, pageable memory, host copies) behind a FaultHostServices
// that numbers and fails calls in the same FaultControl.
struct World {
  std::shared_ptr<Backend> host;
  std::shared_ptr<vpmm::HostServices> services;
  FaultBackend* fault = nullptr;  // owned by the pool
  std::unique_ptr<Pool> pool;

  explicit World(uint64_t batch_bytes = 0, uint64_t capacity = 256 * kPage) {
    vpmm::BackendParams bp;
    bp.host_capacity = capacity;
    vpmm_status st = VPMM_OK;
    host = vt::make_shared_test_backend(bp, &st);
    CHECK(host != nullptr);
    if (!host) return;
    services = vpmm::make_shared_host_services();
    auto ctl = std::make_shared<vpmm::FaultControl>();
    std::unique_ptr<FaultBackend> fb(new FaultBackend(host, ctl));
    fault = fb.get();
    PoolOptions o;
    o.page_size = kPage;
    o.va_size = 512 * kPage;
    o.small_size = kPage / 2;
    o.pause_batch_bytes = batch_bytes;
    CHECK_OK(Pool::create(std::move(fb), std::unique_ptr<vpmm::HostServices>(new vpmm::FaultHostServices(services, ctl)),
                          o, &pool));
  }
  // flags, with the disk store's directory put where the C API puts it.
  uint32_t with_dir(uint32_t flags, const std::string& dir) {
    uint32_t id = 0;
    CHECK_OK(pool->backup_dir_id("test", dir.c_str(), &id));
    return flags | (id << vpmm::kBackupDirShift);
  }
  void destroy() {
    pool.reset();
    if (host && !vpmm::live_counts_zero(host->counters())) {
      CHECK(vpmm::live_counts_zero(host->counters()));
      std::printf("  leaked: %s\n", vpmm::live_counts(host->counters()).c_str());
    }
    if (services && !vpmm::live_counts_zero(services->counters())) {
      CHECK(vpmm::live_counts_zero(services->counters()));
      std::printf("  leaked: %s\n", vpmm::live_counts(services->counters()).c_str());
    }
  }
  vpmm_stats stats() {
    vpmm_stats s;
    pool->stats(&s);
    return s;
  }
};

struct Alloc {
  void* p = nullptr;
  uint64_t size = 0;
  uint64_t seed = 0;
};

Alloc alloc(Pool& pool, uint64_t size, const char* tag, uint32_t flags, uint64_t seed) {
  Alloc a{nullptr, size, seed};
  vpmm_status st = pool.malloc("vpmm_pool_malloc_ex", size, nullptr, tag, flags, nullptr, &a.p);
  if (st != VPMM_OK) std::printf("  malloc(%llu) failed: %s\n", (unsigned long long)size, vpmm::last_error());
  CHECK_OK(st);
  if (a.p) vt::fill(a.p, size, seed);
  return a;
}

bool intact(const Alloc& a) { return a.p && vt::verify(a.p, a.size, a.seed); }

void refill(Alloc& a, uint64_t seed) {
  a.seed = seed;
  vt::fill(a.p, a.size, seed);
}

uint64_t rss_bytes() {
  FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return 0;
  char line[256];
  uint64_t kb = 0;
  while (std::fgets(line, sizeof line, f))
    if (std::strncmp(line, "VmRSS:", 6) == 0) kb = std::strtoull(line + 6, nullptr, 10);
  std::fclose(f);
  return kb << 10;
}

// Pools and attributes through the C API.
vpmm_pool* api_pool() {
  vt::HostPoolSpec s;
  s.page = kPage;
  s.va_pages = 512;
  s.capacity = 256 * kPage;
  return vt::make_host_pool(s);
}

vpmm_alloc_attrs attrs(const char* tag, uint32_t flags, const char* dir = nullptr) {
  vpmm_alloc_attrs a;
  std::memset(&a, 0, sizeof a);
  a.struct_size = sizeof a;
  a.tag = tag;
  a.flags = flags;
  a.backup_dir = dir;
  return a;
}

const char* store_label(uint32_t flags) {
  return vpmm::backup_store_name(flags);
}

// ---------------------------------------------------------------------------
// Every store keeps the bytes
// ---------------------------------------------------------------------------

TEST("HostServices::host_copy copies every byte, split over its threads or not, from any thread") {
  std::unique_ptr<vpmm::HostServices> b = vpmm::make_host_services();
  for (uint64_t n : {uint64_t{1}, uint64_t{4096 + 3}, uint64_t{9} << 20, (uint64_t{33} << 20) + 12345}) {
    std::vector<unsigned char> src(n), dst(n, 0);
    for (uint64_t i = 0; i < n; ++i) src[i] = static_cast<unsigned char>(i * 31 + (i >> 12));
    CHECK_OK(b->host_copy(dst.data(), src.data(), n));
    CHECK(dst == src);
  }
  // Two threads at once queue behind each other: both complete.
  std::vector<unsigned char> a(16 << 20, 1), a2(16 << 20, 0), c(16 << 20, 2), c2(16 << 20, 0);
  std::thread t([&] { CHECK_OK(b->host_copy(a2.data(), a.data(), a.size())); });
  CHECK_OK(b->host_copy(c2.data(), c.data(), c.size()));
  t.join();
  CHECK(a2 == a && c2 == c);
  CHECK_EQ(b->host_copy(nullptr, a.data(), 8), VPMM_ERR_INVALID_ARGUMENT);
  CHECK_OK(b->host_copy(nullptr, nullptr, 0));
}

TEST("each store (pinned, mmap, disk) keeps the bytes over 3 cycles, staged over several slots") {
  for (uint32_t store : {kBackup, kMmap, kDisk}) {
    TempDir dir;
    // Slots of 2 pages: the 5-page allocation moves in 3 chunks, and the 4
    // slots are reused within one pause.
    World w(2 * kPage);
    if (!w.pool) return;
    const uint32_t flags = store == kDisk ? w.with_dir(store, dir.path) : store;
    std::vector<Alloc> as;
    as.push_back(alloc(*w.pool, 5 * kPage, "w", flags, 1));
    as.push_back(alloc(*w.pool, kPage, "w", flags, 2));
    as.push_back(alloc(*w.pool, 3 * kPage + 4096, "w", flags, 3));
    as.push_back(alloc(*w.pool, 1000, "w", flags, 4));  // a small-object page
    Alloc other = alloc(*w.pool, 2 * kPage, nullptr, 0, 5);
    const uint64_t backed = (5 + 1 + 4 + 1) * kPage;
    for (int cycle = 0; cycle < 3; ++cycle) {
      const uint64_t copies = calls(*w.host, Op::copy);
      uint64_t n = 0;
      CHECK_OK(w.pool->pause("w", &n));
      CHECK_EQ(n, uint64_t{4});
      vpmm_stats st = w.stats();
      CHECK_EQ(st.paused_bytes, backed);
      CHECK_EQ(st.backup_bytes, backed);
      CHECK_EQ(st.backup_mmap_bytes, store == kMmap ? backed : 0);
      CHECK_EQ(st.backup_disk_bytes, store == kDisk ? backed : 0);
      // Direct copies: one per allocation; staged: one per chunk (3 + 1 + 2 + 1).
      CHECK_EQ(calls(*w.host, Op::copy) - copies, uint64_t(store == kBackup ? 4 : 7));
      CHECK_OK(w.pool->resume("w", &n));
      CHECK_EQ(n, uint64_t{4});
      for (const Alloc& a : as) CHECK(intact(a));
      CHECK(intact(other));
      CHECK_EQ(w.pool->check(), std::string());
      st = w.stats();
      CHECK_EQ(st.backup_bytes, uint64_t{0});
      CHECK_EQ(st.backup_mmap_bytes, uint64_t{0});  // given back at resume
      CHECK_EQ(st.backup_disk_bytes, store == kDisk ? backed : 0);  // kept until freed
      for (Alloc& a : as) refill(a, a.seed + 10);  // the next pause must copy the new bytes
    }
    // Staged stores pinned slots only for the calls: nothing stays pinned.
    if (store != kBackup) CHECK_EQ(w.stats().backup_pinned_bytes, uint64_t{0});
    if (store == kMmap) CHECK(calls(*w.services, Op::host_copy) >= 2 * 7 * 3);
    if (store == kDisk) {
      CHECK_EQ(calls(*w.services, Op::file_create), uint64_t{4});  // at the first pause only
      CHECK_EQ(dir.files().size(), size_t{4});
    }
    for (const Alloc& a : as) CHECK_OK(w.pool->free(a.p, nullptr));
    CHECK_OK(w.pool->free(other.p, nullptr));
    // The small-object page stays cached for its size class, but its file
    // (the freed block's bytes) goes with its last block.
    CHECK_EQ(dir.files().size(), size_t{0});
    CHECK_EQ(w.stats().backup_disk_bytes, uint64_t{0});
    CHECK_OK(w.pool->trim(0));
    CHECK_EQ(dir.files().size(), size_t{0});
    w.destroy();
    if (vt::case_failures()) std::printf("  (store %s)\n", store_label(store));
  }
}

TEST("a resume that runs out of memory leaves staged backups paused and whole; resuming again restores them") {
  for (uint32_t store : {kMmap, kDisk}) {
    TempDir dir;
    World w(2 * kPage, 16 * kPage);  // room for the first allocation only
    if (!w.pool) return;
    const uint32_t flags = store == kDisk ? w.with_dir(store, dir.path) : store;
    Alloc a = alloc(*w.pool, 6 * kPage, "w", flags, 1);
    Alloc b = alloc(*w.pool, 6 * kPage, "w", flags, 2);
    CHECK_OK(w.pool->pause("w"));
    Alloc filler = alloc(*w.pool, 8 * kPage, nullptr, 0, 3);
    CHECK_EQ(w.pool->resume("w"), VPMM_ERR_OUT_OF_MEMORY);
    vpmm_tag_stats t;
    CHECK_OK(w.pool->tag_stats("w", &t));
    CHECK_EQ(t.n_paused, uint64_t{1});
    CHECK(intact(a));
    CHECK_OK(w.pool->free(filler.p, nullptr));
    CHECK_OK(w.pool->resume("w"));
    CHECK(intact(a) && intact(b));
    CHECK_OK(w.pool->free(a.p, nullptr));
    CHECK_OK(w.pool->free(b.p, nullptr));
    w.destroy();
  }
}

// ---------------------------------------------------------------------------
// mmap: host memory goes back to the OS
// ---------------------------------------------------------------------------

// Pauses and resumes 128 MiB in `flags`' store; returns (RSS before the
// pause, RSS after the resume).
std::pair<uint64_t, uint64_t> rss_around_pause(uint32_t flags) {
  vpmm_config c;
  vpmm_config_init_defaults(&c);
  c.backend = VPMM_BACKEND_HOST;
  c.host_capacity = 512ull << 20;
  vpmm_pool* p = nullptr;
  CHECK_OK(vpmm_pool_create(&c, &p));
  if (!p) return {0, 0};
  const uint64_t n = 128ull << 20;
  void* a = vt::malloc_tagged(p, n, "w", flags);
  CHECK(a != nullptr);
  if (!a) return {0, 0};
  vt::fill(a, n, 7);
  const uint64_t before = rss_bytes();
  CHECK_OK(vpmm_pool_pause(p, "w"));
  CHECK_EQ(vt::stats(p).backup_mmap_bytes, flags == kMmap ? n : 0);
  CHECK_OK(vpmm_pool_resume(p, "w"));
  const uint64_t after = rss_bytes();
  CHECK(vt::verify(a, n, 7));
  CHECK_EQ(vt::stats(p).backup_mmap_bytes, uint64_t{0});
  CHECK_OK(vpmm_pool_free(p, a, nullptr));
  vpmm_pool_destroy(p);
  return {before, after};
}

TEST("mmap store: host RSS after the resume is within 10% of before the pause; pinned keeps its cache") {
  auto mm = rss_around_pause(kMmap);
  const uint64_t diff = mm.second > mm.first ? mm.second - mm.first : mm.first - mm.second;
  std::printf("  mmap:   RSS %llu MiB before the pause, %llu MiB after the resume\n",
              (unsigned long long)(mm.first >> 20), (unsigned long long)(mm.second >> 20));
  CHECK(mm.first > (128ull << 20));  // the allocation itself is resident
  CHECK(diff <= mm.first / 10);
  auto pin = rss_around_pause(kBackup);
  std::printf("  pinned: RSS %llu MiB before the pause, %llu MiB after the resume (cached buffer)\n",
              (unsigned long long)(pin.first >> 20), (unsigned long long)(pin.second >> 20));
  CHECK(pin.second >= pin.first + (100ull << 20));
}

// ---------------------------------------------------------------------------
// disk: files
// ---------------------------------------------------------------------------

TEST("disk store: a file per allocation, overwritten in place: constant footprint over 3 cycles; freed with the allocation") {
  TempDir dir;
  World w;
  if (!w.pool) return;
  const uint32_t flags = w.with_dir(kDisk, dir.path);
  Alloc a = alloc(*w.pool, 4 * kPage, "w", flags, 1);
  Alloc b = alloc(*w.pool, 2 * kPage, "w", flags, 2);
  Alloc c = alloc(*w.pool, 3 * kPage, "w", flags, 3);
  CHECK(dir.files().empty());  // made at the first pause
  std::map<std::string, uint64_t> first;
  for (int cycle = 0; cycle < 3; ++cycle) {
    CHECK_OK(w.pool->pause("w"));
    auto files = dir.files();
    CHECK_EQ(files.size(), size_t{3});
    CHECK_EQ(dir.bytes(), 9 * kPage);
    if (cycle == 0) first = files;
    CHECK(files == first);  // the same files, the same sizes
    CHECK_OK(w.pool->resume("w"));
    CHECK(dir.files() == first);  // kept for the next pause
    CHECK(intact(a) && intact(b) && intact(c));
    refill(a, 10 + cycle);
  }
  CHECK_EQ(w.stats().backup_disk_bytes, 9 * kPage);
  CHECK_OK(w.pool->free(b.p, nullptr));  // active: its file goes
  CHECK_EQ(dir.files().size(), size_t{2});
  CHECK_OK(w.pool->pause("w"));
  CHECK_OK(w.pool->free(c.p, nullptr));  // paused: its file goes
  CHECK_EQ(dir.files().size(), size_t{1});
  CHECK_EQ(w.stats().backup_disk_bytes, 4 * kPage);
  w.destroy();  // a's file goes with the pool
  CHECK_EQ(dir.files().size(), size_t{0});
}

TEST("disk store: a missing directory, or a path through a file, fails the malloc; one removed since, the pause") {
  TempDir dir;
  const std::string file = dir.path + "/plain";
  FILE* f = std::fopen(file.c_str(), "w");
  CHECK(f != nullptr);
  if (f) std::fclose(f);
  {
    World w;
    if (!w.pool) return;
    for (const std::string& bad : {dir.path + "/missing", file + "/sub", file}) {
      uint32_t id = 0;
      CHECK_EQ(w.pool->backup_dir_id("test", bad.c_str(), &id), VPMM_ERR_INVALID_ARGUMENT);
      CHECK(std::strstr(vpmm::last_error(), bad.c_str()) != nullptr);
    }
    w.destroy();
  }
  for (const std::string& bad : {dir.path + "/gone"}) {
    World w;
    if (!w.pool) return;
    CHECK_EQ(mkdir(bad.c_str(), 0700), 0);
    Alloc ok = alloc(*w.pool, 2 * kPage, "w", kMmap, 1);
    Alloc a = alloc(*w.pool, 2 * kPage, "w", w.with_dir(kDisk, bad), 2);
    CHECK_EQ(rmdir(bad.c_str()), 0);  // removed after the malloc opened it
    Alloc plain = alloc(*w.pool, kPage, "w", 0, 3);
    vpmm_status st = w.pool->pause("w");
    CHECK_EQ(st, VPMM_ERR_BACKEND);
    CHECK(std::strstr(vpmm::last_error(), bad.c_str()) != nullptr);
    vpmm_tag_stats t;
    CHECK_OK(w.pool->tag_stats("w", &t));
    CHECK_EQ(t.n_paused, uint64_t{0});
    CHECK(intact(ok) && intact(a) && intact(plain));
    vpmm_stats s = w.stats();
    CHECK_EQ(s.backup_mmap_bytes, uint64_t{0});  // the other store's backup was given back
    CHECK_EQ(s.backup_disk_bytes, uint64_t{0});
    CHECK_EQ(w.pool->check(), std::string());
    for (const Alloc& x : {ok, a, plain}) CHECK_OK(w.pool->free(x.p, nullptr));
    w.destroy();
  }
  CHECK_EQ(dir.files().size(), size_t{1});  // only the plain file
}

TEST("disk store: no room for a file (OUT_OF_MEMORY) pauses nothing and removes the files made") {
  TempDir dir;
  World w;
  if (!w.pool) return;
  const uint32_t flags = w.with_dir(kDisk, dir.path);
  Alloc a = alloc(*w.pool, 2 * kPage, "w", flags, 1);
  Alloc b = alloc(*w.pool, 2 * kPage, "w", flags, 2);
  Alloc c = alloc(*w.pool, 2 * kPage, "w", flags, 3);
  w.fault->arm(FaultPlan{2, static_cast<int>(Op::file_create), VPMM_ERR_OUT_OF_MEMORY});  // the disk fills up
  CHECK_EQ(w.pool->pause("w"), VPMM_ERR_OUT_OF_MEMORY);
  w.fault->disarm();
  CHECK_EQ(w.stats().paused_bytes, uint64_t{0});
  CHECK(dir.files().empty());
  CHECK(intact(a) && intact(b) && intact(c));
  CHECK_OK(w.pool->pause("w"));  // room again
  CHECK_EQ(dir.files().size(), size_t{3});
  CHECK_OK(w.pool->resume("w"));
  CHECK(intact(a) && intact(b) && intact(c));
  w.destroy();
  CHECK(dir.files().empty());
}

TEST("disk store: a file the OS refuses to size (RLIMIT_FSIZE: EFBIG, as a full disk) pauses nothing") {
  TempDir dir;
  std::fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    // The child: once the pool and the allocation exist, files may not grow
    // past 1 MiB, and the signal that would kill it for trying is ignored,
    // so the OS answers EFBIG to the 2 MiB backup file.
    vpmm_pool* p = api_pool();
    vpmm_alloc_attrs a = attrs("w", kDisk, dir.path.c_str());
    void* x = nullptr;
    if (!p || vpmm_pool_malloc_ex(p, 32 * kPage, nullptr, &a, &x) != VPMM_OK) _exit(3);
    vt::fill(x, 32 * kPage, 5);
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit lim = {1 << 20, 1 << 20};
    if (setrlimit(RLIMIT_FSIZE, &lim) != 0) _exit(2);
    vpmm_status st = vpmm_pool_pause(p, "w");
    const bool ok = st == VPMM_ERR_OUT_OF_MEMORY && vt::stats(p).paused_bytes == 0 &&
                    vt::verify(x, 32 * kPage, 5) && std::strstr(vpmm_last_error(), "cannot reserve") != nullptr;
    if (!ok) std::printf("  child: pause returned %s: %s\n", vpmm_status_string(st), vpmm_last_error());
    std::fflush(stdout);
    vpmm_pool_destroy(p);
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status 0x%x", status);
  CHECK(dir.files().empty());  // the refused file was removed
}

TEST("disk store: a write error keeps that allocation active and intact; a read error keeps it paused with its file") {
  TempDir dir;
  World w(2 * kPage);
  if (!w.pool) return;
  const uint32_t flags = w.with_dir(kDisk, dir.path);
  Alloc a = alloc(*w.pool, 4 * kPage, "w", flags, 1);
  Alloc b = alloc(*w.pool, 4 * kPage, "w", flags, 2);
  // a's second chunk cannot be written.
  w.fault->arm(FaultPlan{2, static_cast<int>(Op::file_write), VPMM_ERR_BACKEND});
  CHECK_EQ(w.pool->pause("w"), VPMM_ERR_BACKEND);
  w.fault->disarm();
  vpmm_tag_stats t;
  CHECK_OK(w.pool->tag_stats("w", &t));
  CHECK_EQ(t.n_paused, uint64_t{1});  // b
  CHECK(intact(a));                   // a is active and whole
  CHECK_EQ(dir.files().size(), size_t{1});  // a's new file was removed with its failed backup
  CHECK_OK(w.pool->pause("w"));        // again: a pauses too
  // The read of a's first chunk fails: a stays paused with its file, b
  // (after it) too; calling again restores both.
  const uint64_t reads = calls(*w.services, Op::file_read);
  w.fault->arm(FaultPlan{1, static_cast<int>(Op::file_read), VPMM_ERR_BACKEND});
  CHECK_EQ(w.pool->resume("w"), VPMM_ERR_BACKEND);
  w.fault->disarm();
  CHECK_EQ(calls(*w.services, Op::file_read), reads);  // the failed read never reached the file
  CHECK_OK(w.pool->tag_stats("w", &t));
  CHECK_EQ(t.n_paused, uint64_t{2});
  CHECK_EQ(dir.files().size(), size_t{2});
  CHECK_OK(w.pool->resume("w"));
  CHECK(intact(a) && intact(b));
  w.destroy();
}

// ---------------------------------------------------------------------------
// Retained backups and the unchanged re-pause
// ---------------------------------------------------------------------------

TEST("retained backup: after resume it holds the bytes of the last pause, at the address the next pause reuses") {
  for (uint32_t store : {kBackup, kMmap}) {
    World w;
    if (!w.pool) return;
    Alloc a = alloc(*w.pool, 3 * kPage, "w", store | kRetain, 1);
    void* host = nullptr;
    uint64_t bytes = 0;
    CHECK_EQ(w.pool->backup_lookup(a.p, &host, &bytes), VPMM_ERR_WRONG_STATE);  // never paused
    CHECK_OK(w.pool->pause("w"));
    void* paused_host = nullptr;
    CHECK_OK(w.pool->backup_lookup(a.p, &paused_host, &bytes));
    CHECK_OK(w.pool->resume("w"));
    CHECK(intact(a));
    CHECK_OK(w.pool->backup_lookup(static_cast<char*>(a.p) + 8, &host, &bytes));
    CHECK_EQ(host, static_cast<void*>(static_cast<char*>(paused_host) + 8));
    CHECK_EQ(bytes, 3 * kPage - 8);
    CHECK(vt::verify(paused_host, a.size, 1));  // the bytes of the pause
    refill(a, 2);                               // the device moves on; the backup does not
    CHECK(vt::verify(paused_host, a.size, 1));
    vpmm_stats st = w.stats();
    CHECK_EQ(st.backup_retained_bytes, 3 * kPage);
    CHECK_EQ(st.backup_mmap_bytes, store == kMmap ? 3 * kPage : 0);
    vpmm_tag_stats t;
    CHECK_OK(w.pool->tag_stats("w", &t));
    CHECK_EQ(t.retained_bytes, 3 * kPage);
    // The next pause writes the same buffer with the new bytes.
    CHECK_OK(w.pool->pause("w"));
    CHECK_OK(w.pool->backup_lookup(a.p, &host, nullptr));
    CHECK_EQ(host, paused_host);
    CHECK(vt::verify(host, a.size, 2));
    CHECK_EQ(w.stats().backup_retained_bytes, uint64_t{0});  // paused: a plain backup now
    CHECK_OK(w.pool->resume("w"));
    CHECK(intact(a));
    CHECK_OK(w.pool->free(a.p, nullptr));  // the retained backup goes with it
    st = w.stats();
    CHECK_EQ(st.backup_retained_bytes, uint64_t{0});
    CHECK_EQ(st.backup_mmap_bytes, uint64_t{0});
    w.destroy();
  }
}

TEST("unchanged re-pause: retained backups are released without a copy; the next resume restores their bytes") {
  for (uint32_t store : {kBackup, kMmap, kDisk}) {
    TempDir dir;
    World w(2 * kPage);
    if (!w.pool) return;
    const uint32_t flags = (store == kDisk ? w.with_dir(store, dir.path) : store) | kRetain;
    Alloc a = alloc(*w.pool, 5 * kPage, "w", flags, 1);
    Alloc b = alloc(*w.pool, 2 * kPage, "w", flags, 2);
    CHECK_OK(w.pool->pause("w"));
    CHECK_OK(w.pool->resume("w"));
    const uint64_t copies = calls(*w.host, Op::copy), host_copies = calls(*w.services, Op::host_copy);
    const uint64_t writes = calls(*w.services, Op::file_write);
    uint64_t n = 0;
    CHECK_OK(w.pool->pause("w", &n, VPMM_PAUSE_BACKUP_UNCHANGED));
    CHECK_EQ(n, uint64_t{2});
    CHECK_EQ(calls(*w.host, Op::copy), copies);  // no copy of any kind
    CHECK_EQ(calls(*w.services, Op::host_copy), host_copies);
    CHECK_EQ(calls(*w.services, Op::file_write), writes);
    CHECK_EQ(w.stats().paused_bytes, 7 * kPage);
    CHECK_EQ(w.stats().backup_skipped_bytes, 7 * kPage);
    CHECK_OK(w.pool->resume("w"));
    CHECK(intact(a) && intact(b));
    // The declaration is the caller's: bytes written since the last resume
    // are replaced by the retained ones.
    Alloc written = a;
    refill(written, 9);
    CHECK_OK(w.pool->pause("w", nullptr, VPMM_PAUSE_BACKUP_UNCHANGED));
    CHECK_OK(w.pool->resume("w"));
    CHECK(intact(a));  // seed 1 again, not 9
    // Without the declaration the pause copies again, and keeps what was written.
    refill(a, 11);
    const uint64_t before = calls(*w.host, Op::copy);
    CHECK_OK(w.pool->pause("w"));
    CHECK(calls(*w.host, Op::copy) > before);
    CHECK_OK(w.pool->resume("w"));
    CHECK(intact(a) && intact(b));
    CHECK_OK(w.pool->free(a.p, nullptr));
    CHECK_OK(w.pool->free(b.p, nullptr));
    w.destroy();
    if (vt::case_failures()) std::printf("  (store %s)\n", store_label(store));
  }
}

TEST("unchanged re-pause copies what holds no retained backup: new allocations, no retain flag, small-object pages") {
  World w;
  if (!w.pool) return;
  Alloc kept = alloc(*w.pool, 2 * kPage, "w", kBackup | kRetain, 1);
  Alloc plain = alloc(*w.pool, 2 * kPage, "w", kBackup, 2);       // not retained
  Alloc small = alloc(*w.pool, 1000, "w", kBackup | kRetain, 3);   // a slab page
  CHECK_OK(w.pool->pause("w"));
  CHECK_OK(w.pool->resume("w"));
  Alloc fresh = alloc(*w.pool, 3 * kPage, "w", kBackup | kRetain, 4);  // never paused
  refill(plain, 5);
  refill(small, 6);
  const uint64_t copies = calls(*w.host, Op::copy);
  CHECK_OK(w.pool->pause("w", nullptr, VPMM_PAUSE_BACKUP_UNCHANGED));
  CHECK_EQ(calls(*w.host, Op::copy) - copies, uint64_t{3});  // all but `kept`
  CHECK_EQ(w.stats().backup_skipped_bytes, 2 * kPage);
  CHECK_OK(w.pool->resume("w"));
  for (const Alloc& a : {kept, plain, small, fresh}) CHECK(intact(a));
  w.destroy();
}

TEST("a pause that fails before a retained backup's copy completed leaves it not current: the next unchanged pause copies") {
  World w;
  if (!w.pool) return;
  Alloc a = alloc(*w.pool, 2 * kPage, "w", kBackup | kRetain, 1);
  CHECK_OK(w.pool->pause("w"));
  CHECK_OK(w.pool->resume("w"));
  refill(a, 2);
  w.fault->arm(FaultPlan{1, static_cast<int>(Op::copy), VPMM_ERR_BACKEND});
  CHECK_EQ(w.pool->pause("w"), VPMM_ERR_BACKEND);
  w.fault->disarm();
  CHECK(intact(a));
  CHECK_EQ(w.pool->backup_lookup(a.p, nullptr, nullptr), VPMM_ERR_WRONG_STATE);  // not current
  const uint64_t copies = calls(*w.host, Op::copy);
  CHECK_OK(w.pool->pause("w", nullptr, VPMM_PAUSE_BACKUP_UNCHANGED));
  CHECK_EQ(calls(*w.host, Op::copy) - copies, uint64_t{1});
  CHECK_OK(w.pool->resume("w"));
  CHECK(intact(a));
  w.destroy();
}

TEST("prepare_backups pins only what the pinned store will need") {
  World w;
  if (!w.pool) return;
  Alloc a = alloc(*w.pool, 2 * kPage, "w", kBackup, 1);
  Alloc m = alloc(*w.pool, 3 * kPage, "w", kMmap, 2);
  Alloc r = alloc(*w.pool, 4 * kPage, "w", kBackup | kRetain, 3);
  uint64_t cached = 0;
  CHECK_OK(w.pool->prepare_backups("w", &cached));
  CHECK_EQ(cached, 6 * kPage);  // a and r, not m
  CHECK_OK(w.pool->pause("w"));
  CHECK_OK(w.pool->resume("w"));
  CHECK_OK(w.pool->prepare_backups("w", &cached));
  CHECK_EQ(cached, 2 * kPage);  // r keeps its retained buffer: nothing to pin for it
  CHECK(intact(a) && intact(m) && intact(r));
  w.destroy();
}

// ---------------------------------------------------------------------------
// The C API: flags, directories, scopes, lookups
// ---------------------------------------------------------------------------

TEST("misuse: store and retain flags need VPMM_ALLOC_HOST_BACKUP; one store at most; disk needs a directory") {
  unsetenv("VPMM_BACKUP_DIR");
  vpmm_pool* p = api_pool();
  CHECK(p != nullptr);
  if (!p) return;
  void* x = nullptr;
  for (uint32_t f : {uint32_t{VPMM_ALLOC_BACKUP_MMAP}, uint32_t{VPMM_ALLOC_BACKUP_DISK},
                     uint32_t{VPMM_ALLOC_RETAIN_BACKUP}}) {
    vpmm_alloc_attrs a = attrs("w", f);
    CHECK_EQ(vpmm_pool_malloc_ex(p, kPage, nullptr, &a, &x), VPMM_ERR_INVALID_ARGUMENT);
    CHECK(std::strstr(vpmm_last_error(), "without VPMM_ALLOC_HOST_BACKUP") != nullptr);
    CHECK_EQ(vpmm_tag_scope_push("w", f), VPMM_ERR_INVALID_ARGUMENT);
  }
  vpmm_alloc_attrs both = attrs("w", kMmap | kDisk);
  CHECK_EQ(vpmm_pool_malloc_ex(p, kPage, nullptr, &both, &x), VPMM_ERR_INVALID_ARGUMENT);
  CHECK(std::strstr(vpmm_last_error(), "two backup stores") != nullptr);
  vpmm_alloc_attrs nodir = attrs("w", kDisk);
  CHECK_EQ(vpmm_pool_malloc_ex(p, kPage, nullptr, &nodir, &x), VPMM_ERR_INVALID_ARGUMENT);
  CHECK(std::strstr(vpmm_last_error(), "VPMM_BACKUP_DIR") != nullptr);
  vpmm_alloc_attrs empty = attrs("w", kDisk, "");
  CHECK_EQ(vpmm_pool_malloc_ex(p, kPage, nullptr, &empty, &x), VPMM_ERR_INVALID_ARGUMENT);
  std::string long_dir(5000, 'd');
  vpmm_alloc_attrs longd = attrs("w", kDisk, long_dir.c_str());
  CHECK_EQ(vpmm_pool_malloc_ex(p, kPage, nullptr, &longd, &x), VPMM_ERR_INVALID_ARGUMENT);
  CHECK_EQ(vpmm_pool_set_backup_dir(p, long_dir.c_str()), VPMM_ERR_INVALID_ARGUMENT);
  CHECK_EQ(x, static_cast<void*>(nullptr));
  // An untagged allocation is not pausable: its store flags are moot, not an error.
  vpmm_alloc_attrs untagged = attrs(nullptr, kDisk);
  CHECK_OK(vpmm_pool_malloc_ex(p, kPage, nullptr, &untagged, &x));
  CHECK_OK(vpmm_pool_free(p, x, nullptr));
  CHECK_EQ(vpmm_pool_pause_flags(p, nullptr, 0x2, nullptr), VPMM_ERR_INVALID_ARGUMENT);
  CHECK(std::strstr(vpmm_last_error(), "vpmm_pool_pause_flags") != nullptr);
  CHECK_EQ(vpmm_pool_pause_flags(nullptr, nullptr, 0, nullptr), VPMM_ERR_INVALID_ARGUMENT);
  CHECK_EQ(vpmm_pool_set_backup_dir(nullptr, "/tmp"), VPMM_ERR_INVALID_ARGUMENT);
  CHECK_EQ(vt::stats(p).n_live, uint64_t{0});
  vpmm_pool_destroy(p);
}

TEST("directories: the allocation's, else the pool's (vpmm_pool_set_backup_dir), else VPMM_BACKUP_DIR") {
  TempDir d1, d2, d3;
  // VPMM_BACKUP_DIR is read with the options, when the pool is made.
  setenv("VPMM_BACKUP_DIR", d3.path.c_str(), 1);
  vpmm_pool* p = api_pool();
  unsetenv("VPMM_BACKUP_DIR");
  CHECK(p != nullptr);
  if (!p) return;
  void* from_env = vt::malloc_tagged(p, kPage, "w", kDisk);
  CHECK_OK(vpmm_pool_set_backup_dir(p, d2.path.c_str()));
  void* from_pool = vt::malloc_tagged(p, 2 * kPage, "w", kDisk);
  vpmm_alloc_attrs a = attrs("w", kDisk, d1.path.c_str());
  void* own = nullptr;
  CHECK_OK(vpmm_pool_malloc_ex(p, 3 * kPage, nullptr, &a, &own));
  CHECK_OK(vpmm_pool_set_backup_dir(p, nullptr));  // back to VPMM_BACKUP_DIR for new allocations
  void* env_again = vt::malloc_tagged(p, 4 * kPage, "w", kDisk);
  CHECK(from_env && from_pool && own && env_again);
  CHECK_OK(vpmm_pool_pause(p, "w"));
  CHECK_EQ(d1.bytes(), 3 * kPage);
  CHECK_EQ(d2.bytes(), 2 * kPage);
  CHECK_EQ(d3.bytes(), 5 * kPage);
  // Lookups: a file has no host address.
  void* host = nullptr;
  CHECK_EQ(vpmm_pool_backup_lookup(p, own, &host, nullptr), VPMM_ERR_UNSUPPORTED);
  CHECK(std::strstr(vpmm_last_error(), d1.path.c_str()) != nullptr);
  CHECK_OK(vpmm_pool_resume(p, "w"));
  vpmm_pool_destroy(p);
  CHECK_EQ(d1.bytes() + d2.bytes() + d3.bytes(), uint64_t{0});
}

TEST("vpmm_tag_scope_push_ex: a scope carries the store, the directory and retention") {
  TempDir dir;
  vpmm_pool* p = api_pool();
  CHECK(p != nullptr);
  if (!p) return;
  vpmm_alloc_attrs a = attrs("s", kDisk | kRetain, dir.path.c_str());
  CHECK_OK(vpmm_tag_scope_push_ex(&a));
  void* x = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, 2 * kPage, nullptr, &x));
  vpmm_alloc_attrs m = attrs("s", kMmap);
  CHECK_OK(vpmm_tag_scope_push_ex(&m));  // nested: mmap, no retention
  void* y = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, kPage, nullptr, &y));
  CHECK_OK(vpmm_tag_scope_pop());
  CHECK_OK(vpmm_tag_scope_pop());
  vt::fill(x, 2 * kPage, 1);
  vt::fill(y, kPage, 2);
  CHECK_OK(vpmm_pool_pause(p, "s"));
  CHECK_EQ(dir.bytes(), 2 * kPage);
  CHECK_EQ(vt::stats(p).backup_mmap_bytes, kPage);
  CHECK_OK(vpmm_pool_resume(p, "s"));
  CHECK(vt::verify(x, 2 * kPage, 1) && vt::verify(y, kPage, 2));
  CHECK_EQ(vt::stats(p).backup_retained_bytes, 2 * kPage);  // x's file, retained
  uint64_t n = 0;
  CHECK_OK(vpmm_pool_pause_flags(p, "s", VPMM_PAUSE_BACKUP_UNCHANGED, &n));
  CHECK_EQ(n, uint64_t{2});
  CHECK_EQ(vt::stats(p).backup_skipped_bytes, 2 * kPage);
  CHECK_OK(vpmm_pool_resume(p, "s"));
  CHECK(vt::verify(x, 2 * kPage, 1) && vt::verify(y, kPage, 2));
  // Misuse of the scope itself.
  vpmm_reservation* res = nullptr;
  CHECK_OK(vpmm_pool_reserve(p, kPage, VPMM_RESERVE_TRY, &res));
  vpmm_alloc_attrs with_res = attrs("s", 0);
  with_res.reservation = res;
  CHECK_EQ(vpmm_tag_scope_push_ex(&with_res), VPMM_ERR_INVALID_ARGUMENT);
  CHECK(std::strstr(vpmm_last_error(), "reservation") != nullptr);
  vpmm_alloc_attrs empty = attrs("s", kDisk, "");
  CHECK_EQ(vpmm_tag_scope_push_ex(&empty), VPMM_ERR_INVALID_ARGUMENT);
  vpmm_alloc_attrs bad = attrs("s", kMmap | kDisk);
  CHECK_EQ(vpmm_tag_scope_push_ex(&bad), VPMM_ERR_INVALID_ARGUMENT);
  vpmm_alloc_attrs small = attrs("s", 0);
  small.struct_size = 4;
  CHECK_EQ(vpmm_tag_scope_push_ex(&small), VPMM_ERR_INVALID_ARGUMENT);
  CHECK_EQ(vpmm_tag_scope_pop(), VPMM_ERR_WRONG_STATE);  // none of those pushed anything
  // A disk scope without a directory is accepted; the malloc then needs one.
  unsetenv("VPMM_BACKUP_DIR");
  vpmm_alloc_attrs nodir = attrs("s", kDisk);
  CHECK_OK(vpmm_tag_scope_push_ex(&nodir));
  void* z = nullptr;
  CHECK_EQ(vpmm_pool_malloc(p, kPage, nullptr, &z), VPMM_ERR_INVALID_ARGUMENT);
  CHECK_OK(vpmm_tag_scope_pop());
  CHECK_OK(vpmm_tag_scope_push_ex(nullptr));  // an untagged scope
  CHECK_OK(vpmm_tag_scope_pop());
  CHECK_OK(vpmm_reservation_release(p, res));
  vpmm_pool_destroy(p);
  CHECK(dir.files().empty());
}

TEST("vpmm_pool_backup_lookup of an active allocation: WRONG_STATE unless it keeps a retained backup") {
  vpmm_pool* p = api_pool();
  CHECK(p != nullptr);
  if (!p) return;
  void* a = vt::malloc_tagged(p, 2 * kPage, "w", kMmap);
  void* r = vt::malloc_tagged(p, 2 * kPage, "w", kMmap | kRetain);
  CHECK(a && r);
  vt::fill(r, 2 * kPage, 3);
  CHECK_OK(vpmm_pool_pause(p, "w"));
  CHECK_OK(vpmm_pool_resume(p, "w"));
  CHECK_EQ(vpmm_pool_backup_lookup(p, a, nullptr, nullptr), VPMM_ERR_WRONG_STATE);
  void* host = nullptr;
  uint64_t n = 0;
  CHECK_OK(vpmm_pool_backup_lookup(p, r, &host, &n));
  CHECK_EQ(n, 2 * kPage);
  CHECK(host && vt::verify(host, 2 * kPage, 3));
  CHECK_EQ(vpmm_pool_backup_lookup(p, static_cast<char*>(r) + 2 * kPage, nullptr, nullptr),
           VPMM_ERR_UNKNOWN_POINTER);
  vpmm_pool_destroy(p);
}

TEST("vpmm_pool_resume_flags(RETAIN_BACKUP) keeps the backups of that resume only; the next plain resume gives them back") {
  vpmm_pool* p = api_pool();
  CHECK(p != nullptr);
  if (!p) return;
  void* pinned = vt::malloc_tagged(p, 2 * kPage, "w", kBackup);
  void* mm = vt::malloc_tagged(p, 2 * kPage, "w", kMmap);
  CHECK(pinned && mm);
  vt::fill(pinned, 2 * kPage, 5);
  vt::fill(mm, 2 * kPage, 6);
  CHECK_OK(vpmm_pool_pause(p, "w"));
  uint64_t n = 0;
  CHECK_OK(vpmm_pool_resume_flags(p, "w", VPMM_RESUME_RETAIN_BACKUP, &n));
  CHECK_EQ(n, uint64_t(2));
  CHECK(vt::verify(pinned, 2 * kPage, 5) && vt::verify(mm, 2 * kPage, 6));
  void* h1 = nullptr;
  void* h2 = nullptr;
  CHECK_OK(vpmm_pool_backup_lookup(p, pinned, &h1, nullptr));
  CHECK_OK(vpmm_pool_backup_lookup(p, mm, &h2, nullptr));
  CHECK(h1 && vt::verify(h1, 2 * kPage, 5) && h2 && vt::verify(h2, 2 * kPage, 6));
  CHECK(vt::stats(p).backup_retained_bytes >= 4 * kPage);
  // The next pause writes into the kept buffers (same host addresses) ...
  vt::fill(pinned, 2 * kPage, 7);
  CHECK_OK(vpmm_pool_pause(p, "w"));
  void* again = nullptr;
  CHECK_OK(vpmm_pool_backup_lookup(p, pinned, &again, nullptr));
  CHECK(again == h1 && vt::verify(again, 2 * kPage, 7));
  // ... and a resume without the flag gives them back.
  CHECK_OK(vpmm_pool_resume(p, "w"));
  CHECK(vt::verify(pinned, 2 * kPage, 7) && vt::verify(mm, 2 * kPage, 6));
  CHECK_EQ(vpmm_pool_backup_lookup(p, pinned, nullptr, nullptr), VPMM_ERR_WRONG_STATE);
  CHECK_EQ(vpmm_pool_backup_lookup(p, mm, nullptr, nullptr), VPMM_ERR_WRONG_STATE);
  CHECK_EQ(vt::stats(p).backup_retained_bytes, uint64_t(0));
  CHECK_EQ(vpmm_pool_resume_flags(p, "w", 0x2, nullptr), VPMM_ERR_INVALID_ARGUMENT);
  CHECK(std::strstr(vpmm_last_error(), "vpmm_pool_resume_flags") != nullptr);
  CHECK_EQ(vpmm_pool_resume_flags(nullptr, "w", 0, nullptr), VPMM_ERR_INVALID_ARGUMENT);
  vpmm_pool_destroy(p);
}

}  // namespace

TEST_MAIN()
