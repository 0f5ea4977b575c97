// Defects an adversarial review of the public API found, one test each, on
// the host backend: every test here failed (crashed, hung, or passed a
// limit) before its fix. docs/misuse.md has a row for each.
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "check.hpp"
#include "pool_util.hpp"
#include "vpmm_host_streams.h"

namespace {

constexpr uint64_t kPage = 64 << 10;

vpmm_pool* pool_with(uint64_t limit_pages, uint64_t small_size = 1, uint64_t capacity = 64ull << 20) {
  vpmm_config c;
  vpmm_config_init(&c);
  c.page_size = kPage;
  c.va_size = 512 * kPage;
  c.host_capacity = capacity;
  c.memory_limit = limit_pages * kPage;
  c.small_size = small_size;
  c.backend = VPMM_BACKEND_HOST;
  vpmm_pool* p = nullptr;
  if (vpmm_pool_create(&c, &p) != VPMM_OK) std::printf("  create: %s\n", vpmm_last_error());
  return p;
}

void* tagged(vpmm_pool* p, uint64_t size, const char* tag, vpmm_stream s, uint32_t flags = 0,
             vpmm_status* st = nullptr) {
  return vt::malloc_tagged(p, size, tag, flags, s, st);
}

vpmm_tag_stats tag_stats(vpmm_pool* p, const char* tag) {
  vpmm_tag_stats t;
  std::memset(&t, 0, sizeof t);
  t.struct_size = sizeof t;
  vpmm_pool_tag_stats(p, tag, &t);
  return t;
}

// Work queued on a held stream: it reads and rewrites its block when the
// stream is released, so a block unmapped under it faults.
struct Kernel {
  unsigned char* block;
  uint64_t bytes;
  std::atomic<int> ran{0};
  bool saw_pattern = false;
};
void touch_block(void* user) {
  auto* k = static_cast<Kernel*>(user);
  k->saw_pattern = vt::verify(k->block, k->bytes, 7);
  std::memset(k->block, 0x5a, k->bytes);
  k->ran = 1;
}

void release_later(vpmm_stream s, int ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  vpmm_host_stream_release(s);
}

}  // namespace

TEST("pause waits for work queued on another stream before a slab block's free") {
  vpmm_pool* p = pool_with(0, /*small_size=*/16 << 10);
  CHECK(p != nullptr);
  vpmm_stream t = nullptr;
  CHECK_OK(vpmm_pool_stream_create(p, &t));
  void* keep = tagged(p, 4096, "w", nullptr);
  void* used = tagged(p, 4096, "w", nullptr);
  CHECK(keep && used);
  vt::fill(used, 4096, 7);
  Kernel k;
  k.block = static_cast<unsigned char*>(used);
  k.bytes = 4096;
  CHECK_OK(vpmm_host_stream_hold(t));
  CHECK_OK(vpmm_host_stream_launch(t, touch_block, &k));
  CHECK_OK(vpmm_pool_free(p, used, t));  // t's queued work may still use the block
  std::thread releaser(release_later, t, 50);
  uint64_t n = 0;
  CHECK_OK(vpmm_pool_pause_ex(p, "w", &n));  // the slab stays mapped until t's work ran
  releaser.join();
  CHECK_EQ(n, uint64_t(1));
  CHECK_EQ(k.ran.load(), 1);
  CHECK(k.saw_pattern);
  CHECK_OK(vpmm_pool_resume(p, "w"));
  CHECK_OK(vpmm_pool_free(p, keep, nullptr));
  CHECK_OK(vpmm_pool_check(p));
  CHECK_OK(vpmm_pool_stream_destroy(p, t));
  CHECK_OK(vpmm_pool_destroy(p));
}

TEST("resume of several allocations never maps past the hard limit") {
  vpmm_pool* p = pool_with(10);
  CHECK(p != nullptr);
  void* a = tagged(p, 4 * kPage, "w", nullptr);
  void* b = tagged(p, 4 * kPage, "w", nullptr);
  CHECK(a && b);
  CHECK_OK(vpmm_pool_pause(p, "w"));
  // Cached free memory is mapped but charged to nobody: the capacity
  // charges alone would let both allocations map on top of it.
  void* cached = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, 3 * kPage, nullptr, &cached));
  CHECK_OK(vpmm_pool_free(p, cached, nullptr));
  CHECK_EQ(vt::stats(p).mapped_bytes, 3 * kPage);
  CHECK_OK(vpmm_pool_resume(p, "w"));  // each fits beside the cache, both do not: the cache goes
  vpmm_stats st = vt::stats(p);
  CHECK(st.mapped_bytes <= 10 * kPage);
  CHECK(st.peak_mapped_bytes <= 10 * kPage);
  CHECK_EQ(tag_stats(p, "w").n_live, uint64_t(2));
  // A live allocation in the way: what fits resumes, the rest stays paused.
  CHECK_OK(vpmm_pool_pause(p, "w"));
  void* other = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, 3 * kPage, nullptr, &other));
  CHECK_EQ(vpmm_pool_resume(p, "w"), VPMM_ERR_OUT_OF_MEMORY);
  st = vt::stats(p);
  CHECK(st.mapped_bytes <= 10 * kPage);
  CHECK(st.peak_mapped_bytes <= 10 * kPage);
  vpmm_tag_stats t = tag_stats(p, "w");
  CHECK_EQ(t.n_live, uint64_t(1));
  CHECK_EQ(t.n_paused, uint64_t(1));
  CHECK_OK(vpmm_pool_free(p, other, nullptr));
  CHECK_OK(vpmm_pool_resume(p, "w"));  // the rest, now that it fits
  CHECK_EQ(tag_stats(p, "w").n_live, uint64_t(2));
  CHECK_OK(vpmm_pool_check(p));
  CHECK_OK(vpmm_pool_destroy(p));
}

namespace {
struct Spill {
  vpmm_pool* pool;
  void* victim;
  int calls = 0;
  uint64_t bytes = 0;
};
int spill_on_oom(vpmm_pool* pool, uint64_t bytes, void* user) {
  auto* s = static_cast<Spill*>(user);
  ++s->calls;
  s->bytes = bytes;
  if (!s->victim) return 0;
  vpmm_pool_free(pool, s->victim, nullptr);
  s->victim = nullptr;
  vpmm_pool_trim(pool, 0);
  return 1;
}
}  // namespace

TEST("resume calls the OOM callback and retries when it asks") {
  vpmm_pool* p = pool_with(10);
  CHECK(p != nullptr);
  void* a = tagged(p, 4 * kPage, "w", nullptr, VPMM_ALLOC_HOST_BACKUP);
  void* b = tagged(p, 4 * kPage, "w", nullptr, VPMM_ALLOC_HOST_BACKUP);
  CHECK(a && b);
  vt::fill(a, 4 * kPage, 1);
  vt::fill(b, 4 * kPage, 2);
  CHECK_OK(vpmm_pool_pause(p, "w"));
  Spill s{p, nullptr};
  CHECK_OK(vpmm_pool_malloc(p, 3 * kPage, nullptr, &s.victim));
  CHECK_OK(vpmm_pool_set_oom_callback(p, spill_on_oom, &s));
  uint64_t n = 0;
  CHECK_OK(vpmm_pool_resume_ex(p, "w", &n));
  CHECK_EQ(n, uint64_t(2));  // both, across the retry
  CHECK_EQ(s.calls, 1);
  CHECK_EQ(s.bytes, 4 * kPage);
  CHECK(vt::verify(a, 4 * kPage, 1));
  CHECK(vt::verify(b, 4 * kPage, 2));
  vpmm_stats st = vt::stats(p);
  CHECK_EQ(st.n_oom_recovered, uint64_t(1));
  // A callback that declines: the failure stands and the rest stays paused.
  CHECK_OK(vpmm_pool_pause(p, "w"));
  CHECK_OK(vpmm_pool_malloc(p, 3 * kPage, nullptr, &s.victim));
  void* blocker = s.victim;
  s.victim = nullptr;
  CHECK_EQ(vpmm_pool_resume(p, "w"), VPMM_ERR_OUT_OF_MEMORY);
  CHECK(std::strstr(vpmm_last_error(), "declined") != nullptr);
  CHECK_EQ(tag_stats(p, "w").n_paused, uint64_t(1));
  CHECK_OK(vpmm_pool_free(p, blocker, nullptr));
  CHECK_OK(vpmm_pool_resume(p, "w"));
  CHECK(vt::verify(b, 4 * kPage, 2));
  CHECK_OK(vpmm_pool_destroy(p));
}

TEST("a released reservation's handle is never a new reservation's") {
  vpmm_pool* p = pool_with(100);
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
  CHECK_EQ(vpmm_reservation_release(p, stale[0]), VPMM_ERR_INVALID_ARGUMENT);
  vpmm_alloc_attrs a;
  std::memset(&a, 0, sizeof a);
  a.struct_size = sizeof a;
  a.reservation = stale.back();
  void* x = nullptr;
  CHECK_EQ(vpmm_pool_malloc_ex(p, kPage, nullptr, &a, &x), VPMM_ERR_INVALID_ARGUMENT);
  uint64_t size = 0, used = 1;
  CHECK_OK(vpmm_reservation_info(p, live, &size, &used));  // untouched by the stale calls
  CHECK_EQ(size, 4 * kPage);
  CHECK_EQ(used, uint64_t(0));
  CHECK_OK(vpmm_reservation_release(p, live));
  CHECK_OK(vpmm_pool_destroy(p));
}

TEST("a destroyed stream's handle never names the pool's copy stream") {
  vpmm_pool* p = pool_with(0);
  CHECK(p != nullptr);
  vpmm_stream s = nullptr;
  CHECK_OK(vpmm_pool_stream_create(p, &s));
  CHECK_OK(vpmm_pool_stream_destroy(p, s));
  void* w = tagged(p, 2 * kPage, "w", nullptr, VPMM_ALLOC_HOST_BACKUP);
  CHECK(w != nullptr);
  vt::fill(w, 2 * kPage, 3);
  CHECK_OK(vpmm_pool_pause(p, "w"));  // makes the copy stream
  CHECK_EQ(vpmm_pool_stream_destroy(p, s), VPMM_ERR_INVALID_ARGUMENT);
  CHECK_EQ(vpmm_host_stream_destroy(s), VPMM_ERR_INVALID_ARGUMENT);
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

TEST("allocations of a retired and destroyed stream still pause and resume") {
  vpmm_pool* p = pool_with(0, /*small_size=*/16 << 10);
  CHECK(p != nullptr);
  vpmm_stream s = nullptr;
  CHECK_OK(vpmm_pool_stream_create(p, &s));
  void* big = tagged(p, 2 * kPage, "w", s, VPMM_ALLOC_HOST_BACKUP);
  void* small = tagged(p, 1000, "w", s, VPMM_ALLOC_HOST_BACKUP);
  void* plain = tagged(p, kPage, "p", s);
  void* other = tagged(p, kPage, "v", nullptr);
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
  void* fresh = tagged(p, 1000, "w", s2);
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
  vpmm_pool* p = pool_with(0);
  CHECK(p != nullptr);
  vpmm_stream s = nullptr;
  CHECK_OK(vpmm_host_stream_create(&s));
  void* w = tagged(p, 2 * kPage, "w", s, VPMM_ALLOC_HOST_BACKUP);
  CHECK(w != nullptr);
  vt::fill(w, 2 * kPage, 6);
  CHECK_OK(vpmm_host_stream_destroy(s));  // destroyed first, against the contract
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
  vpmm_pool* p = pool_with(0);
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
    CHECK_EQ(vpmm_host_stream_synchronize(a), VPMM_ERR_WRONG_STATE);
    CHECK_EQ(vpmm_host_stream_destroy(a), VPMM_ERR_WRONG_STATE);
    CHECK_EQ(k.ran.load(), 0);
  }
  CHECK_OK(vpmm_host_stream_release(b));
  CHECK_OK(vpmm_pool_free(p, y, a));
  CHECK_OK(vpmm_pool_destroy(p));
  CHECK_OK(vpmm_host_stream_destroy(a));
  CHECK_EQ(k.ran.load(), 1);  // destroy returned after the work ran
  CHECK_OK(vpmm_host_stream_destroy(b));
}

TEST("a limit fraction that rounds to 0 bytes is the smallest limit, not none") {
  vpmm_config c;
  vpmm_config_init(&c);
  c.page_size = kPage;
  c.va_size = 64 * kPage;
  c.host_capacity = 64ull << 20;
  c.memory_limit = 10 * kPage;
  c.memory_limit_fraction = 1e-12;
  c.backend = VPMM_BACKEND_HOST;
  vpmm_pool* p = nullptr;
  CHECK_OK(vpmm_pool_create(&c, &p));
  CHECK_EQ(vt::stats(p).capacity_bytes, kPage);
  void* x = nullptr;
  CHECK_EQ(vpmm_pool_malloc(p, 2 * kPage, nullptr, &x), VPMM_ERR_OUT_OF_MEMORY);
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
  vpmm_config c;
  vpmm_config_init(&c);
  c.page_size = kPage;
  c.va_size = 64 * kPage;
  c.host_capacity = kPage / 2;
  c.backend = VPMM_BACKEND_HOST;
  vpmm_pool* p = nullptr;
  CHECK_EQ(vpmm_pool_create(&c, &p), VPMM_ERR_INVALID_ARGUMENT);
  CHECK(p == nullptr);
  CHECK(std::strstr(vpmm_last_error(), "page") != nullptr);
}

TEST("views agree: tag stats, backup lookup, struct names") {
  vpmm_pool* p = pool_with(0, /*small_size=*/16 << 10);
  CHECK(p != nullptr);
  void* s = tagged(p, 1000, "w", nullptr);
  CHECK(s != nullptr);
  CHECK_OK(vpmm_pool_free(p, s, nullptr));  // its slab stays cached, empty
  vpmm_tag_stats t = tag_stats(p, "w");
  CHECK_EQ(t.n_live, uint64_t(0));
  CHECK_EQ(t.live_bytes, uint64_t(0));
  uint64_t n = 1;
  CHECK_OK(vpmm_pool_pause_ex(p, "w", &n));
  CHECK_EQ(n, uint64_t(0));

  void* big = tagged(p, kPage + 100, "b", nullptr, VPMM_ALLOC_HOST_BACKUP);
  CHECK(big != nullptr);
  CHECK_OK(vpmm_pool_pause(p, "b"));
  char* padding = static_cast<char*>(big) + kPage + 200;
  void* host = nullptr;
  uint64_t bytes = 0;
  CHECK_EQ(vpmm_pool_lookup(p, padding, nullptr, nullptr), VPMM_ERR_UNKNOWN_POINTER);
  CHECK_EQ(vpmm_pool_backup_lookup(p, padding, &host, &bytes), VPMM_ERR_UNKNOWN_POINTER);
  CHECK_OK(vpmm_pool_backup_lookup(p, static_cast<char*>(big) + 10, &host, &bytes));
  CHECK_EQ(bytes, kPage + 90);
  CHECK_OK(vpmm_pool_free(p, big, nullptr));

  uint32_t size = 0, size_info = 0, fields = 0;
  CHECK_OK(vpmm_struct_layout("vpmm_region", &size, &fields));
  CHECK_OK(vpmm_struct_layout("vpmm_region_info", &size_info, nullptr));
  CHECK_EQ(size, size_info);
  CHECK_OK(vpmm_pool_destroy(p));
}

TEST("a resume that gives cached memory back keeps the paused slab it is resuming") {
  // The slab's last live block is freed while paused; another was freed on
  // a held stream before the pause. The resume must give cached memory back
  // to fit under the limit, which settles that pending block: the slab is
  // then empty, and must not be dropped while the resume still maps it.
  vpmm_pool* p = pool_with(3, /*small_size=*/16 << 10);
  CHECK(p != nullptr);
  vpmm_stream t = nullptr;
  CHECK_OK(vpmm_pool_stream_create(p, &t));
  void* a = tagged(p, 4096, "w", nullptr);
  void* b = tagged(p, 4096, "w", nullptr);
  CHECK(a && b);
  CHECK_OK(vpmm_host_stream_hold(t));
  CHECK_OK(vpmm_pool_free(p, b, t));  // pending on t's event
  std::thread releaser(release_later, t, 30);
  CHECK_OK(vpmm_pool_pause(p, "w"));
  releaser.join();
  CHECK_OK(vpmm_pool_free(p, a, nullptr));  // the paused slab's last live block
  void* cached = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, 3 * kPage, nullptr, &cached));
  CHECK_OK(vpmm_pool_free(p, cached, nullptr));  // 3 pages cached: the limit is reached
  CHECK_OK(vpmm_pool_resume(p, "w"));
  CHECK_OK(vpmm_pool_check(p));
  CHECK_EQ(tag_stats(p, "w").n_paused, uint64_t(0));
  CHECK_EQ(tag_stats(p, "w").n_live, uint64_t(0));
  CHECK(vt::stats(p).mapped_bytes <= 3 * kPage);
  void* again = tagged(p, 4096, "w", nullptr);
  CHECK(again != nullptr);
  CHECK_OK(vpmm_pool_free(p, again, nullptr));
  CHECK_OK(vpmm_pool_stream_destroy(p, t));
  CHECK_OK(vpmm_pool_destroy(p));
}

TEST("a tag whose only malloc failed is as unknown to pause as a never-used one") {
  vpmm_pool* p = pool_with(2);
  CHECK(p != nullptr);
  vpmm_status st = VPMM_OK;
  CHECK(tagged(p, 4 * kPage, "too-big", nullptr, 0, &st) == nullptr);
  CHECK_EQ(st, VPMM_ERR_OUT_OF_MEMORY);
  CHECK_EQ(vpmm_pool_pause(p, "too-big"), VPMM_ERR_INVALID_ARGUMENT);
  CHECK_EQ(vpmm_pool_pause(p, "never"), VPMM_ERR_INVALID_ARGUMENT);
  void* ok = tagged(p, kPage, "too-big", nullptr);
  CHECK(ok != nullptr);
  CHECK_OK(vpmm_pool_pause(p, "too-big"));
  CHECK_OK(vpmm_pool_destroy(p));
}

TEST("set_limit and get_config from two threads (clean under TSan)") {
  vpmm_pool* p = pool_with(0);
  CHECK(p != nullptr);
  std::atomic<bool> stop{false};
  std::thread reader([&] {
    while (!stop) {
      vpmm_config c;
      std::memset(&c, 0, sizeof c);
      c.struct_size = sizeof c;
      vpmm_pool_get_config(p, &c);
    }
  });
  for (uint64_t i = 1; i <= 200; ++i) CHECK_OK(vpmm_pool_set_limit(p, (i % 7 + 1) * kPage));
  stop = true;
  reader.join();
  vpmm_config c;
  std::memset(&c, 0, sizeof c);
  c.struct_size = sizeof c;
  CHECK_OK(vpmm_pool_get_config(p, &c));
  CHECK_EQ(c.memory_limit, (200 % 7 + 1) * kPage);
  CHECK_OK(vpmm_pool_destroy(p));
}

TEST_MAIN()
