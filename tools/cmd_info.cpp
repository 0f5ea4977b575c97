// `vpmm info`: the library's version and ABI, every option of the library's
// option table (vpmm_option_get) with its environment value, its effective
// value in a default pool and where that came from, the VPMM_* variables the
// library does not read, and the backend AUTO picks. The option list comes
// from the library, so a new option shows up here without a change.
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "cli.hpp"
#include "vpmm.h"

extern char** environ;

namespace vcli {
namespace {

std::vector<vpmm_option_info> option_table() {
  std::vector<vpmm_option_info> t;
  const uint32_t n = vpmm_option_count();
  for (uint32_t i = 0; i < n; ++i) {
    vpmm_option_info o;
    std::memset(&o, 0, sizeof o);
    o.struct_size = sizeof o;
    if (vpmm_option_get(i, &o) == VPMM_OK) t.push_back(o);
  }
  return t;
}

// The field of `c` an option describes, as text ("" when it has none).
std::string field_text(const vpmm_config& c, const vpmm_option_info& o) {
  if (o.field_size == 0 || o.field_offset + o.field_size > sizeof c) return "";
  const char* p = reinterpret_cast<const char*>(&c) + o.field_offset;
  char b[96];
  switch (o.kind) {
    case VPMM_OPTION_BACKEND: {
      int32_t v;
      std::memcpy(&v, p, sizeof v);
      return backend_arg_name(v);
    }
    case VPMM_OPTION_INT32: {
      int32_t v;
      std::memcpy(&v, p, sizeof v);
      // The placement chain by the name its default column and
      // VPMM_PLACEMENT use ("default", "views"), not its number.
      if (std::strcmp(o.name, "placement") == 0)
        if (const char* name = vpmm_placement_name(v)) return name;
      return std::to_string(v);
    }
    case VPMM_OPTION_FRACTION: {
      double v;
      std::memcpy(&v, p, sizeof v);
      std::snprintf(b, sizeof b, "%g", v);
      return b;
    }
    case VPMM_OPTION_TEXT: {  // a const char* field (the ledger)
      const char* v;
      std::memcpy(&v, p, sizeof v);
      return v && *v ? v : "none";
    }
    default: {
      uint64_t v;
      std::memcpy(&v, p, sizeof v);
      if (o.kind == VPMM_OPTION_COUNT) return std::to_string(v);
      if (o.kind == VPMM_OPTION_DEVICE_LIST) {
        std::string list;
        for (int d = 0; d < 64; ++d)
          if (v & (uint64_t(1) << d)) list += (list.empty() ? "" : ",") + std::to_string(d);
        return list.empty() ? "none" : list;
      }
      if (o.kind == VPMM_OPTION_HANDLE_SIZE && v == VPMM_HANDLE_SIZE_UNLIMITED) return "unlimited";
      if (v == 0) return "0";
      if (v == UINT64_MAX) return "off";  // VPMM_VIEWS_OFF (a size no request reaches)
      return fmt_bytes(v) + " (" + std::to_string(v) + ")";
    }
  }
}

// Every backend kind but AUTO, as the library's table of the names has them
// (vpmm_backend_kind_name: 0, 1, ... until NULL), so a kind the ABI gains is
// shown without a list here to update.
std::vector<int32_t> backend_kinds() {
  std::vector<int32_t> out;
  for (int32_t k = 0; vpmm_backend_kind_name(k); ++k)
    if (k != VPMM_BACKEND_AUTO) out.push_back(k);
  return out;
}

// The driver line of every compiled-in backend that has one (vpmm_backend_info:
// for HIP the runtime's file, version and the ROCm paths it takes).
std::vector<std::pair<std::string, std::string>> driver_lines() {
  std::vector<std::pair<std::string, std::string>> out;
  for (int32_t k : backend_kinds()) {
    char buf[1024];
    if (vpmm_backend_info(k, buf, sizeof buf, nullptr) == VPMM_OK) out.emplace_back(backend_arg_name(k), buf);
  }
  return out;
}

}  // namespace

int cmd_info(int argc, char** argv) {
  if (argc > 0) return usage_error(std::string("info takes no arguments, got '") + argv[0] + "'");
  std::printf("libvpmm %s (ABI %d); tool built against %d.%d.%d (ABI %d)\n", vpmm_version(),
              vpmm_abi_version(), VPMM_VERSION_MAJOR, VPMM_VERSION_MINOR, VPMM_VERSION_PATCH,
              VPMM_ABI_VERSION);
  const std::vector<vpmm_option_info> table = option_table();
  const auto drivers = driver_lines();

  // The environment first: when it is malformed, pool creation below fails
  // and this is what the user needs to see.
  std::printf("environment:\n");
  for (const vpmm_option_info& o : table) {
    if (!o.env) continue;
    const char* v = std::getenv(o.env);
    std::printf("  %-24s %s\n", o.env, v ? v : "(unset)");
  }
  for (char** e = environ; e && *e; ++e) {
    if (std::strncmp(*e, "VPMM_", 5) != 0) continue;
    std::string kv = *e;
    std::string k = kv.substr(0, kv.find('='));
    bool known = false;
    for (const vpmm_option_info& o : table) known = known || (o.env && k == o.env);
    // Variables a backend reads when it loads its driver (its line names them).
    for (const auto& d : drivers) known = known || d.second.find(k) != std::string::npos;
    if (!known)
      std::printf("  %-24s %s   (not a variable libvpmm reads)\n", k.c_str(),
                  kv.substr(k.size() + 1).c_str());
  }

  if (!drivers.empty()) std::printf("drivers (vpmm_backend_info):\n");
  for (const auto& d : drivers) std::printf("  %-6s %s\n", d.first.c_str(), d.second.c_str());

  vpmm_config c;
  vpmm_config_init(&c);
  const int32_t asked = c.backend;
  vpmm_pool* pool = nullptr;
  vpmm_status st = vpmm_pool_create(&c, &pool);
  if (st != VPMM_OK) {
    std::printf("pool (backend %s): cannot create: %s\n", backend_arg_name(asked), status_msg(st).c_str());
    return 1;
  }
  vpmm_config eff;
  get_config(pool, &eff);
  std::printf("backend: %s (asked for %s)\n", vpmm_pool_backend_name(pool), backend_arg_name(asked));
  // Why not the GPU backends: AUTO's probe says only no, so each is asked
  // for by name and its error shown (a build without it says so too).
  for (int32_t k : backend_kinds()) {
    if (k == VPMM_BACKEND_HOST) continue;  // always usable: the GPU backends are in question
    if (std::strcmp(backend_arg_name(k), vpmm_pool_backend_name(pool)) == 0) continue;
    vpmm_config kc = c;
    kc.backend = k;
    vpmm_pool* kp = nullptr;
    vpmm_status ks = vpmm_pool_create(&kc, &kp);
    if (ks == VPMM_OK) {
      std::printf("  %-4s usable when asked for (VPMM_BACKEND=%s)\n", backend_arg_name(k), backend_arg_name(k));
      vpmm_pool_destroy(kp);
    } else {
      std::printf("  %-4s not used: %s\n", backend_arg_name(k), status_msg(ks).c_str());
    }
  }
  // When the environment forces a backend, also say what AUTO would pick.
  if (asked != VPMM_BACKEND_AUTO) {
    vpmm_config a = c;
    a.backend = VPMM_BACKEND_AUTO;
    vpmm_pool* ap = nullptr;
    if (vpmm_pool_create(&a, &ap) == VPMM_OK) {
      std::printf("  auto would pick %s\n", vpmm_pool_backend_name(ap));
      vpmm_pool_destroy(ap);
    }
  }
  // Every option: the effective value (vpmm_pool_get_config), and where it
  // came from: its variable, or the default (the backend's, when 0 means
  // "backend default" and the pool resolved it).
  std::printf("effective config (vpmm_pool_get_config; source; default):\n");
  for (const vpmm_option_info& o : table) {
    const char* env = o.env ? std::getenv(o.env) : nullptr;
    // A process-wide setting has no field: its effective value is its
    // variable as set, else its default.
    const std::string value = o.field_size ? field_text(eff, o) : env ? env : o.default_text;
    const std::string source = env ? std::string("env ") + o.env : "default";
    std::printf("  %-22s %-28s %-26s %s\n", o.name, value.c_str(), source.c_str(), o.default_text);
  }
  vpmm_option_info lr;
  std::memset(&lr, 0, sizeof lr);
  lr.struct_size = sizeof lr;
  if (vpmm_option_find("large_rounding", &lr, nullptr) == VPMM_OK && lr.env && !std::getenv(lr.env))
    std::printf("  (the hooks' default pools, vpmm_default_pool: large_rounding %d bytes, as PyTorch "
                "rounds)\n", VPMM_DEFAULT_POOL_LARGE_ROUNDING);
  vpmm_pool_destroy(pool);
  return 0;
}

}  // namespace vcli
