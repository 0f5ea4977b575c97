// Handles (docs/misuse.md rows 1-3, 29, 60, 68, 69): a NULL or destroyed
// pool is INVALID_ARGUMENT from every function, naming it; a destroyed pool,
// a released reservation or a destroyed stream keeps its handle, which is
// never handed out again, so a stale handle can never name a live object.
#include <cstring>
#include <vector>

#include "contract.hpp"

using namespace ct;

namespace {

int visit_count(const vpmm_region_info*, void* u) {
  ++*static_cast<int*>(u);
  return 0;
}
int oom_cb(vpmm_pool*, uint64_t, void*) { return 0; }
void pressure_cb(vpmm_pool*, int, uint64_t, void*) {}

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
  vpmm_driver_profile prof;
  prof.struct_size = sizeof prof;
  EXPECT_ERR(nullptr, vpmm_pool_driver_profile(nullptr, &prof), IA, "vpmm_pool_driver_profile");
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

TEST("NULL pool: limits, reservations and callbacks fail with INVALID_ARGUMENT") {
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
  EXPECT_ERR_MSG(nullptr, vpmm_pool_malloc(p, 8, nullptr, &out), IA, "vpmm_pool_malloc", "destroyed");
  EXPECT_ERR_MSG(nullptr, vpmm_pool_malloc(p, kPage, nullptr, &out), IA, "vpmm_pool_malloc", "destroyed");
  EXPECT_ERR_MSG(nullptr, vpmm_pool_free(p, x, nullptr), IA, "vpmm_pool_free", "destroyed");
  EXPECT_ERR_MSG(nullptr, vpmm_pool_lookup(p, x, nullptr, nullptr), IA, "vpmm_pool_lookup", "destroyed");
  EXPECT_ERR_MSG(nullptr, vpmm_pool_stats(p, &st), IA, "vpmm_pool_stats", "destroyed");
  vpmm_driver_profile prof;
  prof.struct_size = sizeof prof;
  EXPECT_ERR_MSG(nullptr, vpmm_pool_driver_profile(p, &prof), IA, "vpmm_pool_driver_profile", "destroyed");
  EXPECT_ERR_MSG(nullptr, vpmm_pool_dump(p, nullptr, 0, &n), IA, "vpmm_pool_dump", "destroyed");
  EXPECT_ERR_MSG(nullptr, vpmm_pool_check(p), IA, "vpmm_pool_check", "destroyed");
  EXPECT_ERR_MSG(nullptr, vpmm_pool_get_config(p, &cfg), IA, "vpmm_pool_get_config", "destroyed");
  EXPECT_ERR_MSG(nullptr, vpmm_pool_stream_create(p, &s), IA, "vpmm_pool_stream_create", "destroyed");
  EXPECT_ERR_MSG(nullptr, vpmm_pool_stream_synchronize(p, nullptr), IA, "vpmm_pool_stream_synchronize",
                 "destroyed");
  EXPECT_ERR_MSG(nullptr, vpmm_pool_trim(p, 0), IA, "vpmm_pool_trim", "destroyed");
  EXPECT_ERR_MSG(nullptr, vpmm_pool_destroy(p), IA, "vpmm_pool_destroy", "destroyed");
  CHECK_EQ(out, kSentinel);
  CHECK_EQ(s, kSentinel);
  CHECK(vpmm_pool_backend_name(p) == nullptr);
}

TEST("row 29: a destroyed pool's pointer on a new pool is UNKNOWN_POINTER; its handle stays destroyed") {
  const PoolSpec spec = suite_pool();
  vpmm_pool* p = spec.make();
  if (!p) return;
  void* x = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, kPage, nullptr, &x));
  CHECK_OK(vpmm_pool_destroy(p));
  std::vector<vpmm_pool*> fresh;
  for (int i = 0; i < 4; ++i) fresh.push_back(spec.make());
  for (vpmm_pool* q : fresh) {
    CHECK(q != p);  // a destroyed handle is never handed out again
    if (q) EXPECT_STATUS(vpmm_pool_free(q, x, nullptr), UP, "vpmm_pool_free");
  }
  EXPECT_STATUS(vpmm_pool_free(p, x, nullptr), IA, "destroyed");
  EXPECT_STATUS(vpmm_pool_check(p), IA, "destroyed");
  for (vpmm_pool* q : fresh) CHECK_OK(vpmm_pool_destroy(q));
}

TEST("row 60: pause/resume/trim/tag stats on a NULL or destroyed pool are INVALID_ARGUMENT") {
  vpmm_pool* p = limited_pool();
  vpmm_pool_destroy(p);
  vpmm_tag_stats ts;
  std::memset(&ts, 0, sizeof ts);
  ts.struct_size = sizeof ts;
  for (vpmm_pool* q : {static_cast<vpmm_pool*>(nullptr), p}) {
    CHECK_EQ(vpmm_pool_pause(q, "t"), IA);
    CHECK_EQ(vpmm_pool_resume(q, nullptr), IA);
    CHECK_EQ(vpmm_pool_trim(q, 0), IA);
    CHECK_EQ(vpmm_pool_tag_stats(q, nullptr, &ts), IA);
  }
}

TEST("a released reservation's handle is never a new reservation's") {
  vpmm_pool* p = host_pool(100);
  CHECK(p != nullptr);
  std::vector<vpmm_reservation*> stale;
  for (int i = 0; i < 64; ++i) {
    vpmm_reservation* r = nullptr;
    CHECK_OK(vpmm_pool_reserve(p, 4 * kPage, 0, &r));
    for (vpmm_reservation* old : stale) CHECK(old != r);
    CHECK_OK(vpmm_reservation_release(p, r));
    stale.push_back(r);
  }
  vpmm_reservation* live = nullptr;
  CHECK_OK(vpmm_pool_reserve(p, 4 * kPage, 0, &live));
  CHECK_EQ(vpmm_reservation_release(p, stale[0]), IA);
  vpmm_alloc_attrs a;
  std::memset(&a, 0, sizeof a);
  a.struct_size = sizeof a;
  a.reservation = stale.back();
  void* x = nullptr;
  CHECK_EQ(vpmm_pool_malloc_ex(p, kPage, nullptr, &a, &x), IA);
  uint64_t size = 0, used = 1;
  CHECK_OK(vpmm_reservation_info(p, live, &size, &used));  // untouched by the stale calls
  CHECK_EQ(size, 4 * kPage);
  CHECK_EQ(used, uint64_t(0));
  CHECK_OK(vpmm_reservation_release(p, live));
  CHECK_OK(vpmm_pool_destroy(p));
}

TEST("a destroyed stream's handle never names the pool's copy stream") {
  vpmm_pool* p = host_pool();
  CHECK(p != nullptr);
  vpmm_stream s = nullptr;
  CHECK_OK(vpmm_pool_stream_create(p, &s));
  CHECK_OK(vpmm_pool_stream_destroy(p, s));
  void* w = vt::malloc_tagged(p, 2 * kPage, "w", VPMM_ALLOC_HOST_BACKUP);
  CHECK(w != nullptr);
  vt::fill(w, 2 * kPage, 3);
  CHECK_OK(vpmm_pool_pause(p, "w"));  // makes the copy stream
  CHECK_EQ(vpmm_pool_stream_destroy(p, s), IA);
  CHECK_EQ(vpmm_host_stream_destroy(s), IA);
  CHECK_OK(vpmm_pool_resume(p, "w"));
  CHECK(vt::verify(w, 2 * kPage, 3));
  CHECK_OK(vpmm_pool_pause(p, "w"));  // the copy stream still works
  CHECK_OK(vpmm_pool_resume(p, "w"));
  CHECK(vt::verify(w, 2 * kPage, 3));
  vpmm_stream s2 = nullptr;
  CHECK_OK(vpmm_pool_stream_create(p, &s2));
  CHECK(s2 != s);
  CHECK_OK(vpmm_pool_stream_destroy(p, s2));
  CHECK_OK(vpmm_pool_destroy(p));
}
