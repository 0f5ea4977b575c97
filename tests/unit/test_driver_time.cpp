// vpmm_stats.driver_ns / driver_calls: the driver calls malloc and free make
// for their caller, and only those. A malloc served from cached memory makes
// none; a growth makes some; a failed malloc and a pause change nothing.
#include <cstdint>

#include "check.hpp"
#include "pool_util.hpp"
#include "vpmm.h"

namespace {

constexpr uint64_t kPage = 64 << 10;

vpmm_pool* pool(uint64_t capacity = 64ull << 20) {
  vt::HostPoolSpec s;
  s.page = kPage;
  s.capacity = capacity;
  return vt::make_host_pool(s);
}

}  // namespace

TEST("a growth counts its driver calls; a malloc from cached memory counts none") {
  vpmm_pool* p = pool();
  CHECK(p != nullptr);
  if (!p) return;
  CHECK_EQ(vt::stats(p).driver_calls, uint64_t(0));
  void* a = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, 4 * kPage, nullptr, &a));
  const vpmm_stats grown = vt::stats(p);
  CHECK(grown.driver_calls >= 3);  // create, map, set-access at least
  CHECK(grown.driver_ns > 0);
  CHECK_OK(vpmm_pool_free(p, a, nullptr));
  for (int i = 0; i < 100; ++i) {
    CHECK_OK(vpmm_pool_malloc(p, 4 * kPage, nullptr, &a));
    CHECK_OK(vpmm_pool_free(p, a, nullptr));
  }
  const vpmm_stats hot = vt::stats(p);
  CHECK_EQ(hot.driver_calls, grown.driver_calls);
  CHECK_EQ(hot.driver_ns, grown.driver_ns);
  vpmm_pool_destroy(p);
}

TEST("a failed malloc and a pause or resume leave the driver statistics as they were") {
  vpmm_pool* p = pool(8 * kPage);
  CHECK(p != nullptr);
  if (!p) return;
  void* w = vt::malloc_tagged(p, 2 * kPage, "w", VPMM_ALLOC_HOST_BACKUP);
  CHECK(w != nullptr);
  const vpmm_stats before = vt::stats(p);
  void* big = nullptr;
  CHECK_EQ(vpmm_pool_malloc(p, 64 * kPage, nullptr, &big), VPMM_ERR_OUT_OF_MEMORY);
  CHECK_OK(vpmm_pool_pause(p, "w"));
  CHECK_OK(vpmm_pool_resume(p, "w"));
  CHECK_OK(vpmm_pool_trim(p, 0));
  const vpmm_stats after = vt::stats(p);
  CHECK_EQ(after.driver_calls, before.driver_calls);
  CHECK_EQ(after.driver_ns, before.driver_ns);
  // After them a growth counts its own calls, and a reuse none.
  void* a = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, kPage, nullptr, &a));  // trimmed: grows
  const vpmm_stats grown = vt::stats(p);
  CHECK(grown.driver_calls > after.driver_calls);
  CHECK_OK(vpmm_pool_free(p, a, nullptr));
  CHECK_OK(vpmm_pool_malloc(p, kPage, nullptr, &a));
  CHECK_EQ(vt::stats(p).driver_calls, grown.driver_calls);
  CHECK_OK(vpmm_pool_free(p, a, nullptr));
  vpmm_pool_destroy(p);
}

TEST_MAIN()
