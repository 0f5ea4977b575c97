// The C API's contract, tested at the ABI: what vpmm.h ("Conventions") and
// docs/misuse.md promise for each misuse, bad input or hostile sequence.
// One program (test 'contract'), one file per behaviour:
//   handles.cpp        NULL and destroyed pools; handles never reused
//   pointers.cpp       frees and lookups of pointers the pool did not hand out
//   arguments.cpp      NULL outs, sizes, struct sizes of every growable struct
//   configuration.cpp  bad configurations, the environment, the backends
//   streams.cpp        unknown, held, retired and destroyed streams
//   tags_and_pause.cpp tags, scopes, flags, pause and resume
//   limits.cpp         reservations and limits
//   observability.cpp  dumps, layouts, status names, callbacks, views of state
// This header holds what they share: the pools they make, the checker of an
// error (expect_err), and the host "kernels" that keep a stream busy.
//
// Each error is checked as the contract states it: the status; a message
// in vpmm_last_error() on the same thread naming the call (cleared before
// the call, so a stale one cannot pass); out-parameters untouched; and,
// where a pool is given, the pool exactly as it was (stats and the full
// region dump, event bookkeeping aside: a failed malloc may still record the
// lazy events it looked at).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "check.hpp"
#include "common/status.hpp"
#include "pool_util.hpp"
#include "thread_state.hpp"
#include "vpmm_host_streams.h"

namespace ct {

constexpr uint64_t kPage = 64 << 10;
// An out-parameter's value before a call that must leave it alone.
inline void* const kSentinel = reinterpret_cast<void*>(0x5e47);
constexpr vpmm_status IA = VPMM_ERR_INVALID_ARGUMENT, OOM = VPMM_ERR_OUT_OF_MEMORY,
                      UP = VPMM_ERR_UNKNOWN_POINTER, WS = VPMM_ERR_WRONG_STATE;

// Unsets every variable vpmm_config_init reads, from the option table (never
// a copy). The process-wide settings stay: a run on the HIP emulator needs
// its VPMM_HIP_LIBRARY.
inline void clean_env() {
  for (uint32_t i = 0; i < vpmm_option_count(); ++i) {
    vpmm_option_info o;
    std::memset(&o, 0, sizeof o);
    o.struct_size = sizeof o;
    if (vpmm_option_get(i, &o) == VPMM_OK && o.env && o.kind != VPMM_OPTION_TEXT) unsetenv(o.env);
  }
}

// The pool a test needs, from a clean environment: by default a host pool
// of 64 KiB pages, 64-page VA chunks and 16 pages of capacity, so that
// "beyond capacity" and "beyond the chunk" are a few pages away.
struct PoolSpec {
  uint64_t va_pages = 64;
  uint64_t capacity = 16 * kPage;  // host_capacity: the host backend's memory
  uint64_t limit_pages = 0;        // memory_limit in pages; 0 = none
  uint64_t small_size = 0;         // 0 = the default (page_size / 2); 1 = no small objects
  bool any_backend = false;        // the suite's backend (test_backend.hpp), not always host

  PoolSpec& va(uint64_t pages) { va_pages = pages; return *this; }
  PoolSpec& host_memory(uint64_t bytes) { capacity = bytes; return *this; }
  PoolSpec& limit(uint64_t pages) { limit_pages = pages; return *this; }
  PoolSpec& small(uint64_t bytes) { small_size = bytes; return *this; }
  // Host, or HIP over the emulator when the 'hip' suite runs the program.
  PoolSpec& suite_backend() { any_backend = true; return *this; }

  vpmm_config config() const {
    clean_env();
    vpmm_config c;
    vpmm_config_init(&c);
    c.backend = VPMM_BACKEND_HOST;
    c.page_size = kPage;
    c.va_size = va_pages * kPage;
    c.host_capacity = capacity;
    c.memory_limit = limit_pages * kPage;
    c.small_size = small_size;
    if (any_backend) vt::use_test_backend(&c);
    return c;
  }
  vpmm_pool* make() const {
    vpmm_config c = config();
    vpmm_pool* p = nullptr;
    CHECK_OK(vpmm_pool_create(&c, &p));
    return p;
  }
};
inline vpmm_pool* make_pool() { return PoolSpec().make(); }
// A pool on the suite's backend (HIP over the emulator in the 'hip' suite)
// with room to spare: 16 MiB of memory.
inline PoolSpec suite_pool() { return PoolSpec().host_memory(16 << 20).suite_backend(); }
// The same with 256-page chunks, 64 MiB and a limit in pages (0 = none): for
// pause/resume, reservations and limits.
inline vpmm_pool* limited_pool(uint64_t limit_pages = 0) {
  return PoolSpec().va(256).host_memory(64 << 20).limit(limit_pages).suite_backend().make();
}
// A host pool of 512-page chunks and 64 MiB with a limit in pages (0 = none)
// and no small objects unless small_size asks for them: for the sequences a
// review found, which hold host streams.
inline vpmm_pool* host_pool(uint64_t limit_pages = 0, uint64_t small_size = 1) {
  return PoolSpec().va(512).host_memory(64ull << 20).limit(limit_pages).small(small_size).make();
}

inline vpmm_tag_stats tag_stats(vpmm_pool* p, const char* tag) {
  vpmm_tag_stats t;
  std::memset(&t, 0, sizeof t);
  t.struct_size = sizeof t;
  vpmm_pool_tag_stats(p, tag, &t);
  return t;
}

// --- a pool's state, before and after a failed call --------------------------

struct Snap {
  vpmm_stats st;
  std::vector<vpmm_region_info> regs;
};

inline Snap take(vpmm_pool* p) {
  Snap s;
  s.st = vt::stats(p);
  s.st.n_events_recorded = 0;  // lazy events may be recorded by a failed malloc
  s.st.n_stream_waits = 0;
  s.st.n_oom = 0;
  s.regs = vt::regions(p);
  return s;
}

// "" when a and b are the same state, else what differs.
inline std::string same(const Snap& a, const Snap& b) {
  if (std::memcmp(&a.st, &b.st, sizeof a.st) != 0) {
    std::string diff = "stats differ:";
    const uint64_t* x = reinterpret_cast<const uint64_t*>(&a.st);
    const uint64_t* y = reinterpret_cast<const uint64_t*>(&b.st);
    for (size_t i = 0; i < sizeof a.st / 8; ++i)
      if (x[i] != y[i])
        diff += " [" + vt::stat_name(i) + ": " + std::to_string(x[i]) + " -> " + std::to_string(y[i]) + "]";
    return diff;
  }
  if (a.regs.size() != b.regs.size())
    return "region count " + std::to_string(a.regs.size()) + " -> " + std::to_string(b.regs.size());
  for (size_t i = 0; i < a.regs.size(); ++i) {
    const vpmm_region_info &r = a.regs[i], &s = b.regs[i];
    if (r.va != s.va || r.size != s.size || r.kind != s.kind || r.chunk_offset != s.chunk_offset ||
        r.chunk != s.chunk || r.handles != s.handles || r.stream != s.stream || r.id != s.id ||
        r.requested != s.requested)
      return "region " + std::to_string(i) + " differs";
  }
  return "";
}

// --- the checker ----------------------------------------------------------------

// Runs f and checks it returned `want`. For an error, also: a message that
// contains `name` (the call, or another word the contract names) and `sub`
// when given, and, when `pool` is given, the pool unchanged. VPMM_OK needs no
// message.
template <class F>
void expect_status(const char* file, int line, const char* text, vpmm_pool* pool, vpmm_status want,
                   const char* name, const char* sub, F f) {
  Snap before;
  if (pool) before = take(pool);
  vpmm::fail(VPMM_OK, "%s", "");
  vpmm_status st = f();
  std::string msg = vpmm_last_error();
  std::vector<std::string> bad;
  if (st != want)
    bad.push_back(std::string("returned ") + vpmm_status_string(st) + ", wanted " + vpmm_status_string(want));
  if (want != VPMM_OK) {
    if (msg.empty()) bad.push_back("no message");
    if (name && msg.find(name) == std::string::npos) bad.push_back(std::string("message does not name ") + name);
    if (sub && msg.find(sub) == std::string::npos) bad.push_back(std::string("message lacks \"") + sub + "\"");
    if (pool) {
      std::string d = same(before, take(pool));
      if (!d.empty()) bad.push_back("pool changed: " + d);
    }
  }
  if (bad.empty()) return;
  ++vt::case_failures();
  std::printf("  %s:%d: %s\n", file, line, text);
  for (const std::string& b : bad) std::printf("    - %s\n", b.c_str());
  std::printf("    message: \"%s\"\n", msg.c_str());
}

}  // namespace ct

// EXPECT_ERR(pool, call, status, name): the error as the contract states it,
// the pool (nullptr: none to compare) unchanged.
#define EXPECT_ERR(pool, expr, want, name) \
  ct::expect_status(__FILE__, __LINE__, #expr, pool, want, name, nullptr, [&]() -> vpmm_status { return (expr); })
// The same, and the message contains `sub`.
#define EXPECT_ERR_MSG(pool, expr, want, name, sub) \
  ct::expect_status(__FILE__, __LINE__, #expr, pool, want, name, sub, [&]() -> vpmm_status { return (expr); })
// The call returned `want`; an error's message names `call` (no pool
// comparison: for sequences whose state the test checks itself).
#define EXPECT_STATUS(expr, want, call) \
  ct::expect_status(__FILE__, __LINE__, #expr, nullptr, want, call, nullptr, [&]() -> vpmm_status { return (expr); })

namespace ct {

// --- work on a held stream -----------------------------------------------------

// Work queued on a held stream: it reads and rewrites its block when the
// stream is released, so a block unmapped under it faults.
struct Kernel {
  unsigned char* block;
  uint64_t bytes;
  std::atomic<int> ran{0};
  bool saw_pattern = false;
};
inline void touch_block(void* user) {
  auto* k = static_cast<Kernel*>(user);
  k->saw_pattern = vt::verify(k->block, k->bytes, 7);
  std::memset(k->block, 0x5a, k->bytes);
  k->ran = 1;
}

// Releases held stream `s` from another thread once the thread that made
// this blocks, in the call after it that must wait for the stream's work
// (an observable wait: under load a delay could release first, and the
// wait would go untested), or once returned() says that call came back
// without blocking.
class ReleaseWhenBlocked {
 public:
  explicit ReleaseWhenBlocked(vpmm_stream s)
      : waiter_(vt::thread_id()), releaser_([this, s] {
          blocked_ = vt::wait_until_blocked_or(waiter_, returned_);
          vpmm_host_stream_release(s);
        }) {}
  ReleaseWhenBlocked(const ReleaseWhenBlocked&) = delete;
  ReleaseWhenBlocked& operator=(const ReleaseWhenBlocked&) = delete;
  ~ReleaseWhenBlocked() { returned(); }
  // Whether the call blocked before the release; call right after it.
  bool returned() {
    returned_ = true;
    if (releaser_.joinable()) releaser_.join();
    return blocked_;
  }

 private:
  std::atomic<pid_t> waiter_;
  std::atomic<bool> returned_{false};
  bool blocked_ = false;
  std::thread releaser_;
};

}  // namespace ct
