// Configuration defaults, environment parsing and validation (see config.hpp).
// A malformed variable is never replaced by a default: the caller learns of
// it from vpmm_pool_create, with the variable and its value in the message.
#include "config/config.hpp"

#include <cctype>
#include <cinttypes>
#include <cstdlib>
#include <algorithm>
#include <cstddef>
#include <cstring>
#include <string>

#include "common/status.hpp"

namespace vpmm {

namespace {

bool parse_backend(const char* v, int32_t* out) {
  struct {
    const char* name;
    int32_t value;
  } names[] = {{"auto", VPMM_BACKEND_AUTO}, {"cuda", VPMM_BACKEND_CUDA},
               {"hip", VPMM_BACKEND_HIP}, {"host", VPMM_BACKEND_HOST}};
  for (const auto& n : names)
    if (strcasecmp(v, n.name) == 0) {
      *out = n.value;
      return true;
    }
  return false;
}

// "8G" = bytes; "80%" = a fraction of device memory.
bool parse_limit(const char* v, vpmm_config* c) {
  size_t n = std::strlen(v);
  if (n > 1 && v[n - 1] == '%') {
    char* end = nullptr;
    double pct = std::strtod(v, &end);
    if (end != v + n - 1 || !(pct > 0.0 && pct <= 100.0)) return false;
    c->memory_limit_fraction = pct / 100.0;
    return true;
  }
  return parse_size(v, &c->memory_limit);
}

// VPMM_REMAP_SLACK: "0.02", "2%", or "exact" (page-exact: a negative value).
bool parse_remap_slack(const char* v, vpmm_config* c) {
  if (std::strcmp(v, "exact") == 0) {
    c->remap_slack = -1.0;
    return true;
  }
  const size_t n = std::strlen(v);
  const bool pct = n > 1 && v[n - 1] == '%';
  char* end = nullptr;
  double x = std::strtod(v, &end);
  if (n == 0 || end != v + n - (pct ? 1 : 0) || !(x >= 0.0 && x <= (pct ? 100.0 : 1.0))) return false;
  c->remap_slack = pct ? x / 100.0 : x;
  return true;
}

// VPMM_VIEW_MIN_SIZE: a size, or "off" (VPMM_VIEWS_OFF).
bool parse_view_min_size(const char* v, vpmm_config* c) {
  if (strcasecmp(v, "off") == 0) {
    c->view_min_size = VPMM_VIEWS_OFF;
    return true;
  }
  return parse_size(v, &c->view_min_size);
}

bool parse_int(const char* v, int32_t* out) {
  uint64_t x = 0;
  if (!parse_size(v, &x) || x > INT32_MAX) return false;
  *out = static_cast<int32_t>(x);
  return true;
}

// The table's parsers: one per environment variable, each writing its field.
#define VPMM_SIZE_PARSER_(field) \
  [](const char* v, vpmm_config* c) { return parse_size(v, &c->field); }
#define VPMM_FIELD_(field) \
  static_cast<uint32_t>(offsetof(vpmm_config, field)), \
      static_cast<uint32_t>(sizeof(vpmm_config::field))
constexpr uint32_t kNoField = UINT32_MAX;

// Rows whose value reaches the pool unchanged, and is shown as it is.
#define VPMM_COPY_(field) \
  [](const vpmm_config& c, Backend&, const char*, PoolOptions* o) { \
    o->field = c.field;                                           \
    return VPMM_OK;                                               \
  }
#define VPMM_SHOW_(field) [](const PoolOptions& o, int32_t, vpmm_config* c) { c->field = o.field; }

// --- Each option's own default and validation -------------------------------
// A resolve function runs in table order, so it may read what rows before it
// resolved: everything measured in pages reads the page_size of row 2.

vpmm_status check_backend(const vpmm_config& c, const char* call) {
  if (c.backend < VPMM_BACKEND_AUTO || c.backend > VPMM_BACKEND_HOST)
    return fail(VPMM_ERR_INVALID_ARGUMENT, "%s: config->backend %d is not a VPMM_BACKEND_* value",
                call, c.backend);
  return VPMM_OK;
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

bool parse_log(const char* v, vpmm_config*) {
  LogLevel l;
  return parse_log_level(v, &l);
}

// A process-wide setting (common/settings.hpp) as a row of this table: no
// field, nothing to resolve; `vpmm info` shows its variable. `parse` is set
// only for VPMM_LOG, the one such variable vpmm_config_init judges.
#define VPMM_SETTING_(s, parse)                                                         \
  setting(s).name, setting(s).env, setting(s).kind, kNoField, 0, parse,                 \
      setting(s).default_text, setting(s).help, nullptr, nullptr, nullptr

// THE option table. Order is ABI (config_error = index + 1): append only.
// The environment is applied in this order, so page_size is read before
// max_handle_size (whose "Np" counts pages of it); config_resolve runs the
// rows in this order too (the sizes, then the fractions).
// Columns: name, variable, kind, field, parser of the variable, default, help,
// check (before the backend exists), resolve (default and validation against
// the backend), show (the effective value vpmm_pool_get_config returns).
const OptionDef kOptions[] = {
    {"backend", "VPMM_BACKEND", VPMM_OPTION_BACKEND, VPMM_FIELD_(backend),
     [](const char* v, vpmm_config* c) { return parse_backend(v, &c->backend); }, "auto",
     "auto|cuda|hip|host: auto picks CUDA when a GPU is usable, else host", check_backend, nullptr,
     [](const PoolOptions&, int32_t kind, vpmm_config* c) { c->backend = kind; }},
    {"device", "VPMM_DEVICE", VPMM_OPTION_INT32, VPMM_FIELD_(device),
     [](const char* v, vpmm_config* c) { return parse_int(v, &c->device); }, "0",
     "device ordinal (ignored by the host backend)", check_device, nullptr, nullptr},
    {"page_size", "VPMM_PAGE_SIZE", VPMM_OPTION_SIZE, VPMM_FIELD_(page_size),
     VPMM_SIZE_PARSER_(page_size), "0 (the backend's granularity: 2 MiB on CUDA and host)",
     "accounting unit in bytes, a multiple of the backend granularity", nullptr, resolve_page_size,
     VPMM_SHOW_(page_size)},
    {"va_size", "VPMM_VA_SIZE", VPMM_OPTION_SIZE, VPMM_FIELD_(va_size), VPMM_SIZE_PARSER_(va_size),
     "0 (backend default: 8 TiB on CUDA, 64 GiB on host)",
     "bytes of VA reserved per chunk (more chunks are reserved on demand)", nullptr, resolve_va_size,
     VPMM_SHOW_(va_size)},
    {"initial_pages", "VPMM_PAGES", VPMM_OPTION_COUNT, VPMM_FIELD_(initial_pages),
     VPMM_SIZE_PARSER_(initial_pages), "0", "pages mapped when the pool is created", nullptr,
     resolve_initial_pages, nullptr},
    // Shown as the host backend's capacity; the other backends ignore it.
    {"host_capacity", "VPMM_HOST_CAPACITY", VPMM_OPTION_SIZE, VPMM_FIELD_(host_capacity),
     VPMM_SIZE_PARSER_(host_capacity), "0 (1 GiB)", "host backend: physical bytes it may hand out",
     nullptr, nullptr,
     [](const PoolOptions& o, int32_t kind, vpmm_config* c) {
       if (kind == VPMM_BACKEND_HOST) c->host_capacity = o.device_total;
     }},
    {"max_handle_size", "VPMM_MAX_HANDLE_SIZE", VPMM_OPTION_HANDLE_SIZE, VPMM_FIELD_(max_handle_size),
     [](const char* v, vpmm_config* c) { return parse_handle_size(v, c->page_size, &c->max_handle_size); },
     "0 (scaled handles: max(page_size, growth / 128))",
     "handle policy: 0 = scaled, \"unlimited\" = one per growth, \"1p\" = page handles, or a cap",
     nullptr, resolve_max_handle_size, VPMM_SHOW_(max_handle_size)},
    {"small_size", "VPMM_SMALL_SIZE", VPMM_OPTION_SIZE, VPMM_FIELD_(small_size),
     VPMM_SIZE_PARSER_(small_size), "0 (page_size / 2)",
     "largest request served from shared pages (below 256 turns them off)", nullptr,
     resolve_small_size, VPMM_SHOW_(small_size)},
    {"backup_cache_size", "VPMM_BACKUP_CACHE_SIZE", VPMM_OPTION_SIZE, VPMM_FIELD_(backup_cache_size),
     VPMM_SIZE_PARSER_(backup_cache_size), "0 (keep everything pinned so far)",
     "pinned host bytes kept cached for pause backups after a resume", nullptr,
     VPMM_COPY_(backup_cache_size), VPMM_SHOW_(backup_cache_size)},
    // Resolved by resolve_capacity (below), with the fraction and
    // the backend's memory.
    {"memory_limit", "VPMM_MEMORY_LIMIT", VPMM_OPTION_LIMIT, VPMM_FIELD_(memory_limit), parse_limit,
     "0 (none)", "hard cap on mapped bytes (\"8G\") or a share of device memory (\"80%\")", nullptr,
     nullptr, VPMM_SHOW_(memory_limit)},
    {"backup_pinned_limit", "VPMM_BACKUP_PINNED_LIMIT", VPMM_OPTION_SIZE,
     VPMM_FIELD_(backup_pinned_limit), VPMM_SIZE_PARSER_(backup_pinned_limit), "0 (no limit)",
     "most pinned host bytes held for pause backups (beyond it: pageable memory)", nullptr,
     VPMM_COPY_(backup_pinned_limit), VPMM_SHOW_(backup_pinned_limit)},
    {VPMM_SETTING_(Setting::kLog, parse_log)},
    // Shown as the caller set it: the cap it made is memory_limit's value.
    {"memory_limit_fraction", nullptr, VPMM_OPTION_FRACTION, VPMM_FIELD_(memory_limit_fraction),
     nullptr, "0 (none)",
     "cap as a fraction of the device's total memory; the smaller of the two caps wins", nullptr,
     resolve_fraction, nullptr},
    {"watermark_trigger", nullptr, VPMM_OPTION_FRACTION, VPMM_FIELD_(watermark_trigger), nullptr,
     "0 (" VPMM_STR_(VPMM_DEFAULT_WATERMARK_TRIGGER_) ")",
     "pressure starts when mapped >= trigger x capacity", nullptr,
     [](const vpmm_config& c, Backend&, const char*, PoolOptions* o) {
       o->watermark_trigger = c.watermark_trigger != 0.0 ? c.watermark_trigger : kDefaultWatermarkTrigger;
       return VPMM_OK;
     },
     VPMM_SHOW_(watermark_trigger)},
    {"watermark_stop", nullptr, VPMM_OPTION_FRACTION, VPMM_FIELD_(watermark_stop), nullptr,
     "0 (" VPMM_STR_(VPMM_DEFAULT_WATERMARK_STOP_) ")",
     "pressure ends when mapped <= stop x capacity", nullptr,
     [](const vpmm_config& c, Backend&, const char*, PoolOptions* o) {
       o->watermark_stop = c.watermark_stop != 0.0 ? c.watermark_stop : kDefaultWatermarkStop;
       return VPMM_OK;
     },
     VPMM_SHOW_(watermark_stop)},
    // The HIP backend resolves it against the runtime's version (BackendParams).
    {"hip_chunk_size", "VPMM_HIP_CHUNK_SIZE", VPMM_OPTION_HANDLE_SIZE, VPMM_FIELD_(hip_chunk_size),
     [](const char* v, vpmm_config* c) { return parse_handle_size(v, c->page_size, &c->hip_chunk_size); },
     "0 (256 MiB below ROCm 7.0, none from 7.0)",
     "HIP: largest hipMemCreate (chunked path); \"unlimited\" = never chunk", nullptr, nullptr, nullptr},
    // The backend checks it against its devices (BackendParams).
    {"peer_devices", "VPMM_PEER_DEVICES", VPMM_OPTION_DEVICE_LIST, VPMM_FIELD_(peer_devices),
     [](const char* v, vpmm_config* c) { return parse_device_list(v, &c->peer_devices); },
     "none (this device only)",
     "CUDA: devices given access to the pool's memory, e.g. \"1,3\"", nullptr, nullptr, nullptr},
    {"large_rounding", "VPMM_LARGE_ROUNDING", VPMM_OPTION_SIZE, VPMM_FIELD_(large_rounding),
     VPMM_SIZE_PARSER_(large_rounding), "0 (page_size: whole pages)",
     "what untagged requests above small_size round up to: a power of two from 256 to page_size; "
     "below page_size neighbours share pages",
     nullptr, resolve_large_rounding, VPMM_SHOW_(large_rounding)},
    {VPMM_SETTING_(Setting::kHipLibrary, nullptr)},
    {VPMM_SETTING_(Setting::kHipVaRecycle, nullptr)},
    {VPMM_SETTING_(Setting::kHipPageFloor, nullptr)},
    {VPMM_SETTING_(Setting::kPreloadLog, nullptr)},
    {VPMM_SETTING_(Setting::kPreloadTag, nullptr)},
    {VPMM_SETTING_(Setting::kPreloadHostBackup, nullptr)},
    {VPMM_SETTING_(Setting::kPreloadCtl, nullptr)},
    {"remap_slack", "VPMM_REMAP_SLACK", VPMM_OPTION_FRACTION, VPMM_FIELD_(remap_slack), parse_remap_slack,
     "0 (" VPMM_STR_(VPMM_DEFAULT_REMAP_SLACK_) ")",
     "grow instead of remapping pages while mapped stays within (1 + slack) x the bytes asked for; "
     "a value up to 1, a percentage, or \"exact\" (a negative value: always remap)",
     [](const vpmm_config& c, const char* call) {
       if (!(c.remap_slack <= 1.0))  // NaN too
         return fail(VPMM_ERR_INVALID_ARGUMENT, "%s: remap_slack %g is above 1 (or not a number)", call,
                     c.remap_slack);
       return VPMM_OK;
     },
     [](const vpmm_config& c, Backend&, const char*, PoolOptions* o) {
       o->remap_slack = c.remap_slack == 0.0 ? kDefaultRemapSlack : std::max(0.0, c.remap_slack);
       return VPMM_OK;
     },
     [](const PoolOptions& o, int32_t, vpmm_config* c) { c->remap_slack = o.remap_slack > 0.0 ? o.remap_slack : -1.0; }},
    {VPMM_SETTING_(Setting::kBackupDir, nullptr)},
    // The backend honours it (BackendParams): it decides how handles are made.
    {"exportable", "VPMM_EXPORTABLE", VPMM_OPTION_COUNT, VPMM_FIELD_(exportable),
     VPMM_SIZE_PARSER_(exportable),
     "0 (not exportable)",
     "1 = every handle can be shared with other processes (vpmm_pool_export); see docs/ipc.md for the cost",
     check_exportable, nullptr, nullptr},
    {"view_min_size", "VPMM_VIEW_MIN_SIZE", VPMM_OPTION_SIZE, VPMM_FIELD_(view_min_size), parse_view_min_size,
     "0 (" VPMM_DEFAULT_VIEW_MIN_SIZE_TEXT_ ")",
     "smallest request a view may serve (free handles mapped where they lie at a VA of its own, "
     "kept for the next request of its size); \"off\" = never",
     nullptr,
     [](const vpmm_config& c, Backend&, const char*, PoolOptions* o) {
       // Off unless asked for (defaults.hpp, kSuggestedViewMinSize, says why). Exported
       // memory is found by the region map's address: views stay out of
       // exportable pools.
       if (c.view_min_size == 0 || c.view_min_size == VPMM_VIEWS_OFF || c.exportable) {
         o->view_min_size = 0;
       } else {
         const uint64_t want = c.view_min_size;
         o->view_min_size = std::max(o->page_size, (want + o->page_size - 1) / o->page_size * o->page_size);
       }
       return VPMM_OK;
     },
     [](const PoolOptions& o, int32_t, vpmm_config* c) {
       c->view_min_size = o.view_min_size ? o.view_min_size : VPMM_VIEWS_OFF;
     }},
};
constexpr uint32_t kOptionCount = sizeof kOptions / sizeof kOptions[0];
#undef VPMM_SIZE_PARSER_
#undef VPMM_FIELD_
#undef VPMM_COPY_
#undef VPMM_SHOW_
#undef VPMM_SETTING_

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
bool parse_device_list(const char* v, uint64_t* out) {
  // "1,3" (ordinals 0-63, each once, any order), or "" / "none" for no peer.
  uint64_t mask = 0;
  if (*v == '\0' || std::strcmp(v, "none") == 0) {
    *out = 0;
    return true;
  }
  const char* p = v;
  for (;;) {
    if (*p < '0' || *p > '9') return false;
    unsigned d = 0;
    while (*p >= '0' && *p <= '9') {
      d = d * 10 + static_cast<unsigned>(*p - '0');
      if (d > 63) return false;
      ++p;
    }
    if (mask & (uint64_t(1) << d)) return false;  // listed twice: a typo, not a wish
    mask |= uint64_t(1) << d;
    if (*p == '\0') break;
    if (*p != ',') return false;
    ++p;
  }
  *out = mask;
  return true;
}

bool parse_handle_size(const char* v, uint64_t page_size, uint64_t* out) {
  if (std::strcmp(v, "unlimited") == 0) {
    *out = VPMM_HANDLE_SIZE_UNLIMITED;
    return true;
  }
  size_t n = std::strlen(v);
  while (n > 0 && std::isspace(static_cast<unsigned char>(v[n - 1]))) --n;
  if (n > 1 && (v[n - 1] == 'p' || v[n - 1] == 'P')) {
    std::string count(v, n - 1);
    uint64_t pages = 0;
    const uint64_t page = page_size ? page_size : kDefaultPageSize;
    if (!parse_size(count.c_str(), &pages) || pages == 0 || pages > UINT64_MAX / page) return false;
    *out = pages * page;
    return true;
  }
  return parse_size(v, out);
}


bool parse_size(const char* text, uint64_t* out) {
  if (!text) return false;
  while (std::isspace(static_cast<unsigned char>(*text))) ++text;
  if (!std::isdigit(static_cast<unsigned char>(*text))) return false;  // rejects "", "-1", "+1"
  errno = 0;
  char* end = nullptr;
  // Decimal, or hex with 0x: never octal ("010" is ten, "08" is eight).
  const bool hex = text[0] == '0' && (text[1] == 'x' || text[1] == 'X');
  unsigned long long v = std::strtoull(text, &end, hex ? 16 : 10);
  if (errno == ERANGE || end == text) return false;
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
  if (*end != '\0') return false;
  if (v != 0 && mult > UINT64_MAX / v) return false;
  *out = static_cast<uint64_t>(v) * mult;
  return true;
}

void config_defaults(vpmm_config* c) {
  std::memset(c, 0, sizeof *c);
  c->struct_size = sizeof *c;
  c->backend = VPMM_BACKEND_AUTO;
}

int32_t config_apply_env(vpmm_config* c) {
  for (uint32_t i = 0; i < kOptionCount; ++i) {
    if (!kOptions[i].parse) continue;
    const char* v = std::getenv(kOptions[i].env);
    if (v && !kOptions[i].parse(v, c)) return static_cast<int32_t>(i) + 1;
  }
  return 0;
}

vpmm_status config_read(const vpmm_config* in, const char* call, vpmm_config* out) {
  config_defaults(out);
  if (!in) {
    out->config_error = config_apply_env(out);
  } else {
    const uint32_t min_size = offsetof(vpmm_config, host_capacity) + sizeof(uint64_t);
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
    const char* v = std::getenv(kOptions[i].env);
    return fail(VPMM_ERR_INVALID_ARGUMENT, "%s: environment variable %s=\"%s\" is malformed (%s)",
                call, kOptions[i].env, v ? v : "", kOptions[i].help);
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
