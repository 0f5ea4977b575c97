// Configuration (docs/misuse.md rows 14-18, 34-38, 73, 74): a bad field is
// INVALID_ARGUMENT naming it, with *out set to NULL; a malformed VPMM_*
// variable is never replaced by a default (pool creation fails naming the
// variable and its value); a backend that cannot serve is UNSUPPORTED; and
// the values the contract accepts make a working pool.
#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "contract.hpp"

using namespace ct;

TEST("bad configurations are rejected, naming the field; *out is NULL") {
  struct Case {
    const char* what;
    void (*edit)(vpmm_config*);
    vpmm_status want;
  };
  const Case cases[] = {
      {"struct_size", [](vpmm_config* c) { c->struct_size = 0; }, IA},
      {"struct_size", [](vpmm_config* c) { c->struct_size = 8; }, IA},
      {"page_size", [](vpmm_config* c) { c->page_size = 5000; }, IA},
      {"page_size", [](vpmm_config* c) { c->page_size = 4096 + 2048; }, IA},
      {"va_size", [](vpmm_config* c) { c->va_size = 4096; }, IA},          // < one page
      {"va_size", [](vpmm_config* c) { c->va_size = kPage * 3 / 2; }, IA},  // not a multiple
      {"initial_pages", [](vpmm_config* c) { c->initial_pages = 65; }, IA},
      {"initial_pages", [](vpmm_config* c) { c->initial_pages = UINT64_MAX / 2; }, IA},
      {"max_handle_size", [](vpmm_config* c) { c->max_handle_size = kPage + 4096; }, IA},
      {"max_handle_size", [](vpmm_config* c) { c->max_handle_size = 100; }, IA},
      {"small_size", [](vpmm_config* c) { c->small_size = kPage + 1; }, IA},
      {"backend", [](vpmm_config* c) { c->backend = 17; }, IA},
      {"backend", [](vpmm_config* c) { c->backend = -1; }, IA},
      {"device", [](vpmm_config* c) { c->device = -1; }, IA},
      {"host_capacity", [](vpmm_config* c) { c->host_capacity = 100; }, IA},
      {"HIP", [](vpmm_config* c) { c->backend = VPMM_BACKEND_HIP; }, VPMM_ERR_UNSUPPORTED},
  };
  for (const Case& k : cases) {
    vpmm_config c = PoolSpec().config();
    k.edit(&c);
    vpmm_pool* out = static_cast<vpmm_pool*>(kSentinel);
    std::string text = std::string("vpmm_pool_create with bad ") + k.what;
    expect_status(__FILE__, __LINE__, text.c_str(), nullptr, k.want, "vpmm_pool_create", k.what,
                  [&] { return vpmm_pool_create(&c, &out); });
    CHECK(out == nullptr);  // a failed create sets *out to NULL (vpmm.h)
  }
  // Initial pages beyond the host capacity: OUT_OF_MEMORY, nothing leaks.
  vpmm_config c = PoolSpec().config();
  c.initial_pages = 17;  // capacity is 16 pages
  vpmm_pool* out = static_cast<vpmm_pool*>(kSentinel);
  EXPECT_ERR(nullptr, vpmm_pool_create(&c, &out), OOM, "vpmm_pool_create");
  CHECK(out == nullptr);  // a failed create sets *out to NULL (vpmm.h)
}

// Asking for CUDA explicitly (config or environment) where it cannot serve
// is UNSUPPORTED (vpmm.h: "backend not built, no usable device"), and says
// which: a library built without the CUDA backend says so; one whose driver
// cannot be loaded says the driver is not usable (this machine in CI). Where
// the driver loads, the pool is a CUDA pool, or the driver's own refusal
// (UNSUPPORTED for no device, BACKEND for a failing driver) names CUDA.
TEST("CUDA backend without a GPU: UNSUPPORTED or BACKEND with a message") {
  vpmm_status built = vpmm_backend_info(VPMM_BACKEND_CUDA, nullptr, 0, nullptr);
  const bool not_built = built != VPMM_OK && std::strstr(vpmm_last_error(), "not built") != nullptr;
  void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  const bool no_driver = driver == nullptr;
  if (driver) dlclose(driver);
  for (bool via_env : {false, true}) {
    vpmm_config c = PoolSpec().config();
    c.page_size = 0;  // backend defaults: a GPU machine must get a working pool
    c.va_size = 0;
    if (via_env) {
      setenv("VPMM_BACKEND", "cuda", 1);
      vpmm_config_init(&c);
      CHECK_EQ(c.backend, VPMM_BACKEND_CUDA);
      CHECK_EQ(c.config_error, 0);
    } else {
      c.backend = VPMM_BACKEND_CUDA;
    }
    vpmm_pool* out = static_cast<vpmm_pool*>(kSentinel);
    if (not_built || no_driver) {
      EXPECT_ERR_MSG(nullptr, vpmm_pool_create(&c, &out), VPMM_ERR_UNSUPPORTED, "vpmm_pool_create",
                     not_built ? "without the CUDA backend" : "the CUDA driver is not usable");
      CHECK(out == nullptr);  // a failed create sets *out to NULL (vpmm.h)
      clean_env();
      continue;
    }
    vpmm::fail(VPMM_OK, "%s", "");
    vpmm_status st = vpmm_pool_create(&c, &out);
    if (st == VPMM_OK) {
      CHECK(std::strcmp(vpmm_pool_backend_name(out), "cuda") == 0);
      vpmm_pool_destroy(out);
    } else {
      CHECK(st == VPMM_ERR_UNSUPPORTED || st == VPMM_ERR_BACKEND);
      CHECK(out == nullptr);  // a failed create sets *out to NULL (vpmm.h)
      std::string msg = vpmm_last_error();
      CHECK(msg.find("cuda") != std::string::npos || msg.find("CUDA") != std::string::npos);
      CHECK_MSG(msg.find("vpmm_pool_create") != std::string::npos,
                "CUDA failure message does not name vpmm_pool_create: \"%s\"", msg.c_str());
    }
    clean_env();
  }
}

TEST("malformed environment variables fail pool creation naming variable and value") {
  struct Case {
    const char* var;
    const char* value;
  };
  const Case cases[] = {
      {"VPMM_PAGE_SIZE", "abc"},
      {"VPMM_VA_SIZE", "-1"},
      {"VPMM_PAGES", "12x"},
      {"VPMM_BACKEND", "gpu"},
      {"VPMM_PAGE_SIZE", "99999999999999999999999"},
      {"VPMM_PAGE_SIZE", "18446744073709551615K"},  // overflows with the suffix
      {"VPMM_DEVICE", "one"},
      {"VPMM_SMALL_SIZE", ""},
      {"VPMM_HOST_CAPACITY", "1G 2G"},
  };
  for (const Case& k : cases) {
    for (bool null_config : {false, true}) {
      clean_env();
      setenv(k.var, k.value, 1);
      vpmm_config c;
      vpmm_config_init(&c);
      CHECK(c.config_error != 0);
      vpmm_pool* out = static_cast<vpmm_pool*>(kSentinel);
      std::string text = std::string(k.var) + "=\"" + k.value + "\"" + (null_config ? " (NULL config)" : "");
      vpmm::fail(VPMM_OK, "%s", "");
      vpmm_status st = null_config ? vpmm_pool_create(nullptr, &out) : vpmm_pool_create(&c, &out);
      std::string msg = vpmm_last_error();
      bool ok = st == IA && msg.find("vpmm_pool_create") != std::string::npos &&
                msg.find(k.var) != std::string::npos &&
                msg.find(std::string("\"") + k.value + "\"") != std::string::npos &&
                out == nullptr;  // a failed create sets *out to NULL
      CHECK_MSG(ok, "%s: returned %s, message \"%s\"", text.c_str(), vpmm_status_string(st), msg.c_str());
      unsetenv(k.var);
    }
  }
  clean_env();
}

// The handle policy's spellings (docs/handles.md): "unlimited" and pages.
// "1p" was once rejected by the library although the docs and the replay
// tool used it, so PyTorch's hook returned NULL and model.cuda() failed.
TEST("VPMM_MAX_HANDLE_SIZE takes unlimited, pages of VPMM_PAGE_SIZE or of 2 MiB, and sizes") {
  struct {
    const char* page;
    const char* value;
    uint64_t want;
  } ok[] = {{nullptr, "unlimited", VPMM_HANDLE_SIZE_UNLIMITED},
            {nullptr, "1p", uint64_t(2) << 20},
            {nullptr, "16P", uint64_t(32) << 20},
            {"128K", "3p", uint64_t(384) << 10},
            {nullptr, "32M", uint64_t(32) << 20},
            {nullptr, "0", 0}};
  for (const auto& k : ok) {
    clean_env();
    if (k.page) setenv("VPMM_PAGE_SIZE", k.page, 1);
    setenv("VPMM_MAX_HANDLE_SIZE", k.value, 1);
    vpmm_config c;
    vpmm_config_init(&c);
    CHECK_EQ(c.config_error, 0);
    CHECK_EQ(c.max_handle_size, k.want);
    c.backend = VPMM_BACKEND_HOST;
    vpmm_pool* p = nullptr;
    CHECK_OK(vpmm_pool_create(&c, &p));
    if (p) {
      void* x = nullptr;
      CHECK_OK(vpmm_pool_malloc(p, 5 * vt::stats(p).page_size, nullptr, &x));
      CHECK_OK(vpmm_pool_free(p, x, nullptr));
      CHECK_OK(vpmm_pool_destroy(p));
    }
  }
  for (const char* bad : {"p", "0p", "-1p", "unlimitedp", "1q", "unlimited2", "1pp"}) {
    clean_env();
    setenv("VPMM_MAX_HANDLE_SIZE", bad, 1);
    vpmm_config c;
    vpmm_config_init(&c);
    CHECK_MSG(c.config_error != 0, "VPMM_MAX_HANDLE_SIZE=%s was accepted", bad);
  }
  clean_env();
}

TEST("valid environment values, suffixes included, are applied") {
  clean_env();
  setenv("VPMM_BACKEND", "host", 1);
  setenv("VPMM_PAGE_SIZE", "128K", 1);
  setenv("VPMM_VA_SIZE", "4MiB", 1);
  setenv("VPMM_PAGES", "3", 1);
  setenv("VPMM_HOST_CAPACITY", "0x1000000", 1);
  setenv("VPMM_MAX_HANDLE_SIZE", "128k", 1);
  vpmm_config c;
  vpmm_config_init(&c);
  CHECK_EQ(c.config_error, 0);
  CHECK_EQ(c.backend, VPMM_BACKEND_HOST);
  CHECK_EQ(c.page_size, uint64_t(128) << 10);
  CHECK_EQ(c.va_size, uint64_t(4) << 20);
  CHECK_EQ(c.initial_pages, uint64_t(3));
  CHECK_EQ(c.host_capacity, uint64_t(16) << 20);
  CHECK_EQ(c.max_handle_size, uint64_t(128) << 10);
  for (bool null_config : {false, true}) {
    vpmm_pool* p = nullptr;
    CHECK_OK(vpmm_pool_create(null_config ? nullptr : &c, &p));
    if (!p) continue;
    vpmm_config got;
    got.struct_size = sizeof got;
    CHECK_OK(vpmm_pool_get_config(p, &got));
    CHECK_EQ(got.page_size, uint64_t(128) << 10);
    CHECK_EQ(got.va_size, uint64_t(4) << 20);
    CHECK_EQ(std::string(vpmm_pool_backend_name(p)), std::string("host"));
    vpmm_stats st = vt::stats(p);
    CHECK_EQ(st.page_size, uint64_t(128) << 10);
    CHECK_EQ(st.mapped_bytes, uint64_t(3) * (128 << 10));
    CHECK_EQ(st.handles, uint64_t(3));
    CHECK_OK(vpmm_pool_destroy(p));
  }
  clean_env();
}

TEST("row 34: a config_error set by hand to a value no variable has is INVALID_ARGUMENT") {
  for (int32_t bad : {-1, 999, INT32_MAX}) {
    vpmm_config c = suite_pool().config();
    c.config_error = bad;
    vpmm_pool* out = static_cast<vpmm_pool*>(kSentinel);
    EXPECT_STATUS(vpmm_pool_create(&c, &out), IA, "config_error");
    CHECK(out == nullptr);  // a failed create sets *out to NULL (vpmm.h)
  }
}

// vpmm.h: "NULL config is ignored": no crash, no error reported (the
// thread's last message stays what it was), and the next call works.
TEST("row 35: vpmm_config_init(NULL) is ignored") {
  vpmm_pool* out = nullptr;
  CHECK_EQ(vpmm_pool_create(nullptr, nullptr), IA);  // a message to keep
  const std::string before = vpmm_last_error();
  CHECK(!before.empty());
  vpmm_config_init(nullptr);
  vpmm_config_init_defaults(nullptr);
  CHECK_EQ(std::string(vpmm_last_error()), before);
  vpmm_config c;
  std::memset(&c, 0xff, sizeof c);
  c.struct_size = sizeof c;
  vpmm_config_init_defaults(&c);
  CHECK_EQ(c.struct_size, uint32_t(sizeof c));
  CHECK_EQ(c.config_error, 0);
  CHECK_EQ(c.backend, VPMM_BACKEND_AUTO);
  c.backend = VPMM_BACKEND_HOST;
  CHECK_OK(vpmm_pool_create(&c, &out));
  if (out) CHECK_OK(vpmm_pool_destroy(out));
}

// vpmm.h: page_size is "a multiple of the backend granularity", and docs/
// misuse.md row 36: such a page that is no power of two (3 host pages) makes
// a working pool, its chunks aligned to the largest power of two dividing it.
TEST("row 36: a page_size that is a granularity multiple but no power of two works") {
  vpmm_config c = suite_pool().config();
  c.page_size = 3 * 4096;
  c.va_size = 64 * c.page_size;
  vpmm_pool* out = nullptr;
  CHECK_OK(vpmm_pool_create(&c, &out));
  if (!out) return;
  void* x = nullptr;
  CHECK_OK(vpmm_pool_malloc(out, 5 * c.page_size, nullptr, &x));
  vt::fill(x, 5 * c.page_size, 9);
  CHECK(vt::verify(x, 5 * c.page_size, 9));
  CHECK_EQ(vt::stats(out).page_size, c.page_size);
  CHECK_OK(vpmm_pool_free(out, x, nullptr));
  CHECK_OK(vpmm_pool_check(out));
  CHECK_OK(vpmm_pool_destroy(out));
}

TEST("row 37: a va_size beyond the address space is OUT_OF_MEMORY") {
  vpmm_config c = suite_pool().config();
  c.va_size = 1ull << 62;
  vpmm_pool* out = static_cast<vpmm_pool*>(kSentinel);
  EXPECT_STATUS(vpmm_pool_create(&c, &out), OOM, "vpmm_pool_create");
  CHECK(out == nullptr);  // a failed create sets *out to NULL (vpmm.h)
}

TEST("row 38: an environment size with a leading zero is decimal, as vpmm.h says") {
  clean_env();
  setenv("VPMM_PAGES", "010", 1);
  vpmm_config c;
  vpmm_config_init(&c);
  CHECK_EQ(c.config_error, 0);
  CHECK_EQ(c.initial_pages, uint64_t(10));  // strtoull base 0 would read octal 8
  setenv("VPMM_PAGES", "08", 1);
  vpmm_config_init(&c);
  CHECK_EQ(c.config_error, 0);  // "08" is no octal number: malformed there
  CHECK_EQ(c.initial_pages, uint64_t(8));
  clean_env();
}

TEST("a limit fraction that rounds to 0 bytes is the smallest limit, not none") {
  vpmm_config c = PoolSpec().va(64).host_memory(64ull << 20).limit(10).config();
  c.memory_limit_fraction = 1e-12;
  vpmm_pool* p = nullptr;
  CHECK_OK(vpmm_pool_create(&c, &p));
  CHECK_EQ(vt::stats(p).capacity_bytes, kPage);
  void* x = nullptr;
  CHECK_EQ(vpmm_pool_malloc(p, 2 * kPage, nullptr, &x), OOM);
  CHECK_OK(vpmm_pool_destroy(p));
  setenv("VPMM_MEMORY_LIMIT", "1e-9%", 1);
  vpmm_config_init(&c);
  unsetenv("VPMM_MEMORY_LIMIT");
  c.page_size = kPage;
  c.va_size = 64 * kPage;
  c.host_capacity = 64ull << 20;
  c.backend = VPMM_BACKEND_HOST;
  CHECK_OK(vpmm_pool_create(&c, &p));
  CHECK_EQ(vt::stats(p).capacity_bytes, kPage);
  CHECK_OK(vpmm_pool_destroy(p));
}

TEST("host_capacity below one page is refused at creation") {
  vpmm_config c = PoolSpec().host_memory(kPage / 2).config();
  vpmm_pool* p = nullptr;
  CHECK_EQ(vpmm_pool_create(&c, &p), IA);
  CHECK(p == nullptr);
  CHECK(std::strstr(vpmm_last_error(), "page") != nullptr);
}
