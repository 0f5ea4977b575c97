// Stream semantics of the pool on the host backend: same-stream reuse,
// cross-stream reuse only after the freeing stream's event completed (Phase
// 1), GPU-side waits instead of CPU blocking when Phase 2 harvests a pending
// region, zombie lifetimes (the old VA stays mapped while queued work may
// still read it), small blocks freed on a foreign stream, pool-made streams
// and pool destruction with work still in flight.
//
// Host streams stand in for GPU streams: a held stream runs nothing, so the
// events the pool records on it stay pending, and host "kernels" launched on
// a stream run on its worker thread in stream order. Where kernels run, the
// tests assert what they observed (order, bytes read through old and new
// VAs), not only the pool's counters.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "backend/host/host_streams.hpp"
#include "check.hpp"
#include "pool_util.hpp"
#include "thread_state.hpp"
#include "vpmm_host_streams.h"

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define UNDER_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer) || __has_feature(address_sanitizer)
#define UNDER_SANITIZER 1
#endif
#endif
#ifndef UNDER_SANITIZER
#define UNDER_SANITIZER 0
#endif

namespace {

constexpr uint64_t kPage = 64 << 10;

void sleep_ms(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

uint64_t addr(const void* p) { return reinterpret_cast<uint64_t>(p); }
char* at(uint64_t va) { return reinterpret_cast<char*>(va); }

vpmm_pool* pool_with(uint64_t max_handle, uint64_t capacity_pages = 1024, uint64_t va_pages = 64,
                     int32_t placement = -1) {
  vt::HostPoolSpec s;
  s.placement = placement;
  s.page = kPage;
  s.va_pages = va_pages;
  s.capacity = capacity_pages * kPage;
  s.max_handle = max_handle;
  vpmm_pool* p = vt::make_host_pool(s);
  CHECK(p != nullptr);
  return p;
}

vpmm_stream new_stream() {
  vpmm_stream s = nullptr;
  CHECK_OK(vpmm_host_stream_create(&s));
  return s;
}

// The region that contains va (kind 0 when none does).
vpmm_region_info region_at(vpmm_pool* p, uint64_t va) {
  for (const vpmm_region_info& r : vt::regions(p))
    if (va >= r.va && va < r.va + r.size) return r;
  vpmm_region_info none;
  std::memset(&none, 0, sizeof none);
  return none;
}

// Runs f on another thread and reports whether it returned within `ms`. If
// it did not, `unblock` is called (e.g. releasing a held stream) so the
// thread can finish and be joined: a blocking call fails the test instead of
// hanging it.
template <class F, class U>
bool returns_within(int ms, F f, U unblock) {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::thread th([&] {
    f();
    std::lock_guard<std::mutex> lk(mu);
    done = true;
    cv.notify_all();
  });
  bool in_time;
  {
    std::unique_lock<std::mutex> lk(mu);
    in_time = cv.wait_for(lk, std::chrono::milliseconds(ms), [&] { return done; });
  }
  if (!in_time) unblock();
  th.join();
  return in_time;
}

// A host kernel: optionally sleeps, then checks and/or writes a byte pattern
// at an address, and records its place in a global order.
struct Kernel {
  std::atomic<int>* order = nullptr;  // shared sequence counter
  std::atomic<int> ran_at{0};         // 1-based position in *order, 0 = not run
  int sleep_ms = 0;
  void* check_at = nullptr;           // verify pattern check_seed over check_bytes
  uint64_t check_bytes = 0, check_seed = 0;
  std::atomic<int> check_ok{-1};      // -1 not checked, 0 bad, 1 good
  void* write_at = nullptr;           // then fill pattern write_seed over write_bytes
  uint64_t write_bytes = 0, write_seed = 0;
  // When set and true by the time the kernel runs, it touches nothing and
  // records that it was too late (the memory may be gone): lets a test see
  // "the pool did not wait for me" without crashing.
  const std::atomic<bool>* too_late = nullptr;
  std::atomic<int> was_too_late{0};
};

void run_kernel(void* u) {
  Kernel* k = static_cast<Kernel*>(u);
  if (k->sleep_ms) sleep_ms(k->sleep_ms);
  if (k->too_late && k->too_late->load()) {
    k->was_too_late = 1;
    k->ran_at = k->order ? ++*k->order : 1;
    return;
  }
  if (k->check_at) k->check_ok = vt::verify(k->check_at, k->check_bytes, k->check_seed) ? 1 : 0;
  if (k->write_at) vt::fill(k->write_at, k->write_bytes, k->write_seed);
  k->ran_at = k->order ? ++*k->order : 1;
}

// Touch va in a forked child: the signal that killed it, 0 if the read worked.
int read_in_child(uint64_t va) {
  std::fflush(nullptr);
  pid_t pid = fork();
  if (pid == 0) {
    int devnull = open("/dev/null", O_WRONLY);
    if (devnull >= 0) dup2(devnull, 2);
    volatile char* p = at(va);
    (void)*p;
    _exit(0);
  }
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid) return -2;
  if (WIFSIGNALED(status)) return WTERMSIG(status);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -1;
}
bool faulted(int r) { return r == SIGSEGV || r == SIGBUS || (UNDER_SANITIZER && r == -1); }

// Builds, on stream `s`, a free region of `pages` pages that cannot be
// remapped (it shares its physical handle with a live allocation): with one
// handle per growth, malloc(pages + 1) makes one handle; after free, a
// one-page malloc on the same stream takes its head. Returns the live head;
// the free tail starts one page later. Phase 2 can then only grow, never
// harvest the tail, which isolates Phase 1 behaviour.
void* unmovable_free_tail(vpmm_pool* p, vpmm_stream s, uint64_t pages) {
  void* x = nullptr;
  void* head = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, (pages + 1) * kPage, s, &x));
  CHECK_OK(vpmm_pool_free(p, x, s));
  CHECK_OK(vpmm_pool_malloc(p, kPage, s, &head));
  CHECK_EQ(head, x);  // same-stream best fit takes the front of the region
  vpmm_region_info tail = region_at(p, addr(x) + kPage);
  CHECK_EQ(tail.kind, VPMM_REGION_FREE);
  CHECK_EQ(tail.size, pages * kPage);
  CHECK_EQ(tail.stream, s);
  return head;
}

// The held-stream case of (b) and (b3): stream A, held, owns an unmovable
// two-page free tail (its head live, filled with 1s); B then asks for two
// pages. Stats before and after B's malloc.
struct HeldTail {
  vpmm_stream a = nullptr, b = nullptr;
  void* head = nullptr;
  uint64_t tail = 0;
  void* q = nullptr;
  vpmm_stats st0{}, st1{};
};
HeldTail malloc_beside_held_tail(vpmm_pool* p) {
  HeldTail h;
  h.a = new_stream();
  h.b = new_stream();
  CHECK_OK(vpmm_host_stream_hold(h.a));
  h.head = unmovable_free_tail(p, h.a, 2);
  h.tail = addr(h.head) + kPage;
  vt::fill(h.head, kPage, 1);
  h.st0 = vt::stats(p);
  CHECK_OK(vpmm_pool_malloc(p, 2 * kPage, h.b, &h.q));
  h.st1 = vt::stats(p);
  return h;
}

}  // namespace

// (a) Stream order makes same-stream reuse free: the block just freed comes
// back, whether or not the stream has work in flight.
TEST("same stream: free then malloc of the same size returns the same pointer, no new pages") {
  vpmm_stream a = new_stream();
  for (vpmm_stream s : {vpmm_stream(nullptr), a}) {
    for (bool held : {false, true}) {
      vpmm_pool* p = pool_with(0);
      if (!p) continue;
      if (held) CHECK_OK(vpmm_host_stream_hold(s));
      void* big = nullptr;
      void* small = nullptr;
      const uint64_t big_size = 3 * kPage + 100, small_size = 300;
      CHECK_OK(vpmm_pool_malloc(p, big_size, s, &big));
      CHECK_OK(vpmm_pool_malloc(p, small_size, s, &small));
      vpmm_stats st0 = vt::stats(p);
      for (int round = 0; round < 3; ++round) {
        void* big2 = nullptr;
        void* small2 = nullptr;
        CHECK_OK(vpmm_pool_free(p, big, s));
        CHECK_OK(vpmm_pool_malloc(p, big_size, s, &big2));
        CHECK_EQ(big2, big);
        CHECK_OK(vpmm_pool_free(p, small, s));
        CHECK_OK(vpmm_pool_malloc(p, small_size, s, &small2));
        CHECK_EQ(small2, small);
      }
      vt::fill(big, big_size - 4, 7);  // the memory is usable (mapped, writable)
      CHECK(vt::verify(big, big_size - 4, 7));
      vpmm_stats st1 = vt::stats(p);
      CHECK_EQ(st1.pages_created, st0.pages_created);
      CHECK_EQ(st1.mapped_bytes, st0.mapped_bytes);
      CHECK_EQ(st1.n_grow, st0.n_grow);
      CHECK_EQ(st1.n_defrag, st0.n_defrag);
      CHECK_EQ(st1.n_cross_stream_reuse, st0.n_cross_stream_reuse);
      CHECK_EQ(st1.n_stream_waits, st0.n_stream_waits);
      CHECK_EQ(st1.n_malloc, st0.n_malloc + 6);
      CHECK_OK(vpmm_pool_check(p));
      if (held) CHECK_OK(vpmm_host_stream_release(s));
      CHECK_OK(vpmm_pool_destroy(p));
    }
  }
  CHECK_OK(vpmm_host_stream_destroy(a));
}

// (b) Phase 1 never takes a foreign region whose event is pending: under
// the design's chain (exact: best fit, then Phase 2, which cannot harvest
// pages that share a handle with live memory) B grows instead, and only
// once A ran its work does B reuse A's region in place. The default chain's
// pending-reuse step takes it at once after a GPU-side wait: (b3) below.
TEST("cross stream Phase 1: a region freed on a held stream is reused only after its event") {
  vpmm_pool* p = pool_with(VPMM_HANDLE_SIZE_UNLIMITED, 1024, 64, VPMM_PLACEMENT_EXACT);
  if (!p) return;
  const HeldTail h = malloc_beside_held_tail(p);
  vpmm_stream a = h.a, b = h.b;
  void *head = h.head, *q = h.q;
  const uint64_t tail = h.tail;
  const vpmm_stats st0 = h.st0, st1 = h.st1;
  // Not handed out: neither the same VA nor any page of A's region.
  CHECK(addr(q) + 2 * kPage <= addr(head) || addr(q) >= tail + 2 * kPage);
  CHECK_EQ(st1.n_cross_stream_reuse, st0.n_cross_stream_reuse);
  CHECK_EQ(st1.n_stream_waits, st0.n_stream_waits);
  CHECK_EQ(st1.n_grow, st0.n_grow + 1);
  CHECK_EQ(st1.mapped_bytes, st0.mapped_bytes + 2 * kPage);
  vpmm_region_info r = region_at(p, tail);
  CHECK_EQ(r.kind, VPMM_REGION_FREE);
  CHECK_EQ(r.va, tail);
  CHECK_EQ(r.stream, a);
  CHECK_EQ(r.event_pending, 1);
  vt::fill(q, 2 * kPage, 2);

  // Released and drained: A's region is now reusable by B at no cost.
  CHECK_OK(vpmm_host_stream_release(a));
  CHECK_OK(vpmm_host_stream_synchronize(a));
  void* q2 = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, 2 * kPage, b, &q2));
  vpmm_stats st2 = vt::stats(p);
  CHECK_EQ(addr(q2), tail);
  CHECK_EQ(st2.n_cross_stream_reuse, st1.n_cross_stream_reuse + 1);
  CHECK_EQ(st2.mapped_bytes, st1.mapped_bytes);
  CHECK_EQ(st2.n_grow, st1.n_grow);
  CHECK_EQ(st2.n_stream_waits, st1.n_stream_waits);
  vt::fill(q2, 2 * kPage, 3);
  CHECK(vt::verify(head, kPage, 1));
  CHECK(vt::verify(q, 2 * kPage, 2));
  CHECK(vt::verify(q2, 2 * kPage, 3));
  CHECK_OK(vpmm_pool_check(p));
  CHECK_OK(vpmm_pool_free(p, head, b));
  CHECK_OK(vpmm_pool_free(p, q, b));
  CHECK_OK(vpmm_pool_free(p, q2, b));
  CHECK_OK(vpmm_pool_check(p));
  CHECK_OK(vpmm_pool_destroy(p));
  CHECK_OK(vpmm_host_stream_destroy(a));
  CHECK_OK(vpmm_host_stream_destroy(b));
}

// (b3) The default chain: the same request takes A's pending region whole,
// in place, after a GPU-side wait of B on A's work, instead of growing (the
// pending-reuse step, before the budget's growth; docs/handles.md, "Pending
// frees instead of growth"). B's work then runs after A's.
TEST("default chain: a region freed on a held stream is taken in place after a GPU-side wait, not grown past") {
  vpmm_pool* p = pool_with(VPMM_HANDLE_SIZE_UNLIMITED);
  if (!p) return;
  const HeldTail h = malloc_beside_held_tail(p);
  vpmm_stream a = h.a, b = h.b;
  void *head = h.head, *q = h.q;
  const uint64_t tail = h.tail;
  const vpmm_stats st0 = h.st0, st1 = h.st1;
  CHECK_EQ(addr(q), tail);
  CHECK_EQ(st1.n_stream_waits, st0.n_stream_waits + 1);
  CHECK_EQ(st1.n_cross_stream_reuse, st0.n_cross_stream_reuse + 1);
  CHECK_EQ(st1.n_grow, st0.n_grow);
  CHECK_EQ(st1.mapped_bytes, st0.mapped_bytes);
  // B's work waits for A's: B cannot drain while A is held.
  CHECK_EQ(vpmm_host_stream_synchronize(b), VPMM_ERR_WRONG_STATE);
  CHECK_OK(vpmm_host_stream_release(a));
  CHECK_OK(vpmm_host_stream_synchronize(b));
  vt::fill(q, 2 * kPage, 2);
  CHECK(vt::verify(head, kPage, 1));
  CHECK(vt::verify(q, 2 * kPage, 2));
  CHECK_OK(vpmm_pool_free(p, head, b));
  CHECK_OK(vpmm_pool_free(p, q, b));
  CHECK_OK(vpmm_pool_check(p));
  CHECK_OK(vpmm_pool_destroy(p));
  CHECK_OK(vpmm_host_stream_destroy(a));
  CHECK_OK(vpmm_host_stream_destroy(b));
}

// (b') With both a pending and a completed foreign region that fit, Phase 1
// takes the completed one; the pending one is left alone (no wait, no remap).
TEST("cross stream Phase 1: a completed foreign region wins over a pending one") {
  vpmm_pool* p = pool_with(kPage);  // one handle per page: everything is movable
  if (!p) return;
  vpmm_stream a = new_stream(), b = new_stream(), c = new_stream();
  void *xa = nullptr, *xc = nullptr, *sep = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, 2 * kPage, a, &xa));
  CHECK_OK(vpmm_pool_malloc(p, kPage, b, &sep));  // keeps the two frees apart
  CHECK_OK(vpmm_pool_malloc(p, 3 * kPage, c, &xc));
  CHECK_OK(vpmm_host_stream_hold(a));
  CHECK_OK(vpmm_pool_free(p, xa, a));  // pending: A is held
  CHECK_OK(vpmm_pool_free(p, xc, c));  // completes at once: C is idle
  vpmm_stats st0 = vt::stats(p);
  void* q = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, 2 * kPage, b, &q));
  vpmm_stats st1 = vt::stats(p);
  CHECK_EQ(q, xc);  // the head of C's (larger) completed region
  CHECK_EQ(st1.n_cross_stream_reuse, st0.n_cross_stream_reuse + 1);
  CHECK_EQ(st1.n_stream_waits, st0.n_stream_waits);
  CHECK_EQ(st1.n_defrag, st0.n_defrag);
  CHECK_EQ(st1.mapped_bytes, st0.mapped_bytes);
  vpmm_region_info r = region_at(p, addr(xa));
  CHECK_EQ(r.kind, VPMM_REGION_FREE);
  CHECK_EQ(r.stream, a);
  CHECK_EQ(r.size, 2 * kPage);
  CHECK_OK(vpmm_host_stream_release(a));
  CHECK_OK(vpmm_pool_free(p, q, b));
  CHECK_OK(vpmm_pool_free(p, sep, b));
  CHECK_OK(vpmm_pool_check(p));
  CHECK_OK(vpmm_pool_destroy(p));
  for (vpmm_stream s : {a, b, c}) CHECK_OK(vpmm_host_stream_destroy(s));
}

// (b'') VPMM_PENDING_REUSE=1 (off by default): a request no ready region
// fits takes another stream's pending region whole, in place, after a
// GPU-side wait instead of growing; its stream's work then runs after the
// freeing stream's. A pending region more than 8x the request is left alone.
TEST("VPMM_PENDING_REUSE: a pending foreign region that fits is reused in place after a GPU-side wait") {
  setenv("VPMM_PENDING_REUSE", "1", 1);
  vpmm_pool* p = pool_with(kPage);  // read when the pool is created
  unsetenv("VPMM_PENDING_REUSE");
  if (!p) return;
  vpmm_stream a = new_stream(), b = new_stream();
  void *xa = nullptr, *big = nullptr, *sep = nullptr, *sep2 = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, 2 * kPage, a, &xa));
  CHECK_OK(vpmm_pool_malloc(p, kPage, b, &sep));  // keeps the frees apart
  CHECK_OK(vpmm_pool_malloc(p, 17 * kPage, a, &big));
  CHECK_OK(vpmm_pool_malloc(p, kPage, b, &sep2));
  vt::fill(xa, 2 * kPage, 1);
  CHECK_OK(vpmm_host_stream_hold(a));
  CHECK_OK(vpmm_pool_free(p, xa, a));   // pending: A is held
  CHECK_OK(vpmm_pool_free(p, big, a));  // pending too, 17 pages
  vpmm_stats st0 = vt::stats(p);
  void* q = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, 2 * kPage, b, &q));
  vpmm_stats st1 = vt::stats(p);
  CHECK_EQ(q, xa);  // in place: no growth, no remap
  CHECK_EQ(st1.n_cross_stream_reuse, st0.n_cross_stream_reuse + 1);
  CHECK_EQ(st1.n_stream_waits, st0.n_stream_waits + 1);
  CHECK_EQ(st1.mapped_bytes, st0.mapped_bytes);
  CHECK_EQ(st1.n_defrag, st0.n_defrag);
  // B's work now waits for A's: synchronize says so rather than run it.
  Kernel k;
  k.check_at = q;
  k.check_bytes = 2 * kPage;
  k.check_seed = 1;
  CHECK_OK(vpmm_host_stream_launch(b, run_kernel, &k));
  CHECK_EQ(vpmm_host_stream_synchronize(b), VPMM_ERR_WRONG_STATE);
  CHECK_EQ(k.check_ok.load(), -1);
  // One page: the 17-page pending region is more than 8x it, so not taken.
  void* one = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, kPage, b, &one));
  CHECK(addr(one) + kPage <= addr(big) || addr(one) >= addr(big) + 17 * kPage);
  CHECK_OK(vpmm_host_stream_release(a));
  CHECK_OK(vpmm_host_stream_synchronize(a));
  CHECK_OK(vpmm_host_stream_synchronize(b));
  CHECK_EQ(k.check_ok.load(), 1);  // ran after A, on the bytes A's work left
  for (void* x : {q, one, sep, sep2}) CHECK_OK(vpmm_pool_free(p, x, b));
  CHECK_OK(vpmm_pool_check(p));
  CHECK_OK(vpmm_pool_destroy(p));
  for (vpmm_stream x : {a, b}) CHECK_OK(vpmm_host_stream_destroy(x));
}

// The premise of every hold-based test (vpmm.h: "A held stream runs nothing
// until released, so events recorded on it stay pending") must hold even
// when the stream was busy when it was held: here a kernel is still running
// at hold time, the pool records A's event lazily while it runs, and the
// kernel then finishes. A is still held, so the memory freed on A after the
// hold must stay unavailable to B until A is released.
// Under the exact chain: the default's budget step would take that memory
// in place after a GPU-side wait of B on A (b3 above), which is no test of
// the event.
TEST("hold: events recorded on a held stream stay pending even if work was running at hold time") {
  vpmm_pool* p = pool_with(VPMM_HANDLE_SIZE_UNLIMITED, 1024, 64, VPMM_PLACEMENT_EXACT);
  if (!p) return;
  vpmm_stream a = new_stream(), b = new_stream();
  std::atomic<bool> started{false}, go{false};
  std::atomic<pid_t> worker{0};  // A's worker thread, running the kernel
  struct Blocker {
    std::atomic<bool>* started;
    std::atomic<bool>* go;
    std::atomic<pid_t>* worker;
  } blk{&started, &go, &worker};
  CHECK_OK(vpmm_host_stream_launch(
      a,
      [](void* u) {
        Blocker* k = static_cast<Blocker*>(u);
        *k->worker = vt::thread_id();
        *k->started = true;
        while (!*k->go) sched_yield();  // running, never asleep: see below
      },
      &blk));
  while (!started) sleep_ms(1);
  CHECK_OK(vpmm_host_stream_hold(a));
  void* head = unmovable_free_tail(p, a, 2);  // freed on A while A is held
  const uint64_t tail = addr(head) + kPage;
  void* q1 = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, 2 * kPage, b, &q1));  // records A's event now
  CHECK(addr(q1) != tail);
  go = true;  // the running kernel ends; A stays held
  // Observed, not timed: the worker sleeps only once the kernel returned and
  // the hold parked it, so what follows runs after the kernel finished.
  CHECK(vt::wait_until_blocked(worker));
  void* q2 = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, 2 * kPage, b, &q2));
  CHECK(addr(q2) != tail);
  vpmm_region_info r = region_at(p, tail);
  CHECK_EQ(r.kind, VPMM_REGION_FREE);
  CHECK_EQ(r.event_pending, 1);
  CHECK_OK(vpmm_host_stream_release(a));
  CHECK_OK(vpmm_host_stream_synchronize(a));
  void* q3 = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, 2 * kPage, b, &q3));
  for (void* x : {head, q1, q2, q3}) CHECK_OK(vpmm_pool_free(p, x, b));
  CHECK_OK(vpmm_pool_check(p));
  CHECK_OK(vpmm_pool_destroy(p));
  CHECK_OK(vpmm_host_stream_destroy(a));
  CHECK_OK(vpmm_host_stream_destroy(b));
}

// (c) Phase 2 harvests a region freed on held stream A for a malloc on B:
// the malloc returns at once (no CPU wait), the pool records a GPU-side wait
// on B, and work launched on B after the malloc runs only after A's work.
// A's kernel writes through the OLD address; B's kernel reads the NEW one:
// the bytes prove both the ordering and the double mapping.
TEST("Phase 2: harvesting a pending foreign region inserts a stream wait, never blocks") {
  vpmm_pool* p = pool_with(kPage, /*capacity_pages=*/4);  // full: B can only harvest
  if (!p) return;
  vpmm_stream a = new_stream(), b = new_stream();
  void* pa = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, 4 * kPage, a, &pa));
  CHECK_OK(vpmm_host_stream_hold(a));
  std::atomic<int> order{0};
  Kernel ka;
  ka.order = &order;
  ka.sleep_ms = 20;
  ka.write_at = pa;  // queued before the free: may use the memory
  ka.write_bytes = 4 * kPage;
  ka.write_seed = 42;
  CHECK_OK(vpmm_host_stream_launch(a, run_kernel, &ka));
  CHECK_OK(vpmm_pool_free(p, pa, a));

  vpmm_stats st0 = vt::stats(p);
  void* q = nullptr;
  vpmm_status mst = -1;
  bool in_time = returns_within(
      5000, [&] { mst = vpmm_pool_malloc(p, 4 * kPage, b, &q); },
      [&] { vpmm_host_stream_release(a); });
  CHECK(in_time);  // the CPU never waits for A
  CHECK_EQ(mst, VPMM_OK);
  if (!in_time || mst != VPMM_OK) {
    if (in_time) vpmm_host_stream_release(a);  // else the unblock released it
    vpmm_host_stream_synchronize(a);
    vpmm_pool_destroy(p);
    return;
  }
  vpmm_stats st1 = vt::stats(p);
  CHECK(q != pa);
  CHECK_EQ(st1.n_stream_waits, st0.n_stream_waits + 1);
  CHECK_EQ(st1.n_defrag, st0.n_defrag + 1);
  CHECK_EQ(st1.n_grow, st0.n_grow);
  CHECK_EQ(st1.mapped_bytes, st0.mapped_bytes);
  CHECK_EQ(st1.bytes_remapped, st0.bytes_remapped + 4 * kPage);

  Kernel kb;
  kb.order = &order;
  kb.check_at = q;
  kb.check_bytes = 4 * kPage;
  kb.check_seed = 42;
  CHECK_OK(vpmm_host_stream_launch(b, run_kernel, &kb));
  sleep_ms(100);
  CHECK_EQ(kb.ran_at.load(), 0);  // B waits on the GPU side for A
  CHECK_EQ(ka.ran_at.load(), 0);
  CHECK_OK(vpmm_host_stream_release(a));
  CHECK_OK(vpmm_host_stream_synchronize(b));
  CHECK_OK(vpmm_host_stream_synchronize(a));
  CHECK_EQ(ka.ran_at.load(), 1);
  CHECK_EQ(kb.ran_at.load(), 2);
  CHECK_EQ(kb.check_ok.load(), 1);  // A's bytes, written via the old VA, are at q
  CHECK_OK(vpmm_pool_free(p, q, b));
  CHECK_OK(vpmm_pool_check(p));
  CHECK_OK(vpmm_pool_destroy(p));
  CHECK_OK(vpmm_host_stream_destroy(a));
  CHECK_OK(vpmm_host_stream_destroy(b));
}

// (d) The old VA of harvested pages is a zombie: it stays mapped while the
// event of the region is pending (a kernel queued on A reads it after the
// remap), and is unmapped (a touch faults) by the first malloc after the
// event completed.
TEST("zombie: old VA stays mapped while its event is pending, reaped after") {
  vpmm_pool* p = pool_with(kPage, /*capacity_pages=*/16);
  if (!p) return;
  vpmm_stream a = new_stream(), b = new_stream(), c = new_stream();
  void* pa = nullptr;
  const uint64_t bytes = 4 * kPage;
  CHECK_OK(vpmm_pool_malloc(p, bytes, a, &pa));
  vt::fill(pa, bytes, 11);
  CHECK_OK(vpmm_host_stream_hold(a));
  std::atomic<int> order{0};
  Kernel ka;  // reads the OLD address after B got the pages
  ka.order = &order;
  ka.check_at = pa;
  ka.check_bytes = bytes;
  ka.check_seed = 11;
  CHECK_OK(vpmm_host_stream_launch(a, run_kernel, &ka));
  CHECK_OK(vpmm_pool_free(p, pa, a));
  // B's only option is to remap A's pages: there is no other free memory and
  // the hole after them is where they land.
  void* q = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, bytes, b, &q));
  CHECK(q != pa);
  vpmm_stats st1 = vt::stats(p);
  vpmm_region_info z = region_at(p, addr(pa));
  CHECK_EQ(z.kind, VPMM_REGION_ZOMBIE);
  CHECK_EQ(z.va, addr(pa));
  CHECK_EQ(z.size, bytes);
  CHECK_EQ(z.event_pending, 1);
  CHECK_EQ(st1.zombie_bytes, bytes);
  CHECK_EQ(st1.n_stream_waits, uint64_t(1));
  // Still mapped (double mapping): the CPU reads the same bytes at both VAs.
  CHECK(vt::verify(pa, bytes, 11));
  CHECK(vt::verify(q, bytes, 11));
  // B overwrites the pages in its stream order: after A's reader.
  Kernel kb;
  kb.order = &order;
  kb.write_at = q;
  kb.write_bytes = bytes;
  kb.write_seed = 12;
  CHECK_OK(vpmm_host_stream_launch(b, run_kernel, &kb));
  // A malloc while A is held must not reap the zombie.
  void* other = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, kPage, c, &other));
  CHECK_EQ(region_at(p, addr(pa)).kind, VPMM_REGION_ZOMBIE);
  CHECK_EQ(vt::stats(p).n_zombies_reaped, st1.n_zombies_reaped);

  CHECK_OK(vpmm_host_stream_release(a));
  CHECK_OK(vpmm_host_stream_synchronize(a));
  CHECK_OK(vpmm_host_stream_synchronize(b));
  CHECK_EQ(ka.check_ok.load(), 1);  // the kernel read intact data, no fault
  CHECK_EQ(ka.ran_at.load(), 1);
  CHECK_EQ(kb.ran_at.load(), 2);
  CHECK(vt::verify(q, bytes, 12));
  // Completed but not yet reaped: reaping happens at the next malloc.
  z = region_at(p, addr(pa));
  CHECK_EQ(z.kind, VPMM_REGION_ZOMBIE);
  CHECK_EQ(z.event_pending, 0);

  // 5 pages cannot land in the 4-page hole the zombie leaves, so the VA at
  // pa stays unmapped after the reap.
  void* other2 = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, 5 * kPage, c, &other2));
  vpmm_stats st2 = vt::stats(p);
  z = region_at(p, addr(pa));
  CHECK_EQ(z.kind, VPMM_REGION_HOLE);
  CHECK_EQ(z.va, addr(pa));
  CHECK_EQ(st2.n_zombies_reaped, st1.n_zombies_reaped + 1);
  CHECK_EQ(st2.zombie_bytes, uint64_t(0));
  CHECK(faulted(read_in_child(addr(pa))));  // unmapped for real
  CHECK(vt::verify(q, bytes, 12));          // the new VA is unaffected
  CHECK_OK(vpmm_pool_check(p));
  for (void* x : {q, other, other2}) CHECK_OK(vpmm_pool_free(p, x, c));
  CHECK_OK(vpmm_pool_check(p));
  CHECK_OK(vpmm_pool_destroy(p));
  for (vpmm_stream s : {a, b, c}) CHECK_OK(vpmm_host_stream_destroy(s));
}

// (e) A small block freed on another stream than its slab's may still be in
// use by that stream's queued work: it is not handed out again until the
// freeing stream's event completed. Freed on the slab's own stream it comes
// back at once.
TEST("small blocks freed on a foreign stream wait for that stream's event") {
  vpmm_pool* p = pool_with(0);
  if (!p) return;
  vpmm_stream a = new_stream(), b = new_stream();
  const uint64_t sz = 1000;
  void* s1 = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, sz, b, &s1));  // slab on B
  void* keep = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, sz, b, &keep));
  CHECK_OK(vpmm_host_stream_hold(a));
  Kernel ka;  // A still reads s1 when it runs
  vt::fill(s1, sz / 8 * 8, 5);
  ka.check_at = s1;
  ka.check_bytes = sz / 8 * 8;
  ka.check_seed = 5;
  CHECK_OK(vpmm_host_stream_launch(a, run_kernel, &ka));
  vpmm_stats st0 = vt::stats(p);
  CHECK_OK(vpmm_pool_free(p, s1, a));
  CHECK_EQ(vt::stats(p).n_events_recorded, st0.n_events_recorded + 1);
  CHECK_EQ(vt::stats(p).n_live, st0.n_live - 1);
  std::vector<void*> got;
  for (int i = 0; i < 12; ++i) {  // more than one slab's worth of this class
    void* x = nullptr;
    CHECK_OK(vpmm_pool_malloc(p, sz, b, &x));
    CHECK(x != s1);
    vt::fill(x, sz / 8 * 8, 100 + i);  // would corrupt A's reader if x == s1
    got.push_back(x);
  }
  CHECK_OK(vpmm_host_stream_release(a));
  CHECK_OK(vpmm_host_stream_synchronize(a));
  CHECK_EQ(ka.check_ok.load(), 1);
  void* again = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, sz, b, &again));
  CHECK_EQ(again, s1);  // back in its slab once A's event completed
  got.push_back(again);
  // Same-stream free: reusable at once.
  void* last = got.back();
  CHECK_OK(vpmm_pool_free(p, last, b));
  void* same = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, sz, b, &same));
  CHECK_EQ(same, last);
  got.back() = same;
  for (size_t i = 0; i + 1 < got.size(); ++i) CHECK(vt::verify(got[i], sz / 8 * 8, 100 + i));
  for (void* x : got) CHECK_OK(vpmm_pool_free(p, x, b));
  CHECK_OK(vpmm_pool_free(p, keep, b));
  CHECK_OK(vpmm_pool_check(p));
  CHECK_EQ(vt::stats(p).n_live, uint64_t(0));
  CHECK_OK(vpmm_pool_destroy(p));
  CHECK_OK(vpmm_host_stream_destroy(a));
  CHECK_OK(vpmm_host_stream_destroy(b));
}

// (f) Streams made by the pool are host streams that work with the pool and
// the host-stream API; destroying one that still has work queued after a free
// records the event first (retire), waits for the work, and the region is
// then reused by another stream.
TEST("pool streams: create/destroy; a destroyed stream's regions are reused safely") {
  vpmm_pool* p = pool_with(kPage);
  if (!p) return;
  vpmm_stream s = nullptr, t = nullptr;
  CHECK_OK(vpmm_pool_stream_create(p, &s));
  CHECK_OK(vpmm_pool_stream_create(p, &t));
  CHECK(s != nullptr && t != nullptr && s != t);
  void *x = nullptr, *y = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, 2 * kPage, s, &x));
  CHECK_OK(vpmm_pool_malloc(p, kPage, t, &y));  // keeps t's own memory apart
  vt::fill(x, 2 * kPage, 21);
  Kernel k;  // queued before the free: reads x late
  k.sleep_ms = 100;
  k.check_at = x;
  k.check_bytes = 2 * kPage;
  k.check_seed = 21;
  CHECK_OK(vpmm_host_stream_launch(s, run_kernel, &k));
  CHECK_OK(vpmm_pool_free(p, x, s));
  vpmm_stats st0 = vt::stats(p);
  CHECK_OK(vpmm_pool_stream_destroy(p, s));  // retire + drain
  vpmm_stats st1 = vt::stats(p);
  CHECK_EQ(k.ran_at.load(), 1);  // destroy waited for the queued work
  CHECK_EQ(k.check_ok.load(), 1);
  CHECK_EQ(st1.n_events_recorded, st0.n_events_recorded + 1);  // the lazy event, now
  vpmm_region_info r = region_at(p, addr(x));
  CHECK_EQ(r.kind, VPMM_REGION_FREE);
  CHECK(r.stream != s);  // re-keyed: a new stream at the same address is foreign
  CHECK_EQ(r.event_pending, 0);
  void* q = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, 2 * kPage, t, &q));
  vpmm_stats st2 = vt::stats(p);
  CHECK_EQ(q, x);
  CHECK_EQ(st2.n_cross_stream_reuse, st1.n_cross_stream_reuse + 1);
  CHECK_EQ(st2.mapped_bytes, st1.mapped_bytes);
  vt::fill(q, 2 * kPage, 22);
  // The destroyed stream is gone for the pool and for the host-stream API.
  CHECK_EQ(vpmm_host_stream_hold(s), VPMM_ERR_INVALID_ARGUMENT);
  CHECK_OK(vpmm_pool_free(p, q, t));
  CHECK_OK(vpmm_pool_free(p, y, t));
  CHECK_OK(vpmm_pool_check(p));
  CHECK_OK(vpmm_pool_stream_destroy(p, t));
  CHECK_OK(vpmm_pool_destroy(p));
}

// (f') Retire of a held stream: the pool records the events it needs while
// the stream exists; its regions count as foreign from then on and are only
// reused after that event completed, even with the stream destroyed meanwhile.
// Under the exact chain, as the hold test above.
TEST("retire: regions of a retired held stream are reused only after its event") {
  vpmm_pool* p = pool_with(VPMM_HANDLE_SIZE_UNLIMITED, 1024, 64, VPMM_PLACEMENT_EXACT);
  if (!p) return;
  vpmm_stream s = nullptr, t = nullptr;
  CHECK_OK(vpmm_pool_stream_create(p, &s));
  CHECK_OK(vpmm_pool_stream_create(p, &t));
  CHECK_OK(vpmm_host_stream_hold(s));
  void* head = unmovable_free_tail(p, s, 2);
  const uint64_t tail = addr(head) + kPage;
  vpmm_stats st0 = vt::stats(p);
  CHECK_OK(vpmm_pool_stream_retire(p, s));
  vpmm_stats st1 = vt::stats(p);
  CHECK_EQ(st1.n_events_recorded, st0.n_events_recorded + 1);
  vpmm_region_info r = region_at(p, tail);
  CHECK_EQ(r.kind, VPMM_REGION_FREE);
  CHECK(r.stream != s);
  CHECK_EQ(r.event_pending, 1);
  // Retiring twice, or a stream the pool never saw, is harmless.
  CHECK_OK(vpmm_pool_stream_retire(p, s));
  CHECK_OK(vpmm_pool_stream_retire(p, t));
  void* q = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, 2 * kPage, t, &q));
  CHECK(addr(q) != tail);
  CHECK_EQ(vt::stats(p).n_grow, st1.n_grow + 1);
  CHECK_EQ(region_at(p, tail).kind, VPMM_REGION_FREE);
  // The caller destroys its stream itself (after retire the pool must not see
  // it again); destroy drains the held work, so the event completes.
  CHECK_OK(vpmm_host_stream_destroy(s));
  void* q2 = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, 2 * kPage, t, &q2));
  CHECK_EQ(addr(q2), tail);
  vt::fill(q2, 2 * kPage, 31);
  vt::fill(q, 2 * kPage, 32);
  CHECK(vt::verify(q2, 2 * kPage, 31));
  for (void* x : {head, q, q2}) CHECK_OK(vpmm_pool_free(p, x, t));
  CHECK_OK(vpmm_pool_check(p));
  CHECK_OK(vpmm_pool_stream_destroy(p, t));
  CHECK_OK(vpmm_pool_destroy(p));
}

namespace {
int count_memfds() {
  int n = 0;
  for (int fd = 0; fd < 1024; ++fd) {
    char path[64], target[256];
    std::snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    ssize_t len = readlink(path, target, sizeof target - 1);
    if (len <= 0) continue;
    target[len] = '\0';
    if (std::strncmp(target, "/memfd:", 7) == 0) ++n;
  }
  return n;
}
// Whether any mapping of the process covers va (per /proc/self/maps).
bool va_mapped(uint64_t va) {
  std::ifstream f("/proc/self/maps");
  std::string line;
  while (std::getline(f, line)) {
    unsigned long long lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%llx-%llx", &lo, &hi) == 2 && va >= lo && va < hi) return true;
  }
  return false;
}
}  // namespace

// (g) Destroying a pool whose frees are still pending on a busy (not held)
// stream waits for that work (a kernel writes late into memory freed after
// its launch, whose pages were meanwhile remapped: zombie and free regions),
// then releases everything: no event, memfd or VA is left behind. The kernel
// touches nothing if destroy already returned, so a destroy that does not
// wait fails the test instead of crashing it.
TEST("destroy with frees pending on a running stream waits, then leaks nothing") {
  const uint64_t events0 = vpmm::host::live_event_count();
  const int memfds0 = count_memfds();
  vpmm_stream s = new_stream(), b = new_stream();
  vpmm_pool* p = pool_with(kPage);
  if (!p) return;
  // Host: one memfd per pool. HIP emulator: one per handle (counted below).
  if (!vt::testing_hip()) CHECK_EQ(count_memfds(), memfds0 + 1);
  void *x = nullptr, *y = nullptr, *z = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, 2 * kPage, s, &x));
  CHECK_OK(vpmm_pool_malloc(p, kPage, b, &z));
  CHECK_OK(vpmm_pool_malloc(p, 2 * kPage, s, &y));
  std::atomic<bool> destroyed{false};
  Kernel k;
  k.sleep_ms = 150;
  k.too_late = &destroyed;
  k.write_at = x;
  k.write_bytes = 2 * kPage;
  k.write_seed = 9;
  Kernel k2;
  k2.too_late = &destroyed;
  k2.write_at = y;
  k2.write_bytes = 2 * kPage;
  k2.write_seed = 10;
  CHECK_OK(vpmm_host_stream_launch(s, run_kernel, &k));
  CHECK_OK(vpmm_host_stream_launch(s, run_kernel, &k2));
  CHECK_OK(vpmm_pool_free(p, x, s));
  CHECK_OK(vpmm_pool_free(p, y, s));  // not adjacent to x (z is between)
  // A malloc on b harvests x's pending pages (the oldest foreign region):
  // their old VA becomes a zombie that the kernel still writes to; y stays a
  // free region whose event was never recorded.
  void* q = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, 2 * kPage, b, &q));
  vpmm_stats st = vt::stats(p);
  CHECK_EQ(st.zombie_bytes, 2 * kPage);
  CHECK_EQ(st.free_bytes, 2 * kPage);
  CHECK(vpmm::host::live_event_count() > events0);
  const uint64_t xva = addr(x);
  CHECK(va_mapped(xva));
  CHECK_EQ(k.ran_at.load(), 0);
  CHECK_OK(vpmm_pool_destroy(p));  // q and z are still live: released too
  destroyed = true;
  CHECK_EQ(k.ran_at.load(), 1);  // destroy waited for the pending work
  CHECK_EQ(k.was_too_late.load(), 0);
  CHECK_EQ(k2.ran_at.load(), 1);
  CHECK_EQ(k2.was_too_late.load(), 0);
  // Host: the VA is gone from the process. HIP emulator: freed VA stays
  // the runtime's (PROT_NONE), so its reservation count says it instead.
  if (!vt::testing_hip()) {
    CHECK(!va_mapped(xva));
    CHECK(!va_mapped(addr(q)));
  }
  CHECK_OK(vpmm_host_stream_synchronize(s));
  CHECK_OK(vpmm_host_stream_synchronize(b));
  CHECK_EQ(vpmm::host::live_event_count(), events0);
  CHECK_EQ(count_memfds(), memfds0);
  if (vt::testing_hip()) {  // nothing left in the emulated device either
    CHECK_EQ(vt::emu_get("HANDLES"), uint64_t{0});
    CHECK_EQ(vt::emu_get("MAPPINGS"), uint64_t{0});
    CHECK_EQ(vt::emu_get("USED"), uint64_t{0});
    CHECK_EQ(vt::emu_get("RESERVATIONS"), uint64_t{0});
  }
  CHECK_OK(vpmm_host_stream_destroy(s));
  CHECK_OK(vpmm_host_stream_destroy(b));
}

// (g') The same for a small block freed on a foreign stream: work queued on
// that stream before the free may still write the block, so destroy must wait
// for the block's event as it does for free regions ("work still queued that
// touches pool memory completes first", vpmm.h).
TEST("destroy waits for work pending on a small block freed on a foreign stream") {
  vpmm_stream s = new_stream(), b = new_stream();
  vpmm_pool* p = pool_with(kPage);
  if (!p) return;
  void* sm = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, 512, b, &sm));  // slab on b
  std::atomic<bool> destroyed{false};
  Kernel k;
  k.sleep_ms = 150;
  k.too_late = &destroyed;
  k.write_at = sm;
  k.write_bytes = 512;
  k.write_seed = 3;
  CHECK_OK(vpmm_host_stream_launch(s, run_kernel, &k));
  CHECK_OK(vpmm_pool_free(p, sm, s));  // pending behind s's event
  CHECK_OK(vpmm_pool_destroy(p));
  destroyed = true;
  CHECK_OK(vpmm_host_stream_synchronize(s));
  CHECK_EQ(k.ran_at.load(), 1);
  CHECK_EQ(k.was_too_late.load(), 0);  // fails if destroy did not wait
  CHECK_OK(vpmm_host_stream_destroy(s));
  CHECK_OK(vpmm_host_stream_destroy(b));
}

// A stream destroyed without vpmm_pool_stream_retire: the pool cannot record
// its lazy event any more, falls back to a device-wide synchronisation, and
// the memory freed on it is reused instead of failing every later malloc.
TEST("a stream destroyed without retire: its freed memory is still reused") {
  vpmm_pool* p = pool_with(0);
  if (!p) return;
  vpmm_stream a = new_stream(), b = new_stream();
  void* x = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, 4 * kPage, a, &x));
  CHECK_OK(vpmm_pool_free(p, x, a));
  CHECK_OK(vpmm_host_stream_destroy(a));  // no retire
  uint64_t mapped = vt::stats(p).mapped_bytes;
  void* y = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, 4 * kPage, b, &y));
  CHECK_EQ(y, x);  // reused in place, nothing new mapped
  CHECK_EQ(vt::stats(p).mapped_bytes, mapped);
  CHECK_OK(vpmm_pool_free(p, y, b));
  CHECK_OK(vpmm_pool_check(p));
  CHECK_OK(vpmm_pool_destroy(p));
  CHECK_OK(vpmm_host_stream_destroy(b));
}

TEST_MAIN()
