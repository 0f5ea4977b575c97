// The exported C functions and nothing else: argument checks that need no
// pool state, the exception firewall (no C++ exception crosses the ABI), and
// translation between the public structs and the core. All policy lives in
// src/core/.
#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <exception>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include "api/dump_text.hpp"
#include "api/ledger_join.hpp"
#include "api/pool_shell.hpp"
#include "backend/registry.hpp"
#include "common/backend_kinds.hpp"
#include "common/settings.hpp"
#include "common/status.hpp"
#include "config/config.hpp"
#include "core/pause/stores/store_table.hpp"
#include "core/state/layout.hpp"
#include "core/pool.hpp"
#include "ipc/fd_table.hpp"
#include "vpmm.h"
#include "vpmm_version.h"  // directly too: a build without it must fail, not lose vpmm_version()

using vpmm::api::check_pool;
using vpmm::api::guarded;
using vpmm::api::kDeadMagic;

namespace {

std::mutex g_shells_mu;
std::vector<vpmm_pool*>* g_dead_shells = nullptr;  // reachable: not a leak

}  // namespace

extern "C" {

VPMM_API const char* vpmm_version(void) { return VPMM_VERSION_STRING; }

VPMM_API int32_t vpmm_abi_version(void) { return VPMM_ABI_VERSION; }

VPMM_API const char* vpmm_status_string(vpmm_status s) { return vpmm::status_name(s); }

VPMM_API const char* vpmm_last_error(void) { return vpmm::last_error(); }

VPMM_API size_t vpmm_last_error_copy(char* buf, size_t capacity) {
  // snprintf semantics without a format: the full length comes back so a
  // caller can tell truncation (and size a second buffer) from one call.
  const char* msg = vpmm::last_error();
  size_t len = std::strlen(msg);
  if (buf && capacity > 0) {
    size_t n = std::min(len, capacity - 1);
    std::memcpy(buf, msg, n);
    buf[n] = '\0';
  }
  return len;
}

namespace {
// The bytes vpmm_config_init(_defaults) may write: struct_size when the
// caller set it to the size of an earlier layout (a program built against
// an older header that sets it first), else today's struct. Reading the
// field of a struct the caller did not initialise is what the header allows
// it to do; vpmm_config_init_sized needs no guess.
uint32_t config_bytes(const vpmm_config* config) {
  for (uint32_t n : vpmm::kConfigOlderSizes)
    if (config->struct_size == n) return n;
  return sizeof *config;
}
}  // namespace

VPMM_API void vpmm_config_init(vpmm_config* config) {
  if (!config) return;
  vpmm::config_init(config, config_bytes(config), true);
}

VPMM_API void vpmm_config_init_defaults(vpmm_config* config) {
  if (!config) return;
  vpmm::config_init(config, config_bytes(config), false);
}

VPMM_API vpmm_status vpmm_config_init_sized(vpmm_config* config, uint32_t struct_size, uint32_t flags) {
  const char* call = "vpmm_config_init_sized";
  if (!config) return vpmm::fail(VPMM_ERR_INVALID_ARGUMENT, "%s: config is NULL", call);
  if (struct_size < vpmm::kConfigMinSize || struct_size > 65536)
    return vpmm::fail(VPMM_ERR_INVALID_ARGUMENT,
                      "%s: struct_size %u is not a vpmm_config size (%u to 65536; pass sizeof(vpmm_config))", call,
                      struct_size, vpmm::kConfigMinSize);
  if (flags & ~uint32_t{VPMM_CONFIG_DEFAULTS_ONLY})
    return vpmm::fail(VPMM_ERR_INVALID_ARGUMENT, "%s: unknown flags 0x%x", call, flags);
  vpmm::config_init(config, struct_size, !(flags & VPMM_CONFIG_DEFAULTS_ONLY));
  return VPMM_OK;
}

}  // extern "C"

// vpmm_pool_create and vpmm_pool_create_ledger (api/ledger_join.hpp).
vpmm_status vpmm::api::create_pool(const char* call, const vpmm_config* config, const char* ledger,
                                   vpmm_pool** out) {
  // A constructor's out-parameter is NULL on failure (the exception to the
  // header's "out-parameters untouched on error"): a caller that skips the
  // status check then fails on NULL, not on an uninitialised pointer.
  if (out) *out = nullptr;
  return guarded(call, [&]() -> vpmm_status {
    VPMM_CHECK_NONNULL(call, out);
    vpmm_config c;
    vpmm_status st = vpmm::config_read(config, call, &c);
    if (st != VPMM_OK) return st;
    st = VPMM_OK;
    std::unique_ptr<vpmm::Backend> backend = vpmm::make_backend(c.backend, vpmm::config_backend_params(c), &st);
    if (!backend)
      return st != VPMM_OK ? vpmm::fail_context(st, call) : vpmm::fail(VPMM_ERR_BACKEND, "%s: no backend", call);
    vpmm::PoolOptions opt;
    st = vpmm::config_resolve(c, *backend, &opt);
    if (st != VPMM_OK) return st;
    const int32_t kind = backend->kind();
    // A ledger shared with other processes, if the caller or the config (VPMM_LEDGER) names one.
    std::unique_ptr<vpmm::Admission> admission;
    st = vpmm::api::join_ledger(call, ledger, c, opt, *backend, &admission);
    if (st != VPMM_OK) return st;
    vpmm::Admission* member = admission.get();
    std::unique_ptr<vpmm::Pool> pool;
    st = vpmm::Pool::create(std::move(backend), vpmm::make_host_services(), opt, &pool, std::move(admission));
    if (st != VPMM_OK) return std::strncmp(vpmm_last_error(), call, std::strlen(call)) == 0 ? st : vpmm::fail_context(st, call);
    std::unique_ptr<vpmm_pool> shell(new vpmm_pool);
    vpmm::config_effective(opt, kind, &c);
    shell->config = c;
    // The config reports the ledger joined, as the pool's own copy (the
    // caller's string may go once vpmm_pool_create returns).
    const char* joined = ledger && *ledger ? ledger : c.ledger;
    if (member && joined) shell->ledger = joined;
    shell->config.ledger = shell->ledger.empty() ? nullptr : shell->ledger.c_str();
    shell->pool = std::move(pool);
    shell->pool->set_handle(shell.get());
    if (member) vpmm::api::ledger_attach(shell.get(), member);
    // Any pool may export or import later: the descriptor table grows now,
    // once per process (one kernel wait at most, after the backend started
    // its threads), rather than by doublings inside a first send.
    vpmm::ipc::make_descriptor_table_once(vpmm::fd_table_ahead());
    *out = shell.release();
    return VPMM_OK;
  });
}

extern "C" {

VPMM_API vpmm_status vpmm_pool_create(const vpmm_config* config, vpmm_pool** out) {
  return vpmm::api::create_pool("vpmm_pool_create", config, nullptr, out);
}

VPMM_API vpmm_status vpmm_pool_destroy(vpmm_pool* pool) {
  const char* call = "vpmm_pool_destroy";
  if (!pool) return VPMM_OK;
  return guarded(call, [&]() -> vpmm_status {
    VPMM_CHECK_POOL(call, pool);
    vpmm::api::ledger_forget(pool);  // its ledger watcher calls into the pool: stopped first
    std::lock_guard<std::mutex> lock(g_shells_mu);
    if (!g_dead_shells) g_dead_shells = new std::vector<vpmm_pool*>();
    g_dead_shells->reserve(g_dead_shells->size() + 1);  // may throw before anything changes
    pool->pool.reset();
    pool->magic = kDeadMagic;
    g_dead_shells->push_back(pool);
    return VPMM_OK;
  });
}

namespace {
// The thread's vpmm_region_push stack. Tags are copied into fixed buffers so
// a scope never dangles and the hot path never allocates (a disk store's
// directory is copied once, at the push).
struct Scope {
  char tag[64];
  uint32_t flags;
  std::string backup_dir;  // empty: the pool's
};
thread_local std::vector<Scope>* t_scopes = nullptr;
// Scopes open on all threads together: while none is, a malloc skips the
// thread's stack (a thread_local of a shared library costs a __tls_get_addr
// call, ~2 cache misses from a program's step: docs/handles.md, "Where the
// hard loop's host time goes"). A thread's own pushes precede its mallocs,
// so it always sees its own scopes counted.
std::atomic<uint64_t> g_open_scopes{0};

// The flags an allocation may carry: a backup, its retention, and the bit of
// each backup store (core/pause/stores/store_table.hpp lists them).
uint32_t known_flags() { return VPMM_ALLOC_HOST_BACKUP | VPMM_ALLOC_RETAIN_BACKUP | vpmm::backup_store_flags(); }
constexpr size_t kMaxBackupDirBytes = 4095;

// The stores in flag order: the default (flag 0), then one per flag bit.
const char* store_at(uint32_t index, uint32_t* flag) {
  if (index == 0) {
    if (flag) *flag = 0;
    return vpmm::backup_store_name(0);
  }
  const uint32_t bits = vpmm::backup_store_flags();
  for (uint32_t b = 0, i = 0; b < 32; ++b)
    if ((bits >> b) & 1u && ++i == index) {
      if (flag) *flag = 1u << b;
      return vpmm::backup_store_name(1u << b);
    }
  return nullptr;
}

// The flag combinations an allocation or a scope may ask for.
vpmm_status check_alloc_flags(const char* call, const char* what, uint32_t flags) {
  if (flags & ~known_flags())
    return vpmm::fail(VPMM_ERR_INVALID_ARGUMENT, "%s: %s 0x%x has unknown bits", call, what, flags);
  if ((flags & ~VPMM_ALLOC_HOST_BACKUP) && !(flags & VPMM_ALLOC_HOST_BACKUP))
    return vpmm::fail(VPMM_ERR_INVALID_ARGUMENT,
                      "%s: %s 0x%x chooses a backup store or retention without VPMM_ALLOC_HOST_BACKUP", call,
                      what, flags);
  const uint32_t stores = flags & vpmm::backup_store_flags();
  if (stores & (stores - 1))
    return vpmm::fail(VPMM_ERR_INVALID_ARGUMENT,
                      "%s: %s 0x%x asks for two backup stores (VPMM_ALLOC_BACKUP_MMAP and _DISK)", call, what,
                      flags);
  return VPMM_OK;
}

// "2 GiB", "1.5 MiB", "512 B": a size a reader takes in at a glance, beside
// the exact byte count.
void human_size(uint64_t b, char* buf, size_t n) {
  static const char* const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int u = 0;
  double v = static_cast<double>(b);
  while (v >= 1024.0 && u < 6) v /= 1024.0, ++u;
  if (u == 0 || v == static_cast<double>(static_cast<uint64_t>(v)))
    std::snprintf(buf, n, "%.0f %s", v, units[u]);
  else
    std::snprintf(buf, n, "%.1f %s", v, units[u]);
}

// An allocation that ran out of memory, told in the caller's terms. The
// failing step (one handle of a growth, one VA chunk) says what the backend
// or the limit refused at that moment, with the growth's own handles counted
// in; the caller asked for `size` bytes of a pool whose state the failed
// malloc left as it found it. So the message leads with the request, the
// pool's mapped and live bytes and the capacity with where it comes from,
// and keeps the step after them (within the 512 bytes vpmm.h promises).
vpmm_status explain_oom(const char* call, vpmm_pool* pool, uint64_t size) {
  char step[512];
  const char* msg = vpmm::last_error();
  const size_t cl = std::strlen(call);
  if (std::strncmp(msg, call, cl) == 0 && msg[cl] == ':' && msg[cl + 1] == ' ') msg += cl + 2;
  std::snprintf(step, sizeof step, "%s", msg);
  vpmm_stats s;
  pool->pool->stats(&s);
  uint64_t limit = 0;
  {
    std::lock_guard<std::mutex> lk(pool->config_mu);
    limit = pool->config.memory_limit;
  }
  const char* backend = pool->pool->backend_name();
  const char* source = limit && limit == s.capacity_bytes    ? "memory_limit"
                       : std::strcmp(backend, vpmm::backend_kind_name(VPMM_BACKEND_HOST)) == 0 ? "host_capacity"
                                                           : "device memory";
  using ull = unsigned long long;
  char req[32], cap[32];
  human_size(size, req, sizeof req);
  // The ledger refused (its messages start so, api/ledger_api.cpp): the
  // pool's own capacity is not what stood in the way, and the step names
  // the budget and who holds what.
  if (std::strncmp(step, "ledger ", 7) == 0)
    return vpmm::fail(VPMM_ERR_OUT_OF_MEMORY,
                      "%s: %llu bytes (%s) were not admitted by the pool's ledger; this pool has %llu bytes "
                      "mapped, %llu live. %s",
                      call, ull(size), req, ull(s.mapped_bytes), ull(s.live_bytes), step);
  if (s.capacity_bytes == 0)  // no device total known: nothing to compare with
    return vpmm::fail(VPMM_ERR_OUT_OF_MEMORY, "%s: %llu bytes do not fit; %llu bytes are mapped, %llu live. "
                      "Failed step: %s", call, ull(size), ull(s.mapped_bytes), ull(s.live_bytes), step);
  human_size(s.capacity_bytes, cap, sizeof cap);
  return vpmm::fail(VPMM_ERR_OUT_OF_MEMORY,
                    "%s: %llu bytes (%s) %s the capacity of %llu bytes (%s: %s); %llu bytes are mapped, "
                    "%llu live. Failed step: %s",
                    call, ull(size), req, size > s.capacity_bytes ? "exceed" : "do not fit in",
                    ull(s.capacity_bytes), cap, source, ull(s.mapped_bytes), ull(s.live_bytes), step);
}

vpmm_status malloc_with(const char* call, vpmm_pool* pool, uint64_t size, vpmm_stream stream,
                        const char* tag, uint32_t flags, const char* backup_dir, vpmm_reservation* res,
                        void** out) {
  VPMM_CHECK_POOL(call, pool);
  VPMM_CHECK_NONNULL(call, out);
  if (size == 0) return vpmm::fail(VPMM_ERR_INVALID_ARGUMENT, "%s: size 0 is not allowed", call);
  return guarded(call, [&]() -> vpmm_status {
    if (tag && *tag && vpmm::backup_store_wants_dir(flags)) {
      // The directory goes into the flags' top bits (core/pause/stores/store_table.hpp).
      uint32_t dir = 0;
      vpmm_status st = pool->pool->backup_dir_id(call, backup_dir, &dir);
      if (st != VPMM_OK) return st;
      flags |= dir << vpmm::kBackupDirShift;
    }
    vpmm_status st = pool->pool->malloc(call, size, stream, tag, flags,
                                        reinterpret_cast<vpmm::Reservation*>(res), out);
    return st == VPMM_ERR_OUT_OF_MEMORY ? explain_oom(call, pool, size) : st;
  });
}
}  // namespace

vpmm_status malloc_scoped(const char* call, vpmm_pool* pool, uint64_t size, vpmm_stream stream,
                          void** out) {
  if (g_open_scopes.load(std::memory_order_relaxed) != 0 && t_scopes && !t_scopes->empty()) {
    const Scope& sc = t_scopes->back();
    return malloc_with(call, pool, size, stream, sc.tag, sc.flags,
                       sc.backup_dir.empty() ? nullptr : sc.backup_dir.c_str(), nullptr, out);
  }
  return malloc_with(call, pool, size, stream, nullptr, 0, nullptr, nullptr, out);
}

VPMM_API const char* vpmm_backup_store_name(uint32_t index, uint32_t* flag) { return store_at(index, flag); }

VPMM_API vpmm_status vpmm_pool_malloc(vpmm_pool* pool, uint64_t size, vpmm_stream stream,
                                      void** out) {
  return malloc_scoped("vpmm_pool_malloc", pool, size, stream, out);
}

VPMM_API vpmm_status vpmm_pool_malloc_ex(vpmm_pool* pool, uint64_t size, vpmm_stream stream,
                                         const vpmm_alloc_attrs* attrs, void** out) {
  const char* call = "vpmm_pool_malloc_ex";
  if (!attrs) return malloc_scoped(call, pool, size, stream, out);
  const uint32_t min_size = offsetof(vpmm_alloc_attrs, tag) + sizeof(const char*);
  if (attrs->struct_size < min_size || attrs->struct_size > 4096)
    return vpmm::fail(VPMM_ERR_INVALID_ARGUMENT,
                      "%s: attrs->struct_size %u is not a vpmm_alloc_attrs size (expected %u)", call,
                      attrs->struct_size, (unsigned)sizeof(vpmm_alloc_attrs));
  vpmm_status st = check_alloc_flags(call, "attrs->flags", attrs->flags);
  if (st != VPMM_OK) return st;
  vpmm_reservation* res = attrs->struct_size >= offsetof(vpmm_alloc_attrs, reservation) + sizeof(void*)
                             ? attrs->reservation : nullptr;
  const char* dir = attrs->struct_size >= offsetof(vpmm_alloc_attrs, backup_dir) + sizeof(const char*)
                        ? attrs->backup_dir : nullptr;
  return malloc_with(call, pool, size, stream, attrs->tag, attrs->flags, dir, res, out);
}

namespace {
// The tag scopes behind vpmm_tag_scope_push/pop and their first names,
// vpmm_region_push/pop: one implementation, messages naming the call made.
vpmm_status scope_push(const char* call, const char* tag, uint32_t flags, const char* backup_dir = nullptr) {
  vpmm_status fst = check_alloc_flags(call, "flags", flags);
  if (fst != VPMM_OK) return fst;
  const size_t dn = backup_dir ? strnlen(backup_dir, kMaxBackupDirBytes + 1) : 0;
  if (backup_dir && dn == 0)
    return vpmm::fail(VPMM_ERR_INVALID_ARGUMENT, "%s: backup_dir is empty (NULL = the pool's)", call);
  if (dn > kMaxBackupDirBytes)
    return vpmm::fail(VPMM_ERR_INVALID_ARGUMENT, "%s: backup_dir \"%.40s...\" is longer than %zu bytes", call,
                      backup_dir, kMaxBackupDirBytes);
  size_t n = tag ? strnlen(tag, 64) : 0;
  if (n > 63)
    return vpmm::fail(VPMM_ERR_INVALID_ARGUMENT, "%s: tag \"%.20s...\" is longer than 63 bytes", call, tag);
  return guarded(call, [&]() -> vpmm_status {
    if (!t_scopes) t_scopes = new std::vector<Scope>();  // freed at thread exit below
    static thread_local struct Reaper {
      ~Reaper() {
        if (t_scopes) g_open_scopes.fetch_sub(t_scopes->size(), std::memory_order_relaxed);
        delete t_scopes;
        t_scopes = nullptr;
      }
    } reaper;
    (void)reaper;
    Scope sc;
    std::memset(sc.tag, 0, sizeof sc.tag);
    if (n) std::memcpy(sc.tag, tag, n);
    sc.flags = flags;
    if (dn) sc.backup_dir.assign(backup_dir, dn);
    t_scopes->push_back(std::move(sc));
    g_open_scopes.fetch_add(1, std::memory_order_relaxed);
    return VPMM_OK;
  });
}

vpmm_status scope_pop(const char* call) {
  if (!t_scopes || t_scopes->empty())
    return vpmm::fail(VPMM_ERR_WRONG_STATE, "%s: no tag scope (vpmm_tag_scope_push) is open on this thread", call);
  t_scopes->pop_back();
  g_open_scopes.fetch_sub(1, std::memory_order_relaxed);
  return VPMM_OK;
}
}  // namespace

VPMM_API vpmm_status vpmm_tag_scope_push(const char* tag, uint32_t flags) {
  return scope_push("vpmm_tag_scope_push", tag, flags);
}

VPMM_API vpmm_status vpmm_tag_scope_pop(void) { return scope_pop("vpmm_tag_scope_pop"); }

VPMM_API vpmm_status vpmm_tag_scope_push_ex(const vpmm_alloc_attrs* attrs) {
  const char* call = "vpmm_tag_scope_push_ex";
  if (!attrs) return scope_push(call, nullptr, 0);
  const uint32_t min_size = offsetof(vpmm_alloc_attrs, tag) + sizeof(const char*);
  if (attrs->struct_size < min_size || attrs->struct_size > 4096)
    return vpmm::fail(VPMM_ERR_INVALID_ARGUMENT,
                      "%s: attrs->struct_size %u is not a vpmm_alloc_attrs size (expected %u)", call,
                      attrs->struct_size, (unsigned)sizeof(vpmm_alloc_attrs));
  if (attrs->struct_size >= offsetof(vpmm_alloc_attrs, reservation) + sizeof(void*) && attrs->reservation)
    return vpmm::fail(VPMM_ERR_INVALID_ARGUMENT,
                      "%s: attrs->reservation must be NULL (a scope spans every pool; a reservation "
                      "belongs to one: pass it to vpmm_pool_malloc_ex)",
                      call);
  const char* dir = attrs->struct_size >= offsetof(vpmm_alloc_attrs, backup_dir) + sizeof(const char*)
                        ? attrs->backup_dir : nullptr;
  return scope_push(call, attrs->tag, attrs->flags, dir);
}

VPMM_API vpmm_status vpmm_region_push(const char* tag, uint32_t flags) {
  return scope_push("vpmm_region_push", tag, flags);
}

VPMM_API vpmm_status vpmm_region_pop(void) { return scope_pop("vpmm_region_pop"); }

VPMM_API vpmm_status vpmm_pool_pause_ex(vpmm_pool* pool, const char* tag, uint64_t* n_changed) {
  const char* call = "vpmm_pool_pause";
  VPMM_CHECK_POOL(call, pool);
  return guarded(call, [&] {
    // In a ledger with a host budget, the backups are admitted first (or
    // sent to disk, where the member allowed it).
    uint32_t flags = 0;
    vpmm_status st = vpmm::api::ledger_before_pause(call, pool, tag, &flags);
    if (st == VPMM_OK) st = pool->pool->pause(tag, n_changed, flags);
    vpmm::api::ledger_sync_host(pool);
    return st;
  });
}

VPMM_API vpmm_status vpmm_pool_pause(vpmm_pool* pool, const char* tag) {
  return vpmm_pool_pause_ex(pool, tag, nullptr);
}

VPMM_API vpmm_status vpmm_pool_pause_flags(vpmm_pool* pool, const char* tag, uint32_t flags,
                                           uint64_t* n_changed) {
  const char* call = "vpmm_pool_pause_flags";
  VPMM_CHECK_POOL(call, pool);
  if (flags & ~VPMM_PAUSE_BACKUP_UNCHANGED)
    return vpmm::fail(VPMM_ERR_INVALID_ARGUMENT, "%s: flags 0x%x has unknown bits", call, flags);
  return guarded(call, [&] {
    vpmm_status st = vpmm::api::ledger_before_pause(call, pool, tag, &flags);
    if (st == VPMM_OK) st = pool->pool->pause(tag, n_changed, flags);
    vpmm::api::ledger_sync_host(pool);
    return st;
  });
}

VPMM_API vpmm_status vpmm_pool_set_backup_dir(vpmm_pool* pool, const char* dir) {
  const char* call = "vpmm_pool_set_backup_dir";
  VPMM_CHECK_POOL(call, pool);
  return guarded(call, [&] { return pool->pool->set_backup_dir(dir); });
}

VPMM_API vpmm_status vpmm_pool_resume_ex(vpmm_pool* pool, const char* tag, uint64_t* n_changed) {
  const char* call = "vpmm_pool_resume";
  VPMM_CHECK_POOL(call, pool);
  return guarded(call, [&] {
    const vpmm_status st = pool->pool->resume(tag, n_changed);
    vpmm::api::ledger_sync_host(pool);
    return st;
  });
}

VPMM_API vpmm_status vpmm_pool_resume_flags(vpmm_pool* pool, const char* tag, uint32_t flags,
                                            uint64_t* n_changed) {
  const char* call = "vpmm_pool_resume_flags";
  VPMM_CHECK_POOL(call, pool);
  if (flags & ~VPMM_RESUME_RETAIN_BACKUP)
    return vpmm::fail(VPMM_ERR_INVALID_ARGUMENT, "%s: flags 0x%x has unknown bits", call, flags);
  return guarded(call, [&] {
    const vpmm_status st = pool->pool->resume(tag, n_changed, flags);
    vpmm::api::ledger_sync_host(pool);
    return st;
  });
}

VPMM_API vpmm_status vpmm_pool_resume(vpmm_pool* pool, const char* tag) {
  return vpmm_pool_resume_ex(pool, tag, nullptr);
}

VPMM_API vpmm_status vpmm_pool_prepare_backups(vpmm_pool* pool, const char* tag,
                                               uint64_t* cached_bytes) {
  const char* call = "vpmm_pool_prepare_backups";
  VPMM_CHECK_POOL(call, pool);
  return guarded(call, [&] {
    const vpmm_status st = pool->pool->prepare_backups(tag, cached_bytes);
    vpmm::api::ledger_sync_host(pool);
    return st;
  });
}

VPMM_API vpmm_status vpmm_pool_trim(vpmm_pool* pool, uint64_t keep_bytes) {
  const char* call = "vpmm_pool_trim";
  VPMM_CHECK_POOL(call, pool);
  return guarded(call, [&] {
    const vpmm_status st = pool->pool->trim(keep_bytes);
    vpmm::api::ledger_sync_host(pool);
    return st;
  });
}

namespace {
vpmm_status reserve_with(const char* call, vpmm_pool* pool, uint64_t bytes, uint32_t flags,
                         uint64_t timeout_ns, vpmm_reservation** out) {
  VPMM_CHECK_POOL(call, pool);
  VPMM_CHECK_NONNULL(call, out);
  return guarded(call, [&]() -> vpmm_status {
    vpmm::Reservation* r = nullptr;
    vpmm_status st = pool->pool->reserve(bytes, flags, timeout_ns, &r);
    if (st == VPMM_OK) *out = reinterpret_cast<vpmm_reservation*>(r);
    return st == VPMM_OK ? st : vpmm::fail_context(st, call);
  });
}
}  // namespace

VPMM_API vpmm_status vpmm_pool_reserve_ex(vpmm_pool* pool, uint64_t bytes, uint32_t flags,
                                          uint64_t timeout_ns, vpmm_reservation** out) {
  return reserve_with("vpmm_pool_reserve_ex", pool, bytes, flags, timeout_ns, out);
}

VPMM_API vpmm_status vpmm_pool_reserve(vpmm_pool* pool, uint64_t bytes, uint32_t flags,
                                       vpmm_reservation** out) {
  return reserve_with("vpmm_pool_reserve", pool, bytes, flags, UINT64_MAX, out);
}

VPMM_API vpmm_status vpmm_reservation_info(vpmm_pool* pool, const vpmm_reservation* res,
                                           uint64_t* size, uint64_t* used) {
  const char* call = "vpmm_reservation_info";
  VPMM_CHECK_POOL(call, pool);
  return guarded(call, [&] {
    return pool->pool->reservation_info(reinterpret_cast<const vpmm::Reservation*>(res), size, used);
  });
}

VPMM_API vpmm_status vpmm_reservation_release(vpmm_pool* pool, vpmm_reservation* res) {
  const char* call = "vpmm_reservation_release";
  VPMM_CHECK_POOL(call, pool);
  return guarded(call, [&] {
    return pool->pool->release_reservation(reinterpret_cast<vpmm::Reservation*>(res));
  });
}

VPMM_API vpmm_status vpmm_pool_set_limit(vpmm_pool* pool, uint64_t bytes) {
  const char* call = "vpmm_pool_set_limit";
  VPMM_CHECK_POOL(call, pool);
  return guarded(call, [&]() -> vpmm_status {
    vpmm_status st = pool->pool->set_limit(bytes);
    if (st == VPMM_OK) {
      std::lock_guard<std::mutex> lock(pool->config_mu);
      pool->config.memory_limit = bytes;
    }
    return st;
  });
}

VPMM_API vpmm_status vpmm_pool_set_oom_callback(vpmm_pool* pool, vpmm_oom_fn fn, void* user) {
  VPMM_CHECK_POOL("vpmm_pool_set_oom_callback", pool);
  pool->pool->set_oom_callback(fn, user);
  return VPMM_OK;
}

VPMM_API vpmm_status vpmm_pool_set_pressure_callback(vpmm_pool* pool, vpmm_pressure_fn fn,
                                                     void* user) {
  VPMM_CHECK_POOL("vpmm_pool_set_pressure_callback", pool);
  pool->pool->set_pressure_callback(fn, user);
  return VPMM_OK;
}

VPMM_API vpmm_status vpmm_pool_tag_stats(vpmm_pool* pool, const char* tag, vpmm_tag_stats* out) {
  const char* call = "vpmm_pool_tag_stats";
  VPMM_CHECK_POOL(call, pool);
  VPMM_CHECK_NONNULL(call, out);
  if (out->struct_size < 2 * sizeof(uint64_t) || out->struct_size > 4096)
    return vpmm::fail(VPMM_ERR_INVALID_ARGUMENT, "%s: out->struct_size %u is not a vpmm_tag_stats size",
                      call, out->struct_size);
  return guarded(call, [&]() -> vpmm_status {
    vpmm_tag_stats full;
    vpmm_status st = pool->pool->tag_stats(tag, &full);
    if (st != VPMM_OK) return st;
    uint32_t n = out->struct_size;
    std::memcpy(out, &full, std::min<size_t>(n, sizeof full));
    out->struct_size = n;
    return VPMM_OK;
  });
}

VPMM_API vpmm_status vpmm_pool_free(vpmm_pool* pool, void* ptr, vpmm_stream stream) {
  const char* call = "vpmm_pool_free";
  VPMM_CHECK_POOL(call, pool);
  if (!ptr) return VPMM_OK;
  return guarded(call, [&] { return pool->pool->free(ptr, stream); });
}

VPMM_API vpmm_status vpmm_pool_lookup(vpmm_pool* pool, const void* ptr, void** base,
                                      uint64_t* size) {
  const char* call = "vpmm_pool_lookup";
  VPMM_CHECK_POOL(call, pool);
  VPMM_CHECK_NONNULL(call, ptr);
  return guarded(call, [&] { return pool->pool->lookup(ptr, base, size); });
}

VPMM_API vpmm_status vpmm_pool_backup_lookup(vpmm_pool* pool, const void* ptr, void** host,
                                             uint64_t* bytes) {
  const char* call = "vpmm_pool_backup_lookup";
  VPMM_CHECK_POOL(call, pool);
  VPMM_CHECK_NONNULL(call, ptr);
  return guarded(call, [&] { return pool->pool->backup_lookup(ptr, host, bytes); });
}

VPMM_API vpmm_status vpmm_pool_stream_synchronize(vpmm_pool* pool, vpmm_stream stream) {
  const char* call = "vpmm_pool_stream_synchronize";
  VPMM_CHECK_POOL(call, pool);
  return guarded(call, [&] { return pool->pool->stream_synchronize(stream); });
}

VPMM_API vpmm_status vpmm_pool_stream_create(vpmm_pool* pool, vpmm_stream* out) {
  const char* call = "vpmm_pool_stream_create";
  VPMM_CHECK_POOL(call, pool);
  VPMM_CHECK_NONNULL(call, out);
  return guarded(call, [&]() -> vpmm_status {
    vpmm_status st = pool->pool->stream_create(out);
    return st == VPMM_OK ? st : vpmm::fail_context(st, call);
  });
}

VPMM_API vpmm_status vpmm_pool_stream_retire(vpmm_pool* pool, vpmm_stream stream) {
  const char* call = "vpmm_pool_stream_retire";
  VPMM_CHECK_POOL(call, pool);
  return guarded(call, [&] { return pool->pool->stream_retire(stream); });
}

VPMM_API vpmm_status vpmm_pool_stream_destroy(vpmm_pool* pool, vpmm_stream stream) {
  const char* call = "vpmm_pool_stream_destroy";
  VPMM_CHECK_POOL(call, pool);
  if (!stream)
    return vpmm::fail(VPMM_ERR_INVALID_ARGUMENT, "%s: the default stream (NULL) cannot be destroyed", call);
  return guarded(call, [&]() -> vpmm_status {
    vpmm_status st = pool->pool->stream_destroy(stream);
    return st == VPMM_OK ? st : vpmm::fail_context(st, call);
  });
}

VPMM_API vpmm_status vpmm_pool_stats(vpmm_pool* pool, vpmm_stats* stats) {
  const char* call = "vpmm_pool_stats";
  VPMM_CHECK_POOL(call, pool);
  VPMM_CHECK_NONNULL(call, stats);
  return vpmm::api::sized_snapshot(call, "stats", "vpmm_stats", stats,
                                   [&](vpmm_stats* full) { pool->pool->stats(full); });
}

VPMM_API vpmm_status vpmm_pool_mark_step(vpmm_pool* pool) {
  const char* call = "vpmm_pool_mark_step";
  VPMM_CHECK_POOL(call, pool);
  return guarded(call, [&] {
    pool->pool->mark_step();
    return VPMM_OK;
  });
}

VPMM_API vpmm_status vpmm_pool_driver_profile(vpmm_pool* pool, vpmm_driver_profile* out) {
  const char* call = "vpmm_pool_driver_profile";
  VPMM_CHECK_POOL(call, pool);
  VPMM_CHECK_NONNULL(call, out);
  return vpmm::api::sized_snapshot(call, "out", "vpmm_driver_profile", out,
                                   [&](vpmm_driver_profile* full) { pool->pool->driver_profile(full); });
}

namespace {
// The smallest vpmm_region_info a caller may pass: the fields of ABI 1. Later
// versions only append, so this stays the minimum forever.
constexpr uint32_t kRegionInfoV1Size = offsetof(vpmm_region_info, stream) + sizeof(vpmm_stream);
static_assert(kRegionInfoV1Size == sizeof(vpmm_region_info),
              "fields appended to vpmm_region_info: keep kRegionInfoV1Size at the ABI 1 size");
}  // namespace

VPMM_API vpmm_status vpmm_pool_dump(vpmm_pool* pool, vpmm_region_info* buf, size_t capacity,
                                    size_t* count) {
  const char* call = "vpmm_pool_dump";
  VPMM_CHECK_POOL(call, pool);
  VPMM_CHECK_NONNULL(call, count);
  if (capacity > 0 && !buf)
    return vpmm::fail(VPMM_ERR_INVALID_ARGUMENT, "%s: buf is NULL with capacity %zu", call, capacity);
  // The caller's element size is the stride: a caller built against a newer
  // (larger) struct gets the fields this library knows in each element.
  const uint32_t stride = capacity > 0 ? buf->struct_size : 0;
  if (capacity > 0 && (stride < kRegionInfoV1Size || stride > 65536))
    return vpmm::fail(VPMM_ERR_INVALID_ARGUMENT,
                      "%s: buf[0].struct_size %u is not a vpmm_region_info size (expected %u; set "
                      "it to sizeof(vpmm_region_info))",
                      call, stride, (unsigned)sizeof(vpmm_region_info));
  return guarded(call, [&]() -> vpmm_status {
    std::vector<vpmm_region_info> all = pool->pool->snapshot();
    size_t n = std::min(capacity, all.size());
    const size_t width = std::min<size_t>(stride, sizeof(vpmm_region_info));
    char* dst = reinterpret_cast<char*>(buf);
    for (size_t i = 0; i < n; ++i, dst += stride) {
      all[i].struct_size = stride;
      std::memcpy(dst, &all[i], width);
    }
    *count = all.size();
    return VPMM_OK;
  });
}

VPMM_API vpmm_status vpmm_pool_visit(vpmm_pool* pool, vpmm_region_info_fn fn, void* user) {
  const char* call = "vpmm_pool_visit";
  VPMM_CHECK_POOL(call, pool);
  VPMM_CHECK_NONNULL(call, fn);
  return guarded(call, [&]() -> vpmm_status {
    std::vector<vpmm_region_info> all = pool->pool->snapshot();
    for (const vpmm_region_info& r : all)
      if (fn(&r, user) != 0) break;
    return VPMM_OK;
  });
}

// Copies text (with its NUL) into buf as far as capacity allows; *needed
// (optional) gets the full size. Shared by the text-returning calls.
static void copy_text(const std::string& text, char* buf, size_t capacity, size_t* needed) {
  if (needed) *needed = text.size() + 1;
  if (capacity > 0) {
    size_t n = std::min(capacity - 1, text.size());
    std::memcpy(buf, text.data(), n);
    buf[n] = '\0';
  }
}

VPMM_API vpmm_status vpmm_pool_dump_text(vpmm_pool* pool, char* buf, size_t capacity,
                                         size_t* needed) {
  const char* call = "vpmm_pool_dump_text";
  VPMM_CHECK_POOL(call, pool);
  if (capacity > 0 && !buf)
    return vpmm::fail(VPMM_ERR_INVALID_ARGUMENT, "%s: buf is NULL with capacity %zu", call, capacity);
  return guarded(call, [&]() -> vpmm_status {
    copy_text(vpmm::dump_text(*pool->pool), buf, capacity, needed);
    return VPMM_OK;
  });
}

VPMM_API vpmm_status vpmm_pool_layout(vpmm_pool* pool, char* buf, size_t capacity,
                                      size_t* needed) {
  const char* call = "vpmm_pool_layout";
  VPMM_CHECK_POOL(call, pool);
  if (capacity > 0 && !buf)
    return vpmm::fail(VPMM_ERR_INVALID_ARGUMENT, "%s: buf is NULL with capacity %zu", call, capacity);
  return guarded(call, [&]() -> vpmm_status {
    std::vector<vpmm_region_info> regions = pool->pool->snapshot();
    copy_text(vpmm::format_layout(regions, pool->pool->options().page_size), buf, capacity, needed);
    return VPMM_OK;
  });
}

VPMM_API vpmm_status vpmm_pool_check(vpmm_pool* pool) {
  const char* call = "vpmm_pool_check";
  VPMM_CHECK_POOL(call, pool);
  return guarded(call, [&]() -> vpmm_status {
    std::string e = pool->pool->check();
    if (e.empty()) return VPMM_OK;
    return vpmm::fail(VPMM_ERR_INTERNAL, "%s: invariant violated: %s", call, e.c_str());
  });
}

VPMM_API vpmm_status vpmm_pool_get_config(vpmm_pool* pool, vpmm_config* config) {
  const char* call = "vpmm_pool_get_config";
  VPMM_CHECK_POOL(call, pool);
  VPMM_CHECK_NONNULL(call, config);
  if (config->struct_size < sizeof(uint32_t) || config->struct_size > 65536)
    return vpmm::fail(VPMM_ERR_INVALID_ARGUMENT, "%s: config->struct_size %u is not valid", call,
                      config->struct_size);
  uint32_t n = config->struct_size;
  std::lock_guard<std::mutex> lock(pool->config_mu);
  std::memcpy(config, &pool->config, std::min<size_t>(n, sizeof pool->config));
  config->struct_size = n;
  return VPMM_OK;
}

VPMM_API const char* vpmm_pool_backend_name(vpmm_pool* pool) {
  if (check_pool("vpmm_pool_backend_name", pool) != VPMM_OK) return nullptr;
  return pool->pool->backend_name();
}

}  // extern "C"
