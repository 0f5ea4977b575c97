// What only the CUDA backend has, beyond the backend contract that
// tests/conformance checks for every backend (its CUDA instance,
// gpu_conformance_cuda, runs beside this file): device-ordinal checks, the
// context discipline (the caller's current context, or none, is what it finds
// after every call, from any thread, also a non-primary one of its own), the
// driver's error names in the messages, and how the driver treats misuse the
// contract leaves undefined (printed, not asserted). Exits 77 with "SKIP: ..."
// where no CUDA device is usable (the meson convention for a skipped test).
//
// The backend is reached as the pool reaches it: through its registry entry
// (backend/registry.hpp). Plain C++ against the internal library: needs the
// CUDA backend compiled in, not nvcc. Prints "N passed, N failed"
// (tests/unit/check.hpp).
#include <dlfcn.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "backend/backend.hpp"
#include "backend/cuda/cuda_driver.hpp"
#include "backend/registry.hpp"
#include "backend_counters.hpp"
#include "check.hpp"
#include "common/status.hpp"

using namespace vpmm;

namespace {

bool contains(const char* hay, const char* needle) { return std::strstr(hay, needle) != nullptr; }

const BackendEntry* entry() { return find_backend_entry(VPMM_BACKEND_CUDA); }
const cuda::Driver* drv() { return cuda::driver(); }

CUcontext current_ctx() {
  CUcontext c = nullptr;
  if (drv()->CtxGetCurrent(&c) != CUDA_SUCCESS) return reinterpret_cast<CUcontext>(-1);
  return c;
}

// Makes device 0's primary context current on this thread for a scope (own
// retain), then unbinds it: for the driver calls the test makes directly.
struct PrimaryScope {
  const cuda::Driver* d;
  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  bool ok = false;
  explicit PrimaryScope(const cuda::Driver* drv_) : d(drv_) {
    ok = d->DeviceGet(&dev, 0) == CUDA_SUCCESS &&
         d->DevicePrimaryCtxRetain(&ctx, dev) == CUDA_SUCCESS && d->CtxSetCurrent(ctx) == CUDA_SUCCESS;
  }
  ~PrimaryScope() {
    d->CtxSetCurrent(nullptr);
    if (ctx != nullptr) d->DevicePrimaryCtxRelease(dev);
  }
};

std::unique_ptr<Backend> make() {
  vpmm_status st = VPMM_ERR_INTERNAL;
  BackendParams params;
  std::unique_ptr<Backend> b = entry()->make(params, &st);
  CHECK_MSG(b != nullptr && st == VPMM_OK, "make: %d %s", st, last_error());
  return b;
}

TEST("device ordinals: out of range and negative are the caller's fault") {
  int count = 0;
  drv()->DeviceGetCount(&count);
  BackendParams bad;
  bad.device = count;
  vpmm_status st = VPMM_OK;
  CHECK(entry()->make(bad, &st) == nullptr);
  CHECK_EQ(st, VPMM_ERR_INVALID_ARGUMENT);
  CHECK(contains(last_error(), "out of range"));
  std::printf("  out-of-range device: %s\n", last_error());
  bad.device = -1;
  CHECK(entry()->make(bad, &st) == nullptr);
  CHECK_EQ(st, VPMM_ERR_INVALID_ARGUMENT);
  auto b = make();
  if (b)
    std::printf("  granularity %llu, recommended page %llu\n", (unsigned long long)b->granularity(),
                (unsigned long long)b->recommended_page_size());
}

// The backend makes its primary context current for each call and puts the
// caller's back: none on a thread that had none, the primary one where it was
// current already. Data written by the caller under the primary context is
// what the backend reads.
TEST("context discipline: the caller's current context is restored") {
  auto b = make();
  if (!b) return;
  const cuda::Driver* d = drv();
  const uint64_t g = b->granularity();
  CHECK(current_ctx() == nullptr);  // main thread: nobody made a context current
  uint64_t va = 0;
  PhysHandle h = 0;
  CHECK_OK(b->reserve(2 * g, 0, &va));
  CHECK(current_ctx() == nullptr);  // restored after the call
  CHECK_OK(b->create(2 * g, &h));
  CHECK_OK(b->map(va, 2 * g, h));
  CHECK_OK(b->set_access(va, 2 * g));

  // The first half with a plain synchronous cuMemcpyHtoD under the primary
  // context (made current here by hand), the second through the backend.
  std::vector<uint32_t> pattern(2 * g / sizeof(uint32_t));
  for (size_t i = 0; i < pattern.size(); ++i) pattern[i] = static_cast<uint32_t>(i * 2654435761u);
  const uint64_t half = g;
  {
    PrimaryScope ps(d);
    CHECK(ps.ok);
    CHECK(d->MemcpyHtoD != nullptr);
    if (d->MemcpyHtoD != nullptr)
      CHECK(d->MemcpyHtoD(static_cast<CUdeviceptr>(va), pattern.data(), half) == CUDA_SUCCESS);
    // With the primary context already current, the backend must leave it so.
    uint64_t f = 0, t = 0;
    CHECK_OK(b->mem_info(&f, &t));
    CHECK(current_ctx() == ps.ctx);
  }
  CHECK(current_ctx() == nullptr);
  CHECK_OK(b->copy_h2d(va + half, reinterpret_cast<const char*>(pattern.data()) + half, half, nullptr));
  CHECK_OK(b->stream_sync(nullptr));
  std::vector<uint32_t> back(pattern.size(), 0);
  CHECK_OK(b->copy_d2h(back.data(), va, 2 * g, nullptr));
  CHECK_OK(b->stream_sync(nullptr));
  CHECK(back == pattern);
  CHECK(current_ctx() == nullptr);

  // Threads with no context keep none, whatever they call.
  const int kThreads = 8;
  uint64_t tva = 0;
  CHECK_OK(b->reserve(kThreads * g, 0, &tva));
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 20; ++i) {
        PhysHandle th = 0;
        const uint64_t tv = tva + static_cast<uint64_t>(t) * g;
        EventHandle ev = 0;
        bool ok = b->create(g, &th) == VPMM_OK && b->map(tv, g, th) == VPMM_OK &&
                  b->set_access(tv, g) == VPMM_OK && b->event_record(nullptr, &ev) == VPMM_OK &&
                  b->event_sync(ev) == VPMM_OK && b->event_destroy(ev) == VPMM_OK &&
                  b->unmap(tv, g) == VPMM_OK && b->release(th, g) == VPMM_OK;
        if (!ok || current_ctx() != nullptr) bad.fetch_add(1);
      }
    });
  for (auto& th : threads) th.join();
  CHECK_EQ(bad.load(), 0);
  CHECK_OK(b->unreserve(tva, kThreads * g));

  CHECK_OK(b->unmap(va, 2 * g));
  CHECK_OK(b->release(h, 2 * g));
  CHECK_OK(b->unreserve(va, 2 * g));
  vt::check_counters_zero(*b);
}

// A caller with its own (non-primary) context gets it back.
TEST("context discipline: a foreign current context survives every call") {
  auto b = make();
  if (!b) return;
  const cuda::Driver* d = drv();
  const uint64_t g = b->granularity();
  // Test-only entry points, straight from the already loaded driver.
  using FnCtxCreate = CUresult(CUDAAPI*)(CUcontext*, unsigned int, CUdevice);
  using FnCtxDestroy = CUresult(CUDAAPI*)(CUcontext);
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  FnCtxCreate create_ctx = lib ? reinterpret_cast<FnCtxCreate>(dlsym(lib, "cuCtxCreate_v2")) : nullptr;
  FnCtxDestroy destroy_ctx = lib ? reinterpret_cast<FnCtxDestroy>(dlsym(lib, "cuCtxDestroy_v2")) : nullptr;
  if (create_ctx == nullptr || destroy_ctx == nullptr) {
    std::printf("  (cuCtxCreate_v2 not found: foreign-context check skipped)\n");
    return;
  }
  CUdevice dev = 0;
  d->DeviceGet(&dev, 0);
  CUcontext mine = nullptr;
  CHECK(create_ctx(&mine, 0, dev) == CUDA_SUCCESS);  // also makes it current
  CHECK(current_ctx() == mine);
  uint64_t tva = 0;
  PhysHandle th = 0;
  EventHandle ev = 0;
  CHECK_OK(b->reserve(g, 0, &tva));
  CHECK_OK(b->create(g, &th));
  CHECK_OK(b->map(tva, g, th));
  CHECK_OK(b->set_access(tva, g));
  CHECK_OK(b->event_record(nullptr, &ev));  // primary context's default stream
  CHECK_OK(b->event_sync(ev));
  CHECK_OK(b->event_destroy(ev));
  CHECK_OK(b->unmap(tva, g));
  CHECK_OK(b->release(th, g));
  CHECK_OK(b->unreserve(tva, g));
  CHECK(current_ctx() == mine);
  CHECK(destroy_ctx(mine) == CUDA_SUCCESS);
  d->CtxSetCurrent(nullptr);
  vt::check_counters_zero(*b);
}

// Messages name the driver call, its values and the driver's error name.
TEST("error messages: the driver call and CUDA_ERROR_* name") {
  auto b = make();
  if (!b) return;
  const cuda::Driver* d = drv();
  const uint64_t g = b->granularity();
  uint64_t va = 0, total = 0, free_b = 0;
  PhysHandle h = 0;
  CHECK_OK(b->mem_info(&free_b, &total));
  CHECK_OK(b->reserve(4 * g, 0, &va));
  CHECK_OK(b->create(2 * g, &h));
  CHECK_OK(b->map(va, 2 * g, h));

  vpmm_status s = b->unmap(va, g);  // part of a mapping
  CHECK_EQ(s, VPMM_ERR_INVALID_ARGUMENT);
  CHECK(contains(last_error(), "cuda cuMemUnmap(va=0x"));
  CHECK(contains(last_error(), "CUDA_ERROR_INVALID_VALUE"));
  std::printf("  partial unmap -> status %d: %s\n", (int)s, last_error());

  PhysHandle big = 0;
  s = b->create(((total * 4) / g + 1) * g, &big);
  CHECK_EQ(s, VPMM_ERR_OUT_OF_MEMORY);
  CHECK_EQ(big, PhysHandle(0));
  CHECK(contains(last_error(), "cuda cuMemCreate(size="));
  CHECK(contains(last_error(), "CUDA_ERROR_OUT_OF_MEMORY"));
  std::printf("  huge create -> %s\n", last_error());

  s = b->map(va + 2 * g, g, h);  // part of a handle
  CHECK(s != VPMM_OK);
  std::printf("  partial map -> status %d: %s\n", (int)s, last_error());

  // Probe only (not through the backend, whose counters would believe it):
  // does the driver notice an unmap of reserved VA that holds no mapping?
  {
    PrimaryScope ps(d);
    CUresult r = d->MemUnmap(static_cast<CUdeviceptr>(va + 2 * g), g);
    char buf[160];
    std::printf("  probe: cuMemUnmap of an unmapped reserved range -> %s\n",
                cuda::format_error(r, buf, sizeof buf));
  }
  CHECK_OK(b->unmap(va, 2 * g));
  CHECK_OK(b->release(h, 2 * g));
  CHECK_OK(b->unreserve(va, 4 * g));
  vt::check_counters_zero(*b);
}

void require_cuda() {
  const BackendEntry* e = entry();
  if (e == nullptr) {
    std::printf("SKIP: libvpmm was built without the CUDA backend\n");
    std::exit(77);
  }
  if (!e->usable()) {
    const char* why = nullptr;
    cuda::driver(&why);
    std::printf("SKIP: no CUDA device (%s)\n",
                why != nullptr ? why : "cuInit failed or cuDeviceGetCount = 0");
    std::exit(77);
  }
  vpmm_status st = VPMM_OK;
  if (!e->make(BackendParams{}, &st) && st == VPMM_ERR_UNSUPPORTED) {
    std::printf("SKIP: no CUDA device usable for VMM (%s)\n", last_error());
    std::exit(77);
  }
}

void print_last_error() {
  if (last_error()[0] != '\0') std::printf("       last error: %s\n", last_error());
}

}  // namespace

int main(int argc, char** argv) {
  vt::fail_hook() = print_last_error;
  vt::RunOptions o;
  o.before_all = require_cuda;
  return vt::run_all(argc, argv, o);
}
