// Streams (docs/misuse.md rows 19-24, 31, 43-47, 70-72): an unknown,
// destroyed or retired-and-destroyed stream passed to the pool is
// INVALID_ARGUMENT; a free on another stream than the malloc's is allowed;
// retire of a stream the pool never saw is a no-op; the host streams refuse
// what would deadlock (synchronize of a held stream or of one waiting on a
// held stream, from its own worker) with WRONG_STATE; and memory made on a
// stream that went away still pauses and resumes.
#include <cstring>
#include <vector>

#include "contract.hpp"

using namespace ct;

namespace {
vpmm_status g_worker_status = VPMM_OK;
vpmm_stream g_worker_stream = nullptr;
}  // namespace

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
    EXPECT_ERR(nullptr, vpmm_host_stream_launch(x, [](void*) {}, nullptr), IA, "vpmm_host_stream_launch");
    EXPECT_ERR(nullptr, vpmm_host_stream_destroy(x), IA, "vpmm_host_stream_destroy");
  }
}

TEST("row 31: free on another stream than the malloc's is allowed (stream-ordered)") {
  vpmm_pool* p = suite_pool().make();
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

TEST("row 43: vpmm_pool_stream_synchronize on a held stream is WRONG_STATE at once") {
  if (vt::host_only("a held host stream's WRONG_STATE is the host backend's; hipStreamSynchronize blocks"))
    return;
  vpmm_pool* p = suite_pool().make();
  if (!p) return;
  vpmm_stream s = nullptr;
  CHECK_OK(vpmm_host_stream_create(&s));
  CHECK_OK(vpmm_host_stream_hold(s));
  EXPECT_STATUS(vpmm_pool_stream_synchronize(p, s), WS, "vpmm_pool_stream_synchronize");
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
  CHECK_OK(vpmm_host_stream_launch(
      s, [](void*) { g_worker_status = vpmm_host_stream_synchronize(g_worker_stream); }, nullptr));
  CHECK_OK(vpmm_host_stream_synchronize(s));
  CHECK_EQ(g_worker_status, WS);
  g_worker_status = VPMM_OK;
  CHECK_OK(vpmm_host_stream_launch(
      s, [](void*) { g_worker_status = vpmm_host_stream_destroy(g_worker_stream); }, nullptr));
  CHECK_OK(vpmm_host_stream_synchronize(s));
  CHECK_EQ(g_worker_status, WS);
  CHECK_OK(vpmm_host_stream_destroy(s));  // still alive
}

TEST("row 45: retiring a stream the pool never saw (or any value) is a no-op returning VPMM_OK") {
  vpmm_pool* p = suite_pool().make();
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
  if (vt::host_only("only host streams can be validated; a hipStream_t, like a CUstream, cannot")) return;
  vpmm_pool* p = suite_pool().make();
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
  vpmm_pool* p = suite_pool().make();
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

TEST("allocations of a retired and destroyed stream still pause and resume") {
  vpmm_pool* p = host_pool(0, /*small_size=*/16 << 10);
  CHECK(p != nullptr);
  vpmm_stream s = nullptr;
  CHECK_OK(vpmm_pool_stream_create(p, &s));
  void* big = vt::malloc_tagged(p, 2 * kPage, "w", VPMM_ALLOC_HOST_BACKUP, s);
  void* small = vt::malloc_tagged(p, 1000, "w", VPMM_ALLOC_HOST_BACKUP, s);
  void* plain = vt::malloc_tagged(p, kPage, "p", 0, s);
  void* other = vt::malloc_tagged(p, kPage, "v", 0);
  CHECK(big && small && plain && other);
  vt::fill(big, 2 * kPage, 4);
  vt::fill(small, 1000, 5);
  CHECK_OK(vpmm_pool_stream_destroy(p, s));  // retires, then destroys
  uint64_t n = 0;
  CHECK_OK(vpmm_pool_pause_ex(p, "p", &n));  // no backup: nothing else is recorded first
  CHECK_EQ(n, uint64_t(1));
  CHECK_OK(vpmm_pool_resume(p, "p"));
  CHECK_OK(vpmm_pool_pause_ex(p, nullptr, &n));  // every tag: the dead stream blocks nothing
  CHECK_EQ(n, uint64_t(4));
  CHECK_OK(vpmm_pool_resume(p, nullptr));
  CHECK(vt::verify(big, 2 * kPage, 4));
  CHECK(vt::verify(small, 1000, 5));
  CHECK_OK(vpmm_pool_pause(p, "w"));
  CHECK_OK(vpmm_pool_resume(p, "w"));
  // A new stream may get any handle; the old slab serves it nothing.
  vpmm_stream s2 = nullptr;
  CHECK_OK(vpmm_pool_stream_create(p, &s2));
  void* fresh = vt::malloc_tagged(p, 1000, "w", 0, s2);
  CHECK(fresh != nullptr);
  CHECK_OK(vpmm_pool_free(p, small, s2));
  CHECK_OK(vpmm_pool_free(p, fresh, s2));
  for (void* x : {big, plain, other}) CHECK_OK(vpmm_pool_free(p, x, nullptr));
  CHECK_OK(vpmm_pool_check(p));
  CHECK_OK(vpmm_pool_trim(p, 0));
  CHECK_EQ(vt::stats(p).mapped_bytes, uint64_t(0));
  CHECK_OK(vpmm_pool_stream_destroy(p, s2));
  CHECK_OK(vpmm_pool_destroy(p));
}

TEST("retire after the stream is already gone: allocations made on it still pause") {
  vpmm_pool* p = host_pool();
  CHECK(p != nullptr);
  vpmm_stream s = nullptr;
  CHECK_OK(vpmm_host_stream_create(&s));
  void* w = vt::malloc_tagged(p, 2 * kPage, "w", VPMM_ALLOC_HOST_BACKUP, s);
  CHECK(w != nullptr);
  vt::fill(w, 2 * kPage, 6);
  CHECK_OK(vpmm_host_stream_destroy(s));    // destroyed first, against the contract
  CHECK_OK(vpmm_pool_stream_retire(p, s));  // the pool synchronises instead of recording
  uint64_t n = 0;
  CHECK_OK(vpmm_pool_pause_ex(p, "w", &n));
  CHECK_EQ(n, uint64_t(1));
  CHECK_OK(vpmm_pool_resume(p, "w"));
  CHECK(vt::verify(w, 2 * kPage, 6));
  CHECK_OK(vpmm_pool_free(p, w, nullptr));
  CHECK_OK(vpmm_pool_check(p));
  CHECK_OK(vpmm_pool_destroy(p));
}

TEST("destroy or synchronize of a stream waiting on a held stream: WRONG_STATE, never undrained or hung") {
  // The pool orders a stream after another's event (a harvest of memory
  // freed there) with a GPU-side wait; the host-stream API has it too.
  vpmm_stream a = nullptr, b = nullptr;
  CHECK_OK(vpmm_host_stream_create(&a));
  CHECK_OK(vpmm_host_stream_create(&b));
  CHECK_OK(vpmm_host_stream_hold(b));
  vpmm_pool* p = host_pool();
  CHECK(p != nullptr);
  // Memory freed on held b, wanted by a: Phase 2 orders a after b's event.
  void* x = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, 4 * kPage, b, &x));
  CHECK_OK(vpmm_pool_free(p, x, b));
  CHECK_OK(vpmm_pool_trim(p, UINT64_MAX));
  void* y = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, 4 * kPage, a, &y));
  Kernel k;
  std::vector<unsigned char> host(64);
  k.block = host.data();
  k.bytes = host.size();
  CHECK_OK(vpmm_host_stream_launch(a, touch_block, &k));
  CHECK(vt::stats(p).n_stream_waits > 0);  // a waits on b: neither call may pretend or hang
  {
    CHECK_EQ(vpmm_host_stream_synchronize(a), WS);
    CHECK_EQ(vpmm_host_stream_destroy(a), WS);
    CHECK_EQ(k.ran.load(), 0);
  }
  CHECK_OK(vpmm_host_stream_release(b));
  CHECK_OK(vpmm_pool_free(p, y, a));
  CHECK_OK(vpmm_pool_destroy(p));
  CHECK_OK(vpmm_host_stream_destroy(a));
  CHECK_EQ(k.ran.load(), 1);  // destroy returned after the work ran
  CHECK_OK(vpmm_host_stream_destroy(b));
}

namespace {
std::atomic<int> g_used_on_b{0};  // b's kernel ran
std::atomic<int> g_seen_by_a{-1};  // what a's next kernel saw of it
void use_on_b(void*) { g_used_on_b.store(1); }
void use_on_a(void*) { g_seen_by_a.store(g_used_on_b.load()); }

// PyTorch's pattern: an allocation made on `a`, read by queued work of the
// streams in `used_on` (Tensor.record_stream of each), freed by PyTorch on
// `a`; the next allocation of the same size on `a` and a kernel on `a`
// using it. Whatever the pool hands out, the kernel must not run before the
// last recorded stream's (held) work where the two allocations overlap.
void record_stream_case(const std::vector<vpmm_stream>& used_on) {
  vpmm_pool* dp = nullptr;
  CHECK_OK(vpmm_default_pool(0, &dp));
  // On a GPU machine the default pool is the device's: host streams are not its.
  if (!dp || std::strcmp(vpmm_pool_backend_name(dp), "host") != 0) return;
  vpmm_stream a = nullptr;
  CHECK_OK(vpmm_host_stream_create(&a));
  const ptrdiff_t n = 4 << 20;
  g_used_on_b.store(0);
  g_seen_by_a.store(-1);
  void* p = vpmm_torch_malloc(n, 0, a);
  CHECK(p != nullptr);
  vpmm_stream b = used_on.back();
  CHECK_OK(vpmm_host_stream_hold(b));
  CHECK_OK(vpmm_host_stream_launch(b, use_on_b, nullptr));  // b's read of p, queued
  for (vpmm_stream s : used_on) vpmm_torch_record_stream(p, s);
  vpmm_torch_record_stream(p, a);  // its own stream: changes nothing
  vpmm_torch_free(p, n, 0, a);
  void* q = vpmm_torch_malloc(n, 0, a);
  CHECK(q != nullptr);
  CHECK_OK(vpmm_host_stream_launch(a, use_on_a, nullptr));
  const char* pc = static_cast<const char*>(p);
  const char* qc = static_cast<const char*>(q);
  const bool overlap = qc < pc + n && pc < qc + n;
  // Reused: a's kernel waits for held b (synchronize says so instead of
  // running it). Not reused: nothing to wait for.
  if (overlap) CHECK_EQ(vpmm_host_stream_synchronize(a), WS);
  CHECK_OK(vpmm_host_stream_release(b));
  CHECK_OK(vpmm_host_stream_synchronize(a));
  CHECK_OK(vpmm_host_stream_synchronize(b));
  CHECK(!overlap || g_seen_by_a.load() == 1);
  vpmm_torch_free(q, n, 0, a);
  CHECK_OK(vpmm_pool_check(dp));
  CHECK_OK(vpmm_pool_stream_retire(dp, a));
  for (vpmm_stream s : used_on) CHECK_OK(vpmm_pool_stream_retire(dp, s));
  CHECK_OK(vpmm_host_stream_destroy(a));
}
}  // namespace

TEST("record_stream: a torch allocation read on another stream is not reused before that stream's work") {
  vpmm_stream b = nullptr;
  CHECK_OK(vpmm_host_stream_create(&b));
  record_stream_case({b});
  CHECK_OK(vpmm_host_stream_destroy(b));
}

TEST("record_stream on two streams: the first is waited for at the free, the last orders the reuse") {
  vpmm_stream b = nullptr, c = nullptr;
  CHECK_OK(vpmm_host_stream_create(&b));
  CHECK_OK(vpmm_host_stream_create(&c));
  record_stream_case({c, b});
  CHECK_OK(vpmm_host_stream_destroy(c));
  CHECK_OK(vpmm_host_stream_destroy(b));
}

TEST("record_stream on a stream destroyed before the free: the memory is still freed, nothing leaks") {
  vpmm_pool* dp = nullptr;
  CHECK_OK(vpmm_default_pool(0, &dp));
  if (!dp || std::strcmp(vpmm_pool_backend_name(dp), "host") != 0) return;
  vpmm_stream a = nullptr, gone = nullptr;
  CHECK_OK(vpmm_host_stream_create(&a));
  CHECK_OK(vpmm_host_stream_create(&gone));
  const ptrdiff_t n = 4 << 20;
  const uint64_t live_before = vt::stats(dp).n_live;
  void* p = vpmm_torch_malloc(n, 0, a);
  CHECK(p != nullptr);
  vpmm_torch_record_stream(p, gone);
  CHECK_OK(vpmm_host_stream_destroy(gone));  // the pool never saw it: no retire needed
  vpmm_torch_free(p, n, 0, a);
  CHECK_EQ(vt::stats(dp).n_live, live_before);
  void* base = kSentinel;
  EXPECT_ERR(dp, vpmm_pool_lookup(dp, p, &base, nullptr), UP, "vpmm_pool_lookup");
  CHECK_OK(vpmm_pool_check(dp));
  CHECK_OK(vpmm_pool_stream_retire(dp, a));
  CHECK_OK(vpmm_host_stream_destroy(a));
}
