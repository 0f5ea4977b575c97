// Backend facts the core reads: capability bits and max_handle_size. A
// FaultBackend over the host backend claims less than the host backend has
// (drop_capabilities) or reports a handle cap (set_max_handle_size), and each
// test checks the core's answer through behaviour: which backend calls it
// made, and that the bytes of paused allocations survive.
//  - no kCapPinnedHost: backups live in pageable memory; pause and resume
//    work and keep the bytes (never "pinning failed").
//  - no kCapDeviceCopy: a pause with backups fails UNSUPPORTED before it
//    changes anything; a pause without backups still works.
//  - no kCapMemInfo: mem_info is not called; the pool has no device total.
//  - max_handle_size: no handle larger than the backend's cap.
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "backend/backend.hpp"
#include "support/fault_backend.hpp"
#include "support/fault_host_services.hpp"
#include "check.hpp"
#include "common/status.hpp"
#include "config/config.hpp"
#include "core/pool.hpp"
#include "pool_util.hpp"

namespace {

using vpmm::Backend;
using vpmm::FaultBackend;
using vpmm::Op;
using vpmm::Pool;
using vpmm::PoolOptions;

constexpr uint64_t kPage = 64 << 10;

uint64_t calls(const Backend& b, Op op) {
  return b.counters().calls[static_cast<int>(op)].load();
}
uint64_t calls(const vpmm::HostServices& h, Op op) { return h.counters().calls[static_cast<int>(op)].load(); }

struct World {
  std::shared_ptr<Backend> host;
  std::shared_ptr<vpmm::HostServices> services;  // pageable memory comes from here
  FaultBackend* fault = nullptr;  // owned by the pool
  std::unique_ptr<Pool> pool;

  // Host buffers held for backups: pinned (the backend's) and pageable.
  int64_t host_buffers() const {
    return host->counters().live_host_buffers.load() + services->counters().live_pageable.load();
  }

  // A pool of 64 pages over a FaultBackend that claims `dropped` less.
  explicit World(uint32_t dropped, uint64_t max_handle_cap = 0, PoolOptions opt = options()) {
    vpmm::BackendParams bp;
    bp.host_capacity = 256 * kPage;
    vpmm_status st = VPMM_OK;
    host = vt::make_shared_test_backend(bp, &st);
    CHECK(host != nullptr);
    if (!host) return;
    std::unique_ptr<FaultBackend> fb(new FaultBackend(host));
    fb->drop_capabilities(dropped);
    if (max_handle_cap) fb->set_max_handle_size(max_handle_cap);
    fault = fb.get();
    services = vpmm::make_shared_host_services();
    CHECK_OK(Pool::create(std::move(fb), std::unique_ptr<vpmm::HostServices>(new vpmm::FaultHostServices(services)),
                          opt, &pool));
  }

  static PoolOptions options() {
    PoolOptions o;
    o.page_size = kPage;
    o.va_size = 64 * kPage;
    return o;
  }

  // Nothing leaked once the pool is gone.
  void destroy() {
    pool.reset();
    if (host && !vpmm::live_counts_zero(host->counters())) {
      CHECK(vpmm::live_counts_zero(host->counters()));
      std::printf("  leaked: %s\n", vpmm::live_counts(host->counters()).c_str());
    }
    if (services) CHECK(vpmm::live_counts_zero(services->counters()));
  }
};

struct Alloc {
  unsigned char* p;
  uint64_t size;
  unsigned char seed;
};

Alloc alloc_filled(Pool& pool, uint64_t size, const char* tag, uint32_t flags, unsigned char seed) {
  void* p = nullptr;
  CHECK_OK(pool.malloc("vpmm_pool_malloc", size, nullptr, tag, flags, nullptr, &p));
  Alloc a{static_cast<unsigned char*>(p), size, seed};
  if (p)
    for (uint64_t i = 0; i < size; ++i) a.p[i] = static_cast<unsigned char>(seed + i * 7);
  return a;
}

bool intact(const Alloc& a) {
  if (!a.p) return false;
  for (uint64_t i = 0; i < a.size; ++i)
    if (a.p[i] != static_cast<unsigned char>(a.seed + i * 7)) return false;
  return true;
}

// Pauses and resumes three backed allocations; returns them for checks.
std::vector<Alloc> pause_resume_backed(World& w) {
  std::vector<Alloc> as;
  as.push_back(alloc_filled(*w.pool, kPage, "w", VPMM_ALLOC_HOST_BACKUP, 1));
  as.push_back(alloc_filled(*w.pool, 3 * kPage + 4096, "w", VPMM_ALLOC_HOST_BACKUP, 2));
  as.push_back(alloc_filled(*w.pool, 8 * kPage, "w", VPMM_ALLOC_HOST_BACKUP, 3));
  CHECK_OK(w.pool->pause("w"));
  // Paused: one host buffer per backup, nothing mapped for them.
  CHECK_EQ(w.host_buffers(), int64_t{3});
  CHECK_OK(w.pool->resume("w"));
  for (const Alloc& a : as) CHECK(intact(a));
  CHECK_EQ(w.pool->check(), std::string());
  return as;
}

TEST("with pinned host memory, backups are pinned (the control case)") {
  World w(0);
  if (!w.pool) return;
  std::vector<Alloc> as = pause_resume_backed(w);
  CHECK_EQ(calls(*w.host, Op::host_alloc), uint64_t{3});
  CHECK_EQ(calls(*w.services, Op::pageable_alloc), uint64_t{0});
  for (const Alloc& a : as) CHECK_OK(w.pool->free(a.p, nullptr));
  w.destroy();
}

TEST("without pinned host memory, pause and resume go through pageable memory") {
  World w(vpmm::kCapPinnedHost);
  if (!w.pool) return;
  CHECK((w.fault->capabilities() & vpmm::kCapPinnedHost) == 0);
  std::vector<Alloc> as = pause_resume_backed(w);
  CHECK_EQ(calls(*w.host, Op::host_alloc), uint64_t{0});  // never asked to pin
  CHECK_EQ(calls(*w.services, Op::pageable_alloc), uint64_t{3});
  // Pageable buffers are not cached: resume gave every one back.
  CHECK_EQ(calls(*w.services, Op::pageable_free), uint64_t{3});
  CHECK_EQ(w.host_buffers(), int64_t{0});
  // A second round works the same (no state left from the first).
  CHECK_OK(w.pool->pause("w"));
  CHECK_OK(w.pool->resume("w"));
  for (const Alloc& a : as) CHECK(intact(a));
  CHECK_EQ(calls(*w.host, Op::host_alloc), uint64_t{0});
  for (const Alloc& a : as) CHECK_OK(w.pool->free(a.p, nullptr));
  w.destroy();
}

TEST("without pinned host memory, a paused backup is freed with its allocation") {
  World w(vpmm::kCapPinnedHost);
  if (!w.pool) return;
  Alloc a = alloc_filled(*w.pool, 2 * kPage, "w", VPMM_ALLOC_HOST_BACKUP, 9);
  CHECK_OK(w.pool->pause("w"));
  CHECK_EQ(w.host_buffers(), int64_t{1});
  CHECK_OK(w.pool->free(a.p, nullptr));  // free while paused drops the backup
  CHECK_EQ(w.host_buffers(), int64_t{0});
  w.destroy();
}

TEST("without device copies, a pause with backups fails whole; one without still works") {
  World w(vpmm::kCapDeviceCopy);
  if (!w.pool) return;
  Alloc backed = alloc_filled(*w.pool, 2 * kPage, "w", VPMM_ALLOC_HOST_BACKUP, 4);
  Alloc plain = alloc_filled(*w.pool, 2 * kPage, "d", 0, 5);
  vpmm::fail(VPMM_OK, "%s", "");
  CHECK_EQ(w.pool->pause("w"), VPMM_ERR_UNSUPPORTED);
  CHECK(std::strstr(vpmm::last_error(), "cannot copy") != nullptr);
  // Nothing changed: still mapped, same bytes, no copy or host buffer made.
  CHECK(intact(backed));
  CHECK_EQ(calls(*w.host, Op::copy), uint64_t{0});
  CHECK_EQ(w.host_buffers(), int64_t{0});
  CHECK_EQ(w.pool->check(), std::string());
  // Discarding contents needs no copy.
  CHECK_OK(w.pool->pause("d"));
  CHECK_OK(w.pool->resume("d"));
  CHECK_OK(w.pool->free(plain.p, nullptr));
  CHECK_OK(w.pool->free(backed.p, nullptr));
  w.destroy();
}

TEST("without memory info, the core does not ask for it") {
  vpmm::BackendParams bp;
  vpmm_status st = VPMM_OK;
  std::shared_ptr<Backend> host = vt::make_shared_test_backend(bp, &st);
  CHECK(host != nullptr);
  if (!host) return;
  vpmm_config c;
  vpmm::config_defaults(&c);
  c.backend = VPMM_BACKEND_HOST;
  c.memory_limit_fraction = 0.5;  // nothing to scale without a device total

  FaultBackend with(host);
  PoolOptions o;
  CHECK_OK(vpmm::config_resolve(c, with, &o));
  CHECK_EQ(o.device_total, uint64_t{1} << 30);  // the host capacity
  CHECK_EQ(o.memory_limit, uint64_t{1} << 29);
  const uint64_t asked = calls(*host, Op::mem_info);
  CHECK_EQ(asked, uint64_t{1});

  FaultBackend without(host);
  without.drop_capabilities(vpmm::kCapMemInfo);
  CHECK_OK(vpmm::config_resolve(c, without, &o));
  CHECK_EQ(o.device_total, uint64_t{0});
  CHECK_EQ(o.memory_limit, uint64_t{0});
  CHECK_EQ(calls(*host, Op::mem_info), asked);  // not called again
}

TEST("max_handle_size: the backend's fact reaches the wrapper, host reports none") {
  World w(0, 2 * kPage);
  if (!w.pool) return;
  // HIP over the emulator below ROCm 7.0: the chunked path's default chunk.
  CHECK_EQ(w.host->max_handle_size(),
           vt::testing_hip() && vt::emu_get("VERSION") < 70000000 ? uint64_t{256} << 20 : uint64_t{0});
  CHECK_EQ(w.fault->max_handle_size(), 2 * kPage);
  w.destroy();
}

// A backend that caps handles at 2 pages: a growth of 8 pages, whatever the
// pool's own handle policy (here: one handle per growth), is 4 handles.
TEST("max_handle_size: the growth policy never creates a larger handle") {
  PoolOptions opt = World::options();
  opt.max_handle_size = vpmm::kUnlimitedHandle;
  World w(0, 2 * kPage, opt);
  if (!w.pool) return;
  const uint64_t created0 = calls(*w.host, Op::create);
  Alloc a = alloc_filled(*w.pool, 8 * kPage, "w", 0, 6);
  const uint64_t created = calls(*w.host, Op::create) - created0;
  const int64_t handles = w.host->counters().live_handles.load();
  const int64_t bytes = w.host->counters().live_handle_bytes.load();
  CHECK_EQ(created, uint64_t{4});
  CHECK(handles > 0 && bytes / handles <= static_cast<int64_t>(2 * kPage));
  CHECK(intact(a));
  CHECK_OK(w.pool->free(a.p, nullptr));
  w.destroy();
}

}  // namespace

TEST_MAIN()
