// See pinnable_pages.hpp.
#include "backend/pinnable_pages.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <thread>
#include <vector>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14; older kernels answer EINVAL
#endif

namespace vpmm {

namespace {

constexpr uint64_t kHuge = 2ull << 20;
// Zeroing is memory-bound: a few threads reach the host's bandwidth; small
// buffers are not worth a thread.
constexpr unsigned kMaxPopulateThreads = 8;
constexpr uint64_t kBytesPerPopulateThread = 256ull << 20;

bool populate(char* p, uint64_t len) {
  if (madvise(p, len, MADV_POPULATE_WRITE) == 0) return true;
  if (errno != EINVAL) return false;  // ENOMEM and the like: the memory is not there
  for (uint64_t off = 0; off < len; off += 4096) p[off] = 0;  // fresh memory is zero already
  return true;
}

bool populate_parallel(char* p, uint64_t len) {
  unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  uint64_t n = std::min<uint64_t>({kMaxPopulateThreads, hw, std::max<uint64_t>(1, len / kBytesPerPopulateThread)});
  if (n <= 1) return populate(p, len);
  const uint64_t slice = (len / n + kHuge - 1) / kHuge * kHuge;
  std::vector<char> ok(n, 0);
  std::vector<std::thread> threads;
  try {
    for (uint64_t i = 1; i < n; ++i) {
      uint64_t lo = std::min(len, i * slice), hi = std::min(len, lo + slice);
      threads.emplace_back([&ok, p, i, lo, hi] { ok[i] = lo == hi || populate(p + lo, hi - lo); });
    }
  } catch (...) {
    // No thread to be had: the remaining slices are faulted on this one.
    for (uint64_t i = threads.size() + 1; i < n; ++i) {
      uint64_t lo = std::min(len, i * slice), hi = std::min(len, lo + slice);
      ok[i] = lo == hi || populate(p + lo, hi - lo);
    }
  }
  ok[0] = populate(p, std::min(len, slice));
  for (auto& t : threads) t.join();
  return std::all_of(ok.begin(), ok.end(), [](char c) { return c != 0; });
}

}  // namespace

void* map_pinnable(uint64_t size, uint64_t* mapped) {
  const uint64_t len = (size + kHuge - 1) / kHuge * kHuge;
  void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  (void)madvise(p, len, MADV_HUGEPAGE);  // advice only: fewer faults and page-table entries
  // Not inherited by fork()ed children (DataLoader workers): on kernels
  // without FOLL_PIN-aware fork, copy-on-write could otherwise leave the
  // parent a new page while the copy engine writes the old one.
  if (madvise(p, len, MADV_DONTFORK) != 0 || !populate_parallel(static_cast<char*>(p), len)) {
    munmap(p, len);
    return nullptr;
  }
  *mapped = len;
  return p;
}

void unmap_pinnable(void* p, uint64_t mapped) { munmap(p, mapped); }

}  // namespace vpmm
