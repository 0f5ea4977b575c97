// The ABI 1 contract of vpmm.h that bindings rely on: the constants' types,
// VPMM_OK as the only success (pause/resume_ex report what changed), region
// records sized by the caller, the defaults-only config, and the error text
// copied out in the call that needs it.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "check.hpp"
#include "pool_util.hpp"

namespace {

constexpr uint64_t kPage = 64 << 10;

vpmm_pool* make_pool() {
  vt::HostPoolSpec s;
  s.page = kPage;
  vpmm_pool* p = vt::make_host_pool(s);
  if (!p) std::printf("  create: %s\n", vpmm_last_error());
  return p;
}

void* tagged(vpmm_pool* p, uint64_t size, const char* tag) {
  vpmm_alloc_attrs a{};
  a.struct_size = sizeof a;
  a.tag = tag;
  void* out = nullptr;
  if (vpmm_pool_malloc_ex(p, size, nullptr, &a, &out) != VPMM_OK) return nullptr;
  return out;
}

// In C++ the constants have the type of what they are compared with, so
// `auto`, lambda return-type deduction and templates see int32_t.
static_assert(std::is_same<std::remove_cv<decltype(VPMM_OK)>::type, vpmm_status>::value,
              "status constants are vpmm_status in C++");
static_assert(std::is_same<std::remove_cv<decltype(VPMM_BACKEND_HOST)>::type, int32_t>::value,
              "backend constants are int32_t in C++");
static_assert(std::is_same<std::remove_cv<decltype(VPMM_REGION_LIVE)>::type, int32_t>::value,
              "region kinds are int32_t in C++");
static_assert(VPMM_ERR_TIMEOUT == 8 && VPMM_ERR_INTERNAL == 7, "status values are pinned");

}  // namespace

TEST("constants deduce as int32_t: a lambda may return a constant and a call") {
  auto first_error = [](vpmm_status a, bool fail) {
    if (!fail) return VPMM_OK;
    return a;  // same deduced type as VPMM_OK: this compiles
  };
  CHECK_EQ(first_error(VPMM_ERR_TIMEOUT, true), VPMM_ERR_TIMEOUT);
  CHECK_EQ(first_error(VPMM_ERR_TIMEOUT, false), VPMM_OK);
  switch (first_error(VPMM_ERR_BACKEND, true)) {
    case VPMM_ERR_BACKEND: break;  // usable as case labels
    default: CHECK(false);
  }
}

TEST("pause/resume of nothing are VPMM_OK with n_changed 0; errors leave n_changed alone") {
  vpmm_pool* p = make_pool();
  if (!p) return;
  uint64_t n = 99;
  CHECK_OK(vpmm_pool_pause_ex(p, nullptr, &n));  // no tagged allocation at all
  CHECK_EQ(n, uint64_t(0));
  n = 99;
  CHECK_OK(vpmm_pool_resume_ex(p, nullptr, &n));
  CHECK_EQ(n, uint64_t(0));
  CHECK_OK(vpmm_pool_pause(p, nullptr));
  CHECK_OK(vpmm_pool_resume(p, nullptr));

  void* a = tagged(p, 2 * kPage, "a");
  void* b = tagged(p, 3 * kPage, "b");
  CHECK(a && b);
  n = 99;
  CHECK_EQ(vpmm_pool_pause_ex(p, "never-used", &n), VPMM_ERR_INVALID_ARGUMENT);
  CHECK_EQ(n, uint64_t(99));
  CHECK_OK(vpmm_pool_pause_ex(p, "a", &n));
  CHECK_EQ(n, uint64_t(1));
  CHECK_OK(vpmm_pool_pause_ex(p, nullptr, &n));  // only b is still active
  CHECK_EQ(n, uint64_t(1));
  CHECK_OK(vpmm_pool_pause_ex(p, nullptr, &n));
  CHECK_EQ(n, uint64_t(0));
  CHECK_EQ(vt::stats(p).paused_bytes, 5 * kPage);
  CHECK_OK(vpmm_pool_resume_ex(p, nullptr, &n));
  CHECK_EQ(n, uint64_t(2));
  CHECK_EQ(vt::stats(p).paused_bytes, uint64_t(0));
  CHECK_EQ(vpmm_pool_pause_ex(nullptr, "a", &n), VPMM_ERR_INVALID_ARGUMENT);
  CHECK(std::strstr(vpmm_last_error(), "vpmm_pool_pause") != nullptr);
  CHECK_EQ(n, uint64_t(2));
  CHECK_OK(vpmm_pool_check(p));
  vpmm_pool_destroy(p);
}

TEST("dump: a larger caller struct gets the known fields at its stride, the rest untouched") {
  vpmm_pool* p = make_pool();
  if (!p) return;
  void* x = nullptr;
  void* y = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, 2 * kPage, nullptr, &x));
  CHECK_OK(vpmm_pool_malloc(p, kPage, nullptr, &y));
  CHECK_OK(vpmm_pool_free(p, x, nullptr));  // live, free and hole regions
  const std::vector<vpmm_region_info> want = vt::regions(p);
  CHECK(want.size() >= 3);

  // A caller built against a future header whose struct is 24 bytes longer.
  const uint32_t stride = sizeof(vpmm_region_info) + 24;
  const size_t cap = want.size() + 2;
  std::vector<unsigned char> buf(cap * stride, 0xab);
  std::memcpy(buf.data(), &stride, sizeof stride);  // buf[0].struct_size
  size_t n = 0;
  CHECK_OK(vpmm_pool_dump(p, reinterpret_cast<vpmm_region_info*>(buf.data()), cap, &n));
  CHECK_EQ(n, want.size());
  for (size_t i = 0; i < cap; ++i) {
    const unsigned char* e = buf.data() + i * stride;
    if (i < n) {
      vpmm_region_info got;
      std::memcpy(&got, e, sizeof got);
      CHECK_EQ(got.struct_size, stride);  // the caller's size, in every element
      CHECK_EQ(got.va, want[i].va);
      CHECK_EQ(got.size, want[i].size);
      CHECK_EQ(got.kind, want[i].kind);
      CHECK_EQ(got.requested, want[i].requested);
    }
    // Bytes the library does not know (and whole elements past the count)
    // keep the caller's value; element 0 starts with the stride set above.
    size_t from = i < n ? sizeof(vpmm_region_info) : i == 0 ? sizeof(uint32_t) : 0;
    bool untouched = true;
    for (size_t b = from; b < stride; ++b) untouched &= e[b] == 0xab;
    CHECK(untouched);
  }
  vpmm_pool_destroy(p);
}

TEST("dump: a struct_size below the ABI 1 record is INVALID_ARGUMENT, buffer and count untouched") {
  vpmm_pool* p = make_pool();
  if (!p) return;
  void* x = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, kPage, nullptr, &x));
  for (uint32_t bad : {0u, 8u, uint32_t(sizeof(vpmm_region_info) - 8), 65537u}) {
    std::vector<vpmm_region_info> buf(4);
    std::memset(buf.data(), 0xab, buf.size() * sizeof buf[0]);
    buf[0].struct_size = bad;
    size_t n = 12345;
    CHECK_EQ(vpmm_pool_dump(p, buf.data(), buf.size(), &n), VPMM_ERR_INVALID_ARGUMENT);
    CHECK(std::strstr(vpmm_last_error(), "struct_size") != nullptr);
    CHECK_EQ(n, size_t(12345));
    CHECK_EQ(buf[0].struct_size, bad);
    CHECK_EQ(buf[0].va, 0xababababababababull);
  }
  // Capacity 0 reads no element: only the count comes back.
  size_t n = 0;
  CHECK_OK(vpmm_pool_dump(p, nullptr, 0, &n));
  CHECK(n >= 2);
  vpmm_pool_destroy(p);
}

TEST("visit hands records whose struct_size is the library's") {
  vpmm_pool* p = make_pool();
  if (!p) return;
  void* x = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, kPage, nullptr, &x));
  struct Seen {
    size_t n = 0, good = 0;
  } seen;
  CHECK_OK(vpmm_pool_visit(
      p,
      [](const vpmm_region_info* r, void* u) -> int {
        Seen* s = static_cast<Seen*>(u);
        ++s->n;
        if (r->struct_size == sizeof(vpmm_region_info)) ++s->good;
        return 0;
      },
      &seen));
  CHECK(seen.n >= 2);
  CHECK_EQ(seen.good, seen.n);
  vpmm_pool_destroy(p);
}

TEST("vpmm_config_init_defaults ignores the environment that vpmm_config_init reads") {
  vpmm_config plain;
  vpmm_config_init_defaults(&plain);  // before the environment is set
  CHECK_EQ(plain.struct_size, uint32_t(sizeof plain));
  setenv("VPMM_PAGE_SIZE", "3x", 1);  // malformed
  setenv("VPMM_BACKEND", "cuda", 1);
  setenv("VPMM_HOST_CAPACITY", "8M", 1);
  vpmm_config env, def;
  vpmm_config_init(&env);
  std::memset(&def, 0x5a, sizeof def);
  vpmm_config_init_defaults(&def);
  unsetenv("VPMM_PAGE_SIZE");
  unsetenv("VPMM_BACKEND");
  unsetenv("VPMM_HOST_CAPACITY");
  CHECK(env.config_error != 0);  // the environment was really there
  CHECK_EQ(env.backend, VPMM_BACKEND_CUDA);
  CHECK_EQ(def.config_error, 0);
  CHECK_EQ(def.backend, VPMM_BACKEND_AUTO);
  CHECK_EQ(def.host_capacity, plain.host_capacity);
  CHECK(std::memcmp(&def, &plain, sizeof def) == 0);  // every field, padding-free struct
  // A pool from the defaults is created fine although the environment was bad.
  def.backend = VPMM_BACKEND_HOST;
  vpmm_pool* p = nullptr;
  CHECK_OK(vpmm_pool_create(&def, &p));
  vpmm_pool_destroy(p);
  vpmm_config_init_defaults(nullptr);  // ignored, like vpmm_config_init(NULL)
}

TEST("vpmm_last_error_copy: snprintf-like length, truncation, NUL, no change to the message") {
  vpmm_pool* p = make_pool();
  if (!p) return;
  void* out = nullptr;
  CHECK_EQ(vpmm_pool_malloc(p, 0, nullptr, &out), VPMM_ERR_INVALID_ARGUMENT);
  const std::string msg = vpmm_last_error();
  CHECK(msg.size() > 10);
  CHECK_EQ(vpmm_last_error_copy(nullptr, 0), msg.size());  // the length only

  char big[600];
  std::memset(big, 'x', sizeof big);
  CHECK_EQ(vpmm_last_error_copy(big, sizeof big), msg.size());
  CHECK_EQ(std::string(big), msg);

  char small[8];
  std::memset(small, 'x', sizeof small);
  size_t full = vpmm_last_error_copy(small, sizeof small);
  CHECK_EQ(full, msg.size());
  CHECK(full >= sizeof small);  // truncated, as the return value says
  CHECK_EQ(std::string(small), msg.substr(0, sizeof small - 1));

  char one = 'x';
  CHECK_EQ(vpmm_last_error_copy(&one, 1), msg.size());
  CHECK_EQ(one, '\0');

  std::vector<char> exact(msg.size() + 1, 'x');  // exactly enough room
  CHECK_EQ(vpmm_last_error_copy(exact.data(), exact.size()), msg.size());
  CHECK_EQ(std::string(exact.data()), msg);
  CHECK_EQ(std::string(vpmm_last_error()), msg);  // copying changed nothing

  // The message is the calling thread's: another thread copies its own.
  std::string other;
  std::thread t([&] {
    vpmm_pool_free(p, reinterpret_cast<void*>(0x10), nullptr);  // UNKNOWN_POINTER
    char b[512];
    vpmm_last_error_copy(b, sizeof b);
    other = b;
  });
  t.join();
  CHECK(other.find("vpmm_pool_free") != std::string::npos);
  CHECK_EQ(std::string(vpmm_last_error()), msg);
  vpmm_pool_destroy(p);
}

TEST("the version comes from one place: the generated header and the library agree") {
  CHECK_EQ(std::string(vpmm_version()), std::string(VPMM_VERSION_STRING));
  CHECK_EQ(vpmm_abi_version(), VPMM_ABI_VERSION);
  char expect[32];
  std::snprintf(expect, sizeof expect, "%d.%d.%d", VPMM_VERSION_MAJOR, VPMM_VERSION_MINOR,
                VPMM_VERSION_PATCH);
  CHECK_EQ(std::string(expect), std::string(VPMM_VERSION_STRING));
}

TEST("a failed vpmm_pool_create sets *out to NULL (bad field, malformed variable, bad struct_size)") {
  vpmm_config c;
  vpmm_config_init_defaults(&c);
  c.backend = VPMM_BACKEND_HOST;
  c.page_size = 3;  // not a multiple of the granularity
  vpmm_pool* p = reinterpret_cast<vpmm_pool*>(0x1);
  CHECK_EQ(vpmm_pool_create(&c, &p), VPMM_ERR_INVALID_ARGUMENT);
  CHECK(p == nullptr);
  // A malformed environment variable, as vpmm_config_init records it.
  setenv("VPMM_PAGE_SIZE", "abc", 1);
  vpmm_config_init(&c);
  unsetenv("VPMM_PAGE_SIZE");
  c.backend = VPMM_BACKEND_HOST;
  p = reinterpret_cast<vpmm_pool*>(0x1);
  CHECK_EQ(vpmm_pool_create(&c, &p), VPMM_ERR_INVALID_ARGUMENT);
  CHECK(p == nullptr);
  CHECK(std::strstr(vpmm_last_error(), "VPMM_PAGE_SIZE") != nullptr);
  // A bad struct_size.
  vpmm_config_init_defaults(&c);
  c.struct_size = 3;
  p = reinterpret_cast<vpmm_pool*>(0x1);
  CHECK_EQ(vpmm_pool_create(&c, &p), VPMM_ERR_INVALID_ARGUMENT);
  CHECK(p == nullptr);
}

// The fixed lists the library names once, for the tool and the bindings.
TEST("vpmm_backend_kind_name and vpmm_backup_store_name list the library's tables, then NULL") {
  const char* kinds[] = {"auto", "cuda", "hip", "host"};
  for (int32_t k = 0; k < 4; ++k) CHECK(std::strcmp(vpmm_backend_kind_name(k), kinds[k]) == 0);
  CHECK(vpmm_backend_kind_name(4) == nullptr);
  CHECK(vpmm_backend_kind_name(-1) == nullptr);
  CHECK_EQ(vpmm_backend_kind_name(VPMM_BACKEND_HOST), kinds[3] == std::string("host") ? vpmm_backend_kind_name(3) : nullptr);
  vpmm_pool* p = make_pool();
  CHECK(p != nullptr);
  CHECK(std::strcmp(vpmm_pool_backend_name(p), vpmm_backend_kind_name(VPMM_BACKEND_HOST)) == 0);
  vpmm_pool_destroy(p);
  struct Store {
    const char* name;
    uint32_t flag;
  } stores[] = {{"pinned", 0}, {"mmap", VPMM_ALLOC_BACKUP_MMAP}, {"disk", VPMM_ALLOC_BACKUP_DISK}};
  for (uint32_t i = 0; i < 3; ++i) {
    uint32_t flag = 99;
    const char* name = vpmm_backup_store_name(i, &flag);
    CHECK(name != nullptr && std::strcmp(name, stores[i].name) == 0);
    CHECK_EQ(flag, stores[i].flag);
  }
  CHECK(vpmm_backup_store_name(0, nullptr) != nullptr);
  uint32_t untouched = 99;
  CHECK(vpmm_backup_store_name(3, &untouched) == nullptr);
  CHECK_EQ(untouched, 99u);
}

TEST_MAIN()
