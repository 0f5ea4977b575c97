// The HIP backend's version-dependent decisions (see hip_backend_info.hpp).
#include "backend/hip/hip_backend_info.hpp"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "backend/hip/hip_runtime.hpp"
#include "common/settings.hpp"
#include "common/status.hpp"

namespace vpmm {
namespace hip {
namespace {

// ROCm 7.2: unmap + release frees nothing while the VA stays reserved
// (TMS#83, legacy-rocm-build#6021). Fixed by rocm-systems PR 4363; the first
// release with the fix is not known to us, so only 7.2.x is treated.
bool recycle_affected(int version) {
  return version >= make_version(7, 2) && version < make_version(7, 3);
}

}  // namespace

vpmm_status probe(uint64_t config_chunk, HipFacts* out) {
  HipFacts f;
  const char* why = nullptr;
  const Runtime* r = runtime(&why);
  if (r == nullptr)
    return fail(VPMM_ERR_UNSUPPORTED, "hip: the HIP runtime is not usable: %s", why ? why : "?");
  std::snprintf(f.path, sizeof f.path, "%s", r->path);
  hipError_t e = r->RuntimeGetVersion(&f.version);
  if (e != hipSuccess) {
    char err[160];
    return fail(VPMM_ERR_UNSUPPORTED, "hip: hipRuntimeGetVersion() failed in %s: %s", f.path,
                format_error(e, err, sizeof err));
  }

  if (config_chunk == VPMM_HANDLE_SIZE_UNLIMITED) {
    f.chunk_size = 0;
    f.chunk_forced = true;
  } else if (config_chunk != 0) {
    f.chunk_size = config_chunk;
    f.chunk_forced = true;
  } else {
    // TMS and vLLM chunk below 7.0 only ("ROCm 6.x has hipMemCreate bug ...
    // 7.0+ fixed", TMS csrc/macro.h).
    f.chunk_size = f.version < make_version(7, 0) ? kDefaultChunkSize : 0;
  }

  f.recycle_va = recycle_affected(f.version);
  if (const char* v = setting_text(Setting::kHipVaRecycle)) {
    AutoSwitch sw = AutoSwitch::kAuto;
    if (!parse_auto_switch(v, &sw))
      return fail(VPMM_ERR_INVALID_ARGUMENT,
                  "hip: VPMM_HIP_VA_RECYCLE=\"%s\" is not auto, on, off, 1 or 0", v);
    if (sw != AutoSwitch::kAuto) {
      f.recycle_va = sw == AutoSwitch::kOn;
      f.recycle_forced = true;
    }
  }
  if (const char* v = setting_text(Setting::kHipPageFloor)) {
    if (*v != '\0' && !parse_page_floor(v, &f.page_floor))
      return fail(VPMM_ERR_INVALID_ARGUMENT,
                  "hip: VPMM_HIP_PAGE_FLOOR=\"%s\" is not a power of two between 4K and 1G", v);
  }
  *out = f;
  return VPMM_OK;
}

size_t describe(uint64_t config_chunk, char* buf, size_t capacity) {
  if (buf == nullptr || capacity == 0) return 0;
  HipFacts f;
  int n = 0;
  if (probe(config_chunk, &f) != VPMM_OK) {
    n = std::snprintf(buf, capacity,
                      "HIP runtime: none (%s); reads VPMM_HIP_LIBRARY, VPMM_HIP_VA_RECYCLE, "
                      "VPMM_HIP_PAGE_FLOOR",
                      last_error());
  } else {
    char chunk[96];
    if (f.chunk_size != 0)
      std::snprintf(chunk, sizeof chunk, "chunked hipMemCreate, %llu MiB chunks%s",
                    static_cast<unsigned long long>(f.chunk_size >> 20),
                    f.chunk_forced ? " (VPMM_HIP_CHUNK_SIZE)" : " (ROCm < 7.0)");
    else
      std::snprintf(chunk, sizeof chunk, "one hipMemCreate per handle%s",
                    f.chunk_forced ? " (VPMM_HIP_CHUNK_SIZE=unlimited)" : " (ROCm >= 7.0)");
    const Runtime* r = runtime();
    int count = 0;
    hipError_t e = r->GetDeviceCount(&count);
    char dev[160];
    if (e == hipSuccess)
      std::snprintf(dev, sizeof dev, "%d device%s", count, count == 1 ? "" : "s");
    else
      format_error(e, dev, sizeof dev);
    n = std::snprintf(buf, capacity,
                      "HIP runtime %d.%d.%d at %s; path: %s; VA recycling after unmap (ROCm 7.2 "
                      "workaround): %s%s; page floor %llu KiB; hipGetDeviceCount: %s%s; reads "
                      "VPMM_HIP_LIBRARY, VPMM_HIP_VA_RECYCLE, VPMM_HIP_PAGE_FLOOR",
                      version_major(f.version), version_minor(f.version), f.version % 100000, f.path,
                      chunk, f.recycle_va ? "on" : "off",
                      f.recycle_forced ? " (VPMM_HIP_VA_RECYCLE)" : "",
                      static_cast<unsigned long long>(f.page_floor >> 10), dev,
                      f.version < make_version(6, 1)
                          ? "; HIP VMM is not functional before ROCm 6.1 (6.3.4+ recommended)"
                          : "");
  }
  if (n < 0) n = 0;
  return static_cast<size_t>(n) < capacity ? static_cast<size_t>(n) : capacity - 1;
}

}  // namespace hip
}  // namespace vpmm
