// The backend registry (see registry.hpp): the table of compiled-in entries
// and the selection that walks it. The entries come from the generated
// backend_entries.h, one VPMM_BACKEND_ENTRY(constant) line per backend that
// meson compiled in, in AUTO order.
#include "backend/registry.hpp"

#include <cstdio>
#include <cstdlib>
#include <string>

#include "common/settings.hpp"
#include "common/status.hpp"

namespace vpmm {

#define VPMM_BACKEND_ENTRY(e) extern const BackendEntry e;
#include "backend/backend_entries.h"
#undef VPMM_BACKEND_ENTRY

namespace {

const BackendEntry* const kEntries[] = {
#define VPMM_BACKEND_ENTRY(e) &e,
#include "backend/backend_entries.h"
#undef VPMM_BACKEND_ENTRY
};
constexpr size_t kEntryCount = sizeof kEntries / sizeof kEntries[0];

// Names of the kinds the ABI knows (common/backend_kinds.hpp), for "not
// built" messages about a kind that has no entry in this build.
const char* kind_label(int32_t kind) {
  const BackendKindName* k = kind == VPMM_BACKEND_AUTO ? nullptr : backend_kind(kind);
  return k ? k->label : nullptr;
}

// VPMM_LOG at info or debug. Read at each selection, not once per process as
// log_level() does: a process may set the variable between two pools. A
// malformed value is the core's to report (config_error), so it only counts
// as "not info" here.
bool auto_log_enabled() {
  LogLevel l = LogLevel::kWarn;
  const char* v = setting_text(Setting::kLog);
  return v != nullptr && parse_log_level(v, &l) && l >= LogLevel::kInfo;
}

// Why AUTO passes over an entry: the error its factory gives (the probe
// says only no). Asked only when the answer is printed; the thread's last
// error is restored, since the pool AUTO goes on to create succeeds.
std::string unusable_reason(const BackendEntry* e, const BackendParams& p) {
  const std::string saved = last_error();
  vpmm_status st = VPMM_OK;
  std::unique_ptr<Backend> b = e->make(p, &st);
  std::string why = b ? "its probe failed (no device?)" : last_error();
  b.reset();
  fail(VPMM_OK, "%s", saved.c_str());
  return why.empty() ? "no reason given" : why;
}

}  // namespace

const BackendEntry* const* backend_entries(size_t* count) {
  if (count != nullptr) *count = kEntryCount;
  return kEntries;
}

const BackendEntry* find_backend_entry(int32_t kind) {
  for (const BackendEntry* e : kEntries)
    if (e->kind == kind) return e;
  return nullptr;
}

std::unique_ptr<Backend> make_backend(int32_t kind, const BackendParams& p, vpmm_status* st) {
  vpmm_status dummy;
  if (st == nullptr) st = &dummy;
  if (kind == VPMM_BACKEND_AUTO) {
    // The last entry is the host backend, whose probe always succeeds. A
    // fallback is said at info: a job meant for the GPU that runs on host
    // memory is otherwise silent.
    const bool log = auto_log_enabled();
    for (const BackendEntry* e : kEntries) {
      if (e->usable()) {
        if (log && e != kEntries[0])
          std::fprintf(stderr, "vpmm: info: backend auto: using %s\n", e->name);
        return e->make(p, st);
      }
      if (log)
        std::fprintf(stderr, "vpmm: info: backend auto: %s is not usable: %s\n", e->name,
                     unusable_reason(e, p).c_str());
    }
    *st = fail(VPMM_ERR_UNSUPPORTED, "vpmm_pool_create: no backend of this build is usable");
    return nullptr;
  }
  if (const BackendEntry* e = find_backend_entry(kind)) return e->make(p, st);
  if (const char* label = kind_label(kind)) {
    *st = fail(VPMM_ERR_UNSUPPORTED,
               "vpmm_pool_create: libvpmm was built without the %s backend (device %d requested)",
               label, p.device);
    return nullptr;
  }
  *st = fail(VPMM_ERR_INVALID_ARGUMENT,
             "vpmm_pool_create: backend %d is not a VPMM_BACKEND_* value", kind);
  return nullptr;
}

}  // namespace vpmm
