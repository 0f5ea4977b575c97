// Limits, reservations, watermarks and OOM recovery on the host backend.
#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "check.hpp"
#include "pool_util.hpp"
#include "thread_state.hpp"

namespace {

constexpr uint64_t kPage = 64 << 10;

vpmm_pool* limited_pool(uint64_t limit_pages, uint64_t capacity = 64ull << 20) {
  vpmm_config c;
  vpmm_config_init(&c);
  c.page_size = kPage;
  c.va_size = 1024 * kPage;
  c.host_capacity = capacity;
  c.memory_limit = limit_pages * kPage;
  c.small_size = 1;  // whole pages only: byte counts below are exact
  vt::use_test_backend(&c);
  vpmm_pool* p = nullptr;
  if (vpmm_pool_create(&c, &p) != VPMM_OK) std::printf("  create: %s\n", vpmm_last_error());
  return p;
}

void* alloc_res(vpmm_pool* p, uint64_t size, vpmm_reservation* r, vpmm_status* st) {
  vpmm_alloc_attrs a;
  std::memset(&a, 0, sizeof a);
  a.struct_size = sizeof a;
  a.reservation = r;
  void* out = nullptr;
  *st = vpmm_pool_malloc_ex(p, size, nullptr, &a, &out);
  return out;
}

}  // namespace

namespace {
// A host pool of `capacity` bytes of 2 MiB pages (the backend's own
// capacity, not the test backend: its message is what is checked).
vpmm_pool* host_pool(uint64_t capacity, uint64_t limit = 0) {
  vpmm_config c;
  vpmm_config_init_defaults(&c);
  c.backend = VPMM_BACKEND_HOST;
  c.host_capacity = capacity;
  c.memory_limit = limit;
  vpmm_pool* p = nullptr;
  if (vpmm_pool_create(&c, &p) != VPMM_OK) std::printf("  create: %s\n", vpmm_last_error());
  return p;
}
bool says(const char* what) {
  const bool yes = std::strstr(vpmm_last_error(), what) != nullptr;
  if (!yes) std::printf("  no \"%s\" in: %s\n", what, vpmm_last_error());
  return yes;
}
}  // namespace

// The failing step is one handle of a growth (or its VA chunk), counted with
// the growth's earlier handles: the message leads with what the caller asked
// for, the pool as the failure left it, and the capacity with its source.
TEST("out of memory: the message names the request, the capacity and its source, the pool's bytes") {
  vpmm_pool* p = host_pool(1ull << 30);
  CHECK(p != nullptr);
  void *a = nullptr, *b = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, 8ull << 20, nullptr, &a));
  CHECK_EQ(vpmm_pool_malloc(p, 2ull << 30, nullptr, &b), VPMM_ERR_OUT_OF_MEMORY);
  CHECK(says("vpmm_pool_malloc: 2147483648 bytes (2 GiB) exceed the capacity of 1073741824 bytes (1 GiB: "
             "host_capacity); 8388608 bytes are mapped, 8388608 live."));
  CHECK(std::strstr(vpmm_last_error(), "1073741824 in use") == nullptr);  // the step's own count, mid-growth, is no longer the headline
  // Within the capacity but not beside what is live.
  void* c = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, 600ull << 20, nullptr, &c));
  CHECK_EQ(vpmm_pool_malloc(p, 512ull << 20, nullptr, &b), VPMM_ERR_OUT_OF_MEMORY);
  CHECK(says("536870912 bytes (512 MiB) do not fit in the capacity of 1073741824 bytes (1 GiB: host_capacity); "
             "637534208 bytes are mapped, 637534208 live."));
  // (The growth's handle size is the pool's: scaled, or pages under views.)
  CHECK(says("Failed step: host create: a "));
  CHECK(says("-byte handle would pass host_capacity 1073741824"));
  // A request no address space holds: the step says so, with what there is.
  CHECK_EQ(vpmm_pool_malloc(p, 1ull << 50, nullptr, &b), VPMM_ERR_OUT_OF_MEMORY);
  CHECK(says("1125899906842624 bytes (1 PiB) exceed the capacity"));
  CHECK(says("bytes of address space exceed what this process can reserve (largest free range "));
  CHECK(std::strstr(vpmm_last_error(), "mmap of") == nullptr);
  CHECK_OK(vpmm_pool_free(p, a, nullptr));
  CHECK_OK(vpmm_pool_free(p, c, nullptr));
  vpmm_pool_destroy(p);
  // Under a memory limit the limit is the capacity named.
  p = host_pool(1ull << 30, 64ull << 20);
  CHECK(p != nullptr);
  CHECK_EQ(vpmm_pool_malloc(p, 128ull << 20, nullptr, &b), VPMM_ERR_OUT_OF_MEMORY);
  CHECK(says("134217728 bytes (128 MiB) exceed the capacity of 67108864 bytes (64 MiB: memory_limit); 0 bytes "
             "are mapped, 0 live."));
  vpmm_pool_destroy(p);
}

TEST("hard limit: mapped never exceeds it, failures leave the pool unchanged") {
  vpmm_pool* p = limited_pool(10);
  CHECK(p != nullptr);
  void *a = nullptr, *b = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, 6 * kPage, nullptr, &a));
  std::string before = vt::layout(p);
  CHECK_EQ(vpmm_pool_malloc(p, 5 * kPage, nullptr, &b), VPMM_ERR_OUT_OF_MEMORY);
  CHECK(std::strstr(vpmm_last_error(), "vpmm_pool_malloc") != nullptr);
  CHECK_EQ(b, nullptr);
  CHECK_EQ(vt::layout(p), before);
  vpmm_stats st = vt::stats(p);
  CHECK(st.mapped_bytes <= 10 * kPage);
  CHECK_EQ(st.capacity_bytes, 10 * kPage);
  CHECK_EQ(st.n_oom, uint64_t(1));
  CHECK_OK(vpmm_pool_malloc(p, 4 * kPage, nullptr, &b));
  CHECK_EQ(vt::stats(p).mapped_bytes, 10 * kPage);
  CHECK_OK(vpmm_pool_check(p));
  vpmm_pool_destroy(p);
}

TEST("reservations: try, up-to, charge, overdraft policies, release") {
  vpmm_pool* p = limited_pool(16);
  vpmm_reservation *r1 = nullptr, *r2 = nullptr, *r3 = nullptr;
  CHECK_OK(vpmm_pool_reserve(p, 8 * kPage, VPMM_RESERVE_TRY, &r1));
  CHECK_EQ(vpmm_pool_reserve(p, 9 * kPage, VPMM_RESERVE_TRY, &r2), VPMM_ERR_OUT_OF_MEMORY);
  CHECK_EQ(r2, nullptr);
  CHECK_OK(vpmm_pool_reserve(p, 100 * kPage, VPMM_RESERVE_UPTO, &r2));
  uint64_t size = 0, used = 0;
  CHECK_OK(vpmm_reservation_info(p, r2, &size, &used));
  CHECK_EQ(size, 8 * kPage);
  // Everything is promised: an unreserved allocation cannot take it.
  void* u = nullptr;
  CHECK_EQ(vpmm_pool_malloc(p, kPage, nullptr, &u), VPMM_ERR_OUT_OF_MEMORY);
  vpmm_status st;
  void* a = alloc_res(p, 5 * kPage, r1, &st);
  CHECK_EQ(st, VPMM_OK);
  CHECK_OK(vpmm_reservation_info(p, r1, &size, &used));
  CHECK_EQ(used, 5 * kPage);
  alloc_res(p, 4 * kPage, r1, &st);  // 9 > 8, default policy fails
  CHECK_EQ(st, VPMM_ERR_OUT_OF_MEMORY);
  vpmm_stats s = vt::stats(p);
  CHECK_EQ(s.reserved_bytes, 16 * kPage);
  CHECK_EQ(s.reservation_used_bytes, 5 * kPage);
  CHECK_EQ(s.available_bytes, uint64_t(0));
  CHECK_OK(vpmm_pool_free(p, a, nullptr));
  CHECK_OK(vpmm_reservation_info(p, r1, &size, &used));
  CHECK_EQ(used, uint64_t(0));
  CHECK_OK(vpmm_reservation_release(p, r2));
  CHECK_EQ(vpmm_reservation_release(p, r2), VPMM_ERR_INVALID_ARGUMENT);  // twice
  // Growable reservation takes from what r2 gave back.
  CHECK_OK(vpmm_pool_reserve(p, 2 * kPage, VPMM_RESERVE_TRY | VPMM_RESERVE_OVERDRAFT_GROW, &r3));
  void* g = alloc_res(p, 4 * kPage, r3, &st);
  CHECK_EQ(st, VPMM_OK);
  CHECK_OK(vpmm_reservation_info(p, r3, &size, &used));
  CHECK(size >= 4 * kPage);
  CHECK_EQ(used, 4 * kPage);
  // Releasing a reservation with charged allocations leaves them valid.
  CHECK_OK(vpmm_reservation_release(p, r3));
  vt::fill(g, 4 * kPage, 3);
  CHECK_OK(vpmm_pool_free(p, g, nullptr));
  CHECK_EQ(vpmm_pool_reserve(p, 0, 0, &r2), VPMM_ERR_INVALID_ARGUMENT);
  CHECK_EQ(vpmm_pool_reserve(p, kPage, 0x4000, &r2), VPMM_ERR_INVALID_ARGUMENT);
  CHECK_EQ(vpmm_pool_reserve(p, kPage, VPMM_RESERVE_BLOCK | VPMM_RESERVE_UPTO, &r2),
           VPMM_ERR_INVALID_ARGUMENT);
  CHECK_OK(vpmm_reservation_release(p, r1));
  CHECK_EQ(vt::stats(p).reserved_bytes, uint64_t(0));
  CHECK_OK(vpmm_pool_check(p));
  vpmm_pool_destroy(p);
}

TEST("blocking reservation times out, and wakes when another is released") {
  vpmm_pool* p = limited_pool(8);
  vpmm_reservation *r1 = nullptr, *r2 = nullptr;
  CHECK_OK(vpmm_pool_reserve(p, 6 * kPage, VPMM_RESERVE_TRY, &r1));
  r2 = reinterpret_cast<vpmm_reservation*>(0x1);  // untouched on error
  CHECK_EQ(vpmm_pool_reserve_ex(p, 4 * kPage, VPMM_RESERVE_BLOCK, 20 * 1000 * 1000, &r2),
           VPMM_ERR_TIMEOUT);
  CHECK(r2 == reinterpret_cast<vpmm_reservation*>(0x1));
  CHECK(std::strstr(vpmm_last_error(), "timed out") != nullptr);
  CHECK_EQ(vt::stats(p).reserved_bytes, 6 * kPage);  // nothing reserved by the timeout
  r2 = nullptr;
  std::atomic<bool> got{false};
  std::atomic<pid_t> tid{0};
  std::thread waiter([&] {
    vpmm_reservation* r = nullptr;
    tid = vt::thread_id();
    if (vpmm_pool_reserve(p, 4 * kPage, VPMM_RESERVE_BLOCK, &r) == VPMM_OK) {
      got = true;
      vpmm_reservation_release(p, r);
    }
  });
  // Blocked in the reservation before the release below, so the release's
  // wake-up is what this checks.
  CHECK(vt::wait_until_blocked(tid));
  CHECK(!got.load());
  CHECK_OK(vpmm_reservation_release(p, r1));
  waiter.join();
  CHECK(got.load());
  CHECK_EQ(vpmm_pool_reserve(p, 9 * kPage, VPMM_RESERVE_BLOCK, &r2), VPMM_ERR_OUT_OF_MEMORY);
  vpmm_pool_destroy(p);
}

// A free wakes blocked reservers only when some wait (it skips the broadcast
// otherwise): the waiter must be counted before it sleeps, or this hangs.
TEST("blocking reservations wake when unreserved allocations are freed, page and small") {
  vpmm_config c;
  vpmm_config_init(&c);
  c.page_size = kPage;
  c.va_size = 1024 * kPage;
  c.memory_limit = 8 * kPage;
  vt::use_test_backend(&c);  // small_size stays the default: 4 KiB blocks share a slab
  vpmm_pool* p = nullptr;
  CHECK_OK(vpmm_pool_create(&c, &p));
  void* big = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, 5 * kPage, nullptr, &big));
  std::vector<void*> smalls(16, nullptr);  // one page of charges
  for (void*& s : smalls) CHECK_OK(vpmm_pool_malloc(p, 4096, nullptr, &s));
  std::atomic<int> got{0};
  std::atomic<pid_t> tid{0};
  auto wait_for = [&](uint64_t bytes) {
    tid = 0;
    return std::thread([&, bytes] {
      vpmm_reservation* r = nullptr;
      tid = vt::thread_id();
      if (vpmm_pool_reserve(p, bytes, VPMM_RESERVE_BLOCK, &r) == VPMM_OK) {
        ++got;
        vpmm_reservation_release(p, r);
      }
    });
  };
  std::thread w1 = wait_for(5 * kPage);
  CHECK(vt::wait_until_blocked(tid));  // blocked before the free that wakes it
  CHECK_EQ(got.load(), 0);
  CHECK_OK(vpmm_pool_free(p, big, nullptr));  // page path
  w1.join();
  CHECK_EQ(got.load(), 1);
  // Now the small blocks' charges are what stands in the way.
  std::thread w2 = wait_for(8 * kPage);
  CHECK(vt::wait_until_blocked(tid));
  CHECK_EQ(got.load(), 1);
  for (void* s : smalls) CHECK_OK(vpmm_pool_free(p, s, nullptr));  // small path
  w2.join();
  CHECK_EQ(got.load(), 2);
  CHECK_OK(vpmm_pool_check(p));
  vpmm_pool_destroy(p);
}

namespace {
struct OomState {
  std::vector<void*> spill;
  int calls = 0;
};
int on_oom(vpmm_pool* p, uint64_t, void* user) {
  auto* s = static_cast<OomState*>(user);
  ++s->calls;
  if (s->spill.empty()) return 0;
  vpmm_pool_free(p, s->spill.back(), nullptr);  // "spill" to make room
  s->spill.pop_back();
  vpmm_pool_trim(p, 0);
  return 1;
}
}  // namespace

TEST("OOM callback spills and retries; declining fails cleanly") {
  vpmm_pool* p = limited_pool(8);
  OomState s;
  CHECK_OK(vpmm_pool_set_oom_callback(p, on_oom, &s));
  for (int i = 0; i < 4; ++i) {
    void* x = nullptr;
    CHECK_OK(vpmm_pool_malloc(p, 2 * kPage, nullptr, &x));
    s.spill.push_back(x);
  }
  void* big = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, 5 * kPage, nullptr, &big));  // needs 3 spills
  CHECK_EQ(s.calls, 3);
  CHECK_EQ(vt::stats(p).n_oom_recovered, uint64_t(1));
  CHECK(vt::stats(p).mapped_bytes <= 8 * kPage);
  s.spill.clear();
  void* more = nullptr;
  CHECK_EQ(vpmm_pool_malloc(p, 5 * kPage, nullptr, &more), VPMM_ERR_OUT_OF_MEMORY);
  CHECK(std::strstr(vpmm_last_error(), "declined") != nullptr);
  CHECK_OK(vpmm_pool_check(p));
  vpmm_pool_destroy(p);
}

namespace {
struct Pressure {
  std::vector<int> transitions;
};
void on_pressure(vpmm_pool*, int under, uint64_t, void* user) {
  static_cast<Pressure*>(user)->transitions.push_back(under);
}
}  // namespace

TEST("watermarks: pressure starts at the trigger and ends at the stop mark") {
  vpmm_pool* p = limited_pool(20);  // trigger 17 pages (0.85), stop 13 pages (0.65)
  Pressure pr;
  CHECK_OK(vpmm_pool_set_pressure_callback(p, on_pressure, &pr));
  std::vector<void*> v;
  for (int i = 0; i < 9; ++i) {
    void* x = nullptr;
    CHECK_OK(vpmm_pool_malloc(p, 2 * kPage, nullptr, &x));
    v.push_back(x);
  }
  CHECK_EQ(vt::stats(p).under_pressure, uint64_t(1));
  CHECK_EQ(pr.transitions.size(), size_t(1));
  for (int i = 0; i < 3; ++i) CHECK_OK(vpmm_pool_free(p, v[i], nullptr));
  CHECK_OK(vpmm_pool_trim(p, 0));  // 12 pages mapped: between... below stop (13)
  CHECK_EQ(vt::stats(p).under_pressure, uint64_t(0));
  CHECK_EQ(pr.transitions.size(), size_t(2));
  if (pr.transitions.size() == 2) CHECK(pr.transitions[0] == 1 && pr.transitions[1] == 0);
  vpmm_pool_destroy(p);
}

TEST("set_limit below usage trims or refuses, keeping the old limit") {
  vpmm_pool* p = limited_pool(16);
  void *a = nullptr, *b = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, 6 * kPage, nullptr, &a));
  CHECK_OK(vpmm_pool_malloc(p, 4 * kPage, nullptr, &b));
  CHECK_OK(vpmm_pool_free(p, b, nullptr));
  CHECK_OK(vpmm_pool_set_limit(p, 7 * kPage));  // trims the 4 free pages
  CHECK(vt::stats(p).mapped_bytes <= 7 * kPage);
  CHECK_EQ(vpmm_pool_set_limit(p, 2 * kPage), VPMM_ERR_WRONG_STATE);
  CHECK_EQ(vt::stats(p).capacity_bytes, 7 * kPage);
  CHECK_OK(vpmm_pool_set_limit(p, 0));
  CHECK_OK(vpmm_pool_malloc(p, 20 * kPage, nullptr, &b));
  CHECK_OK(vpmm_pool_check(p));
  vpmm_pool_destroy(p);
}

TEST("VPMM_MEMORY_LIMIT accepts bytes and a percentage, rejects junk") {
  setenv("VPMM_MEMORY_LIMIT", "50%", 1);
  vpmm_config c;
  vpmm_config_init(&c);
  CHECK(c.memory_limit_fraction > 0.49 && c.memory_limit_fraction < 0.51);
  c.host_capacity = 64 << 20;
  vt::use_test_backend(&c);
  vpmm_pool* p = nullptr;
  CHECK_OK(vpmm_pool_create(&c, &p));
  if (p) CHECK_EQ(vt::stats(p).capacity_bytes, uint64_t(32) << 20);
  vpmm_pool_destroy(p);
  setenv("VPMM_MEMORY_LIMIT", "150%", 1);
  vpmm_config_init(&c);
  p = nullptr;
  CHECK_EQ(vpmm_pool_create(&c, &p), VPMM_ERR_INVALID_ARGUMENT);
  CHECK(std::strstr(vpmm_last_error(), "VPMM_MEMORY_LIMIT") != nullptr);
  setenv("VPMM_MEMORY_LIMIT", "8M", 1);
  vpmm_config_init(&c);
  CHECK_EQ(c.memory_limit, uint64_t(8) << 20);
  unsetenv("VPMM_MEMORY_LIMIT");
}

TEST("paused memory gives its capacity back until resume takes it again") {
  vpmm_pool* p = limited_pool(10);
  vpmm_alloc_attrs a;
  std::memset(&a, 0, sizeof a);
  a.struct_size = sizeof a;
  a.tag = "t";
  a.flags = VPMM_ALLOC_HOST_BACKUP;
  void *t1 = nullptr, *t2 = nullptr, *filler = nullptr;
  CHECK_OK(vpmm_pool_malloc_ex(p, 4 * kPage, nullptr, &a, &t1));
  CHECK_OK(vpmm_pool_malloc_ex(p, 4 * kPage, nullptr, &a, &t2));
  vt::fill(t1, 4 * kPage, 1);
  vt::fill(t2, 4 * kPage, 2);
  CHECK_OK(vpmm_pool_pause(p, "t"));
  CHECK_EQ(vt::stats(p).available_bytes, 10 * kPage);
  CHECK_OK(vpmm_pool_malloc(p, 5 * kPage, nullptr, &filler));  // fits only because of the pause
  CHECK_EQ(vpmm_pool_resume(p, "t"), VPMM_ERR_OUT_OF_MEMORY);   // one of two fits
  CHECK_EQ(vt::stats(p).paused_bytes, 4 * kPage);
  CHECK(vt::stats(p).mapped_bytes <= 10 * kPage);
  CHECK_OK(vpmm_pool_free(p, filler, nullptr));
  CHECK_OK(vpmm_pool_resume(p, "t"));
  CHECK(vt::verify(t1, 4 * kPage, 1) && vt::verify(t2, 4 * kPage, 2));
  CHECK_OK(vpmm_pool_pause(p, "t"));
  CHECK_OK(vpmm_pool_free(p, t1, nullptr));  // free while paused releases no charge twice
  CHECK_OK(vpmm_pool_free(p, t2, nullptr));
  CHECK_EQ(vt::stats(p).available_bytes, 10 * kPage);
  CHECK_OK(vpmm_pool_check(p));
  vpmm_pool_destroy(p);
}

TEST_MAIN()
