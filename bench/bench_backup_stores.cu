// Backup stores on one GPU, in one run, against the ceilings measured in the
// same run:
//  1. ceilings: pinned cudaMemcpyAsync D2H and H2D (4 GiB); the driver's
//     own pageable H2D from warm mmap memory (what the mmap store would get
//     without its staging); the backup directory's sequential write and read
//     (4 GiB through a pinned buffer, direct I/O where the file system
//     allows it, 32 MiB requests, like the disk store);
//  2. pinned store, retained weights (WEIGHTS_GIB, 64 allocations): the
//     first pause (pins), the resume, a steady pause (copies into the
//     retained buffers) and the re-pause declared unchanged (no copy: the
//     unmaps only); target: re-pause >= 20x faster than a steady pause, and
//     resume >= 90% of the pinned H2D ceiling;
//  3. mmap store (WEIGHTS_GIB): pause and resume bandwidth, and VmRSS before
//     the pause, while paused and after the resume (target: within 10%);
//  4. disk store (DISK_GIB, in BENCH_DIR): pause and resume bandwidth against
//     the directory's write and read ceilings, the files' footprint, and the
//     unchanged re-pause of retained files.
// Prints "BACKUP key value" lines (scripts/gpu-backup-stores.sh collects
// them) and "TARGET name PASS|FAIL (...)" lines. Medians of 3 cycles after
// the first.
// Environment: BENCH_DIR (default /tmp), WEIGHTS_GIB (default 16), DISK_GIB
// (default 8).
#include <cuda_runtime.h>
#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "vpmm.h"

namespace {

constexpr uint64_t MiB = 1ull << 20, GiB = 1ull << 30;
constexpr int kAllocs = 64;

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
double gbps(uint64_t bytes, double ms) { return bytes / ms / 1e6; }

#define CK(x)                                                                   \
  do {                                                                          \
    auto e_ = (x);                                                              \
    if (e_ != 0) {                                                              \
      std::printf("FATAL %s:%d: %s -> %d (%s)\n", __FILE__, __LINE__, #x, (int)e_, \
                  vpmm_last_error());                                           \
      std::exit(1);                                                             \
    }                                                                           \
  } while (0)

uint64_t env_gib(const char* name, uint64_t def) {
  const char* v = std::getenv(name);
  return (v && *v ? std::strtoull(v, nullptr, 10) : def) * GiB;
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

void target(const char* name, bool pass, const std::string& detail) {
  std::printf("TARGET %s %s (%s)\n", name, pass ? "PASS" : "FAIL", detail.c_str());
}
std::string fmt(const char* f, double a, double b = 0) {
  char buf[160];
  std::snprintf(buf, sizeof buf, f, a, b);
  return buf;
}

// --- 1. ceilings -------------------------------------------------------------

struct Ceilings {
  double d2h = 0, h2d = 0, pageable_h2d = 0, disk_write = 0, disk_read = 0;
  bool direct = false;
};

Ceilings ceilings(const std::string& dir) {
  Ceilings c;
  const uint64_t n = 4 * GiB;
  void *dev = nullptr, *host = nullptr;
  CK(cudaMalloc(&dev, n));
  CK(cudaMallocHost(&host, n));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  std::vector<double> a, b;
  for (int i = 0; i < 4; ++i) {
    double t0 = now_ms();
    CK(cudaMemcpyAsync(host, dev, n, cudaMemcpyDeviceToHost, s));
    CK(cudaStreamSynchronize(s));
    double t1 = now_ms();
    CK(cudaMemcpyAsync(dev, host, n, cudaMemcpyHostToDevice, s));
    CK(cudaStreamSynchronize(s));
    double t2 = now_ms();
    if (i) {
      a.push_back(t1 - t0);
      b.push_back(t2 - t1);
    }
  }
  c.d2h = gbps(n, median(a));
  c.h2d = gbps(n, median(b));
  // The driver's staging of pageable memory (warm pages).
  void* pg = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (pg != MAP_FAILED) {
    madvise(pg, n, MADV_HUGEPAGE);
    std::memset(pg, 1, n);
    double t0 = now_ms();
    CK(cudaMemcpyAsync(dev, pg, n, cudaMemcpyHostToDevice, s));
    CK(cudaStreamSynchronize(s));
    c.pageable_h2d = gbps(n, now_ms() - t0);
    munmap(pg, n);
  }
  // The directory: 32 MiB requests from the pinned buffer, like the disk store.
  std::string path = dir + "/vpmm-bench-ceiling-XXXXXX";
  std::vector<char> t(path.begin(), path.end());
  t.push_back('\0');
  int fd = mkostemp(t.data(), O_CLOEXEC);
  if (fd >= 0) {
    posix_fallocate(fd, 0, n);
    close(fd);
    fd = open(t.data(), O_RDWR | O_CLOEXEC | O_DIRECT);
    c.direct = fd >= 0;
    if (fd < 0) fd = open(t.data(), O_RDWR | O_CLOEXEC);
    const uint64_t chunk = 32 * MiB;
    bool ok = true;
    double t0 = now_ms();
    for (uint64_t off = 0; off < n && ok; off += chunk)
      ok = pwrite(fd, static_cast<char*>(host) + off, chunk, off) == static_cast<ssize_t>(chunk);
    fdatasync(fd);
    double t1 = now_ms();
    posix_fadvise(fd, 0, n, POSIX_FADV_DONTNEED);
    double t2 = now_ms();
    for (uint64_t off = 0; off < n && ok; off += chunk)
      ok = pread(fd, static_cast<char*>(host) + off, chunk, off) == static_cast<ssize_t>(chunk);
    double t3 = now_ms();
    close(fd);
    unlink(t.data());
    if (ok) {
      c.disk_write = gbps(n, t1 - t0);
      c.disk_read = gbps(n, t3 - t2);
    }
  }
  cudaFreeHost(host);
  cudaFree(dev);
  cudaStreamDestroy(s);
  return c;
}

// --- pools ---------------------------------------------------------------------

vpmm_pool* cuda_pool() {
  vpmm_config c;
  vpmm_config_init(&c);
  c.backend = VPMM_BACKEND_CUDA;
  vpmm_pool* p = nullptr;
  CK(vpmm_pool_create(&c, &p));
  return p;
}

std::vector<void*> weights(vpmm_pool* p, uint64_t total, uint32_t flags, const char* dir) {
  std::vector<void*> v;
  vpmm_alloc_attrs a;
  std::memset(&a, 0, sizeof a);
  a.struct_size = sizeof a;
  a.tag = "weights";
  a.flags = flags;
  a.backup_dir = dir;
  for (int i = 0; i < kAllocs; ++i) {
    void* x = nullptr;
    CK(vpmm_pool_malloc_ex(p, total / kAllocs, nullptr, &a, &x));
    CK(cudaMemsetAsync(x, i & 0xff, total / kAllocs, nullptr));
    v.push_back(x);
  }
  CK(cudaDeviceSynchronize());
  return v;
}

bool intact(const std::vector<void*>& v, uint64_t size) {
  std::vector<unsigned char> probe(4096);
  bool ok = true;
  for (size_t i = 0; i < v.size(); ++i) {
    CK(cudaMemcpy(probe.data(), static_cast<char*>(v[i]) + size - 4096, 4096, cudaMemcpyDeviceToHost));
    ok &= probe[0] == (i & 0xff) && probe[4095] == (i & 0xff);
  }
  return ok;
}

double timed(const std::function<void()>& f) {
  double t0 = now_ms();
  f();
  return now_ms() - t0;
}

uint64_t dir_bytes(const std::string& dir) {
  uint64_t n = 0;
  DIR* d = opendir(dir.c_str());
  if (!d) return 0;
  while (dirent* e = readdir(d)) {
    struct stat st;
    if (std::strncmp(e->d_name, "vpmm-backup-", 12) == 0 && stat((dir + "/" + e->d_name).c_str(), &st) == 0)
      n += static_cast<uint64_t>(st.st_blocks) * 512;  // allocated, not apparent, size
  }
  closedir(d);
  return n;
}

}  // namespace

int main() {
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    std::printf("SKIP: no CUDA device\n");
    return 77;
  }
  CK(cudaFree(nullptr));
  const char* d = std::getenv("BENCH_DIR");
  const std::string dir = d && *d ? d : "/tmp";
  const uint64_t wbytes = env_gib("WEIGHTS_GIB", 16), dbytes = env_gib("DISK_GIB", 8);
  const uint64_t wsize = wbytes / kAllocs, dsize = dbytes / kAllocs;

  // 1. Ceilings.
  Ceilings c = ceilings(dir);
  std::printf("BACKUP limit_d2h_gbps %.2f\nBACKUP limit_h2d_gbps %.2f\nBACKUP pageable_h2d_gbps %.2f\n",
              c.d2h, c.h2d, c.pageable_h2d);
  std::printf("BACKUP dir %s\nBACKUP dir_direct_io %d\nBACKUP dir_write_gbps %.2f\nBACKUP dir_read_gbps %.2f\n",
              dir.c_str(), c.direct ? 1 : 0, c.disk_write, c.disk_read);

  // 2. Pinned store, retained weights.
  {
    vpmm_pool* p = cuda_pool();
    auto v = weights(p, wbytes, VPMM_ALLOC_HOST_BACKUP | VPMM_ALLOC_RETAIN_BACKUP, nullptr);
    const double first = timed([&] { CK(vpmm_pool_pause(p, "weights")); });
    std::vector<double> resume, steady, repause;
    resume.push_back(timed([&] { CK(vpmm_pool_resume(p, "weights")); }));
    for (int k = 0; k < 3; ++k) {
      steady.push_back(timed([&] { CK(vpmm_pool_pause(p, "weights")); }));
      resume.push_back(timed([&] { CK(vpmm_pool_resume(p, "weights")); }));
      repause.push_back(timed([&] { CK(vpmm_pool_pause_flags(p, "weights", VPMM_PAUSE_BACKUP_UNCHANGED, nullptr)); }));
      resume.push_back(timed([&] { CK(vpmm_pool_resume(p, "weights")); }));
    }
    const bool ok = intact(v, wsize);
    vpmm_stats st;
    std::memset(&st, 0, sizeof st);
    st.struct_size = sizeof st;
    vpmm_pool_stats(p, &st);
    vpmm_pool_destroy(p);
    const double r = gbps(wbytes, median(resume)), s = median(steady), rp = median(repause);
    std::printf("BACKUP weights_gib %llu\n", (unsigned long long)(wbytes / GiB));
    std::printf("BACKUP pinned_first_pause_ms %.1f\nBACKUP pinned_steady_pause_ms %.1f\n", first, s);
    std::printf("BACKUP pinned_steady_pause_gbps %.2f\n", gbps(wbytes, s));
    std::printf("BACKUP pinned_repause_unchanged_ms %.2f\nBACKUP pinned_repause_speedup %.1f\n", rp, s / rp);
    std::printf("BACKUP pinned_resume_gbps %.2f\nBACKUP pinned_resume_pct_of_h2d %.1f\n", r, 100 * r / c.h2d);
    std::printf("BACKUP pinned_skipped_gib %.1f\nBACKUP pinned_data_intact %d\n",
                double(st.backup_skipped_bytes) / GiB, ok ? 1 : 0);
    target("repause_20x_faster", s / rp >= 20, fmt("steady %.1f ms / re-pause %.2f ms", s, rp));
    target("pinned_resume_90pct_h2d", r >= 0.9 * c.h2d, fmt("resume %.1f GB/s, H2D ceiling %.1f GB/s", r, c.h2d));
    target("pinned_data_intact", ok, "probes of 64 allocations");
  }

  // 3. mmap store.
  {
    vpmm_pool* p = cuda_pool();
    auto v = weights(p, wbytes, VPMM_ALLOC_HOST_BACKUP | VPMM_ALLOC_BACKUP_MMAP, nullptr);
    std::vector<double> pause, resume;
    uint64_t rss_before = 0, rss_paused = 0, rss_after = 0;
    for (int k = 0; k < 3; ++k) {
      const uint64_t r0 = rss_bytes();
      pause.push_back(timed([&] { CK(vpmm_pool_pause(p, "weights")); }));
      const uint64_t r1 = rss_bytes();
      resume.push_back(timed([&] { CK(vpmm_pool_resume(p, "weights")); }));
      if (k == 2) rss_before = r0, rss_paused = r1, rss_after = rss_bytes();
    }
    const bool ok = intact(v, wsize);
    vpmm_pool_destroy(p);
    const double pg = gbps(wbytes, median(pause)), rg = gbps(wbytes, median(resume));
    std::printf("BACKUP mmap_pause_gbps %.2f\nBACKUP mmap_resume_gbps %.2f\n", pg, rg);
    std::printf("BACKUP mmap_pause_pct_of_d2h %.1f\nBACKUP mmap_resume_pct_of_h2d %.1f\n", 100 * pg / c.d2h,
                100 * rg / c.h2d);
    std::printf("BACKUP mmap_resume_vs_driver_pageable %.2f\n", c.pageable_h2d > 0 ? rg / c.pageable_h2d : 0.0);
    std::printf("BACKUP mmap_rss_before_mib %llu\nBACKUP mmap_rss_paused_mib %llu\nBACKUP mmap_rss_after_mib %llu\n",
                (unsigned long long)(rss_before >> 20), (unsigned long long)(rss_paused >> 20),
                (unsigned long long)(rss_after >> 20));
    std::printf("BACKUP mmap_data_intact %d\n", ok ? 1 : 0);
    const double moved = rss_after > rss_before ? double(rss_after - rss_before) : double(rss_before - rss_after);
    target("mmap_rss_back_within_10pct", moved <= 0.1 * rss_before,
           fmt("moved %.0f MiB of %.0f MiB", moved / MiB, double(rss_before) / MiB));
    target("mmap_data_intact", ok, "probes of 64 allocations");
  }

  // 4. Disk store, retained files.
  {
    std::string sub = dir + "/vpmm-bench-disk-XXXXXX";
    std::vector<char> t(sub.begin(), sub.end());
    t.push_back('\0');
    if (!mkdtemp(t.data())) {
      std::printf("BACKUP disk_skipped 1 (cannot make a directory in %s)\n", dir.c_str());
    } else {
      const std::string ddir = t.data();
      vpmm_pool* p = cuda_pool();
      auto v = weights(p, dbytes, VPMM_ALLOC_HOST_BACKUP | VPMM_ALLOC_BACKUP_DISK | VPMM_ALLOC_RETAIN_BACKUP,
                       ddir.c_str());
      std::vector<double> pause, resume, repause;
      uint64_t footprint = 0;
      bool constant = true;
      for (int k = 0; k < 2; ++k) {
        pause.push_back(timed([&] { CK(vpmm_pool_pause(p, "weights")); }));
        const uint64_t f = dir_bytes(ddir);
        if (k == 0) footprint = f;
        constant &= f == footprint;
        resume.push_back(timed([&] { CK(vpmm_pool_resume(p, "weights")); }));
      }
      repause.push_back(timed([&] { CK(vpmm_pool_pause_flags(p, "weights", VPMM_PAUSE_BACKUP_UNCHANGED, nullptr)); }));
      resume.push_back(timed([&] { CK(vpmm_pool_resume(p, "weights")); }));
      const bool ok = intact(v, dsize);
      vpmm_pool_destroy(p);
      const bool removed = dir_bytes(ddir) == 0;
      rmdir(ddir.c_str());
      const double pg = gbps(dbytes, median(pause)), rg = gbps(dbytes, median(resume));
      std::printf("BACKUP disk_gib %llu\nBACKUP disk_pause_gbps %.2f\nBACKUP disk_resume_gbps %.2f\n",
                  (unsigned long long)(dbytes / GiB), pg, rg);
      std::printf("BACKUP disk_pause_pct_of_dir_write %.1f\nBACKUP disk_resume_pct_of_dir_read %.1f\n",
                  c.disk_write > 0 ? 100 * pg / c.disk_write : 0.0, c.disk_read > 0 ? 100 * rg / c.disk_read : 0.0);
      std::printf("BACKUP disk_repause_unchanged_ms %.2f\nBACKUP disk_footprint_gib %.2f\n", repause[0],
                  double(footprint) / GiB);
      std::printf("BACKUP disk_footprint_constant %d\nBACKUP disk_files_removed %d\nBACKUP disk_data_intact %d\n",
                  constant ? 1 : 0, removed ? 1 : 0, ok ? 1 : 0);
      target("disk_footprint_constant_and_removed", constant && removed,
             fmt("constant %.0f, removed %.0f", constant, removed));
      target("disk_data_intact", ok, "probes of 64 allocations");
    }
  }
  std::printf("bench_backup_stores: done\n");
  return 0;
}
