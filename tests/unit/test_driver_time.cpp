// vpmm_stats.driver_ns / driver_calls: the driver calls malloc and free make
// for their caller, and only those. A malloc served from cached memory makes
// none; a growth makes some; a failed malloc and a pause change nothing.
// vpmm_pool_mark_step: the driver time within each of the program's steps.
#include <cstdint>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <thread>

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

TEST("marked steps report their wall time and the driver time their mallocs and frees spent") {
  vpmm_pool* p = pool();
  CHECK(p != nullptr);
  if (!p) return;
  CHECK_EQ(vpmm_pool_mark_step(nullptr), VPMM_ERR_INVALID_ARGUMENT);
  CHECK(std::strstr(vpmm_last_error(), "vpmm_pool_mark_step") != nullptr);
  CHECK_OK(vpmm_pool_mark_step(p));  // opens the first step: none closed yet
  vpmm_stats s = vt::stats(p);
  CHECK_EQ(s.n_steps, uint64_t(0));
  CHECK_EQ(s.steps_ns, uint64_t(0));
  // Step 1 grows (driver calls), then sleeps: its driver time is inside it.
  const uint64_t driver_before = s.driver_ns;
  void* a = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, 4 * kPage, nullptr, &a));
  CHECK_OK(vpmm_pool_free(p, a, nullptr));
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  CHECK_OK(vpmm_pool_mark_step(p));
  s = vt::stats(p);
  CHECK_EQ(s.n_steps, uint64_t(1));
  CHECK(s.last_step_driver_ns > 0);
  CHECK_EQ(s.last_step_driver_ns, s.driver_ns - driver_before);
  CHECK(s.last_step_ns >= 2000000);  // the sleep
  CHECK(s.last_step_ns > s.last_step_driver_ns);
  const uint64_t step1_ns = s.last_step_ns;
  // Step 2 reuses the cached memory: no driver time of its own.
  CHECK_OK(vpmm_pool_malloc(p, 4 * kPage, nullptr, &a));
  CHECK_OK(vpmm_pool_free(p, a, nullptr));
  CHECK_OK(vpmm_pool_mark_step(p));
  s = vt::stats(p);
  CHECK_EQ(s.n_steps, uint64_t(2));
  CHECK_EQ(s.last_step_driver_ns, uint64_t(0));
  CHECK_EQ(s.steps_ns, step1_ns + s.last_step_ns);
  CHECK_EQ(s.steps_driver_ns, s.driver_ns - driver_before);
  // A caller compiled before the step fields sees its own bytes only.
  vpmm_stats old;
  std::memset(&old, 0xab, sizeof old);
  old.struct_size = offsetof(vpmm_stats, n_steps);
  CHECK_OK(vpmm_pool_stats(p, &old));
  unsigned char tail[sizeof old - offsetof(vpmm_stats, n_steps)];
  std::memset(tail, 0xab, sizeof tail);
  CHECK(std::memcmp(reinterpret_cast<const unsigned char*>(&old) + offsetof(vpmm_stats, n_steps), tail,
                    sizeof tail) == 0);
  vpmm_pool_destroy(p);
}

TEST_MAIN()
