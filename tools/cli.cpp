// Shared helpers of the `vpmm` subcommands (see cli.hpp).
#include "cli.hpp"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <vector>

namespace vcli {

std::string fmt_bytes(uint64_t v) {
  static const char* const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int u = 0;
  uint64_t div = 1;
  while (u < 5 && v >= div * 1024) div *= 1024, ++u;
  char b[64];
  if (v % div == 0)
    std::snprintf(b, sizeof b, "%" PRIu64 " %s", v / div, units[u]);
  else
    std::snprintf(b, sizeof b, "%.1f %s", double(v) / double(div), units[u]);
  return b;
}

std::string status_msg(vpmm_status st) {
  std::string m = vpmm_status_string(st);
  const char* e = vpmm_last_error();
  if (e && *e) m += std::string(": ") + e;
  return m;
}

std::string trace_name(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  std::string n = path.substr(slash == std::string::npos ? 0 : slash + 1);
  for (const char* ext : {".trace", ".pickle.gz", ".pickle", ".pkl"}) {
    const size_t k = std::strlen(ext);
    if (n.size() > k && n.compare(n.size() - k, k, ext) == 0) {
      n.resize(n.size() - k);
      break;
    }
  }
  for (char& ch : n)
    if (ch == ',' || ch == '"') ch = '_';  // the timeline's trace column is plain CSV
  return n;
}

const char* backend_arg_name(int32_t b) {
  const char* name = vpmm_backend_kind_name(b);  // the library's table of the names
  return name ? name : "?";
}

std::string layout_of(vpmm_pool* pool) {
  // The library formats the notation (vpmm_pool_layout, the same formatter
  // as vpmm_pool_dump_text's regions and the tests' expectations).
  size_t need = 0;
  if (vpmm_pool_layout(pool, nullptr, 0, &need) != VPMM_OK || need == 0) return "?";
  std::string out;
  do {  // the pool may change between the two calls: retry until it fits
    out.assign(need + 64, '\0');
    if (vpmm_pool_layout(pool, &out[0], out.size(), &need) != VPMM_OK) return "?";
  } while (need > out.size());
  out.resize(need - 1);
  return out;
}

namespace {
// A zeroed snapshot struct whose struct_size is the whole struct, as
// `query` fills it (left zeroed if it fails).
template <typename T>
T sized_snapshot_of(vpmm_pool* pool, vpmm_status (*query)(vpmm_pool*, T*)) {
  T out;
  std::memset(&out, 0, sizeof out);
  out.struct_size = sizeof out;
  query(pool, &out);
  return out;
}
}  // namespace

vpmm_stats stats_of(vpmm_pool* pool) { return sized_snapshot_of(pool, vpmm_pool_stats); }

vpmm_driver_profile driver_profile_of(vpmm_pool* pool) { return sized_snapshot_of(pool, vpmm_pool_driver_profile); }

bool get_config(vpmm_pool* pool, vpmm_config* c) {
  std::memset(c, 0, sizeof *c);
  c->struct_size = sizeof *c;
  return vpmm_pool_get_config(pool, c) == VPMM_OK;
}

int usage_error(const std::string& msg) {
  std::fprintf(stderr, "vpmm: %s (see `vpmm help`)\n", msg.c_str());
  return 2;
}

void ArgCursor::take_option() {
  std::string a = argv[i++];
  size_t eq = a.find('=');
  has_inline = eq != std::string::npos;
  name = has_inline ? a.substr(0, eq) : a;
  value = has_inline ? a.substr(eq + 1) : "";
}

bool ArgCursor::take_value() {
  if (has_inline) return true;
  if (i >= argc) return false;
  value = argv[i++];
  return true;
}

}  // namespace vcli
