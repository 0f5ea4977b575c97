// Phase 2 runs its driver calls without the pool mutex (pool.hpp,
// LockWindow). These tests stop one thread's defragmentation inside its first
// map call (a hook of the fault backend) and, while it is stopped, make other
// threads use the pool: they must not wait for it, must see a consistent pool
// (check, stats) and must not be able to take what the stopped malloc
// claimed. Then the stopped call goes on and either commits or fails and
// puts everything back.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>

#include "backend/backend.hpp"
#include "support/fault_backend.hpp"
#include "test_backend.hpp"
#include "check.hpp"
#include "core/pool.hpp"
#include "thread_state.hpp"

using vpmm::Backend;
using vpmm::FaultBackend;
using vpmm::FaultControl;
using vpmm::FaultPlan;
using vpmm::Pool;
using vpmm::PoolOptions;

namespace {

constexpr uint64_t kPage = 64 << 10;

// Holds the first map call made by one chosen thread until released.
struct Gate {
  std::mutex mu;
  std::condition_variable cv;
  std::thread::id holder;
  bool armed = false, entered = false, released = false, timed_out = false;
  int held_kind = static_cast<int>(vpmm::Op::map);

  void hook(int kind) {
    if (kind != held_kind) return;
    std::unique_lock<std::mutex> lk(mu);
    if (!armed || std::this_thread::get_id() != holder) return;
    armed = false;
    entered = true;
    cv.notify_all();
    if (!cv.wait_for(lk, std::chrono::seconds(10), [&] { return released; })) timed_out = true;
  }
  bool wait_entered() {
    std::unique_lock<std::mutex> lk(mu);
    return cv.wait_for(lk, std::chrono::seconds(10), [&] { return entered; });
  }
  void release() {
    std::lock_guard<std::mutex> lk(mu);
    released = true;
    cv.notify_all();
  }
};

struct World {
  std::shared_ptr<Backend> host;
  std::shared_ptr<FaultControl> ctl = std::make_shared<FaultControl>();
  std::unique_ptr<Pool> pool;
  Gate gate;

  bool make() {
    vpmm::BackendParams bp;
    vpmm_status st = VPMM_OK;
    host = vt::make_shared_test_backend(bp, &st);
    if (!host) return false;
    PoolOptions o;
    o.page_size = kPage;
    o.va_size = 64 * kPage;
    o.max_handle_size = kPage;  // page handles: every page can move on its own
    ctl->set_hook([this](int kind) { gate.hook(kind); });
    return Pool::create(std::unique_ptr<Backend>(new FaultBackend(host, ctl)), o, &pool) == VPMM_OK;
  }
  void* malloc(uint64_t size, vpmm::Reservation* res = nullptr) {
    void* p = nullptr;
    return pool->malloc("vpmm_pool_malloc", size, nullptr, nullptr, 0, res, &p) == VPMM_OK ? p : nullptr;
  }
  vpmm_stats stats() {
    vpmm_stats s;
    std::memset(&s, 0, sizeof s);
    s.struct_size = sizeof s;
    pool->stats(&s);
    return s;
  }
};

// Starts a thread whose 2-page malloc the gate holds in its first map call.
std::thread start_mover(World& w, vpmm::Reservation* res, vpmm_status* st, void** out) {
  {
    std::lock_guard<std::mutex> lk(w.gate.mu);
    w.gate.armed = true;
  }
  return std::thread([&w, res, st, out] {
    {
      std::lock_guard<std::mutex> lk(w.gate.mu);
      w.gate.holder = std::this_thread::get_id();
    }
    *st = w.pool->malloc("vpmm_pool_malloc", 2 * kPage, nullptr, nullptr, 0, res, out);
  });
}

// [a][x][c][y][f][z] then a, c, f freed: no free region holds 2 pages, so a
// 2-page malloc harvests the two oldest (a, c) into the hole; f stays free.
struct Fragmented {
  void *a, *x, *c, *y, *f, *z;
  bool make(World& w) {
    a = w.malloc(kPage), x = w.malloc(kPage), c = w.malloc(kPage);
    y = w.malloc(kPage), f = w.malloc(kPage), z = w.malloc(kPage);
    if (!a || !x || !c || !y || !f || !z) return false;
    return w.pool->free(a, nullptr) == VPMM_OK && w.pool->free(c, nullptr) == VPMM_OK &&
           w.pool->free(f, nullptr) == VPMM_OK;
  }
};

TEST("other threads allocate, free and check while a defragmentation maps") {
  World w;
  CHECK(w.make());
  Fragmented fr;
  CHECK(fr.make(w));
  void* big = nullptr;
  vpmm_status big_st = VPMM_ERR_INTERNAL;
  std::thread mover = start_mover(w, nullptr, &big_st, &big);
  // The holder id is set by the mover itself before its malloc; the gate
  // only fires for it.
  CHECK(w.gate.wait_entered());
  // The mover is inside its map call, the pool mutex released.
  CHECK_EQ(w.pool->check(), std::string());
  vpmm_stats s = w.stats();
  CHECK_EQ(s.mapped_bytes, s.live_bytes + s.free_bytes);
  CHECK_EQ(s.mapped_bytes, 6 * kPage);
  // f is the only free page nobody claimed: a 1-page malloc takes it in place.
  void* one = w.malloc(kPage);
  CHECK(one == fr.f);
  // Nothing else is free: a second page must come from new memory, never
  // from a or c, which the mover owns now.
  void* two = w.malloc(kPage);
  CHECK(two != nullptr && two != fr.a && two != fr.c);
  if (one) std::memset(one, 0x5a, kPage);
  CHECK_OK(w.pool->free(one, nullptr));
  CHECK_OK(w.pool->free(two, nullptr));
  CHECK_EQ(w.pool->check(), std::string());
  w.gate.release();
  mover.join();
  CHECK(!w.gate.timed_out);
  CHECK_OK(big_st);
  CHECK(big != nullptr);
  if (big) {
    std::memset(big, 0xa5, 2 * kPage);
    CHECK_EQ(static_cast<unsigned char*>(big)[2 * kPage - 1], 0xa5);
  }
  s = w.stats();
  CHECK_EQ(s.n_defrag, uint64_t(1));
  CHECK_EQ(s.bytes_remapped, 2 * kPage);
  CHECK_EQ(s.mapped_bytes, s.live_bytes + s.free_bytes);
  CHECK_EQ(w.pool->check(), std::string());
}

TEST("a defragmentation that fails while others run puts every page back") {
  World w;
  CHECK(w.make());
  Fragmented fr;
  CHECK(fr.make(w));
  vpmm_stats before = w.stats();
  // The mover's second map fails: it must unmap the first and return a and c.
  w.ctl->arm(FaultPlan{2, static_cast<int>(vpmm::Op::map), VPMM_ERR_BACKEND});
  void* big = nullptr;
  vpmm_status big_st = VPMM_OK;
  std::thread mover = start_mover(w, nullptr, &big_st, &big);
  CHECK(w.gate.wait_entered());
  // Meanwhile x, a's right neighbour, is freed: when a comes back it must
  // merge with it into one free region of the stream.
  CHECK_OK(w.pool->free(fr.x, nullptr));
  w.gate.release();
  mover.join();
  CHECK(!w.gate.timed_out);
  CHECK_EQ(big_st, VPMM_ERR_BACKEND);
  CHECK(big == nullptr);
  CHECK_EQ(w.pool->check(), std::string());
  vpmm_stats after = w.stats();
  CHECK_EQ(after.mapped_bytes, before.mapped_bytes);
  CHECK_EQ(after.free_bytes, before.free_bytes + kPage);
  CHECK_EQ(after.n_defrag, before.n_defrag);
  // a and x are one 2-page free region now: a 2-page malloc fits in place.
  w.ctl->disarm();
  void* p = w.malloc(2 * kPage);
  CHECK(p == fr.a);
  CHECK_EQ(w.stats().n_defrag, before.n_defrag);
  CHECK_EQ(w.pool->check(), std::string());
}

TEST("a reservation released while its malloc maps leaves the charge unreserved") {
  World w;
  CHECK(w.make());
  CHECK_OK(w.pool->set_limit(32 * kPage));
  Fragmented fr;
  CHECK(fr.make(w));
  vpmm::Reservation* res = nullptr;
  CHECK_OK(w.pool->reserve(4 * kPage, VPMM_RESERVE_TRY, 0, &res));
  const uint64_t available_before = w.stats().available_bytes;
  void* big = nullptr;
  vpmm_status big_st = VPMM_ERR_INTERNAL;
  std::thread mover = start_mover(w, res, &big_st, &big);
  CHECK(w.gate.wait_entered());
  CHECK_OK(w.pool->release_reservation(res));
  w.gate.release();
  mover.join();
  CHECK(!w.gate.timed_out);
  CHECK_OK(big_st);
  // The 2 pages now count as unreserved live memory: the reservation's 4
  // pages came back, the allocation's 2 were taken from what is available.
  CHECK_EQ(w.stats().available_bytes, available_before + 4 * kPage - 2 * kPage);
  CHECK_OK(w.pool->free(big, nullptr));
  CHECK_EQ(w.stats().available_bytes, available_before + 4 * kPage);
  CHECK_EQ(w.pool->check(), std::string());
}

}  // namespace

TEST_MAIN()

// vpmm_pool_prepare_backups pins without the pool mutex: stopped inside its
// first pinning, other threads still allocate and free; a pause that starts
// meanwhile waits for that pinning, takes its buffer and pins the rest itself
// (the prepare stops there), never pinning the same bytes twice.
TEST("prepare_backups pins without the pool lock and a pause waits for it") {
  World w;
  CHECK(w.make());
  void *a = nullptr, *b = nullptr;
  CHECK_OK(w.pool->malloc("vpmm_pool_malloc", 2 * kPage, nullptr, "w", VPMM_ALLOC_HOST_BACKUP, nullptr, &a));
  CHECK_OK(w.pool->malloc("vpmm_pool_malloc", 3 * kPage, nullptr, "w", VPMM_ALLOC_HOST_BACKUP, nullptr, &b));
  std::memset(a, 0x11, 2 * kPage);
  std::memset(b, 0x22, 3 * kPage);
  {
    std::lock_guard<std::mutex> lk(w.gate.mu);
    w.gate.held_kind = static_cast<int>(vpmm::Op::host_alloc);
    w.gate.armed = true;
  }
  uint64_t cached = 0;
  vpmm_status prep_st = VPMM_ERR_INTERNAL;
  std::thread preparer([&] {
    {
      std::lock_guard<std::mutex> lk(w.gate.mu);
      w.gate.holder = std::this_thread::get_id();
    }
    prep_st = w.pool->prepare_backups("w", &cached);
  });
  CHECK(w.gate.wait_entered());
  // Held inside its first pinning: the pool is not locked.
  void* other = w.malloc(kPage);
  CHECK(other != nullptr);
  CHECK_OK(w.pool->free(other, nullptr));
  CHECK_EQ(w.pool->check(), std::string());
  vpmm_stats s = w.stats();
  CHECK_EQ(s.backup_cache_bytes, uint64_t(0));
  // A pause now must wait: pinning the same 5 pages again would double them.
  std::atomic<bool> paused{false};
  std::atomic<pid_t> tid{0};
  uint64_t n_paused = 0;
  vpmm_status pause_st = VPMM_ERR_INTERNAL;
  std::thread pauser([&] {
    tid = vt::thread_id();
    pause_st = w.pool->pause("w", &n_paused);
    paused = true;
  });
  // The pause blocks (waiting for the prepare) before the gate opens; the
  // preparer holds no lock the pause needs first, so its sleep is that wait.
  CHECK(vt::wait_until_blocked(tid));
  CHECK(!paused.load());
  w.gate.release();
  preparer.join();
  pauser.join();
  CHECK(!w.gate.timed_out);
  CHECK_OK(prep_st);
  CHECK(cached == 2 * kPage || cached == 3 * kPage);  // the buffer it was pinning, then it stopped
  CHECK_OK(pause_st);
  CHECK_EQ(n_paused, uint64_t(2));
  s = w.stats();
  CHECK_EQ(s.backup_pinned_bytes, 5 * kPage);  // the prepared buffer and the pause's own, in use now
  CHECK_EQ(s.backup_cache_bytes, uint64_t(0));
  CHECK_OK(w.pool->resume("w", nullptr));
  CHECK_EQ(static_cast<unsigned char*>(a)[2 * kPage - 1], 0x11);
  CHECK_EQ(static_cast<unsigned char*>(b)[0], 0x22);
  CHECK_EQ(w.pool->check(), std::string());
}

// A pause of one tag while prepare_backups pins another's (a block's
// backups pinned ahead in the background): the pause waits for the buffer
// being pinned only, not for the rest of the other tag's pinning, which
// stops there; that tag's own pause pins what is left.
TEST("a pause of another tag waits for one buffer of a prepare, not for all of it") {
  World w;
  CHECK(w.make());
  void* y[3] = {nullptr, nullptr, nullptr};
  for (void*& p : y) {
    CHECK_OK(w.pool->malloc("vpmm_pool_malloc", 2 * kPage, nullptr, "y", VPMM_ALLOC_HOST_BACKUP, nullptr, &p));
    std::memset(p, 0x44, 2 * kPage);
  }
  void* x = nullptr;
  // 5 pages: more than twice y's buffers, so its pause cannot take one of them.
  CHECK_OK(w.pool->malloc("vpmm_pool_malloc", 5 * kPage, nullptr, "x", VPMM_ALLOC_HOST_BACKUP, nullptr, &x));
  std::memset(x, 0x55, 5 * kPage);
  {
    std::lock_guard<std::mutex> lk(w.gate.mu);
    w.gate.held_kind = static_cast<int>(vpmm::Op::host_alloc);
    w.gate.armed = true;
  }
  uint64_t cached = 0;
  vpmm_status prep_st = VPMM_ERR_INTERNAL;
  std::thread preparer([&] {
    {
      std::lock_guard<std::mutex> lk(w.gate.mu);
      w.gate.holder = std::this_thread::get_id();
    }
    prep_st = w.pool->prepare_backups("y", &cached);
  });
  CHECK(w.gate.wait_entered());  // inside its first of three pinnings
  std::atomic<pid_t> tid{0};
  vpmm_status pause_st = VPMM_ERR_INTERNAL;
  std::thread pauser([&] {
    tid = vt::thread_id();
    pause_st = w.pool->pause("x", nullptr);
  });
  CHECK(vt::wait_until_blocked(tid));
  w.gate.release();
  preparer.join();
  pauser.join();
  CHECK(!w.gate.timed_out);
  CHECK_OK(prep_st);
  CHECK_OK(pause_st);
  CHECK_EQ(cached, 2 * kPage);  // one of y's three buffers: the prepare stopped for the pause
  vpmm_stats s = w.stats();
  CHECK_EQ(s.backup_pinned_bytes, 7 * kPage);  // y's cached buffer and x's backup
  CHECK_EQ(s.backup_cache_bytes, 2 * kPage);
  CHECK_OK(w.pool->pause("y", nullptr));  // y's pause takes the cached one, pins two
  s = w.stats();
  CHECK_EQ(s.backup_pinned_bytes, 11 * kPage);
  CHECK_EQ(s.backup_cache_bytes, uint64_t(0));
  CHECK_OK(w.pool->resume(nullptr, nullptr));
  for (void* p : y) CHECK_EQ(static_cast<unsigned char*>(p)[2 * kPage - 1], 0x44);
  CHECK_EQ(static_cast<unsigned char*>(x)[5 * kPage - 1], 0x55);
  CHECK_EQ(w.pool->check(), std::string());
}
