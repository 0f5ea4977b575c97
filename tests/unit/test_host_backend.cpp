// What only the host backend has, beyond the backend contract that
// tests/conformance checks for every backend: its facts and capacity
// parameter, the driver rules it enforces on the CPU (a touch before
// set_access or after unmap really faults, in a forked child), capacity
// accounting under churn, and its test streams (vpmm_host_streams.h): launch
// order, holds that nest, events that outlive their stream, waits across
// held streams, a stream that waits on itself, many threads at once.
// Prints "N passed, N failed" (tests/unit/check.hpp).
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "backend/backend.hpp"
#include "backend/host/host_streams.hpp"
#include "backend/registry.hpp"
#include "backend_counters.hpp"
#include "check.hpp"
#include "status_check.hpp"
#include "common/status.hpp"

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

using vpmm::Backend;
using vpmm::EventHandle;
using vpmm::PhysHandle;

uint64_t G = 4096;  // granularity, set in main

std::unique_ptr<Backend> make(uint64_t capacity) {
  vpmm::BackendParams p;
  p.host_capacity = capacity;
  vpmm_status st = VPMM_ERR_INTERNAL;
  std::unique_ptr<Backend> b = vpmm::make_backend(VPMM_BACKEND_HOST, p, &st);
  CHECK(st == VPMM_OK && b != nullptr);
  return b;
}

char* at(uint64_t va) { return reinterpret_cast<char*>(static_cast<uintptr_t>(va)); }

void sleep_ms(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

// Touch *p in a forked child. Returns the signal that killed it, 0 when the
// touch succeeded, -1 when it died otherwise (a sanitizer catches SIGSEGV
// itself, reports and exits non-zero).
int touch_in_child(uint64_t va, bool write) {
  std::fflush(nullptr);
  pid_t pid = fork();
  if (pid == 0) {
    // Quiet child: a sanitizer reports the (expected) SIGSEGV on stderr.
    int devnull = open("/dev/null", O_WRONLY);
    if (devnull >= 0) dup2(devnull, 2);
    volatile char* p = at(va);
    if (write)
      *p = 1;
    else
      (void)*p;
    _exit(0);
  }
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid) return -2;
  if (WIFSIGNALED(status)) return WTERMSIG(status);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -1;
}

bool faulted(int r) { return r == SIGSEGV || r == SIGBUS || (UNDER_SANITIZER && r == -1); }

// ---------------------------------------------------------------------------

void test_identity() {
  auto b = make(0);
  if (!b) return;
  CHECK(std::strcmp(b->name(), "host") == 0);
  CHECK(b->granularity() == static_cast<uint64_t>(sysconf(_SC_PAGESIZE)));
  CHECK(b->recommended_page_size() == (2ull << 20));
  CHECK(b->default_va_size() == (64ull << 30));
  CHECK(b->device() == 0);
  CHECK(b->kind() == VPMM_BACKEND_HOST);
  CHECK(b->max_handle_size() == 0);
  CHECK(b->capabilities() == (vpmm::kCapDeviceCopy | vpmm::kCapPinnedHost | vpmm::kCapMemInfo));
  uint64_t fr = 0, tot = 0;
  CHECK_ST(b->mem_info(&fr, &tot), VPMM_OK);
  CHECK(tot == (1ull << 30) && fr == tot);

  vpmm::BackendParams bad;
  bad.host_capacity = 100;  // below one page
  vpmm_status st = VPMM_OK;
  CHECK(vpmm::make_backend(VPMM_BACKEND_HOST, bad, &st) == nullptr);
  CHECK(st == VPMM_ERR_INVALID_ARGUMENT);
  CHECK_ERR_HAS("host_capacity");
}

// Run before any stream exists, so the forked children come from a process
// with as few threads as possible.
void test_faults() {
  auto b = make(0);
  if (!b) return;
  uint64_t va = 0;
  CHECK_ST(b->reserve(8 * G, 0, &va), VPMM_OK);
  PhysHandle h = 0;
  CHECK_ST(b->create(G, &h), VPMM_OK);
  CHECK(faulted(touch_in_child(va, false)));  // reserved, nothing mapped
  CHECK_ST(b->map(va, G, h), VPMM_OK);
  CHECK(faulted(touch_in_child(va, false)));  // mapped, no access yet
  CHECK_ST(b->set_access(va, G), VPMM_OK);
  CHECK(touch_in_child(va, true) == 0);  // control: the child can touch good memory
  at(va)[0] = 5;
  CHECK_ST(b->unmap(va, G), VPMM_OK);
  int r = touch_in_child(va, false);  // stale touch after unmap
  CHECK(faulted(r));
  if (!UNDER_SANITIZER) CHECK(r == SIGSEGV);
  CHECK(faulted(touch_in_child(va, true)));
  CHECK_ST(b->map(va, G, h), VPMM_OK);  // remap: data is still in the handle
  CHECK_ST(b->set_access(va, G), VPMM_OK);
  CHECK(at(va)[0] == 5);
  CHECK_ST(b->unmap(va, G), VPMM_OK);
  CHECK_ST(b->release(h, G), VPMM_OK);
  CHECK_ST(b->unreserve(va, 8 * G), VPMM_OK);
  vt::check_counters_zero(*b);
}

void test_capacity() {
  const uint64_t cap = 256 * G;
  auto b = make(cap + 100);  // rounded down to whole pages
  if (!b) return;
  uint64_t fr = 0, tot = 0;
  CHECK_ST(b->mem_info(&fr, &tot), VPMM_OK);
  CHECK(tot == cap && fr == cap);
  PhysHandle big = 0, one = 0;
  CHECK_ST(b->create(cap, &big), VPMM_OK);
  CHECK_ST(b->create(G, &one), VPMM_ERR_OUT_OF_MEMORY);
  CHECK_ERR_HAS("capacity");
  CHECK(one == 0);
  CHECK_ST(b->mem_info(&fr, &tot), VPMM_OK);
  CHECK(fr == 0);

  // Released while mapped still holds memory until the last unmap.
  uint64_t va = 0;
  CHECK_ST(b->reserve(cap, 0, &va), VPMM_OK);
  CHECK_ST(b->map(va, cap, big), VPMM_OK);
  CHECK_ST(b->release(big, cap), VPMM_OK);
  CHECK_ST(b->create(G, &one), VPMM_ERR_OUT_OF_MEMORY);
  CHECK_ST(b->unmap(va, cap), VPMM_OK);
  CHECK_ST(b->create(G, &one), VPMM_OK);
  CHECK_ST(b->release(one, G), VPMM_OK);

  // Random churn: fragmentation must never turn into a false OOM, and every
  // new handle must read as zeros even when its range was used before.
  std::mt19937_64 rng(12345);
  struct H { PhysHandle h; uint64_t size; };
  std::vector<H> live;
  uint64_t used = 0;
  bool never_false_oom = true, always_zero = true;
  for (int i = 0; i < 3000; ++i) {
    const bool do_create = live.empty() || rng() % 100 < 55;
    if (do_create) {
      uint64_t pages = 1 + rng() % 64;
      uint64_t size = pages * G;
      PhysHandle h = 0;
      vpmm_status st = b->create(size, &h);
      if (used + size <= cap) {
        if (st != VPMM_OK) never_false_oom = false;
      } else if (st != VPMM_ERR_OUT_OF_MEMORY) {
        never_false_oom = false;
      }
      if (st != VPMM_OK) continue;
      used += size;
      live.push_back({h, size});
      if (i % 7 == 0) {  // look inside, then dirty it
        CHECK_ST(b->map(va, size, h), VPMM_OK);
        CHECK_ST(b->set_access(va, size), VPMM_OK);
        always_zero = always_zero && at(va)[0] == 0 && at(va)[size - 1] == 0;
        std::memset(at(va), 0x5a, size);
        CHECK_ST(b->unmap(va, size), VPMM_OK);
      }
    } else {
      size_t k = rng() % live.size();
      CHECK_ST(b->release(live[k].h, live[k].size), VPMM_OK);
      used -= live[k].size;
      live[k] = live.back();
      live.pop_back();
    }
  }
  CHECK(never_false_oom);
  CHECK(always_zero);
  for (const H& x : live) CHECK_ST(b->release(x.h, x.size), VPMM_OK);
  CHECK_ST(b->mem_info(&fr, &tot), VPMM_OK);
  CHECK(fr == cap);
  CHECK_ST(b->unreserve(va, cap), VPMM_OK);
  vt::check_counters_zero(*b);
}

// ---- streams ---------------------------------------------------------------

struct Log {
  std::mutex mu;
  std::vector<int> order;
};
struct Item {
  Log* log;
  int value;
};
void log_item(void* p) {
  Item* it = static_cast<Item*>(p);
  std::lock_guard<std::mutex> lk(it->log->mu);
  it->log->order.push_back(it->value);
}
void set_flag(void* p) { static_cast<std::atomic<int>*>(p)->store(1); }
void slow_set_flag(void* p) {
  sleep_ms(30);
  static_cast<std::atomic<int>*>(p)->store(1);
}

void test_launch_order() {
  vpmm_stream s = nullptr;
  CHECK_ST(vpmm::host::stream_create(&s), VPMM_OK);
  CHECK(s != nullptr && vpmm::host::stream_is_valid(s));
  Log log;
  std::vector<Item> items;
  for (int i = 0; i < 300; ++i) items.push_back({&log, i});
  for (int i = 0; i < 300; ++i) CHECK_ST(vpmm::host::stream_launch(s, log_item, &items[i]), VPMM_OK);
  CHECK_ST(vpmm::host::stream_synchronize(s), VPMM_OK);
  bool in_order = log.order.size() == 300;
  for (int i = 0; in_order && i < 300; ++i) in_order = log.order[i] == i;
  CHECK(in_order);

  // Several producers: each one's items keep their relative order.
  Log log2;
  const int T = 4, N = 200;
  std::vector<Item> items2;
  for (int t = 0; t < T; ++t)
    for (int i = 0; i < N; ++i) items2.push_back({&log2, t * 10000 + i});
  std::vector<std::thread> ths;
  std::atomic<int> bad{0};
  for (int t = 0; t < T; ++t)
    ths.emplace_back([&, t] {
      for (int i = 0; i < N; ++i)
        if (vpmm::host::stream_launch(s, log_item, &items2[t * N + i]) != VPMM_OK) bad++;
    });
  for (auto& th : ths) th.join();
  CHECK(bad.load() == 0);
  CHECK_ST(vpmm::host::stream_synchronize(s), VPMM_OK);
  std::vector<int> last(T, -1);
  bool per_producer = log2.order.size() == static_cast<size_t>(T * N);
  for (int v : log2.order) {
    int t = v / 10000, i = v % 10000;
    per_producer = per_producer && i == last[t] + 1;
    last[t] = i;
  }
  CHECK(per_producer);

  // The default stream works too.
  std::atomic<int> flag{0};
  CHECK_ST(vpmm::host::stream_launch(nullptr, set_flag, &flag), VPMM_OK);
  CHECK_ST(vpmm::host::stream_synchronize(nullptr), VPMM_OK);
  CHECK(flag.load() == 1);
  CHECK_ST(vpmm::host::stream_destroy(nullptr), VPMM_ERR_INVALID_ARGUMENT);
  CHECK_ERR_HAS("default");
  CHECK_ST(vpmm::host::stream_destroy(s), VPMM_OK);
}

void test_bad_streams() {
  vpmm_stream dead = nullptr;
  CHECK_ST(vpmm::host::stream_create(&dead), VPMM_OK);
  CHECK_ST(vpmm::host::stream_destroy(dead), VPMM_OK);
  int local = 0;
  vpmm_stream bogus = &local;  // never a stream: must not be dereferenced
  std::atomic<int> flag{0};
  for (vpmm_stream s : {dead, bogus}) {
    CHECK(!vpmm::host::stream_is_valid(s));
    CHECK_ST(vpmm::host::stream_hold(s), VPMM_ERR_INVALID_ARGUMENT);
    CHECK_ERR_HAS("vpmm_host_stream_hold: stream 0x");
    CHECK_ERR_HAS("not a live host stream");
    CHECK_ST(vpmm::host::stream_release(s), VPMM_ERR_INVALID_ARGUMENT);
    CHECK_ST(vpmm::host::stream_launch(s, set_flag, &flag), VPMM_ERR_INVALID_ARGUMENT);
    CHECK_ST(vpmm::host::stream_synchronize(s), VPMM_ERR_INVALID_ARGUMENT);
    CHECK_ST(vpmm::host::stream_destroy(s), VPMM_ERR_INVALID_ARGUMENT);
    uint64_t e = 0;
    CHECK_ST(vpmm::host::event_record(s, &e), VPMM_ERR_INVALID_ARGUMENT);
    CHECK(e == 0);
  }
  CHECK(flag.load() == 0);
  CHECK_ST(vpmm::host::stream_create(nullptr), VPMM_ERR_INVALID_ARGUMENT);
  CHECK_ST(vpmm::host::stream_launch(nullptr, nullptr, nullptr), VPMM_ERR_INVALID_ARGUMENT);
  CHECK_ERR_HAS("fn is NULL");
  bool done = false;
  CHECK_ST(vpmm::host::event_query(12345, &done), VPMM_ERR_INVALID_ARGUMENT);
  CHECK_ERR_HAS("not a live host event");
  CHECK_ST(vpmm::host::event_destroy(0), VPMM_ERR_INVALID_ARGUMENT);
  CHECK_ST(vpmm::host::event_sync(reinterpret_cast<uint64_t>(&local)), VPMM_ERR_INVALID_ARGUMENT);

  auto b = make(0);
  if (!b) return;
  CHECK(!b->stream_valid(bogus));
  CHECK(b->stream_valid(nullptr));
}

void test_hold_and_events() {
  auto b = make(0);
  if (!b) return;
  vpmm_stream s = nullptr;
  CHECK_ST(vpmm::host::stream_create(&s), VPMM_OK);

  // Idle stream: the event is complete at once.
  EventHandle e0 = 0;
  CHECK_ST(b->event_record(s, &e0), VPMM_OK);
  bool done = false;
  CHECK_ST(b->event_query(e0, &done), VPMM_OK);
  CHECK(done);

  // Held stream with nothing queued: the event still waits for the release.
  CHECK_ST(vpmm::host::stream_hold(s), VPMM_OK);
  EventHandle e1 = 0;
  CHECK_ST(b->event_record(s, &e1), VPMM_OK);
  CHECK_ST(b->event_query(e1, &done), VPMM_OK);
  CHECK(!done);

  // Work queued while held does not run; events behind it stay pending.
  std::atomic<int> ran{0};
  CHECK_ST(vpmm::host::stream_launch(s, set_flag, &ran), VPMM_OK);
  EventHandle e2 = 0;
  CHECK_ST(b->event_record(s, &e2), VPMM_OK);
  CHECK_ST(vpmm::host::stream_hold(s), VPMM_OK);  // holds nest
  sleep_ms(30);
  CHECK(ran.load() == 0);
  CHECK_ST(b->event_query(e2, &done), VPMM_OK);
  CHECK(!done);
  CHECK_ST(vpmm::host::stream_synchronize(s), VPMM_ERR_WRONG_STATE);
  CHECK_ERR_HAS("held");
  CHECK_ST(b->stream_sync(s), VPMM_ERR_WRONG_STATE);
  CHECK_ST(vpmm::host::stream_release(s), VPMM_OK);
  sleep_ms(20);
  CHECK(ran.load() == 0);  // one hold left
  CHECK_ST(b->event_query(e2, &done), VPMM_OK);
  CHECK(!done);

  // event_sync blocks until another thread releases the stream.
  std::atomic<int> released{0};
  std::thread releaser([&] {
    sleep_ms(40);
    released.store(1);
    vpmm::host::stream_release(s);
  });
  CHECK_ST(b->event_sync(e2), VPMM_OK);
  CHECK(released.load() == 1);
  CHECK(ran.load() == 1);
  releaser.join();
  CHECK_ST(b->event_query(e1, &done), VPMM_OK);
  CHECK(done);
  CHECK_ST(b->event_query(e2, &done), VPMM_OK);
  CHECK(done);
  CHECK_ST(vpmm::host::stream_release(s), VPMM_ERR_WRONG_STATE);
  CHECK_ERR_HAS("vpmm_host_stream_release: stream 0x");
  CHECK_ERR_HAS("is not held");

  // An event of a running (not held) stream completes by itself.
  std::atomic<int> slow{0};
  CHECK_ST(vpmm::host::stream_launch(s, slow_set_flag, &slow), VPMM_OK);
  EventHandle e3 = 0;
  CHECK_ST(b->event_record(s, &e3), VPMM_OK);
  CHECK_ST(b->event_sync(e3), VPMM_OK);
  CHECK(slow.load() == 1);

  // Events outlive their stream.
  CHECK_ST(vpmm::host::stream_hold(s), VPMM_OK);
  std::atomic<int> drained{0};
  CHECK_ST(vpmm::host::stream_launch(s, set_flag, &drained), VPMM_OK);
  EventHandle e4 = 0;
  CHECK_ST(b->event_record(s, &e4), VPMM_OK);
  CHECK_ST(vpmm::host::stream_destroy(s), VPMM_OK);  // drains although held
  CHECK(drained.load() == 1);
  CHECK_ST(b->event_query(e4, &done), VPMM_OK);
  CHECK(done);
  CHECK_ST(b->event_sync(e4), VPMM_OK);

  for (EventHandle e : {e0, e1, e2, e3, e4}) CHECK_ST(b->event_destroy(e), VPMM_OK);
  CHECK_ST(b->event_destroy(e0), VPMM_ERR_INVALID_ARGUMENT);
  vt::check_counters_zero(*b);
}

struct Ordered {
  int written = 0;         // by B's task
  int seen = -1;           // by A's task, after the wait
  std::atomic<int> a_ran{0};
};
void write_b(void* p) {
  sleep_ms(10);
  static_cast<Ordered*>(p)->written = 1;
}
void read_a(void* p) {
  Ordered* o = static_cast<Ordered*>(p);
  o->seen = o->written;
  o->a_ran.store(1);
}

void test_stream_wait() {
  auto b = make(0);
  if (!b) return;
  vpmm_stream A = nullptr, B = nullptr;
  CHECK_ST(vpmm::host::stream_create(&A), VPMM_OK);
  CHECK_ST(vpmm::host::stream_create(&B), VPMM_OK);

  Ordered o;
  CHECK_ST(vpmm::host::stream_hold(B), VPMM_OK);
  CHECK_ST(vpmm::host::stream_launch(B, write_b, &o), VPMM_OK);
  EventHandle eb = 0;
  CHECK_ST(b->event_record(B, &eb), VPMM_OK);
  CHECK_ST(b->stream_wait(A, eb), VPMM_OK);  // the caller does not block
  CHECK_ST(vpmm::host::stream_launch(A, read_a, &o), VPMM_OK);
  sleep_ms(40);
  CHECK(o.a_ran.load() == 0);  // A waits for B, which is held
  bool done = true;
  EventHandle ea = 0;
  CHECK_ST(b->event_record(A, &ea), VPMM_OK);
  CHECK_ST(b->event_query(ea, &done), VPMM_OK);
  CHECK(!done);
  CHECK_ST(vpmm::host::stream_release(B), VPMM_OK);
  CHECK_ST(b->stream_sync(A), VPMM_OK);
  CHECK(o.a_ran.load() == 1);
  CHECK(o.seen == 1);  // A's task saw B's write
  CHECK_ST(b->event_query(ea, &done), VPMM_OK);
  CHECK(done);

  // Waiting on a completed event, or on one's own stream, queues nothing.
  CHECK_ST(b->stream_wait(A, eb), VPMM_OK);
  CHECK_ST(b->stream_wait(A, ea), VPMM_OK);
  CHECK_ST(b->stream_wait(A, 777), VPMM_ERR_INVALID_ARGUMENT);
  CHECK_ST(b->event_destroy(ea), VPMM_OK);
  CHECK_ST(b->event_destroy(eb), VPMM_OK);

  // Destroying A must neither deadlock on held B nor claim A drained while
  // its work waits behind B: it refuses (WRONG_STATE), having run the work
  // before the wait, and A stays usable; once B is released it drains.
  Ordered o2;
  CHECK_ST(vpmm::host::stream_hold(B), VPMM_OK);
  CHECK_ST(vpmm::host::stream_launch(B, write_b, &o2), VPMM_OK);
  CHECK_ST(b->event_record(B, &eb), VPMM_OK);
  std::atomic<int> before_wait{0};
  CHECK_ST(vpmm::host::stream_launch(A, slow_set_flag, &before_wait), VPMM_OK);
  CHECK_ST(b->stream_wait(A, eb), VPMM_OK);
  CHECK_ST(vpmm::host::stream_launch(A, read_a, &o2), VPMM_OK);
  CHECK_ST(b->event_record(A, &ea), VPMM_OK);
  CHECK_ST(vpmm::host::stream_destroy(A), VPMM_ERR_WRONG_STATE);  // returns (watchdog otherwise)
  CHECK(before_wait.load() == 1);  // work before the wait was drained
  CHECK(o2.a_ran.load() == 0);
  CHECK(vpmm::host::stream_is_valid(A));
  // So does a synchronize: it would otherwise wait for a release forever.
  CHECK_ST(vpmm::host::stream_synchronize(A), VPMM_ERR_WRONG_STATE);
  CHECK_ST(b->event_query(ea, &done), VPMM_OK);
  CHECK(!done);
  CHECK_ST(vpmm::host::stream_release(B), VPMM_OK);
  CHECK_ST(vpmm::host::stream_destroy(A), VPMM_OK);
  CHECK(o2.a_ran.load() == 1 && o2.seen == 1);  // drained before destroy returned
  CHECK(!vpmm::host::stream_is_valid(A));
  CHECK_ST(b->event_query(ea, &done), VPMM_OK);
  CHECK(done);
  CHECK_ST(b->event_destroy(ea), VPMM_OK);
  CHECK_ST(b->event_destroy(eb), VPMM_OK);
  CHECK_ST(vpmm::host::stream_destroy(B), VPMM_OK);
  vt::check_counters_zero(*b);
}

struct SelfSync {
  vpmm_stream s;
  vpmm_status sync_st = VPMM_OK;
  vpmm_status destroy_st = VPMM_OK;
};
void self_sync(void* p) {
  SelfSync* x = static_cast<SelfSync*>(p);
  x->sync_st = vpmm::host::stream_synchronize(x->s);
  x->destroy_st = vpmm::host::stream_destroy(x->s);
}

void test_self_wait_refused() {
  vpmm_stream s = nullptr;
  CHECK_ST(vpmm::host::stream_create(&s), VPMM_OK);
  SelfSync x;
  x.s = s;
  std::atomic<int> after{0};
  CHECK_ST(vpmm::host::stream_launch(s, self_sync, &x), VPMM_OK);
  CHECK_ST(vpmm::host::stream_launch(s, set_flag, &after), VPMM_OK);
  CHECK_ST(vpmm::host::stream_synchronize(s), VPMM_OK);
  CHECK(x.sync_st == VPMM_ERR_WRONG_STATE);
  CHECK(x.destroy_st == VPMM_ERR_WRONG_STATE);
  CHECK(after.load() == 1);
  CHECK_ST(vpmm::host::stream_destroy(s), VPMM_OK);
}

// Many threads on one backend and on shared streams: for TSan, and to check
// that the bookkeeping stays exact under contention.
void test_threads() {
  auto b = make(64ull << 20);
  if (!b) return;
  vpmm_stream shared = nullptr;
  CHECK_ST(vpmm::host::stream_create(&shared), VPMM_OK);
  const int T = 8, N = 150;
  std::atomic<int> errors{0}, launched{0}, ran{0};
  auto count_run = [](void* p) { static_cast<std::atomic<int>*>(p)->fetch_add(1); };
  std::vector<std::thread> ths;
  for (int t = 0; t < T; ++t)
    ths.emplace_back([&, t] {
      vpmm_stream own = nullptr;
      if (vpmm::host::stream_create(&own) != VPMM_OK) { errors++; return; }
      uint64_t va = 0;
      if (b->reserve(16 * G, 0, &va) != VPMM_OK) { errors++; return; }
      for (int i = 0; i < N; ++i) {
        const uint64_t size = (1 + (i + t) % 4) * G;
        PhysHandle h = 0;
        if (b->create(size, &h) != VPMM_OK) { errors++; continue; }
        bool ok = b->map(va, size, h) == VPMM_OK && b->map(va + 8 * G, size, h) == VPMM_OK &&
                  b->set_access(va, size) == VPMM_OK && b->set_access(va + 8 * G, size) == VPMM_OK;
        if (ok) {
          at(va)[size - 1] = static_cast<char>(t + 1);
          ok = at(va + 8 * G)[size - 1] == static_cast<char>(t + 1) && at(va + 8 * G)[0] == 0;
        }
        vpmm_stream s = (i % 2) ? own : shared;
        if (vpmm::host::stream_launch(s, count_run, &ran) == VPMM_OK) launched++;
        EventHandle e = 0;
        if (b->event_record(s, &e) != VPMM_OK) ok = false;
        vpmm_stream other = (i % 2) ? shared : own;
        if (b->stream_wait(other, e) != VPMM_OK) ok = false;
        bool done = false;
        if (b->event_query(e, &done) != VPMM_OK) ok = false;
        if (i % 5 == 0 && b->event_sync(e) != VPMM_OK) ok = false;
        if (b->event_destroy(e) != VPMM_OK) ok = false;
        // Release while mapped, then unmap both views (frees at the last one).
        if (b->release(h, size) != VPMM_OK) ok = false;
        if (b->unmap(va, size) != VPMM_OK) ok = false;
        if (b->unmap(va + 8 * G, size) != VPMM_OK) ok = false;
        if (!ok) errors++;
        if (i % 16 == 0) {
          vpmm::host::stream_hold(own);
          vpmm::host::stream_release(own);
        }
      }
      if (b->unreserve(va, 16 * G) != VPMM_OK) errors++;
      if (vpmm::host::stream_destroy(own) != VPMM_OK) errors++;
    });
  for (auto& th : ths) th.join();
  CHECK_ST(vpmm::host::stream_synchronize(shared), VPMM_OK);
  CHECK(errors.load() == 0);
  CHECK(launched.load() == T * N);
  CHECK(ran.load() == T * N);
  uint64_t fr = 0, tot = 0;
  CHECK_ST(b->mem_info(&fr, &tot), VPMM_OK);
  CHECK(fr == tot);
  CHECK_ST(vpmm::host::stream_destroy(shared), VPMM_OK);
  vt::check_counters_zero(*b);
}

void test_nothing_left() {
  CHECK(vpmm::host::live_stream_count() == 0);
  CHECK(vpmm::host::live_event_count() == 0);
}

}  // namespace

int main(int argc, char** argv) {
  alarm(300);  // a deadlock fails the test instead of hanging CI
  long page = sysconf(_SC_PAGESIZE);
  if (page > 0) G = static_cast<uint64_t>(page);
  // In this order: the fork test first, from a process with few threads; the
  // leak check last.
  const vt::Case order[] = {
      {"faults: no access before set_access or after unmap", test_faults},
      {"identity: host facts and capacity parameter", test_identity},
      {"capacity: exact accounting, no false OOM, zeroed handles", test_capacity},
      {"streams: launch order", test_launch_order},
      {"streams: bad streams and events", test_bad_streams},
      {"streams: holds nest, events wait for the release", test_hold_and_events},
      {"streams: stream_wait across a held stream", test_stream_wait},
      {"streams: a stream cannot wait on itself", test_self_wait_refused},
      {"threads: backend and streams under contention", test_threads},
      {"no stream or event left", test_nothing_left},
  };
  for (const vt::Case& c : order) vt::cases().push_back(c);
  return vt::run_all(argc, argv);
}
