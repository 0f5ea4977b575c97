// `vpmm replay`: each trace (text, RMM log or PyTorch snapshot) on a fresh
// pool, with fragmentation figures, a per-op timeline, invariant checks and
// expectations so that traces double as tests. Concern: the command line and
// wiring libvpmm into the replay engine of trace.hpp; parsing and replay
// order live there, snapshots become traces in snapshot.hpp.
//
// Reproducibility: the figures depend on the trace and the flags only. The
// replay launches no work on its streams, so on the host backend every event
// completes when it is recorded and no decision of the pool depends on
// timing; and observing the pool (vpmm_pool_stats for --timeline,
// vpmm_pool_check for --check) has no side effects. A test replays a
// multistream trace plain, with --timeline and under load and compares.
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "cli.hpp"
#include "snapshot.hpp"
#include "trace.hpp"
#include "vpmm.h"

namespace vcli {
namespace {

const char* const kReplayUsage =
    "usage: vpmm replay [OPTIONS] TRACE...\n"
    "\n"
    "Replays each TRACE on a fresh pool. A TRACE is a text trace (format v1 or RMM's logging\n"
    "CSV) or a PyTorch memory snapshot (torch.cuda.memory._dump_snapshot: a pickle, or the\n"
    "same gzip-compressed), told apart by content. See docs/trace-format.md.\n"
    "\n";

}  // namespace

const char* const kReplayHelp =
    "replay options (sizes take K/M/G/T suffixes, powers of 1024, or Np pages):\n"
    "  --backend auto|cuda|host  backend (default: VPMM_BACKEND, else auto: CUDA when a GPU is\n"
    "                            usable, else host)\n"
    "  --page-size N             page size (default: the backend's, 2 MiB)\n"
    "  --va-size N               VA chunk size\n"
    "  --pages N                 pages mapped when the pool is created\n"
    "  --max-handle-size N       handle policy: 0 = scaled (default), unlimited = one handle\n"
    "                            per growth, 1p = page handles, or a cap (see docs/handles.md)\n"
    "  --small-size N            largest request served from shared pages (1 = off)\n"
    "  --host-capacity N         host backend memory (default: max(8 GiB, 4 x peak))\n"
    "  --device N                snapshots: the device whose events to replay (default: the one\n"
    "                            with the most events)\n"
    "  --timeline FILE.csv       stats after every op: trace,op,mapped_bytes,live_bytes,\n"
    "                            requested_bytes,free_bytes,hole_bytes,zombie_bytes\n"
    "  --check                   vpmm_pool_check after every op; fail on a violation\n"
    "  --dump                    print vpmm_pool_dump_text at the end\n"
    "  --expect-layout STR       fail unless the final layout is STR, e.g. \"[4][*6][1][11][*42]\"\n"
    "  --expect-mapped-pages N   fail unless N pages are mapped at the end\n"
    "  --expect-max-ratio R      fail if peak mapped / peak requested exceeds R (fragmentation\n"
    "                            regression tests)\n"
    "  --release-all             then free what is live, sync, vpmm_pool_trim(0), and print\n"
    "                            what stays mapped (empty_cache() after freeing everything)\n"
    "  --expect-held-pages N     --release-all, and fail unless N pages stay mapped\n"
    "  --verbose                 print every op with the layout after it\n"
    "  --quiet                   print nothing but errors\n"
    "  --help                    this text\n"
    "\n"
    "Every VPMM_* variable applies as in any program; options override them.\n"
    "Exit status: 0 success, 1 failure (malformed trace, allocation failure, check or\n"
    "expectation failed), 2 usage error.\n";


namespace {

// A size option: bytes with K/M/G/T, or pages (`p`) of the replay's page size,
// resolved once the page size is known.
struct SizeOpt {
  bool set = false;
  bool pages = false;
  uint64_t value = 0;
  bool resolve(uint64_t page_size, uint64_t* out) const {
    if (!pages) return *out = value, true;
    if (value > UINT64_MAX / page_size) return false;
    *out = value * page_size;
    return true;
  }
};

struct ReplayOpts {
  int32_t backend = -1;  // -1: from the environment (default AUTO)
  SizeOpt page_size, va_size, max_handle, host_capacity, small_size;
  bool pages_set = false;
  uint64_t pages = 0;
  std::string timeline;
  bool dump = false, check = false, quiet = false, verbose = false;
  bool expect_layout_set = false;
  std::string expect_layout;
  bool expect_mapped_set = false;
  uint64_t expect_mapped_pages = 0;
  bool release_all = false;  // free what is live, sync, trim(0), report what stays mapped
  bool expect_held_set = false;
  uint64_t expect_held_pages = 0;
  bool expect_ratio_set = false;
  double expect_max_ratio = 0;  // fail when peak mapped / peak requested exceeds it
  int device = -1;              // snapshots: the device to replay (-1: most events)
  std::vector<std::string> traces;
};

std::string base_name(const std::string& path) {
  std::string n = path.substr(path.find_last_of('/') == std::string::npos ? 0 : path.find_last_of('/') + 1);
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

// Upper bound of the page-rounded live bytes at the trace's peak: what the
// default host capacity is sized from.
uint64_t peak_rounded(const std::vector<vtrace::TraceOp>& ops, uint64_t page) {
  std::vector<uint64_t> live;
  uint64_t cur = 0, peak = 0;
  for (const vtrace::TraceOp& op : ops) {
    if (op.kind == vtrace::OpKind::kMalloc) {
      uint64_t n = 0;
      vtrace::op_bytes(op, page, &n);
      n = (n + page - 1) / page * page;
      if (live.size() <= op.id) live.resize(op.id + 1);
      live[op.id] = n;
      cur += n;
      peak = std::max(peak, cur);
    } else if (op.kind == vtrace::OpKind::kFree && op.id < live.size()) {
      cur -= live[op.id];
      live[op.id] = 0;
    }
  }
  return peak;
}

// The PyTorch side of a snapshot replay, beside libvpmm's figures.
void print_snapshot_facts(const vtrace::SnapshotFacts& f, uint64_t peak_mapped, double load_ms) {
  std::printf("  pytorch snapshot  device %d (of %zu in device_traces): %" PRIu64 " events (%" PRIu64
              " OOM), %zu streams; read in %.0f ms\n",
              f.device, f.devices, f.events, f.ooms, f.stream_handles.size(), load_ms);
  std::printf("  pytorch reserved peak   %s (segments), allocated peak %s\n", fmt_bytes(f.reserved_peak).c_str(),
              fmt_bytes(f.allocated_peak).c_str());
  std::printf("  pytorch reserved  %s at the start%s, %s at dump (%" PRIu64 " segments)\n",
              fmt_bytes(f.reserved_at_start).c_str(),
              f.reserved_clamped ? " (clamped: the segment events exceed the dump's segments)" : "",
              fmt_bytes(f.reserved_at_dump).c_str(), f.segments);
  if (f.reserved_peak)
    std::printf("  vpmm peak mapped / pytorch reserved peak  %.2fx\n", double(peak_mapped) / double(f.reserved_peak));
  else
    std::printf("  vpmm peak mapped / pytorch reserved peak  n/a (no reserved bytes)\n");
  std::printf("  pre-live allocations %" PRIu64 " (%" PRIu64 " freed in the trace, %" PRIu64
              " from segments; %s), repairs %" PRIu64 ", events ignored %" PRIu64 "\n",
              f.prelive_from_frees + f.prelive_from_segments, f.prelive_from_frees, f.prelive_from_segments,
              fmt_bytes(f.prelive_bytes).c_str(), f.repairs, f.ignored);
}

int parse_option(ArgCursor& a, ReplayOpts& o);

// The `# replay:` line among a text trace's leading comments names the pool
// shape the trace was written for (the walkthrough traces need 64 KiB pages
// and a 64-page VA chunk; with defaults their layouts mean nothing). Its pool
// shape flags apply unless the command line gives the same flag; anything
// from a "(" on is prose. *applied lists the flags that took effect.
// Returns 0, or 1 after printing why the line is malformed.
const char* const kHeaderFlags[] = {"--page-size", "--va-size", "--pages", "--max-handle-size",
                                    "--small-size", "--host-capacity"};

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
    if (parse_option(a, h) != 0) {
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
    take(h.host_capacity, &o->host_capacity);
    if (h.pages_set && !o->pages_set) o->pages = h.pages, o->pages_set = took = true;
    h = ReplayOpts();
    if (took) *applied += (applied->empty() ? "" : " ") + a.name + " " + a.value;
  }
  return 0;
}

// One trace on one fresh pool. Returns 0, or 1 after printing why not.
int replay_one(const std::string& path, const ReplayOpts& cmdline, std::FILE* timeline) {
  vtrace::Trace trace;
  std::string err;
  // A snapshot is told apart by its content (a pickle's PROTO or gzip's
  // magic), so a text trace named .pickle still reads as one.
  const bool snapshot = vtrace::is_snapshot_file(path);
  vtrace::SnapshotFacts facts;
  double load_ms = 0;
  if (snapshot) {
    vtrace::SnapshotOptions so;
    so.device = cmdline.device;
    auto t0 = std::chrono::steady_clock::now();
    if (!vtrace::load_snapshot(path, so, &trace, &facts, &err)) {
      std::fprintf(stderr, "vpmm replay: %s\n", err.c_str());
      return 1;
    }
    load_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  } else if (!vtrace::load_trace(path, &trace, &err)) {
    std::fprintf(stderr, "vpmm replay: %s\n", err.c_str());
    return 1;
  }
  ReplayOpts o = cmdline;
  std::string header_flags;
  if (!snapshot && apply_header_flags(path, &o, &header_flags) != 0) return 1;

  vpmm_config c;
  vpmm_config_init(&c);
  if (o.backend >= 0) c.backend = o.backend;
  uint64_t v = 0;
  if (o.page_size.set) c.page_size = o.page_size.value;
  // The page size decides `p` sizes (trace and options) and the default host
  // capacity; when neither option nor environment fixes it, ask a probe pool
  // of the same backend what its default is.
  uint64_t page = c.page_size;
  if (page == 0) {
    vpmm_pool* probe = nullptr;
    vpmm_status st = vpmm_pool_create(&c, &probe);
    if (st != VPMM_OK) {
      std::fprintf(stderr, "vpmm replay: %s: cannot create a pool: %s\n", path.c_str(), status_msg(st).c_str());
      return 1;
    }
    vpmm_config pc;
    get_config(probe, &pc);
    page = pc.page_size;
    vpmm_pool_destroy(probe);
  }
  auto resolve = [&](const SizeOpt& s, const char* name, uint64_t* field) {
    if (!s.set) return true;
    if (!s.resolve(page, &v)) {
      std::fprintf(stderr, "vpmm replay: %s overflows with page size %" PRIu64 "\n", name, page);
      return false;
    }
    *field = v;
    return true;
  };
  if (!resolve(o.va_size, "--va-size", &c.va_size) ||
      !resolve(o.max_handle, "--max-handle-size", &c.max_handle_size) ||
      !resolve(o.small_size, "--small-size", &c.small_size) ||
      !resolve(o.host_capacity, "--host-capacity", &c.host_capacity))
    return 1;
  if (o.pages_set) c.initial_pages = o.pages;

  vtrace::TraceSummary sum;
  if (!vtrace::summarize_trace(trace.ops, page, &sum, &err)) {
    std::fprintf(stderr, "vpmm replay: %s:%s\n", path.c_str(), err.c_str());
    return 1;
  }
  // Default host capacity: never the reason a replay fails. The host backend's
  // memory is a sparse memfd, so a generous figure costs nothing.
  if (!o.host_capacity.set && !std::getenv("VPMM_HOST_CAPACITY")) {
    uint64_t need = peak_rounded(trace.ops, page) + c.initial_pages * page;
    c.host_capacity = std::max<uint64_t>(8ull << 30, std::min<uint64_t>(need, 1ull << 56) * 4);
  }

  vpmm_pool* pool = nullptr;
  vpmm_status st = vpmm_pool_create(&c, &pool);
  if (st != VPMM_OK) {
    std::fprintf(stderr, "vpmm replay: %s: cannot create a pool: %s\n", path.c_str(), status_msg(st).c_str());
    return 1;
  }
  vpmm_config eff;
  get_config(pool, &eff);
  page = eff.page_size;

  // Trace stream k > 0 is a stream of the pool's backend; 0 is the default.
  std::map<int, vpmm_stream> streams;
  streams[0] = nullptr;
  int rc = 0;
  for (int s : sum.streams) {
    if (s == 0) continue;
    vpmm_stream h = nullptr;
    if ((st = vpmm_pool_stream_create(pool, &h)) != VPMM_OK) {
      std::fprintf(stderr, "vpmm replay: %s: cannot create stream %d: %s\n", path.c_str(), s, status_msg(st).c_str());
      rc = 1;
      break;
    }
    streams[s] = h;
  }

  const std::string name = base_name(path);
  auto write_row = [&](size_t op) {
    vpmm_stats s = stats_of(pool);
    std::fprintf(timeline, "%s,%zu,%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%" PRIu64 "\n",
                 name.c_str(), op, s.mapped_bytes, s.live_bytes, s.requested_bytes, s.free_bytes,
                 s.hole_bytes, s.zombie_bytes);
  };

  vtrace::ReplayHooks hooks;
  hooks.malloc = [&](const vtrace::TraceOp& op, uint64_t bytes, void** p, std::string* e) {
    vpmm_status s = vpmm_pool_malloc(pool, bytes, streams.at(op.stream), p);
    if (s == VPMM_OK) return true;
    *e = "malloc " + trace.ids[op.id] + " " + std::to_string(bytes) + " (" + fmt_bytes(bytes) +
         ") on stream " + std::to_string(op.stream) + " failed: " + status_msg(s);
    return false;
  };
  hooks.free = [&](const vtrace::TraceOp& op, void* p, uint64_t, std::string* e) {
    vpmm_status s = vpmm_pool_free(pool, p, streams.at(op.stream));
    if (s == VPMM_OK) return true;
    *e = "free " + trace.ids[op.id] + " on stream " + std::to_string(op.stream) + " failed: " + status_msg(s);
    return false;
  };
  hooks.sync = [&](int stream, std::string* e) {
    vpmm_status s = vpmm_pool_stream_synchronize(pool, streams.at(stream));
    if (s == VPMM_OK) return true;
    *e = "sync of stream " + std::to_string(stream) + " failed: " + status_msg(s);
    return false;
  };
  hooks.after = [&](size_t done, const vtrace::TraceOp& op, std::string* e) {
    if (o.check) {
      vpmm_status s = vpmm_pool_check(pool);
      if (s != VPMM_OK) {
        *e = "vpmm_pool_check failed after op " + std::to_string(done) + ": " + status_msg(s);
        return false;
      }
    }
    if (timeline) write_row(done);
    if (o.verbose) {
      // One line per op: the op as the trace wrote it, then the layout.
      std::string what = op.kind == vtrace::OpKind::kMalloc ? "malloc " + trace.ids[op.id] + " " +
                             (op.in_pages ? std::to_string(op.size) + "p" : fmt_bytes(op.size))
                       : op.kind == vtrace::OpKind::kFree ? "free " + trace.ids[op.id]
                       : std::string("sync");
      if (op.kind != vtrace::OpKind::kSync || op.stream >= 0) what += " @" + std::to_string(op.stream);
      std::printf("  %5zu %-24s %s\n", done, what.c_str(), layout_of(pool, page).c_str());
    }
    return true;
  };

  vtrace::ReplayResult res;
  double ms = 0;
  if (rc == 0) {
    if (timeline) write_row(0);  // the pool as created (initial pages)
    auto t0 = std::chrono::steady_clock::now();
    if (!vtrace::replay_trace(trace.ops, page, hooks, &res, &err, path)) {
      std::fprintf(stderr, "vpmm replay: %s\n", err.c_str());
      rc = 1;
    }
    ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  }

  vpmm_stats s = stats_of(pool);
  const std::string layout = layout_of(pool, page);
  const double frag = s.peak_live_bytes ? double(s.peak_mapped_bytes) / double(s.peak_live_bytes) : 0.0;
  if (!o.quiet) {
    std::printf("%s: %s backend, page %s, va chunk %s, %" PRIu64 " initial pages, max handle %s%s\n",
                path.c_str(), vpmm_pool_backend_name(pool), fmt_bytes(page).c_str(),
                fmt_bytes(eff.va_size).c_str(), eff.initial_pages,
                eff.max_handle_size == VPMM_HANDLE_SIZE_UNLIMITED ? "unlimited" : eff.max_handle_size ? fmt_bytes(eff.max_handle_size).c_str() : "scaled",
                snapshot ? ", PyTorch snapshot"
                : trace.format == vtrace::TraceFormat::kRmmCsv ? ", RMM log" : "");
    if (!header_flags.empty())
      std::printf("  trace flags       %s (its # replay: line; command-line flags win)\n", header_flags.c_str());
    std::printf("  ops               %zu of %zu (%" PRIu64 " mallocs, %" PRIu64 " frees, %" PRIu64
                " syncs; %zu streams)%s\n",
                res.ops_done, trace.ops.size(), res.mallocs, res.frees, res.syncs, sum.streams.size(),
                trace.skipped_failures ? (", " + std::to_string(trace.skipped_failures) +
                                          " RMM failures/zero-size skipped").c_str() : "");
    std::printf("  replay time       %.1f ms%s\n", ms, o.check ? " (with --check)" : "");
    std::printf("  peak requested    %s\n", fmt_bytes(res.peak_requested).c_str());
    std::printf("  peak live         %s\n", fmt_bytes(s.peak_live_bytes).c_str());
    std::printf("  peak mapped       %s\n", fmt_bytes(s.peak_mapped_bytes).c_str());
    std::printf("  fragmentation     %.3f (peak mapped / peak live); peak mapped / peak requested %.3f\n", frag,
                res.peak_requested ? double(s.peak_mapped_bytes) / double(res.peak_requested) : 0.0);
    std::printf("  final             mapped %s, live %s, requested %s, free %s, holes %s, zombies %s\n",
                fmt_bytes(s.mapped_bytes).c_str(), fmt_bytes(s.live_bytes).c_str(),
                fmt_bytes(s.requested_bytes).c_str(), fmt_bytes(s.free_bytes).c_str(),
                fmt_bytes(s.hole_bytes).c_str(), fmt_bytes(s.zombie_bytes).c_str());
    std::printf("  largest free      %s\n", fmt_bytes(s.largest_free_bytes).c_str());
    std::printf("  defrags %" PRIu64 ", grows %" PRIu64 ", pages created %" PRIu64 ", bytes remapped %s, "
                "handles %" PRIu64 " (%" PRIu64 " created), VA chunks %" PRIu64 "\n",
                s.n_defrag, s.n_grow, s.pages_created, fmt_bytes(s.bytes_remapped).c_str(), s.handles,
                s.handles_created, s.va_chunks);
    std::printf("  mapped pages      %" PRIu64 "\n", s.mapped_bytes / page);
    std::printf("  layout            %s\n", layout.c_str());
    if (snapshot) print_snapshot_facts(facts, s.peak_mapped_bytes, load_ms);
  }
  if (rc == 0 && o.expect_layout_set && layout != o.expect_layout) {
    std::fprintf(stderr, "vpmm replay: %s: layout %s, expected %s\n", path.c_str(), layout.c_str(),
                 o.expect_layout.c_str());
    rc = 1;
  }
  if (rc == 0 && o.expect_mapped_set && s.mapped_bytes != o.expect_mapped_pages * page) {
    std::fprintf(stderr, "vpmm replay: %s: %" PRIu64 " mapped pages, expected %" PRIu64 "\n", path.c_str(),
                 s.mapped_bytes / page, o.expect_mapped_pages);
    rc = 1;
  }
  const double mapped_per_requested =
      res.peak_requested ? double(s.peak_mapped_bytes) / double(res.peak_requested) : 0.0;
  if (rc == 0 && o.expect_ratio_set && mapped_per_requested > o.expect_max_ratio) {
    std::fprintf(stderr, "vpmm replay: %s: peak mapped / peak requested %.3f exceeds --expect-max-ratio %g\n",
                 path.c_str(), mapped_per_requested, o.expect_max_ratio);
    rc = 1;
  }
  if (rc == 0 && o.release_all) {
    // What an application that frees everything and calls empty_cache() gets
    // back: every live allocation freed on its stream, the streams synced,
    // then vpmm_pool_trim(0).
    for (const vtrace::ReplayLive& l : res.live)
      if ((st = vpmm_pool_free(pool, l.ptr, streams.at(l.stream))) != VPMM_OK) rc = 1;
    for (auto& kv : streams)
      if (vpmm_pool_stream_synchronize(pool, kv.second) != VPMM_OK) rc = 1;
    if (vpmm_pool_trim(pool, 0) != VPMM_OK) rc = 1;
    if (rc != 0) std::fprintf(stderr, "vpmm replay: %s: release-all failed: %s\n", path.c_str(), vpmm_last_error());
    vpmm_stats after = stats_of(pool);
    if (!o.quiet)
      std::printf("  after release-all mapped %s (%" PRIu64 " pages), free %s, zombies %s, layout %s\n",
                  fmt_bytes(after.mapped_bytes).c_str(), after.mapped_bytes / page,
                  fmt_bytes(after.free_bytes).c_str(), fmt_bytes(after.zombie_bytes).c_str(),
                  layout_of(pool, page).c_str());
    if (rc == 0 && o.expect_held_set && after.mapped_bytes != o.expect_held_pages * page) {
      std::fprintf(stderr, "vpmm replay: %s: %" PRIu64 " pages held after release-all, expected %" PRIu64 "\n",
                   path.c_str(), after.mapped_bytes / page, o.expect_held_pages);
      rc = 1;
    }
  }
  if (o.dump) {
    size_t need = 0;
    vpmm_pool_dump_text(pool, nullptr, 0, &need);
    std::string text(need, '\0');
    if (vpmm_pool_dump_text(pool, &text[0], text.size(), &need) == VPMM_OK) {
      text.resize(std::strlen(text.c_str()));
      std::printf("%s", text.c_str());
    }
  }
  for (auto& kv : streams) {
    if (kv.first == 0) continue;
    if ((st = vpmm_pool_stream_destroy(pool, kv.second)) != VPMM_OK) {
      std::fprintf(stderr, "vpmm replay: %s: destroying stream %d: %s\n", path.c_str(), kv.first,
                   status_msg(st).c_str());
      rc = 1;
    }
  }
  if ((st = vpmm_pool_destroy(pool)) != VPMM_OK) {
    std::fprintf(stderr, "vpmm replay: %s: destroying the pool: %s\n", path.c_str(), status_msg(st).c_str());
    rc = 1;
  }
  return rc;
}

}  // namespace

namespace {

// One option at the cursor (a.take_option() done). Returns 0 when taken,
// -1 for --help, or a usage error's exit status (2).
int parse_option(ArgCursor& a, ReplayOpts& o) {
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
  if (n == "--verbose") return o.verbose = true, 0;
  if (n == "--release-all") return o.release_all = true, 0;
  if (!a.take_value()) return usage_error(n + " wants a value");
  const std::string& val = a.value;
  if (n == "--backend") {
    if (val == "auto") o.backend = VPMM_BACKEND_AUTO;
    else if (val == "cuda") o.backend = VPMM_BACKEND_CUDA;
    else if (val == "hip") o.backend = VPMM_BACKEND_HIP;
    else if (val == "host") o.backend = VPMM_BACKEND_HOST;
    else return usage_error("--backend wants auto, cuda, hip or host, got '" + val + "'");
  } else if (n == "--page-size" || n == "--va-size" || n == "--max-handle-size" ||
             n == "--host-capacity" || n == "--small-size") {
    SizeOpt* s = n == "--page-size" ? &o.page_size : n == "--va-size" ? &o.va_size
               : n == "--max-handle-size" ? &o.max_handle : n == "--host-capacity" ? &o.host_capacity
               : &o.small_size;
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
  } else if (n == "--expect-max-ratio") {
    char* end = nullptr;
    double r = std::strtod(val.c_str(), &end);
    if (val.empty() || *end != '\0' || !std::isfinite(r) || r <= 0)
      return usage_error("--expect-max-ratio wants a number > 0, got '" + val + "'");
    o.expect_max_ratio = r;
    o.expect_ratio_set = true;
  } else if (n == "--device") {
    if (val.empty() || val.size() > 9 || val.find_first_not_of("0123456789") != std::string::npos)
      return usage_error("--device wants a device number, got '" + val + "'");
    o.device = std::atoi(val.c_str());
  } else if (n == "--timeline") {
    o.timeline = val;
  } else if (n == "--expect-layout") {
    o.expect_layout = val;
    o.expect_layout_set = true;
  } else {
    return usage_error("unknown replay option '" + n + "'");
  }
  return 0;
}

}  // namespace

int cmd_replay(int argc, char** argv) {
  ReplayOpts o;
  ArgCursor a(argc, argv);
  while (a.i < argc) {
    if (!a.next_is_option()) {
      o.traces.push_back(argv[a.i++]);
      continue;
    }
    a.take_option();
    const int rc = parse_option(a, o);
    if (rc == -1) {
      std::fputs(kReplayUsage, stdout);
      std::fputs(kReplayHelp, stdout);
      return 0;
    }
    if (rc != 0) return rc;
  }
  if (o.traces.empty()) return usage_error("replay wants at least one TRACE");

  std::FILE* tl = nullptr;
  if (!o.timeline.empty()) {
    tl = std::fopen(o.timeline.c_str(), "w");
    if (!tl) {
      std::fprintf(stderr, "vpmm replay: cannot write %s: %s\n", o.timeline.c_str(), std::strerror(errno));
      return 1;
    }
    std::fprintf(tl, "trace,op,mapped_bytes,live_bytes,requested_bytes,free_bytes,hole_bytes,zombie_bytes\n");
  }
  int rc = 0;
  for (size_t i = 0; i < o.traces.size(); ++i) {
    if (i && !o.quiet) std::printf("\n");
    rc |= replay_one(o.traces[i], o, tl);
  }
  if (tl && std::fclose(tl) != 0) {
    std::fprintf(stderr, "vpmm replay: writing %s failed\n", o.timeline.c_str());
    rc = 1;
  }
  return rc;
}


}  // namespace vcli
