// Bad input at the C ABI. The contract (vpmm.h, "Conventions"): every error
// returns its status, leaves a sentence naming the call (and the offending
// value) in vpmm_last_error() on the same thread, leaves out-parameters
// untouched, and leaves the pool exactly as it was. expect_err() checks all
// four for every call below: the message is cleared before the call (so a
// stale message cannot pass), and the pool's stats and full region dump are
// compared before and after (event bookkeeping aside: a failed malloc may
// still record the lazy events it looked at).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "check.hpp"
#include "common/status.hpp"
#include "pool_util.hpp"
#include "vpmm_host_streams.h"

namespace {

constexpr uint64_t kPage = 64 << 10;

// --- pool snapshots ---------------------------------------------------------


struct Snap {
  vpmm_stats st;
  std::vector<vpmm_region_info> regs;
};

Snap take(vpmm_pool* p) {
  Snap s;
  s.st = vt::stats(p);
  s.st.n_events_recorded = 0;  // lazy events may be recorded by a failed malloc
  s.st.n_stream_waits = 0;
  s.st.n_oom = 0;
  s.regs = vt::regions(p);
  return s;
}

std::string same(const Snap& a, const Snap& b) {
  if (std::memcmp(&a.st, &b.st, sizeof a.st) != 0) {
    std::string diff = "stats differ:";
    const uint64_t* x = reinterpret_cast<const uint64_t*>(&a.st);
    const uint64_t* y = reinterpret_cast<const uint64_t*>(&b.st);
    for (size_t i = 0; i < sizeof a.st / 8; ++i)
      if (x[i] != y[i])
        diff += " [" + vt::stat_name(i) + ": " + std::to_string(x[i]) + " -> " +
                std::to_string(y[i]) + "]";
    return diff;
  }
  if (a.regs.size() != b.regs.size())
    return "region count " + std::to_string(a.regs.size()) + " -> " + std::to_string(b.regs.size());
  for (size_t i = 0; i < a.regs.size(); ++i) {
    const vpmm_region_info &r = a.regs[i], &s = b.regs[i];
    if (r.va != s.va || r.size != s.size || r.kind != s.kind || r.chunk_offset != s.chunk_offset ||
        r.chunk != s.chunk || r.handles != s.handles || r.stream != s.stream || r.id != s.id ||
        r.requested != s.requested)
      return "region " + std::to_string(i) + " differs";
  }
  return "";
}

// --- the checker --------------------------------------------------------------

template <class F>
void expect_err(int line, const char* text, vpmm_pool* pool, vpmm_status want, const char* name,
                const char* sub, F f) {
  Snap before;
  if (pool) before = take(pool);
  vpmm::fail(VPMM_OK, "%s", "");
  vpmm_status st = f();
  std::string msg = vpmm_last_error();
  std::vector<std::string> bad;
  if (st != want)
    bad.push_back(std::string("returned ") + vpmm_status_string(st) + ", wanted " +
                  vpmm_status_string(want));
  if (msg.empty()) bad.push_back("no message");
  if (name && msg.find(name) == std::string::npos) bad.push_back(std::string("message does not name ") + name);
  if (sub && msg.find(sub) == std::string::npos) bad.push_back(std::string("message lacks \"") + sub + "\"");
  if (pool) {
    std::string d = same(before, take(pool));
    if (!d.empty()) bad.push_back("pool changed: " + d);
  }
  if (bad.empty()) return;
  ++vt::case_failures();
  std::printf("  test_bad_input.cpp:%d: %s\n", line, text);
  for (const std::string& b : bad) std::printf("    - %s\n", b.c_str());
  std::printf("    message: \"%s\"\n", msg.c_str());
}

#define EXPECT_ERR(pool, expr, want, name) \
  expect_err(__LINE__, #expr, pool, want, name, nullptr, [&]() -> vpmm_status { return (expr); })
#define EXPECT_ERR_MSG(pool, expr, want, name, sub) \
  expect_err(__LINE__, #expr, pool, want, name, sub, [&]() -> vpmm_status { return (expr); })

// --- helpers ------------------------------------------------------------------

// Every variable vpmm_config_init reads, from the option table (never a
// copy). The process-wide settings stay: a run on the HIP emulator needs its
// VPMM_HIP_LIBRARY.
void clean_env() {
  for (uint32_t i = 0; i < vpmm_option_count(); ++i) {
    vpmm_option_info o;
    std::memset(&o, 0, sizeof o);
    o.struct_size = sizeof o;
    if (vpmm_option_get(i, &o) == VPMM_OK && o.env && o.kind != VPMM_OPTION_TEXT) unsetenv(o.env);
  }
}

vpmm_config host_config() {
  clean_env();
  vpmm_config c;
  vpmm_config_init(&c);
  c.backend = VPMM_BACKEND_HOST;
  c.page_size = kPage;
  c.va_size = 64 * kPage;
  c.host_capacity = 16 * kPage;
  return c;
}

vpmm_pool* make_pool() {
  vpmm_config c = host_config();
  vpmm_pool* p = nullptr;
  CHECK_OK(vpmm_pool_create(&c, &p));
  return p;
}

int visit_count(const vpmm_region_info*, void* u) {
  ++*static_cast<int*>(u);
  return 0;
}

void* const kSentinel = reinterpret_cast<void*>(0x5e47);

}  // namespace

TEST("NULL pool: every pool function fails with INVALID_ARGUMENT and names itself") {
  void* out = kSentinel;
  uint64_t u = 7;
  vpmm_stream s = kSentinel;
  vpmm_stats st;
  st.struct_size = sizeof st;
  vpmm_config cfg;
  cfg.struct_size = sizeof cfg;
  vpmm_tag_stats ts;
  ts.struct_size = sizeof ts;
  vpmm_alloc_attrs attrs;
  std::memset(&attrs, 0, sizeof attrs);
  attrs.struct_size = sizeof attrs;
  size_t n = 0;
  char text[64];
  int visited = 0;
  const int32_t IA = VPMM_ERR_INVALID_ARGUMENT;
  EXPECT_ERR(nullptr, vpmm_pool_malloc(nullptr, 8, nullptr, &out), IA, "vpmm_pool_malloc");
  EXPECT_ERR(nullptr, vpmm_pool_malloc_ex(nullptr, 8, nullptr, &attrs, &out), IA, "vpmm_pool_malloc_ex");
  EXPECT_ERR(nullptr, vpmm_pool_malloc_ex(nullptr, 8, nullptr, nullptr, &out), IA, "vpmm_pool_malloc_ex");
  EXPECT_ERR(nullptr, vpmm_pool_free(nullptr, &u, nullptr), IA, "vpmm_pool_free");
  EXPECT_ERR(nullptr, vpmm_pool_free(nullptr, nullptr, nullptr), IA, "vpmm_pool_free");
  EXPECT_ERR(nullptr, vpmm_pool_lookup(nullptr, &u, &out, &u), IA, "vpmm_pool_lookup");
  EXPECT_ERR(nullptr, vpmm_pool_stream_synchronize(nullptr, nullptr), IA, "vpmm_pool_stream_synchronize");
  EXPECT_ERR(nullptr, vpmm_pool_stream_create(nullptr, &s), IA, "vpmm_pool_stream_create");
  EXPECT_ERR(nullptr, vpmm_pool_stream_destroy(nullptr, kSentinel), IA, "vpmm_pool_stream_destroy");
  EXPECT_ERR(nullptr, vpmm_pool_stream_retire(nullptr, nullptr), IA, "vpmm_pool_stream_retire");
  EXPECT_ERR(nullptr, vpmm_pool_pause(nullptr, "t"), IA, "vpmm_pool_pause");
  EXPECT_ERR(nullptr, vpmm_pool_resume(nullptr, "t"), IA, "vpmm_pool_resume");
  EXPECT_ERR(nullptr, vpmm_pool_trim(nullptr, 0), IA, "vpmm_pool_trim");
  EXPECT_ERR(nullptr, vpmm_pool_tag_stats(nullptr, nullptr, &ts), IA, "vpmm_pool_tag_stats");
  EXPECT_ERR(nullptr, vpmm_pool_stats(nullptr, &st), IA, "vpmm_pool_stats");
  EXPECT_ERR(nullptr, vpmm_pool_dump(nullptr, nullptr, 0, &n), IA, "vpmm_pool_dump");
  EXPECT_ERR(nullptr, vpmm_pool_visit(nullptr, visit_count, &visited), IA, "vpmm_pool_visit");
  EXPECT_ERR(nullptr, vpmm_pool_dump_text(nullptr, text, sizeof text, &n), IA, "vpmm_pool_dump_text");
  EXPECT_ERR(nullptr, vpmm_pool_layout(nullptr, text, sizeof text, &n), IA, "vpmm_pool_layout");
  EXPECT_ERR(nullptr, vpmm_pool_check(nullptr), IA, "vpmm_pool_check");
  EXPECT_ERR(nullptr, vpmm_pool_get_config(nullptr, &cfg), IA, "vpmm_pool_get_config");
  CHECK_EQ(out, kSentinel);
  CHECK_EQ(s, kSentinel);
  CHECK_EQ(u, uint64_t(7));
  CHECK_EQ(n, size_t(0));
  CHECK_EQ(visited, 0);
  vpmm::fail(VPMM_OK, "%s", "");
  CHECK(vpmm_pool_backend_name(nullptr) == nullptr);
  CHECK(std::strstr(vpmm_last_error(), "vpmm_pool_backend_name") != nullptr);
  CHECK_EQ(vpmm_pool_destroy(nullptr), VPMM_OK);  // documented no-op
}

int oom_cb(vpmm_pool*, uint64_t, void*) { return 0; }
void pressure_cb(vpmm_pool*, int, uint64_t, void*) {}

TEST("NULL pool: limits, reservations and callbacks fail with INVALID_ARGUMENT") {
  const int32_t IA = VPMM_ERR_INVALID_ARGUMENT;
  vpmm_reservation* res = reinterpret_cast<vpmm_reservation*>(kSentinel);
  uint64_t size = 7, used = 7;
  EXPECT_ERR(nullptr, vpmm_pool_reserve(nullptr, 4096, VPMM_RESERVE_TRY, &res), IA, "vpmm_pool_reserve");
  EXPECT_ERR(nullptr, vpmm_pool_reserve_ex(nullptr, 4096, VPMM_RESERVE_BLOCK, 10, &res), IA,
             "vpmm_pool_reserve_ex");
  EXPECT_ERR(nullptr, vpmm_reservation_info(nullptr, res, &size, &used), IA, "vpmm_reservation_info");
  EXPECT_ERR(nullptr, vpmm_reservation_release(nullptr, res), IA, "vpmm_reservation_release");
  EXPECT_ERR(nullptr, vpmm_pool_set_limit(nullptr, 1 << 20), IA, "vpmm_pool_set_limit");
  EXPECT_ERR(nullptr, vpmm_pool_set_oom_callback(nullptr, oom_cb, nullptr), IA, "vpmm_pool_set_oom_callback");
  EXPECT_ERR(nullptr, vpmm_pool_set_pressure_callback(nullptr, pressure_cb, nullptr), IA,
             "vpmm_pool_set_pressure_callback");
  CHECK_EQ(static_cast<void*>(res), kSentinel);
  CHECK_EQ(size, uint64_t(7));
  CHECK_EQ(used, uint64_t(7));
  // The default pools and the PyTorch hooks check their arguments first.
  vpmm_pool* dp = static_cast<vpmm_pool*>(kSentinel);
  EXPECT_ERR(nullptr, vpmm_default_pool(0, nullptr), IA, "vpmm_default_pool");
  EXPECT_ERR(nullptr, vpmm_default_pool(-1, &dp), IA, "vpmm_default_pool");
  EXPECT_ERR(nullptr, vpmm_default_pool(64, &dp), IA, "vpmm_default_pool");
  CHECK_EQ(static_cast<void*>(dp), kSentinel);
  for (ptrdiff_t bad : {ptrdiff_t(0), ptrdiff_t(-5)}) {
    vpmm::fail(VPMM_OK, "%s", "");
    CHECK(vpmm_torch_malloc(bad, 0, nullptr) == nullptr);
    CHECK(std::strstr(vpmm_last_error(), "vpmm_torch_malloc") != nullptr);
  }
}

TEST("reservations: bad sizes, flags, unknown or released reservations") {
  vpmm_pool* p = make_pool();  // 16 pages of capacity
  vpmm_pool* other = make_pool();
  if (!p || !other) return;
  const int32_t IA = VPMM_ERR_INVALID_ARGUMENT;
  void* keep = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, 2 * kPage, nullptr, &keep));
  vpmm_reservation* live = nullptr;
  CHECK_OK(vpmm_pool_reserve(p, 4 * kPage, VPMM_RESERVE_TRY, &live));
  vpmm_reservation* theirs = nullptr;
  CHECK_OK(vpmm_pool_reserve(other, kPage, VPMM_RESERVE_TRY, &theirs));
  vpmm_reservation* gone = nullptr;
  CHECK_OK(vpmm_pool_reserve(p, kPage, VPMM_RESERVE_TRY, &gone));
  CHECK_OK(vpmm_reservation_release(p, gone));
  vpmm_reservation* out = reinterpret_cast<vpmm_reservation*>(kSentinel);
  EXPECT_ERR(p, vpmm_pool_reserve(p, kPage, VPMM_RESERVE_TRY, nullptr), IA, "vpmm_pool_reserve");
  EXPECT_ERR(p, vpmm_pool_reserve(p, 0, VPMM_RESERVE_TRY, &out), IA, "vpmm_pool_reserve");
  EXPECT_ERR(p, vpmm_pool_reserve(p, kPage, 0x8, &out), IA, "vpmm_pool_reserve");
  EXPECT_ERR(p, vpmm_pool_reserve(p, kPage, VPMM_RESERVE_BLOCK | VPMM_RESERVE_UPTO, &out), IA,
             "vpmm_pool_reserve");
  EXPECT_ERR(p, vpmm_pool_reserve(p, 17 * kPage, VPMM_RESERVE_TRY, &out), VPMM_ERR_OUT_OF_MEMORY,
             "vpmm_pool_reserve");
  EXPECT_ERR(p, vpmm_pool_reserve(p, 17 * kPage, VPMM_RESERVE_BLOCK, &out), VPMM_ERR_OUT_OF_MEMORY,
             "vpmm_pool_reserve");
  EXPECT_ERR(p, vpmm_pool_reserve_ex(p, 0, VPMM_RESERVE_TRY, 0, &out), IA, "vpmm_pool_reserve_ex");
  CHECK_EQ(static_cast<void*>(out), kSentinel);
  uint64_t size = 7;
  for (vpmm_reservation* bad : {static_cast<vpmm_reservation*>(nullptr), gone, theirs,
                                reinterpret_cast<vpmm_reservation*>(&size)}) {
    EXPECT_ERR(p, vpmm_reservation_info(p, bad, &size, nullptr), IA, "vpmm_reservation_info");
    EXPECT_ERR(p, vpmm_reservation_release(p, bad), IA, "vpmm_reservation_release");
    vpmm_alloc_attrs attrs;
    std::memset(&attrs, 0, sizeof attrs);
    attrs.struct_size = sizeof attrs;
    attrs.reservation = bad;
    void* x = kSentinel;
    if (bad) EXPECT_ERR(p, vpmm_pool_malloc_ex(p, kPage, nullptr, &attrs, &x), IA, "vpmm_pool_malloc_ex");
    CHECK_EQ(x, kSentinel);
  }
  CHECK_EQ(size, uint64_t(7));
  // A limit below what is mapped and cannot be trimmed (live memory).
  EXPECT_ERR(p, vpmm_pool_set_limit(p, kPage), VPMM_ERR_WRONG_STATE, "vpmm_pool_set_limit");
  // Everything still works.
  CHECK_OK(vpmm_reservation_info(p, live, &size, nullptr));
  CHECK_EQ(size, 4 * kPage);
  CHECK_OK(vpmm_reservation_release(p, live));
  CHECK_OK(vpmm_reservation_release(other, theirs));
  CHECK_OK(vpmm_pool_free(p, keep, nullptr));
  CHECK_OK(vpmm_pool_check(p));
  CHECK_OK(vpmm_pool_destroy(p));
  CHECK_OK(vpmm_pool_destroy(other));
}

TEST("NULL out pointers and NULL required arguments") {
  vpmm_pool* p = make_pool();
  if (!p) return;
  vpmm_config c = host_config();
  const int32_t IA = VPMM_ERR_INVALID_ARGUMENT;
  vpmm_alloc_attrs attrs;
  std::memset(&attrs, 0, sizeof attrs);
  attrs.struct_size = sizeof attrs;
  EXPECT_ERR(nullptr, vpmm_pool_create(&c, nullptr), IA, "vpmm_pool_create");
  EXPECT_ERR(p, vpmm_pool_malloc(p, 8, nullptr, nullptr), IA, "vpmm_pool_malloc");
  EXPECT_ERR(p, vpmm_pool_malloc(p, 4 * kPage, nullptr, nullptr), IA, "vpmm_pool_malloc");
  EXPECT_ERR(p, vpmm_pool_malloc_ex(p, 8, nullptr, &attrs, nullptr), IA, "vpmm_pool_malloc_ex");
  EXPECT_ERR(p, vpmm_pool_stream_create(p, nullptr), IA, "vpmm_pool_stream_create");
  EXPECT_ERR(p, vpmm_pool_stats(p, nullptr), IA, "vpmm_pool_stats");
  EXPECT_ERR(p, vpmm_pool_dump(p, nullptr, 0, nullptr), IA, "vpmm_pool_dump");
  EXPECT_ERR(p, vpmm_pool_visit(p, nullptr, nullptr), IA, "vpmm_pool_visit");
  EXPECT_ERR(p, vpmm_pool_get_config(p, nullptr), IA, "vpmm_pool_get_config");
  EXPECT_ERR(p, vpmm_pool_tag_stats(p, nullptr, nullptr), IA, "vpmm_pool_tag_stats");
  EXPECT_ERR(p, vpmm_pool_lookup(p, nullptr, nullptr, nullptr), IA, "vpmm_pool_lookup");
  EXPECT_ERR(nullptr, vpmm_host_stream_create(nullptr), IA, "vpmm_host_stream_create");
  EXPECT_ERR(nullptr, vpmm_host_stream_launch(nullptr, nullptr, nullptr), IA, "vpmm_host_stream_launch");
  // Struct sizes the library cannot have been compiled against.
  vpmm_stats st;
  st.struct_size = 0;
  EXPECT_ERR_MSG(p, vpmm_pool_stats(p, &st), IA, "vpmm_pool_stats", "struct_size");
  vpmm_config got;
  got.struct_size = 0;
  EXPECT_ERR_MSG(p, vpmm_pool_get_config(p, &got), IA, "vpmm_pool_get_config", "struct_size");
  vpmm_tag_stats ts;
  ts.struct_size = 0;
  EXPECT_ERR_MSG(p, vpmm_pool_tag_stats(p, nullptr, &ts), IA, "vpmm_pool_tag_stats", "struct_size");
  CHECK_OK(vpmm_pool_check(p));
  CHECK_OK(vpmm_pool_destroy(p));
}

TEST("size 0, sizes that overflow when rounded, and sizes beyond VA or capacity") {
  vpmm_pool* p = make_pool();  // 64 KiB pages, 64-page VA chunks, 16 pages of capacity
  if (!p) return;
  void* keep = nullptr;  // some state worth preserving
  CHECK_OK(vpmm_pool_malloc(p, 3 * kPage, nullptr, &keep));
  void* small = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, 100, nullptr, &small));
  vpmm_alloc_attrs attrs;
  std::memset(&attrs, 0, sizeof attrs);
  attrs.struct_size = sizeof attrs;
  void* out = kSentinel;
  const int32_t IA = VPMM_ERR_INVALID_ARGUMENT, OOM = VPMM_ERR_OUT_OF_MEMORY;
  EXPECT_ERR_MSG(p, vpmm_pool_malloc(p, 0, nullptr, &out), IA, "vpmm_pool_malloc", "size 0");
  EXPECT_ERR(p, vpmm_pool_malloc_ex(p, 0, nullptr, &attrs, &out), IA, "vpmm_pool_malloc_ex");
  EXPECT_ERR_MSG(p, vpmm_pool_malloc(p, UINT64_MAX, nullptr, &out), IA, "vpmm_pool_malloc",
                 "18446744073709551615");
  EXPECT_ERR(p, vpmm_pool_malloc(p, UINT64_MAX - kPage + 2, nullptr, &out), IA, "vpmm_pool_malloc");
  EXPECT_ERR(p, vpmm_pool_malloc_ex(p, UINT64_MAX, nullptr, &attrs, &out), IA, "vpmm_pool_malloc_ex");
  // Page-aligned but absurd: no VA for it.
  EXPECT_ERR(p, vpmm_pool_malloc(p, UINT64_MAX - kPage + 1, nullptr, &out), OOM, "vpmm_pool_malloc");
  EXPECT_ERR(p, vpmm_pool_malloc(p, 1ull << 62, nullptr, &out), OOM, "vpmm_pool_malloc");
  // Beyond the VA chunk (a new chunk would be needed) and beyond capacity.
  EXPECT_ERR(p, vpmm_pool_malloc(p, 65 * kPage, nullptr, &out), OOM, "vpmm_pool_malloc");
  EXPECT_ERR(p, vpmm_pool_malloc(p, 1ull << 40, nullptr, &out), OOM, "vpmm_pool_malloc");
  // Inside VA, beyond capacity (16 pages: 3 + 1 small page in use).
  EXPECT_ERR(p, vpmm_pool_malloc(p, 13 * kPage, nullptr, &out), OOM, "vpmm_pool_malloc");
  EXPECT_ERR(p, vpmm_pool_malloc(p, 20 * kPage, nullptr, &out), OOM, "vpmm_pool_malloc");
  CHECK_EQ(out, kSentinel);
  // The pool still works, up to exactly its capacity.
  void* rest = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, 12 * kPage, nullptr, &rest));
  vt::fill(rest, 12 * kPage, 1);
  CHECK(vt::verify(rest, 12 * kPage, 1));
  CHECK_EQ(vt::stats(p).mapped_bytes, 16 * kPage);
  EXPECT_ERR(p, vpmm_pool_malloc(p, kPage, nullptr, &out), OOM, "vpmm_pool_malloc");
  CHECK_OK(vpmm_pool_free(p, rest, nullptr));
  CHECK_OK(vpmm_pool_free(p, keep, nullptr));
  CHECK_OK(vpmm_pool_free(p, small, nullptr));
  CHECK_OK(vpmm_pool_check(p));
  CHECK_OK(vpmm_pool_destroy(p));
}

TEST("double free, foreign, interior and another pool's pointers are UNKNOWN_POINTER") {
  vpmm_pool* p = make_pool();
  vpmm_pool* other = make_pool();
  if (!p || !other) return;
  const int32_t UP = VPMM_ERR_UNKNOWN_POINTER;
  void *big = nullptr, *gone = nullptr, *sm = nullptr, *sm_gone = nullptr, *theirs = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, 3 * kPage + 10, nullptr, &big));
  CHECK_OK(vpmm_pool_malloc(p, 2 * kPage, nullptr, &gone));
  CHECK_OK(vpmm_pool_malloc(p, 300, nullptr, &sm));
  CHECK_OK(vpmm_pool_malloc(p, 300, nullptr, &sm_gone));
  CHECK_OK(vpmm_pool_malloc(other, 2 * kPage, nullptr, &theirs));
  vt::fill(big, 3 * kPage, 1);
  CHECK_OK(vpmm_pool_free(p, gone, nullptr));
  CHECK_OK(vpmm_pool_free(p, sm_gone, nullptr));
  char* c_big = static_cast<char*>(big);
  char* c_sm = static_cast<char*>(sm);
  EXPECT_ERR_MSG(p, vpmm_pool_free(p, gone, nullptr), UP, "vpmm_pool_free", "freed");
  EXPECT_ERR_MSG(p, vpmm_pool_free(p, sm_gone, nullptr), UP, "vpmm_pool_free", "freed");
  int on_stack = 0;
  void* on_heap = std::malloc(64);
  EXPECT_ERR(p, vpmm_pool_free(p, &on_stack, nullptr), UP, "vpmm_pool_free");
  EXPECT_ERR(p, vpmm_pool_free(p, on_heap, nullptr), UP, "vpmm_pool_free");
  std::free(on_heap);
  EXPECT_ERR(p, vpmm_pool_free(p, c_big + 8, nullptr), UP, "vpmm_pool_free");
  EXPECT_ERR(p, vpmm_pool_free(p, c_big + kPage, nullptr), UP, "vpmm_pool_free");
  EXPECT_ERR(p, vpmm_pool_free(p, c_big + 3 * kPage + 100, nullptr), UP, "vpmm_pool_free");  // padding
  EXPECT_ERR(p, vpmm_pool_free(p, c_sm + 16, nullptr), UP, "vpmm_pool_free");
  EXPECT_ERR(p, vpmm_pool_free(p, c_sm + 256, nullptr), UP, "vpmm_pool_free");
  // A block start in the slab that was never handed out.
  EXPECT_ERR(p, vpmm_pool_free(p, c_sm + 4 * 512, nullptr), UP, "vpmm_pool_free");
  // Another pool's pointer, both ways; neither pool changes.
  Snap theirs_before = take(other);
  EXPECT_ERR(p, vpmm_pool_free(p, theirs, nullptr), UP, "vpmm_pool_free");
  EXPECT_ERR(other, vpmm_pool_free(other, big, nullptr), UP, "vpmm_pool_free");
  CHECK_EQ(same(theirs_before, take(other)), std::string());
  // Nothing above freed anything: the real frees still work and data survived.
  CHECK(vt::verify(big, 3 * kPage, 1));
  CHECK_OK(vpmm_pool_free(p, big, nullptr));
  CHECK_OK(vpmm_pool_free(p, sm, nullptr));
  CHECK_OK(vpmm_pool_free(other, theirs, nullptr));
  CHECK_EQ(vt::stats(p).n_live, uint64_t(0));
  CHECK_OK(vpmm_pool_check(p));
  CHECK_OK(vpmm_pool_check(other));
  CHECK_OK(vpmm_pool_destroy(p));
  CHECK_OK(vpmm_pool_destroy(other));
}

TEST("a destroyed pool is reported as destroyed by every function") {
  vpmm_pool* p = make_pool();
  if (!p) return;
  void* x = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, kPage, nullptr, &x));
  CHECK_OK(vpmm_pool_destroy(p));
  void* out = kSentinel;
  vpmm_stats st;
  st.struct_size = sizeof st;
  size_t n = 0;
  vpmm_config cfg;
  cfg.struct_size = sizeof cfg;
  vpmm_stream s = kSentinel;
  const int32_t IA = VPMM_ERR_INVALID_ARGUMENT;
  EXPECT_ERR_MSG(nullptr, vpmm_pool_malloc(p, 8, nullptr, &out), IA, "vpmm_pool_malloc", "destroyed");
  EXPECT_ERR_MSG(nullptr, vpmm_pool_malloc(p, kPage, nullptr, &out), IA, "vpmm_pool_malloc", "destroyed");
  EXPECT_ERR_MSG(nullptr, vpmm_pool_free(p, x, nullptr), IA, "vpmm_pool_free", "destroyed");
  EXPECT_ERR_MSG(nullptr, vpmm_pool_lookup(p, x, nullptr, nullptr), IA, "vpmm_pool_lookup", "destroyed");
  EXPECT_ERR_MSG(nullptr, vpmm_pool_stats(p, &st), IA, "vpmm_pool_stats", "destroyed");
  EXPECT_ERR_MSG(nullptr, vpmm_pool_dump(p, nullptr, 0, &n), IA, "vpmm_pool_dump", "destroyed");
  EXPECT_ERR_MSG(nullptr, vpmm_pool_check(p), IA, "vpmm_pool_check", "destroyed");
  EXPECT_ERR_MSG(nullptr, vpmm_pool_get_config(p, &cfg), IA, "vpmm_pool_get_config", "destroyed");
  EXPECT_ERR_MSG(nullptr, vpmm_pool_stream_create(p, &s), IA, "vpmm_pool_stream_create", "destroyed");
  EXPECT_ERR_MSG(nullptr, vpmm_pool_stream_synchronize(p, nullptr), IA,
                 "vpmm_pool_stream_synchronize", "destroyed");
  EXPECT_ERR_MSG(nullptr, vpmm_pool_trim(p, 0), IA, "vpmm_pool_trim", "destroyed");
  EXPECT_ERR_MSG(nullptr, vpmm_pool_destroy(p), IA, "vpmm_pool_destroy", "destroyed");
  CHECK_EQ(out, kSentinel);
  CHECK_EQ(s, kSentinel);
  CHECK(vpmm_pool_backend_name(p) == nullptr);
}

TEST("bad configurations are rejected, naming the field; *out is untouched") {
  const int32_t IA = VPMM_ERR_INVALID_ARGUMENT;
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
    vpmm_config c = host_config();
    k.edit(&c);
    vpmm_pool* out = static_cast<vpmm_pool*>(kSentinel);
    std::string text = std::string("vpmm_pool_create with bad ") + k.what;
    expect_err(__LINE__, text.c_str(), nullptr, k.want, "vpmm_pool_create", k.what,
               [&] { return vpmm_pool_create(&c, &out); });
    CHECK_EQ(static_cast<void*>(out), kSentinel);
  }
  // Initial pages beyond the host capacity: OUT_OF_MEMORY, nothing leaks.
  vpmm_config c = host_config();
  c.initial_pages = 17;  // capacity is 16 pages
  vpmm_pool* out = static_cast<vpmm_pool*>(kSentinel);
  EXPECT_ERR(nullptr, vpmm_pool_create(&c, &out), VPMM_ERR_OUT_OF_MEMORY, "vpmm_pool_create");
  CHECK_EQ(static_cast<void*>(out), kSentinel);
}

// This machine has no GPU: asking for CUDA explicitly (config or environment)
// fails with UNSUPPORTED or BACKEND and says so. On a GPU machine the pool is
// simply created (nothing to check here).
TEST("CUDA backend without a GPU: UNSUPPORTED or BACKEND with a message") {
  for (bool via_env : {false, true}) {
    vpmm_config c = host_config();
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
    vpmm_pool* out = nullptr;
    vpmm::fail(VPMM_OK, "%s", "");
    vpmm_status st = vpmm_pool_create(&c, &out);
    if (st == VPMM_OK) {
      CHECK(std::strcmp(vpmm_pool_backend_name(out), "cuda") == 0);
      vpmm_pool_destroy(out);
    } else {
      CHECK(st == VPMM_ERR_UNSUPPORTED || st == VPMM_ERR_BACKEND);
      CHECK(out == nullptr);
      std::string msg = vpmm_last_error();
      CHECK(msg.find("cuda") != std::string::npos || msg.find("CUDA") != std::string::npos);
      if (msg.find("vpmm_pool_create") == std::string::npos) {
        ++vt::case_failures();
        std::printf("  CUDA failure message does not name vpmm_pool_create: \"%s\"\n", msg.c_str());
      }
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
      std::string text = std::string(k.var) + "=\"" + k.value + "\"" +
                         (null_config ? " (NULL config)" : "");
      vpmm::fail(VPMM_OK, "%s", "");
      vpmm_status st = null_config ? vpmm_pool_create(nullptr, &out) : vpmm_pool_create(&c, &out);
      std::string msg = vpmm_last_error();
      bool ok = st == VPMM_ERR_INVALID_ARGUMENT && msg.find("vpmm_pool_create") != std::string::npos &&
                msg.find(k.var) != std::string::npos &&
                msg.find(std::string("\"") + k.value + "\"") != std::string::npos &&
                out == static_cast<vpmm_pool*>(kSentinel);
      if (!ok) {
        ++vt::case_failures();
        std::printf("  %s: returned %s, message \"%s\"\n", text.c_str(), vpmm_status_string(st),
                    msg.c_str());
      }
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
    if (c.config_error == 0) std::printf("  VPMM_MAX_HANDLE_SIZE=%s was accepted\n", bad);
    CHECK(c.config_error != 0);
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

TEST("unknown or destroyed streams passed to the pool are INVALID_ARGUMENT") {
  vpmm_pool* p = make_pool();
  if (!p) return;
  vpmm_stream fake = reinterpret_cast<vpmm_stream>(0xdead0);
  vpmm_stream dead = nullptr;
  CHECK_OK(vpmm_host_stream_create(&dead));
  CHECK_OK(vpmm_host_stream_destroy(dead));
  void* x = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, 2 * kPage, nullptr, &x));
  void* out = kSentinel;
  const int32_t IA = VPMM_ERR_INVALID_ARGUMENT;
  for (vpmm_stream s : {fake, dead}) {
    EXPECT_ERR(p, vpmm_pool_malloc(p, 2 * kPage, s, &out), IA, "vpmm_pool_malloc");
    EXPECT_ERR(p, vpmm_pool_malloc(p, 100, s, &out), IA, "vpmm_pool_malloc");
    EXPECT_ERR(p, vpmm_pool_free(p, x, s), IA, "vpmm_pool_free");
    EXPECT_ERR(p, vpmm_pool_stream_synchronize(p, s), IA, "vpmm_pool_stream_synchronize");
  }
  EXPECT_ERR(p, vpmm_pool_stream_destroy(p, nullptr), IA, "vpmm_pool_stream_destroy");
  CHECK_EQ(out, kSentinel);
  CHECK_OK(vpmm_pool_free(p, x, nullptr));  // still live after the failed frees
  CHECK_OK(vpmm_pool_check(p));
  CHECK_OK(vpmm_pool_destroy(p));
}

TEST("host stream misuse") {
  const int32_t IA = VPMM_ERR_INVALID_ARGUMENT, WS = VPMM_ERR_WRONG_STATE;
  vpmm_stream s = nullptr;
  CHECK_OK(vpmm_host_stream_create(&s));
  EXPECT_ERR(nullptr, vpmm_host_stream_release(s), WS, "vpmm_host_stream_release");
  EXPECT_ERR(nullptr, vpmm_host_stream_release(nullptr), WS, "vpmm_host_stream_release");
  EXPECT_ERR(nullptr, vpmm_host_stream_destroy(nullptr), IA, "vpmm_host_stream_destroy");
  CHECK_OK(vpmm_host_stream_hold(s));
  EXPECT_ERR(nullptr, vpmm_host_stream_synchronize(s), WS, "vpmm_host_stream_synchronize");
  CHECK_OK(vpmm_host_stream_hold(s));  // holds nest
  CHECK_OK(vpmm_host_stream_release(s));
  EXPECT_ERR(nullptr, vpmm_host_stream_synchronize(s), WS, "vpmm_host_stream_synchronize");
  CHECK_OK(vpmm_host_stream_release(s));
  CHECK_OK(vpmm_host_stream_synchronize(s));
  EXPECT_ERR(nullptr, vpmm_host_stream_launch(s, nullptr, nullptr), IA, "vpmm_host_stream_launch");
  CHECK_OK(vpmm_host_stream_destroy(s));
  // A destroyed or never-created stream is unknown to every function.
  vpmm_stream fake = reinterpret_cast<vpmm_stream>(0xbad0);
  for (vpmm_stream x : {s, fake}) {
    EXPECT_ERR(nullptr, vpmm_host_stream_hold(x), IA, "vpmm_host_stream_hold");
    EXPECT_ERR(nullptr, vpmm_host_stream_release(x), IA, "vpmm_host_stream_release");
    EXPECT_ERR(nullptr, vpmm_host_stream_synchronize(x), IA, "vpmm_host_stream_synchronize");
    EXPECT_ERR(nullptr, vpmm_host_stream_launch(x, [](void*) {}, nullptr), IA,
               "vpmm_host_stream_launch");
    EXPECT_ERR(nullptr, vpmm_host_stream_destroy(x), IA, "vpmm_host_stream_destroy");
  }
}

TEST("dump and dump_text reject a NULL buffer with a capacity; short buffers are fine") {
  vpmm_pool* p = make_pool();
  if (!p) return;
  void* x = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, kPage, nullptr, &x));
  size_t n = 12345;
  EXPECT_ERR(p, vpmm_pool_dump(p, nullptr, 4, &n), VPMM_ERR_INVALID_ARGUMENT, "vpmm_pool_dump");
  CHECK_EQ(n, size_t(12345));
  size_t need = 12345;
  EXPECT_ERR(p, vpmm_pool_dump_text(p, nullptr, 16, &need), VPMM_ERR_INVALID_ARGUMENT,
             "vpmm_pool_dump_text");
  CHECK_EQ(need, size_t(12345));
  // Not errors: a buffer shorter than the dump gets a prefix and the total.
  std::vector<vpmm_region_info> all = vt::regions(p);
  CHECK(all.size() >= 2);
  vpmm_region_info one{};
  one.struct_size = sizeof one;
  CHECK_OK(vpmm_pool_dump(p, &one, 1, &n));
  CHECK_EQ(n, all.size());
  CHECK_EQ(one.va, all[0].va);
  char small[8];
  CHECK_OK(vpmm_pool_dump_text(p, small, sizeof small, &need));
  CHECK(need > sizeof small);
  CHECK_EQ(std::strlen(small), sizeof small - 1);
  CHECK_OK(vpmm_pool_free(p, x, nullptr));
  CHECK_OK(vpmm_pool_destroy(p));
}

TEST("pool_layout: the one layout string, sized, truncated, checked") {
  vpmm_pool* p = make_pool();
  if (!p) return;
  void* x = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, 2 * kPage, nullptr, &x));
  size_t need = 12345;
  EXPECT_ERR(p, vpmm_pool_layout(p, nullptr, 16, &need), VPMM_ERR_INVALID_ARGUMENT,
             "vpmm_pool_layout");
  CHECK_EQ(need, size_t(12345));
  CHECK_OK(vpmm_pool_layout(p, nullptr, 0, &need));
  std::string full(need, '\0');
  CHECK_OK(vpmm_pool_layout(p, &full[0], full.size(), nullptr));
  full.resize(std::strlen(full.c_str()));
  CHECK_EQ(full.size() + 1, need);
  CHECK_EQ(full.substr(0, 3), std::string("[2]"));  // the live allocation first
  CHECK_EQ(full, vt::layout(p));
  // The text dump prints the same notation for its regions.
  std::string text(4096, '\0');
  CHECK_OK(vpmm_pool_dump_text(p, &text[0], text.size(), nullptr));
  CHECK(text.find(full.substr(0, full.find(" | "))) != std::string::npos);
  // Truncation is not an error: a NUL-terminated prefix and the full size.
  char small[4];
  CHECK_OK(vpmm_pool_layout(p, small, sizeof small, &need));
  CHECK_EQ(need, full.size() + 1);
  CHECK_EQ(std::string(small), full.substr(0, 3));
  CHECK_OK(vpmm_pool_free(p, x, nullptr));
  CHECK_OK(vpmm_pool_destroy(p));
}

TEST("status strings: every code has a name, unknown codes a fixed one") {
  CHECK_EQ(std::string(vpmm_status_string(VPMM_OK)), std::string("VPMM_OK"));
  CHECK_EQ(std::string(vpmm_status_string(VPMM_ERR_OUT_OF_MEMORY)),
           std::string("VPMM_ERR_OUT_OF_MEMORY"));
  CHECK_EQ(std::string(vpmm_status_string(VPMM_ERR_TIMEOUT)), std::string("VPMM_ERR_TIMEOUT"));
  // 100 was VPMM_NO_OP before ABI 1's clean-up: no success is non-zero now.
  for (vpmm_status s : {-1, 9, 99, 100, 101, INT32_MAX, INT32_MIN}) {
    const char* name = vpmm_status_string(s);
    CHECK(name != nullptr);
    if (name) CHECK_EQ(std::string(name), std::string("VPMM_ERR_UNKNOWN"));
  }
}

TEST("lookup: interior pointers resolve; padding, free, hole and foreign memory do not") {
  vpmm_pool* p = make_pool();
  if (!p) return;
  void *big = nullptr, *sm = nullptr, *gone = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, kPage + 100, nullptr, &big));
  CHECK_OK(vpmm_pool_malloc(p, 300, nullptr, &sm));
  CHECK_OK(vpmm_pool_malloc(p, 2 * kPage, nullptr, &gone));
  CHECK_OK(vpmm_pool_free(p, gone, nullptr));
  char* b = static_cast<char*>(big);
  char* s = static_cast<char*>(sm);
  struct Hit {
    const void* ptr;
    void* base;
    uint64_t size;
  };
  for (const Hit& h : {Hit{b, big, kPage + 100}, Hit{b + 50, big, kPage + 100},
                       Hit{b + kPage + 99, big, kPage + 100}, Hit{s, sm, 300}, Hit{s + 299, sm, 300}}) {
    void* base = nullptr;
    uint64_t size = 0;
    CHECK_OK(vpmm_pool_lookup(p, h.ptr, &base, &size));
    CHECK_EQ(base, h.base);
    CHECK_EQ(size, h.size);
    CHECK_OK(vpmm_pool_lookup(p, h.ptr, nullptr, nullptr));  // outs are optional
  }
  // The hole at the end of the chunk.
  const vpmm_region_info last = vt::regions(p).back();
  CHECK_EQ(last.kind, VPMM_REGION_HOLE);
  int on_stack = 0;
  const int32_t UP = VPMM_ERR_UNKNOWN_POINTER;
  const std::vector<const void*> misses = {
      b + kPage + 100, b + 2 * kPage - 1,  // page padding after the allocation
      s + 300, s + 511,                    // class padding after the small block
      s + 512,                             // a freed small block
      gone, static_cast<char*>(gone) + kPage,  // a free region
      reinterpret_cast<const void*>(last.va + 8),  // a hole
      &on_stack};
  for (const void* miss : misses) {
    void* base = kSentinel;
    uint64_t size = 77;
    EXPECT_ERR(p, vpmm_pool_lookup(p, miss, &base, &size), UP, "vpmm_pool_lookup");
    CHECK_EQ(base, kSentinel);
    CHECK_EQ(size, uint64_t(77));
  }
  CHECK_OK(vpmm_pool_free(p, big, nullptr));
  CHECK_OK(vpmm_pool_free(p, sm, nullptr));
  CHECK_OK(vpmm_pool_destroy(p));
}

TEST_MAIN()
