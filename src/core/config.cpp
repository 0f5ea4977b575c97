// Configuration defaults, environment parsing and validation (see config.hpp).
// A malformed variable is never replaced by a default: the caller learns of
// it from vpmm_pool_create, with the variable and its value in the message.
#include "core/config.hpp"

#include <cctype>
#include <cinttypes>
#include <cstdlib>
#include <algorithm>
#include <cstring>
#include <string>

#include "core/error.hpp"

namespace vpmm {

namespace {
const EnvOption kEnv[] = {
    {"VPMM_BACKEND", "auto|cuda|hip|host"},
    {"VPMM_DEVICE", "device ordinal"},
    {"VPMM_PAGE_SIZE", "page size in bytes (K/M/G suffixes)"},
    {"VPMM_VA_SIZE", "VA chunk size in bytes"},
    {"VPMM_PAGES", "pages created at pool creation"},
    {"VPMM_HOST_CAPACITY", "host backend physical bytes"},
    {"VPMM_MAX_HANDLE_SIZE", "handle policy: 0 = scaled (default), \"unlimited\" = one per growth, \"1p\" = page handles, or a size"},
    {"VPMM_SMALL_SIZE", "largest request served from shared pages"},
    {"VPMM_BACKUP_CACHE_SIZE", "pinned host bytes kept for pause backups"},
    {"VPMM_MEMORY_LIMIT", "hard cap on mapped bytes (\"8G\") or a share of device memory (\"80%\")"},
    {"VPMM_BACKUP_PINNED_LIMIT", "most pinned host bytes held for pause backups"},
};
constexpr int kEnvCount = sizeof kEnv / sizeof kEnv[0];

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
}  // namespace

// VPMM_MAX_HANDLE_SIZE also takes "unlimited" and pages: "Np" is N pages of
// VPMM_PAGE_SIZE (read before it), or of the 2 MiB page every backend
// defaults to. The replay tool's `--max-handle-size 1p` and the docs use this
// spelling; rejecting it made PyTorch hooks fail on a setting the docs name.
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

const EnvOption* env_options(int* count) {
  *count = kEnvCount;
  return kEnv;
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
  for (int i = 0; i < kEnvCount; ++i) {
    const char* v = std::getenv(kEnv[i].name);
    if (!v) continue;
    bool ok = false;
    switch (i) {
      case 0: ok = parse_backend(v, &c->backend); break;
      case 1: ok = parse_int(v, &c->device); break;
      case 2: ok = parse_size(v, &c->page_size); break;
      case 3: ok = parse_size(v, &c->va_size); break;
      case 4: ok = parse_size(v, &c->initial_pages); break;
      case 5: ok = parse_size(v, &c->host_capacity); break;
      case 6: ok = parse_handle_size(v, c->page_size, &c->max_handle_size); break;
      case 7: ok = parse_size(v, &c->small_size); break;
      case 8: ok = parse_size(v, &c->backup_cache_size); break;
      case 9: ok = parse_limit(v, c); break;
      case 10: ok = parse_size(v, &c->backup_pinned_limit); break;
    }
    if (!ok) return i + 1;
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
    int n = 0;
    const EnvOption* opts = env_options(&n);
    int i = out->config_error - 1;
    if (i < 0 || i >= n)
      return fail(VPMM_ERR_INVALID_ARGUMENT, "%s: config->config_error %d is not valid", call,
                  out->config_error);
    const char* v = std::getenv(opts[i].name);
    return fail(VPMM_ERR_INVALID_ARGUMENT, "%s: environment variable %s=\"%s\" is malformed (%s)",
                call, opts[i].name, v ? v : "", opts[i].help);
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
  o.backup_cache_size = c.backup_cache_size;
  o.backup_pinned_limit = c.backup_pinned_limit;
  if (!(c.memory_limit_fraction >= 0.0 && c.memory_limit_fraction <= 1.0))
    return fail(VPMM_ERR_INVALID_ARGUMENT, "%s: memory_limit_fraction %g is not within [0, 1]", call,
                c.memory_limit_fraction);
  o.watermark_trigger = c.watermark_trigger != 0.0 ? c.watermark_trigger : 0.85;
  o.watermark_stop = c.watermark_stop != 0.0 ? c.watermark_stop : 0.65;
  if (!(o.watermark_trigger > 0.0 && o.watermark_trigger <= 1.0) ||
      !(o.watermark_stop >= 0.0 && o.watermark_stop <= o.watermark_trigger))
    return fail(VPMM_ERR_INVALID_ARGUMENT,
                "%s: watermarks trigger %g / stop %g must satisfy 0 <= stop <= trigger <= 1", call,
                o.watermark_trigger, o.watermark_stop);
  uint64_t free_b = 0, total = 0;
  if ((b.capabilities() & kCapMemInfo) && b.mem_info(&free_b, &total) == VPMM_OK) o.device_total = total;
  o.memory_limit = c.memory_limit;
  if (c.memory_limit_fraction > 0.0 && o.device_total) {
    uint64_t f = static_cast<uint64_t>(c.memory_limit_fraction * static_cast<double>(o.device_total));
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
