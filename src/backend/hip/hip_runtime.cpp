// Loads the HIP runtime table (see hip_runtime.hpp) exactly once.
//
// Strategy:
//  1. VPMM_HIP_LIBRARY set and non-empty: dlopen exactly that (a path, e.g.
//     the test emulator or a ROCm install outside the loader path, or a
//     soname). Nothing else is tried, so a typo is reported, not papered over.
//  2. Else dlopen("libamdhip64.so.7"), ".so.6", ".so.5" in that order
//     (RTLD_NOW | RTLD_LOCAL): the newest installed runtime wins, and only
//     versioned sonames, never the unversioned development symlink.
//  3. dlsym every entry by its exported name (HIP exports plain C names with
//     no _v2 renamings). A missing required entry makes the table unusable.
// No HIP call (not even hipGetDeviceCount) is made here.
#include "backend/hip/hip_runtime.hpp"

#include <dlfcn.h>
#include <link.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "backend/runtime_loading.hpp"
#include "common/settings.hpp"

namespace vpmm {
namespace hip {
namespace {

struct Entry {
  const char* name;
  void** slot;
  bool required;
};

Runtime g_rt;
const Runtime* g_table = nullptr;
char g_why[1024] = "";
std::once_flag g_once;

template <typename Fn>
void** slot(Fn* p) {
  return reinterpret_cast<void**>(p);
}

constexpr const char* kCandidates[] = {"libamdhip64.so.7", "libamdhip64.so.6", "libamdhip64.so.5"};

void* open_runtime(const char** opened) {
  if (!runtime_loading_possible("the HIP runtime (libamdhip64)", g_why, sizeof g_why)) return nullptr;
  const char* forced = setting_text(Setting::kHipLibrary);
  if (forced != nullptr && *forced != '\0') {
    *opened = forced;
    void* lib = dlopen(forced, RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      const char* e = dlerror();
      std::snprintf(g_why, sizeof g_why, "dlopen(VPMM_HIP_LIBRARY=\"%s\") failed: %s", forced,
                    e != nullptr ? e : "unknown error");
    }
    return lib;
  }
  size_t used = 0;
  for (const char* name : kCandidates) {
    *opened = name;
    if (void* lib = dlopen(name, RTLD_NOW | RTLD_LOCAL)) return lib;
    const char* e = dlerror();
    int n = std::snprintf(g_why + used, sizeof g_why - used, "%sdlopen(\"%s\"): %s",
                          used ? "; " : "no HIP runtime found (set VPMM_HIP_LIBRARY to its path): ",
                          name, e != nullptr ? e : "unknown error");
    if (n > 0) used = std::min(sizeof g_why - 1, used + static_cast<size_t>(n));
  }
  return nullptr;
}

void load() {
  const char* opened = "";
  void* lib = open_runtime(&opened);
  if (lib == nullptr) return;

  Runtime& r = g_rt;
  const Entry entries[] = {
      {"hipGetDeviceCount", slot(&r.GetDeviceCount), true},
      {"hipSetDevice", slot(&r.SetDevice), true},
      {"hipGetDevice", slot(&r.GetDevice), true},
      {"hipRuntimeGetVersion", slot(&r.RuntimeGetVersion), true},
      {"hipDeviceGetAttribute", slot(&r.DeviceGetAttribute), false},
      {"hipDeviceSynchronize", slot(&r.DeviceSynchronize), true},
      {"hipMemGetAllocationGranularity", slot(&r.MemGetAllocationGranularity), true},
      {"hipMemCreate", slot(&r.MemCreate), true},
      {"hipMemRelease", slot(&r.MemRelease), true},
      {"hipMemAddressReserve", slot(&r.MemAddressReserve), true},
      {"hipMemAddressFree", slot(&r.MemAddressFree), true},
      {"hipMemMap", slot(&r.MemMap), true},
      {"hipMemUnmap", slot(&r.MemUnmap), true},
      {"hipMemSetAccess", slot(&r.MemSetAccess), true},
      {"hipEventCreateWithFlags", slot(&r.EventCreateWithFlags), true},
      {"hipEventRecord", slot(&r.EventRecord), true},
      {"hipEventQuery", slot(&r.EventQuery), true},
      {"hipEventSynchronize", slot(&r.EventSynchronize), true},
      {"hipEventDestroy", slot(&r.EventDestroy), true},
      {"hipStreamWaitEvent", slot(&r.StreamWaitEvent), true},
      {"hipStreamSynchronize", slot(&r.StreamSynchronize), true},
      {"hipStreamCreateWithFlags", slot(&r.StreamCreateWithFlags), true},
      {"hipStreamDestroy", slot(&r.StreamDestroy), true},
      {"hipMemcpyDtoHAsync", slot(&r.MemcpyDtoHAsync), true},
      {"hipMemcpyHtoDAsync", slot(&r.MemcpyHtoDAsync), true},
      {"hipHostMalloc", slot(&r.HostMalloc), false},
      {"hipHostFree", slot(&r.HostFree), false},
      {"hipHostRegister", slot(&r.HostRegister), false},
      {"hipHostUnregister", slot(&r.HostUnregister), false},
      {"hipMemGetInfo", slot(&r.MemGetInfo), true},
      {"hipGetErrorName", slot(&r.GetErrorName), true},
      {"hipGetErrorString", slot(&r.GetErrorString), true},
      {"hipMemExportToShareableHandle", slot(&r.MemExportToShareableHandle), false},
      {"hipMemImportFromShareableHandle", slot(&r.MemImportFromShareableHandle), false},
      {"hipDeviceGetUuid", slot(&r.DeviceGetUuid), false},
  };
  for (const Entry& e : entries) {
    void* fn = dlsym(lib, e.name);
    if (fn == nullptr && e.required) {
      std::snprintf(g_why, sizeof g_why, "%s lacks %s: not a HIP runtime with the VMM API (ROCm 5.1+)",
                    opened, e.name);
      return;  // keep lib loaded: dlclose of a GPU runtime is unsafe
    }
    *e.slot = fn;
  }
  if ((r.HostMalloc == nullptr) != (r.HostFree == nullptr)) r.HostMalloc = nullptr, r.HostFree = nullptr;
  if ((r.HostRegister == nullptr) != (r.HostUnregister == nullptr))
    r.HostRegister = nullptr, r.HostUnregister = nullptr;

  // The file the loader picked (a soname resolves through the search path).
  std::snprintf(r.path, sizeof r.path, "%s", opened);
  struct link_map* lm = nullptr;
  if (dlinfo(lib, RTLD_DI_LINKMAP, &lm) == 0 && lm != nullptr && lm->l_name != nullptr &&
      lm->l_name[0] != '\0')
    std::snprintf(r.path, sizeof r.path, "%s", lm->l_name);
  g_table = &g_rt;
}

}  // namespace

const Runtime* runtime(const char** why) {
  std::call_once(g_once, load);
  if (g_table == nullptr && why != nullptr) *why = g_why;
  return g_table;
}

const char* format_error(hipError_t r, char* buf, size_t capacity) {
  if (buf == nullptr || capacity == 0) return "";
  const Runtime* rt = runtime();
  const char* name = rt != nullptr ? rt->GetErrorName(r) : nullptr;
  const char* text = rt != nullptr ? rt->GetErrorString(r) : nullptr;
  if (name != nullptr)
    std::snprintf(buf, capacity, "%s (%s)", name, text != nullptr ? text : "no description");
  else
    std::snprintf(buf, capacity, "hipError_t %d", static_cast<int>(r));
  return buf;
}

}  // namespace hip
}  // namespace vpmm
