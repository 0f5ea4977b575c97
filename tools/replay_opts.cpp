// `vpmm replay`'s options (see replay_opts.hpp): parsing, the `# replay:`
// header line, and the help text.
#include "replay_opts.hpp"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "trace.hpp"
#include "vpmm.h"

namespace vcli {

const char* const kReplayUsage =
    "usage: vpmm replay [OPTIONS] TRACE...\n"
    "\n"
    "Replays each TRACE on a fresh pool. A TRACE is a text trace (format v1 or RMM's logging\n"
    "CSV) or a PyTorch memory snapshot (torch.cuda.memory._dump_snapshot: a pickle, or the\n"
    "same gzip-compressed), told apart by content. See docs/trace-format.md.\n"
    "\n";

const char* const kReplayHelp =
    "replay options (sizes take K/M/G/T suffixes, powers of 1024, or Np pages):\n"
    "  --backend auto|cuda|hip|host\n"
    "                            backend (default: VPMM_BACKEND, else auto: CUDA, else HIP,\n"
    "                            when a GPU is usable, else host)\n"
    "  --page-size N             page size (default: the backend's, 2 MiB)\n"
    "  --va-size N               VA chunk size\n"
    "  --pages N                 pages mapped when the pool is created\n"
    "  --max-handle-size N       handle policy: 0 = scaled (default), unlimited = one handle\n"
    "                            per growth, 1p = page handles, or a cap (see docs/handles.md)\n"
    "  --small-size N            largest request served from shared pages (1 = off)\n"
    "  --large-rounding N        what larger untagged requests round up to: 1p = whole pages\n"
    "                            (a text trace's default), 512 = shared pages (a snapshot's\n"
    "                            default: what PyTorch's hook, the default pool, uses)\n"
    "  --host-capacity N         host backend memory (default: max(8 GiB, 4 x peak))\n"
    "  --device N                snapshots: the device whose events to replay (default: the one\n"
    "                            with the most events)\n"
    "  --timeline FILE.csv       stats after every op: trace,op,mapped_bytes,live_bytes,\n"
    "                            requested_bytes,free_bytes,hole_bytes,zombie_bytes,\n"
    "                            pytorch_reserved_bytes (snapshots; empty for other traces)\n"
    "  --check                   vpmm_pool_check after every op; fail on a violation\n"
    "  --dump                    print vpmm_pool_dump_text at the end\n"
    "  --expect-layout STR       fail unless the final layout is STR, e.g. \"[4][*6][1][11][*42]\"\n"
    "  --expect-mapped-pages N   fail unless N pages are mapped at the end\n"
    "  --expect-max-ratio R      fail if peak mapped / peak requested exceeds R (fragmentation\n"
    "                            regression tests)\n"
    "  --expect-max-steady-remap F  fail if the bytes remapped in the second half of the trace\n"
    "                            exceed F x peak requested (a loop that never settles)\n"
    "  --release-all             then free what is live, sync, vpmm_pool_trim(0), and print\n"
    "                            what stays mapped (empty_cache() after freeing everything)\n"
    "  --expect-held-pages N     --release-all, and fail unless N pages stay mapped\n"
    "  --policy NAME[,NAME...]   replay under each placement chain in turn and compare them\n"
    "                            (peak ratio, second-half remapping, driver calls, handles):\n"
    "                            default (where the driver budget cannot pay for moving pages,\n"
    "                            another stream's pending free in place, else grow), exact\n"
    "                            (pages move: page-exact within the remap slack),\n"
    "                            views (exact with views, the default before the budget),\n"
    "                            pending (default, and other streams' pending frees reused)\n"
    "  --op-time US              what each op of the trace stands for in the driver budget's\n"
    "                            clock, in microseconds (default 50, or VPMM_BUDGET_CLOCK_US;\n"
    "                            0: the wall clock): a GPU step's time over its allocations\n"
    "  --verbose                 print every op with the layout after it\n"
    "  --log-remaps              print a line for every op that remapped pages or grew the pool:\n"
    "                            its size, what it moved and created, the free memory before it\n"
    "  --lag                     snapshots, host backend: a block PyTorch freed only some events\n"
    "                            after the program let go of it (memory another stream still\n"
    "                            used: record_stream) is freed at the request on a held host\n"
    "                            stream, pending until its completion event, as a GPU behind\n"
    "                            the CPU keeps it (docs/trace-format.md)\n"
    "  --gpu-lag OPS             host backend: every stream's work completes only at the next\n"
    "                            multiple of OPS ops (and at a sync), as a GPU running behind the\n"
    "                            CPU leaves frees of other streams pending; 0 (default): at once\n"
    "  --cold BYTES              write BYTES of other memory between ops (the work a program\n"
    "                            does between allocations, evicting the pool's data from the\n"
    "                            caches) and report the ops' own time per malloc and free\n"
    "  --quiet                   print nothing but errors\n"
    "  --summary                 print only the peaks table (PyTorch reserved, libvpmm mapped,\n"
    "                            requested), one per trace\n"
    "  --help                    this text\n"
    "\n"
    "Every VPMM_* variable applies as in any program; options override them. A text trace's\n"
    "`# replay:` header line sets its pool shape (--page-size, --va-size, --pages,\n"
    "--max-handle-size, --small-size, --host-capacity, --large-rounding) unless the same\n"
    "option is given here.\n"
    "Exit status: 0 success, 1 failure (malformed trace, allocation failure, check or\n"
    "expectation failed), 2 usage error.\n";


const char* const kPolicyHelp = "default, exact, views or pending";

// The policies are the library's placement chains (VPMM_PLACEMENT), parsed
// by the library's own table, so a program gets any of them from the
// environment.
bool policy_settings(const std::string& name, vpmm_config* c) {
  // Sized: the init of an uninitialised struct reads its struct_size, which
  // garbage may make an older size (ASan's stack did: 'default' refused).
  vpmm_config scratch;
  if (vpmm_config_init_sized(&scratch, sizeof scratch, VPMM_CONFIG_DEFAULTS_ONLY) != VPMM_OK) return false;
  if (vpmm_option_parse("placement", name.c_str(), &scratch) != VPMM_OK) return false;
  if (c) c->placement = scratch.placement;
  return true;
}

int parse_replay_option(ArgCursor& a, ReplayOpts& o) {
  auto size_opt = [&](SizeOpt* s) {
    if (a.value == "0") {  // 0 = the library's default for every size field
      *s = SizeOpt{true, false, 0};
      return true;
    }
    if (s == &o.max_handle && a.value == "unlimited") {  // one handle per growth
      *s = SizeOpt{true, false, VPMM_HANDLE_SIZE_UNLIMITED};
      return true;
    }
    bool pages = false;
    if (!vtrace::parse_size(a.value, &s->value, &pages)) return false;
    s->pages = pages;
    s->set = true;
    return true;
  };
  const std::string& n = a.name;
  if (n == "--help") return -1;
  if (n == "--dump") return o.dump = true, 0;
  if (n == "--check") return o.check = true, 0;
  if (n == "--quiet") return o.quiet = true, 0;
  if (n == "--summary") return o.summary = true, 0;
  if (n == "--verbose") return o.verbose = true, 0;
  if (n == "--log-remaps") return o.log_remaps = true, 0;
  if (n == "--lag") return o.lag = true, 0;
  if (n == "--release-all") return o.release_all = true, 0;
  if (!a.take_value()) return usage_error(n + " wants a value");
  const std::string& val = a.value;
  if (n == "--backend") {
    // The kinds as the library names them (vpmm_backend_kind_name: 0, 1, ... until NULL).
    std::string names;
    int32_t kind = -1;
    for (int32_t k = 0; const char* name = vpmm_backend_kind_name(k); ++k) {
      if (val == name) kind = k;
      names += (k ? ", " : "") + std::string(name);
    }
    if (kind < 0) return usage_error("--backend wants one of " + names + ", got '" + val + "'");
    o.backend = kind;
  } else if (n == "--page-size" || n == "--va-size" || n == "--max-handle-size" ||
             n == "--host-capacity" || n == "--small-size" || n == "--large-rounding") {
    SizeOpt* s = n == "--page-size" ? &o.page_size : n == "--va-size" ? &o.va_size
               : n == "--max-handle-size" ? &o.max_handle : n == "--host-capacity" ? &o.host_capacity
               : n == "--small-size" ? &o.small_size : &o.large_rounding;
    if (!size_opt(s))
      return usage_error(n + " wants a size (decimal or 0x-hex, K/M/G/T suffix, or Np pages), got '" + val + "'");
    if (s == &o.page_size && s->pages) return usage_error("--page-size cannot be given in pages");
  } else if (n == "--pages" || n == "--expect-mapped-pages" || n == "--expect-held-pages") {
    uint64_t x = 0;
    bool pages = false;
    bool ok = val == "0" || (vtrace::parse_size(val, &x, &pages) && !pages);
    if (!ok) return usage_error(n + " wants a page count, got '" + val + "'");
    if (n == "--pages") o.pages = x, o.pages_set = true;
    else if (n == "--expect-held-pages") o.expect_held_pages = x, o.expect_held_set = o.release_all = true;
    else o.expect_mapped_pages = x, o.expect_mapped_set = true;
  } else if (n == "--expect-max-ratio" || n == "--expect-max-steady-remap") {
    char* end = nullptr;
    double r = std::strtod(val.c_str(), &end);
    const bool ratio = n == "--expect-max-ratio";
    if (val.empty() || *end != '\0' || !std::isfinite(r) || (ratio ? r <= 0 : r < 0))
      return usage_error(n + (ratio ? " wants a number > 0" : " wants a number >= 0") + ", got '" + val + "'");
    if (ratio) o.expect_max_ratio = r, o.expect_ratio_set = true;
    else o.expect_max_steady_remap = r, o.expect_steady_set = true;
  } else if (n == "--gpu-lag") {
    if (val.empty() || val.size() > 9 || val.find_first_not_of("0123456789") != std::string::npos)
      return usage_error("--gpu-lag wants a number of ops, got '" + val + "'");
    o.gpu_lag = std::strtoull(val.c_str(), nullptr, 10);
  } else if (n == "--cold") {
    bool pages = false;
    if (!vtrace::parse_size(val, &o.cold_bytes, &pages) || pages || o.cold_bytes > (uint64_t(1) << 32))
      return usage_error("--cold wants a size in bytes up to 4G (K/M/G suffixes), got '" + val + "'");
  } else if (n == "--op-time") {
    if (val.empty() || val.size() > 7 || val.find_first_not_of("0123456789") != std::string::npos)
      return usage_error("--op-time wants microseconds (0 to 1000000), got '" + val + "'");
    o.op_time_us = std::strtoll(val.c_str(), nullptr, 10);
    if (o.op_time_us > 1000000) return usage_error("--op-time wants microseconds (0 to 1000000), got '" + val + "'");
  } else if (n == "--device") {
    if (val.empty() || val.size() > 9 || val.find_first_not_of("0123456789") != std::string::npos)
      return usage_error("--device wants a device number, got '" + val + "'");
    o.device = std::atoi(val.c_str());
  } else if (n == "--timeline") {
    o.timeline = val;
  } else if (n == "--policy") {
    o.policies.clear();
    size_t at = 0;
    while (at <= val.size()) {
      size_t comma = val.find(',', at);
      if (comma == std::string::npos) comma = val.size();
      const std::string name = val.substr(at, comma - at);
      if (!policy_settings(name, nullptr)) return usage_error("--policy: unknown policy '" + name + "' (" + kPolicyHelp + ")");
      o.policies.push_back(name);
      at = comma + 1;
    }
  } else if (n == "--expect-layout") {
    o.expect_layout = val;
    o.expect_layout_set = true;
  } else {
    return usage_error("unknown replay option '" + n + "'");
  }
  return 0;
}


namespace {
// The `# replay:` line among a text trace's leading comments names the pool
// shape the trace was written for (the walkthrough traces need 64 KiB pages
// and a 64-page VA chunk; with defaults their layouts mean nothing). Its pool
// shape flags apply unless the command line gives the same flag; anything
// from a "(" on is prose. *applied lists the flags that took effect.
// Returns 0, or 1 after printing why the line is malformed.
const char* const kHeaderFlags[] = {"--page-size", "--va-size", "--pages", "--max-handle-size",
                                    "--small-size", "--host-capacity", "--large-rounding"};

}  // namespace

int apply_header_flags(const std::string& path, ReplayOpts* o, std::string* applied) {
  std::FILE* f = std::fopen(path.c_str(), "r");
  if (!f) return 0;  // load_trace reports it, with the reason
  std::string line, flags;
  int lineno = 0, at = 0;
  char buf[4096];
  while (std::fgets(buf, sizeof buf, f)) {
    ++lineno;
    line = buf;
    while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
    if (line.empty()) continue;
    if (line[0] != '#') break;  // only the leading comments
    if (line.rfind("# replay:", 0) == 0) {
      flags = line.substr(9);
      at = lineno;
      break;
    }
  }
  std::fclose(f);
  if (at == 0) return 0;
  // Words, with "double quotes" grouping; stop at prose.
  std::vector<std::string> words;
  for (size_t i = 0; i < flags.size();) {
    if (std::isspace(static_cast<unsigned char>(flags[i]))) {
      ++i;
      continue;
    }
    if (flags[i] == '(') break;
    std::string w;
    while (i < flags.size() && !std::isspace(static_cast<unsigned char>(flags[i]))) {
      if (flags[i] == '"') {
        size_t e = flags.find('"', i + 1);
        if (e == std::string::npos) e = flags.size();
        w += flags.substr(i + 1, e - i - 1);
        i = e + 1;
      } else {
        w += flags[i++];
      }
    }
    words.push_back(w);
  }
  std::vector<char*> argv;
  for (std::string& w : words) argv.push_back(&w[0]);
  ReplayOpts h;
  ArgCursor a(static_cast<int>(argv.size()), argv.data());
  while (a.i < a.argc) {
    if (!a.next_is_option()) {
      std::fprintf(stderr, "vpmm replay: %s:%d: # replay: '%s' is not a flag\n", path.c_str(), at, argv[a.i]);
      return 1;
    }
    a.take_option();
    bool shape = false;
    for (const char* n : kHeaderFlags) shape = shape || a.name == n;
    if (!shape) {
      std::fprintf(stderr, "vpmm replay: %s:%d: # replay: %s is not a pool shape flag (%s", path.c_str(), at,
                   a.name.c_str(), kHeaderFlags[0]);
      for (size_t k = 1; k < sizeof kHeaderFlags / sizeof kHeaderFlags[0]; ++k)
        std::fprintf(stderr, ", %s", kHeaderFlags[k]);
      std::fprintf(stderr, ")\n");
      return 1;
    }
    if (parse_replay_option(a, h) != 0) {
      std::fprintf(stderr, "vpmm replay: %s:%d: in its # replay: line\n", path.c_str(), at);
      return 1;
    }
    // The command line wins over the trace.
    bool took = false;
    auto take = [&](const SizeOpt& from, SizeOpt* to) {
      if (from.set && !to->set) *to = from, took = true;
    };
    take(h.page_size, &o->page_size);
    take(h.va_size, &o->va_size);
    take(h.max_handle, &o->max_handle);
    take(h.small_size, &o->small_size);
    take(h.large_rounding, &o->large_rounding);
    take(h.host_capacity, &o->host_capacity);
    if (h.pages_set && !o->pages_set) o->pages = h.pages, o->pages_set = took = true;
    h = ReplayOpts();
    if (took) *applied += (applied->empty() ? "" : " ") + a.name + " " + a.value;
  }
  return 0;
}


}  // namespace vcli
