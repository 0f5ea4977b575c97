// Tags, scopes and pause/resume (docs/misuse.md rows 40-42, 49-52, 57, 58,
// 65-67, 77, 78): unknown flag bits and tags over 63 bytes are
// INVALID_ARGUMENT; a pop with no scope open is WRONG_STATE; a pause of a tag
// the pool never saw (or whose only malloc failed) is INVALID_ARGUMENT
// naming it; pausing what is paused and resuming what is active change
// nothing; and a pause or resume never races work still queued on a stream,
// never maps past the limit, and never loses the memory it is resuming.
#include <atomic>
#include <cstring>
#include <string>
#include <thread>

#include "contract.hpp"

using namespace ct;

TEST("row 40: malloc_ex with unknown flag bits is INVALID_ARGUMENT") {
  vpmm_pool* p = suite_pool().make();
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
  vpmm_pool* p = suite_pool().make();
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
  EXPECT_STATUS(vpmm_region_pop(), WS, "vpmm_region_pop");  // nothing was pushed
  tag.resize(63);
  EXPECT_STATUS(vpmm_pool_malloc_ex(p, kPage, nullptr, &a, &out), VPMM_OK, "");  // 63 is fine
  CHECK_OK(vpmm_pool_free(p, out, nullptr));
  CHECK_OK(vpmm_pool_destroy(p));
}

TEST("row 42: region_pop with no scope open is WRONG_STATE; push with unknown flags INVALID_ARGUMENT") {
  EXPECT_STATUS(vpmm_region_pop(), WS, "vpmm_region_pop");
  EXPECT_STATUS(vpmm_region_push("t", 0x10), IA, "vpmm_region_push");
  EXPECT_STATUS(vpmm_region_pop(), WS, "vpmm_region_pop");
  CHECK_OK(vpmm_region_push("t", 0));
  CHECK_OK(vpmm_region_pop());
  EXPECT_STATUS(vpmm_region_pop(), WS, "vpmm_region_pop");
}

TEST("row 57: vpmm_region_pop with no open scope is WRONG_STATE") {
  CHECK_EQ(vpmm_region_pop(), WS);
  CHECK(std::strstr(vpmm_last_error(), "vpmm_region_pop") != nullptr);
}

TEST("row 58: unknown allocation flags or a tag over 63 bytes are INVALID_ARGUMENT") {
  vpmm_pool* p = limited_pool();
  vpmm_alloc_attrs a;
  std::memset(&a, 0, sizeof a);
  a.struct_size = sizeof a;
  a.flags = 0x100;
  void* out = nullptr;
  CHECK_EQ(vpmm_pool_malloc_ex(p, kPage, nullptr, &a, &out), IA);
  std::string long_tag(64, 'x');
  a.flags = 0;
  a.tag = long_tag.c_str();
  CHECK_EQ(vpmm_pool_malloc_ex(p, kPage, nullptr, &a, &out), IA);
  CHECK_EQ(vpmm_region_push(long_tag.c_str(), 0), IA);
  CHECK_EQ(out, nullptr);
  vpmm_pool_destroy(p);
}

TEST("row 49: pause of a tag the pool never saw is INVALID_ARGUMENT naming it") {
  vpmm_pool* p = limited_pool();
  vt::malloc_tagged(p, kPage, "known", VPMM_ALLOC_HOST_BACKUP);
  CHECK_EQ(vpmm_pool_pause(p, "typo"), IA);
  CHECK(std::strstr(vpmm_last_error(), "typo") != nullptr);
  CHECK_EQ(vt::stats(p).paused_bytes, uint64_t(0));
  vpmm_pool_destroy(p);
}

TEST("row 50: pause of what is paused and resume of what is active are VPMM_OK, changing nothing") {
  vpmm_pool* p = limited_pool();
  void* a = vt::malloc_tagged(p, kPage, "t", VPMM_ALLOC_HOST_BACKUP);
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
  vpmm_pool* p = limited_pool();
  void* a = vt::malloc_tagged(p, 4 * kPage, "t", VPMM_ALLOC_HOST_BACKUP);
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
  vpmm_pool* p = limited_pool();
  void* a = vt::malloc_tagged(p, 2 * kPage, "t", VPMM_ALLOC_HOST_BACKUP);
  CHECK_OK(vpmm_pool_pause(p, "t"));
  CHECK_OK(vpmm_pool_free(p, a, nullptr));
  CHECK_EQ(vpmm_pool_free(p, a, nullptr), UP);
  CHECK_EQ(vt::stats(p).paused_bytes, uint64_t(0));
  vpmm_pool_destroy(p);
}

TEST("pause waits for work queued on another stream before a slab block's free") {
  vpmm_pool* p = host_pool(0, /*small_size=*/16 << 10);
  CHECK(p != nullptr);
  vpmm_stream t = nullptr;
  CHECK_OK(vpmm_pool_stream_create(p, &t));
  void* keep = vt::malloc_tagged(p, 4096, "w", 0);
  void* used = vt::malloc_tagged(p, 4096, "w", 0);
  CHECK(keep && used);
  vt::fill(used, 4096, 7);
  Kernel k;
  k.block = static_cast<unsigned char*>(used);
  k.bytes = 4096;
  CHECK_OK(vpmm_host_stream_hold(t));
  CHECK_OK(vpmm_host_stream_launch(t, touch_block, &k));
  CHECK_OK(vpmm_pool_free(p, used, t));  // t's queued work may still use the block
  uint64_t n = 0;
  ReleaseWhenBlocked release(t);
  CHECK_OK(vpmm_pool_pause_ex(p, "w", &n));  // the slab stays mapped until t's work ran
  CHECK(release.returned());                 // it waited for t, held until then
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
  vpmm_pool* p = host_pool(10);
  CHECK(p != nullptr);
  void* a = vt::malloc_tagged(p, 4 * kPage, "w", 0);
  void* b = vt::malloc_tagged(p, 4 * kPage, "w", 0);
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
  CHECK_EQ(vpmm_pool_resume(p, "w"), OOM);
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
  vpmm_pool* p = host_pool(10);
  CHECK(p != nullptr);
  void* a = vt::malloc_tagged(p, 4 * kPage, "w", VPMM_ALLOC_HOST_BACKUP);
  void* b = vt::malloc_tagged(p, 4 * kPage, "w", VPMM_ALLOC_HOST_BACKUP);
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
  CHECK_EQ(vpmm_pool_resume(p, "w"), OOM);
  CHECK(std::strstr(vpmm_last_error(), "declined") != nullptr);
  CHECK_EQ(tag_stats(p, "w").n_paused, uint64_t(1));
  CHECK_OK(vpmm_pool_free(p, blocker, nullptr));
  CHECK_OK(vpmm_pool_resume(p, "w"));
  CHECK(vt::verify(b, 4 * kPage, 2));
  CHECK_OK(vpmm_pool_destroy(p));
}

TEST("a resume that gives cached memory back keeps the paused slab it is resuming") {
  // The slab's last live block is freed while paused; another was freed on
  // a held stream before the pause. The resume must give cached memory back
  // to fit under the limit, which settles that pending block: the slab is
  // then empty, and must not be dropped while the resume still maps it.
  vpmm_pool* p = host_pool(3, /*small_size=*/16 << 10);
  CHECK(p != nullptr);
  vpmm_stream t = nullptr;
  CHECK_OK(vpmm_pool_stream_create(p, &t));
  void* a = vt::malloc_tagged(p, 4096, "w", 0);
  void* b = vt::malloc_tagged(p, 4096, "w", 0);
  CHECK(a && b);
  CHECK_OK(vpmm_host_stream_hold(t));
  CHECK_OK(vpmm_pool_free(p, b, t));  // pending on t's event
  ReleaseWhenBlocked release(t);
  CHECK_OK(vpmm_pool_pause(p, "w"));
  CHECK(release.returned());  // it waited for b's free pending on t
  CHECK_OK(vpmm_pool_free(p, a, nullptr));  // the paused slab's last live block
  void* cached = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, 3 * kPage, nullptr, &cached));
  CHECK_OK(vpmm_pool_free(p, cached, nullptr));  // 3 pages cached: the limit is reached
  CHECK_OK(vpmm_pool_resume(p, "w"));
  CHECK_OK(vpmm_pool_check(p));
  CHECK_EQ(tag_stats(p, "w").n_paused, uint64_t(0));
  CHECK_EQ(tag_stats(p, "w").n_live, uint64_t(0));
  CHECK(vt::stats(p).mapped_bytes <= 3 * kPage);
  void* again = vt::malloc_tagged(p, 4096, "w", 0);
  CHECK(again != nullptr);
  CHECK_OK(vpmm_pool_free(p, again, nullptr));
  CHECK_OK(vpmm_pool_stream_destroy(p, t));
  CHECK_OK(vpmm_pool_destroy(p));
}

TEST("a tag whose only malloc failed is as unknown to pause as a never-used one") {
  vpmm_pool* p = host_pool(2);
  CHECK(p != nullptr);
  vpmm_status st = VPMM_OK;
  CHECK(vt::malloc_tagged(p, 4 * kPage, "too-big", 0, nullptr, &st) == nullptr);
  CHECK_EQ(st, OOM);
  CHECK_EQ(vpmm_pool_pause(p, "too-big"), IA);
  CHECK_EQ(vpmm_pool_pause(p, "never"), IA);
  void* ok = vt::malloc_tagged(p, kPage, "too-big", 0);
  CHECK(ok != nullptr);
  CHECK_OK(vpmm_pool_pause(p, "too-big"));
  CHECK_OK(vpmm_pool_destroy(p));
}
