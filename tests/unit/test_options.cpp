// The option table and struct facts exported through the C ABI
// (vpmm_option_*, vpmm_struct_*): the single source of truth bindings, the
// tool, the docs and the other tests read. Checks that every table entry with
// a variable is really read by vpmm_config_init (in table order:
// config_error = index + 1) unless it is a process-wide setting (judged by
// the part that reads it), that field offsets match this compilation of
// vpmm.h, that each struct's field list tiles the struct, that
// docs/options.md (VPMM_TEST_OPTIONS_DOC) lists exactly the table, that the
// rows keep their ABI places and that vpmm.h (VPMM_TEST_HEADER) declares and
// documents each option's field.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "check.hpp"
#include "vpmm.h"

namespace {

std::vector<vpmm_option_info> table() {
  std::vector<vpmm_option_info> t;
  for (uint32_t i = 0; i < vpmm_option_count(); ++i) {
    vpmm_option_info o;
    std::memset(&o, 0, sizeof o);
    o.struct_size = sizeof o;
    CHECK_OK(vpmm_option_get(i, &o));
    t.push_back(o);
  }
  return t;
}

void clean_env() {
  for (const vpmm_option_info& o : table())
    if (o.env) unsetenv(o.env);
}

// The text of the source file the environment variable `var` names (the
// build passes docs/options.md and include/vpmm.h); "" with a failed CHECK
// when it is not there.
std::string source_file(const char* var) {
  const char* path = std::getenv(var);
  CHECK_MSG(path != nullptr, "%s is not set (meson test sets it)", var);
  if (!path) return "";
  std::ifstream f(path);
  CHECK_MSG(f.good(), "cannot read %s", path);
  std::stringstream all;
  all << f.rdbuf();
  return all.str();
}

// A value each kind rejects.
const char* malformed(int32_t kind) {
  switch (kind) {
    case VPMM_OPTION_BACKEND: return "gpu";
    case VPMM_OPTION_LOG_LEVEL: return "loud";
    default: return "12Q";
  }
}

TEST("the table: names and variables are unique, every entry documented") {
  std::set<std::string> names, envs;
  const std::vector<vpmm_option_info> t = table();
  CHECK(t.size() >= 15);
  for (const vpmm_option_info& o : t) {
    CHECK(o.name && *o.name);
    CHECK(o.help && *o.help);
    CHECK(o.default_text && *o.default_text);
    CHECK(o.kind >= VPMM_OPTION_BACKEND && o.kind <= VPMM_OPTION_TEXT);
    // A process-wide setting has no field; every field row has one. A text
    // row with a field is a const char* (the ledger).
    if (o.kind == VPMM_OPTION_LOG_LEVEL) CHECK_EQ(o.field_size, 0u);
    if (o.kind == VPMM_OPTION_TEXT) CHECK(o.field_size == 0 || o.field_size == sizeof(const char*));
    CHECK(names.insert(o.name).second);
    if (o.env) {
      CHECK(std::strncmp(o.env, "VPMM_", 5) == 0);
      CHECK(envs.insert(o.env).second);
    }
  }
  // The variables the tests used to copy by hand, VPMM_BACKUP_PINNED_LIMIT
  // included (two copies missed it).
  for (const char* v : {"VPMM_BACKEND", "VPMM_PAGE_SIZE", "VPMM_MAX_HANDLE_SIZE", "VPMM_MEMORY_LIMIT",
                        "VPMM_BACKUP_PINNED_LIMIT", "VPMM_LOG"})
    CHECK(envs.count(v) == 1);
  // The variables read outside the pool's configuration (the HIP runtime's
  // loading, the LD_PRELOAD interposer) are rows too.
  for (const char* v : {"VPMM_HIP_LIBRARY", "VPMM_HIP_VA_RECYCLE", "VPMM_HIP_PAGE_FLOOR", "VPMM_PRELOAD_LOG",
                        "VPMM_PRELOAD_TAG", "VPMM_PRELOAD_HOST_BACKUP", "VPMM_PRELOAD_CTL"})
    CHECK(envs.count(v) == 1);
}

TEST("every variable in the table is read, in table order (config_error = index + 1)") {
  const std::vector<vpmm_option_info> t = table();
  for (uint32_t i = 0; i < t.size(); ++i) {
    if (!t[i].env || t[i].kind == VPMM_OPTION_TEXT) continue;
    clean_env();
    setenv(t[i].env, malformed(t[i].kind), 1);
    vpmm_config c;
    vpmm_config_init(&c);
    CHECK_EQ(c.config_error, static_cast<int32_t>(i + 1));
    vpmm_pool* p = nullptr;
    CHECK_EQ(vpmm_pool_create(&c, &p), VPMM_ERR_INVALID_ARGUMENT);
    CHECK(std::strstr(vpmm_last_error(), t[i].env) != nullptr);
  }
  clean_env();
}

// A malformed variable's message says why the value is refused (out of
// range, negative, overflow, not one of the names) and what the option
// accepts: the range, the format or every name.
TEST("a malformed variable's message says why and what the option accepts") {
  struct Case {
    const char* env;
    const char* value;
    std::vector<const char*> says;
  };
  const Case cases[] = {
      {"VPMM_MEMORY_LIMIT", "150%", {"\"150%\"", "out of range (above 100%)", "above 0% and at most 100%", "\"8G\""}},
      {"VPMM_MEMORY_LIMIT", "0%", {"out of range (not above 0%)"}},
      {"VPMM_MEMORY_LIMIT", "-5", {"negative", "a byte count", "a share of device memory"}},
      {"VPMM_MEMORY_LIMIT", "99999999999T", {"overflows 64 bits", "2^64 - 1"}},
      {"VPMM_MEMORY_LIMIT", "abc%", {"not a number before the %"}},
      {"VPMM_PAGE_SIZE", "-1", {"negative", "K, M, G or T"}},
      {"VPMM_PAGE_SIZE", "99999999999999999999", {"overflows 64 bits"}},
      {"VPMM_PAGE_SIZE", "2Q", {"unknown suffix \"Q\""}},
      {"VPMM_EXPORTABLE", "yes", {"accepted: 0 (not exportable), 1 (every handle exportable)"}},
      {"VPMM_EXPORTABLE", "2", {"accepted: 0 (not exportable), 1"}},
      {"VPMM_BACKEND", "gpu", {"accepted: auto, cuda, hip, host"}},
      {"VPMM_LOG", "loud", {"is malformed", "accepted: off, error, warn, info, debug"}},
      {"VPMM_VIEW_MIN_SIZE", "on", {"not a number", "or \"off\""}},
      {"VPMM_MAX_HANDLE_SIZE", "0p", {"out of range (0 pages)", "\"unlimited\""}},
      {"VPMM_DEVICE", "3000000000", {"out of range (above 2147483647)", "from 0 to 2147483647"}},
      {"VPMM_REMAP_SLACK", "2", {"out of range (above 1)", "\"exact\""}},
      {"VPMM_REMAP_SLACK", "-1%", {"out of range (negative)"}},
      {"VPMM_PEER_DEVICES", "1,1", {"device 1 listed twice", "from 0 to 63"}},
      {"VPMM_PEER_DEVICES", "64", {"out of range (an ordinal above 63)"}},
  };
  for (const Case& k : cases) {
    clean_env();
    setenv(k.env, k.value, 1);
    vpmm_pool* p = nullptr;
    CHECK_EQ(vpmm_pool_create(nullptr, &p), VPMM_ERR_INVALID_ARGUMENT);
    const std::string msg = vpmm_last_error();
    CHECK_MSG(msg.find(k.env) != std::string::npos, "%s=%s: %s", k.env, k.value, msg.c_str());
    for (const char* want : k.says)
      CHECK_MSG(msg.find(want) != std::string::npos, "%s=%s: no \"%s\" in: %s", k.env, k.value, want, msg.c_str());
  }
  clean_env();
}

// Every row vpmm_config_init judges gives a reason and what it accepts, not
// only its help.
TEST("every judged variable's refusal lists what it accepts") {
  const std::vector<vpmm_option_info> t = table();
  for (uint32_t i = 0; i < t.size(); ++i) {
    if (!t[i].env || t[i].kind == VPMM_OPTION_TEXT) continue;
    clean_env();
    setenv(t[i].env, malformed(t[i].kind), 1);
    vpmm_pool* p = nullptr;
    CHECK_EQ(vpmm_pool_create(nullptr, &p), VPMM_ERR_INVALID_ARGUMENT);
    CHECK_MSG(std::strstr(vpmm_last_error(), "is malformed: ") != nullptr &&
                  std::strstr(vpmm_last_error(), "; accepted: ") != nullptr,
              "%s: %s", t[i].env, vpmm_last_error());
  }
  clean_env();
}

// Their readers judge them (the HIP backend fails to load, the interposer
// says so): a host pool never does.
TEST("a process-wide setting never sets config_error nor fails a host pool") {
  const std::vector<vpmm_option_info> t = table();
  for (uint32_t i = 0; i < t.size(); ++i) {
    if (t[i].kind != VPMM_OPTION_TEXT || t[i].field_size) continue;  // a field (the ledger) is an option
    CHECK(t[i].env != nullptr);
    CHECK_EQ(t[i].field_offset, UINT32_MAX);
    clean_env();
    setenv(t[i].env, "12Q", 1);
    vpmm_config c;
    vpmm_config_init(&c);
    CHECK_EQ(c.config_error, 0);
    c.backend = VPMM_BACKEND_HOST;
    vpmm_pool* p = nullptr;
    CHECK_OK(vpmm_pool_create(&c, &p));
    CHECK_OK(vpmm_pool_destroy(p));
    // Naming such a row in config_error is no malformed variable.
    vpmm_config_init_defaults(&c);
    c.config_error = static_cast<int32_t>(i + 1);
    CHECK_EQ(vpmm_pool_create(&c, &p), VPMM_ERR_INVALID_ARGUMENT);
    CHECK(std::strstr(vpmm_last_error(), "is not valid") != nullptr);
  }
  clean_env();
}

TEST("VPMM_PEER_DEVICES: a list of device ordinals becomes a bit mask") {
  struct Case {
    const char* text;
    int32_t error;  // 0: parsed
    uint64_t mask;
  } cases[] = {{"1", 0, 0x2}, {"0,5,63", 0, (1ull << 0) | (1ull << 5) | (1ull << 63)},
               {"3,1", 0, 0xA}, {"none", 0, 0}, {"", 0, 0},
               {"64", 1, 0}, {"1,1", 1, 0}, {"1,", 1, 0}, {",1", 1, 0}, {"-1", 1, 0}, {"1 2", 1, 0}};
  for (const Case& k : cases) {
    clean_env();
    setenv("VPMM_PEER_DEVICES", k.text, 1);
    vpmm_config c;
    vpmm_config_init(&c);
    if (k.error) {
      CHECK(c.config_error != 0);
    } else {
      CHECK_EQ(c.config_error, 0);
      CHECK_EQ(c.peer_devices, k.mask);
    }
  }
  clean_env();
  // The host backend has no devices to give access to: a clear refusal.
  vpmm_config c;
  vpmm_config_init_defaults(&c);
  c.backend = VPMM_BACKEND_HOST;
  c.peer_devices = 0x2;
  vpmm_pool* p = nullptr;
  CHECK_EQ(vpmm_pool_create(&c, &p), VPMM_ERR_UNSUPPORTED);
  CHECK(p == nullptr);
  CHECK(std::strstr(vpmm_last_error(), "peer_devices") != nullptr);
}

TEST("a well-formed variable lands in the field the table names") {
  const std::vector<vpmm_option_info> t = table();
  for (const vpmm_option_info& o : t) {
    if (!o.env || o.field_size != sizeof(uint64_t) || o.kind == VPMM_OPTION_FRACTION ||
        o.kind == VPMM_OPTION_TEXT ||  // a pointer (the ledger): tested in test_ledger
        o.kind == VPMM_OPTION_DEVICE_LIST ||  // a list, not a number: tested below
        std::strcmp(o.name, "exportable") == 0)  // a switch, 0 or 1: tested above
      continue;
    clean_env();
    setenv(o.env, "0x30000", 1);
    vpmm_config c;
    vpmm_config_init(&c);
    CHECK_EQ(c.config_error, 0);
    uint64_t v = 0;
    std::memcpy(&v, reinterpret_cast<const char*>(&c) + o.field_offset, sizeof v);
    CHECK_EQ(v, 0x30000u);
  }
  clean_env();
}

TEST("field offsets match this compilation of vpmm.h") {
  vpmm_option_info o;
  std::memset(&o, 0, sizeof o);
  o.struct_size = sizeof o;
  uint32_t i = 0;
  CHECK_OK(vpmm_option_find("VPMM_BACKUP_PINNED_LIMIT", &o, &i));
  CHECK_EQ(o.field_offset, offsetof(vpmm_config, backup_pinned_limit));
  CHECK_OK(vpmm_option_find("page_size", &o, nullptr));
  CHECK_EQ(o.field_offset, offsetof(vpmm_config, page_size));
  CHECK_EQ(o.field_size, sizeof(uint64_t));
  CHECK_OK(vpmm_option_find("watermark_stop", &o, nullptr));
  CHECK(o.env == nullptr);
  CHECK_EQ(o.field_offset, offsetof(vpmm_config, watermark_stop));
  CHECK_OK(vpmm_option_find("log", &o, nullptr));
  CHECK_EQ(o.field_size, 0u);
  CHECK_EQ(o.field_offset, UINT32_MAX);
  CHECK_EQ(vpmm_option_find("VPMM_NOPE", &o, nullptr), VPMM_ERR_INVALID_ARGUMENT);
  CHECK_EQ(vpmm_option_find(nullptr, &o, nullptr), VPMM_ERR_INVALID_ARGUMENT);
  CHECK_EQ(vpmm_option_get(vpmm_option_count(), &o), VPMM_ERR_INVALID_ARGUMENT);
  CHECK_EQ(vpmm_option_get(0, nullptr), VPMM_ERR_INVALID_ARGUMENT);
  o.struct_size = 4;
  CHECK_EQ(vpmm_option_get(0, &o), VPMM_ERR_INVALID_ARGUMENT);
}

TEST("an older, shorter vpmm_option_info is filled only up to its struct_size") {
  unsigned char buf[sizeof(vpmm_option_info) + 8];
  std::memset(buf, 0xab, sizeof buf);
  vpmm_option_info* o = reinterpret_cast<vpmm_option_info*>(buf);
  const uint32_t short_size = offsetof(vpmm_option_info, help);
  o->struct_size = short_size;
  CHECK_OK(vpmm_option_get(0, o));
  CHECK_EQ(o->struct_size, short_size);
  for (size_t k = short_size; k < sizeof buf; ++k) CHECK_EQ(buf[k], 0xab);
}

size_t align_of_kind(int32_t kind) {
  switch (kind) {
    case VPMM_FIELD_U32:
    case VPMM_FIELD_I32: return 4;
    case VPMM_FIELD_F64:
    case VPMM_FIELD_U64: return alignof(uint64_t);
    default: return alignof(void*);
  }
}

TEST("struct layouts: sizes match, fields tile each struct in order") {
  struct Known {
    const char* name;
    size_t size;
  } known[] = {{"vpmm_config", sizeof(vpmm_config)},       {"vpmm_alloc_attrs", sizeof(vpmm_alloc_attrs)},
               {"vpmm_tag_stats", sizeof(vpmm_tag_stats)}, {"vpmm_stats", sizeof(vpmm_stats)},
               {"vpmm_region_info", sizeof(vpmm_region_info)}, {"vpmm_option_info", sizeof(vpmm_option_info)},
               {"vpmm_field_info", sizeof(vpmm_field_info)}};
  for (const Known& k : known) {
    uint32_t size = 0, n = 0;
    CHECK_OK(vpmm_struct_layout(k.name, &size, &n));
    CHECK_EQ(size, k.size);
    CHECK(n >= 2);
    size_t end = 0;
    for (uint32_t i = 0; i < n; ++i) {
      vpmm_field_info f;
      std::memset(&f, 0, sizeof f);
      f.struct_size = sizeof f;
      CHECK_OK(vpmm_struct_field(k.name, i, &f));
      const size_t a = align_of_kind(f.kind);
      const size_t want = (end + a - 1) / a * a;  // no field left out between two listed ones
      if (f.offset != want) std::printf("  %s.%s at %u, expected %zu\n", k.name, f.name, f.offset, want);
      CHECK_EQ(f.offset, want);
      end = f.offset + f.size;
    }
    CHECK_EQ((end + alignof(uint64_t) - 1) / alignof(uint64_t) * alignof(uint64_t), k.size);
    vpmm_field_info f;
    f.struct_size = sizeof f;
    CHECK_EQ(vpmm_struct_field(k.name, n, &f), VPMM_ERR_INVALID_ARGUMENT);
  }
  vpmm_field_info f;
  f.struct_size = sizeof f;
  CHECK_OK(vpmm_struct_field("vpmm_stats", 2, &f));
  CHECK(std::strcmp(f.name, "mapped_bytes") == 0);
  CHECK_EQ(f.offset, offsetof(vpmm_stats, mapped_bytes));
  CHECK_EQ(vpmm_struct_layout("vpmm_nope", nullptr, nullptr), VPMM_ERR_INVALID_ARGUMENT);
  CHECK_EQ(vpmm_struct_layout(nullptr, nullptr, nullptr), VPMM_ERR_INVALID_ARGUMENT);
}

// docs/options.md's table, one row per option:
//   | `name` | `VPMM_X` or - | default | help |
// must equal the library's table, row for row. On a mismatch the expected
// table is printed, ready to paste.
TEST("docs/options.md lists exactly the option table") {
  std::istringstream f(source_file("VPMM_TEST_OPTIONS_DOC"));
  std::vector<std::string> rows;
  std::string line;
  bool in_table = false;
  while (std::getline(f, line)) {
    if (line.rfind("| option", 0) == 0) {
      in_table = true;
      continue;
    }
    if (!in_table) continue;
    if (line.rfind("|--", 0) == 0) continue;
    if (line.rfind("|", 0) != 0) break;
    rows.push_back(line);
  }
  std::vector<std::string> want;
  for (const vpmm_option_info& o : table()) {
    std::string env = o.env ? std::string("`") + o.env + "`" : "-";
    want.push_back(std::string("| `") + o.name + "` | " + env + " | " + o.default_text + " | " + o.help + " |");
  }
  bool same = rows == want;
  CHECK(same);
  if (!same) {
    std::printf("  docs/options.md disagrees with the library's table (scripts/options-doc.py "
                "rewrites it); expected:\n| option | variable | default | meaning |\n|--|--|--|--|\n");
    for (const std::string& w : want) std::printf("%s\n", w.c_str());
  }
}

// The table is made from src/config/option_list.hpp, where order is ABI:
// config_error is an index + 1, so a row moved or removed would make an
// older program's config_error name another variable. The rows of ABI 1 so
// far, frozen here; new ones may only follow them.
TEST("option indices are ABI: the rows so far keep their places") {
  const char* frozen[] = {"backend", "device", "page_size", "va_size", "initial_pages", "host_capacity",
                          "max_handle_size", "small_size", "backup_cache_size", "memory_limit",
                          "backup_pinned_limit", "log", "memory_limit_fraction", "watermark_trigger",
                          "watermark_stop", "hip_chunk_size", "peer_devices", "large_rounding",
                          "hip_library", "hip_va_recycle", "hip_page_floor", "preload_log", "preload_tag",
                          "preload_host_backup", "preload_ctl", "remap_slack", "backup_dir", "exportable",
                          "view_min_size"};
  const std::vector<vpmm_option_info> t = table();
  CHECK(t.size() >= sizeof frozen / sizeof frozen[0]);
  for (size_t i = 0; i < sizeof frozen / sizeof frozen[0] && i < t.size(); ++i)
    CHECK_EQ(std::string(t[i].name), std::string(frozen[i]));
}

// vpmm_config is written by hand (it is the ABI) and the option list
// separately: the build proves every field has a row (options_api.cpp's
// static_assert; the layout test above through the ABI). Here the other way
// round: every option with a field names it in vpmm_config's declaration,
// and the field's comment names the option's variable, so the header never
// documents a variable the library does not read, or hides one it does.
TEST("vpmm.h: each option with a field is declared in vpmm_config with its variable") {
  const std::string header = source_file("VPMM_TEST_HEADER");
  const size_t begin = header.find("typedef struct vpmm_config {");
  const size_t end = header.find("} vpmm_config;");
  CHECK(begin != std::string::npos && end != std::string::npos && begin < end);
  if (begin == std::string::npos || end == std::string::npos) return;
  // The declaration with each comment's line breaks (newline, indent, " * ")
  // read as one space, so a variable wrapped onto the next line is found.
  std::string decl;
  for (size_t i = begin; i < end; ++i) {
    if (header[i] != '\n') {
      decl += header[i];
      continue;
    }
    while (i + 1 < end && (header[i + 1] == ' ' || header[i + 1] == '*')) ++i;
    decl += ' ';
  }
  for (const vpmm_option_info& o : table()) {
    if (o.field_size == 0) continue;
    const bool declared = decl.find(std::string(" ") + o.name + ";") != std::string::npos;
    if (!declared) std::printf("  vpmm_config declares no field %s\n", o.name);
    CHECK(declared);
    if (!o.env) continue;
    const bool documented = decl.find(std::string("env ") + o.env) != std::string::npos;
    if (!documented) std::printf("  vpmm_config's comments never say \"env %s\"\n", o.env);
    CHECK(documented);
  }
}

}  // namespace

TEST_MAIN()
