// The HIP backend's ROCm paths, over the emulated HIP runtime (tests/hip_emu):
// each documented ROCm behaviour is switched on in the emulator and the
// backend must cope with it (chunked hipMemCreate, per-chunk set-access and
// unmap, the 7.2 VA-recycling workaround, NULL reservations, the alignment
// retry, out-of-memory, the ROCm 5 property layout, the pinning fallback,
// the 2 MiB page floor), and the emulator's discipline checker must catch a
// backend that breaks the rules. The pool suites themselves run over the
// emulator as the 'hip' meson suite (unit/test_backend.hpp).
//
// Run with VPMM_TEST_BACKEND=hip VPMM_HIP_LIBRARY=<libhip_emu.so> (meson does).
#include <dlfcn.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "check.hpp"
#include "pool_util.hpp"
#include "test_backend.hpp"
#include "vpmm.h"

namespace {

constexpr uint64_t kPage = 64 << 10;
constexpr uint64_t kMiB = 1 << 20;

// Every behaviour back to its default (a ROCm 6.2 device of 1 GiB) and the
// backend's environment to the suite's (the 4 KiB floor, no forced paths).
void reset() {
  const struct {
    const char* n;
    uint64_t v;
  } defaults[] = {{"VERSION", 60241134}, {"DEVICES", 1},      {"VMM_ATTR", 1},
                  {"GRANULARITY", 4096}, {"MAX_CREATE", 0},   {"CAPACITY", 1ull << 30},
                  {"STRICT_CHUNKS", 1},  {"HOLD_UNTIL_VA_FREE", 0}, {"RESERVE_NULL", 0},
                  {"ALIGN_FAIL", 0},     {"NO_HOST_REGISTER", 0}};
  for (const auto& d : defaults) vt::emu_set(d.n, d.v);
  setenv("VPMM_HIP_PAGE_FLOOR", "4096", 1);
  unsetenv("VPMM_HIP_VA_RECYCLE");
  unsetenv("VPMM_HIP_CHUNK_SIZE");
}

vpmm_config hip_config(uint64_t chunk = 0) {
  vpmm_config c;
  vpmm_config_init(&c);
  c.backend = VPMM_BACKEND_HIP;
  c.page_size = kPage;
  c.va_size = 1024 * kPage;
  c.small_size = 1;
  c.hip_chunk_size = chunk;
  return c;
}

vpmm_pool* hip_pool(uint64_t chunk = 0, uint64_t max_handle = 0) {
  vpmm_config c = hip_config(chunk);
  c.max_handle_size = max_handle;
  vpmm_pool* p = nullptr;
  if (vpmm_pool_create(&c, &p) != VPMM_OK) std::printf("  create: %s\n", vpmm_last_error());
  return p;
}

std::string info() {
  char buf[1024];
  size_t n = 0;
  if (vpmm_backend_info(VPMM_BACKEND_HIP, buf, sizeof buf, &n) != VPMM_OK) return vpmm_last_error();
  return buf;
}

bool contains(const std::string& s, const char* what) {
  if (s.find(what) != std::string::npos) return true;
  std::printf("  \"%s\" not in \"%s\"\n", what, s.c_str());
  return false;
}

}  // namespace

TEST("ROCm 6.x: handles are chunks; every map, set-access and unmap is one chunk") {
  reset();
  vt::emu_set("MAX_CREATE", 1 * kMiB);  // the runtime fails larger hipMemCreate calls
  vpmm_pool* p = hip_pool(1 * kMiB, VPMM_HANDLE_SIZE_UNLIMITED);  // pool policy: one handle per growth
  CHECK(p != nullptr);
  if (!p) return;
  vt::emu_set("MAX_SET_ACCESS_SPAN", 0);
  const uint64_t creates0 = vt::emu_get("CREATES");
  void* a = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, 8 * kMiB, nullptr, &a));  // one growth of 8 MiB: 8 chunks
  CHECK_EQ(vt::emu_get("CREATES") - creates0, uint64_t{8});
  CHECK_EQ(vt::emu_get("MAPPINGS"), uint64_t{8});
  CHECK_EQ(vt::stats(p).handles, uint64_t{8});
  CHECK(vt::emu_get("SET_ACCESS") >= 8);
  if (a) {
    vt::fill(a, 8 * kMiB, 7);
    CHECK(vt::verify(a, 8 * kMiB, 7));
  }
  // Defragmentation, trimming and destroy unmap chunk by chunk too: the
  // emulator rejects (STRICT_CHUNKS) or aborts on anything else.
  CHECK_OK(vpmm_pool_free(p, a, nullptr));
  CHECK_OK(vpmm_pool_trim(p, 0));
  CHECK_EQ(vt::emu_get("MAPPINGS"), uint64_t{0});
  CHECK_OK(vpmm_pool_destroy(p));
  CHECK_EQ(vt::emu_get("USED"), uint64_t{0});
  CHECK_EQ(vt::emu_get("RESERVATIONS"), uint64_t{0});
}

TEST("ROCm 6.x without chunking: one large hipMemCreate fails (why the path exists)") {
  reset();
  vt::emu_set("MAX_CREATE", 1 * kMiB);
  vpmm_pool* p = hip_pool(VPMM_HANDLE_SIZE_UNLIMITED, VPMM_HANDLE_SIZE_UNLIMITED);
  CHECK(p != nullptr);
  if (!p) return;
  void* a = nullptr;
  CHECK_EQ(vpmm_pool_malloc(p, 8 * kMiB, nullptr, &a), VPMM_ERR_OUT_OF_MEMORY);
  CHECK(contains(vpmm_last_error(), "hipMemCreate"));
  CHECK_OK(vpmm_pool_destroy(p));
}

TEST("chunk size by version: 256 MiB below 7.0, none from 7.0, forced by VPMM_HIP_CHUNK_SIZE") {
  reset();
  CHECK(contains(info(), "256 MiB chunks (ROCm < 7.0)"));
  vt::emu_set("VERSION", 70000000);
  CHECK(contains(info(), "one hipMemCreate per handle (ROCm >= 7.0)"));
  vpmm_pool* p = hip_pool();
  CHECK(p != nullptr);
  if (p) {
    void* a = nullptr;
    CHECK_OK(vpmm_pool_malloc(p, 4 * kMiB, nullptr, &a));
    vpmm_pool_destroy(p);
  }
  setenv("VPMM_HIP_CHUNK_SIZE", "2M", 1);
  CHECK(contains(info(), "2 MiB chunks (VPMM_HIP_CHUNK_SIZE)"));
  vpmm_config c;
  vpmm_config_init(&c);
  CHECK_EQ(c.hip_chunk_size, 2 * kMiB);
  setenv("VPMM_HIP_CHUNK_SIZE", "unlimited", 1);
  vt::emu_set("VERSION", 60241134);
  CHECK(contains(info(), "one hipMemCreate per handle (VPMM_HIP_CHUNK_SIZE=unlimited)"));
  reset();
}

// The ROCm 7.2 leak (TMS#83): after unmap + release the memory stays
// allocated while its VA is reserved. The pool keeps its VA reserved for
// its lifetime, so without the workaround trimmed memory is never returned.
TEST("ROCm 7.2: unmap + release frees nothing until the VA is freed; the workaround recycles it") {
  reset();
  vt::emu_set("VERSION", 70200000);
  vt::emu_set("HOLD_UNTIL_VA_FREE", 1);
  vt::emu_set("CAPACITY", 16 * kMiB);
  CHECK(contains(info(), "ROCm 7.2 workaround): on"));

  // Forced off: memory trimmed by the pool stays held by the runtime.
  setenv("VPMM_HIP_VA_RECYCLE", "off", 1);
  vpmm_pool* p = hip_pool();
  CHECK(p != nullptr);
  if (!p) return;
  void* a = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, 8 * kMiB, nullptr, &a));
  CHECK_OK(vpmm_pool_free(p, a, nullptr));
  CHECK_OK(vpmm_pool_trim(p, 0));
  CHECK_EQ(vt::stats(p).mapped_bytes, uint64_t{0});
  CHECK_EQ(vt::emu_get("USED"), 8 * kMiB);  // the leak
  CHECK_EQ(vt::emu_get("HELD_BY_VA"), 8 * kMiB);
  CHECK_EQ(vpmm_pool_malloc(p, 12 * kMiB, nullptr, &a), VPMM_ERR_OUT_OF_MEMORY);
  CHECK_OK(vpmm_pool_destroy(p));  // frees the VA: the runtime lets go
  CHECK_EQ(vt::emu_get("USED"), uint64_t{0});

  // Auto on 7.2: every unmap frees its VA and reserves the same address.
  unsetenv("VPMM_HIP_VA_RECYCLE");
  p = hip_pool();
  CHECK(p != nullptr);
  if (!p) return;
  const uint64_t frees0 = vt::emu_get("ADDRESS_FREES");
  for (int round = 0; round < 4; ++round) {  // 4 x 12 MiB through a 16 MiB device
    a = nullptr;
    CHECK_OK(vpmm_pool_malloc(p, 12 * kMiB, nullptr, &a));
    if (a) {
      vt::fill(a, 12 * kMiB, round);
      CHECK(vt::verify(a, 12 * kMiB, round));
    }
    CHECK_OK(vpmm_pool_free(p, a, nullptr));
    CHECK_OK(vpmm_pool_trim(p, 0));
    CHECK_EQ(vt::emu_get("USED"), uint64_t{0});
  }
  CHECK(vt::emu_get("ADDRESS_FREES") > frees0);
  CHECK_OK(vpmm_pool_check(p));
  CHECK_OK(vpmm_pool_destroy(p));

  // Forced on for a version that does not need it.
  vt::emu_set("VERSION", 70000000);
  CHECK(contains(info(), "workaround): off"));
  setenv("VPMM_HIP_VA_RECYCLE", "on", 1);
  CHECK(contains(info(), "workaround): on (VPMM_HIP_VA_RECYCLE)"));
  setenv("VPMM_HIP_VA_RECYCLE", "sometimes", 1);
  vpmm_config c = hip_config();
  p = nullptr;
  CHECK_EQ(vpmm_pool_create(&c, &p), VPMM_ERR_INVALID_ARGUMENT);
  CHECK(contains(vpmm_last_error(), "VPMM_HIP_VA_RECYCLE"));
  reset();
}

TEST("ROCm 6.0: hipMemAddressReserve 'succeeds' with NULL: UNSUPPORTED naming the version") {
  reset();
  vt::emu_set("VERSION", 60032830);
  vt::emu_set("RESERVE_NULL", 1);
  vpmm_config c = hip_config();
  vpmm_pool* p = nullptr;
  CHECK_EQ(vpmm_pool_create(&c, &p), VPMM_ERR_UNSUPPORTED);
  CHECK(contains(vpmm_last_error(), "NULL"));
  CHECK(contains(vpmm_last_error(), "HIP 6.0"));
  CHECK(contains(info(), "not functional before ROCm 6.1"));
  c.backend = VPMM_BACKEND_AUTO;  // AUTO does not pick a runtime without working VMM
  CHECK_OK(vpmm_pool_create(&c, &p));
  if (p) {
    CHECK(std::strcmp(vpmm_pool_backend_name(p), "hip") != 0);
    vpmm_pool_destroy(p);
  }
  reset();
  c = hip_config();
  c.backend = VPMM_BACKEND_AUTO;  // and picks HIP where it works (CUDA first where usable)
  CHECK_OK(vpmm_pool_create(&c, &p));
  if (p) {
    const std::string picked = vpmm_pool_backend_name(p);
    CHECK(picked == "hip" || picked == "cuda");
    vpmm_pool_destroy(p);
  }
}

TEST("device without VMM, or no device: UNSUPPORTED with a message") {
  reset();
  vt::emu_set("VMM_ATTR", 0);
  vpmm_config c = hip_config();
  vpmm_pool* p = nullptr;
  CHECK_EQ(vpmm_pool_create(&c, &p), VPMM_ERR_UNSUPPORTED);
  CHECK(contains(vpmm_last_error(), "does not support virtual memory management"));
  CHECK(contains(vpmm_last_error(), "HIP 6.2"));
  c.backend = VPMM_BACKEND_AUTO;  // AUTO passes over a device without VMM
  CHECK_OK(vpmm_pool_create(&c, &p));
  if (p) {
    CHECK(std::strcmp(vpmm_pool_backend_name(p), "hip") != 0);
    vpmm_pool_destroy(p);
  }
  c.backend = VPMM_BACKEND_HIP;
  reset();
  vt::emu_set("DEVICES", 0);
  CHECK_EQ(vpmm_pool_create(&c, &p), VPMM_ERR_UNSUPPORTED);
  CHECK(contains(vpmm_last_error(), "no AMD GPU"));
  c.backend = VPMM_BACKEND_AUTO;  // AUTO passes over HIP
  CHECK_OK(vpmm_pool_create(&c, &p));
  if (p) {
    CHECK(std::strcmp(vpmm_pool_backend_name(p), "hip") != 0);
    vpmm_pool_destroy(p);
  }
  reset();
  c.backend = VPMM_BACKEND_HIP;
  c.device = 1;
  CHECK_EQ(vpmm_pool_create(&c, &p), VPMM_ERR_INVALID_ARGUMENT);
  CHECK(contains(vpmm_last_error(), "out of range"));
}

TEST("an alignment the runtime refuses: retried with 0, alignment checked by the backend") {
  reset();
  vt::emu_set("ALIGN_FAIL", 1);
  const uint64_t r0 = vt::emu_get("ADDRESS_RESERVES");
  vpmm_pool* p = hip_pool();
  CHECK(p != nullptr);
  CHECK_EQ(vt::emu_get("ADDRESS_RESERVES") - r0, uint64_t{2});
  if (!p) return;
  void* a = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, kPage, nullptr, &a));
  CHECK_EQ(reinterpret_cast<uintptr_t>(a) % kPage, uintptr_t{0});
  CHECK_OK(vpmm_pool_destroy(p));
  reset();
}

TEST("out of device memory at the emulated capacity: OUT_OF_MEMORY, pool intact") {
  reset();
  vt::emu_set("CAPACITY", 4 * kMiB);
  vpmm_pool* p = hip_pool();
  CHECK(p != nullptr);
  if (!p) return;
  CHECK_EQ(vt::stats(p).capacity_bytes, 4 * kMiB);  // hipMemGetInfo's total
  void *a = nullptr, *b = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, 3 * kMiB, nullptr, &a));
  CHECK_EQ(vpmm_pool_malloc(p, 2 * kMiB, nullptr, &b), VPMM_ERR_OUT_OF_MEMORY);
  CHECK_OK(vpmm_pool_check(p));
  CHECK_OK(vpmm_pool_free(p, a, nullptr));
  CHECK_OK(vpmm_pool_malloc(p, 2 * kMiB, nullptr, &b));  // reuses the freed pages
  CHECK_OK(vpmm_pool_destroy(p));
  reset();
}

TEST("ROCm 5.x: the runtime gets the 5.x hipMemAllocationProp layout and no attribute query") {
  reset();
  vt::emu_set("VERSION", 50221153);  // Debian's 5.2.3; the emulator reads the 5.x layout
  vpmm_pool* p = hip_pool();
  CHECK(p != nullptr);
  if (!p) return;
  void* a = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, kMiB, nullptr, &a));
  CHECK_OK(vpmm_pool_destroy(p));
  reset();
}

TEST("pause with backup: hipHostRegister, and the hipHostMalloc fallback when it fails") {
  for (int no_register = 0; no_register < 2; ++no_register) {
    reset();
    vt::emu_set("NO_HOST_REGISTER", no_register);
    vpmm_pool* p = hip_pool();
    CHECK(p != nullptr);
    if (!p) return;
    vpmm_alloc_attrs at;
    std::memset(&at, 0, sizeof at);
    at.struct_size = sizeof at;
    at.flags = VPMM_ALLOC_HOST_BACKUP;
    at.tag = "w";
    void* a = nullptr;
    CHECK_OK(vpmm_pool_malloc_ex(p, 2 * kMiB, nullptr, &at, &a));
    if (a) vt::fill(a, 2 * kMiB, 11);
    CHECK_OK(vpmm_pool_pause(p, "w"));
    CHECK_EQ(vt::emu_get("USED"), uint64_t{0});
    CHECK_OK(vpmm_pool_resume(p, "w"));
    if (a) CHECK(vt::verify(a, 2 * kMiB, 11));
    CHECK(vt::stats(p).backup_pinned_bytes > 0);  // pinned either way
    CHECK_OK(vpmm_pool_destroy(p));
  }
  reset();
}

TEST("the 2 MiB page floor: 4 KiB reported, 2 MiB pages unless VPMM_HIP_PAGE_FLOOR lowers it") {
  reset();
  unsetenv("VPMM_HIP_PAGE_FLOOR");
  CHECK(contains(info(), "page floor 2048 KiB"));
  vpmm_config c = hip_config();
  vpmm_pool* p = nullptr;
  CHECK_EQ(vpmm_pool_create(&c, &p), VPMM_ERR_INVALID_ARGUMENT);  // 64 KiB pages refused
  CHECK(contains(vpmm_last_error(), "granularity 2097152"));
  c.page_size = 0;
  c.va_size = 64 * kMiB;  // not the 8 TiB default: sanitizers' shadow leaves less VA
  CHECK_OK(vpmm_pool_create(&c, &p));
  if (p) {
    CHECK_EQ(vt::stats(p).page_size, 2 * kMiB);
    vpmm_pool_destroy(p);
  }
  setenv("VPMM_HIP_PAGE_FLOOR", "3000", 1);
  c = hip_config();
  CHECK_EQ(vpmm_pool_create(&c, &p), VPMM_ERR_INVALID_ARGUMENT);
  CHECK(contains(vpmm_last_error(), "VPMM_HIP_PAGE_FLOOR"));
  reset();
}

TEST("ROCm 7.2 path: a backup copy of many handles is split per reservation") {
  reset();
  vt::emu_set("VERSION", 70200000);
  vt::emu_set("HOLD_UNTIL_VA_FREE", 1);
  vpmm_pool* p = hip_pool(0, kPage);  // page handles: every page its own mapping and reservation
  CHECK(p != nullptr);
  if (!p) return;
  vpmm_alloc_attrs at;
  std::memset(&at, 0, sizeof at);
  at.struct_size = sizeof at;
  at.flags = VPMM_ALLOC_HOST_BACKUP;
  at.tag = "w";
  void* a = nullptr;
  CHECK_OK(vpmm_pool_malloc_ex(p, 16 * kPage, nullptr, &at, &a));
  CHECK_EQ(vt::stats(p).handles, uint64_t{16});
  if (a) vt::fill(a, 16 * kPage, 5);
  CHECK_OK(vpmm_pool_pause(p, "w"));  // one region, 16 reservations: 16 copies
  CHECK_EQ(vt::emu_get("USED"), uint64_t{0});
  CHECK_OK(vpmm_pool_resume(p, "w"));
  if (a) CHECK(vt::verify(a, 16 * kPage, 5));
  CHECK_OK(vpmm_pool_destroy(p));
  CHECK_EQ(vt::emu_get("RESERVATIONS"), uint64_t{0});
  reset();
}

// The Backend contract allows a release while mapped (CUDA does); ROCm does
// not (ROCR-Runtime#257), so the backend defers it to the unmap. The
// emulator would abort on a hipMemRelease of a mapped handle.
TEST("release while mapped is deferred to the unmap") {
  reset();
  vpmm::BackendParams bp;
  vpmm_status st = VPMM_OK;
  std::unique_ptr<vpmm::Backend> b = vpmm::make_backend(VPMM_BACKEND_HIP, bp, &st);
  CHECK(b != nullptr);
  if (!b) return;
  uint64_t va = 0;
  vpmm::PhysHandle h = 0;
  CHECK_OK(b->reserve(4 * kMiB, 0, &va));
  CHECK_OK(b->create(2 * kMiB, &h));
  CHECK_OK(b->map(va, 2 * kMiB, h));
  CHECK_OK(b->set_access(va, 2 * kMiB));
  CHECK_OK(b->release(h, 2 * kMiB));
  CHECK_EQ(vt::emu_get("HANDLES"), uint64_t{1});  // still mapped: not released yet
  CHECK_EQ(b->release(h, 2 * kMiB), VPMM_ERR_INVALID_ARGUMENT);  // twice
  CHECK_OK(b->unmap(va, 2 * kMiB));
  CHECK_EQ(vt::emu_get("HANDLES"), uint64_t{0});
  CHECK_EQ(b->unmap(va, 2 * kMiB), VPMM_ERR_INVALID_ARGUMENT);  // not a mapping any more
  CHECK_OK(b->unreserve(va, 4 * kMiB));
  CHECK(vpmm::live_counts_zero(b->counters()));
}

// The emulator fails loudly when the discipline is broken: here a direct
// hipMemRelease of a mapped handle (what the backend defers), in a child.
TEST("the emulator aborts on a release of a mapped handle (ROCR-Runtime#257)") {
  reset();
  void* lib = dlopen(std::getenv("VPMM_HIP_LIBRARY"), RTLD_NOW | RTLD_LOCAL);
  CHECK(lib != nullptr);
  if (!lib) return;
  using Reserve = int (*)(void**, size_t, size_t, void*, unsigned long long);
  using Create = int (*)(void**, size_t, const void*, unsigned long long);
  using Map = int (*)(void*, size_t, size_t, void*, unsigned long long);
  using Release = int (*)(void*);
  auto reserve = reinterpret_cast<Reserve>(dlsym(lib, "hipMemAddressReserve"));
  auto create = reinterpret_cast<Create>(dlsym(lib, "hipMemCreate"));
  auto map = reinterpret_cast<Map>(dlsym(lib, "hipMemMap"));
  auto release = reinterpret_cast<Release>(dlsym(lib, "hipMemRelease"));
  CHECK(reserve && create && map && release);
  if (!(reserve && create && map && release)) return;
  int pipefd[2];
  CHECK_EQ(pipe(pipefd), 0);
  std::fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    dup2(pipefd[1], 2);
    // The ROCm 6 layout of hipMemAllocationProp: type Pinned, location Device 0.
    struct {
      int type, handle_type, loc_type, loc_id;
      void* win32;
      unsigned char flags[4];
    } prop = {1, 0, 1, 0, nullptr, {0, 0, 0, 0}};
    void *va = nullptr, *h = nullptr;
    if (reserve(&va, 2 * kMiB, 0, nullptr, 0) != 0 || create(&h, 2 * kMiB, &prop, 0) != 0 ||
        map(va, 2 * kMiB, 0, h, 0) != 0)
      _exit(3);
    release(h);  // must abort
    _exit(0);
  }
  close(pipefd[1]);
  char buf[512] = {0};
  size_t got = 0;
  ssize_t n;
  while (got < sizeof buf - 1 && (n = read(pipefd[0], buf + got, sizeof buf - 1 - got)) > 0) got += n;
  close(pipefd[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT);
  CHECK(contains(buf, "DISCIPLINE: hipMemRelease"));
}

int main(int argc, char** argv) {
  if (!vt::testing_hip()) {
    std::printf("run with VPMM_TEST_BACKEND=hip and VPMM_HIP_LIBRARY=<libhip_emu.so>\n");
    return 1;
  }
  return vt::run_all(argc, argv);
}
