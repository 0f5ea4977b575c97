// Configuration defaults, environment parsing and validation (see config.hpp).
// A malformed variable is never replaced by a default: the caller learns of
// it from vpmm_pool_create, with the variable and its value in the message.
#include "core/config.hpp"

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

// THE option table. Order is ABI (config_error = index + 1): append only.
// The environment is applied in this order, so page_size is read before
// max_handle_size (whose "Np" counts pages of it).
const OptionDef kOptions[] = {
    {"backend", "VPMM_BACKEND", VPMM_OPTION_BACKEND, VPMM_FIELD_(backend),
     [](const char* v, vpmm_config* c) { return parse_backend(v, &c->backend); }, "auto",
     "auto|cuda|hip|host: auto picks CUDA when a GPU is usable, else host"},
    {"device", "VPMM_DEVICE", VPMM_OPTION_INT32, VPMM_FIELD_(device),
     [](const char* v, vpmm_config* c) { return parse_int(v, &c->device); }, "0",
     "device ordinal (ignored by the host backend)"},
    {"page_size", "VPMM_PAGE_SIZE", VPMM_OPTION_SIZE, VPMM_FIELD_(page_size),
     VPMM_SIZE_PARSER_(page_size), "0 (the backend's granularity: 2 MiB on CUDA and host)",
     "accounting unit in bytes, a multiple of the backend granularity"},
    {"va_size", "VPMM_VA_SIZE", VPMM_OPTION_SIZE, VPMM_FIELD_(va_size), VPMM_SIZE_PARSER_(va_size),
     "0 (backend default: 8 TiB on CUDA, 64 GiB on host)",
     "bytes of VA reserved per chunk (more chunks are reserved on demand)"},
    {"initial_pages", "VPMM_PAGES", VPMM_OPTION_COUNT, VPMM_FIELD_(initial_pages),
     VPMM_SIZE_PARSER_(initial_pages), "0", "pages mapped when the pool is created"},
    {"host_capacity", "VPMM_HOST_CAPACITY", VPMM_OPTION_SIZE, VPMM_FIELD_(host_capacity),
     VPMM_SIZE_PARSER_(host_capacity), "0 (1 GiB)", "host backend: physical bytes it may hand out"},
    {"max_handle_size", "VPMM_MAX_HANDLE_SIZE", VPMM_OPTION_HANDLE_SIZE, VPMM_FIELD_(max_handle_size),
     [](const char* v, vpmm_config* c) { return parse_handle_size(v, c->page_size, &c->max_handle_size); },
     "0 (scaled handles: max(page_size, growth / 128))",
     "handle policy: 0 = scaled, \"unlimited\" = one per growth, \"1p\" = page handles, or a cap"},
    {"small_size", "VPMM_SMALL_SIZE", VPMM_OPTION_SIZE, VPMM_FIELD_(small_size),
     VPMM_SIZE_PARSER_(small_size), "0 (page_size / 2)",
     "largest request served from shared pages (below 256 turns them off)"},
    {"backup_cache_size", "VPMM_BACKUP_CACHE_SIZE", VPMM_OPTION_SIZE, VPMM_FIELD_(backup_cache_size),
     VPMM_SIZE_PARSER_(backup_cache_size), "0 (keep everything pinned so far)",
     "pinned host bytes kept cached for pause backups after a resume"},
    {"memory_limit", "VPMM_MEMORY_LIMIT", VPMM_OPTION_LIMIT, VPMM_FIELD_(memory_limit), parse_limit,
     "0 (none)", "hard cap on mapped bytes (\"8G\") or a share of device memory (\"80%\")"},
    {"backup_pinned_limit", "VPMM_BACKUP_PINNED_LIMIT", VPMM_OPTION_SIZE,
     VPMM_FIELD_(backup_pinned_limit), VPMM_SIZE_PARSER_(backup_pinned_limit), "0 (no limit)",
     "most pinned host bytes held for pause backups (beyond it: pageable memory)"},
    {"log", "VPMM_LOG", VPMM_OPTION_LOG_LEVEL, kNoField, 0,
     [](const char* v, vpmm_config*) {
       LogLevel l;
       return parse_log_level(v, &l);
     },
     "warn", "off|error|warn|info|debug: what the allocator hooks report on stderr"},
    {"memory_limit_fraction", nullptr, VPMM_OPTION_FRACTION, VPMM_FIELD_(memory_limit_fraction),
     nullptr, "0 (none)",
     "cap as a fraction of the device's total memory; the smaller of the two caps wins"},
    {"watermark_trigger", nullptr, VPMM_OPTION_FRACTION, VPMM_FIELD_(watermark_trigger), nullptr,
     "0 (" VPMM_STR_(VPMM_DEFAULT_WATERMARK_TRIGGER_) ")",
     "pressure starts when mapped >= trigger x capacity"},
    {"watermark_stop", nullptr, VPMM_OPTION_FRACTION, VPMM_FIELD_(watermark_stop), nullptr,
     "0 (" VPMM_STR_(VPMM_DEFAULT_WATERMARK_STOP_) ")",
     "pressure ends when mapped <= stop x capacity"},
    {"hip_chunk_size", "VPMM_HIP_CHUNK_SIZE", VPMM_OPTION_HANDLE_SIZE, VPMM_FIELD_(hip_chunk_size),
     [](const char* v, vpmm_config* c) { return parse_handle_size(v, c->page_size, &c->hip_chunk_size); },
     "0 (256 MiB below ROCm 7.0, none from 7.0)",
     "HIP: largest hipMemCreate (chunked path); \"unlimited\" = never chunk"},
    {"peer_devices", "VPMM_PEER_DEVICES", VPMM_OPTION_DEVICE_LIST, VPMM_FIELD_(peer_devices),
     [](const char* v, vpmm_config* c) { return parse_device_list(v, &c->peer_devices); },
     "none (this device only)",
     "CUDA: devices given access to the pool's memory, e.g. \"1,3\""},
    {"large_rounding", "VPMM_LARGE_ROUNDING", VPMM_OPTION_SIZE, VPMM_FIELD_(large_rounding),
     VPMM_SIZE_PARSER_(large_rounding), "0 (page_size: whole pages)",
     "what untagged requests above small_size round up to: a power of two from 256 to page_size; "
     "below page_size neighbours share pages"},
};
constexpr uint32_t kOptionCount = sizeof kOptions / sizeof kOptions[0];
#undef VPMM_SIZE_PARSER_
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

bool parse_log_level(const char* v, LogLevel* out) {
  static const struct {
    const char* name;
    LogLevel level;
  } names[] = {{"off", LogLevel::kOff},   {"error", LogLevel::kError}, {"warn", LogLevel::kWarn},
               {"info", LogLevel::kInfo}, {"debug", LogLevel::kDebug}};
  for (const auto& n : names)
    if (strcasecmp(v, n.name) == 0) {
      *out = n.level;
      return true;
    }
  return false;
}

LogLevel log_level() {
  static const LogLevel level = [] {
    LogLevel l = LogLevel::kWarn;
    const char* v = std::getenv("VPMM_LOG");
    if (v && !parse_log_level(v, &l)) l = LogLevel::kWarn;
    return l;
  }();
  return level;
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
    if (!kOptions[i].env) continue;
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
    if (i < 0 || i >= kOptionCount || !kOptions[i].env)
      return fail(VPMM_ERR_INVALID_ARGUMENT, "%s: config->config_error %d is not valid", call,
                  out->config_error);
    const char* v = std::getenv(kOptions[i].env);
    return fail(VPMM_ERR_INVALID_ARGUMENT, "%s: environment variable %s=\"%s\" is malformed (%s)",
                call, kOptions[i].env, v ? v : "", kOptions[i].help);
  }
  if (out->backend < VPMM_BACKEND_AUTO || out->backend > VPMM_BACKEND_HOST)
    return fail(VPMM_ERR_INVALID_ARGUMENT, "%s: config->backend %d is not a VPMM_BACKEND_* value",
                call, out->backend);
  if (out->device < 0)
    return fail(VPMM_ERR_INVALID_ARGUMENT, "%s: config->device %d is negative", call, out->device);
  return VPMM_OK;
}

vpmm_status config_resolve(const vpmm_config& c, Backend& b, PoolOptions* out) {
  const char* call = "vpmm_pool_create";
  PoolOptions o;
  const uint64_t g = b.granularity();
  o.page_size = c.page_size ? c.page_size : b.recommended_page_size();
  if (o.page_size % g != 0)
    return fail(VPMM_ERR_INVALID_ARGUMENT,
                "%s: page_size %" PRIu64 " is not a multiple of the %s backend granularity %" PRIu64,
                call, o.page_size, b.name(), g);
  o.va_size = c.va_size ? c.va_size : b.default_va_size();
  // A va_size the caller never set is the backend's default: blame the page
  // size that does not divide it, not the default.
  if (c.va_size == 0 && o.va_size % o.page_size != 0)
    return fail(VPMM_ERR_INVALID_ARGUMENT,
                "%s: page_size %" PRIu64 " does not divide the %s backend's default va_size %" PRIu64
                " (use a page_size that does, e.g. a power of two, or set va_size / VPMM_VA_SIZE "
                "to a multiple of it)",
                call, o.page_size, b.name(), o.va_size);
  if (o.va_size % o.page_size != 0 || o.va_size < o.page_size)
    return fail(VPMM_ERR_INVALID_ARGUMENT,
                "%s: va_size %" PRIu64 " is not a non-zero multiple of page_size %" PRIu64, call,
                o.va_size, o.page_size);
  o.initial_pages = c.initial_pages;
  if (o.initial_pages > o.va_size / o.page_size)
    return fail(VPMM_ERR_INVALID_ARGUMENT,
                "%s: initial_pages %" PRIu64 " do not fit in va_size %" PRIu64 " (page_size %" PRIu64 ")",
                call, o.initial_pages, o.va_size, o.page_size);
  o.max_handle_size = c.max_handle_size;
  if (o.max_handle_size != VPMM_HANDLE_SIZE_UNLIMITED && o.max_handle_size % o.page_size != 0)
    return fail(VPMM_ERR_INVALID_ARGUMENT,
                "%s: max_handle_size %" PRIu64 " is not a multiple of page_size %" PRIu64, call,
                o.max_handle_size, o.page_size);
  o.small_size = c.small_size ? c.small_size : o.page_size / 2;
  if (o.small_size > o.page_size)
    return fail(VPMM_ERR_INVALID_ARGUMENT,
                "%s: small_size %" PRIu64 " exceeds page_size %" PRIu64, call, o.small_size,
                o.page_size);
  o.large_rounding = c.large_rounding ? c.large_rounding : o.page_size;
  if (c.large_rounding && (o.large_rounding < kSmallQuantum || (o.large_rounding & (o.large_rounding - 1)) ||
      o.large_rounding > o.page_size || o.page_size % o.large_rounding))
    return fail(VPMM_ERR_INVALID_ARGUMENT,
                "%s: large_rounding %" PRIu64 " is not a power of two from %" PRIu64
                " to page_size %" PRIu64 " dividing it (0 = page_size)",
                call, o.large_rounding, kSmallQuantum, o.page_size);
  o.backup_cache_size = c.backup_cache_size;
  o.backup_pinned_limit = c.backup_pinned_limit;
  if (!(c.memory_limit_fraction >= 0.0 && c.memory_limit_fraction <= 1.0))
    return fail(VPMM_ERR_INVALID_ARGUMENT, "%s: memory_limit_fraction %g is not within [0, 1]", call,
                c.memory_limit_fraction);
  o.watermark_trigger = c.watermark_trigger != 0.0 ? c.watermark_trigger : kDefaultWatermarkTrigger;
  o.watermark_stop = c.watermark_stop != 0.0 ? c.watermark_stop : kDefaultWatermarkStop;
  if (!(o.watermark_trigger > 0.0 && o.watermark_trigger <= 1.0) ||
      !(o.watermark_stop >= 0.0 && o.watermark_stop <= o.watermark_trigger))
    return fail(VPMM_ERR_INVALID_ARGUMENT,
                "%s: watermarks trigger %g / stop %g must satisfy 0 <= stop <= trigger <= 1", call,
                o.watermark_trigger, o.watermark_stop);
  uint64_t free_b = 0, total = 0;
  if ((b.capabilities() & kCapMemInfo) && b.mem_info(&free_b, &total) == VPMM_OK) o.device_total = total;
  if (o.device_total && o.device_total < o.page_size)
    return fail(VPMM_ERR_INVALID_ARGUMENT,
                "%s: the %s backend has %" PRIu64 " bytes of memory (host_capacity on the host "
                "backend), less than one page of %" PRIu64 ": the pool could never allocate",
                call, b.name(), o.device_total, o.page_size);
  o.memory_limit = c.memory_limit;
  if (c.memory_limit_fraction > 0.0 && o.device_total) {
    uint64_t f = static_cast<uint64_t>(c.memory_limit_fraction * static_cast<double>(o.device_total));
    // A cap that rounds to nothing is the smallest cap (one page, below), not
    // "no limit": 0 means unlimited to everything downstream.
    f = std::max<uint64_t>(f, 1);
    if (o.memory_limit == 0 || f < o.memory_limit) o.memory_limit = f;
  }
  if (o.memory_limit) o.memory_limit = std::max(o.page_size, o.memory_limit / o.page_size * o.page_size);
  if (o.memory_limit && o.initial_pages * o.page_size > o.memory_limit)
    return fail(VPMM_ERR_INVALID_ARGUMENT,
                "%s: initial_pages %" PRIu64 " x page_size %" PRIu64 " exceed memory_limit %" PRIu64,
                call, o.initial_pages, o.page_size, o.memory_limit);
  *out = o;
  return VPMM_OK;
}

}  // namespace vpmm
