// The rows of docs/misuse.md that tests/unit/test_bad_input.cpp does not
// cover, one TEST per row, named "row N: ..." after the table. Each error
// row checks the status, that vpmm_last_error() names the call, that
// out-parameters are untouched and that the pool still passes its check.
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>
#include <atomic>
#include <thread>

#include "check.hpp"
#include "common/status.hpp"
#include "pool_util.hpp"
#include "vpmm_host_streams.h"

namespace {

constexpr uint64_t kPage = 64 << 10;
void* const kSentinel = reinterpret_cast<void*>(0x5e47);
const int32_t IA = VPMM_ERR_INVALID_ARGUMENT;

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
  c.page_size = kPage;
  c.va_size = 64 * kPage;
  c.host_capacity = 16 << 20;
  vt::use_test_backend(&c);
  return c;
}

vpmm_pool* make_pool() {
  vpmm_config c = host_config();
  vpmm_pool* p = nullptr;
  CHECK_OK(vpmm_pool_create(&c, &p));
  return p;
}

// The call returned `want`, with a message naming `call` (errors only).
#define EXPECT_STATUS(expr, want, call)                                                        \
  do {                                                                                         \
    vpmm::fail(VPMM_OK, "%s", "");                                                             \
    vpmm_status st_ = (expr);                                                                  \
    std::string msg_ = vpmm_last_error();                                                      \
    bool ok_ = st_ == (want) &&                                                                \
               (st_ == VPMM_OK || msg_.find(call) != std::string::npos);  \
    if (!ok_) {                                                                                \
      ++vt::case_failures();                                                                   \
      std::printf("  %s:%d: %s returned %s (wanted %s), message \"%s\"\n", __FILE__, __LINE__,  \
                  #expr, vpmm_status_string(st_), vpmm_status_string(want), msg_.c_str());     \
    }                                                                                          \
  } while (0)

vpmm_status g_worker_status = VPMM_OK;
vpmm_stream g_worker_stream = nullptr;

}  // namespace

TEST("row 28: free of the address one past the end of an allocation is UNKNOWN_POINTER") {
  vpmm_pool* p = make_pool();
  if (!p) return;
  void *a = nullptr, *b = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, kPage, nullptr, &a));
  CHECK_OK(vpmm_pool_malloc(p, 2 * kPage, nullptr, &b));  // so a + kPage is not a hole
  void* c = static_cast<char*>(a) + kPage;
  if (c != b) EXPECT_STATUS(vpmm_pool_free(p, c, nullptr), VPMM_ERR_UNKNOWN_POINTER, "vpmm_pool_free");
  EXPECT_STATUS(vpmm_pool_free(p, static_cast<char*>(b) + 2 * kPage, nullptr), VPMM_ERR_UNKNOWN_POINTER,
                "vpmm_pool_free");
  CHECK_EQ(vt::stats(p).n_live, uint64_t(2));
  CHECK_OK(vpmm_pool_free(p, a, nullptr));
  CHECK_OK(vpmm_pool_free(p, b, nullptr));
  CHECK_OK(vpmm_pool_check(p));
  CHECK_OK(vpmm_pool_destroy(p));
}

TEST("row 29: a destroyed pool's pointer on a new pool is UNKNOWN_POINTER; its handle stays destroyed") {
  vpmm_pool* p = make_pool();
  if (!p) return;
  void* x = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, kPage, nullptr, &x));
  CHECK_OK(vpmm_pool_destroy(p));
  std::vector<vpmm_pool*> fresh;
  for (int i = 0; i < 4; ++i) fresh.push_back(make_pool());
  for (vpmm_pool* q : fresh) {
    CHECK(q != p);  // a destroyed handle is never handed out again
    if (q) EXPECT_STATUS(vpmm_pool_free(q, x, nullptr), VPMM_ERR_UNKNOWN_POINTER, "vpmm_pool_free");
  }
  EXPECT_STATUS(vpmm_pool_free(p, x, nullptr), IA, "destroyed");
  EXPECT_STATUS(vpmm_pool_check(p), IA, "destroyed");
  for (vpmm_pool* q : fresh) CHECK_OK(vpmm_pool_destroy(q));
}

TEST("row 30: free(NULL) on a live pool is a no-op returning VPMM_OK") {
  vpmm_pool* p = make_pool();
  if (!p) return;
  vpmm_stats before = vt::stats(p);
  EXPECT_STATUS(vpmm_pool_free(p, nullptr, nullptr), VPMM_OK, "");
  CHECK_EQ(vt::stats(p).n_free, before.n_free);
  CHECK_OK(vpmm_pool_destroy(p));
}

TEST("row 31: free on another stream than the malloc's is allowed (stream-ordered)") {
  vpmm_pool* p = make_pool();
  if (!p) return;
  vpmm_stream a = nullptr, b = nullptr;
  CHECK_OK(vpmm_host_stream_create(&a));
  CHECK_OK(vpmm_host_stream_create(&b));
  void *x = nullptr, *y = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, 2 * kPage, a, &x));
  CHECK_OK(vpmm_pool_malloc(p, 300, a, &y));
  EXPECT_STATUS(vpmm_pool_free(p, x, b), VPMM_OK, "");
  EXPECT_STATUS(vpmm_pool_free(p, y, b), VPMM_OK, "");
  CHECK_EQ(vt::stats(p).n_live, uint64_t(0));
  CHECK_OK(vpmm_pool_check(p));
  CHECK_OK(vpmm_pool_destroy(p));
  CHECK_OK(vpmm_host_stream_destroy(a));
  CHECK_OK(vpmm_host_stream_destroy(b));
}

TEST("row 32: a struct_size larger than the library's is accepted; bytes beyond it are untouched") {
  // A caller compiled against a newer header: its structs are longer.
  struct BigConfig {
    vpmm_config c;
    unsigned char tail[64];
  } bc;
  std::memset(&bc, 0, sizeof bc);
  bc.c = host_config();
  bc.c.struct_size = sizeof bc;
  vpmm_pool* p = nullptr;
  EXPECT_STATUS(vpmm_pool_create(&bc.c, &p), VPMM_OK, "");
  if (!p) return;
  struct BigStats {
    vpmm_stats s;
    unsigned char tail[64];
  } bs;
  std::memset(&bs, 0xab, sizeof bs);
  bs.s.struct_size = sizeof bs;
  EXPECT_STATUS(vpmm_pool_stats(p, &bs.s), VPMM_OK, "");
  CHECK_EQ(bs.s.struct_size, uint32_t(sizeof bs));  // kept as the caller set it
  CHECK_EQ(bs.s.page_size, kPage);
  bool tail_untouched = true;
  for (unsigned char t : bs.tail) tail_untouched = tail_untouched && t == 0xab;
  CHECK(tail_untouched);
  struct BigConfigOut {
    vpmm_config c;
    unsigned char tail[64];
  } bo;
  std::memset(&bo, 0xcd, sizeof bo);
  bo.c.struct_size = sizeof bo;
  EXPECT_STATUS(vpmm_pool_get_config(p, &bo.c), VPMM_OK, "");
  CHECK_EQ(bo.c.page_size, kPage);
  tail_untouched = true;
  for (unsigned char t : bo.tail) tail_untouched = tail_untouched && t == 0xcd;
  CHECK(tail_untouched);
  CHECK_OK(vpmm_pool_destroy(p));
}

TEST("row 33: an absurd struct_size (> 64 KiB) is INVALID_ARGUMENT, nothing written") {
  vpmm_pool* p = make_pool();
  if (!p) return;
  vpmm_stats st;
  std::memset(&st, 0x11, sizeof st);
  st.struct_size = 0x7fffffff;
  EXPECT_STATUS(vpmm_pool_stats(p, &st), IA, "vpmm_pool_stats");
  CHECK_EQ(st.mapped_bytes, uint64_t(0x1111111111111111ull));
  vpmm_config cfg;
  std::memset(&cfg, 0x11, sizeof cfg);
  cfg.struct_size = 0x7fffffff;
  EXPECT_STATUS(vpmm_pool_get_config(p, &cfg), IA, "vpmm_pool_get_config");
  CHECK_EQ(cfg.page_size, uint64_t(0x1111111111111111ull));
  vpmm_config c = host_config();
  c.struct_size = 0x7fffffff;
  vpmm_pool* out = static_cast<vpmm_pool*>(kSentinel);
  EXPECT_STATUS(vpmm_pool_create(&c, &out), IA, "vpmm_pool_create");
  CHECK_EQ(static_cast<void*>(out), kSentinel);
  CHECK_OK(vpmm_pool_destroy(p));
}

TEST("row 34: a config_error set by hand to a value no variable has is INVALID_ARGUMENT") {
  for (int32_t bad : {-1, 999, INT32_MAX}) {
    vpmm_config c = host_config();
    c.config_error = bad;
    vpmm_pool* out = static_cast<vpmm_pool*>(kSentinel);
    EXPECT_STATUS(vpmm_pool_create(&c, &out), IA, "config_error");
    CHECK_EQ(static_cast<void*>(out), kSentinel);
  }
}

TEST("row 35: vpmm_config_init(NULL) is ignored") {
  vpmm_config_init(nullptr);  // must not crash
  CHECK(true);
}

TEST("row 36: a page_size that is a granularity multiple but no power of two works") {
  // vpmm.h: page_size is "a multiple of the backend granularity". 3 host
  // pages is one; the pool must either work with it or reject the field with
  // INVALID_ARGUMENT naming page_size. Today the VA reservation refuses the
  // alignment and Pool::reserve_chunk reports that as OUT_OF_MEMORY.
  vpmm_config c = host_config();
  c.page_size = 3 * 4096;
  c.va_size = 64 * c.page_size;
  vpmm_pool* out = nullptr;
  vpmm::fail(VPMM_OK, "%s", "");
  vpmm_status st = vpmm_pool_create(&c, &out);
  std::string msg = vpmm_last_error();
  bool ok = st == VPMM_OK || (st == IA && msg.find("page_size") != std::string::npos);
  if (!ok) std::printf("  page_size 12288: %s \"%s\"\n", vpmm_status_string(st), msg.c_str());
  CHECK(ok);
  if (out) {
    void* x = nullptr;
    CHECK_OK(vpmm_pool_malloc(out, 5 * c.page_size, nullptr, &x));
    CHECK_OK(vpmm_pool_free(out, x, nullptr));
    CHECK_OK(vpmm_pool_check(out));
    CHECK_OK(vpmm_pool_destroy(out));
  }
}

TEST("row 37: a va_size beyond the address space is OUT_OF_MEMORY") {
  vpmm_config c = host_config();
  c.va_size = 1ull << 62;
  vpmm_pool* out = static_cast<vpmm_pool*>(kSentinel);
  EXPECT_STATUS(vpmm_pool_create(&c, &out), VPMM_ERR_OUT_OF_MEMORY, "vpmm_pool_create");
  CHECK_EQ(static_cast<void*>(out), kSentinel);
}

TEST("row 38: an environment size with a leading zero is decimal, as vpmm.h says") {
  clean_env();
  setenv("VPMM_PAGES", "010", 1);
  vpmm_config c;
  vpmm_config_init(&c);
  CHECK_EQ(c.config_error, 0);
  CHECK_EQ(c.initial_pages, uint64_t(10));  // today 8: strtoull base 0 reads octal
  setenv("VPMM_PAGES", "08", 1);
  vpmm_config_init(&c);
  CHECK_EQ(c.config_error, 0);  // today malformed: "08" is not octal
  CHECK_EQ(c.initial_pages, uint64_t(8));
  clean_env();
}

TEST("row 39: malloc_ex attrs with a struct_size too small or too large is INVALID_ARGUMENT") {
  vpmm_pool* p = make_pool();
  if (!p) return;
  vpmm_alloc_attrs a;
  std::memset(&a, 0, sizeof a);
  for (uint32_t bad : {0u, 4u, 8u, 5000u, 0xffffffffu}) {
    a.struct_size = bad;
    void* out = kSentinel;
    EXPECT_STATUS(vpmm_pool_malloc_ex(p, kPage, nullptr, &a, &out), IA, "vpmm_pool_malloc_ex");
    CHECK_EQ(out, kSentinel);
  }
  CHECK_EQ(vt::stats(p).n_malloc, uint64_t(0));
  CHECK_OK(vpmm_pool_destroy(p));
}

TEST("row 40: malloc_ex with unknown flag bits is INVALID_ARGUMENT") {
  vpmm_pool* p = make_pool();
  if (!p) return;
  vpmm_alloc_attrs a;
  std::memset(&a, 0, sizeof a);
  a.struct_size = sizeof a;
  a.tag = "t";
  for (uint32_t bad : {2u, 0x80000000u, VPMM_ALLOC_HOST_BACKUP | 4u}) {
    a.flags = bad;
    void* out = kSentinel;
    EXPECT_STATUS(vpmm_pool_malloc_ex(p, kPage, nullptr, &a, &out), IA, "vpmm_pool_malloc_ex");
    CHECK_EQ(out, kSentinel);
  }
  CHECK_OK(vpmm_pool_destroy(p));
}

TEST("row 41: a tag longer than 63 bytes is INVALID_ARGUMENT (malloc_ex and region_push)") {
  vpmm_pool* p = make_pool();
  if (!p) return;
  std::string tag(64, 'x');
  vpmm_alloc_attrs a;
  std::memset(&a, 0, sizeof a);
  a.struct_size = sizeof a;
  a.tag = tag.c_str();
  void* out = kSentinel;
  EXPECT_STATUS(vpmm_pool_malloc_ex(p, kPage, nullptr, &a, &out), IA, "vpmm_pool_malloc_ex");
  EXPECT_STATUS(vpmm_pool_malloc_ex(p, 100, nullptr, &a, &out), IA, "vpmm_pool_malloc_ex");
  CHECK_EQ(out, kSentinel);
  EXPECT_STATUS(vpmm_region_push(tag.c_str(), 0), IA, "vpmm_region_push");
  EXPECT_STATUS(vpmm_region_pop(), VPMM_ERR_WRONG_STATE, "vpmm_region_pop");  // nothing was pushed
  tag.resize(63);
  EXPECT_STATUS(vpmm_pool_malloc_ex(p, kPage, nullptr, &a, &out), VPMM_OK, "");  // 63 is fine
  CHECK_OK(vpmm_pool_free(p, out, nullptr));
  CHECK_OK(vpmm_pool_destroy(p));
}

TEST("row 42: region_pop with no scope open is WRONG_STATE; push with unknown flags INVALID_ARGUMENT") {
  EXPECT_STATUS(vpmm_region_pop(), VPMM_ERR_WRONG_STATE, "vpmm_region_pop");
  EXPECT_STATUS(vpmm_region_push("t", 0x10), IA, "vpmm_region_push");
  EXPECT_STATUS(vpmm_region_pop(), VPMM_ERR_WRONG_STATE, "vpmm_region_pop");
  CHECK_OK(vpmm_region_push("t", 0));
  CHECK_OK(vpmm_region_pop());
  EXPECT_STATUS(vpmm_region_pop(), VPMM_ERR_WRONG_STATE, "vpmm_region_pop");
}

TEST("row 43: vpmm_pool_stream_synchronize on a held stream is WRONG_STATE at once") {
  if (vt::host_only("a held host stream's WRONG_STATE is the host backend's; hipStreamSynchronize blocks"))
    return;
  vpmm_pool* p = make_pool();
  if (!p) return;
  vpmm_stream s = nullptr;
  CHECK_OK(vpmm_host_stream_create(&s));
  CHECK_OK(vpmm_host_stream_hold(s));
  EXPECT_STATUS(vpmm_pool_stream_synchronize(p, s), VPMM_ERR_WRONG_STATE, "vpmm_pool_stream_synchronize");
  CHECK_OK(vpmm_host_stream_release(s));
  CHECK_OK(vpmm_pool_stream_synchronize(p, s));
  CHECK_OK(vpmm_pool_destroy(p));
  CHECK_OK(vpmm_host_stream_destroy(s));
}

TEST("row 44: a host stream synchronized or destroyed from its own worker is WRONG_STATE") {
  vpmm_stream s = nullptr;
  CHECK_OK(vpmm_host_stream_create(&s));
  g_worker_stream = s;
  g_worker_status = VPMM_OK;
  CHECK_OK(vpmm_host_stream_launch(s, [](void*) { g_worker_status = vpmm_host_stream_synchronize(g_worker_stream); },
                                   nullptr));
  CHECK_OK(vpmm_host_stream_synchronize(s));
  CHECK_EQ(g_worker_status, VPMM_ERR_WRONG_STATE);
  g_worker_status = VPMM_OK;
  CHECK_OK(vpmm_host_stream_launch(s, [](void*) { g_worker_status = vpmm_host_stream_destroy(g_worker_stream); },
                                   nullptr));
  CHECK_OK(vpmm_host_stream_synchronize(s));
  CHECK_EQ(g_worker_status, VPMM_ERR_WRONG_STATE);
  CHECK_OK(vpmm_host_stream_destroy(s));  // still alive
}

TEST("row 45: retiring a stream the pool never saw (or any value) is a no-op returning VPMM_OK") {
  vpmm_pool* p = make_pool();
  if (!p) return;
  vpmm_stream s = nullptr;
  CHECK_OK(vpmm_host_stream_create(&s));
  EXPECT_STATUS(vpmm_pool_stream_retire(p, s), VPMM_OK, "");
  EXPECT_STATUS(vpmm_pool_stream_retire(p, reinterpret_cast<vpmm_stream>(0x1234)), VPMM_OK, "");
  EXPECT_STATUS(vpmm_pool_stream_retire(p, s), VPMM_OK, "");  // twice
  CHECK_OK(vpmm_pool_check(p));
  CHECK_OK(vpmm_pool_destroy(p));
  CHECK_OK(vpmm_host_stream_destroy(s));
}

TEST("row 46: a stream passed again after retire + destroy is INVALID_ARGUMENT") {
  if (vt::host_only("only host streams can be validated; a hipStream_t, like a CUstream, cannot"))
    return;
  vpmm_pool* p = make_pool();
  if (!p) return;
  vpmm_stream s = nullptr;
  CHECK_OK(vpmm_pool_stream_create(p, &s));
  void* x = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, kPage, s, &x));
  CHECK_OK(vpmm_pool_stream_destroy(p, s));  // retires, then destroys
  void* out = kSentinel;
  EXPECT_STATUS(vpmm_pool_malloc(p, kPage, s, &out), IA, "vpmm_pool_malloc");
  EXPECT_STATUS(vpmm_pool_free(p, x, s), IA, "vpmm_pool_free");
  EXPECT_STATUS(vpmm_pool_stream_destroy(p, s), IA, "vpmm_pool_stream_destroy");
  CHECK_EQ(out, kSentinel);
  CHECK_OK(vpmm_pool_free(p, x, nullptr));
  CHECK_OK(vpmm_pool_check(p));
  CHECK_OK(vpmm_pool_destroy(p));
}

TEST("row 47: after retire + destroy of a stream with a cached small slab the pool never uses it") {
  // vpmm.h: after vpmm_pool_stream_retire "the stream must not be passed to
  // the pool again"; the pool itself must not pass it to the backend either.
  // A small slab of the stream kept cached (empty) becomes a free region of
  // the destroyed stream; trim then records an event on it.
  vpmm_pool* p = make_pool();
  if (!p) return;
  vpmm_stream s = nullptr;
  CHECK_OK(vpmm_host_stream_create(&s));
  void* a = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, 3968, s, &a));
  CHECK_OK(vpmm_pool_free(p, a, s));
  CHECK_OK(vpmm_pool_stream_retire(p, s));
  CHECK_OK(vpmm_host_stream_destroy(s));
  EXPECT_STATUS(vpmm_pool_trim(p, 0), VPMM_OK, "");
  void* b = nullptr;
  EXPECT_STATUS(vpmm_pool_malloc(p, 4 * kPage, nullptr, &b), VPMM_OK, "");
  EXPECT_STATUS(vpmm_pool_malloc(p, 3968, nullptr, &a), VPMM_OK, "");
  if (b) CHECK_OK(vpmm_pool_free(p, b, nullptr));
  if (a) CHECK_OK(vpmm_pool_free(p, a, nullptr));
  CHECK_OK(vpmm_pool_check(p));
  CHECK_OK(vpmm_pool_destroy(p));
}

TEST("row 48: a pool call from inside a vpmm_pool_visit callback works (no deadlock)") {
  vpmm_pool* p = make_pool();
  if (!p) return;
  void* x = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, kPage, nullptr, &x));
  struct Ctx {
    vpmm_pool* p;
    int calls;
    vpmm_status st;
  } ctx{p, 0, VPMM_OK};
  EXPECT_STATUS(vpmm_pool_visit(
                    p,
                    [](const vpmm_region_info*, void* u) -> int {
                      Ctx* c = static_cast<Ctx*>(u);
                      void* y = nullptr;
                      vpmm_status st = vpmm_pool_malloc(c->p, 100, nullptr, &y);
                      if (st == VPMM_OK) st = vpmm_pool_free(c->p, y, nullptr);
                      if (st == VPMM_OK) st = vpmm_pool_check(c->p);
                      if (st != VPMM_OK) c->st = st;
                      ++c->calls;
                      return 0;
                    },
                    &ctx),
                VPMM_OK, "");
  CHECK(ctx.calls >= 2);
  CHECK_EQ(ctx.st, VPMM_OK);
  CHECK_OK(vpmm_pool_free(p, x, nullptr));
  CHECK_OK(vpmm_pool_destroy(p));
}

// ---------------------------------------------------------------------------
// Rows 49-60: pause/resume, reservations and limits.
// ---------------------------------------------------------------------------
namespace {
vpmm_pool* misuse_pool(uint64_t limit_pages = 0) {
  vpmm_config c;
  vpmm_config_init(&c);
  c.page_size = kPage;
  c.va_size = 256 * kPage;
  c.host_capacity = 64 << 20;
  c.memory_limit = limit_pages * kPage;
  vt::use_test_backend(&c);
  vpmm_pool* p = nullptr;
  vpmm_pool_create(&c, &p);
  return p;
}
void* tag_alloc(vpmm_pool* p, uint64_t size, const char* tag, vpmm_reservation* r = nullptr,
                vpmm_status* st_out = nullptr) {
  vpmm_alloc_attrs a;
  std::memset(&a, 0, sizeof a);
  a.struct_size = sizeof a;
  a.tag = tag;
  a.flags = tag ? VPMM_ALLOC_HOST_BACKUP : 0;
  a.reservation = r;
  void* out = nullptr;
  vpmm_status st = vpmm_pool_malloc_ex(p, size, nullptr, &a, &out);
  if (st_out) *st_out = st;
  return out;
}
}  // namespace

TEST("row 49: pause of a tag the pool never saw is INVALID_ARGUMENT naming it") {
  vpmm_pool* p = misuse_pool();
  tag_alloc(p, kPage, "known");
  CHECK_EQ(vpmm_pool_pause(p, "typo"), VPMM_ERR_INVALID_ARGUMENT);
  CHECK(std::strstr(vpmm_last_error(), "typo") != nullptr);
  CHECK_EQ(vt::stats(p).paused_bytes, uint64_t(0));
  vpmm_pool_destroy(p);
}

TEST("row 50: pause of what is paused and resume of what is active are VPMM_OK, changing nothing") {
  vpmm_pool* p = misuse_pool();
  void* a = tag_alloc(p, kPage, "t");
  vt::fill(a, kPage, 3);
  uint64_t changed = 99;
  CHECK_OK(vpmm_pool_resume_ex(p, "t", &changed));
  CHECK_EQ(changed, uint64_t(0));
  CHECK_OK(vpmm_pool_resume(p, "t"));
  CHECK_OK(vpmm_pool_pause_ex(p, "t", &changed));
  CHECK_EQ(changed, uint64_t(1));
  CHECK_OK(vpmm_pool_pause_ex(p, "t", &changed));
  CHECK_EQ(changed, uint64_t(0));
  CHECK_OK(vpmm_pool_pause(p, "t"));
  CHECK_EQ(vt::stats(p).paused_bytes, kPage);
  CHECK_OK(vpmm_pool_resume_ex(p, "t", nullptr));  // n_changed may be NULL
  CHECK_EQ(vt::stats(p).paused_bytes, uint64_t(0));
  CHECK(vt::verify(a, kPage, 3));
  vpmm_pool_destroy(p);
}

TEST("row 51: resume racing pause from another thread: each call OK, changes balance, data intact") {
  vpmm_pool* p = misuse_pool();
  void* a = tag_alloc(p, 4 * kPage, "t");
  vt::fill(a, 4 * kPage, 7);
  std::atomic<int> bad{0};
  std::atomic<uint64_t> resumed{0};
  std::thread other([&] {
    for (int i = 0; i < 200; ++i) {
      uint64_t n = 99;
      vpmm_status st = vpmm_pool_resume_ex(p, "t", &n);
      if (st != VPMM_OK || n > 1) ++bad;
      resumed += n;
    }
  });
  uint64_t paused = 0;
  for (int i = 0; i < 200; ++i) {
    uint64_t n = 99;
    vpmm_status st = vpmm_pool_pause_ex(p, "t", &n);
    if (st != VPMM_OK || n > 1) ++bad;
    paused += n;
  }
  other.join();
  uint64_t n = 99;
  CHECK_OK(vpmm_pool_resume_ex(p, "t", &n));
  // The one allocation alternates: every pause that changed it was undone by
  // exactly one resume (the pool serialises the calls).
  CHECK_EQ(resumed.load() + n, paused);
  CHECK_EQ(bad.load(), 0);
  CHECK(vt::verify(a, 4 * kPage, 7));
  CHECK_OK(vpmm_pool_check(p));
  vpmm_pool_destroy(p);
}

TEST("row 52: free of a paused allocation is OK; its VA is returned, a second free UNKNOWN_POINTER") {
  vpmm_pool* p = misuse_pool();
  void* a = tag_alloc(p, 2 * kPage, "t");
  CHECK_OK(vpmm_pool_pause(p, "t"));
  CHECK_OK(vpmm_pool_free(p, a, nullptr));
  CHECK_EQ(vpmm_pool_free(p, a, nullptr), VPMM_ERR_UNKNOWN_POINTER);
  CHECK_EQ(vt::stats(p).paused_bytes, uint64_t(0));
  vpmm_pool_destroy(p);
}

TEST("row 53: an allocation overdrawing its reservation (default policy) is OUT_OF_MEMORY") {
  vpmm_pool* p = misuse_pool(16);
  vpmm_reservation* r = nullptr;
  CHECK_OK(vpmm_pool_reserve(p, 2 * kPage, VPMM_RESERVE_TRY, &r));
  vpmm_status st = VPMM_OK;
  CHECK(tag_alloc(p, 3 * kPage, nullptr, r, &st) == nullptr);
  CHECK_EQ(st, VPMM_ERR_OUT_OF_MEMORY);
  uint64_t used = 1;
  CHECK_OK(vpmm_reservation_info(p, r, nullptr, &used));
  CHECK_EQ(used, uint64_t(0));
  vpmm_reservation_release(p, r);
  vpmm_pool_destroy(p);
}

TEST("row 54: releasing a reservation twice, or using it after release, is INVALID_ARGUMENT") {
  vpmm_pool* p = misuse_pool(16);
  vpmm_reservation* r = nullptr;
  CHECK_OK(vpmm_pool_reserve(p, 2 * kPage, VPMM_RESERVE_TRY, &r));
  CHECK_OK(vpmm_reservation_release(p, r));
  CHECK_EQ(vpmm_reservation_release(p, r), VPMM_ERR_INVALID_ARGUMENT);
  vpmm_status st = VPMM_OK;
  CHECK(tag_alloc(p, kPage, nullptr, r, &st) == nullptr);
  CHECK_EQ(st, VPMM_ERR_INVALID_ARGUMENT);
  CHECK_EQ(vpmm_reservation_info(p, r, nullptr, nullptr), VPMM_ERR_INVALID_ARGUMENT);
  vpmm_pool_destroy(p);
}

TEST("row 55: a reservation of another pool is INVALID_ARGUMENT") {
  vpmm_pool* p = misuse_pool(16);
  vpmm_pool* q = misuse_pool(16);
  vpmm_reservation* r = nullptr;
  CHECK_OK(vpmm_pool_reserve(q, kPage, VPMM_RESERVE_TRY, &r));
  vpmm_status st = VPMM_OK;
  CHECK(tag_alloc(p, kPage, nullptr, r, &st) == nullptr);
  CHECK_EQ(st, VPMM_ERR_INVALID_ARGUMENT);
  CHECK_EQ(vpmm_reservation_release(p, r), VPMM_ERR_INVALID_ARGUMENT);
  CHECK_OK(vpmm_reservation_release(q, r));
  vpmm_pool_destroy(p);
  vpmm_pool_destroy(q);
}

TEST("row 56: a limit below what live memory needs is WRONG_STATE; the old limit stays") {
  vpmm_pool* p = misuse_pool(32);
  void* a = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, 8 * kPage, nullptr, &a));
  CHECK_EQ(vpmm_pool_set_limit(p, 4 * kPage), VPMM_ERR_WRONG_STATE);
  CHECK_EQ(vt::stats(p).capacity_bytes, 32 * kPage);
  vpmm_pool_destroy(p);
}

TEST("row 57: vpmm_region_pop with no open scope is WRONG_STATE") {
  CHECK_EQ(vpmm_region_pop(), VPMM_ERR_WRONG_STATE);
  CHECK(std::strstr(vpmm_last_error(), "vpmm_region_pop") != nullptr);
}

TEST("row 58: unknown allocation flags or a tag over 63 bytes are INVALID_ARGUMENT") {
  vpmm_pool* p = misuse_pool();
  vpmm_alloc_attrs a;
  std::memset(&a, 0, sizeof a);
  a.struct_size = sizeof a;
  a.flags = 0x100;
  void* out = nullptr;
  CHECK_EQ(vpmm_pool_malloc_ex(p, kPage, nullptr, &a, &out), VPMM_ERR_INVALID_ARGUMENT);
  std::string long_tag(64, 'x');
  a.flags = 0;
  a.tag = long_tag.c_str();
  CHECK_EQ(vpmm_pool_malloc_ex(p, kPage, nullptr, &a, &out), VPMM_ERR_INVALID_ARGUMENT);
  CHECK_EQ(vpmm_region_push(long_tag.c_str(), 0), VPMM_ERR_INVALID_ARGUMENT);
  CHECK_EQ(out, nullptr);
  vpmm_pool_destroy(p);
}

TEST("row 59: a blocking reservation larger than the whole capacity is OUT_OF_MEMORY at once") {
  vpmm_pool* p = misuse_pool(8);
  vpmm_reservation* r = nullptr;
  CHECK_EQ(vpmm_pool_reserve(p, 9 * kPage, VPMM_RESERVE_BLOCK, &r), VPMM_ERR_OUT_OF_MEMORY);
  CHECK_EQ(r, nullptr);
  vpmm_pool_destroy(p);
}

TEST("row 60: pause/resume/trim/tag stats on a NULL or destroyed pool are INVALID_ARGUMENT") {
  vpmm_pool* p = misuse_pool();
  vpmm_pool_destroy(p);
  vpmm_tag_stats ts;
  std::memset(&ts, 0, sizeof ts);
  ts.struct_size = sizeof ts;
  for (vpmm_pool* q : {static_cast<vpmm_pool*>(nullptr), p}) {
    CHECK_EQ(vpmm_pool_pause(q, "t"), VPMM_ERR_INVALID_ARGUMENT);
    CHECK_EQ(vpmm_pool_resume(q, nullptr), VPMM_ERR_INVALID_ARGUMENT);
    CHECK_EQ(vpmm_pool_trim(q, 0), VPMM_ERR_INVALID_ARGUMENT);
    CHECK_EQ(vpmm_pool_tag_stats(q, nullptr, &ts), VPMM_ERR_INVALID_ARGUMENT);
  }
}

TEST_MAIN()
