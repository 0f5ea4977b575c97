// Reservations and limits (docs/misuse.md rows 53-56, 59, and the
// reservations of test "reservations: bad sizes, ..."): bad sizes and flags
// are INVALID_ARGUMENT; an unknown, released or foreign reservation is
// INVALID_ARGUMENT everywhere it can be passed; what can never be had is
// OUT_OF_MEMORY at once; a limit below what live memory needs is
// WRONG_STATE and leaves the old limit; and the stored configuration stays
// consistent while a limit changes under readers.
#include <atomic>
#include <cstring>
#include <thread>

#include "contract.hpp"

using namespace ct;

TEST("reservations: bad sizes, flags, unknown or released reservations") {
  vpmm_pool* p = make_pool();  // 16 pages of capacity
  vpmm_pool* other = make_pool();
  if (!p || !other) return;
  void* keep = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, 2 * kPage, nullptr, &keep));
  vpmm_reservation* live = nullptr;
  CHECK_OK(vpmm_pool_reserve(p, 4 * kPage, VPMM_RESERVE_TRY, &live));
  vpmm_reservation* theirs = nullptr;
  CHECK_OK(vpmm_pool_reserve(other, kPage, VPMM_RESERVE_TRY, &theirs));
  vpmm_reservation* gone = nullptr;
  CHECK_OK(vpmm_pool_reserve(p, kPage, VPMM_RESERVE_TRY, &gone));
  CHECK_OK(vpmm_reservation_release(p, gone));
  vpmm_reservation* out = reinterpret_cast<vpmm_reservation*>(kSentinel);
  EXPECT_ERR(p, vpmm_pool_reserve(p, kPage, VPMM_RESERVE_TRY, nullptr), IA, "vpmm_pool_reserve");
  EXPECT_ERR(p, vpmm_pool_reserve(p, 0, VPMM_RESERVE_TRY, &out), IA, "vpmm_pool_reserve");
  EXPECT_ERR(p, vpmm_pool_reserve(p, kPage, 0x8, &out), IA, "vpmm_pool_reserve");
  EXPECT_ERR(p, vpmm_pool_reserve(p, kPage, VPMM_RESERVE_BLOCK | VPMM_RESERVE_UPTO, &out), IA,
             "vpmm_pool_reserve");
  EXPECT_ERR(p, vpmm_pool_reserve(p, 17 * kPage, VPMM_RESERVE_TRY, &out), OOM, "vpmm_pool_reserve");
  EXPECT_ERR(p, vpmm_pool_reserve(p, 17 * kPage, VPMM_RESERVE_BLOCK, &out), OOM, "vpmm_pool_reserve");
  EXPECT_ERR(p, vpmm_pool_reserve_ex(p, 0, VPMM_RESERVE_TRY, 0, &out), IA, "vpmm_pool_reserve_ex");
  CHECK_EQ(static_cast<void*>(out), kSentinel);
  uint64_t size = 7;
  for (vpmm_reservation* bad : {static_cast<vpmm_reservation*>(nullptr), gone, theirs,
                                reinterpret_cast<vpmm_reservation*>(&size)}) {
    EXPECT_ERR(p, vpmm_reservation_info(p, bad, &size, nullptr), IA, "vpmm_reservation_info");
    EXPECT_ERR(p, vpmm_reservation_release(p, bad), IA, "vpmm_reservation_release");
    vpmm_alloc_attrs attrs;
    std::memset(&attrs, 0, sizeof attrs);
    attrs.struct_size = sizeof attrs;
    attrs.reservation = bad;
    void* x = kSentinel;
    if (bad) EXPECT_ERR(p, vpmm_pool_malloc_ex(p, kPage, nullptr, &attrs, &x), IA, "vpmm_pool_malloc_ex");
    CHECK_EQ(x, kSentinel);
  }
  CHECK_EQ(size, uint64_t(7));
  // A limit below what is mapped and cannot be trimmed (live memory).
  EXPECT_ERR(p, vpmm_pool_set_limit(p, kPage), WS, "vpmm_pool_set_limit");
  // Everything still works.
  CHECK_OK(vpmm_reservation_info(p, live, &size, nullptr));
  CHECK_EQ(size, 4 * kPage);
  CHECK_OK(vpmm_reservation_release(p, live));
  CHECK_OK(vpmm_reservation_release(other, theirs));
  CHECK_OK(vpmm_pool_free(p, keep, nullptr));
  CHECK_OK(vpmm_pool_check(p));
  CHECK_OK(vpmm_pool_destroy(p));
  CHECK_OK(vpmm_pool_destroy(other));
}

TEST("row 53: an allocation overdrawing its reservation (default policy) is OUT_OF_MEMORY") {
  vpmm_pool* p = limited_pool(16);
  vpmm_reservation* r = nullptr;
  CHECK_OK(vpmm_pool_reserve(p, 2 * kPage, VPMM_RESERVE_TRY, &r));
  vpmm_status st = VPMM_OK;
  CHECK(vt::malloc_tagged(p, 3 * kPage, nullptr, 0, nullptr, &st, r) == nullptr);
  CHECK_EQ(st, OOM);
  uint64_t used = 1;
  CHECK_OK(vpmm_reservation_info(p, r, nullptr, &used));
  CHECK_EQ(used, uint64_t(0));
  vpmm_reservation_release(p, r);
  vpmm_pool_destroy(p);
}

TEST("row 54: releasing a reservation twice, or using it after release, is INVALID_ARGUMENT") {
  vpmm_pool* p = limited_pool(16);
  vpmm_reservation* r = nullptr;
  CHECK_OK(vpmm_pool_reserve(p, 2 * kPage, VPMM_RESERVE_TRY, &r));
  CHECK_OK(vpmm_reservation_release(p, r));
  CHECK_EQ(vpmm_reservation_release(p, r), IA);
  vpmm_status st = VPMM_OK;
  CHECK(vt::malloc_tagged(p, kPage, nullptr, 0, nullptr, &st, r) == nullptr);
  CHECK_EQ(st, IA);
  CHECK_EQ(vpmm_reservation_info(p, r, nullptr, nullptr), IA);
  vpmm_pool_destroy(p);
}

TEST("row 55: a reservation of another pool is INVALID_ARGUMENT") {
  vpmm_pool* p = limited_pool(16);
  vpmm_pool* q = limited_pool(16);
  vpmm_reservation* r = nullptr;
  CHECK_OK(vpmm_pool_reserve(q, kPage, VPMM_RESERVE_TRY, &r));
  vpmm_status st = VPMM_OK;
  CHECK(vt::malloc_tagged(p, kPage, nullptr, 0, nullptr, &st, r) == nullptr);
  CHECK_EQ(st, IA);
  CHECK_EQ(vpmm_reservation_release(p, r), IA);
  CHECK_OK(vpmm_reservation_release(q, r));
  vpmm_pool_destroy(p);
  vpmm_pool_destroy(q);
}

TEST("row 56: a limit below what live memory needs is WRONG_STATE; the old limit stays") {
  vpmm_pool* p = limited_pool(32);
  void* a = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, 8 * kPage, nullptr, &a));
  CHECK_EQ(vpmm_pool_set_limit(p, 4 * kPage), WS);
  CHECK_EQ(vt::stats(p).capacity_bytes, 32 * kPage);
  vpmm_pool_destroy(p);
}

TEST("row 59: a blocking reservation larger than the whole capacity is OUT_OF_MEMORY at once") {
  vpmm_pool* p = limited_pool(8);
  vpmm_reservation* r = nullptr;
  CHECK_EQ(vpmm_pool_reserve(p, 9 * kPage, VPMM_RESERVE_BLOCK, &r), OOM);
  CHECK_EQ(r, nullptr);
  vpmm_pool_destroy(p);
}

TEST("set_limit and get_config from two threads (clean under TSan)") {
  vpmm_pool* p = host_pool();
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
