// Configuration defaults, environment parsing and validation (see config.hpp).
// A malformed variable is never replaced by a default: the caller learns of
// it from vpmm_pool_create, with the variable and its value in the message.
#include "config/config.hpp"

#include <strings.h>

#include <cctype>
#include <cerrno>
#include <cinttypes>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <cstddef>
#include <cstring>
#include <mutex>
#include <set>
#include <string>
#include <type_traits>
#include <utility>

#include "common/settings.hpp"
#include "common/backend_kinds.hpp"
#include "common/ledger_name.hpp"
#include "common/status.hpp"

namespace vpmm {

bool refuse(Refusal* why, const char* fmt, ...) {
  if (why) {
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(why->text, sizeof why->text, fmt, ap);
    va_end(ap);
  }
  return false;
}

namespace {

// What a size accepts, quoted by every refusal of one.
#define VPMM_SIZE_FORMAT_                                                                      \
  "a byte count from 0 to 18446744073709551615 (2^64 - 1): decimal or 0x-hex, optionally with " \
  "K, M, G or T (powers of 1024), e.g. \"8G\""

bool parse_backend(const char* v, int32_t* out, Refusal* why) {
  for (const BackendKindName& k : kBackendKinds)
    if (strcasecmp(v, k.name) == 0) {
      *out = k.kind;
      return true;
    }
  char names[64] = "";
  for (size_t i = 0, n = 0; i < kBackendKindCount && n < sizeof names; ++i)
    n += static_cast<size_t>(std::snprintf(names + n, sizeof names - n, "%s%s", i ? ", " : "", kBackendKinds[i].name));
  return refuse(why, "not a backend name; accepted: %s", names);
}

// "8G" = bytes; "80%" = a fraction of device memory.
bool parse_limit(const char* v, vpmm_config* c, Refusal* why) {
  static const char* const accepted =
      "accepted: a byte count (\"8G\", at most 2^64 - 1 bytes) or a share of device memory above 0% and at "
      "most 100% (\"80%\")";
  size_t n = std::strlen(v);
  if (n > 1 && v[n - 1] == '%') {
    char* end = nullptr;
    double pct = std::strtod(v, &end);
    if (end != v + n - 1 || end == v) return refuse(why, "not a number before the %%; %s", accepted);
    if (!(pct > 0.0 && pct <= 100.0))
      return refuse(why, "%s; %s", pct <= 0.0 ? "out of range (not above 0%)" : "out of range (above 100%)",
                    accepted);
    c->memory_limit_fraction = pct / 100.0;
    return true;
  }
  Refusal size_why;
  if (parse_size(v, &c->memory_limit, &size_why)) return true;
  // The size's reason, then both forms.
  char* cut = std::strchr(size_why.text, ';');
  if (cut) *cut = '\0';
  return refuse(why, "%s; %s", size_why.text, accepted);
}

// A share written as a fraction from 0 to 1 ("0.02") or a percentage from
// 0% to 100% ("2%"), as VPMM_REMAP_SLACK and VPMM_DRIVER_BUDGET take it.
bool parse_share(const char* v, double* out, Refusal* why, const char* accepted) {
  const size_t n = std::strlen(v);
  const bool pct = n > 1 && v[n - 1] == '%';
  char* end = nullptr;
  double x = std::strtod(v, &end);
  if (n == 0 || end == v || end != v + n - (pct ? 1 : 0)) return refuse(why, "not a number; %s", accepted);
  if (!(x >= 0.0 && x <= (pct ? 100.0 : 1.0)))
    return refuse(why, "%s; %s", x < 0.0 ? "out of range (negative)" : pct ? "out of range (above 100%)"
                                                                         : "out of range (above 1)",
                  accepted);
  *out = pct ? x / 100.0 : x;
  return true;
}

// VPMM_REMAP_SLACK: "0.02", "2%", or "exact" (page-exact: a negative value).
bool parse_remap_slack(const char* v, vpmm_config* c, Refusal* why) {
  static const char* const accepted =
      "accepted: a fraction from 0 to 1 (\"0.02\"), a percentage from 0% to 100% (\"2%\") or \"exact\"";
  if (std::strcmp(v, "exact") == 0) {
    c->remap_slack = -1.0;
    return true;
  }
  return parse_share(v, &c->remap_slack, why, accepted);
}

// VPMM_DRIVER_BUDGET: "0.01", "1%", "never" or 0 (VPMM_DRIVER_BUDGET_NEVER:
// the field's 0 is the default, as everywhere), "exact" (no budget).
bool parse_driver_budget(const char* v, vpmm_config* c, Refusal* why) {
  static const char* const accepted =
      "accepted: a fraction above 0 up to 1 (\"0.01\"), a percentage up to 100% (\"1%\"), \"never\" "
      "or 0 (move pages only at the limit), or \"exact\" (no budget)";
  if (std::strcmp(v, "exact") == 0) {
    c->driver_budget = VPMM_DRIVER_BUDGET_EXACT;
    return true;
  }
  double x = 0.0;
  if (std::strcmp(v, "never") != 0 && !parse_share(v, &x, why, accepted)) return false;
  c->driver_budget = x == 0.0 ? VPMM_DRIVER_BUDGET_NEVER : x;
  return true;
}

// VPMM_PLACEMENT: a chain's name (placement_chain_name is the one table).
bool parse_placement(const char* v, vpmm_config* c, Refusal* why) {
  for (int32_t p = 0; placement_chain_name(p); ++p)
    if (std::strcmp(v, placement_chain_name(p)) == 0) {
      c->placement = p;
      return true;
    }
  char names[160] = "";
  for (int32_t p = 0; placement_chain_name(p); ++p) {
    const size_t n = std::strlen(names);
    std::snprintf(names + n, sizeof names - n, "%s%s", p ? ", " : "", placement_chain_name(p));
  }
  return refuse(why, "not a placement chain; accepted: %s", names);
}

// VPMM_BUDGET_CLOCK_US: microseconds a malloc or free stands for (0: wall clock).
bool parse_budget_clock(const char* v, vpmm_config* c, Refusal* why) {
  static const char* const accepted =
      "accepted: 0 (the wall clock) or microseconds of work per malloc and free, up to 1000000";
  uint64_t x = 0;
  Refusal size_why;
  if (!parse_size(v, &x, &size_why)) {
    char* cut = std::strchr(size_why.text, ';');
    if (cut) *cut = '\0';
    return refuse(why, "%s; %s", size_why.text, accepted);
  }
  if (x > 1000000) return refuse(why, "out of range (above 1000000); %s", accepted);
  c->budget_clock_us = static_cast<int32_t>(x);
  return true;
}

// VPMM_VIEW_MIN_SIZE: a size, or "off" (VPMM_VIEWS_OFF).
bool parse_view_min_size(const char* v, vpmm_config* c, Refusal* why) {
  if (strcasecmp(v, "off") == 0) {
    c->view_min_size = VPMM_VIEWS_OFF;
    return true;
  }
  if (parse_size(v, &c->view_min_size, why)) return true;
  if (why) {
    const size_t n = std::strlen(why->text);
    std::snprintf(why->text + n, sizeof why->text - n, ", or \"off\"");
  }
  return false;
}

bool parse_int(const char* v, int32_t* out, Refusal* why) {
  static const char* const accepted = "accepted: an integer from 0 to 2147483647";
  uint64_t x = 0;
  Refusal size_why;
  if (!parse_size(v, &x, &size_why)) {
    char* cut = std::strchr(size_why.text, ';');
    if (cut) *cut = '\0';
    return refuse(why, "%s; %s", size_why.text, accepted);
  }
  if (x > INT32_MAX) return refuse(why, "out of range (above 2147483647); %s", accepted);
  *out = static_cast<int32_t>(x);
  return true;
}

// VPMM_EXPORTABLE: a switch, so its two values are all it takes.
bool parse_exportable(const char* v, uint64_t* out, Refusal* why) {
  if (std::strcmp(v, "0") == 0 || std::strcmp(v, "1") == 0) {
    *out = static_cast<uint64_t>(v[0] - '0');
    return true;
  }
  return refuse(why, "not a switch value; accepted: 0 (not exportable), 1 (every handle exportable)");
}

// VPMM_MAX_HANDLE_SIZE and VPMM_HIP_CHUNK_SIZE: "Np" counts pages of the
// page_size read before them (parse_handle_size).
bool parse_max_handle_size(const char* v, vpmm_config* c, Refusal* why) {
  return parse_handle_size(v, c->page_size, &c->max_handle_size, why);
}
bool parse_hip_chunk_size(const char* v, vpmm_config* c, Refusal* why) {
  return parse_handle_size(v, c->page_size, &c->hip_chunk_size, why);
}

// VPMM_LEDGER: a ledger's name, or "" for none. vpmm_config.ledger is a
// pointer the caller owns; the environment's text is copied into a table
// kept for the process's life (the environment may change under it), one
// copy per distinct name.
bool parse_ledger(const char* v, const char** out, Refusal* why) {
  if (*v == '\0') {
    *out = nullptr;
    return true;
  }
  if (!valid_ledger_name(v))
    return refuse(why, "not a ledger name; accepted: 1-64 characters of [A-Za-z0-9_.-], not starting with '.', "
                       "or empty for none");
  static std::mutex mu;
  static std::set<std::string>* names = new std::set<std::string>();  // reachable at exit: not a leak
  std::lock_guard<std::mutex> lock(mu);
  *out = names->insert(v).first->c_str();
  return true;
}

bool parse_fd_table_ahead_option(const char* v, vpmm_config*, Refusal* why) {
  uint64_t n;
  if (parse_fd_table_ahead(v, &n)) return true;
  return refuse(why, "not a count of entries; accepted: 0 to 1048576 (0 = none made ahead)");
}

bool parse_log(const char* v, vpmm_config*, Refusal* why) {
  LogLevel l;
  if (parse_log_level(v, &l)) return true;
  return refuse(why, "not a log level; accepted: off, error, warn, info, debug");
}

// --- Each option's own check, default and effective value -------------------
// The functions config/option_list.hpp names. A resolve function runs in table
// order, so it may read what rows before it resolved: everything measured in
// pages reads the page_size of row 2.

vpmm_status check_backend(const vpmm_config& c, const char* call) {
  if (!backend_kind_name(c.backend))
    return fail(VPMM_ERR_INVALID_ARGUMENT, "%s: config->backend %d is not a VPMM_BACKEND_* value",
                call, c.backend);
  return VPMM_OK;
}

void show_backend(const PoolOptions&, int32_t kind, vpmm_config* c) { c->backend = kind; }

vpmm_status check_ledger(const vpmm_config& c, const char* call) {
  if (!c.ledger || !*c.ledger || valid_ledger_name(c.ledger)) return VPMM_OK;
  return fail(VPMM_ERR_INVALID_ARGUMENT,
              "%s: config->ledger \"%.80s\" is not a ledger name (1-64 characters of [A-Za-z0-9_.-], not "
              "starting with '.'; NULL or \"\" for none)",
              call, c.ledger);
}

vpmm_status check_device(const vpmm_config& c, const char* call) {
  if (c.device < 0)
    return fail(VPMM_ERR_INVALID_ARGUMENT, "%s: config->device %d is negative", call, c.device);
  return VPMM_OK;
}

vpmm_status resolve_page_size(const vpmm_config& c, Backend& b, const char* call, PoolOptions* o) {
  const uint64_t g = b.granularity();
  o->page_size = c.page_size ? c.page_size : b.recommended_page_size();
  if (o->page_size % g != 0)
    return fail(VPMM_ERR_INVALID_ARGUMENT,
                "%s: page_size %" PRIu64 " is not a multiple of the %s backend granularity %" PRIu64,
                call, o->page_size, b.name(), g);
  return VPMM_OK;
}

vpmm_status resolve_va_size(const vpmm_config& c, Backend& b, const char* call, PoolOptions* o) {
  o->va_size = c.va_size ? c.va_size : b.default_va_size();
  // A va_size the caller never set is the backend's default: blame the page
  // size that does not divide it, not the default.
  if (c.va_size == 0 && o->va_size % o->page_size != 0)
    return fail(VPMM_ERR_INVALID_ARGUMENT,
                "%s: page_size %" PRIu64 " does not divide the %s backend's default va_size %" PRIu64
                " (use a page_size that does, e.g. a power of two, or set va_size / VPMM_VA_SIZE "
                "to a multiple of it)",
                call, o->page_size, b.name(), o->va_size);
  if (o->va_size % o->page_size != 0 || o->va_size < o->page_size)
    return fail(VPMM_ERR_INVALID_ARGUMENT,
                "%s: va_size %" PRIu64 " is not a non-zero multiple of page_size %" PRIu64, call,
                o->va_size, o->page_size);
  return VPMM_OK;
}

vpmm_status resolve_initial_pages(const vpmm_config& c, Backend&, const char* call, PoolOptions* o) {
  o->initial_pages = c.initial_pages;
  if (o->initial_pages > o->va_size / o->page_size)
    return fail(VPMM_ERR_INVALID_ARGUMENT,
                "%s: initial_pages %" PRIu64 " do not fit in va_size %" PRIu64 " (page_size %" PRIu64 ")",
                call, o->initial_pages, o->va_size, o->page_size);
  return VPMM_OK;
}

vpmm_status resolve_max_handle_size(const vpmm_config& c, Backend&, const char* call, PoolOptions* o) {
  o->max_handle_size = c.max_handle_size;
  if (o->max_handle_size != VPMM_HANDLE_SIZE_UNLIMITED && o->max_handle_size % o->page_size != 0)
    return fail(VPMM_ERR_INVALID_ARGUMENT,
                "%s: max_handle_size %" PRIu64 " is not a multiple of page_size %" PRIu64, call,
                o->max_handle_size, o->page_size);
  return VPMM_OK;
}

vpmm_status resolve_small_size(const vpmm_config& c, Backend&, const char* call, PoolOptions* o) {
  o->small_size = c.small_size ? c.small_size : o->page_size / 2;
  if (o->small_size > o->page_size)
    return fail(VPMM_ERR_INVALID_ARGUMENT, "%s: small_size %" PRIu64 " exceeds page_size %" PRIu64,
                call, o->small_size, o->page_size);
  return VPMM_OK;
}

vpmm_status resolve_fraction(const vpmm_config& c, Backend&, const char* call, PoolOptions*) {
  // Applied by resolve_capacity, which needs the backend's memory: here only
  // its range.
  if (!(c.memory_limit_fraction >= 0.0 && c.memory_limit_fraction <= 1.0))
    return fail(VPMM_ERR_INVALID_ARGUMENT, "%s: memory_limit_fraction %g is not within [0, 1]", call,
                c.memory_limit_fraction);
  return VPMM_OK;
}

vpmm_status resolve_large_rounding(const vpmm_config& c, Backend&, const char* call, PoolOptions* o) {
  o->large_rounding = c.large_rounding ? c.large_rounding : o->page_size;
  const uint64_t r = o->large_rounding;
  if (c.large_rounding && (r < kSmallQuantum || (r & (r - 1)) || r > o->page_size || o->page_size % r))
    return fail(VPMM_ERR_INVALID_ARGUMENT,
                "%s: large_rounding %" PRIu64 " is not a power of two from %" PRIu64
                " to page_size %" PRIu64 " dividing it (0 = page_size)",
                call, r, kSmallQuantum, o->page_size);
  return VPMM_OK;
}

vpmm_status check_exportable(const vpmm_config& c, const char* call) {
  if (c.exportable > 1)
    return fail(VPMM_ERR_INVALID_ARGUMENT, "%s: config->exportable %" PRIu64 " is not 0 or 1", call, c.exportable);
  return VPMM_OK;
}

void show_host_capacity(const PoolOptions& o, int32_t kind, vpmm_config* c) {
  if (kind == VPMM_BACKEND_HOST) c->host_capacity = o.device_total;
}

vpmm_status check_remap_slack(const vpmm_config& c, const char* call) {
  if (!(c.remap_slack <= 1.0))  // NaN too
    return fail(VPMM_ERR_INVALID_ARGUMENT, "%s: remap_slack %g is above 1 (or not a number)", call,
                c.remap_slack);
  return VPMM_OK;
}

vpmm_status resolve_remap_slack(const vpmm_config& c, Backend&, const char*, PoolOptions* o) {
  o->remap_slack = c.remap_slack == 0.0 ? kDefaultRemapSlack : std::max(0.0, c.remap_slack);
  return VPMM_OK;
}

void show_remap_slack(const PoolOptions& o, int32_t, vpmm_config* c) {
  c->remap_slack = o.remap_slack > 0.0 ? o.remap_slack : -1.0;
}

vpmm_status check_driver_budget(const vpmm_config& c, const char* call) {
  const double b = c.driver_budget;
  if (!(b <= 1.0) || (b < 0.0 && b != VPMM_DRIVER_BUDGET_EXACT && b != VPMM_DRIVER_BUDGET_NEVER))
    return fail(VPMM_ERR_INVALID_ARGUMENT,
                "%s: driver_budget %g is not a fraction from 0 to 1, VPMM_DRIVER_BUDGET_NEVER (-2) or "
                "VPMM_DRIVER_BUDGET_EXACT (-1)",
                call, b);
  return VPMM_OK;
}

vpmm_status resolve_driver_budget(const vpmm_config& c, Backend&, const char*, PoolOptions* o) {
  // PoolOptions keeps the sentinels: the budget step tells "never" from "exact".
  o->driver_budget = c.driver_budget == 0.0 ? kDefaultDriverBudget : c.driver_budget;
  // The legacy switch of the pending-reuse step, read here, once, with the options.
  o->pending_reuse = setting_on(Setting::kPendingReuse);
  const char* dir = setting_text(Setting::kBackupDir);
  o->backup_dir = dir ? dir : "";
  return VPMM_OK;
}

void show_driver_budget(const PoolOptions& o, int32_t, vpmm_config* c) { c->driver_budget = o.driver_budget; }

vpmm_status check_placement(const vpmm_config& c, const char* call) {
  if (!placement_chain_name(c.placement) || c.placement < 0)
    return fail(VPMM_ERR_INVALID_ARGUMENT, "%s: placement %d is not a VPMM_PLACEMENT_* chain (0 to %d)", call,
                c.placement, placement_chain_count() - 1);
  return VPMM_OK;
}

vpmm_status resolve_view_min_size(const vpmm_config& c, Backend&, const char*, PoolOptions* o) {
  // 0 is the default size (defaults.hpp, kDefaultViewMinSize, says why).
  // Exported memory is found by the region map's address: views stay out of
  // exportable pools.
  // The default size serves only chains with a views step (views: the
  // default before the driver budget); a size set explicitly adds the step
  // to any chain (placement_chain_steps).
  if (c.view_min_size == VPMM_VIEWS_OFF || c.exportable ||
      (c.view_min_size == 0 && c.placement != VPMM_PLACEMENT_VIEWS)) {
    o->view_min_size = 0;
  } else {
    const uint64_t want = c.view_min_size ? c.view_min_size : kDefaultViewMinSize;
    o->view_min_size = std::max(o->page_size, (want + o->page_size - 1) / o->page_size * o->page_size);
  }
  return VPMM_OK;
}

void show_view_min_size(const PoolOptions& o, int32_t, vpmm_config* c) {
  c->view_min_size = o.view_min_size ? o.view_min_size : VPMM_VIEWS_OFF;
}

// --- The table, made from config/option_list.hpp ----------------------------

using ParseFn = bool (*)(const char*, vpmm_config*, Refusal*);
using ResolveFn = vpmm_status (*)(const vpmm_config&, Backend&, const char*, PoolOptions*);
using ShowFn = void (*)(const PoolOptions&, int32_t, vpmm_config*);
constexpr uint32_t kNoField = UINT32_MAX;

// A row's parser as the table stores it: one that reads the whole config as
// it is, one of a single value bound to the row's field.
// A parser without a Refusal gives none: the message then quotes the row's
// help instead.
template <auto Field, auto Parse>
constexpr ParseFn parser() {
  using F = decltype(Parse);
  using T = decltype(&(std::declval<vpmm_config*>()->*Field));
  if constexpr (std::is_null_pointer_v<F>)
    return nullptr;
  else if constexpr (std::is_convertible_v<F, ParseFn>)
    return Parse;
  else if constexpr (std::is_invocable_r_v<bool, F, const char*, vpmm_config*>)
    return [](const char* v, vpmm_config* c, Refusal*) { return Parse(v, c); };
  else if constexpr (std::is_invocable_r_v<bool, F, const char*, T, Refusal*>)
    return [](const char* v, vpmm_config* c, Refusal* why) { return Parse(v, &(c->*Field), why); };
  else
    return [](const char* v, vpmm_config* c, Refusal*) { return Parse(v, &(c->*Field)); };
}

// A pool option's resolve: its own, or the caller's value with 0 meaning
// PoolOptions' default.
template <auto CField, auto PField, auto Resolve>
constexpr ResolveFn pool_resolver() {
  if constexpr (std::is_null_pointer_v<decltype(Resolve)>)
    return [](const vpmm_config& c, Backend&, const char*, PoolOptions* o) -> vpmm_status {
      o->*PField = c.*CField != 0 ? c.*CField : PoolOptions().*PField;
      return VPMM_OK;
    };
  else
    return Resolve;
}

// A pool option's show: its own, or the member as resolved.
template <auto CField, auto PField, auto Show>
constexpr ShowFn pool_shower() {
  if constexpr (std::is_null_pointer_v<decltype(Show)>)
    return [](const PoolOptions& o, int32_t, vpmm_config* c) { c->*CField = o.*PField; };
  else
    return Show;
}

// The C type each kind of value is stored in.
template <typename T>
constexpr bool kind_fits(int32_t kind) {
  switch (kind) {
    case VPMM_OPTION_BACKEND:
    case VPMM_OPTION_INT32: return std::is_same_v<T, int32_t>;
    case VPMM_OPTION_FRACTION: return std::is_same_v<T, double>;
    case VPMM_OPTION_SIZE:
    case VPMM_OPTION_COUNT:
    case VPMM_OPTION_LIMIT:
    case VPMM_OPTION_HANDLE_SIZE:
    case VPMM_OPTION_DEVICE_LIST: return std::is_same_v<T, uint64_t>;
    case VPMM_OPTION_TEXT: return std::is_same_v<T, const char*>;  // most are settings, without a field
    default: return false;  // LOG_LEVEL is a setting, without a field
  }
}
#define VPMM_POOL_OPTION(name, env, kind, ...)                                       \
  static_assert(kind_fits<decltype(vpmm_config::name)>(VPMM_OPTION_##kind),          \
                "option_list.hpp: " #name "'s kind " #kind " does not fit its field's C type");
#define VPMM_FIELD_OPTION VPMM_POOL_OPTION
#define VPMM_SETTING_OPTION(...)
#include "config/option_list.hpp"
#undef VPMM_POOL_OPTION
#undef VPMM_FIELD_OPTION
#undef VPMM_SETTING_OPTION

#define VPMM_FIELD_(field) \
  static_cast<uint32_t>(offsetof(vpmm_config, field)), static_cast<uint32_t>(sizeof(vpmm_config::field))
#define VPMM_POOL_OPTION(name, env, kind, pool_default, parse, default_text, help, check, resolve, show) \
  {#name,                                                                                             \
   env,                                                                                               \
   VPMM_OPTION_##kind,                                                                                \
   VPMM_FIELD_(name),                                                                                 \
   parser<&vpmm_config::name, parse>(),                                                               \
   default_text,                                                                                      \
   help,                                                                                              \
   check,                                                                                             \
   pool_resolver<&vpmm_config::name, &PoolOptions::name, resolve>(),                                 \
   pool_shower<&vpmm_config::name, &PoolOptions::name, show>()},
#define VPMM_FIELD_OPTION(name, env, kind, parse, default_text, help, check, resolve, show) \
  {#name, env, VPMM_OPTION_##kind, VPMM_FIELD_(name), parser<&vpmm_config::name, parse>(), \
   default_text, help, check, resolve, show},
// A process-wide setting (common/settings.hpp) as a row of this table: no
// field, nothing to resolve; `vpmm info` shows its variable. `parse` is set
// only for VPMM_LOG, the one such variable vpmm_config_init judges.
#define VPMM_SETTING_OPTION(s, parse)                                                          \
  {setting(Setting::s).name, setting(Setting::s).env, setting(Setting::s).kind, kNoField, 0, parse, \
   setting(Setting::s).default_text, setting(Setting::s).help, nullptr, nullptr, nullptr},

// THE option table, a row per line of config/option_list.hpp. Order is ABI
// (config_error = index + 1): append only. The environment is applied in
// this order, so page_size is read before max_handle_size (whose "Np" counts
// pages of it); config_resolve runs the rows in this order too (the sizes,
// then the fractions).
constexpr OptionDef kOptions[] = {
#include "config/option_list.hpp"
};
constexpr uint32_t kOptionCount = sizeof kOptions / sizeof kOptions[0];
#undef VPMM_POOL_OPTION
#undef VPMM_FIELD_OPTION
#undef VPMM_SETTING_OPTION
#undef VPMM_FIELD_

}  // namespace

const OptionDef* options(uint32_t* count) {
  *count = kOptionCount;
  return kOptions;
}

const OptionDef* find_option(const char* name, uint32_t* index) {
  if (!name) return nullptr;
  for (uint32_t i = 0; i < kOptionCount; ++i)
    if (std::strcmp(kOptions[i].name, name) == 0 ||
        (kOptions[i].env && std::strcmp(kOptions[i].env, name) == 0)) {
      if (index) *index = i;
      return &kOptions[i];
    }
  return nullptr;
}

// VPMM_MAX_HANDLE_SIZE also takes "unlimited" and pages: "Np" is N pages of
// VPMM_PAGE_SIZE (read before it), or of the 2 MiB page every backend
// defaults to. The replay tool's `--max-handle-size 1p` and the docs use this
// spelling; rejecting it made PyTorch hooks fail on a setting the docs name.
bool parse_device_list(const char* v, uint64_t* out, Refusal* why) {
  // "1,3" (ordinals 0-63, each once, any order), or "" / "none" for no peer.
  static const char* const accepted =
      "accepted: device ordinals from 0 to 63 separated by commas, each once (\"1,3\"), or \"none\"";
  uint64_t mask = 0;
  if (*v == '\0' || std::strcmp(v, "none") == 0) {
    *out = 0;
    return true;
  }
  const char* p = v;
  for (;;) {
    if (*p < '0' || *p > '9') return refuse(why, "not a list of ordinals; %s", accepted);
    unsigned d = 0;
    while (*p >= '0' && *p <= '9') {
      d = d * 10 + static_cast<unsigned>(*p - '0');
      if (d > 63) return refuse(why, "out of range (an ordinal above 63); %s", accepted);
      ++p;
    }
    // Listed twice: a typo, not a wish.
    if (mask & (uint64_t(1) << d)) return refuse(why, "device %u listed twice; %s", d, accepted);
    mask |= uint64_t(1) << d;
    if (*p == '\0') break;
    if (*p != ',') return refuse(why, "not a list of ordinals; %s", accepted);
    ++p;
  }
  *out = mask;
  return true;
}

bool parse_handle_size(const char* v, uint64_t page_size, uint64_t* out, Refusal* why) {
  static const char* const accepted =
      "accepted: a byte count (\"64M\", at most 2^64 - 1), a count of pages (\"32p\", at least 1) or "
      "\"unlimited\"";
  if (std::strcmp(v, "unlimited") == 0) {
    *out = VPMM_HANDLE_SIZE_UNLIMITED;
    return true;
  }
  size_t n = std::strlen(v);
  while (n > 0 && std::isspace(static_cast<unsigned char>(v[n - 1]))) --n;
  Refusal size_why;
  if (n > 1 && (v[n - 1] == 'p' || v[n - 1] == 'P')) {
    std::string count(v, n - 1);
    uint64_t pages = 0;
    const uint64_t page = page_size ? page_size : kDefaultPageSize;
    if (parse_size(count.c_str(), &pages, &size_why)) {
      if (pages == 0) return refuse(why, "out of range (0 pages); %s", accepted);
      if (pages > UINT64_MAX / page) return refuse(why, "overflows 64 bits in bytes; %s", accepted);
      *out = pages * page;
      return true;
    }
  } else if (parse_size(v, out, &size_why)) {
    return true;
  }
  char* cut = std::strchr(size_why.text, ';');
  if (cut) *cut = '\0';
  return refuse(why, "%s; %s", size_why.text, accepted);
}


bool parse_size(const char* text, uint64_t* out, Refusal* why) {
  if (!text) return refuse(why, "missing; accepted: " VPMM_SIZE_FORMAT_);
  while (std::isspace(static_cast<unsigned char>(*text))) ++text;
  // Rejects "", "-1", "+1".
  if (*text == '-') return refuse(why, "negative; accepted: " VPMM_SIZE_FORMAT_);
  if (!std::isdigit(static_cast<unsigned char>(*text)))
    return refuse(why, "%s; accepted: " VPMM_SIZE_FORMAT_, *text ? "not a number" : "empty");
  errno = 0;
  char* end = nullptr;
  // Decimal, or hex with 0x: never octal ("010" is ten, "08" is eight).
  const bool hex = text[0] == '0' && (text[1] == 'x' || text[1] == 'X');
  unsigned long long v = std::strtoull(text, &end, hex ? 16 : 10);
  if (errno == ERANGE) return refuse(why, "overflows 64 bits; accepted: " VPMM_SIZE_FORMAT_);
  if (end == text) return refuse(why, "not a number; accepted: " VPMM_SIZE_FORMAT_);
  uint64_t mult = 1;
  switch (std::toupper(static_cast<unsigned char>(*end))) {
    case 'K': mult = 1ull << 10; ++end; break;
    case 'M': mult = 1ull << 20; ++end; break;
    case 'G': mult = 1ull << 30; ++end; break;
    case 'T': mult = 1ull << 40; ++end; break;
    default: break;
  }
  if (mult != 1 && (*end == 'i' || *end == 'I')) ++end;  // "2MiB"-style
  if (mult != 1 && (*end == 'b' || *end == 'B')) ++end;
  while (std::isspace(static_cast<unsigned char>(*end))) ++end;
  if (*end != '\0') return refuse(why, "unknown suffix \"%.16s\"; accepted: " VPMM_SIZE_FORMAT_, end);
  if (v != 0 && mult > UINT64_MAX / v) return refuse(why, "overflows 64 bits; accepted: " VPMM_SIZE_FORMAT_);
  *out = static_cast<uint64_t>(v) * mult;
  return true;
}

void config_defaults(vpmm_config* c) {
  std::memset(c, 0, sizeof *c);
  c->struct_size = sizeof *c;
  c->backend = VPMM_BACKEND_AUTO;
}

namespace {
// The environment's rows before `row`, as config_apply_env read them.
void config_apply_env_before(vpmm_config* c, uint32_t row) {
  for (uint32_t i = 0; i < row && i < kOptionCount; ++i) {
    if (!kOptions[i].parse) continue;
    const char* v = std::getenv(kOptions[i].env);
    if (v) kOptions[i].parse(v, c, nullptr);
  }
}
}  // namespace

int32_t config_apply_env(vpmm_config* c) {
  for (uint32_t i = 0; i < kOptionCount; ++i) {
    if (!kOptions[i].parse) continue;
    const char* v = std::getenv(kOptions[i].env);
    if (v && !kOptions[i].parse(v, c, nullptr)) return static_cast<int32_t>(i) + 1;
  }
  return 0;
}

void config_init(vpmm_config* out, uint32_t size, bool env) {
  vpmm_config c;
  config_defaults(&c);
  if (env) c.config_error = config_apply_env(&c);
  c.struct_size = std::min<uint32_t>(size, sizeof c);
  std::memcpy(out, &c, c.struct_size);
}

vpmm_status config_read(const vpmm_config* in, const char* call, vpmm_config* out) {
  config_defaults(out);
  if (!in) {
    out->config_error = config_apply_env(out);
  } else {
    const uint32_t min_size = kConfigMinSize;
    if (in->struct_size < min_size || in->struct_size > 65536)
      return fail(VPMM_ERR_INVALID_ARGUMENT,
                  "%s: config->struct_size %u is not a vpmm_config size (expected %u; set it with "
                  "vpmm_config_init)",
                  call, in->struct_size, (unsigned)sizeof(vpmm_config));
    std::memcpy(out, in, std::min<size_t>(in->struct_size, sizeof *out));
    out->struct_size = sizeof *out;
  }
  if (out->config_error) {
    const int64_t i = static_cast<int64_t>(out->config_error) - 1;
    if (i < 0 || i >= kOptionCount || !kOptions[i].parse)
      return fail(VPMM_ERR_INVALID_ARGUMENT, "%s: config->config_error %d is not valid", call,
                  out->config_error);
    // The parser, run again on the text, says why (on a scratch config:
    // parsers that read other rows read them as the environment set them).
    const char* v = std::getenv(kOptions[i].env);
    vpmm_config scratch;
    config_defaults(&scratch);
    config_apply_env_before(&scratch, static_cast<uint32_t>(i));
    Refusal why;
    if (!v || kOptions[i].parse(v, &scratch, &why))
      refuse(&why, "it changed since vpmm_config_init read it");
    else if (why.text[0] == '\0')
      refuse(&why, "accepted: %s", kOptions[i].help);
    return fail(VPMM_ERR_INVALID_ARGUMENT, "%s: environment variable %s=\"%.64s\" is malformed: %s",
                call, kOptions[i].env, v ? v : "", why.text);
  }
  for (const OptionDef& d : kOptions) {
    if (!d.check) continue;
    vpmm_status st = d.check(*out, call);
    if (st != VPMM_OK) return st;
  }
  return VPMM_OK;
}

namespace {

// The rules that involve several options, and only those.

// The watermarks: stop <= trigger, both within [0, 1].
vpmm_status check_watermarks(const PoolOptions& o, const char* call) {
  if (!(o.watermark_trigger > 0.0 && o.watermark_trigger <= 1.0) ||
      !(o.watermark_stop >= 0.0 && o.watermark_stop <= o.watermark_trigger))
    return fail(VPMM_ERR_INVALID_ARGUMENT,
                "%s: watermarks trigger %g / stop %g must satisfy 0 <= stop <= trigger <= 1", call,
                o.watermark_trigger, o.watermark_stop);
  return VPMM_OK;
}

// The capacity: the backend's memory holds a page; memory_limit and
// memory_limit_fraction of that memory make one cap in whole pages (at least
// one); initial_pages fit under it.
vpmm_status resolve_capacity(const vpmm_config& c, Backend& b, const char* call, PoolOptions* o) {
  uint64_t free_b = 0, total = 0;
  if ((b.capabilities() & kCapMemInfo) && b.mem_info(&free_b, &total) == VPMM_OK) o->device_total = total;
  if (o->device_total && o->device_total < o->page_size)
    return fail(VPMM_ERR_INVALID_ARGUMENT,
                "%s: the %s backend has %" PRIu64 " bytes of memory (host_capacity on the host "
                "backend), less than one page of %" PRIu64 ": the pool could never allocate",
                call, b.name(), o->device_total, o->page_size);
  o->memory_limit = c.memory_limit;
  if (c.memory_limit_fraction > 0.0 && o->device_total) {
    uint64_t f = static_cast<uint64_t>(c.memory_limit_fraction * static_cast<double>(o->device_total));
    // A cap that rounds to nothing is the smallest cap (one page, below), not
    // "no limit": 0 means unlimited to everything downstream.
    f = std::max<uint64_t>(f, 1);
    if (o->memory_limit == 0 || f < o->memory_limit) o->memory_limit = f;
  }
  if (o->memory_limit)
    o->memory_limit = std::max(o->page_size, o->memory_limit / o->page_size * o->page_size);
  if (o->memory_limit && o->initial_pages * o->page_size > o->memory_limit)
    return fail(VPMM_ERR_INVALID_ARGUMENT,
                "%s: initial_pages %" PRIu64 " x page_size %" PRIu64 " exceed memory_limit %" PRIu64,
                call, o->initial_pages, o->page_size, o->memory_limit);
  return VPMM_OK;
}

}  // namespace

BackendParams config_backend_params(const vpmm_config& c) {
  BackendParams bp;
  bp.device = c.device;
  bp.host_capacity = c.host_capacity;
  bp.hip_chunk_size = c.hip_chunk_size;
  bp.peer_devices = c.peer_devices;
  bp.exportable = c.exportable != 0;
  return bp;
}

vpmm_status config_resolve(const vpmm_config& c, Backend& b, PoolOptions* out) {
  const char* call = "vpmm_pool_create";
  PoolOptions o;
  // The sizes first, then the fractions: a configuration wrong in both ways
  // is told about its size, as it always was.
  for (const bool fractions : {false, true})
    for (const OptionDef& d : kOptions) {
      if (!d.resolve || (d.kind == VPMM_OPTION_FRACTION) != fractions) continue;
      vpmm_status st = d.resolve(c, b, call, &o);
      if (st != VPMM_OK) return st;
    }
  vpmm_status st = check_watermarks(o, call);
  if (st == VPMM_OK) st = resolve_capacity(c, b, call, &o);
  if (st == VPMM_OK) *out = o;
  return st;
}

void config_effective(const PoolOptions& o, int32_t backend_kind, vpmm_config* c) {
  for (const OptionDef& d : kOptions)
    if (d.show) d.show(o, backend_kind, c);
  c->config_error = 0;
}

}  // namespace vpmm
