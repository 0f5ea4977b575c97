// The targets of the backend conformance suite: one row per backend (or
// backend configuration) the contract is checked against. A new backend joins
// the suite with one row here (and one test() line in meson.build); the HIP
// emulator's row is sketched below.
#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

#include "support/fault_backend.hpp"
#include "backend/registry.hpp"
#include "common/status.hpp"
#include "target.hpp"
#ifdef VPMM_HAVE_HIP
#include "test_backend.hpp"
#endif

#ifdef VPMM_HAVE_CUDA
#include "backend/cuda/cuda_driver.hpp"
#endif

namespace conformance {
namespace {

// ---- host: the test-stream extension of its registry entry ----------------
const vpmm::HostStreamControl* host_streams() {
  const vpmm::BackendEntry* e = vpmm::find_backend_entry(VPMM_BACKEND_HOST);
  return e != nullptr ? e->host_streams : nullptr;
}
bool host_hold(vpmm::Stream s) {
  const vpmm::HostStreamControl* c = host_streams();
  return c != nullptr && c->hold(s) == VPMM_OK;
}
void host_release(vpmm::Stream s) {
  if (const vpmm::HostStreamControl* c = host_streams()) (void)c->release(s);
}

// ---- CUDA: a host function that blocks the stream until released ----------
#ifdef VPMM_HAVE_CUDA
struct Gate {
  std::atomic<bool> open{false};
};
std::mutex g_gates_mu;
std::map<vpmm::Stream, Gate*> g_gates;

void CUDA_CB gate_fn(void* user) {
  Gate* g = static_cast<Gate*>(user);
  while (!g->open.load()) std::this_thread::sleep_for(std::chrono::microseconds(50));
  delete g;  // the stream is done with it
}

bool cuda_hold(vpmm::Stream s) {
  const vpmm::cuda::Driver* d = vpmm::cuda::driver();
  if (d == nullptr || d->LaunchHostFunc == nullptr || s == nullptr) return false;
  // The stream belongs to device 0's primary context: launch under it, then
  // put the caller's context back (the backend relies on none being current).
  CUdevice dev = 0;
  CUcontext ctx = nullptr, prev = nullptr;
  if (d->DeviceGet(&dev, 0) != CUDA_SUCCESS || d->DevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS)
    return false;
  d->CtxGetCurrent(&prev);
  d->CtxSetCurrent(ctx);
  Gate* g = new Gate;
  bool ok = d->LaunchHostFunc(static_cast<CUstream>(s), gate_fn, g) == CUDA_SUCCESS;
  d->CtxSetCurrent(prev);
  d->DevicePrimaryCtxRelease(dev);
  if (!ok) {
    delete g;
    return false;
  }
  std::lock_guard<std::mutex> lk(g_gates_mu);
  g_gates[s] = g;
  return true;
}
void cuda_release(vpmm::Stream s) {
  std::lock_guard<std::mutex> lk(g_gates_mu);
  auto it = g_gates.find(s);
  if (it == g_gates.end()) return;
  it->second->open.store(true);
  g_gates.erase(it);
}
#endif

constexpr uint32_t kAllCaps = vpmm::kCapDeviceCopy | vpmm::kCapPinnedHost | vpmm::kCapMemInfo;

const Target kTargets[] = {
    // name        kind                fault  strict cpu    name    VA size       caps      cap  hold / release
    {"host",       VPMM_BACKEND_HOST,  false, true,  true,  "host", 64ull << 30,  kAllCaps, 0,   host_hold, host_release},
    {"host+fault", VPMM_BACKEND_HOST,  true,  true,  true,  "host", 64ull << 30,  kAllCaps, 0,   host_hold, host_release},
#ifdef VPMM_HAVE_CUDA
    {"cuda",       VPMM_BACKEND_CUDA,  false, false, false, "cuda", 8ull << 40,   kAllCaps, 0,   cuda_hold, cuda_release},
#endif
#ifdef VPMM_HAVE_HIP
    // The HIP backend over the emulated runtime (tests/hip_emu, ROCm 6.2 by
    // default: 256 MiB chunks), whose streams are host streams (plugged in by
    // make_backend below), so host holds keep its events pending.
    {"hip",        VPMM_BACKEND_HIP,   false, false, true,  "hip",  8ull << 40,   kAllCaps, 256ull << 20, host_hold, host_release},
#endif
};

const Target* g_current = nullptr;

}  // namespace

const Target* targets(size_t* n) {
  *n = sizeof kTargets / sizeof kTargets[0];
  return kTargets;
}

const Target* find_target(const char* name) {
  for (const Target& t : kTargets)
    if (std::strcmp(t.name, name) == 0) return &t;
  return nullptr;
}

const Target& target() { return *g_current; }
void set_target(const Target* t) { g_current = t; }

std::unique_ptr<vpmm::Backend> make_backend(vpmm_status* st, bool exportable) {
  vpmm::BackendParams p;
  p.exportable = exportable;
#ifdef VPMM_HAVE_HIP
  if (g_current->kind == VPMM_BACKEND_HIP) vt::set_emulated_capacity(0);  // loads hip_emu, plugs host streams
#endif
  std::unique_ptr<vpmm::Backend> b = vpmm::make_backend(g_current->kind, p, st);
  if (!b || !g_current->fault_wrapped) return b;
  std::shared_ptr<vpmm::Backend> inner(std::move(b));
  return std::unique_ptr<vpmm::Backend>(new vpmm::FaultBackend(inner));
}

}  // namespace conformance
