// libvpmm_history.so's recorder (vpmm_history.h): the PyTorch hook entry
// points that record, the ring of events, the string table and the calling
// thread's scope. Off, a hook costs one relaxed load of `g_on` on top of
// vpmm_torch_malloc/_free; on, an event is appended under one mutex, and the
// default pool's stats are read around a malloc (vpmm_pool_stats, which
// takes the pool's lock briefly) for its mapped and remapped bytes. The
// context callback runs before any lock is taken: it may call into Python.
#include <time.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <deque>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "history/vpmm_history.h"
#include "vpmm.h"

namespace {

std::atomic<bool> g_on{false};
std::atomic<vpmm_history_context_fn> g_context{nullptr};

// The ring: `size` events from `head` on (wrapping), oldest first.
struct Ring {
  std::mutex mu;
  std::vector<vpmm_history_event> events;
  size_t head = 0, size = 0;
  uint64_t dropped = 0, seq = 0;
};
Ring g_ring;

struct Strings {
  std::mutex mu;
  std::deque<std::string> by_id;  // id i at i - 1; deque: entries never move
  std::unordered_map<std::string, uint32_t> ids;
};
Strings g_strings;

thread_local std::vector<uint32_t> t_scopes;

uint64_t now_us() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000u + static_cast<uint64_t>(ts.tv_nsec) / 1000u;
}

void append(vpmm_history_event e) {
  std::lock_guard<std::mutex> lock(g_ring.mu);
  if (!g_on.load(std::memory_order_relaxed) || g_ring.events.empty()) return;
  e.seq = ++g_ring.seq;
  const size_t cap = g_ring.events.size();
  if (g_ring.size < cap) {
    g_ring.events[(g_ring.head + g_ring.size) % cap] = e;
    ++g_ring.size;
  } else {
    g_ring.events[g_ring.head] = e;  // the oldest goes
    g_ring.head = (g_ring.head + 1) % cap;
    ++g_ring.dropped;
  }
}

// An event of the calling thread: its scope, the time and the context.
vpmm_history_event event_of(int32_t action, int device, uint64_t addr, uint64_t size, void* stream) {
  vpmm_history_event e;
  std::memset(&e, 0, sizeof e);
  e.action = action;
  e.device = device;
  e.scope = t_scopes.empty() ? 0 : t_scopes.back();
  e.addr = addr;
  e.size = size;
  e.stream = reinterpret_cast<uintptr_t>(stream);
  e.time_us = now_us();
  if (vpmm_history_context_fn fn = g_context.load(std::memory_order_acquire)) e.context = fn();
  return e;
}

// The default pool's stats of `device`, zeroed when there is none yet.
vpmm_stats stats_of(int device) {
  vpmm_stats s;
  std::memset(&s, 0, sizeof s);
  s.struct_size = sizeof s;
  vpmm_pool* pool = nullptr;
  if (vpmm_default_pool(device, &pool) != VPMM_OK || vpmm_pool_stats(pool, &s) != VPMM_OK) {
    std::memset(&s, 0, sizeof s);
  }
  return s;
}

}  // namespace

extern "C" {

VPMM_API int32_t vpmm_history_start(uint64_t max_entries) {
  if (max_entries == 0 || max_entries > (uint64_t(1) << 40)) return -1;
  std::vector<vpmm_history_event> fresh;
  try {
    fresh.resize(static_cast<size_t>(max_entries));
  } catch (const std::bad_alloc&) {
    return -1;
  } catch (const std::length_error&) {
    return -1;
  }
  std::lock_guard<std::mutex> lock(g_ring.mu);
  g_ring.events.swap(fresh);
  g_ring.head = g_ring.size = 0;
  g_ring.dropped = g_ring.seq = 0;
  g_on.store(true, std::memory_order_relaxed);
  return 0;
}

VPMM_API void vpmm_history_stop(void) {
  std::lock_guard<std::mutex> lock(g_ring.mu);
  g_on.store(false, std::memory_order_relaxed);
}

VPMM_API int32_t vpmm_history_recording(void) { return g_on.load(std::memory_order_relaxed) ? 1 : 0; }

VPMM_API uint64_t vpmm_history_read(vpmm_history_event* buf, uint64_t capacity, uint64_t* dropped) {
  std::lock_guard<std::mutex> lock(g_ring.mu);
  const size_t cap = g_ring.events.size();
  for (uint64_t i = 0; buf && i < capacity && i < g_ring.size; ++i)
    buf[i] = g_ring.events[(g_ring.head + static_cast<size_t>(i)) % cap];
  if (dropped) *dropped = g_ring.dropped;
  return g_ring.size;
}

VPMM_API uint32_t vpmm_history_intern(const char* text) {
  if (!text) return 0;
  try {
    std::lock_guard<std::mutex> lock(g_strings.mu);
    auto it = g_strings.ids.find(text);
    if (it != g_strings.ids.end()) return it->second;
    g_strings.by_id.emplace_back(text);
    const uint32_t id = static_cast<uint32_t>(g_strings.by_id.size());
    g_strings.ids.emplace(g_strings.by_id.back(), id);
    return id;
  } catch (const std::bad_alloc&) {
    return 0;
  }
}

VPMM_API size_t vpmm_history_string(uint32_t id, char* buf, size_t capacity) {
  std::lock_guard<std::mutex> lock(g_strings.mu);
  if (id == 0 || id > g_strings.by_id.size()) return 0;
  const std::string& s = g_strings.by_id[id - 1];
  if (buf && capacity) {
    const size_t n = s.size() < capacity - 1 ? s.size() : capacity - 1;
    std::memcpy(buf, s.data(), n);
    buf[n] = '\0';
  }
  return s.size();
}

VPMM_API void vpmm_history_scope_push(uint32_t scope) {
  try {
    t_scopes.push_back(scope);
  } catch (const std::bad_alloc&) {
  }
}

VPMM_API void vpmm_history_scope_pop(void) {
  if (!t_scopes.empty()) t_scopes.pop_back();
}

VPMM_API void vpmm_history_set_context_fn(vpmm_history_context_fn fn) {
  g_context.store(fn, std::memory_order_release);
}

VPMM_API void vpmm_history_note(int32_t action, int32_t device, uint64_t addr, uint64_t size, uint64_t stream,
                                uint32_t note) {
  if (!g_on.load(std::memory_order_relaxed)) return;
  vpmm_history_event e;
  std::memset(&e, 0, sizeof e);
  e.action = action;
  e.device = device;
  e.addr = addr;
  e.size = size;
  e.stream = stream;
  e.note = note;
  e.time_us = now_us();
  e.mapped = stats_of(device).mapped_bytes;
  append(e);
}

VPMM_API void* vpmm_history_torch_malloc(ptrdiff_t size, int device, void* stream) {
  if (!g_on.load(std::memory_order_relaxed)) return vpmm_torch_malloc(size, device, stream);
  const uint64_t remapped_before = stats_of(device).bytes_remapped;
  void* p = vpmm_torch_malloc(size, device, stream);
  vpmm_history_event e = event_of(p ? VPMM_HISTORY_ALLOC : VPMM_HISTORY_OOM, device,
                                  reinterpret_cast<uintptr_t>(p), size > 0 ? static_cast<uint64_t>(size) : 0,
                                  stream);
  const vpmm_stats after = stats_of(device);
  e.mapped = after.mapped_bytes;
  e.remapped = after.bytes_remapped - remapped_before;
  append(e);
  return p;
}

VPMM_API void vpmm_history_torch_free(void* ptr, ptrdiff_t size, int device, void* stream) {
  // Recorded before the free: once freed, another thread's malloc may get
  // the same address, and its event must come after this one. (A free keeps
  // the memory mapped as a free region, so the mapped bytes are those of
  // before it.)
  if (g_on.load(std::memory_order_relaxed) && ptr) {
    vpmm_history_event e = event_of(VPMM_HISTORY_FREE, device, reinterpret_cast<uintptr_t>(ptr),
                                    size > 0 ? static_cast<uint64_t>(size) : 0, stream);
    e.mapped = stats_of(device).mapped_bytes;
    append(e);
  }
  vpmm_torch_free(ptr, size, device, stream);
}

}  // extern "C"
