// backend/pinnable_pages: the host memory the GPU backends register for
// pinned backups must come back with every page already faulted in (that is
// its purpose: registration then only pins), on several threads for large
// buffers, rounded to 2 MiB, readable and writable.
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "backend/pinnable_pages.hpp"
#include "check.hpp"

namespace {

// Pages of [p, p + len) that are resident, per mincore.
uint64_t resident_pages(void* p, uint64_t len) {
  const long page = sysconf(_SC_PAGESIZE);
  std::vector<unsigned char> v((len + page - 1) / page);
  if (mincore(p, len, v.data()) != 0) return 0;
  uint64_t n = 0;
  for (unsigned char c : v) n += c & 1;
  return n;
}

void check_buffer(uint64_t size) {
  uint64_t mapped = 0;
  void* p = vpmm::map_pinnable(size, &mapped);
  CHECK(p != nullptr);
  if (!p) return;
  CHECK_EQ(mapped % (2ull << 20), uint64_t(0));
  CHECK(mapped >= size && mapped < size + (2ull << 20));
  const long page = sysconf(_SC_PAGESIZE);
  CHECK_EQ(resident_pages(p, mapped), mapped / page);  // faulted in before any driver sees it
  auto* b = static_cast<unsigned char*>(p);
  CHECK_EQ(b[0], 0);
  CHECK_EQ(b[mapped - 1], 0);
  std::memset(b, 0x5c, size);
  CHECK_EQ(b[size - 1], 0x5c);
  vpmm::unmap_pinnable(p, mapped);
}

}  // namespace

TEST("a small pinnable buffer is one 2 MiB block, every page resident") { check_buffer(1); }

TEST("a large pinnable buffer is faulted in on several threads, every slice resident") {
  // 3 x 256 MiB + a tail: three populate threads, the last slice shorter.
  check_buffer((3ull << 28) + (5ull << 20) + 123);
}

TEST("an impossible size is refused with nullptr, nothing mapped") {
  uint64_t mapped = 7;
  CHECK(vpmm::map_pinnable(uint64_t(1) << 62, &mapped) == nullptr);
  CHECK_EQ(mapped, uint64_t(7));
}

TEST("PinnedPages: a refused registration leaves nothing behind; a pinned buffer is known until released") {
  vpmm::PinnedPages pages;
  int unregistered = 0;
  void* refused = pages.pin(
      3 << 20, [](void*, uint64_t) { return false; }, [&](void*) { ++unregistered; });
  CHECK(refused == nullptr);
  uint64_t seen = 0;
  void* p = pages.pin(
      3 << 20, [&](void* q, uint64_t n) { seen = n; return q != nullptr; }, [&](void*) { ++unregistered; });
  CHECK(p != nullptr);
  CHECK_EQ(seen, uint64_t(4) << 20);  // registered whole: 2 MiB blocks
  CHECK_EQ(pages.mapped_length(p), uint64_t(4) << 20);
  int other = 0;
  CHECK_EQ(pages.mapped_length(&other), uint64_t(0));
  pages.release(p);
  CHECK_EQ(pages.mapped_length(p), uint64_t(0));
  CHECK_EQ(unregistered, 0);  // release() follows the driver's own unregistration
}

TEST_MAIN()
