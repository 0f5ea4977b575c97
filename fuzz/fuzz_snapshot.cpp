// fuzz_snapshot: the pickle reader (tools/pickle.hpp) and PyTorch memory
// snapshots as traces (tools/snapshot.hpp) on any bytes. Both read files
// from elsewhere, 100 MB and more: whatever the input, they must answer with
// a value or a message, within the input's bounds, without leaking.
//
//  1. vpickle::parse of the whole input. On success the document's consumed()
//     bytes end at the STOP opcode, so the same input cut one byte short must
//     fail; describe() of the root (bounded even on cyclic values) runs.
//  2. The root as a snapshot: snapshot_to_trace for the default device and
//     for the device the first byte names. A converted trace must satisfy
//     trace.hpp's invariants (each malloc of a fresh ID, each free of a live
//     one, sizes > 0, streams in range), its facts must add up (pre-live
//     mallocs first, peaks no lower than where they start, the replay's peak
//     requested equal to the allocated peak), and it must replay against a
//     model allocator that checks every free reaches its malloc's pointer.
//     A failure leaves the output untouched and names the input.
//  3. parse_snapshot of the raw bytes (the gzip branch: this build has no
//     zlib, so gzip magic must give the "gunzip it first" message).
//
// Time and memory are findings too, not only crashes: a few kilobytes can
// list one container a million times (memo GET). Each conversion runs with a
// visit budget that follows the input's size and checks the visits it
// reports against it; dict lookups (a sorted index on large dicts) must find
// what a linear scan finds. Run with libFuzzer's -timeout, -rss_limit_mb and
// -malloc_limit_mb so that a slow or memory-hungry input is saved as one.
//
// Seeds: fuzz/corpus/fuzz_snapshot/, written by
// `tests/unit/make_snapshot.py --fuzz-seeds fuzz/corpus/fuzz_snapshot`
// (small snapshots under every protocol, 0-5).
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "fuzz_common.hpp"
#include "tools/pickle.hpp"
#include "tools/snapshot.hpp"
#include "tools/trace.hpp"

namespace {

bool starts_with(const std::string& s, const char* p) { return s.compare(0, std::strlen(p), p) == 0; }

void check_trace(const vtrace::Trace& t, const vtrace::SnapshotFacts& f) {
  std::vector<bool> live(t.ids.size(), false);
  const uint64_t prelive = f.prelive_from_frees + f.prelive_from_segments;
  FZ_CHECK(prelive <= t.ops.size(), "%llu pre-live allocations, %zu ops", (unsigned long long)prelive,
           t.ops.size());
  uint64_t mallocs = 0, frees = 0;
  for (size_t k = 0; k < t.ops.size(); ++k) {
    const vtrace::TraceOp& op = t.ops[k];
    FZ_CHECK(op.id < t.ids.size(), "op %zu: id %u of %zu", k, op.id, t.ids.size());
    FZ_CHECK(op.stream >= 0 && op.stream < vtrace::kMaxStreams, "op %zu: stream %d", k, op.stream);
    FZ_CHECK(static_cast<size_t>(op.stream) < f.stream_handles.size(), "op %zu: stream %d of %zu", k,
             op.stream, f.stream_handles.size());
    switch (op.kind) {
      case vtrace::OpKind::kMalloc:
        FZ_CHECK(!live[op.id], "op %zu: malloc of a live id", k);
        FZ_CHECK(op.size > 0 && !op.in_pages, "op %zu: size %llu", k, (unsigned long long)op.size);
        live[op.id] = true;
        ++mallocs;
        break;
      case vtrace::OpKind::kFree:
        FZ_CHECK(k >= prelive, "op %zu: a free among the pre-live mallocs", k);
        FZ_CHECK(live[op.id], "op %zu: free of an id not live", k);
        live[op.id] = false;
        ++frees;
        break;
      case vtrace::OpKind::kSync:
        FZ_CHECK(false, "op %zu: a snapshot has no syncs", k);
    }
  }
  FZ_CHECK(mallocs == f.allocs + prelive, "%llu mallocs, facts say %llu + %llu",
           (unsigned long long)mallocs, (unsigned long long)f.allocs, (unsigned long long)prelive);
  FZ_CHECK(frees == f.frees, "%llu frees, facts say %llu", (unsigned long long)frees,
           (unsigned long long)f.frees);
  FZ_CHECK(f.stream_handles.size() >= 1 && f.stream_handles[0] == 0, "stream 0 is not handle 0");
  FZ_CHECK(f.reserved_peak >= f.reserved_at_start, "reserved peak below the start");
  FZ_CHECK(f.allocated_peak >= f.prelive_bytes, "allocated peak below the pre-live bytes");

  vtrace::TraceSummary sum;
  std::string err;
  FZ_CHECK(vtrace::summarize_trace(t.ops, 4096, &sum, &err), "summary: %s", err.c_str());
  FZ_CHECK(sum.peak_requested == f.allocated_peak, "peak requested %llu, allocated peak %llu",
           (unsigned long long)sum.peak_requested, (unsigned long long)f.allocated_peak);

  std::map<uintptr_t, uint64_t> model;
  uintptr_t next = 0x1000;
  vtrace::ReplayHooks h;
  h.malloc = [&](const vtrace::TraceOp&, uint64_t bytes, void** ptr, std::string*) {
    next += 0x1000;
    model[next] = bytes;
    *ptr = reinterpret_cast<void*>(next);
    return true;
  };
  h.free = [&](const vtrace::TraceOp& op, void* ptr, uint64_t bytes, std::string*) {
    auto it = model.find(reinterpret_cast<uintptr_t>(ptr));
    FZ_CHECK(it != model.end() && it->second == bytes, "event %u: replay freed %p it never got", op.line, ptr);
    model.erase(it);
    return true;
  };
  h.sync = [](int, std::string*) { return true; };
  vtrace::ReplayResult r;
  FZ_CHECK(vtrace::replay_trace(t.ops, 4096, h, &r, &err, "fuzz"), "replay: %s", err.c_str());
  FZ_CHECK(r.peak_requested == f.allocated_peak, "replayed peak %llu, allocated peak %llu",
           (unsigned long long)r.peak_requested, (unsigned long long)f.allocated_peak);
}

// Tighter than parse_snapshot's own (kVisitSlack), so that small inputs
// reach the refusal.
uint64_t visit_budget(size_t size) { return size / vtrace::kBytesPerVisit + 1024; }

// find() against a linear scan: the last entry with the key wins.
void check_find(const vpickle::Value& dict) {
  const auto& e = dict.entries();
  for (size_t k = 0; k < e.size() && k < 64; ++k) {
    if (!e[k].first.is(vpickle::Kind::kStr)) continue;
    const std::string& key = e[k].first.as_str();
    size_t last = k;
    for (size_t j = k + 1; j < e.size(); ++j)
      if (e[j].first.is(vpickle::Kind::kStr) && e[j].first.as_str() == key) last = j;
    vpickle::Value got;
    FZ_CHECK(dict.find(key, &got), "key %zu of %zu not found", k, e.size());
    FZ_CHECK(vpickle::describe(got, 2, 4) == vpickle::describe(e[last].second, 2, 4),
             "key %zu of %zu: found another entry than %zu", k, e.size(), last);
  }
}

void convert(const vpickle::Value& root, int device, size_t size) {
  vtrace::SnapshotOptions o;
  o.device = device;
  o.max_visits = visit_budget(size);
  vtrace::Trace t;
  t.name = "untouched";
  vtrace::SnapshotFacts f;
  f.device = -7;
  std::string err;
  if (!vtrace::snapshot_to_trace(root, "fuzz", o, &t, &f, &err)) {
    FZ_CHECK(starts_with(err, "fuzz: "), "error without the input's name: \"%s\"", err.c_str());
    FZ_CHECK(t.name == "untouched" && t.ops.empty() && f.device == -7, "output touched on error");
    return;
  }
  FZ_CHECK(f.visits <= o.max_visits, "%llu visits, budget %llu", (unsigned long long)f.visits,
           (unsigned long long)o.max_visits);
  FZ_CHECK(f.events <= f.visits, "%llu events, %llu visits", (unsigned long long)f.events,
           (unsigned long long)f.visits);
  FZ_CHECK(t.name == "fuzz", "trace name \"%s\"", t.name.c_str());
  if (device >= 0) FZ_CHECK(f.device == device, "device %d, asked for %d", f.device, device);
  check_trace(t, f);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  vpickle::Document doc;
  std::string err;
  if (vpickle::parse(data, size, "fuzz", &doc, &err)) {
    FZ_CHECK(doc.consumed() >= 1 && doc.consumed() <= size && data[doc.consumed() - 1] == '.',
             "consumed %zu of %zu", doc.consumed(), size);
    vpickle::Document shorter;
    std::string e2;
    FZ_CHECK(!vpickle::parse(data, doc.consumed() - 1, "fuzz", &shorter, &e2),
             "parses without its STOP (%zu bytes)", doc.consumed() - 1);
    (void)vpickle::describe(doc.root(), 6, 16);
    check_find(doc.root());
    convert(doc.root(), -1, size);
    convert(doc.root(), size ? data[0] % 4 : 0, size);
  } else {
    FZ_CHECK(starts_with(err, "fuzz: offset "), "error without name and offset: \"%s\"", err.c_str());
  }

  vtrace::Trace t;
  vtrace::SnapshotFacts f;
  if (!vtrace::parse_snapshot(data, size, "fuzz", vtrace::SnapshotOptions(), &t, &f, &err)) {
    FZ_CHECK(starts_with(err, "fuzz: "), "error without the input's name: \"%s\"", err.c_str());
    if (size >= 2 && data[0] == 0x1f && data[1] == 0x8b && !vtrace::have_zlib())
      FZ_CHECK(err.find("gunzip it first") != std::string::npos, "gzip without zlib: \"%s\"", err.c_str());
  } else {
    const uint64_t budget = size / vtrace::kBytesPerVisit + vtrace::kVisitSlack;
    FZ_CHECK(f.visits <= budget, "parse_snapshot: %llu visits, budget %llu", (unsigned long long)f.visits,
             (unsigned long long)budget);
  }
  return 0;
}
