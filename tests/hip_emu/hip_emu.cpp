// The emulated HIP runtime (see hip_emu.h): libamdhip64's VMM, stream, event,
// copy and host-memory entry points over memfd + mmap, with switchable ROCm
// behaviours and a checker of the backend's call discipline. Test-only.
//
// Model: a reservation is PROT_NONE anonymous VA; a handle is a memfd of its
// size; a mapping is the memfd mmapped MAP_SHARED|MAP_FIXED over the
// reservation (PROT_NONE until hipMemSetAccess, as on a GPU where an unset
// range faults); an unmap puts PROT_NONE anonymous VA back. Device bytes are
// counted per handle, from hipMemCreate until the handle is released, has no
// mapping and (7.2 behaviour) no VA range still holding it.
//
// Compiled against the same HIP headers as the backend, so every exported
// signature is checked against the real declarations by the compiler.
#include <hip/hip_runtime_api.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>

#include "hip_emu.h"

namespace {

constexpr uint64_t kDefaultAlign = 2ull << 20;  // alignment 0: what ROCm returns in practice
constexpr int kAttrVmm = 89;                     // hipDeviceAttributeVirtualMemoryManagementSupported

struct Config {
  uint64_t version = 60241134;
  uint64_t devices = 1;
  uint64_t vmm_attr = 1;
  uint64_t granularity = 4096;
  uint64_t max_create = 0;
  uint64_t capacity = 1ull << 30;
  uint64_t strict_chunks = 1;
  uint64_t hold_until_va_free = 0;
  uint64_t reserve_null = 0;
  uint64_t align_fail = 0;
  uint64_t no_host_register = 0;
};

struct NamedField {
  const char* name;
  uint64_t Config::*field;
};
constexpr NamedField kFields[] = {
    {"VERSION", &Config::version},
    {"DEVICES", &Config::devices},
    {"VMM_ATTR", &Config::vmm_attr},
    {"GRANULARITY", &Config::granularity},
    {"MAX_CREATE", &Config::max_create},
    {"CAPACITY", &Config::capacity},
    {"STRICT_CHUNKS", &Config::strict_chunks},
    {"HOLD_UNTIL_VA_FREE", &Config::hold_until_va_free},
    {"RESERVE_NULL", &Config::reserve_null},
    {"ALIGN_FAIL", &Config::align_fail},
    {"NO_HOST_REGISTER", &Config::no_host_register},
};

struct Handle {
  int fd;
  uint64_t size;
  uint32_t maps = 0;
  uint32_t va_holds = 0;  // 7.2: unmapped ranges whose VA still holds the memory
  bool released = false;
};
struct Mapping {
  uint64_t size;
  Handle* h;
  bool access = false;
};
struct Hold {
  uint64_t size;
  Handle* h;
};
struct Event {
  uint64_t host = 0;
  bool recorded = false;
};

struct Counters {
  uint64_t creates = 0, maps = 0, set_access = 0, unmaps = 0, address_frees = 0,
           address_reserves = 0, max_span = 0;
};

std::mutex g_mu;
Config g_cfg;
bool g_loaded = false;
hip_emu_stream_ops g_ops;
bool g_have_ops = false;
uint64_t g_used = 0;
Counters g_count;
std::set<Handle*> g_handles;
std::map<uint64_t, Mapping> g_maps;            // va -> mapping
std::map<uint64_t, uint64_t> g_reserved;       // va -> size of a reserved piece
std::multimap<uint64_t, Hold> g_holds;         // 7.2: va -> memory the VA still holds
// VA given back with hipMemAddressFree: still PROT_NONE-mapped in this
// process, owned by the "runtime" and handed out again only to a reservation
// that asks for that address. A GPU's VA is managed by ROCr, not by the
// process's mmap, so the CPU's malloc and thread stacks never land in a
// range freed for a moment (the ROCm 7.2 workaround frees and re-reserves).
std::map<uint64_t, uint64_t> g_free_va;
std::set<Event*> g_events;
std::set<void*> g_sync_streams;                // streams without ops
std::map<void*, uint64_t> g_host_registered;   // hipHostRegister
std::map<void*, uint64_t> g_host_alloc;        // hipHostMalloc
thread_local int t_device = 0;

[[noreturn]] void discipline(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void discipline(const char* fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  std::fprintf(stderr, "hip_emu: DISCIPLINE: %s\n", msg);
  for (const auto& r : g_reserved)  // the state, for the report
    std::fprintf(stderr, "hip_emu:   reserved 0x%llx + %llu\n", static_cast<unsigned long long>(r.first),
                 static_cast<unsigned long long>(r.second));
  std::fflush(stderr);
  std::abort();
}

void load_env_locked() {
  if (g_loaded) return;
  g_loaded = true;
  for (const NamedField& f : kFields) {
    char name[64];
    std::snprintf(name, sizeof name, "VPMM_HIP_EMU_%s", f.name);
    if (const char* v = std::getenv(name)) g_cfg.*f.field = std::strtoull(v, nullptr, 0);
  }
}

// Every entry point starts with this: the environment, then the lock.
struct Locked {
  std::unique_lock<std::mutex> lk{g_mu};
  Locked() { load_env_locked(); }
};

uint64_t u64(const void* p) { return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(p)); }
void* vp(uint64_t v) { return reinterpret_cast<void*>(static_cast<uintptr_t>(v)); }

// The allocation properties, read in the layout of the emulated version.
bool prop_ok(const hipMemAllocationProp* prop) {
  if (prop == nullptr) return false;
  int type = 0, loc_type = 0, id = -1;
  if (g_cfg.version >= 60000000) {
    struct V6 {
      hipMemAllocationType type;
      hipMemAllocationHandleType requestedHandleType;
      hipMemLocation location;
      void* win32HandleMetaData;
      unsigned char flags[4];
    } v;
    std::memcpy(&v, prop, sizeof v);
    type = v.type, loc_type = v.location.type, id = v.location.id;
  } else {
    type = prop->type, loc_type = prop->location.type, id = prop->location.id;
  }
  return type == hipMemAllocationTypePinned && loc_type == hipMemLocationTypeDevice && id >= 0 &&
         static_cast<uint64_t>(id) < g_cfg.devices;
}

void maybe_destroy(Handle* h) {
  if (!h->released || h->maps != 0 || h->va_holds != 0) return;
  close(h->fd);
  g_used -= h->size;
  g_handles.erase(h);
  delete h;
}

// [va, va+size) lies wholly in freed runtime VA.
bool free_va_covers(uint64_t va, uint64_t size) {
  uint64_t cur = va;
  auto it = g_free_va.upper_bound(cur);
  if (it == g_free_va.begin()) return false;
  --it;
  while (cur < va + size) {
    if (it == g_free_va.end() || it->first > cur || it->first + it->second <= cur) return false;
    cur = it->first + it->second;
    ++it;
  }
  return true;
}

// Takes [va, va+size) out of the freed runtime VA (it must be covered).
void free_va_take(uint64_t va, uint64_t size) {
  auto it = g_free_va.upper_bound(va);
  --it;
  while (it != g_free_va.end() && it->first < va + size) {
    const uint64_t s = it->first, e = it->first + it->second;
    it = g_free_va.erase(it);
    if (s < va) g_free_va[s] = va - s;
    if (e > va + size) g_free_va[va + size] = e - (va + size);
  }
}

// The reserved piece holding [va, va+size), or end().
std::map<uint64_t, uint64_t>::iterator piece_of(uint64_t va, uint64_t size) {
  auto it = g_reserved.upper_bound(va);
  if (it == g_reserved.begin()) return g_reserved.end();
  --it;
  if (va >= it->first && va + size <= it->first + it->second) return it;
  return g_reserved.end();
}

bool overlaps_mapping(uint64_t va, uint64_t size) {
  auto it = g_maps.lower_bound(va);
  if (it != g_maps.end() && it->first < va + size) return true;
  if (it != g_maps.begin()) {
    --it;
    if (it->first + it->second.size > va) return true;
  }
  return false;
}

// The mappings exactly covering [va, va+size) in order; 0 when they do not.
size_t whole_run(uint64_t va, uint64_t size) {
  size_t n = 0;
  uint64_t cur = va;
  auto it = g_maps.find(va);
  while (cur < va + size) {
    if (it == g_maps.end() || it->first != cur || cur + it->second.size > va + size) return 0;
    cur += it->second.size;
    ++n;
    ++it;
  }
  return n;
}

// [va, va+size) lies in mappings with access set.
bool accessible(uint64_t va, uint64_t size) {
  uint64_t cur = va;
  while (cur < va + size) {
    auto it = g_maps.upper_bound(cur);
    if (it == g_maps.begin()) return false;
    --it;
    if (cur >= it->first + it->second.size || !it->second.access) return false;
    cur = it->first + it->second.size;
  }
  return true;
}

struct Copy {
  void* dst;
  const void* src;
  size_t n;
};
void run_copy(void* p) {
  Copy* c = static_cast<Copy*>(p);
  std::memcpy(c->dst, c->src, c->n);
  delete c;
}

hipError_t copy(void* dst, const void* src, size_t n, hipStream_t s) {
  Copy* c = new Copy{dst, src, n};
  if (g_have_ops) {
    if (g_ops.submit(s, run_copy, c) != 0) {
      delete c;
      return hipErrorInvalidHandle;
    }
    return hipSuccess;
  }
  if (s != nullptr && !g_sync_streams.count(s)) discipline("copy on unknown stream %p", static_cast<void*>(s));
  run_copy(c);
  return hipSuccess;
}

}  // namespace

extern "C" {

// ---- control (hip_emu.h) -----------------------------------------------------

void hip_emu_set_stream_ops(const hip_emu_stream_ops* ops) {
  Locked l;
  g_have_ops = ops != nullptr;
  if (ops) g_ops = *ops;
}

int hip_emu_set(const char* name, uint64_t value) {
  Locked l;
  for (const NamedField& f : kFields)
    if (name && std::strcmp(name, f.name) == 0) {
      g_cfg.*f.field = value;
      return 0;
    }
  return -1;
}

uint64_t hip_emu_get(const char* name) {
  Locked l;
  if (!name) return UINT64_MAX;
  for (const NamedField& f : kFields)
    if (std::strcmp(name, f.name) == 0) return g_cfg.*f.field;
  uint64_t held = 0;
  for (const auto& h : g_holds) held += h.second.size;
  const struct {
    const char* n;
    uint64_t v;
  } vals[] = {{"USED", g_used},
              {"HANDLES", g_handles.size()},
              {"MAPPINGS", g_maps.size()},
              {"RESERVATIONS", g_reserved.size()},
              {"HELD_BY_VA", held},
              {"CREATES", g_count.creates},
              {"MAPS", g_count.maps},
              {"SET_ACCESS", g_count.set_access},
              {"UNMAPS", g_count.unmaps},
              {"ADDRESS_FREES", g_count.address_frees},
              {"ADDRESS_RESERVES", g_count.address_reserves},
              {"MAX_SET_ACCESS_SPAN", g_count.max_span}};
  for (const auto& v : vals)
    if (std::strcmp(name, v.n) == 0) return v.v;
  return UINT64_MAX;
}

void hip_emu_reset_counters(void) {
  Locked l;
  g_count = Counters{};
}

// ---- device and version ------------------------------------------------------

hipError_t hipRuntimeGetVersion(int* v) {
  Locked l;
  if (!v) return hipErrorInvalidValue;
  *v = static_cast<int>(g_cfg.version);
  return hipSuccess;
}

hipError_t hipGetDeviceCount(int* count) {
  Locked l;
  if (!count) return hipErrorInvalidValue;
  *count = static_cast<int>(g_cfg.devices);
  return g_cfg.devices ? hipSuccess : hipErrorNoDevice;
}

hipError_t hipSetDevice(int d) {
  Locked l;
  if (d < 0 || static_cast<uint64_t>(d) >= g_cfg.devices) return hipErrorInvalidDevice;
  t_device = d;
  return hipSuccess;
}

hipError_t hipGetDevice(int* d) {
  Locked l;
  if (!d) return hipErrorInvalidValue;
  if (g_cfg.devices == 0) return hipErrorNoDevice;
  *d = t_device;
  return hipSuccess;
}

hipError_t hipDeviceGetAttribute(int* v, hipDeviceAttribute_t attr, int d) {
  Locked l;
  if (!v || d < 0 || static_cast<uint64_t>(d) >= g_cfg.devices) return hipErrorInvalidValue;
  if (static_cast<int>(attr) == kAttrVmm && g_cfg.version < 60000000)
    discipline("hipDeviceGetAttribute(89) asked of ROCm 5.x, where 89 is another attribute");
  *v = static_cast<int>(attr) == kAttrVmm ? static_cast<int>(g_cfg.vmm_attr) : 0;
  return hipSuccess;
}

hipError_t hipDeviceSynchronize(void) { return hipSuccess; }  // streams are synchronised by their events

const char* hipGetErrorName(hipError_t e) {
  switch (e) {
    case hipSuccess: return "hipSuccess";
    case hipErrorInvalidValue: return "hipErrorInvalidValue";
    case hipErrorOutOfMemory: return "hipErrorOutOfMemory";
    case hipErrorNoDevice: return "hipErrorNoDevice";
    case hipErrorInvalidDevice: return "hipErrorInvalidDevice";
    case hipErrorInvalidHandle: return "hipErrorInvalidHandle";
    case hipErrorNotReady: return "hipErrorNotReady";
    case hipErrorNotSupported: return "hipErrorNotSupported";
    default: return "hipErrorUnknown";
  }
}
const char* hipGetErrorString(hipError_t e) {
  switch (e) {
    case hipSuccess: return "no error";
    case hipErrorInvalidValue: return "invalid argument";
    case hipErrorOutOfMemory: return "out of memory";
    case hipErrorNoDevice: return "no ROCm-capable device is detected";
    case hipErrorInvalidDevice: return "invalid device ordinal";
    case hipErrorInvalidHandle: return "invalid resource handle";
    case hipErrorNotReady: return "device not ready";
    case hipErrorNotSupported: return "operation not supported";
    default: return "unknown error";
  }
}

// ---- virtual memory -----------------------------------------------------------

hipError_t hipMemGetAllocationGranularity(size_t* g, const hipMemAllocationProp* prop,
                                          hipMemAllocationGranularity_flags) {
  Locked l;
  if (!g || !prop_ok(prop)) return hipErrorInvalidValue;
  *g = g_cfg.granularity;
  return hipSuccess;
}

hipError_t hipMemCreate(hipMemGenericAllocationHandle_t* out, size_t size,
                        const hipMemAllocationProp* prop, unsigned long long flags) {
  Locked l;
  if (!out || flags != 0 || !prop_ok(prop)) return hipErrorInvalidValue;
  if (size == 0 || size % g_cfg.granularity != 0) return hipErrorInvalidValue;
  if (g_cfg.max_create && size > g_cfg.max_create) return hipErrorOutOfMemory;
  if (g_used + size > g_cfg.capacity) return hipErrorOutOfMemory;
  int fd = memfd_create("hip_emu", MFD_CLOEXEC);
  if (fd < 0) return hipErrorOutOfMemory;
  if (ftruncate(fd, static_cast<off_t>(size)) != 0) {
    close(fd);
    return hipErrorOutOfMemory;
  }
  Handle* h = new Handle{fd, size};
  g_handles.insert(h);
  g_used += size;
  ++g_count.creates;
  *out = reinterpret_cast<hipMemGenericAllocationHandle_t>(h);
  return hipSuccess;
}

hipError_t hipMemRelease(hipMemGenericAllocationHandle_t handle) {
  Locked l;
  Handle* h = reinterpret_cast<Handle*>(handle);
  if (!g_handles.count(h) || h->released) discipline("hipMemRelease(%p): not a live handle", static_cast<void*>(h));
  if (h->maps != 0)
    discipline("hipMemRelease(%p) while mapped %u time(s): ROCm cannot free the VA afterwards "
               "(ROCR-Runtime#257); unmap first",
               static_cast<void*>(h), h->maps);
  h->released = true;
  maybe_destroy(h);
  return hipSuccess;
}

hipError_t hipMemAddressReserve(void** ptr, size_t size, size_t alignment, void* addr,
                                unsigned long long flags) {
  Locked l;
  if (!ptr || flags != 0) return hipErrorInvalidValue;
  ++g_count.address_reserves;
  if (g_cfg.reserve_null) {  // ROCm <= 6.0: virtualAlloc() is a stub
    *ptr = nullptr;
    return hipSuccess;
  }
  if (size == 0 || size % g_cfg.granularity != 0) return hipErrorMemoryAllocation;
  if (g_cfg.align_fail && alignment != 0) return hipErrorOutOfMemory;
  const uint64_t align = alignment ? alignment : kDefaultAlign;
  if ((align & (align - 1)) != 0) return hipErrorInvalidValue;
  void* p = MAP_FAILED;
  if (addr != nullptr && u64(addr) % g_cfg.granularity == 0) {
    if (free_va_covers(u64(addr), size)) {  // runtime VA freed before: still ours
      free_va_take(u64(addr), size);
      p = addr;
    } else {
      p = mmap(addr, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
      if (p != MAP_FAILED && p != addr) {  // old kernels treat the flag as a hint
        munmap(p, size);
        p = MAP_FAILED;
      }
    }
  }
  if (p == MAP_FAILED) {
    void* big = mmap(nullptr, size + align, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (big == MAP_FAILED) return hipErrorMemoryAllocation;
    const uint64_t b = u64(big);
    const uint64_t a = (b + align - 1) / align * align;
    if (a > b) munmap(big, a - b);
    if (b + size + align > a + size) munmap(vp(a + size), b + size + align - (a + size));
    p = vp(a);
  }
  g_reserved[u64(p)] = size;
  *ptr = p;
  return hipSuccess;
}

hipError_t hipMemAddressFree(void* ptr, size_t size) {
  Locked l;
  const uint64_t va = u64(ptr);
  auto it = piece_of(va, size);
  if (it == g_reserved.end())
    discipline("hipMemAddressFree(%p, %zu): not inside one reservation", ptr, size);
  if (overlaps_mapping(va, size))
    discipline("hipMemAddressFree(%p, %zu) with live mappings inside (ROCR-Runtime#285)", ptr, size);
  ++g_count.address_frees;
  // The 7.2 behaviour: freeing the VA is what lets the memory go.
  for (auto h = g_holds.lower_bound(va); h != g_holds.end() && h->first < va + size;) {
    Handle* hd = h->second.h;
    h = g_holds.erase(h);
    --hd->va_holds;
    maybe_destroy(hd);
  }
  const uint64_t start = it->first, end = it->first + it->second;
  g_reserved.erase(it);
  if (start < va) g_reserved[start] = va - start;
  if (va + size < end) g_reserved[va + size] = end - (va + size);
  g_free_va[va] = size;  // stays PROT_NONE-mapped: see g_free_va
  return hipSuccess;
}

hipError_t hipMemMap(void* ptr, size_t size, size_t offset, hipMemGenericAllocationHandle_t handle,
                     unsigned long long flags) {
  Locked l;
  Handle* h = reinterpret_cast<Handle*>(handle);
  if (!g_handles.count(h) || h->released) discipline("hipMemMap(%p): handle %p is not live", ptr, static_cast<void*>(h));
  if (offset != 0 || flags != 0) return hipErrorInvalidValue;  // clr: offset must be 0
  if (size != h->size) return hipErrorInvalidValue;            // a handle maps whole
  const uint64_t va = u64(ptr);
  if (va % g_cfg.granularity != 0) return hipErrorInvalidValue;
  if (piece_of(va, size) == g_reserved.end())
    discipline("hipMemMap(%p, %zu): not inside one reservation", ptr, size);
  if (overlaps_mapping(va, size)) discipline("hipMemMap(%p, %zu) over a live mapping", ptr, size);
  if (mmap(ptr, size, PROT_NONE, MAP_SHARED | MAP_FIXED, h->fd, 0) == MAP_FAILED) return hipErrorOutOfMemory;
  g_maps[va] = Mapping{size, h};
  ++h->maps;
  ++g_count.maps;
  return hipSuccess;
}

hipError_t hipMemSetAccess(void* ptr, size_t size, const hipMemAccessDesc* desc, size_t count) {
  Locked l;
  if (!desc || count < 1) return hipErrorInvalidValue;
  for (size_t i = 0; i < count; ++i)
    if (desc[i].location.type != hipMemLocationTypeDevice || desc[i].location.id < 0 ||
        static_cast<uint64_t>(desc[i].location.id) >= g_cfg.devices ||
        desc[i].flags != hipMemAccessFlagsProtReadWrite)
      return hipErrorInvalidValue;
  const uint64_t va = u64(ptr);
  const size_t n = whole_run(va, size);
  if (n == 0) return hipErrorInvalidValue;  // coverage must start at a mapping and end at one
  if (g_cfg.strict_chunks && n > 1) return hipErrorInvalidValue;  // rocm-systems#2516
  ++g_count.set_access;
  if (n > g_count.max_span) g_count.max_span = n;
  for (auto it = g_maps.find(va); it != g_maps.end() && it->first < va + size; ++it) {
    if (mprotect(vp(it->first), it->second.size, PROT_READ | PROT_WRITE) != 0) return hipErrorInvalidValue;
    it->second.access = true;
  }
  return hipSuccess;
}

hipError_t hipMemUnmap(void* ptr, size_t size) {
  Locked l;
  const uint64_t va = u64(ptr);
  const size_t n = whole_run(va, size);
  if (n == 0) discipline("hipMemUnmap(%p, %zu): not exactly whole mappings", ptr, size);
  if (g_cfg.strict_chunks && n > 1) return hipErrorInvalidValue;  // ROCR-Runtime#285
  for (auto it = g_maps.find(va); it != g_maps.end() && it->first < va + size;) {
    if (mmap(vp(it->first), it->second.size, PROT_NONE,
             MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0) == MAP_FAILED)
      discipline("emulator: cannot restore reserved VA at 0x%llx", static_cast<unsigned long long>(it->first));
    Handle* h = it->second.h;
    --h->maps;
    if (g_cfg.hold_until_va_free) {
      g_holds.emplace(it->first, Hold{it->second.size, h});
      ++h->va_holds;
    }
    it = g_maps.erase(it);
    maybe_destroy(h);
  }
  ++g_count.unmaps;
  return hipSuccess;
}

hipError_t hipMemGetInfo(size_t* free_bytes, size_t* total) {
  Locked l;
  if (!free_bytes || !total) return hipErrorInvalidValue;
  *free_bytes = g_used < g_cfg.capacity ? g_cfg.capacity - g_used : 0;
  *total = g_cfg.capacity;
  return hipSuccess;
}

// ---- streams and events --------------------------------------------------------

hipError_t hipStreamCreateWithFlags(hipStream_t* s, unsigned int) {
  Locked l;
  if (!s) return hipErrorInvalidValue;
  if (g_have_ops) {
    void* p = nullptr;
    if (g_ops.stream_create(&p) != 0) return hipErrorOutOfMemory;
    *s = static_cast<hipStream_t>(p);
    return hipSuccess;
  }
  void* p = new char(0);
  g_sync_streams.insert(p);
  *s = static_cast<hipStream_t>(p);
  return hipSuccess;
}

hipError_t hipStreamDestroy(hipStream_t s) {
  std::unique_lock<std::mutex> lk(g_mu);
  if (g_have_ops) {
    hip_emu_stream_ops ops = g_ops;
    lk.unlock();  // destroy drains the stream, whose copies take the lock
    return ops.stream_destroy(s) == 0 ? hipSuccess : hipErrorInvalidHandle;
  }
  if (!g_sync_streams.erase(s)) discipline("hipStreamDestroy(%p): unknown stream", static_cast<void*>(s));
  delete static_cast<char*>(static_cast<void*>(s));
  return hipSuccess;
}

hipError_t hipStreamSynchronize(hipStream_t s) {
  std::unique_lock<std::mutex> lk(g_mu);
  if (!g_have_ops) return hipSuccess;
  hip_emu_stream_ops ops = g_ops;
  lk.unlock();
  return ops.stream_synchronize(s) == 0 ? hipSuccess : hipErrorInvalidValue;
}

hipError_t hipEventCreateWithFlags(hipEvent_t* e, unsigned) {
  Locked l;
  if (!e) return hipErrorInvalidValue;
  Event* ev = new Event;
  g_events.insert(ev);
  *e = reinterpret_cast<hipEvent_t>(ev);
  return hipSuccess;
}

hipError_t hipEventRecord(hipEvent_t e, hipStream_t s) {
  Locked l;
  Event* ev = reinterpret_cast<Event*>(e);
  if (!g_events.count(ev)) discipline("hipEventRecord(%p): unknown event", static_cast<void*>(ev));
  if (g_have_ops) {
    uint64_t h = 0;
    if (g_ops.event_record(s, &h) != 0) return hipErrorInvalidHandle;
    if (ev->host) g_ops.event_destroy(ev->host);
    ev->host = h;
  } else if (s != nullptr && !g_sync_streams.count(s)) {
    return hipErrorInvalidHandle;
  }
  ev->recorded = true;
  return hipSuccess;
}

hipError_t hipEventQuery(hipEvent_t e) {
  Locked l;
  Event* ev = reinterpret_cast<Event*>(e);
  if (!g_events.count(ev)) discipline("hipEventQuery(%p): unknown event", static_cast<void*>(ev));
  if (!ev->host) return hipSuccess;
  int done = 0;
  if (g_ops.event_query(ev->host, &done) != 0) return hipErrorInvalidHandle;
  return done ? hipSuccess : hipErrorNotReady;
}

hipError_t hipEventSynchronize(hipEvent_t e) {
  std::unique_lock<std::mutex> lk(g_mu);
  Event* ev = reinterpret_cast<Event*>(e);
  if (!g_events.count(ev)) discipline("hipEventSynchronize(%p): unknown event", static_cast<void*>(ev));
  if (!ev->host) return hipSuccess;
  const uint64_t h = ev->host;
  hip_emu_stream_ops ops = g_ops;
  lk.unlock();  // the work being waited for may need the lock (copies)
  return ops.event_sync(h) == 0 ? hipSuccess : hipErrorInvalidHandle;
}

hipError_t hipEventDestroy(hipEvent_t e) {
  Locked l;
  Event* ev = reinterpret_cast<Event*>(e);
  if (!g_events.erase(ev)) discipline("hipEventDestroy(%p): unknown event", static_cast<void*>(ev));
  if (ev->host) g_ops.event_destroy(ev->host);
  delete ev;
  return hipSuccess;
}

hipError_t hipStreamWaitEvent(hipStream_t s, hipEvent_t e, unsigned int flags) {
  Locked l;
  Event* ev = reinterpret_cast<Event*>(e);
  if (!g_events.count(ev)) discipline("hipStreamWaitEvent: unknown event %p", static_cast<void*>(ev));
  if (flags != 0) return hipErrorInvalidValue;
  if (!ev->host) return hipSuccess;
  return g_ops.stream_wait_event(s, ev->host) == 0 ? hipSuccess : hipErrorInvalidHandle;
}

// ---- copies and host memory -------------------------------------------------------

hipError_t hipMemcpyDtoHAsync(void* dst, hipDeviceptr_t src, size_t n, hipStream_t s) {
  std::unique_lock<std::mutex> lk(g_mu);
  load_env_locked();
  if (!dst || !accessible(u64(src), n)) return hipErrorInvalidValue;
  if (piece_of(u64(src), n) == g_reserved.end()) return hipErrorInvalidValue;  // intel/llvm#22671
  lk.unlock();  // a copy that runs at once must not hold the lock (it takes none)
  return copy(dst, src, n, s);
}

hipError_t hipMemcpyHtoDAsync(hipDeviceptr_t dst, void* src, size_t n, hipStream_t s) {
  std::unique_lock<std::mutex> lk(g_mu);
  load_env_locked();
  if (!src || !accessible(u64(dst), n)) return hipErrorInvalidValue;
  if (piece_of(u64(dst), n) == g_reserved.end()) return hipErrorInvalidValue;  // intel/llvm#22671
  lk.unlock();
  return copy(dst, src, n, s);
}

hipError_t hipHostRegister(void* p, size_t n, unsigned int) {
  Locked l;
  if (g_cfg.no_host_register) return hipErrorNotSupported;
  if (!p || n == 0 || g_host_registered.count(p)) return hipErrorInvalidValue;
  g_host_registered[p] = n;
  return hipSuccess;
}

hipError_t hipHostUnregister(void* p) {
  Locked l;
  if (!g_host_registered.erase(p)) discipline("hipHostUnregister(%p): not registered", p);
  return hipSuccess;
}

hipError_t hipHostMalloc(void** p, size_t n, unsigned int) {
  Locked l;
  if (!p || n == 0) return hipErrorInvalidValue;
  void* m = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return hipErrorOutOfMemory;
  g_host_alloc[m] = n;
  *p = m;
  return hipSuccess;
}

hipError_t hipHostFree(void* p) {
  Locked l;
  auto it = g_host_alloc.find(p);
  if (it == g_host_alloc.end()) discipline("hipHostFree(%p): not from hipHostMalloc", p);
  munmap(p, it->second);
  g_host_alloc.erase(it);
  return hipSuccess;
}

}  // extern "C"
