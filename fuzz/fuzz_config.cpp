// fuzz_config: configuration from every direction.
//
//  1. VPMM_* environment strings (setenv) -> vpmm_config_init, checked
//     against a reference reading of vpmm.h's grammar ("a decimal or 0x-hex
//     integer with an optional K/M/G/T suffix (powers of 1024)"): a value the
//     reference accepts must land in its field, a value it rejects must be
//     the one config_error names (the first malformed variable, in table
//     order). Then config fields of any value -> vpmm_pool_create: an error
//     has a message, a pool that is created reports a consistent effective
//     configuration, allocates, frees and passes its check.
//  2. The trace parser (tools/trace.hpp, built in when scripts/fuzz.sh finds
//     it): parse_trace_text of any text; a parsed trace must satisfy the
//     invariants trace.hpp states; summarize_trace and the replay engine run
//     on it against a model allocator that checks every free reaches the
//     pointer its malloc got. vtrace::parse_size is checked against
//     docs/trace-format.md's grammar.
//
// Leading zeros are decimal ("010" is ten, "08" is eight), as vpmm.h says:
// the library never reads octal, and the reference judges such values too.
#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "fuzz_common.hpp"
#include "vpmm.h"

#ifdef VPMM_FUZZ_TRACE
#include "tools/trace.hpp"
#endif

namespace {

// ---------------------------------------------------------------------------
// Reference grammar
// ---------------------------------------------------------------------------

bool is_ws(char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; }

// Digits of a decimal or 0x-hex integer at s[i...]; false on overflow or no
// digit. Hex digits are greedy.
bool ref_integer(const std::string& s, size_t* i, uint64_t* v) {
  *v = 0;
  size_t start;
  if (s.size() - *i > 2 && s[*i] == '0' && (s[*i + 1] == 'x' || s[*i + 1] == 'X') &&
      std::isxdigit(static_cast<unsigned char>(s[*i + 2]))) {
    *i += 2;
    start = *i;
    while (*i < s.size() && std::isxdigit(static_cast<unsigned char>(s[*i]))) {
      char c = static_cast<char>(std::tolower(static_cast<unsigned char>(s[*i])));
      uint64_t d = static_cast<uint64_t>(std::isdigit(static_cast<unsigned char>(c)) ? c - '0' : c - 'a' + 10);
      if (*v > (UINT64_MAX - d) / 16) return false;
      *v = *v * 16 + d;
      ++*i;
    }
  } else {
    start = *i;
    while (*i < s.size() && std::isdigit(static_cast<unsigned char>(s[*i]))) {
      uint64_t d = static_cast<uint64_t>(s[*i] - '0');
      if (*v > (UINT64_MAX - d) / 10) return false;
      *v = *v * 10 + d;
      ++*i;
    }
  }
  return *i > start;
}

uint64_t suffix_mult(char c) {
  switch (std::toupper(static_cast<unsigned char>(c))) {
    case 'K': return 1ull << 10;
    case 'M': return 1ull << 20;
    case 'G': return 1ull << 30;
    case 'T': return 1ull << 40;
    default: return 0;
  }
}

// The environment's size grammar: [space] INTEGER [K|M|G|T [i] [B]] [space].
enum Verdict { kSkip, kAccept, kReject };
// VPMM_PEER_DEVICES as documented: "" or "none" -> 0; else ordinals 0-63
// separated by single commas, each listed once -> a bit mask.
Verdict ref_device_list(const std::string& v, uint64_t* out) {
  *out = 0;
  if (v.empty() || v == "none") return kAccept;
  size_t i = 0;
  while (true) {
    size_t j = i;
    unsigned d = 0;
    while (j < v.size() && v[j] >= '0' && v[j] <= '9') {
      d = d * 10 + unsigned(v[j++] - '0');
      if (d > 63) return kReject;
    }
    if (j == i) return kReject;
    if (*out & (1ull << d)) return kReject;
    *out |= 1ull << d;
    if (j == v.size()) return kAccept;
    if (v[j] != ',') return kReject;
    i = j + 1;
  }
}

Verdict ref_env_size(const std::string& s, uint64_t* out) {
  size_t i = 0;
  while (i < s.size() && is_ws(s[i])) ++i;
  uint64_t v = 0;
  if (!ref_integer(s, &i, &v)) {
    // strtoull also refuses: no digit, or overflow.
    return kReject;
  }
  uint64_t mult = 1;
  if (i < s.size() && suffix_mult(s[i])) {
    mult = suffix_mult(s[i]);
    ++i;
    if (i < s.size() && (s[i] == 'i' || s[i] == 'I')) ++i;
    if (i < s.size() && (s[i] == 'b' || s[i] == 'B')) ++i;
  }
  while (i < s.size() && is_ws(s[i])) ++i;
  if (i != s.size()) return kReject;
  if (v != 0 && mult > UINT64_MAX / v) return kReject;
  *out = v * mult;
  return kAccept;
}

// ---------------------------------------------------------------------------
// Environment
// ---------------------------------------------------------------------------

// The variables, from the library's option table (never a copy): vars[k]
// is table entry vars[k].index, and config_error = that index + 1.
struct EnvVar {
  uint32_t index;
  vpmm_option_info info;
};
const std::vector<EnvVar>& env_vars() {
  static const std::vector<EnvVar> v = [] {
    std::vector<EnvVar> out;
    for (uint32_t i = 0; i < vpmm_option_count(); ++i) {
      vpmm_option_info o;
      std::memset(&o, 0, sizeof o);
      o.struct_size = sizeof o;
      if (vpmm_option_get(i, &o) == VPMM_OK && o.env) out.push_back({i, o});
    }
    return out;
  }();
  return v;
}

const char* const kSeeds[] = {"host", "auto", "cuda", "hip", "0", "1", "4096", "64K", "2M", "2MiB",
                              "1G", "0x10000", "80%", "100%", "0.5%", " 64k ", "1T", "-1", "",
                              "18446744073709551615", "18446744073709551616", "0x", "1e3", "16KB"};

// A value that is mostly well-formed, sometimes anything.
std::string env_value(fz::Reader& in) {
  uint8_t k = in.u8();
  if (k < 96) return kSeeds[k % (sizeof kSeeds / sizeof kSeeds[0])];
  if (k < 160) {
    std::string s = std::to_string(in.size_like());
    static const char* const kSuffix[] = {"", "K", "M", "G", "T", "k", "KiB", "mb", "B", "i", "%", " ", "x"};
    s += kSuffix[in.u8() % (sizeof kSuffix / sizeof kSuffix[0])];
    return s;
  }
  return in.str(40);
}

// The field a variable writes, as the table's offset and size say.
uint64_t field_of(const vpmm_config& c, const vpmm_option_info& o) {
  const char* p = reinterpret_cast<const char*>(&c) + o.field_offset;
  if (o.field_size == sizeof(int32_t)) {
    int32_t v;
    std::memcpy(&v, p, sizeof v);
    return static_cast<uint64_t>(v);
  }
  uint64_t v = 0;
  if (o.field_size == sizeof v) std::memcpy(&v, p, sizeof v);
  return v;
}

// "unlimited" or a page count ("4p"), as the library reads them: surrounding
// blanks ignored (a "1p\n" once passed the library and failed this check).
bool handle_words(const std::string& v) {
  size_t b = v.find_first_not_of(" \t\n\r\f\v"), e = v.find_last_not_of(" \t\n\r\f\v");
  if (b == std::string::npos) return false;
  const std::string t = v.substr(b, e - b + 1);
  return t == "unlimited" || t.back() == 'p' || t.back() == 'P';
}

void fuzz_env(fz::Reader& in) {
  const std::vector<EnvVar>& vars = env_vars();
  const int kNumVars = static_cast<int>(vars.size());
  for (const EnvVar& e : vars) unsetenv(e.info.env);
  std::map<int, std::string> set;  // by position in vars
  uint16_t mask = in.u16();
  for (int i = 0; i < kNumVars && i < 15; ++i)
    if (mask & (1u << i)) {
      std::string v = env_value(in);
      if (vars[i].info.kind == VPMM_OPTION_BACKEND && (mask & 0x8000)) v = "host";  // mostly keep the backend usable
      setenv(vars[i].info.env, v.c_str(), 1);
      set[i] = v;
    }
  vpmm_config c;
  std::memset(&c, 0xee, sizeof c);
  vpmm_config_init(&c);
  FZ_CHECK(c.struct_size == sizeof c, "struct_size %u", c.struct_size);
  FZ_CHECK(c.config_error >= 0 && c.config_error <= static_cast<int32_t>(vpmm_option_count()),
           "config_error %d", c.config_error);
  // The reference: the first variable it rejects is config_error.
  int want_error = 0;
  bool judged = true;
  auto lower = [](const std::string& v) {
    std::string l;
    for (char ch : v) l += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    return l;
  };
  std::string percent_limit;  // a VPMM_MEMORY_LIMIT given as "N%"
  for (const auto& kv : set) {
    const vpmm_option_info& o = vars[kv.first].info;
    const std::string& v = kv.second;
    Verdict verdict;
    uint64_t val = 0;
    if (o.kind == VPMM_OPTION_BACKEND) {
      const std::string l = lower(v);
      verdict = (l == "auto" || l == "cuda" || l == "hip" || l == "host") ? kAccept : kReject;
    } else if (o.kind == VPMM_OPTION_LOG_LEVEL) {
      const std::string l = lower(v);
      verdict = (l == "off" || l == "error" || l == "warn" || l == "info" || l == "debug") ? kAccept
                                                                                          : kReject;
    } else if (o.kind == VPMM_OPTION_LIMIT && v.size() > 1 && v.back() == '%') {
      verdict = kSkip;  // strtod grammar: judged by the range check below
      percent_limit = v;
    } else if (o.kind == VPMM_OPTION_DEVICE_LIST) {
      verdict = ref_device_list(v, &val);
    } else if (o.kind == VPMM_OPTION_HANDLE_SIZE && handle_words(v)) {
      verdict = kSkip;  // pages and "unlimited": the contract test covers them (tests/contract/configuration.cpp)
    } else {
      verdict = ref_env_size(v, &val);
      if (o.kind == VPMM_OPTION_INT32 && verdict == kAccept && val > INT32_MAX) verdict = kReject;
    }
    if (verdict == kSkip) {
      judged = false;
      break;
    }
    if (verdict == kReject) {
      want_error = static_cast<int>(vars[kv.first].index) + 1;
      break;
    }
    if (o.field_size != 0 && o.kind != VPMM_OPTION_BACKEND)
      FZ_CHECK(field_of(c, o) == val, "%s=\"%s\" read as %llu, expected %llu", o.env, v.c_str(),
               (unsigned long long)field_of(c, o), (unsigned long long)val);
  }
  if (judged)
    FZ_CHECK(c.config_error == want_error, "config_error %d, expected %d", c.config_error, want_error);
  if (c.config_error == 0 && !percent_limit.empty())
    FZ_CHECK(c.memory_limit_fraction > 0.0 && c.memory_limit_fraction <= 1.0, "fraction %g",
             c.memory_limit_fraction);

  // Whatever was read, pool creation answers with a status and a message.
  c.backend = VPMM_BACKEND_HOST;
  if (c.host_capacity == 0 || c.host_capacity > (64ull << 20)) c.host_capacity = 64ull << 20;
  if (c.initial_pages > 256) c.initial_pages %= 257;
  vpmm_pool* p = nullptr;
  vpmm_status st = vpmm_pool_create(&c, &p);
  if (c.config_error) FZ_CHECK(st == VPMM_ERR_INVALID_ARGUMENT, "config_error %d but create -> %d",
                               c.config_error, st);
  if (st == VPMM_OK) {
    void* q = nullptr;
    vpmm_status ms = vpmm_pool_malloc(p, 1000, nullptr, &q);
    FZ_CHECK(ms == VPMM_OK || ms == VPMM_ERR_OUT_OF_MEMORY, "malloc -> %d", ms);
    if (ms == VPMM_OK) FZ_CHECK(vpmm_pool_free(p, q, nullptr) == VPMM_OK, "free");
    FZ_CHECK(vpmm_pool_check(p) == VPMM_OK, "check");
    FZ_CHECK(vpmm_pool_destroy(p) == VPMM_OK, "destroy");
  } else {
    FZ_CHECK(vpmm_last_error()[0] != '\0', "create -> %d without a message", st);
  }
  for (const EnvVar& e : vars) unsetenv(e.info.env);
}

// ---------------------------------------------------------------------------
// Config fields
// ---------------------------------------------------------------------------

void fuzz_fields(fz::Reader& in) {
  vpmm_config c;
  vpmm_config_init(&c);
  c.backend = (in.u8() % 8) ? VPMM_BACKEND_HOST : static_cast<int32_t>(in.u32());
  c.device = (in.u8() % 4) ? 0 : static_cast<int32_t>(in.u32());
  static const uint64_t kPage[] = {0, 4096, 8192, 65536, 2u << 20, 12288, 4095, 1ull << 40};
  c.page_size = (in.u8() % 4) ? kPage[in.u8() % 8] : in.size_like();
  c.va_size = (in.u8() % 2) ? c.page_size * (in.u8() % 64) : in.size_like();
  c.initial_pages = in.size_like() % ((in.u8() % 4) ? 64 : UINT64_MAX);
  c.host_capacity = (in.u8() % 4) ? (in.u8() % 64 + 1) << 20 : in.size_like();
  c.max_handle_size = (in.u8() % 2) ? c.page_size * (in.u8() % 4) : in.size_like();
  c.small_size = (in.u8() % 2) ? in.u16() : in.size_like();
  c.large_rounding = (in.u8() % 2) ? (in.u8() % 4 ? 512 : 0) : in.size_like();
  c.backup_cache_size = in.size_like();
  c.memory_limit = (in.u8() % 2) ? 0 : in.size_like();
  double d[3];
  for (double& x : d) {
    switch (in.u8() % 6) {
      case 0: x = 0; break;
      case 1: x = static_cast<double>(in.u8()) / 255.0; break;
      case 2: x = -1.0; break;
      case 3: x = 2.0; break;
      case 4: x = __builtin_nan(""); break;
      default: {
        uint64_t bits = in.u64();
        std::memcpy(&x, &bits, sizeof x);
      }
    }
  }
  c.memory_limit_fraction = d[0];
  c.watermark_trigger = d[1];
  c.watermark_stop = d[2];
  // The real (sparse) host memory is no limit; its use is: keep eager work small.
  if (c.host_capacity == 0 || c.host_capacity > (1ull << 30)) c.host_capacity = 1ull << 30;
  if (c.page_size && c.initial_pages * (c.page_size < 4096 ? 4096 : c.page_size) > (64ull << 20))
    c.initial_pages = 0;
  vpmm_pool* p = reinterpret_cast<vpmm_pool*>(0x1);
  vpmm_status st = vpmm_pool_create(&c, &p);
  FZ_CHECK(st == VPMM_OK || st == VPMM_ERR_INVALID_ARGUMENT || st == VPMM_ERR_UNSUPPORTED ||
               st == VPMM_ERR_OUT_OF_MEMORY || st == VPMM_ERR_BACKEND,
           "create -> %d", st);
  if (st != VPMM_OK) {
    // vpmm.h: on any error *out is set to NULL (a program that skips the
    // check fails on NULL, never on a stale pointer).
    FZ_CHECK(p == nullptr, "create left *out %p on error, not NULL", static_cast<void*>(p));
    FZ_CHECK(vpmm_last_error()[0] != '\0', "create -> %d without a message", st);
    return;
  }
  vpmm_config e;
  std::memset(&e, 0, sizeof e);
  e.struct_size = sizeof e;
  FZ_CHECK(vpmm_pool_get_config(p, &e) == VPMM_OK, "get_config");
  FZ_CHECK(e.page_size != 0 && e.va_size % e.page_size == 0 && e.va_size >= e.page_size,
           "effective page %llu va %llu", (unsigned long long)e.page_size, (unsigned long long)e.va_size);
  if (c.page_size) FZ_CHECK(e.page_size == c.page_size, "page_size changed");
  FZ_CHECK(e.small_size <= e.page_size, "small_size %llu > page %llu", (unsigned long long)e.small_size,
           (unsigned long long)e.page_size);
  FZ_CHECK(e.large_rounding >= 256 && e.large_rounding <= e.page_size && e.page_size % e.large_rounding == 0,
           "large_rounding %llu with page %llu", (unsigned long long)e.large_rounding,
           (unsigned long long)e.page_size);
  vpmm_stats s;
  std::memset(&s, 0, sizeof s);
  s.struct_size = sizeof s;
  FZ_CHECK(vpmm_pool_stats(p, &s) == VPMM_OK, "stats");
  FZ_CHECK(s.mapped_bytes == c.initial_pages * e.page_size, "initial mapped %llu",
           (unsigned long long)s.mapped_bytes);
  for (int k = 0; k < 4; ++k) {
    uint64_t sz = in.size_like() % (4ull << 20) + 1;
    void* q = nullptr;
    vpmm_status ms = vpmm_pool_malloc(p, sz, nullptr, &q);
    FZ_CHECK(ms == VPMM_OK || ms == VPMM_ERR_OUT_OF_MEMORY || ms == VPMM_ERR_INVALID_ARGUMENT, "malloc -> %d", ms);
    if (ms == VPMM_OK) {
      std::memset(q, 0x5a, sz < 4096 ? sz : 4096);
      FZ_CHECK(vpmm_pool_free(p, q, nullptr) == VPMM_OK, "free");
    }
  }
  FZ_CHECK(vpmm_pool_check(p) == VPMM_OK, "check");
  FZ_CHECK(vpmm_pool_destroy(p) == VPMM_OK, "destroy");
}

// ---------------------------------------------------------------------------
// Traces
// ---------------------------------------------------------------------------

#ifdef VPMM_FUZZ_TRACE
// docs/trace-format.md: [space] INTEGER(>0) [K|M|G|T [B|iB] | B | p] [space],
// any case; decimal is always decimal.
bool ref_trace_size(const std::string& tok, uint64_t* v, bool* pages) {
  size_t b = 0, e = tok.size();
  while (b < e && is_ws(tok[b])) ++b;
  while (e > b && is_ws(tok[e - 1])) --e;
  std::string s = tok.substr(b, e - b);
  size_t i = 0;
  uint64_t x = 0;
  if (!ref_integer(s, &i, &x)) return false;
  std::string suf;
  for (size_t k = i; k < s.size(); ++k) suf += static_cast<char>(std::tolower(static_cast<unsigned char>(s[k])));
  uint64_t mult = 0;
  *pages = false;
  if (suf.empty() || suf == "b") mult = 1;
  else if (suf == "p") {
    mult = 1;
    *pages = true;
  } else if (suf.size() >= 1 && suffix_mult(suf[0]) && (suf.size() == 1 || suf.substr(1) == "b" || suf.substr(1) == "ib"))
    mult = suffix_mult(suf[0]);
  if (!mult || x == 0 || x > UINT64_MAX / mult) return false;
  *v = x * mult;
  return true;
}


void fuzz_trace(fz::Reader& in) {
  // A size token against the documented grammar.
  {
    std::string tok = in.str(24);
    uint64_t v = 0, rv = 0;
    bool pages = false, rpages = false;
    bool ok = vtrace::parse_size(tok, &v, &pages);
    bool rok = ref_trace_size(tok, &rv, &rpages);
    FZ_CHECK(ok == rok, "trace size \"%s\": parser %d, reference %d", tok.c_str(), ok, rok);
    if (ok) FZ_CHECK(v == rv && pages == rpages, "trace size \"%s\": %llu vs %llu", tok.c_str(),
                     (unsigned long long)v, (unsigned long long)rv);
  }
  // A whole trace.
  std::string text;
  size_t n = in.left();
  for (size_t k = 0; k < n; ++k) text += static_cast<char>(in.u8());
  vtrace::Trace t;
  std::string err;
  if (!vtrace::parse_trace_text(text, "fuzz", &t, &err)) {
    FZ_CHECK(!err.empty() && err.compare(0, 4, "fuzz") == 0, "error without the trace's name: \"%s\"",
             err.c_str());
    FZ_CHECK(t.ops.empty(), "*out touched on error");
    return;
  }
  // trace.hpp invariants.
  std::vector<bool> live(t.ids.size(), false);
  for (const vtrace::TraceOp& op : t.ops) {
    switch (op.kind) {
      case vtrace::OpKind::kMalloc:
        FZ_CHECK(op.id < t.ids.size() && !live[op.id], "line %u: malloc of a live id", op.line);
        FZ_CHECK(op.size > 0, "line %u: malloc of 0", op.line);
        FZ_CHECK(op.stream >= 0 && op.stream < vtrace::kMaxStreams, "line %u: stream %d", op.line, op.stream);
        live[op.id] = true;
        break;
      case vtrace::OpKind::kFree:
        FZ_CHECK(op.id < t.ids.size() && live[op.id], "line %u: free of an id not live", op.line);
        FZ_CHECK(op.stream >= 0 && op.stream < vtrace::kMaxStreams, "line %u: stream %d", op.line, op.stream);
        live[op.id] = false;
        break;
      case vtrace::OpKind::kSync:
        FZ_CHECK(op.stream >= -1 && op.stream < vtrace::kMaxStreams, "line %u: sync stream %d", op.line,
                 op.stream);
        break;
    }
  }
  for (uint64_t page : {uint64_t(4096), uint64_t(2) << 20}) {
    vtrace::TraceSummary sum;
    bool sok = vtrace::summarize_trace(t.ops, page, &sum, &err);
    if (!sok) continue;
    FZ_CHECK(sum.final_requested <= sum.peak_requested, "summary: final > peak");
    // Replay against a model allocator: every free must reach its malloc's pointer.
    std::map<uintptr_t, uint64_t> model;
    uintptr_t next = 0x1000;
    uint64_t requested = 0, peak = 0;
    vtrace::ReplayHooks h;
    h.malloc = [&](const vtrace::TraceOp&, uint64_t bytes, void** ptr, std::string*) {
      next += 0x1000;
      model[next] = bytes;
      requested += bytes;
      if (requested > peak) peak = requested;
      *ptr = reinterpret_cast<void*>(next);
      return true;
    };
    h.free = [&](const vtrace::TraceOp& op, void* ptr, uint64_t bytes, std::string*) {
      auto it = model.find(reinterpret_cast<uintptr_t>(ptr));
      FZ_CHECK(it != model.end() && it->second == bytes, "line %u: replay freed %p (%llu bytes) it never got",
               op.line, ptr, (unsigned long long)bytes);
      requested -= bytes;
      model.erase(it);
      return true;
    };
    h.sync = [&](int stream, std::string*) {
      FZ_CHECK(stream >= 0 && stream < vtrace::kMaxStreams, "sync of stream %d", stream);
      return true;
    };
    vtrace::ReplayResult res;
    bool rok = vtrace::replay_trace(t.ops, page, h, &res, &err, "fuzz");
    FZ_CHECK(rok, "replay of a valid trace failed: %s", err.c_str());
    FZ_CHECK(res.ops_done == t.ops.size(), "replay stopped at %zu of %zu", res.ops_done, t.ops.size());
    FZ_CHECK(res.peak_requested == sum.peak_requested && peak == sum.peak_requested,
             "peak: replay %llu, summary %llu, model %llu", (unsigned long long)res.peak_requested,
             (unsigned long long)sum.peak_requested, (unsigned long long)peak);
    FZ_CHECK(res.live.size() == model.size(), "live at the end: %zu vs %zu", res.live.size(), model.size());
  }
}
#endif

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fz::Reader in(data, size);
  switch (in.u8() % 3) {
    case 0: fuzz_env(in); break;
    case 1: fuzz_fields(in); break;
    default:
#ifdef VPMM_FUZZ_TRACE
      fuzz_trace(in);
#else
      fuzz_env(in);
#endif
      break;
  }
  return 0;
}
