// Which backend the pool suites run on. VPMM_TEST_BACKEND unset or "host":
// the host backend (memfd + mmap). "hip": the HIP backend over the emulated
// HIP runtime of tests/hip_emu (VPMM_HIP_LIBRARY points at it; meson's 'hip'
// suite sets both), so the same assertions check the HIP backend's
// behaviour without an AMD GPU.
//
// Over HIP the emulator's streams are the host streams of
// backend/host/host_streams.hpp (plugged in with hip_emu_set_stream_ops), so
// the tests that hold a stream with vpmm_host_stream_hold, launch host
// "kernels" on it and check that the pool waits for them, run unchanged:
// the HIP backend records hipEvents on those streams and the emulator turns
// them into host events. The emulator's device capacity is set from the
// config's host_capacity at each pool creation (one device, one pool at a
// time in these tests).
#pragma once

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "backend/backend.hpp"
#include "support/fault_backend.hpp"
#include "backend/host/host_streams.hpp"
#include "backend/registry.hpp"
#include "hip_emu/hip_emu.h"
#include "vpmm.h"

namespace vt {

inline bool testing_hip() {
  const char* v = std::getenv("VPMM_TEST_BACKEND");
  return v != nullptr && std::strcmp(v, "hip") == 0;
}

namespace detail {

inline int st_int(vpmm_status s) { return static_cast<int>(s); }

inline const hip_emu_stream_ops* host_stream_ops() {
  static const hip_emu_stream_ops ops = {
      [](void** out) {
        vpmm_stream s = nullptr;
        int r = st_int(vpmm::host::stream_create(&s));
        *out = s;
        return r;
      },
      [](void* s) { return st_int(vpmm::host::stream_destroy(static_cast<vpmm_stream>(s))); },
      [](void* s) {
        return st_int(vpmm::host::stream_synchronize(static_cast<vpmm_stream>(s), "hipStreamSynchronize"));
      },
      [](void* s, uint64_t* out) { return st_int(vpmm::host::event_record(static_cast<vpmm_stream>(s), out)); },
      [](uint64_t e, int* done) {
        bool d = false;
        int r = st_int(vpmm::host::event_query(e, &d));
        *done = d ? 1 : 0;
        return r;
      },
      [](uint64_t e) { return st_int(vpmm::host::event_destroy(e)); },
      [](uint64_t e) { return st_int(vpmm::host::event_sync(e)); },
      [](void* s, uint64_t e) { return st_int(vpmm::host::stream_wait_event(static_cast<vpmm_stream>(s), e)); },
      [](void* s, void (*fn)(void*), void* user) {
        return st_int(vpmm::host::stream_submit(static_cast<vpmm_stream>(s), fn, user, "hip copy"));
      },
  };
  return &ops;
}

// The emulator's control functions, found in the library the backend loads.
struct Emu {
  void (*set_stream_ops)(const hip_emu_stream_ops*) = nullptr;
  int (*set)(const char*, uint64_t) = nullptr;
  uint64_t (*get)(const char*) = nullptr;
};

inline const Emu& emu() {
  static const Emu e = [] {
    Emu x;
    const char* path = std::getenv("VPMM_HIP_LIBRARY");
    void* lib = path ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : nullptr;
    if (lib == nullptr) {
      std::fprintf(stderr, "VPMM_TEST_BACKEND=hip needs VPMM_HIP_LIBRARY=<the hip_emu library>: %s\n",
                   path ? dlerror() : "unset");
      std::exit(1);  // a suite must not pass by testing nothing
    }
    x.set_stream_ops = reinterpret_cast<void (*)(const hip_emu_stream_ops*)>(dlsym(lib, "hip_emu_set_stream_ops"));
    x.set = reinterpret_cast<int (*)(const char*, uint64_t)>(dlsym(lib, "hip_emu_set"));
    x.get = reinterpret_cast<uint64_t (*)(const char*)>(dlsym(lib, "hip_emu_get"));
    if (!x.set_stream_ops || !x.set || !x.get) {
      std::fprintf(stderr, "%s is not the hip_emu library (no hip_emu_* control functions)\n", path);
      std::exit(1);
    }
    x.set_stream_ops(host_stream_ops());
    return x;
  }();
  return e;
}

}  // namespace detail

// For a test of a host-backend-only fact: true (and says so on stdout, so the
// log shows what was not checked) when the suite runs over HIP.
inline bool host_only(const char* why) {
  if (!testing_hip()) return false;
  std::printf("  (not run over HIP: %s)\n", why);
  return true;
}

// The emulator's controls (only with testing_hip()).
inline int emu_set(const char* name, uint64_t v) { return detail::emu().set(name, v); }
inline uint64_t emu_get(const char* name) { return detail::emu().get(name); }

// The device the emulator pretends to have: host_capacity's meaning on host.
inline void set_emulated_capacity(uint64_t host_capacity) {
  emu_set("CAPACITY", host_capacity ? host_capacity : (1ull << 30));
}

// For a config the test meant for the host backend: the backend under test.
// Call after host_capacity is set (it becomes the emulated device's size).
inline void use_test_backend(vpmm_config* c) {
  if (!testing_hip()) {
    c->backend = VPMM_BACKEND_HOST;
    return;
  }
  c->backend = VPMM_BACKEND_HIP;
  set_emulated_capacity(c->host_capacity);
}

// The internal-API counterpart of vpmm::make_shared_host_backend.
inline std::shared_ptr<vpmm::Backend> make_shared_test_backend(const vpmm::BackendParams& p,
                                                               vpmm_status* st) {
  if (!testing_hip()) return vpmm::make_shared_host_backend(p, st);
  set_emulated_capacity(p.host_capacity);
  return std::shared_ptr<vpmm::Backend>(vpmm::make_backend(VPMM_BACKEND_HIP, p, st));
}

}  // namespace vt
