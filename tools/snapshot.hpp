// PyTorch CUDA memory snapshots as allocation traces. A snapshot is what
// torch.cuda.memory._record_memory_history() followed by
// torch.cuda.memory._dump_snapshot(path) writes: a pickled dict with the
// allocator's segments at dump time ('segments') and a ring buffer of
// allocator events per device ('device_traces'), optionally gzip-compressed.
// This turns one device's events into a vtrace::Trace that the replay engine
// of trace.hpp runs against any allocator, plus the facts about PyTorch's own
// behaviour that a comparison needs (its reserved and allocated peaks).
// Neither Python nor torch is involved: pickle.hpp reads the file.
//
// The rules (docs/trace-format.md, "PyTorch memory snapshots"):
//  - an allocation is freed at its 'free_requested' event (when the program
//    let go of it); a 'free_completed' frees only when no 'free_requested'
//    came first, and is otherwise ignored;
//  - every 'alloc' event gets a fresh trace ID ("0x7f00#3"): PyTorch reuses
//    addresses all the time;
//  - streams are raw cudaStream_t values: 0 is trace stream 0, others get
//    1, 2, ... in order of first appearance;
//  - allocations live before recording started (a free of an address the
//    trace never allocated, or an active block of 'segments' the trace never
//    mentions) become mallocs at the start of the trace;
//  - an 'alloc' of an address that is still live (the history ring dropped
//    the free) first frees the older allocation (a repair);
//  - PyTorch's reserved bytes follow the segment events; the start is the
//    segments' total at dump time minus the net change over the trace.
// Whatever the input, the trace produced is valid (see trace.hpp), every
// failure is a message "NAME: where: what", never an exception, and time and
// memory are bounded by the limits of SnapshotOptions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pickle.hpp"
#include "trace.hpp"

namespace vtrace {

// Limits on what a snapshot from elsewhere may cost (docs/trace-format.md,
// "Limits"). A pickle can list one container many times for a few bytes each
// (memo GET), so a file of a megabyte can describe a billion blocks, and a
// few megabytes of gzip can inflate to gigabytes: both are refused with a
// message rather than followed.
constexpr uint64_t kDefaultMaxInflated = uint64_t(4) << 30;
constexpr uint64_t kDefaultMaxVisits = uint64_t(1) << 24;
constexpr uint64_t kBytesPerVisit = 4;
constexpr uint64_t kVisitSlack = uint64_t(1) << 16;

struct SnapshotOptions {
  int device = -1;  // the device whose events to replay; -1: the one with the most events
  // gzip: the most bytes it may inflate to.
  uint64_t max_inflated = kDefaultMaxInflated;
  // Dicts (events, segments, blocks) the conversion may look at, each look
  // counted (one shared dict listed N times is N). 0: parse_snapshot and
  // load_snapshot allow one per kBytesPerVisit bytes of the pickle plus
  // kVisitSlack (a dict listed once takes 6 bytes of pickle at the very
  // least, one of PyTorch's about 70), snapshot_to_trace alone
  // kDefaultMaxVisits.
  uint64_t max_visits = 0;
};

struct SnapshotFacts {
  int device = 0;        // the device replayed
  size_t devices = 0;    // entries of 'device_traces'
  uint64_t events = 0;   // trace events of the device
  uint64_t allocs = 0;   // mallocs made of 'alloc' events
  uint64_t frees = 0;    // frees made of 'free_requested' (or lone 'free_completed') events
  uint64_t lagged_frees = 0;  // of them, completed only after later events (TraceOp::lag)
  uint64_t prelive_from_frees = 0;     // freed in the trace, allocated before it
  uint64_t prelive_from_segments = 0;  // active at dump time, never mentioned by the trace
  uint64_t prelive_bytes = 0;          // their sizes, all live at the start
  uint64_t repairs = 0;  // events contradicting the history before them (see snapshot.cpp)
  uint64_t ignored = 0;  // events of unknown actions or of size 0
  uint64_t ooms = 0;     // 'oom' events
  uint64_t segments = 0;           // the device's segments at dump time
  uint64_t reserved_at_dump = 0;   // their total_size summed
  uint64_t reserved_at_start = 0;  // reserved_at_dump minus the trace's net segment change, >= 0
  bool reserved_clamped = false;   // that difference was negative (inconsistent snapshot)
  uint64_t reserved_peak = 0;      // PyTorch's reserved bytes at their highest
  uint64_t allocated_peak = 0;     // live requested bytes at their highest (pre-live included)
  std::vector<int64_t> stream_handles;  // [k]: the cudaStream_t of trace stream k ([0] = 0)
  // A libvpmm memory history (vpmm.torch after use_as_allocator(), its
  // top-level "vpmm" dict saying pytorch_reserved False): the segments are
  // libvpmm's allocations, not what PyTorch's allocator reserved, and the
  // mapped peak libvpmm recorded while the job ran comes with it.
  bool reserved_is_pytorch = true;
  uint64_t vpmm_mapped_peak = 0;
  uint64_t visits = 0;   // dicts looked at, against SnapshotOptions::max_visits
};

// Convert a parsed snapshot. On failure *err is "NAME: where: what" and *out
// and *facts are untouched.
bool snapshot_to_trace(const vpickle::Value& root, const std::string& name,
                       const SnapshotOptions& opts, Trace* out, SnapshotFacts* facts,
                       std::string* err);

// Bytes of a snapshot file (gzip or a plain pickle) to a trace.
bool parse_snapshot(const uint8_t* data, size_t size, const std::string& name,
                    const SnapshotOptions& opts, Trace* out, SnapshotFacts* facts,
                    std::string* err);
bool load_snapshot(const std::string& path, const SnapshotOptions& opts, Trace* out,
                   SnapshotFacts* facts, std::string* err);

// A pickle of protocol 2 or later (PROTO first) or gzip data (1f 8b): what
// `vpmm replay` takes for a snapshot rather than a text trace.
bool looks_like_snapshot(const uint8_t* data, size_t size);
// The same test on a file's first bytes, or a name ending in .pickle, .pkl
// or .pickle.gz (protocol 0 and 1 pickles have no PROTO). False when the file
// cannot be read (load_trace then says so).
bool is_snapshot_file(const std::string& path);

// gzip (one or more members) to bytes. Without zlib at build time it fails
// with "NAME: ... built without zlib: gunzip it first". More than max_out
// bytes of output fail with "NAME: more than N once decompressed ..."; the
// buffer never grows beyond max_out bytes (while it grows, the old one is
// held too: 1.5 x max_out at most).
bool gunzip(const uint8_t* data, size_t size, const std::string& name, std::vector<uint8_t>* out,
            std::string* err, uint64_t max_out = kDefaultMaxInflated);
bool have_zlib();

}  // namespace vtrace
