// The environment's tag scope: the outermost vpmm_region_push scope of every
// thread that allocates through the interposer, taken from
//   VPMM_PRELOAD_TAG (+ VPMM_PRELOAD_HOST_BACKUP), or when that is unset
//   TMS_INIT_ENABLE=1 (+ TMS_INIT_ENABLE_CPU_BACKUP=1): torch_memory_saver's
//   whole-process mode, where every allocation is pausable under "default"
//   from the start.
// The loading thread opens it when the library loads, before the program
// can push a scope of its own; any other thread on its first routed
// allocation, or earlier through vpmm_preload_open_scope(), which a thread
// that pushes scopes before it allocates must call first (a scope opened
// later would land above the program's and win over it).
#include <strings.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>

#include "preload/preload.hpp"
#include "vpmm.h"

namespace {

// torch_memory_saver's switches, read with getenv: they are TMS's variables,
// not libvpmm options (the option table holds VPMM_* variables only).
// Unset or empty (what TMS's own change_env leaves behind) is off; a value
// that is neither on nor off is off too, and said so once.
bool tms_flag(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return false;
  for (const char* on : {"1", "true", "yes", "on"})
    if (strcasecmp(v, on) == 0) return true;
  for (const char* off : {"0", "false", "no", "off"})
    if (strcasecmp(v, off) == 0) return false;
  std::fprintf(stderr, "libvpmm_preload: %s=%s is neither 1 nor 0: taken as 0\n", name, v);
  return false;
}

struct EnvScope {
  const char* tag = nullptr;  // nullptr: no environment scope
  uint32_t flags = 0;
};

// Backup stores TMS offers beyond pinned host memory, which this interposer
// cannot ask libvpmm for: the bytes are still kept (pinned), and the
// difference is printed once rather than passed over.
void warn_unsupported_tms_stores() {
  const char* backend = std::getenv("TMS_INIT_CPU_BACKUP_BACKEND");
  if (backend && *backend && std::strcmp(backend, "pinned") != 0)
    std::fprintf(stderr,
                 "libvpmm_preload: TMS_INIT_CPU_BACKUP_BACKEND=%s is not supported: backups of "
                 "\"default\" go to pinned host memory\n",
                 backend);
  if (tms_flag("TMS_INIT_ENABLE_DISK_BACKUP"))
    std::fprintf(stderr,
                 "libvpmm_preload: TMS_INIT_ENABLE_DISK_BACKUP=1 is not supported: backups of "
                 "\"default\" go to pinned host memory\n");
}

const EnvScope& env_scope() {
  static const EnvScope scope = [] {
    EnvScope s;
    const char* t = vpmm_preload::option_text("preload_tag");
    if (t && *t) {
      s.tag = t;
      const char* b = vpmm_preload::option_text("preload_host_backup");
      s.flags = b && *b && std::strcmp(b, "0") != 0 ? VPMM_ALLOC_HOST_BACKUP : 0u;
    } else if (tms_flag("TMS_INIT_ENABLE")) {
      s.tag = "default";  // TMS's tag for allocations outside any region()
      const bool backup =
          tms_flag("TMS_INIT_ENABLE_CPU_BACKUP") || tms_flag("TMS_INIT_ENABLE_DISK_BACKUP");
      s.flags = backup ? VPMM_ALLOC_HOST_BACKUP : 0u;
      if (backup) warn_unsupported_tms_stores();
    }
    return s;
  }();
  return scope;
}

thread_local bool t_opened = false;

vpmm_status open_scope() {
  if (t_opened) return VPMM_OK;
  t_opened = true;
  const EnvScope& s = env_scope();
  if (!s.tag) return VPMM_OK;
  const vpmm_status st = vpmm_region_push(s.tag, s.flags);
  if (st != VPMM_OK)
    std::fprintf(stderr, "libvpmm_preload: the environment's tag \"%s\" not applied: %s\n", s.tag,
                 vpmm_last_error());
  return st;
}

// The loading thread (the program's main thread under LD_PRELOAD) gets its
// scope before main runs, so a scope the program pushes nests inside it.
__attribute__((constructor)) void open_on_load() { open_scope(); }

}  // namespace

namespace vpmm_preload {

void open_env_scope() { open_scope(); }

}  // namespace vpmm_preload

extern "C" {

// For threads that push scopes of their own before their first CUDA
// allocation (Python's torch_memory_saver drop-in calls it before each
// region()): opens the environment's scope on the calling thread now, once.
// Returns VPMM_OK, also when there is no environment scope or the thread has
// one already; else the status of vpmm_region_push (the reason is printed).
__attribute__((visibility("default"))) int vpmm_preload_open_scope(void) { return open_scope(); }

}  // extern "C"
