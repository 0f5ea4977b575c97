// `vpmm replay`: each trace (text, RMM log or PyTorch snapshot) on a fresh
// pool, with fragmentation figures, a per-op timeline, invariant checks and
// expectations so that traces double as tests. Concern: wiring libvpmm into
// the replay engine of trace.hpp and printing what came out; options are
// parsed in replay_opts.cpp, traces in trace.cpp, snapshots become traces in
// snapshot.cpp.
//
// Reproducibility: the figures depend on the trace and the flags only. The
// replay launches no work on its streams, so on the host backend every event
// completes when it is recorded and no decision of the pool depends on
// timing; observing the pool (vpmm_pool_stats for --timeline,
// vpmm_pool_check for --check) has no side effects; and the pool breaks ties
// between streams by its own order, not by stream addresses (which ASLR
// changes from run to run). check_replay_repro.py replays a multistream trace
// repeatedly, plain, with --timeline and concurrently, and compares.
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <sys/stat.h>

#include "cli.hpp"
#include "pickle.hpp"
#include "replay_opts.hpp"
#include "snapshot.hpp"
#include "trace.hpp"
#include "vpmm.h"
#include "vpmm_host_streams.h"  // --lag holds host streams

namespace vcli {
namespace {

// What an op of a trace stands for in the driver budget's modelled clock
// (--op-time): the hard client's step (~300 ms on an H100) over its ~5,000
// allocations and frees is ~60 us; dense loops allocate less often.
constexpr int32_t kDefaultOpTimeUs = 50;

// Whether the caller set the variable of `option`, named by the library's
// option table (the one place that knows the VPMM_* names).
bool option_set_in_env(const char* option) {
  vpmm_option_info o;
  std::memset(&o, 0, sizeof o);
  o.struct_size = sizeof o;
  return vpmm_option_find(option, &o, nullptr) == VPMM_OK && o.env && std::getenv(o.env);
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

// Bytes remapped in the trace's second half per peak requested byte.
double steady_remap_share(const vpmm_stats& end, const vpmm_stats& half, uint64_t peak_requested) {
  return peak_requested ? double(end.bytes_remapped - half.bytes_remapped) / double(peak_requested) : 0.0;
}

// The second half's backend calls by kind (every call of the pool, malloc's,
// free's and the zombies' cleanup): on the CUDA backend what a steady state
// costs, since the driver charges per handle and per kind (set-access and
// unmap are dear, map is cheap).
void print_driver_by_kind(const vpmm_driver_profile& end, const vpmm_driver_profile& half) {
  struct Kind {
    const char* name;
    uint64_t vpmm_driver_profile::*calls, vpmm_driver_profile::*ns;
  };
  static const Kind kinds[] = {
      {"map", &vpmm_driver_profile::map_calls, &vpmm_driver_profile::map_ns},
      {"unmap", &vpmm_driver_profile::unmap_calls, &vpmm_driver_profile::unmap_ns},
      {"set-access", &vpmm_driver_profile::set_access_calls, &vpmm_driver_profile::set_access_ns},
      {"create", &vpmm_driver_profile::create_calls, &vpmm_driver_profile::create_ns},
      {"release", &vpmm_driver_profile::release_calls, &vpmm_driver_profile::release_ns},
      {"event record", &vpmm_driver_profile::event_record_calls, &vpmm_driver_profile::event_record_ns},
      {"event query", &vpmm_driver_profile::event_query_calls, &vpmm_driver_profile::event_query_ns},
      {"stream wait", &vpmm_driver_profile::stream_wait_calls, &vpmm_driver_profile::stream_wait_ns},
  };
  std::string line;
  for (const Kind& k : kinds) {
    const uint64_t calls = end.*k.calls - half.*k.calls;
    char buf[96];
    std::snprintf(buf, sizeof buf, "%s%s %" PRIu64 " (%.1f ms)", line.empty() ? "" : ", ", k.name, calls,
                  double(end.*k.ns - half.*k.ns) / 1e6);
    line += buf;
  }
  std::printf("  driver by kind    second half: %s\n", line.c_str());
}

// The second half's driver time as a GPU would spend it (the pool's calls
// at H100 costs; set-access per mapped handle: its cost is per handle) per
// the time the half's ops stand for (--op-time): what the driver budget
// keeps under its share. -1 without a modelled clock.
double modelled_driver_share(const vpmm_driver_profile& end, const vpmm_driver_profile& half, uint64_t ops,
                             int32_t op_us) {
  if (op_us <= 0 || ops == 0) return -1.0;
  const double map = double(end.map_calls - half.map_calls), unmap = double(end.unmap_calls - half.unmap_calls);
  const double create = double(end.create_calls - half.create_calls);
  const double release = double(end.release_calls - half.release_calls);
  const double ns = map * (1600 + 41000) + unmap * 31000 + create * 16000 + release * 20500;
  return ns / (double(ops) * op_us * 1000.0);
}

// Where the pool's driver work went: all of it, and the second half alone.
void print_remapping(const vpmm_stats& end, const vpmm_stats& half, uint64_t peak_requested) {
  auto share = [&](uint64_t b) { return peak_requested ? 100.0 * double(b) / double(peak_requested) : 0.0; };
  // Shares of peak requested may exceed 100% (a loop that rebuilds its
  // spans at every step): the line states them and does not judge them
  // (docs/trace-format.md says what a steady state looks like).
  std::printf("  remapped          %s in all (%.1f%% of peak requested); %s of it in the second half (%.1f%%)\n",
              fmt_bytes(end.bytes_remapped).c_str(), share(end.bytes_remapped),
              fmt_bytes(end.bytes_remapped - half.bytes_remapped).c_str(),
              share(end.bytes_remapped - half.bytes_remapped));
  std::printf("  handles created   %" PRIu64 " in all, %" PRIu64 " in the second half\n", end.handles_created,
              end.handles_created - half.handles_created);
  if (end.n_view_malloc)
    std::printf("  views             %" PRIu64 " (%s of VA); %" PRIu64 " mallocs served by one, %" PRIu64
                " with no driver call; in the second half %" PRIu64 " and %" PRIu64 "\n",
                end.n_views, fmt_bytes(end.view_va_bytes).c_str(), end.n_view_malloc, end.n_view_reuse,
                end.n_view_malloc - half.n_view_malloc, end.n_view_reuse - half.n_view_reuse);
  std::printf("  driver by malloc  %" PRIu64 " calls, %.1f ms in all; %" PRIu64 " calls, %.1f ms in the second half "
              "(this backend's own time)\n",
              end.driver_calls, double(end.driver_ns) / 1e6, end.driver_calls - half.driver_calls,
              double(end.driver_ns - half.driver_ns) / 1e6);
}

// A libvpmm memory history (vpmm.torch after use_as_allocator()): its
// segments are libvpmm's allocations, so there is no PyTorch side to show.
void print_history_facts(const vtrace::SnapshotFacts& f, double load_ms) {
  std::printf("  libvpmm history   device %d (of %zu in device_traces): %" PRIu64 " events (%" PRIu64
              " OOM), %zu streams; read in %.0f ms\n",
              f.device, f.devices, f.events, f.ooms, f.stream_handles.size(), load_ms);
  std::printf("  recorded          mapped peak %s while the job ran; its segments are libvpmm's allocations "
              "(%" PRIu64 " at dump, %s), not memory PyTorch reserved\n",
              f.vpmm_mapped_peak ? fmt_bytes(f.vpmm_mapped_peak).c_str() : "not recorded", f.segments,
              fmt_bytes(f.reserved_at_dump).c_str());
}

// The PyTorch side of a snapshot replay, beside libvpmm's figures.
void print_snapshot_facts(const vtrace::SnapshotFacts& f, uint64_t peak_mapped, double load_ms) {
  if (!f.reserved_is_pytorch) return print_history_facts(f, load_ms);
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

// Messages may quote the input (a text trace's offending line): a binary file
// given as a trace must not write raw bytes to the terminal.
std::string printable(const std::string& m) {
  std::string o;
  char buf[8];
  for (unsigned char c : m) {
    if (c == '\n' || c == '\t' || (c >= 0x20 && c < 0x7f)) {
      o += static_cast<char>(c);
    } else {
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      o += buf;
    }
    if (o.size() > 400) return o + "... (cut)";
  }
  return o;
}

// PyTorch's reserved bytes after each event of device `device`
// (out[i]: after events [0, i]), from the segment events and the start
// figure of SnapshotFacts. The conversion (snapshot.cpp) keeps only the
// peak; the timeline wants the curve, and a trace op's `line` is its event's
// index + 1, which lines the two up.
bool reserved_after_events(const std::string& path, int device, uint64_t start, std::vector<uint64_t>* out,
                           std::string* err) {
  std::ifstream in(path, std::ios::binary);
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!in.good() && !in.eof()) return *err = path + ": read error", false;
  std::vector<uint8_t> plain;
  if (bytes.size() >= 2 && bytes[0] == 0x1f && bytes[1] == 0x8b) {
    if (!vtrace::gunzip(bytes.data(), bytes.size(), path, &plain, err)) return false;
  } else {
    plain.swap(bytes);
  }
  vpickle::Document doc;
  if (!vpickle::parse(plain.data(), plain.size(), path, &doc, err)) return false;
  vpickle::Value traces, events;
  if (!doc.root().find("device_traces", &traces) || device < 0 ||
      static_cast<size_t>(device) >= traces.items().size())
    return *err = path + ": no device_traces for device " + std::to_string(device), false;
  events = traces.items()[device];
  int64_t cur = static_cast<int64_t>(start);
  out->clear();
  out->reserve(events.items().size());
  for (const vpickle::Value& e : events.items()) {
    vpickle::Value action, size;
    if (e.find("action", &action) && e.find("size", &size)) {
      const std::string& a = action.as_str();
      if (a == "segment_alloc" || a == "segment_map") cur += size.as_int();
      else if (a == "segment_free" || a == "segment_unmap") cur -= size.as_int();
    }
    out->push_back(cur < 0 ? 0 : static_cast<uint64_t>(cur));
  }
  return true;
}

// The answer a PyTorch user wants, three peaks side by side: what PyTorch's
// allocator reserved (snapshots only), what libvpmm mapped replaying the same
// allocations, and the live bytes, which no allocator can go below.
void print_peaks(const std::string& path, bool snapshot, const vtrace::SnapshotFacts& facts, uint64_t vpmm_mapped,
                 uint64_t requested, bool heading) {
  if (heading) std::printf("%s\n", path.c_str());
  // A libvpmm memory history has no PyTorch reservation to compare with,
  // but the mapped peak libvpmm recorded while the job ran.
  const bool history = snapshot && !facts.reserved_is_pytorch;
  const uint64_t torch_reserved = history ? 0 : facts.reserved_peak;
  if (history) snapshot = false;
  const uint64_t base = snapshot && torch_reserved ? torch_reserved : 0;
  auto row = [&](const char* what, uint64_t v, const char* note) {
    if (base)
      std::printf("    %-22s %12s  %6.3fx  %s\n", what, fmt_bytes(v).c_str(), double(v) / double(base), note);
    else
      std::printf("    %-22s %12s  %s\n", what, fmt_bytes(v).c_str(), note);
  };
  std::printf("  peaks%s\n", base ? "                        bytes   / PyTorch" : "");
  if (snapshot) row("PyTorch reserved", torch_reserved, "what PyTorch's allocator held (segment events)");
  if (history && facts.vpmm_mapped_peak)
    row("libvpmm mapped, run", facts.vpmm_mapped_peak, "what libvpmm held while the job ran (its history)");
  row("libvpmm mapped", vpmm_mapped, "what libvpmm would map (this replay)");
  row("requested", requested, "bytes alive at once, as asked for: no allocator maps less");
  if (base) {
    const double pct = 100.0 * (double(base) - double(vpmm_mapped)) / double(base);
    if (vpmm_mapped <= base)
      std::printf("  libvpmm would map %s less than PyTorch reserved at its peak (%.1f%%)\n",
                  fmt_bytes(base - vpmm_mapped).c_str(), pct);
    else
      std::printf("  libvpmm would map %s more than PyTorch reserved at its peak (%.1f%%)\n",
                  fmt_bytes(vpmm_mapped - base).c_str(), -pct);
  }
}

// What was read from one TRACE argument: the trace, and for a PyTorch
// snapshot its own facts and, when a timeline is written, PyTorch's reserved
// bytes after each event.
struct Input {
  vtrace::Trace trace;
  bool snapshot = false;
  vtrace::SnapshotFacts facts;
  double load_ms = 0;
  std::vector<uint64_t> torch_reserved;
  size_t prelive_ops = 0;
};

// A path that is no trace at all (a directory, an executable) is refused
// before any parser sees it. A snapshot is told apart by its content (a
// pickle's PROTO or gzip's magic), so a text trace named .pickle still reads
// as one. Returns false after printing why.
bool refuse_non_trace(const std::string& path, bool* snapshot) {
  struct stat st_path;
  if (stat(path.c_str(), &st_path) == 0 && S_ISDIR(st_path.st_mode)) {
    std::fprintf(stderr, "vpmm replay: %s: is a directory; give a trace file (a .trace, an RMM log or a "
                 "PyTorch snapshot .pickle[.gz])\n", path.c_str());
    return false;
  }
  *snapshot = vtrace::is_snapshot_file(path);
  if (!*snapshot) {
    // A NUL in the first block: an executable, an archive, a core file.
    char head[4096];
    std::ifstream probe(path, std::ios::binary);
    probe.read(head, sizeof head);
    if (std::memchr(head, '\0', static_cast<size_t>(probe.gcount())) != nullptr) {
      std::fprintf(stderr, "vpmm replay: %s: binary data, not a trace (a .trace, an RMM log or a PyTorch "
                   "snapshot .pickle[.gz])\n", path.c_str());
      return false;
    }
  }
  return true;
}

// Nothing to replay is a mistake (an empty or truncated file, the wrong
// device), not a result: a replay of it would report zero peaks as a pass.
bool refuse_empty(const std::string& path, const Input& in) {
  for (const vtrace::TraceOp& op : in.trace.ops)
    if (op.kind == vtrace::OpKind::kMalloc) return true;
  if (in.snapshot)
    std::fprintf(stderr, "vpmm replay: %s: no allocation on device %d (%" PRIu64 " events of %zu devices "
                 "recorded); was _record_memory_history on while the program allocated?\n",
                 path.c_str(), in.facts.device, in.facts.events, in.facts.devices);
  else
    std::fprintf(stderr, "vpmm replay: %s: no allocation in the trace (%zu ops); an empty file?\n",
                 path.c_str(), in.trace.ops.size());
  return false;
}

// Reads `path` into *in. Returns false after printing why not.
bool load_input(const std::string& path, int device, bool want_timeline, Input* in) {
  if (!refuse_non_trace(path, &in->snapshot)) return false;
  std::string err;
  if (in->snapshot) {
    vtrace::SnapshotOptions so;
    so.device = device;
    auto t0 = std::chrono::steady_clock::now();
    if (!vtrace::load_snapshot(path, so, &in->trace, &in->facts, &err)) {
      std::fprintf(stderr, "vpmm replay: %s\n", printable(err).c_str());
      return false;
    }
    in->load_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  } else if (!vtrace::load_trace(path, &in->trace, &err)) {
    std::fprintf(stderr, "vpmm replay: %s\n", printable(err).c_str());
    return false;
  }
  if (!refuse_empty(path, *in)) return false;
  // PyTorch's reserved bytes per op, for the timeline (a libvpmm memory
  // history has none: its segments are libvpmm's allocations).
  if (in->snapshot && want_timeline && in->facts.reserved_is_pytorch) {
    if (!reserved_after_events(path, in->facts.device, in->facts.reserved_at_start, &in->torch_reserved, &err)) {
      std::fprintf(stderr, "vpmm replay: %s\n", printable(err).c_str());
      return false;
    }
    in->prelive_ops = in->facts.prelive_from_frees + in->facts.prelive_from_segments;
  }
  return true;
}

// The pool's configuration from the options, the environment and the trace:
// the page size first (it decides `p` sizes, the trace's and the options'),
// then the sizes, then a host capacity that is never the reason a replay
// fails. *page receives the page size. Returns false after printing why not.
bool pool_config(const std::string& path, const ReplayOpts& o, const Input& in, vpmm_config* c,
                 uint64_t* page) {
  vpmm_config_init(c);
  if (o.backend >= 0) c->backend = o.backend;
  if (!o.policy.empty()) policy_settings(o.policy, c);
  // The driver budget decides by a modelled clock, so that a replay decides
  // as the same loop on a GPU would, and the same way at every run.
  if (o.op_time_us >= 0) c->budget_clock_us = static_cast<int32_t>(o.op_time_us);
  else if (!std::getenv("VPMM_BUDGET_CLOCK_US")) c->budget_clock_us = kDefaultOpTimeUs;
  if (o.page_size.set) c->page_size = o.page_size.value;
  // When neither option nor environment fixes the page size, ask a probe
  // pool of the same backend what its default is.
  *page = c->page_size;
  if (*page == 0) {
    vpmm_pool* probe = nullptr;
    vpmm_status st = vpmm_pool_create(c, &probe);
    if (st != VPMM_OK) {
      std::fprintf(stderr, "vpmm replay: %s: cannot create a pool: %s\n", path.c_str(), status_msg(st).c_str());
      return false;
    }
    vpmm_config pc;
    get_config(probe, &pc);
    *page = pc.page_size;
    vpmm_pool_destroy(probe);
  }
  auto resolve = [&](const SizeOpt& s, const char* name, uint64_t* field) {
    uint64_t v = 0;
    if (!s.set) return true;
    if (!s.resolve(*page, &v)) {
      std::fprintf(stderr, "vpmm replay: %s overflows with page size %" PRIu64 "\n", name, *page);
      return false;
    }
    *field = v;
    return true;
  };
  if (!resolve(o.va_size, "--va-size", &c->va_size) ||
      !resolve(o.max_handle, "--max-handle-size", &c->max_handle_size) ||
      !resolve(o.small_size, "--small-size", &c->small_size) ||
      !resolve(o.large_rounding, "--large-rounding", &c->large_rounding) ||
      !resolve(o.host_capacity, "--host-capacity", &c->host_capacity))
    return false;
  if (o.pages_set) c->initial_pages = o.pages;
  // A snapshot asks what libvpmm would hold under PyTorch, whose hook uses
  // the default pool and its rounding (include/vpmm.h, vpmm_default_pool).
  if (in.snapshot && !o.large_rounding.set && !option_set_in_env("large_rounding"))
    c->large_rounding = VPMM_DEFAULT_POOL_LARGE_ROUNDING;
  // The host backend's memory is a sparse memfd, so a generous figure costs
  // nothing.
  if (!o.host_capacity.set && !option_set_in_env("host_capacity")) {
    uint64_t need = peak_rounded(in.trace.ops, *page) + c->initial_pages * *page;
    c->host_capacity = std::max<uint64_t>(8ull << 30, std::min<uint64_t>(need, 1ull << 56) * 4);
  }
  return true;
}

// --cold: between ops, `bytes` of a buffer four times as large are written
// a line at a time, going on where the last op left off, so the pool's data
// is out of the caches at its next call, as in a program whose kernel
// launches and Python run between allocations. The calls alone are timed.
struct ColdCaches {
  explicit ColdCaches(uint64_t bytes) : bytes_(bytes), buf_(bytes ? 4 * bytes : 0) {}
  bool on() const { return bytes_ != 0; }
  static uint64_t now() {
    return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                     std::chrono::steady_clock::now().time_since_epoch())
                                     .count());
  }
  void evict() {
    for (uint64_t i = 0; i < bytes_; i += 64) {
      buf_[at_] += 1;
      at_ = at_ + 64 < buf_.size() ? at_ + 64 : 0;
    }
  }
  uint64_t malloc_ns = 0, free_ns = 0;

 private:
  uint64_t bytes_;
  std::vector<unsigned char> buf_;
  size_t at_ = 0;
};

// One trace replayed on one fresh pool: the pool and its streams, the hooks
// the replay engine calls, and what is printed and checked afterwards. Each
// step prints its own errors; rc_ collects them.
class TraceReplay {
 public:
  TraceReplay(const std::string& path, const ReplayOpts& o, const std::string& header_flags, const Input& in,
              const vtrace::TraceSummary& sum, std::FILE* timeline)
      : path_(path), o_(o), header_flags_(header_flags), in_(in), trace_(in.trace), sum_(sum),
        timeline_(timeline) {}

  // Creates the pool and a backend stream per trace stream. False (after
  // printing why) when the pool cannot be made; a stream that cannot be made
  // fails the replay but the pool is still closed by close().
  bool open(const vpmm_config& c) {
    vpmm_status st = vpmm_pool_create(&c, &pool_);
    if (st != VPMM_OK) {
      std::fprintf(stderr, "vpmm replay: %s: cannot create a pool: %s\n", path_.c_str(), status_msg(st).c_str());
      return false;
    }
    get_config(pool_, &eff_);
    page_ = eff_.page_size;
    if ((o_.lag || o_.gpu_lag) && std::strcmp(vpmm_pool_backend_name(pool_), "host") != 0) {
      // Holding a stream is the host backend's: a GPU's lag is its own.
      std::fprintf(stderr, "vpmm replay: %s: %s needs the host backend (this pool is on %s)\n", path_.c_str(),
                   o_.lag ? "--lag" : "--gpu-lag", vpmm_pool_backend_name(pool_));
      rc_ = 1;
      return true;
    }
    // Trace stream k > 0 is a stream of the pool's backend; 0 is the default.
    streams_[0] = nullptr;
    for (int s : sum_.streams) {
      if (s == 0) continue;
      vpmm_stream h = nullptr;
      if ((st = vpmm_pool_stream_create(pool_, &h)) != VPMM_OK) {
        std::fprintf(stderr, "vpmm replay: %s: cannot create stream %d: %s\n", path_.c_str(), s,
                     status_msg(st).c_str());
        rc_ = 1;
        break;
      }
      streams_[s] = h;
    }
    if (rc_ == 0 && o_.gpu_lag) {
      std::string err;
      if (!hold_trace_streams(&err)) {
        std::fprintf(stderr, "vpmm replay: %s: %s\n", path_.c_str(), err.c_str());
        rc_ = 1;
      }
    }
    return true;
  }

  // Replays every op (unless opening a stream failed).
  void run() {
    if (rc_ != 0) return;
    if (o_.log_remaps) before_op_ = stats_of(pool_);
    if (timeline_) write_row(0);  // the pool as created (initial pages)
    std::string err;
    auto t0 = std::chrono::steady_clock::now();
    if (!vtrace::replay_trace(trace_.ops, page_, hooks(), &res_, &err, path_)) {
      std::fprintf(stderr, "vpmm replay: %s\n", printable(err).c_str());
      rc_ = 1;
    }
    ms_ = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  }

  // The report (the peaks table alone with --summary), the expectations,
  // --release-all and --dump, then the streams and the pool closed.
  int finish(PolicyRow* row) {
    std::string err;
    if (!release_trace_streams(&err) || !release_lag_streams(true, &err)) {
      std::fprintf(stderr, "vpmm replay: %s: %s\n", path_.c_str(), err.c_str());
      rc_ = 1;
    }
    end_ = stats_of(pool_);
    profile_end_ = driver_profile_of(pool_);
    layout_ = layout_of(pool_);
    if (row) fill_row(row);
    if (!o_.quiet && o_.summary) print_summary();
    else if (!o_.quiet) print_report();
    check_expectations();
    if (rc_ == 0 && o_.release_all) release_all();
    if (o_.dump) print_dump();
    close();
    if (row) row->ok = rc_ == 0;
    return rc_;
  }

  // --policy's comparison row of this replay.
  void fill_row(PolicyRow* row) const {
    row->peak_ratio = res_.peak_requested ? double(end_.peak_mapped_bytes) / double(res_.peak_requested) : 0.0;
    row->steady_remap = steady_remap_share(end_, at_half_, res_.peak_requested);
    row->steady_driver_calls = end_.driver_calls - at_half_.driver_calls;
    row->steady_handles = end_.handles_created - at_half_.handles_created;
    row->steady_views = end_.n_view_malloc - at_half_.n_view_malloc;
    row->steady_view_reuse = end_.n_view_reuse - at_half_.n_view_reuse;
    row->views = end_.n_views;
    row->steady_driver_share = modelled_driver_share(profile_end_, profile_at_half_,
                                                     res_.ops_done - trace_.ops.size() / 2, eff_.budget_clock_us);
  }

 private:
  // The engine's calls into the pool, and the work done after each op.
  vtrace::ReplayHooks hooks() {
    vtrace::ReplayHooks h;
    h.malloc = [this](const vtrace::TraceOp& op, uint64_t bytes, void** p, std::string* e) {
      vpmm_stream on = streams_.at(op.stream);
      const uint64_t t0 = cold_.on() ? cold_.now() : 0;
      vpmm_status s = vpmm_pool_malloc(pool_, bytes, on, p);
      if (cold_.on()) cold_.malloc_ns += cold_.now() - t0;
      if (s == VPMM_OK) return true;
      *e = "malloc " + trace_.ids[op.id] + " " + std::to_string(bytes) + " (" + fmt_bytes(bytes) +
           ") on stream " + std::to_string(op.stream) + " failed: " + status_msg(s);
      return false;
    };
    h.free = [this](const vtrace::TraceOp& op, void* p, uint64_t, std::string* e) {
      vpmm_stream on = streams_.at(op.stream);
      if (o_.lag && op.lag > 0 && !lag_stream(op.lag, &on, e)) return false;
      const uint64_t t0 = cold_.on() ? cold_.now() : 0;
      vpmm_status s = vpmm_pool_free(pool_, p, on);
      if (cold_.on()) cold_.free_ns += cold_.now() - t0;
      if (s == VPMM_OK) return true;
      *e = "free " + trace_.ids[op.id] + " on stream " + std::to_string(op.stream) + " failed: " + status_msg(s);
      return false;
    };
    h.sync = [this](int stream, std::string* e) {
      // --gpu-lag: the program waited for the GPU, which is then caught up.
      if (!release_trace_streams(e)) return false;
      vpmm_status s = vpmm_pool_stream_synchronize(pool_, streams_.at(stream));
      if (s != VPMM_OK) {
        *e = "sync of stream " + std::to_string(stream) + " failed: " + status_msg(s);
        return false;
      }
      return !o_.gpu_lag || hold_trace_streams(e);
    };
    h.after = [this](size_t done, const vtrace::TraceOp& op, std::string* e) { return after_op(done, op, e); };
    return h;
  }

  // After op `done`: the half-way figures, --log-remaps, --check, the
  // timeline row and --verbose's line.
  bool after_op(size_t done, const vtrace::TraceOp& op, std::string* e) {
    done_ = done;
    cold_.evict();
    if (!release_lag_streams(false, e)) return false;
    if (o_.gpu_lag && done % o_.gpu_lag == 0 && !(release_trace_streams(e) && hold_trace_streams(e))) return false;
    // The pool's work up to the middle of the trace: what it does in the
    // second half tells whether a loop reaches a steady state (a training
    // loop whose shapes were all seen in the first half should remap little
    // after it).
    if (done == trace_.ops.size() / 2) {
      at_half_ = stats_of(pool_);
      profile_at_half_ = driver_profile_of(pool_);
    }
    if (o_.log_remaps) log_remap(done, op);
    if (o_.check) {
      vpmm_status s = vpmm_pool_check(pool_);
      if (s != VPMM_OK) {
        *e = "vpmm_pool_check failed after op " + std::to_string(done) + ": " + status_msg(s);
        return false;
      }
    }
    if (timeline_) write_row(done);
    if (o_.verbose) print_op(done, op);
    return true;
  }

  // --gpu-lag: the trace's streams are held, so the events the pool records
  // on them stay pending (as on a GPU still running earlier work), and
  // released every gpu_lag ops (and at a sync), their events then complete.
  // Work on one stream still runs in its order: a free reused on its own
  // stream needs no event, as on the GPU.
  bool hold_trace_streams(std::string* e) {
    for (auto& kv : streams_) {
      vpmm_status s = vpmm_host_stream_hold(kv.second);
      if (s != VPMM_OK) return *e = "--gpu-lag: cannot hold a host stream: " + status_msg(s), false;
    }
    trace_streams_held_ = true;
    return true;
  }
  bool release_trace_streams(std::string* e) {
    if (!trace_streams_held_) return true;
    trace_streams_held_ = false;
    for (auto& kv : streams_) {
      vpmm_status s = vpmm_host_stream_release(kv.second);
      if (s != VPMM_OK) return *e = "--gpu-lag: cannot release a host stream: " + status_msg(s), false;
    }
    // Their events complete on the streams' workers: wait for them, so that
    // the next op sees them complete on every run. WRONG_STATE: the work
    // waits on a --lag stream still held.
    for (auto& kv : streams_) {
      vpmm_status s = vpmm_host_stream_synchronize(kv.second);
      if (s != VPMM_OK && s != VPMM_ERR_WRONG_STATE)
        return *e = "--gpu-lag: cannot synchronize a host stream: " + status_msg(s), false;
    }
    ++n_gpu_lag_rounds_;
    return true;
  }

  // --lag: the held host stream a late-completed free goes on, kept held
  // until `lag` ops from now. Streams are reused once released; one still
  // held is shared (its hold extended) past kMaxLagStreams.
  static constexpr size_t kMaxLagStreams = 16;
  struct LagStream {
    vpmm_stream stream = nullptr;
    size_t release_at = 0;  // op count after which it is released; 0: not held
  };
  bool lag_stream(uint32_t lag, vpmm_stream* out, std::string* e) {
    const size_t until = done_ + 1 + lag;  // this free is op done_ + 1
    LagStream* pick = nullptr;
    for (LagStream& l : lag_streams_)
      if (l.release_at == 0) { pick = &l; break; }
    if (!pick && lag_streams_.size() < kMaxLagStreams) {
      LagStream l;
      vpmm_status s = vpmm_pool_stream_create(pool_, &l.stream);
      if (s != VPMM_OK) return *e = "--lag: cannot create a stream: " + status_msg(s), false;
      lag_streams_.push_back(l);
      pick = &lag_streams_.back();
    }
    if (!pick) {
      // All held: the one released last takes it too, held until both end.
      pick = &*std::max_element(lag_streams_.begin(), lag_streams_.end(),
                                [](const LagStream& a, const LagStream& b) { return a.release_at < b.release_at; });
      pick->release_at = std::max(pick->release_at, until);
    } else {
      vpmm_status s = vpmm_host_stream_hold(pick->stream);
      if (s != VPMM_OK) return *e = "--lag: cannot hold a host stream: " + status_msg(s), false;
      pick->release_at = until;
    }
    ++n_lagged_;
    *out = pick->stream;
    return true;
  }
  // Releases the lag streams whose time has come (all: at the end).
  bool release_lag_streams(bool all, std::string* e) {
    for (LagStream& l : lag_streams_) {
      if (l.release_at == 0 || (!all && l.release_at > done_)) continue;
      vpmm_status s = vpmm_host_stream_release(l.stream);
      if (s != VPMM_OK) return *e = "--lag: cannot release a host stream: " + status_msg(s), false;
      // Its events complete on the stream's worker thread: wait for them so
      // that the next op sees them complete on every run (a replay's figures
      // depend on the trace alone). WRONG_STATE: its work waits on a stream
      // still held (the figures then wait with it, as on a GPU).
      s = vpmm_host_stream_synchronize(l.stream);
      if (s != VPMM_OK && s != VPMM_ERR_WRONG_STATE)
        return *e = "--lag: cannot synchronize a host stream: " + status_msg(s), false;
      l.release_at = 0;
    }
    return true;
  }

  // --log-remaps: a line for an op that moved or created pages.
  void log_remap(size_t done, const vtrace::TraceOp& op) {
    const vpmm_stats now = stats_of(pool_);
    if (now.bytes_remapped != before_op_.bytes_remapped || now.pages_created != before_op_.pages_created) {
      uint64_t bytes = 0;
      vtrace::op_bytes(op, page_, &bytes);
      std::printf("  remap op %zu: malloc %s @%d moved %s, created %" PRIu64 " pages in %" PRIu64
                  " handles; before it: free %s (largest %s), mapped %s, live %s\n",
                  done, fmt_bytes(bytes).c_str(), op.stream,
                  fmt_bytes(now.bytes_remapped - before_op_.bytes_remapped).c_str(),
                  now.pages_created - before_op_.pages_created, now.handles_created - before_op_.handles_created,
                  fmt_bytes(before_op_.free_bytes).c_str(), fmt_bytes(before_op_.largest_free_bytes).c_str(),
                  fmt_bytes(before_op_.mapped_bytes).c_str(), fmt_bytes(before_op_.live_bytes).c_str());
    }
    before_op_ = now;
  }

  // --verbose: the op as the trace wrote it, then the layout.
  void print_op(size_t done, const vtrace::TraceOp& op) {
    std::string what = op.kind == vtrace::OpKind::kMalloc ? "malloc " + trace_.ids[op.id] + " " +
                           (op.in_pages ? std::to_string(op.size) + "p" : fmt_bytes(op.size))
                     : op.kind == vtrace::OpKind::kFree ? "free " + trace_.ids[op.id]
                     : std::string("sync");
    if (op.kind != vtrace::OpKind::kSync || op.stream >= 0) what += " @" + std::to_string(op.stream);
    std::printf("  %5zu %-24s %s\n", done, what.c_str(), layout_of(pool_).c_str());
  }

  // A timeline row after op `op` (0: the pool as created).
  void write_row(size_t op) {
    vpmm_stats s = stats_of(pool_);
    std::string torch;
    if (in_.snapshot && in_.facts.reserved_is_pytorch) {
      // Pre-live allocations come first, made of events anywhere in the
      // ring: PyTorch held its start figure then. After them, op `op` ran at
      // its event, and the row shows PyTorch's bytes after that event.
      uint64_t r = in_.facts.reserved_at_start;
      if (op > in_.prelive_ops && op <= trace_.ops.size()) {
        const uint32_t line = trace_.ops[op - 1].line;
        if (line >= 1 && line <= in_.torch_reserved.size()) r = in_.torch_reserved[line - 1];
      }
      torch = std::to_string(r);
    }
    std::fprintf(timeline_, "%s,%zu,%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%s\n",
                 trace_name(path_).c_str(), op, s.mapped_bytes, s.live_bytes, s.requested_bytes, s.free_bytes,
                 s.hole_bytes, s.zombie_bytes, torch.c_str());
  }

  // --summary: the peaks table under the trace's name.
  void print_summary() {
    std::string heading = path_;
    if (in_.snapshot && in_.facts.devices > 1)
      heading += " (device " + std::to_string(in_.facts.device) + " of " + std::to_string(in_.facts.devices) +
                 "; --device picks another)";
    print_peaks(heading, in_.snapshot, in_.facts, end_.peak_mapped_bytes, res_.peak_requested, true);
  }

  // The whole report: the pool, the ops, the peaks, the end state, the
  // pool's work, the layout, PyTorch's side of a snapshot and the peaks table.
  void print_report() {
    const vpmm_stats& s = end_;
    const double frag = s.peak_live_bytes ? double(s.peak_mapped_bytes) / double(s.peak_live_bytes) : 0.0;
    std::printf("%s: %s backend, page %s, va chunk %s, %" PRIu64 " initial pages, max handle %s, "
                "rounding %s%s\n",
                path_.c_str(), vpmm_pool_backend_name(pool_), fmt_bytes(page_).c_str(),
                fmt_bytes(eff_.va_size).c_str(), eff_.initial_pages,
                eff_.max_handle_size == VPMM_HANDLE_SIZE_UNLIMITED ? "unlimited" : eff_.max_handle_size ? fmt_bytes(eff_.max_handle_size).c_str() : "scaled",
                eff_.large_rounding >= page_ ? "whole pages" : fmt_bytes(eff_.large_rounding).c_str(),
                in_.snapshot ? (in_.facts.reserved_is_pytorch ? ", PyTorch snapshot"
                                                              : ", libvpmm memory history (PyTorch snapshot format)")
                : trace_.format == vtrace::TraceFormat::kRmmCsv ? ", RMM log" : "");
    if (!header_flags_.empty())
      std::printf("  trace flags       %s (its # replay: line; command-line flags win)\n", header_flags_.c_str());
    char budget[96];
    if (eff_.driver_budget == VPMM_DRIVER_BUDGET_EXACT) std::snprintf(budget, sizeof budget, "no driver budget");
    else if (eff_.driver_budget == VPMM_DRIVER_BUDGET_NEVER) std::snprintf(budget, sizeof budget, "driver budget never");
    else if (eff_.budget_clock_us > 0)
      std::snprintf(budget, sizeof budget, "driver budget %g%% (an op is %d us)", 100.0 * eff_.driver_budget,
                    eff_.budget_clock_us);
    else std::snprintf(budget, sizeof budget, "driver budget %g%% (wall clock)", 100.0 * eff_.driver_budget);
    std::printf("  placement         %s chain, %s, %s, remap slack %s%s%s\n", vpmm_placement_name(eff_.placement) ? vpmm_placement_name(eff_.placement) : "?", budget,
                eff_.view_min_size == VPMM_VIEWS_OFF ? "views off"
                                                     : ("views from " + fmt_bytes(eff_.view_min_size)).c_str(),
                eff_.remap_slack < 0 ? "exact" : std::to_string(eff_.remap_slack).substr(0, 5).c_str(),
                o_.policy.empty() ? "" : " (--policy ", o_.policy.empty() ? "" : (o_.policy + ")").c_str());
    std::printf("  ops               %zu of %zu (%" PRIu64 " mallocs, %" PRIu64 " frees, %" PRIu64
                " syncs; %zu streams)%s\n",
                res_.ops_done, trace_.ops.size(), res_.mallocs, res_.frees, res_.syncs, sum_.streams.size(),
                trace_.skipped_failures ? (", " + std::to_string(trace_.skipped_failures) +
                                           " RMM failures/zero-size skipped").c_str() : "");
    std::printf("  replay time       %.1f ms%s\n", ms_, o_.check ? " (with --check)" : "");
    if (cold_.on())
      std::printf("  op time           %.0f ns a malloc, %.0f ns a free, %s written between ops (--cold)\n",
                  res_.mallocs ? double(cold_.malloc_ns) / double(res_.mallocs) : 0.0,
                  res_.frees ? double(cold_.free_ns) / double(res_.frees) : 0.0, fmt_bytes(o_.cold_bytes).c_str());
    // Two peaks of the same allocations: as asked for, and as the pool holds
    // them (rounded to its granularity); the peaks table below shows the first.
    std::printf("  peak requested    %s (bytes alive at once, as asked for)\n", fmt_bytes(res_.peak_requested).c_str());
    std::printf("  peak live         %s (the same allocations as the pool holds them, rounded)\n",
                fmt_bytes(s.peak_live_bytes).c_str());
    std::printf("  peak mapped       %s\n", fmt_bytes(s.peak_mapped_bytes).c_str());
    std::printf("  fragmentation     %.3f (peak mapped / peak live); peak mapped / peak requested %.3f\n", frag,
                res_.peak_requested ? double(s.peak_mapped_bytes) / double(res_.peak_requested) : 0.0);
    std::printf("  final             mapped %s, live %s, requested %s, free %s, holes %s, zombies %s\n",
                fmt_bytes(s.mapped_bytes).c_str(), fmt_bytes(s.live_bytes).c_str(),
                fmt_bytes(s.requested_bytes).c_str(), fmt_bytes(s.free_bytes).c_str(),
                fmt_bytes(s.hole_bytes).c_str(), fmt_bytes(s.zombie_bytes).c_str());
    std::printf("  largest free      %s\n", fmt_bytes(s.largest_free_bytes).c_str());
    std::printf("  defrags %" PRIu64 ", grows %" PRIu64 ", pages created %" PRIu64 ", bytes remapped %s, "
                "handles %" PRIu64 " (%" PRIu64 " created), VA chunks %" PRIu64 "\n",
                s.n_defrag, s.n_grow, s.pages_created, fmt_bytes(s.bytes_remapped).c_str(), s.handles,
                s.handles_created, s.va_chunks);
    std::printf("  mapped pages      %" PRIu64 "\n", s.mapped_bytes / page_);
    print_remapping(s, at_half_, res_.peak_requested);
    print_driver_by_kind(profile_end_, profile_at_half_);
    const uint64_t half_ops = res_.ops_done - trace_.ops.size() / 2;
    const double share = modelled_driver_share(profile_end_, profile_at_half_, half_ops, eff_.budget_clock_us);
    if (share >= 0)
      std::printf("  driver share      second half: %.2f%% of the time its %" PRIu64
                  " ops stand for at %d us each (the pool's calls at H100 costs)\n",
                  100.0 * share, half_ops, eff_.budget_clock_us);
    std::printf("  layout            %s\n", layout_.c_str());
    if (in_.snapshot) print_snapshot_facts(in_.facts, s.peak_mapped_bytes, in_.load_ms);
    if (o_.lag)
      std::printf("  lag (--lag)       %" PRIu64 " frees held pending on host streams until PyTorch completed them "
                  "(%" PRIu64 " completed late in the snapshot)\n",
                  n_lagged_, in_.snapshot ? in_.facts.lagged_frees : 0);
    if (o_.gpu_lag)
      std::printf("  gpu lag           the streams' work completed every %" PRIu64 " ops and at syncs (--gpu-lag): "
                  "%" PRIu64 " times\n",
                  o_.gpu_lag, n_gpu_lag_rounds_);
    print_peaks(path_, in_.snapshot, in_.facts, s.peak_mapped_bytes, res_.peak_requested, false);
  }

  // --expect-*: each a failure with its reason, the first one only.
  void check_expectations() {
    if (rc_ == 0 && o_.expect_layout_set && layout_ != o_.expect_layout) {
      std::fprintf(stderr, "vpmm replay: %s: layout %s, expected %s\n", path_.c_str(), layout_.c_str(),
                   o_.expect_layout.c_str());
      rc_ = 1;
    }
    if (rc_ == 0 && o_.expect_mapped_set && end_.mapped_bytes != o_.expect_mapped_pages * page_) {
      std::fprintf(stderr, "vpmm replay: %s: %" PRIu64 " mapped pages, expected %" PRIu64 "\n", path_.c_str(),
                   end_.mapped_bytes / page_, o_.expect_mapped_pages);
      rc_ = 1;
    }
    const double steady_remap = steady_remap_share(end_, at_half_, res_.peak_requested);
    if (rc_ == 0 && o_.expect_steady_set && steady_remap > o_.expect_max_steady_remap) {
      std::fprintf(stderr, "vpmm replay: %s: remapped %s in the second half, %.3f of peak requested, exceeds "
                   "--expect-max-steady-remap %g\n", path_.c_str(),
                   fmt_bytes(end_.bytes_remapped - at_half_.bytes_remapped).c_str(), steady_remap,
                   o_.expect_max_steady_remap);
      rc_ = 1;
    }
    const double mapped_per_requested =
        res_.peak_requested ? double(end_.peak_mapped_bytes) / double(res_.peak_requested) : 0.0;
    if (rc_ == 0 && o_.expect_ratio_set && mapped_per_requested > o_.expect_max_ratio) {
      std::fprintf(stderr, "vpmm replay: %s: peak mapped / peak requested %.3f exceeds --expect-max-ratio %g\n",
                   path_.c_str(), mapped_per_requested, o_.expect_max_ratio);
      rc_ = 1;
    }
  }

  // What an application that frees everything and calls empty_cache() gets
  // back: every live allocation freed on its stream, the streams synced,
  // then vpmm_pool_trim(0).
  void release_all() {
    for (const vtrace::ReplayLive& l : res_.live)
      if (vpmm_pool_free(pool_, l.ptr, streams_.at(l.stream)) != VPMM_OK) rc_ = 1;
    for (auto& kv : streams_)
      if (vpmm_pool_stream_synchronize(pool_, kv.second) != VPMM_OK) rc_ = 1;
    if (vpmm_pool_trim(pool_, 0) != VPMM_OK) rc_ = 1;
    if (rc_ != 0) std::fprintf(stderr, "vpmm replay: %s: release-all failed: %s\n", path_.c_str(), vpmm_last_error());
    vpmm_stats after = stats_of(pool_);
    if (!o_.quiet)
      std::printf("  after release-all mapped %s (%" PRIu64 " pages), free %s, zombies %s, layout %s\n",
                  fmt_bytes(after.mapped_bytes).c_str(), after.mapped_bytes / page_,
                  fmt_bytes(after.free_bytes).c_str(), fmt_bytes(after.zombie_bytes).c_str(),
                  layout_of(pool_).c_str());
    if (rc_ == 0 && o_.expect_held_set && after.mapped_bytes != o_.expect_held_pages * page_) {
      std::fprintf(stderr, "vpmm replay: %s: %" PRIu64 " pages held after release-all, expected %" PRIu64 "\n",
                   path_.c_str(), after.mapped_bytes / page_, o_.expect_held_pages);
      rc_ = 1;
    }
  }

  // --dump: vpmm_pool_dump_text's report.
  void print_dump() {
    size_t need = 0;
    vpmm_pool_dump_text(pool_, nullptr, 0, &need);
    std::string text(need, '\0');
    if (vpmm_pool_dump_text(pool_, &text[0], text.size(), &need) == VPMM_OK) {
      text.resize(std::strlen(text.c_str()));
      std::printf("%s", text.c_str());
    }
  }

  // The streams, then the pool.
  void close() {
    vpmm_status st;
    for (const LagStream& l : lag_streams_)
      if ((st = vpmm_pool_stream_destroy(pool_, l.stream)) != VPMM_OK) {
        std::fprintf(stderr, "vpmm replay: %s: destroying a --lag stream: %s\n", path_.c_str(), status_msg(st).c_str());
        rc_ = 1;
      }
    for (auto& kv : streams_) {
      if (kv.first == 0) continue;
      if ((st = vpmm_pool_stream_destroy(pool_, kv.second)) != VPMM_OK) {
        std::fprintf(stderr, "vpmm replay: %s: destroying stream %d: %s\n", path_.c_str(), kv.first,
                     status_msg(st).c_str());
        rc_ = 1;
      }
    }
    if ((st = vpmm_pool_destroy(pool_)) != VPMM_OK) {
      std::fprintf(stderr, "vpmm replay: %s: destroying the pool: %s\n", path_.c_str(), status_msg(st).c_str());
      rc_ = 1;
    }
  }

 private:
  const std::string& path_;
  const ReplayOpts& o_;
  const std::string& header_flags_;  // the `# replay:` flags that took effect
  const Input& in_;
  const vtrace::Trace& trace_;
  const vtrace::TraceSummary& sum_;
  std::FILE* timeline_;
  vpmm_pool* pool_ = nullptr;
  vpmm_config eff_{};
  size_t done_ = 0;  // ops done so far
  std::vector<LagStream> lag_streams_;
  uint64_t n_lagged_ = 0;  // frees --lag held
  bool trace_streams_held_ = false;  // --gpu-lag
  uint64_t n_gpu_lag_rounds_ = 0;    // times --gpu-lag let the streams catch up
  uint64_t page_ = 0;
  std::map<int, vpmm_stream> streams_;
  vtrace::ReplayResult res_;
  double ms_ = 0;
  ColdCaches cold_{o_.cold_bytes};
  vpmm_stats at_half_{}, before_op_{}, end_{};
  vpmm_driver_profile profile_at_half_{}, profile_end_{};
  std::string layout_;
  int rc_ = 0;
};

// One trace on one fresh pool. Returns 0, or 1 after printing why not; with
// a row, fills in what --policy compares.
int replay_one(const std::string& path, const ReplayOpts& cmdline, std::FILE* timeline, PolicyRow* row) {
  Input in;
  if (!load_input(path, cmdline.device, timeline != nullptr, &in)) return 1;
  ReplayOpts o = cmdline;
  std::string header_flags;
  if (!in.snapshot && apply_header_flags(path, &o, &header_flags) != 0) return 1;
  vpmm_config c;
  uint64_t page = 0;
  if (!pool_config(path, o, in, &c, &page)) return 1;
  vtrace::TraceSummary sum;
  std::string err;
  if (!vtrace::summarize_trace(in.trace.ops, page, &sum, &err)) {
    std::fprintf(stderr, "vpmm replay: %s:%s\n", path.c_str(), err.c_str());
    return 1;
  }
  TraceReplay r(path, o, header_flags, in, sum, timeline);
  if (!r.open(c)) return 1;
  r.run();
  return r.finish(row);
}

// --policy's comparison of one trace: a row per policy, in the order given.
void print_policies(const std::string& path, const std::vector<PolicyRow>& rows) {
  std::printf("%s: placement policies\n", path.c_str());
  std::printf("    %-8s %10s %18s %18s %20s %18s %18s\n", "policy", "peak/req", "2nd-half remapped",
              "2nd-half drv share", "2nd-half drv calls", "2nd-half handles", "2nd-half views");
  for (const PolicyRow& r : rows) {
    if (!r.ok) {
      std::printf("    %-8s failed (see above)\n", r.policy.c_str());
      continue;
    }
    char views[64];
    std::snprintf(views, sizeof views, "%" PRIu64 " (%" PRIu64 " free)", r.steady_views, r.steady_view_reuse);
    char share[32] = "-";
    if (r.steady_driver_share >= 0) std::snprintf(share, sizeof share, "%.2f%%", 100.0 * r.steady_driver_share);
    std::printf("    %-8s %10.3f %17.1f%% %18s %20" PRIu64 " %18" PRIu64 " %18s\n", r.policy.c_str(), r.peak_ratio,
                100.0 * r.steady_remap, share, r.steady_driver_calls, r.steady_handles, views);
  }
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
    const int rc = parse_replay_option(a, o);
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
    std::fprintf(tl, "trace,op,mapped_bytes,live_bytes,requested_bytes,free_bytes,hole_bytes,zombie_bytes,"
                 "pytorch_reserved_bytes\n");
  }
  int rc = 0;
  for (size_t i = 0; i < o.traces.size(); ++i) {
    if (i && !o.quiet) std::printf("\n");
    std::fflush(stdout);  // ahead of a later trace's message on stderr
    if (o.policies.empty()) {
      rc |= replay_one(o.traces[i], o, tl, nullptr);
      continue;
    }
    std::vector<PolicyRow> rows;
    for (size_t k = 0; k < o.policies.size(); ++k) {
      ReplayOpts one = o;
      one.policy = o.policies[k];
      if (k && !o.quiet) std::printf("\n");
      std::fflush(stdout);
      rows.emplace_back();
      rows.back().policy = one.policy;
      rc |= replay_one(o.traces[i], one, tl, &rows.back());
    }
    if (!o.quiet) {
      std::printf("\n");
      print_policies(o.traces[i], rows);
    }
  }
  if (tl && std::fclose(tl) != 0) {
    std::fprintf(stderr, "vpmm replay: writing %s failed\n", o.timeline.c_str());
    rc = 1;
  }
  return rc;
}


}  // namespace vcli
