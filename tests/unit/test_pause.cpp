// Pause/resume by tag, host backups, scopes, trim and per-tag stats on the
// host backend. Paused VA is really unmapped there (a touch faults), so these
// tests prove both that memory is released and that addresses are kept.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "check.hpp"
#include "pool_util.hpp"
#include "vpmm_host_streams.h"

namespace {

constexpr uint64_t kPage = 64 << 10;

vpmm_pool* pool_with(uint64_t capacity, uint64_t va_pages = 512) {
  vt::HostPoolSpec s;
  s.page = kPage;
  s.va_pages = va_pages;
  s.capacity = capacity;
  return vt::make_host_pool(s);
}

void* alloc(vpmm_pool* p, uint64_t size, const char* tag, uint32_t flags, vpmm_stream s = nullptr) {
  void* out = vt::malloc_tagged(p, size, tag, flags, s);
  if (!out) std::printf("  malloc_ex(%llu, %s) failed: %s\n", (unsigned long long)size, tag ? tag : "-", vpmm_last_error());
  return out;
}

// True when touching p kills a child process with SIGSEGV/SIGBUS.
bool touch_faults(void* p) {
  std::fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    volatile char c = *static_cast<volatile char*>(p);
    (void)c;
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFSIGNALED(status) && (WTERMSIG(status) == SIGSEGV || WTERMSIG(status) == SIGBUS);
}

vpmm_tag_stats tag_stats(vpmm_pool* p, const char* tag) {
  vpmm_tag_stats t;
  std::memset(&t, 0, sizeof t);
  t.struct_size = sizeof t;
  vpmm_pool_tag_stats(p, tag, &t);
  return t;
}


TEST("prepare_backups pins a tag's backups ahead: the next pause pins nothing new") {
  vpmm_pool* p = pool_with(64 * kPage);
  CHECK(p != nullptr);
  if (!p) return;
  void* a = alloc(p, 4 * kPage, "w", VPMM_ALLOC_HOST_BACKUP);
  void* b = alloc(p, 2 * kPage, "w", VPMM_ALLOC_HOST_BACKUP);
  void* c = alloc(p, kPage, "w", 0);                            // no backup: nothing to pin
  void* d = alloc(p, 3 * kPage, "other", VPMM_ALLOC_HOST_BACKUP);  // another tag
  CHECK(a && b && c && d);
  if (!a || !b || !c || !d) return;
  std::memset(a, 0x5A, 4 * kPage);
  std::memset(b, 0xA5, 2 * kPage);
  uint64_t cached = ~0ull;
  CHECK_OK(vpmm_pool_prepare_backups(p, "w", &cached));
  CHECK_EQ(cached, 6 * kPage);
  vpmm_stats st = vt::stats(p);
  CHECK_EQ(st.backup_cache_bytes, 6 * kPage);
  CHECK_EQ(st.backup_pinned_bytes, 6 * kPage);
  // Again: the cached buffers are counted, not pinned twice.
  CHECK_OK(vpmm_pool_prepare_backups(p, "w", &cached));
  CHECK_EQ(cached, 6 * kPage);
  CHECK_EQ(vt::stats(p).backup_pinned_bytes, 6 * kPage);
  // The pause takes them from the cache: pinned bytes stay, the cache empties.
  uint64_t n = 0;
  CHECK_OK(vpmm_pool_pause_ex(p, "w", &n));
  CHECK_EQ(n, uint64_t(3));
  st = vt::stats(p);
  CHECK_EQ(st.backup_cache_bytes, uint64_t(0));
  CHECK_EQ(st.backup_pinned_bytes, 6 * kPage);
  CHECK_OK(vpmm_pool_resume_ex(p, "w", &n));
  CHECK_EQ(static_cast<unsigned char*>(a)[4 * kPage - 1], 0x5A);
  CHECK_EQ(static_cast<unsigned char*>(b)[0], 0xA5);
  // NULL: every tag (here "other" too); an unknown tag is an error; a tag
  // with nothing to back up pins nothing.
  CHECK_OK(vpmm_pool_prepare_backups(p, nullptr, &cached));
  CHECK_EQ(cached, 9 * kPage);
  CHECK_EQ(vpmm_pool_prepare_backups(p, "never-used", &cached), VPMM_ERR_INVALID_ARGUMENT);
  CHECK(std::strstr(vpmm_last_error(), "never-used") != nullptr);
  CHECK_OK(vpmm_pool_free(p, c, nullptr));
  alloc(p, kPage, "plain", 0);
  CHECK_OK(vpmm_pool_prepare_backups(p, "plain", nullptr));
  CHECK_EQ(vt::stats(p).backup_cache_bytes, 9 * kPage);
  CHECK_EQ(vpmm_pool_prepare_backups(nullptr, "w", nullptr), VPMM_ERR_INVALID_ARGUMENT);
  CHECK_OK(vpmm_pool_check(p));
  vpmm_pool_destroy(p);
}

}  // namespace

TEST("pause releases memory, keeps addresses; resume with backup restores bytes") {
  vpmm_pool* p = pool_with(64 << 20);
  CHECK(p != nullptr);
  void* a = alloc(p, 3 * kPage, "weights", VPMM_ALLOC_HOST_BACKUP);
  void* b = alloc(p, 1000, "weights", VPMM_ALLOC_HOST_BACKUP);  // small, same tag
  void* c = alloc(p, 2 * kPage, "kv", 0);
  void* u = alloc(p, kPage, nullptr, 0);  // untagged: never paused
  vt::fill(a, 3 * kPage, 1);
  vt::fill(b, 1000 / 8 * 8, 2);
  vt::fill(c, 2 * kPage, 3);
  vt::fill(u, kPage, 4);
  vpmm_stats before = vt::stats(p);
  for (int cycle = 0; cycle < 3; ++cycle) {
    uint64_t changed = 99;
    CHECK_OK(vpmm_pool_pause_ex(p, "weights", &changed));
    CHECK_EQ(changed, uint64_t(2));  // a's region and b's slab page
    CHECK_OK(vpmm_pool_check(p));
    vpmm_stats st = vt::stats(p);
    // 3 pages + one small slab page released
    CHECK_EQ(st.mapped_bytes, before.mapped_bytes - 4 * kPage);
    CHECK_EQ(st.paused_bytes, 4 * kPage);
    CHECK_EQ(st.backup_bytes, 4 * kPage);
    CHECK(touch_faults(a));
    CHECK(touch_faults(b));
    CHECK(vt::verify(c, 2 * kPage, 3));  // other tags untouched
    CHECK(vt::verify(u, kPage, 4));
    // Already paused: success that changed nothing (no non-zero success status).
    CHECK_OK(vpmm_pool_pause_ex(p, "weights", &changed));
    CHECK_EQ(changed, uint64_t(0));
    CHECK_OK(vpmm_pool_pause(p, "weights"));
    CHECK_EQ(vt::stats(p).paused_bytes, 4 * kPage);
    CHECK_OK(vpmm_pool_resume_ex(p, "weights", &changed));
    CHECK_EQ(changed, uint64_t(2));
    CHECK_OK(vpmm_pool_resume_ex(p, "weights", &changed));  // already active
    CHECK_EQ(changed, uint64_t(0));
    CHECK_OK(vpmm_pool_resume(p, "weights"));
    CHECK_OK(vpmm_pool_check(p));
    CHECK(vt::verify(a, 3 * kPage, 1));
    CHECK(vt::verify(b, 1000 / 8 * 8, 2));
    CHECK_EQ(vt::stats(p).mapped_bytes, before.mapped_bytes);
    void* base = nullptr;
    uint64_t size = 0;
    CHECK_OK(vpmm_pool_lookup(p, static_cast<char*>(a) + 5, &base, &size));
    CHECK_EQ(base, a);
    CHECK_EQ(size, 3 * kPage);
  }
  // The pinned backup buffers were reused, not re-pinned each cycle.
  CHECK(vt::stats(p).backup_cache_bytes >= 4 * kPage);
  vpmm_pool_destroy(p);
}

TEST("pause without backup: memory is released and resumes (contents undefined)") {
  vpmm_pool* p = pool_with(64 << 20);
  void* a = alloc(p, 8 * kPage, "kv", 0);
  vt::fill(a, 8 * kPage, 9);
  uint64_t mapped = vt::stats(p).mapped_bytes;
  CHECK_OK(vpmm_pool_pause(p, "kv"));
  CHECK_EQ(vt::stats(p).mapped_bytes, mapped - 8 * kPage);
  CHECK_EQ(vt::stats(p).backup_bytes, uint64_t(0));
  CHECK(touch_faults(a));
  CHECK_OK(vpmm_pool_resume(p, "kv"));
  std::memset(a, 0x5A, 8 * kPage);  // writable again at the same address
  CHECK_EQ(static_cast<unsigned char*>(a)[8 * kPage - 1], 0x5A);
  CHECK_OK(vpmm_pool_check(p));
  vpmm_pool_destroy(p);
}

TEST("NULL tag pauses and resumes every tag; unknown tag is an error") {
  vpmm_pool* p = pool_with(64 << 20);
  void* a = alloc(p, kPage, "x", VPMM_ALLOC_HOST_BACKUP);
  void* b = alloc(p, kPage, "y", VPMM_ALLOC_HOST_BACKUP);
  vt::fill(a, kPage, 1);
  vt::fill(b, kPage, 2);
  CHECK_EQ(vpmm_pool_pause(p, "nosuchtag"), VPMM_ERR_INVALID_ARGUMENT);
  CHECK(std::strstr(vpmm_last_error(), "nosuchtag") != nullptr);
  CHECK_OK(vpmm_pool_pause(p, nullptr));
  CHECK_EQ(tag_stats(p, "x").n_paused, uint64_t(1));
  CHECK_EQ(tag_stats(p, "y").n_paused, uint64_t(1));
  CHECK_EQ(tag_stats(p, nullptr).paused_bytes, 2 * kPage);
  CHECK_OK(vpmm_pool_resume(p, "x"));
  CHECK_EQ(tag_stats(p, "x").n_live, uint64_t(1));
  CHECK_EQ(tag_stats(p, "y").n_paused, uint64_t(1));
  CHECK_OK(vpmm_pool_resume(p, nullptr));
  CHECK(vt::verify(a, kPage, 1) && vt::verify(b, kPage, 2));
  vpmm_pool_destroy(p);
}

TEST("nested region scopes tag plain mallocs and restore on pop") {
  vpmm_pool* p = pool_with(64 << 20);
  void *outer = nullptr, *inner = nullptr, *after = nullptr, *none = nullptr;
  CHECK_OK(vpmm_region_push("outer", VPMM_ALLOC_HOST_BACKUP));
  CHECK_OK(vpmm_pool_malloc(p, kPage, nullptr, &outer));
  CHECK_OK(vpmm_region_push("inner", 0));
  CHECK_OK(vpmm_pool_malloc(p, kPage, nullptr, &inner));
  CHECK_OK(vpmm_region_pop());
  CHECK_OK(vpmm_pool_malloc(p, kPage, nullptr, &after));
  CHECK_OK(vpmm_region_pop());
  CHECK_OK(vpmm_pool_malloc(p, kPage, nullptr, &none));
  CHECK_EQ(vpmm_region_pop(), VPMM_ERR_WRONG_STATE);
  CHECK_EQ(tag_stats(p, "outer").n_live, uint64_t(2));
  CHECK_EQ(tag_stats(p, "inner").n_live, uint64_t(1));
  vt::fill(after, kPage, 7);
  CHECK_OK(vpmm_pool_pause(p, "outer"));
  CHECK(touch_faults(outer) && touch_faults(after));
  CHECK(!touch_faults(inner) && !touch_faults(none));
  CHECK_OK(vpmm_pool_resume(p, "outer"));
  CHECK(vt::verify(after, kPage, 7));  // outer scope carried the backup flag
  vpmm_pool_destroy(p);
}

TEST("free while paused returns the VA and drops the backup") {
  vpmm_pool* p = pool_with(64 << 20);
  void* a = alloc(p, 4 * kPage, "t", VPMM_ALLOC_HOST_BACKUP);
  void* s = alloc(p, 512, "t", VPMM_ALLOC_HOST_BACKUP);
  CHECK_OK(vpmm_pool_pause(p, "t"));
  CHECK_OK(vpmm_pool_free(p, a, nullptr));
  CHECK_OK(vpmm_pool_free(p, s, nullptr));
  CHECK_EQ(vpmm_pool_free(p, a, nullptr), VPMM_ERR_UNKNOWN_POINTER);
  vpmm_stats st = vt::stats(p);
  CHECK_EQ(st.paused_bytes, uint64_t(0));
  CHECK_EQ(st.backup_bytes, uint64_t(0));
  CHECK_EQ(st.n_live, uint64_t(0));
  CHECK_EQ(st.requested_bytes, uint64_t(0));
  uint64_t changed = 99;
  CHECK_OK(vpmm_pool_resume_ex(p, "t", &changed));  // nothing paused any more
  CHECK_EQ(changed, uint64_t(0));
  CHECK_OK(vpmm_pool_check(p));
  vpmm_pool_destroy(p);
}

// What vpmm.h says each counter holds while allocations are paused: a paused
// allocation is still allocated (its address is held until freed), so it
// stays in n_live and requested_bytes; its pages leave live_bytes and
// mapped_bytes for paused_bytes. The per-tag n_live counts active regions.
TEST("stats while paused: n_live and requested_bytes keep paused allocations, live_bytes does not") {
  vpmm_pool* p = pool_with(64 << 20);
  const uint64_t a_size = 3 * kPage + 100, b_size = 1000, u_size = kPage;
  void* a = alloc(p, a_size, "w", VPMM_ALLOC_HOST_BACKUP);  // 4 pages
  void* b = alloc(p, b_size, "w", VPMM_ALLOC_HOST_BACKUP);  // small: one slab page
  void* u = alloc(p, u_size, nullptr, 0);                   // untagged: stays active
  CHECK(a && b && u);
  const vpmm_stats before = vt::stats(p);
  CHECK_EQ(before.n_live, uint64_t(3));
  CHECK_EQ(before.requested_bytes, a_size + b_size + u_size);
  CHECK_EQ(before.live_bytes, 6 * kPage);
  CHECK_EQ(before.paused_bytes, uint64_t(0));

  CHECK_OK(vpmm_pool_pause(p, "w"));
  vpmm_stats st = vt::stats(p);
  CHECK_EQ(st.n_live, uint64_t(3));                          // still allocated
  CHECK_EQ(st.requested_bytes, a_size + b_size + u_size);    // still asked for
  CHECK_EQ(st.live_bytes, kPage);                            // u only
  CHECK_EQ(st.paused_bytes, 5 * kPage);                      // a's pages and b's slab page
  CHECK_EQ(st.live_bytes + st.paused_bytes, before.live_bytes);
  CHECK_EQ(st.mapped_bytes, before.mapped_bytes - 5 * kPage);
  vpmm_tag_stats ts = tag_stats(p, "w");
  CHECK_EQ(ts.n_live, uint64_t(0));  // per tag: active regions only
  CHECK_EQ(ts.n_paused, uint64_t(2));

  CHECK_OK(vpmm_pool_free(p, a, nullptr));  // freeing a paused allocation ends it
  st = vt::stats(p);
  CHECK_EQ(st.n_live, uint64_t(2));
  CHECK_EQ(st.requested_bytes, b_size + u_size);
  CHECK_EQ(st.paused_bytes, kPage);

  CHECK_OK(vpmm_pool_resume(p, "w"));
  st = vt::stats(p);
  CHECK_EQ(st.n_live, uint64_t(2));
  CHECK_EQ(st.requested_bytes, b_size + u_size);
  CHECK_EQ(st.live_bytes, 2 * kPage);
  CHECK_EQ(st.paused_bytes, uint64_t(0));
  CHECK_OK(vpmm_pool_free(p, b, nullptr));
  CHECK_OK(vpmm_pool_free(p, u, nullptr));
  CHECK_OK(vpmm_pool_check(p));
  vpmm_pool_destroy(p);
}

// vpmm_pool_resume's word on free pages: the pool holds no more after the
// resume than before the pause (as much cached free memory as the resume
// made is given back), and under a limit they are given back first so that
// they serve the resume instead of failing it.
TEST("resume beside free cached pages: as much cache given back as it made; at the limit first") {
  for (bool limited : {false, true}) {
    vpmm_pool* p = pool_with(limited ? 4 * kPage : 64 << 20);
    void* w = alloc(p, 4 * kPage, "w", VPMM_ALLOC_HOST_BACKUP);
    vt::fill(w, 4 * kPage, 21);
    CHECK_OK(vpmm_pool_pause(p, "w"));
    void* x = alloc(p, 4 * kPage, nullptr, 0);  // takes the 4 pages the pause gave back
    CHECK(x != nullptr);
    CHECK_OK(vpmm_pool_free(p, x, nullptr));
    CHECK_EQ(vt::stats(p).free_bytes, 4 * kPage);
    CHECK_OK(vpmm_pool_resume(p, "w"));
    CHECK(vt::verify(w, 4 * kPage, 21));
    const vpmm_stats st = vt::stats(p);
    CHECK_EQ(st.live_bytes, 4 * kPage);
    CHECK_EQ(st.mapped_bytes, 4 * kPage);
    CHECK_EQ(st.free_bytes, 0u);
    CHECK_EQ(st.bytes_trimmed, 4 * kPage);
    CHECK_OK(vpmm_pool_free(p, w, nullptr));
    CHECK_OK(vpmm_pool_check(p));
    vpmm_pool_destroy(p);
  }
}

TEST("resume out of memory leaves the rest paused with backups; retry works") {
  // 16 pages of capacity; pause 12 pages in 3 allocations, fill memory with
  // untagged data, resume fails part-way, free some, retry succeeds.
  vpmm_pool* p = pool_with(16 * kPage);
  std::vector<void*> t;
  for (int i = 0; i < 3; ++i) {
    t.push_back(alloc(p, 4 * kPage, "t", VPMM_ALLOC_HOST_BACKUP));
    vt::fill(t.back(), 4 * kPage, 100 + i);
  }
  CHECK_OK(vpmm_pool_pause(p, "t"));
  void* hog = alloc(p, 10 * kPage, nullptr, 0);  // leaves 6 pages: one resume fits
  CHECK(hog != nullptr);
  vt::fill(hog, 10 * kPage, 55);
  vpmm_status st = vpmm_pool_resume(p, "t");
  CHECK_EQ(st, VPMM_ERR_OUT_OF_MEMORY);
  CHECK(std::strlen(vpmm_last_error()) > 0);
  CHECK_OK(vpmm_pool_check(p));
  vpmm_tag_stats ts = tag_stats(p, "t");
  CHECK_EQ(ts.n_live, uint64_t(1));
  CHECK_EQ(ts.n_paused, uint64_t(2));
  CHECK_EQ(ts.backup_bytes, 8 * kPage);
  CHECK(vt::verify(t[0], 4 * kPage, 100));  // the one resumed is valid
  CHECK(touch_faults(t[1]) && touch_faults(t[2]));
  CHECK(vt::verify(hog, 10 * kPage, 55));
  CHECK_OK(vpmm_pool_free(p, hog, nullptr));
  CHECK_OK(vpmm_pool_resume(p, "t"));  // cached free pages are trimmed to make room
  for (int i = 0; i < 3; ++i) CHECK(vt::verify(t[i], 4 * kPage, 100 + i));
  CHECK_OK(vpmm_pool_check(p));
  vpmm_pool_destroy(p);
}

TEST("pause waits for work queued on the allocation's stream") {
  vpmm_pool* p = pool_with(64 << 20);
  vpmm_stream s = nullptr;
  CHECK_OK(vpmm_host_stream_create(&s));
  void* a = alloc(p, kPage, "t", VPMM_ALLOC_HOST_BACKUP, s);
  // A host "kernel" on s writes the pattern; pause must back up its result.
  struct Job {
    void* p;
  } job{a};
  CHECK_OK(vpmm_host_stream_launch(
      s, [](void* u) { vt::fill(static_cast<Job*>(u)->p, kPage, 77); }, &job));
  CHECK_OK(vpmm_pool_pause(p, "t"));
  CHECK_OK(vpmm_pool_resume(p, "t"));
  CHECK(vt::verify(a, kPage, 77));
  CHECK_OK(vpmm_pool_free(p, a, s));
  vpmm_pool_destroy(p);
  CHECK_OK(vpmm_host_stream_destroy(s));
}

TEST("pause with frees pending on a held stream: paused memory is never reused") {
  vpmm_pool* p = pool_with(64 << 20);
  vpmm_stream held = nullptr;
  CHECK_OK(vpmm_host_stream_create(&held));
  void* x = alloc(p, 4 * kPage, nullptr, 0, held);
  void* a = alloc(p, 4 * kPage, "t", VPMM_ALLOC_HOST_BACKUP);
  vt::fill(a, 4 * kPage, 5);
  CHECK_OK(vpmm_host_stream_hold(held));
  CHECK_OK(vpmm_pool_free(p, x, held));  // pending free on a held stream
  // Pausing needs only the allocation's own stream to be idle.
  CHECK_OK(vpmm_pool_pause(p, "t"));
  // Allocations while paused never land on the paused VA.
  std::vector<void*> others;
  for (int i = 0; i < 8; ++i) {
    void* o = alloc(p, 2 * kPage, nullptr, 0);
    CHECK(o != nullptr);
    uint64_t lo = reinterpret_cast<uint64_t>(o), alo = reinterpret_cast<uint64_t>(a);
    CHECK(lo + 2 * kPage <= alo || lo >= alo + 4 * kPage);
    others.push_back(o);
  }
  CHECK_OK(vpmm_host_stream_release(held));
  uint64_t paused = vt::stats(p).paused_bytes;
  CHECK_OK(vpmm_pool_trim(p, 0));  // trim (which waits on events) leaves paused memory alone
  CHECK_EQ(vt::stats(p).paused_bytes, paused);
  CHECK_EQ(vt::stats(p).free_bytes, uint64_t(0));
  CHECK_OK(vpmm_pool_check(p));
  CHECK_OK(vpmm_pool_resume(p, "t"));
  CHECK(vt::verify(a, 4 * kPage, 5));
  for (void* o : others) CHECK_OK(vpmm_pool_free(p, o, nullptr));
  vpmm_pool_destroy(p);
  CHECK_OK(vpmm_host_stream_destroy(held));
}

TEST("trim gives free cached pages back and keeps what is asked") {
  vpmm_pool* p = pool_with(64 << 20);
  std::vector<void*> v;
  for (int i = 0; i < 8; ++i) v.push_back(alloc(p, 2 * kPage, nullptr, 0));
  void* keep = alloc(p, kPage, nullptr, 0);
  vt::fill(keep, kPage, 3);
  for (void* x : v) CHECK_OK(vpmm_pool_free(p, x, nullptr));
  vpmm_stats st = vt::stats(p);
  CHECK_EQ(st.free_bytes, 16 * kPage);
  CHECK_OK(vpmm_pool_trim(p, 4 * kPage));
  st = vt::stats(p);
  CHECK(st.free_bytes <= 4 * kPage);
  CHECK_EQ(st.mapped_bytes, st.live_bytes + st.free_bytes);
  CHECK(st.bytes_trimmed >= 12 * kPage);
  CHECK_OK(vpmm_pool_trim(p, 0));
  CHECK_EQ(vt::stats(p).free_bytes, uint64_t(0));
  CHECK(vt::verify(keep, kPage, 3));
  CHECK_OK(vpmm_pool_check(p));
  vpmm_pool_destroy(p);
}

TEST("tagged allocations own whole handles even when reusing freed memory") {
  vpmm_pool* p = pool_with(64 << 20);
  void* big = alloc(p, 8 * kPage, nullptr, 0);  // one 8-page handle
  CHECK_OK(vpmm_pool_free(p, big, nullptr));
  void* t = alloc(p, 2 * kPage, "t", VPMM_ALLOC_HOST_BACKUP);  // cannot carve a shared handle
  vt::fill(t, 2 * kPage, 8);
  void* u = alloc(p, 2 * kPage, nullptr, 0);
  vt::fill(u, 2 * kPage, 9);
  uint64_t mapped = vt::stats(p).mapped_bytes;
  CHECK_OK(vpmm_pool_pause(p, "t"));
  CHECK_EQ(vt::stats(p).mapped_bytes, mapped - 2 * kPage);  // exactly its own pages
  CHECK(vt::verify(u, 2 * kPage, 9));
  CHECK_OK(vpmm_pool_resume(p, "t"));
  CHECK(vt::verify(t, 2 * kPage, 8));
  // Free + malloc of the same tagged size reuses freed whole handles (its
  // own, or the cached pages the resume left: both fit exactly) and still
  // owns them: a pause gives back exactly its pages.
  CHECK_OK(vpmm_pool_free(p, t, nullptr));
  uint64_t created = vt::stats(p).handles_created;
  void* t2 = alloc(p, 2 * kPage, "t", VPMM_ALLOC_HOST_BACKUP);
  CHECK_EQ(vt::stats(p).handles_created, created);
  vt::fill(t2, 2 * kPage, 10);
  mapped = vt::stats(p).mapped_bytes;
  CHECK_OK(vpmm_pool_pause(p, "t"));
  CHECK_EQ(vt::stats(p).mapped_bytes, mapped - 2 * kPage);
  CHECK(vt::verify(u, 2 * kPage, 9));
  CHECK_OK(vpmm_pool_resume(p, "t"));
  CHECK(vt::verify(t2, 2 * kPage, 10));
  CHECK_OK(vpmm_pool_check(p));
  vpmm_pool_destroy(p);
}

TEST("bad attributes and scopes are rejected") {
  vpmm_pool* p = pool_with(64 << 20);
  vpmm_alloc_attrs a;
  std::memset(&a, 0, sizeof a);
  a.struct_size = sizeof a;
  a.flags = 0x80;
  a.tag = "x";
  void* out = nullptr;
  CHECK_EQ(vpmm_pool_malloc_ex(p, kPage, nullptr, &a, &out), VPMM_ERR_INVALID_ARGUMENT);
  a.flags = 0;
  a.struct_size = 1;
  CHECK_EQ(vpmm_pool_malloc_ex(p, kPage, nullptr, &a, &out), VPMM_ERR_INVALID_ARGUMENT);
  std::string long_tag(100, 'z');
  a.struct_size = sizeof a;
  a.tag = long_tag.c_str();
  CHECK_EQ(vpmm_pool_malloc_ex(p, kPage, nullptr, &a, &out), VPMM_ERR_INVALID_ARGUMENT);
  CHECK_EQ(vpmm_region_push(long_tag.c_str(), 0), VPMM_ERR_INVALID_ARGUMENT);
  CHECK_EQ(vpmm_region_push("ok", 0x40), VPMM_ERR_INVALID_ARGUMENT);
  CHECK_EQ(out, nullptr);
  CHECK_EQ(vpmm_pool_pause(nullptr, "x"), VPMM_ERR_INVALID_ARGUMENT);
  CHECK_EQ(vpmm_pool_resume(p, "never"), VPMM_ERR_INVALID_ARGUMENT);
  vpmm_tag_stats ts;
  ts.struct_size = 0;
  CHECK_EQ(vpmm_pool_tag_stats(p, nullptr, &ts), VPMM_ERR_INVALID_ARGUMENT);
  CHECK_EQ(vt::stats(p).n_live, uint64_t(0));
  vpmm_pool_destroy(p);
}

TEST("a tag whose only slab is cached empty has nothing to pause") {
  vpmm_pool* p = pool_with(64 << 20);
  void* x = alloc(p, 4096, "e", VPMM_ALLOC_HOST_BACKUP);
  CHECK_OK(vpmm_pool_free(p, x, nullptr));
  uint64_t changed = 99;
  CHECK_OK(vpmm_pool_pause_ex(p, "e", &changed));
  CHECK_EQ(changed, uint64_t(0));
  CHECK_EQ(vt::stats(p).paused_bytes, uint64_t(0));
  CHECK_EQ(vt::stats(p).backup_bytes, uint64_t(0));
  CHECK_OK(vpmm_pool_check(p));
  vpmm_pool_destroy(p);
}

TEST("a pinned limit: backups past it go to pageable memory; bytes and addresses survive") {
  setenv("VPMM_BACKUP_PINNED_LIMIT", "192K", 1);  // 3 pages
  vpmm_config c;
  vpmm_config_init(&c);
  unsetenv("VPMM_BACKUP_PINNED_LIMIT");
  CHECK_EQ(c.backup_pinned_limit, 3 * kPage);
  c.page_size = kPage;
  c.va_size = 512 * kPage;
  c.host_capacity = 64 << 20;
  vt::use_test_backend(&c);
  vpmm_pool* p = nullptr;
  CHECK_OK(vpmm_pool_create(&c, &p));
  if (!p) return;
  vpmm_config got;
  got.struct_size = sizeof got;
  CHECK_OK(vpmm_pool_get_config(p, &got));
  CHECK_EQ(got.backup_pinned_limit, 3 * kPage);
  std::vector<void*> v;
  for (int i = 0; i < 4; ++i) {
    v.push_back(alloc(p, 2 * kPage, "w", VPMM_ALLOC_HOST_BACKUP));
    vt::fill(v.back(), 2 * kPage, 30 + i);
  }
  for (int cycle = 0; cycle < 3; ++cycle) {
    CHECK_OK(vpmm_pool_pause(p, "w"));
    vpmm_stats st = vt::stats(p);
    CHECK_EQ(st.backup_bytes, 8 * kPage);
    // One 2-page buffer fits under the 3-page limit; the other three cannot.
    CHECK_EQ(st.backup_pinned_bytes, 2 * kPage);
    CHECK_EQ(st.backup_pageable_bytes, 6 * kPage);
    for (void* x : v) CHECK(touch_faults(x));
    CHECK_OK(vpmm_pool_resume(p, "w"));
    st = vt::stats(p);
    CHECK_EQ(st.backup_pageable_bytes, uint64_t(0));  // freed at once
    CHECK(st.backup_pinned_bytes <= 3 * kPage);
    CHECK_EQ(st.backup_cache_bytes, st.backup_pinned_bytes);  // none in use
    for (int i = 0; i < 4; ++i) CHECK(vt::verify(v[i], 2 * kPage, 30 + i));
  }
  // A limit below any backup: everything pageable, still intact.
  vpmm_pool_destroy(p);
  c.backup_pinned_limit = kPage;
  CHECK_OK(vpmm_pool_create(&c, &p));
  void* a = alloc(p, 4 * kPage, "w", VPMM_ALLOC_HOST_BACKUP);
  vt::fill(a, 4 * kPage, 77);
  CHECK_OK(vpmm_pool_pause(p, "w"));
  CHECK_EQ(vt::stats(p).backup_pinned_bytes, uint64_t(0));
  CHECK_EQ(vt::stats(p).backup_pageable_bytes, 4 * kPage);
  CHECK_OK(vpmm_pool_free(p, a, nullptr));  // free while paused drops a pageable backup too
  CHECK_EQ(vt::stats(p).backup_pageable_bytes, uint64_t(0));
  CHECK_OK(vpmm_pool_check(p));
  vpmm_pool_destroy(p);
}

TEST_MAIN()
