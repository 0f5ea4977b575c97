// Structs of every older size through every function that takes a sized
// struct (issue 35 item 8). A program built against an older vpmm.h passes
// a struct that is smaller than today's, with struct_size set to its sizeof;
// the header promises that the library reads and writes only struct_size
// bytes of it. Each struct here ends exactly at the end of a page whose next
// page is PROT_NONE, so a single byte read or written past struct_size
// faults; each case runs in a child process, so a fault is one failed case,
// not the end of the program. The sizes are those each struct has had since
// ABI 1 (git history of include/vpmm.h, from the 0.1 clean-up on); when a
// struct grows, the static_asserts below fail until its old size is added.
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "check.hpp"
#include "vpmm.h"

namespace {

// Every size since ABI 1, today's last.
const std::vector<uint32_t> kConfigSizes = {112, 120, 128, 136, 144, 152, 160, 176, 184};
const std::vector<uint32_t> kAttrsSizes = {24, 32};
const std::vector<uint32_t> kTagStatsSizes = {48, 56};
const std::vector<uint32_t> kStatsSizes = {376, 392, 408, 424, 464, 488, 528};
const std::vector<uint32_t> kRegionInfoSizes = {72};
const std::vector<uint32_t> kOptionInfoSizes = {48};
const std::vector<uint32_t> kFieldInfoSizes = {24};
const std::vector<uint32_t> kIpcEntrySizes = {40};
const std::vector<uint32_t> kIpcStatsSizes = {80};
const std::vector<uint32_t> kLedgerMemberSizes = {104, 128};
const std::vector<uint32_t> kLedgerInfoSizes = {64, 88};
static_assert(sizeof(vpmm_config) == 184, "vpmm_config grew: add its new size to kConfigSizes");
static_assert(sizeof(vpmm_alloc_attrs) == 32, "vpmm_alloc_attrs grew: add its new size to kAttrsSizes");
static_assert(sizeof(vpmm_tag_stats) == 56, "vpmm_tag_stats grew: add its new size to kTagStatsSizes");
static_assert(sizeof(vpmm_stats) == 528, "vpmm_stats grew: add its new size to kStatsSizes");
static_assert(sizeof(vpmm_region_info) == 72, "vpmm_region_info grew: add its new size");
static_assert(sizeof(vpmm_option_info) == 48, "vpmm_option_info grew: add its new size");
static_assert(sizeof(vpmm_field_info) == 24, "vpmm_field_info grew: add its new size");
static_assert(sizeof(vpmm_ipc_entry) == 40, "vpmm_ipc_entry grew: add its new size");
static_assert(sizeof(vpmm_ipc_stats) == 80, "vpmm_ipc_stats grew: add its new size");
static_assert(sizeof(vpmm_ledger_member) == 128, "vpmm_ledger_member grew: add its new size");
static_assert(sizeof(vpmm_ledger_info) == 88, "vpmm_ledger_info grew: add its new size");

// `bytes` of memory that end where a PROT_NONE page begins; the bytes
// before them on the same page are a canary (0xa5) that must stay.
struct Fenced {
  unsigned char* base = nullptr;
  size_t page = 0;
  unsigned char* p = nullptr;
  explicit Fenced(size_t bytes) {
    page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    const size_t pages = (bytes + page - 1) / page + 1;
    void* m = mmap(nullptr, (pages + 1) * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return;
    base = static_cast<unsigned char*>(m);
    mprotect(base + pages * page, page, PROT_NONE);
    p = base + pages * page - bytes;
    std::memset(base, 0xa5, pages * page);
  }
  bool canary_intact() const {
    for (unsigned char* q = base; q < p; ++q)
      if (*q != 0xa5) return false;
    return true;
  }
  template <typename T>
  T* as() const {
    return reinterpret_cast<T*>(p);
  }
};

// Runs fn in a child; "" when it exited 0, else what happened.
std::string in_child(const std::function<std::string()>& fn) {
  std::fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    std::string e = fn();
    if (!e.empty()) std::fprintf(stderr, "%s\n", e.c_str());
    std::fflush(stderr);
    _exit(e.empty() ? 0 : 1);
  }
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid) return "fork failed";
  if (WIFSIGNALED(status)) return "killed by signal " + std::to_string(WTERMSIG(status)) + " (touched past struct_size)";
  return WEXITSTATUS(status) == 0 ? "" : "failed (see above)";
}

void expect_all(const char* what, const std::vector<uint32_t>& sizes, const std::function<std::string(uint32_t)>& fn) {
  for (uint32_t n : sizes) {
    const std::string r = in_child([&] { return fn(n); });
    if (!r.empty()) std::printf("  %s, struct_size %u: %s\n", what, n, r.c_str());
    CHECK(r.empty());
  }
}

vpmm_pool* host_pool(bool exportable = false) {
  vpmm_config c;
  vpmm_config_init_defaults(&c);
  c.backend = VPMM_BACKEND_HOST;
  c.page_size = 64 << 10;
  c.va_size = 256 * c.page_size;
  c.host_capacity = 16 << 20;
  c.exportable = exportable;
  vpmm_pool* p = nullptr;
  return vpmm_pool_create(&c, &p) == VPMM_OK ? p : nullptr;
}

std::string status_is(vpmm_status st, vpmm_status want, const char* call) {
  if (st == want) return "";
  return std::string(call) + " returned " + vpmm_status_string(st) + ": " + vpmm_last_error();
}

}  // namespace

TEST("vpmm_config_init and _init_defaults write only a preset older struct_size") {
  for (int env = 0; env < 2; ++env)
    expect_all(env ? "vpmm_config_init" : "vpmm_config_init_defaults", kConfigSizes, [env](uint32_t n) {
      Fenced f(n);
      vpmm_config* c = f.as<vpmm_config>();
      std::memset(c, 0x5a, n);
      c->struct_size = n;
      if (env)
        vpmm_config_init(c);
      else
        vpmm_config_init_defaults(c);
      if (c->struct_size != n) return std::string("struct_size became ") + std::to_string(c->struct_size);
      if (c->backend != VPMM_BACKEND_AUTO || c->page_size != 0) return std::string("not the defaults");
      if (!f.canary_intact()) return std::string("wrote before the struct");
      return std::string();
    });
}

TEST("vpmm_config_init_sized writes min(struct_size, its own) bytes, with or without the environment") {
  for (uint32_t flags : {0u, uint32_t{VPMM_CONFIG_DEFAULTS_ONLY}})
    expect_all("vpmm_config_init_sized", kConfigSizes, [flags](uint32_t n) {
      Fenced f(n);
      vpmm_config* c = f.as<vpmm_config>();
      std::memset(c, 0x5a, n);  // garbage, struct_size included: the size is the argument
      setenv("VPMM_PAGE_SIZE", "128K", 1);
      vpmm_status st = vpmm_config_init_sized(c, n, flags);
      unsetenv("VPMM_PAGE_SIZE");
      if (st != VPMM_OK) return status_is(st, VPMM_OK, "vpmm_config_init_sized");
      if (c->struct_size != n) return std::string("struct_size became ") + std::to_string(c->struct_size);
      if (c->page_size != (flags ? 0u : 128u << 10)) return std::string("page_size ") + std::to_string(c->page_size);
      // A pool made from it: the fields past n take their defaults.
      c->backend = VPMM_BACKEND_HOST;
      c->host_capacity = 16 << 20;
      vpmm_pool* p = nullptr;
      st = vpmm_pool_create(c, &p);
      if (st != VPMM_OK) return status_is(st, VPMM_OK, "vpmm_pool_create");
      vpmm_pool_destroy(p);
      return std::string();
    });
}

TEST("vpmm_config_init_sized refuses what cannot be a vpmm_config, writing nothing") {
  vpmm_config c;
  std::memset(&c, 0x5a, sizeof c);
  CHECK_EQ(vpmm_config_init_sized(nullptr, sizeof c, 0), VPMM_ERR_INVALID_ARGUMENT);
  CHECK_EQ(vpmm_config_init_sized(&c, 4, 0), VPMM_ERR_INVALID_ARGUMENT);
  CHECK(std::strstr(vpmm_last_error(), "struct_size") != nullptr);
  CHECK_EQ(vpmm_config_init_sized(&c, 70000, 0), VPMM_ERR_INVALID_ARGUMENT);
  CHECK_EQ(vpmm_config_init_sized(&c, sizeof c, 0x80), VPMM_ERR_INVALID_ARGUMENT);
  CHECK(std::strstr(vpmm_last_error(), "flags") != nullptr);
  CHECK_EQ(c.struct_size, 0x5a5a5a5au);
  // A newer caller's larger struct: the library's bytes, the rest untouched.
  unsigned char big[sizeof c + 16];
  std::memset(big, 0x5a, sizeof big);
  CHECK_OK(vpmm_config_init_sized(reinterpret_cast<vpmm_config*>(big), sizeof big, VPMM_CONFIG_DEFAULTS_ONLY));
  CHECK_EQ(reinterpret_cast<vpmm_config*>(big)->struct_size, uint32_t(sizeof c));
  for (size_t i = sizeof c; i < sizeof big; ++i) CHECK_EQ(big[i], 0x5a);
}

TEST("vpmm_pool_create and vpmm_pool_get_config read and write only struct_size bytes") {
  expect_all("vpmm_pool_create / vpmm_pool_get_config", kConfigSizes, [](uint32_t n) {
    Fenced f(n);
    vpmm_config* c = f.as<vpmm_config>();
    if (vpmm_config_init_sized(c, n, VPMM_CONFIG_DEFAULTS_ONLY) != VPMM_OK) return std::string("init");
    c->backend = VPMM_BACKEND_HOST;
    c->host_capacity = 16 << 20;
    vpmm_pool* p = nullptr;
    vpmm_status st = vpmm_pool_create(c, &p);
    if (st != VPMM_OK) return status_is(st, VPMM_OK, "vpmm_pool_create");
    Fenced g(n);
    vpmm_config* out = g.as<vpmm_config>();
    out->struct_size = n;
    st = vpmm_pool_get_config(p, out);
    if (st != VPMM_OK) return status_is(st, VPMM_OK, "vpmm_pool_get_config");
    if (out->backend != VPMM_BACKEND_HOST || !g.canary_intact()) return std::string("get_config wrote wrong");
    vpmm_pool_destroy(p);
    return std::string();
  });
}

TEST("vpmm_pool_malloc_ex, vpmm_tag_scope_push_ex and vpmm_cupy_malloc read only struct_size bytes of attrs") {
  expect_all("alloc attrs", kAttrsSizes, [](uint32_t n) {
    vpmm_pool* p = host_pool();
    if (!p) return std::string("pool");
    Fenced f(n);
    vpmm_alloc_attrs* a = f.as<vpmm_alloc_attrs>();
    std::memset(a, 0, n);
    a->struct_size = n;
    a->tag = "w";
    a->flags = VPMM_ALLOC_HOST_BACKUP;
    void* q = nullptr;
    vpmm_status st = vpmm_pool_malloc_ex(p, 1 << 16, nullptr, a, &q);
    if (st != VPMM_OK) return status_is(st, VPMM_OK, "vpmm_pool_malloc_ex");
    st = vpmm_tag_scope_push_ex(a);
    if (st != VPMM_OK) return status_is(st, VPMM_OK, "vpmm_tag_scope_push_ex");
    void* r = nullptr;
    st = vpmm_pool_malloc(p, 1 << 16, nullptr, &r);
    vpmm_tag_scope_pop();
    if (st != VPMM_OK) return status_is(st, VPMM_OK, "vpmm_pool_malloc in the scope");
    if (vpmm_pool_pause(p, "w") != VPMM_OK || vpmm_pool_resume(p, "w") != VPMM_OK) return std::string("pause");
    vpmm_pool_free(p, q, nullptr);
    vpmm_pool_free(p, r, nullptr);
    vpmm_pool_destroy(p);
    // The CuPy hook keeps the attrs pointer and reads it at each malloc.
    setenv("VPMM_BACKEND", "host", 1);
    void* c = vpmm_cupy_malloc(a, 4096, 0);
    if (!c) return std::string("vpmm_cupy_malloc: ") + vpmm_last_error();
    vpmm_cupy_free(a, c, 0);
    return std::string();
  });
}

TEST("stats, tag stats, dump and the IPC records are written only up to struct_size") {
  expect_all("vpmm_pool_stats", kStatsSizes, [](uint32_t n) {
    vpmm_pool* p = host_pool();
    Fenced f(n);
    f.as<vpmm_stats>()->struct_size = n;
    vpmm_status st = vpmm_pool_stats(p, f.as<vpmm_stats>());
    vpmm_pool_destroy(p);
    return st != VPMM_OK ? status_is(st, VPMM_OK, "vpmm_pool_stats") : f.canary_intact() ? "" : "canary";
  });
  expect_all("vpmm_pool_tag_stats", kTagStatsSizes, [](uint32_t n) {
    vpmm_pool* p = host_pool();
    void* q = nullptr;
    vpmm_alloc_attrs a;
    std::memset(&a, 0, sizeof a);
    a.struct_size = sizeof a;
    a.tag = "w";
    vpmm_pool_malloc_ex(p, 4096, nullptr, &a, &q);
    Fenced f(n);
    f.as<vpmm_tag_stats>()->struct_size = n;
    vpmm_status st = vpmm_pool_tag_stats(p, "w", f.as<vpmm_tag_stats>());
    vpmm_pool_destroy(p);
    return st != VPMM_OK ? status_is(st, VPMM_OK, "vpmm_pool_tag_stats") : "";
  });
  expect_all("vpmm_pool_dump", kRegionInfoSizes, [](uint32_t n) {
    vpmm_pool* p = host_pool();
    void* q = nullptr;
    vpmm_pool_malloc(p, 1 << 16, nullptr, &q);
    size_t count = 0;
    vpmm_status st = vpmm_pool_dump(p, nullptr, 0, &count);
    Fenced f(static_cast<size_t>(n) * count);
    f.as<vpmm_region_info>()->struct_size = n;
    size_t got = 0;
    st = vpmm_pool_dump(p, f.as<vpmm_region_info>(), count, &got);
    vpmm_pool_destroy(p);
    return st != VPMM_OK ? status_is(st, VPMM_OK, "vpmm_pool_dump") : "";
  });
  expect_all("vpmm_pool_ipc_stats", kIpcStatsSizes, [](uint32_t n) {
    vpmm_pool* p = host_pool();
    Fenced f(n);
    f.as<vpmm_ipc_stats>()->struct_size = n;
    vpmm_status st = vpmm_pool_ipc_stats(p, f.as<vpmm_ipc_stats>());
    vpmm_pool_destroy(p);
    return st != VPMM_OK ? status_is(st, VPMM_OK, "vpmm_pool_ipc_stats") : "";
  });
  expect_all("vpmm_export_entry / vpmm_import_entry", kIpcEntrySizes, [](uint32_t n) {
    vpmm_pool* p = host_pool(true);
    vpmm_pool* q = host_pool(true);
    if (!p || !q) return std::string("exportable pools");
    void* x = nullptr;
    vpmm_pool_malloc(p, 1 << 16, nullptr, &x);
    vpmm_export* ex = nullptr;
    vpmm_status st = vpmm_pool_export(p, x, &ex);
    if (st != VPMM_OK) return status_is(st, VPMM_OK, "vpmm_pool_export");
    Fenced f(n);
    f.as<vpmm_ipc_entry>()->struct_size = n;
    st = vpmm_export_entry(ex, 0, f.as<vpmm_ipc_entry>());
    if (st != VPMM_OK) return status_is(st, VPMM_OK, "vpmm_export_entry");
    unsigned char desc[4096];
    int fds[16];
    size_t size = 0, nfds = 0;
    st = vpmm_export_descriptor(ex, desc, sizeof desc, &size, fds, 16, &nfds);
    if (st != VPMM_OK) return status_is(st, VPMM_OK, "vpmm_export_descriptor");
    vpmm_import* im = nullptr;
    st = vpmm_pool_import(q, desc, size, fds, nfds, &im);
    if (st != VPMM_OK) return status_is(st, VPMM_OK, "vpmm_pool_import");
    Fenced g(n);
    g.as<vpmm_ipc_entry>()->struct_size = n;
    st = vpmm_import_entry(im, 0, g.as<vpmm_ipc_entry>());
    if (st != VPMM_OK) return status_is(st, VPMM_OK, "vpmm_import_entry");
    vpmm_import_close(q, im);
    vpmm_export_close(p, ex);
    vpmm_pool_destroy(q);
    vpmm_pool_destroy(p);
    return std::string();
  });
}

TEST("the option table and struct facts are written only up to struct_size") {
  expect_all("vpmm_option_get / vpmm_option_find", kOptionInfoSizes, [](uint32_t n) {
    Fenced f(n);
    f.as<vpmm_option_info>()->struct_size = n;
    vpmm_status st = vpmm_option_get(0, f.as<vpmm_option_info>());
    if (st != VPMM_OK) return status_is(st, VPMM_OK, "vpmm_option_get");
    uint32_t i = 0;
    f.as<vpmm_option_info>()->struct_size = n;
    st = vpmm_option_find("page_size", f.as<vpmm_option_info>(), &i);
    return st != VPMM_OK ? status_is(st, VPMM_OK, "vpmm_option_find") : "";
  });
  expect_all("vpmm_struct_field", kFieldInfoSizes, [](uint32_t n) {
    Fenced f(n);
    f.as<vpmm_field_info>()->struct_size = n;
    vpmm_status st = vpmm_struct_field("vpmm_config", 0, f.as<vpmm_field_info>());
    return st != VPMM_OK ? status_is(st, VPMM_OK, "vpmm_struct_field") : "";
  });
}

TEST("vpmm_ledger_read writes members and info only up to their struct_size") {
  // One ledger for every size: two members (of two pools) to read.
  char name[64];
  std::snprintf(name, sizeof name, "vt-sizes-%d", static_cast<int>(getpid()));
  vpmm_ledger_remove(name);
  vpmm_config c;
  vpmm_config_init_defaults(&c);
  c.backend = VPMM_BACKEND_HOST;
  c.page_size = 64 << 10;
  c.va_size = 256 * c.page_size;
  c.host_capacity = 16 << 20;
  vpmm_pool* p = nullptr;
  vpmm_pool* q = nullptr;
  CHECK_OK(vpmm_pool_create_ledger(&c, name, &p));
  CHECK_OK(vpmm_pool_create_ledger(&c, name, &q));
  expect_all("vpmm_ledger_read members", kLedgerMemberSizes, [&name](uint32_t n) {
    Fenced f(2 * size_t{n});  // the second member ends at the fence; the pools are the parent's
    f.as<vpmm_ledger_member>()->struct_size = n;
    uint32_t count = 0;
    vpmm_status st = vpmm_ledger_read(name, 0, nullptr, f.as<vpmm_ledger_member>(), 2, &count);
    if (st != VPMM_OK) return status_is(st, VPMM_OK, "vpmm_ledger_read");
    if (count != 2) return std::string("members: ") + std::to_string(count);
    vpmm_ledger_member second;
    std::memcpy(&second, f.p + n, std::min<size_t>(n, sizeof second));
    if (second.struct_size != n || second.pid != getppid()) return std::string("the second member is not at its stride");
    return std::string(f.canary_intact() ? "" : "canary");
  });
  expect_all("vpmm_ledger_read info", kLedgerInfoSizes, [&name](uint32_t n) {
    Fenced f(n);
    f.as<vpmm_ledger_info>()->struct_size = n;
    vpmm_status st = vpmm_ledger_read(name, 0, f.as<vpmm_ledger_info>(), nullptr, 0, nullptr);
    if (st != VPMM_OK) return status_is(st, VPMM_OK, "vpmm_ledger_read");
    if (f.as<vpmm_ledger_info>()->n_members != 2 || f.as<vpmm_ledger_info>()->struct_size != n)
      return std::string("not the ledger's figures");
    return std::string(f.canary_intact() ? "" : "canary");
  });
  vpmm_pool_destroy(q);
  vpmm_pool_destroy(p);
  vpmm_ledger_remove(name);
}

TEST_MAIN()
