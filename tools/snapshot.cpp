// PyTorch memory snapshots to traces (see snapshot.hpp for the contract and
// docs/trace-format.md for the rules). One pass over the chosen device's
// events keeps, per address, what PyTorch's allocator did to it; the ops of
// the trace come out of that pass already valid, so the trace never needs
// the text parser's validation.
//
// What PyTorch records (CUDACachingAllocator.cpp, record_trace): 'alloc' and
// both frees carry the block's address, the *requested* size (orig_size /
// block->requested_size, not the rounded block size) and the block's stream;
// segment events carry the segment (or, for expandable segments, the mapped
// range) address and size. Events of one device are in time order; the ring
// buffer (max_entries) drops the oldest, which is why a trace can free what
// it never allocated.
#include "snapshot.hpp"

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <new>
#include <unordered_map>

#ifdef VPMM_HAVE_ZLIB
#include <zlib.h>
#endif

namespace vtrace {

namespace {

using vpickle::Kind;
using vpickle::Value;

std::string hex_id(int64_t addr, uint64_t serial) {
  char b[48];
  std::snprintf(b, sizeof b, "0x%" PRIx64 "#%" PRIu64, static_cast<uint64_t>(addr), serial);
  return b;
}

// Where in the snapshot a field sits, formatted only when an error needs it
// (a 100 MB snapshot has millions of events: no string per event).
struct Where {
  const char* list;  // "device_traces" or "segments"
  long long i = -1, j = -1;
  std::string str() const {
    std::string s = list;
    for (long long x : {i, j})
      if (x >= 0) s += "[" + std::to_string(x) + "]";
    return s;
  }
};

class Converter {
 public:
  Converter(const std::string& name, const SnapshotOptions& opts)
      : name_(name), opts_(opts), budget_(opts.max_visits ? opts.max_visits : kDefaultMaxVisits) {}

  bool run(const Value& root, Trace* out, SnapshotFacts* facts, std::string* err);

 private:
  void read_vpmm_facts(const Value& root);
  bool fail(const std::string& what) {
    err_ = name_ + ": " + what;
    return false;
  }
  bool fail_at(const Where& w, const std::string& what) { return fail(w.str() + ": " + what); }

  // One look at an event, segment or block dict. Counted per listing, not
  // per dict: the cost of a dict listed a million times is a million.
  bool visit(const Where& w) {
    if (++facts_.visits <= budget_) return true;
    return fail_at(w, "more than " + std::to_string(budget_) +
                          " event, segment and block dicts to read, counting each listing: the "
                          "pickle lists shared containers over and over (no PyTorch snapshot does)");
  }

  // An int field. Absent: *present = false when the caller allows it (a
  // non-null `present`), else an error.
  bool int_field(const Value& dict, const char* key, const Where& w, int64_t* out,
                 bool* present = nullptr) {
    Value v;
    if (!dict.find(key, &v)) {
      if (present) {
        *present = false;
        return true;
      }
      return fail_at(w, std::string("no '") + key + "'");
    }
    if (!v.is(Kind::kInt)) {
      std::string what = v.is(Kind::kObject) && v.object_name() == "int" ? "an int beyond 64 bits"
                         : vpickle::kind_phrase(v.kind());
      return fail_at(w, std::string("'") + key + "' is " + what + ", want an int");
    }
    if (present) *present = true;
    *out = v.as_int();
    return true;
  }
  bool size_field(const Value& dict, const char* key, const Where& w, int64_t* out,
                  bool* present = nullptr) {
    if (!int_field(dict, key, w, out, present)) return false;
    if ((!present || *present) && *out < 0)
      return fail_at(w, std::string("'") + key + "' is negative (" + std::to_string(*out) + ")");
    return true;
  }

  // Trace stream of a raw cudaStream_t value.
  bool stream_of(int64_t handle, const Where& w, int32_t* out) {
    if (handle == 0) {
      *out = 0;
      return true;
    }
    auto it = streams_.find(handle);
    if (it == streams_.end()) {
      int32_t k = static_cast<int32_t>(facts_.stream_handles.size());
      if (k >= kMaxStreams)
        return fail_at(w, "more than " + std::to_string(kMaxStreams - 1) + " distinct streams");
      it = streams_.emplace(handle, k).first;
      facts_.stream_handles.push_back(handle);
    }
    *out = it->second;
    return true;
  }

  uint32_t new_id(int64_t addr) {
    uint32_t id = static_cast<uint32_t>(trace_.ids.size());
    trace_.ids.push_back(hex_id(addr, ++serial_));
    return id;
  }
  static TraceOp malloc_op(uint32_t id, uint64_t size, int32_t stream, uint32_t line) {
    TraceOp op;
    op.kind = OpKind::kMalloc;
    op.id = id;
    op.size = size;
    op.stream = stream;
    op.line = line;
    return op;
  }
  static TraceOp free_op(uint32_t id, int32_t stream, uint32_t line) {
    TraceOp op;
    op.kind = OpKind::kFree;
    op.id = id;
    op.stream = stream;
    op.line = line;
    return op;
  }

  // Signed running sums with a peak: PyTorch's reserved and allocated bytes
  // relative to the start of the trace.
  struct Curve {
    int64_t cur = 0, max = 0;
  };
  bool add(Curve* c, int64_t delta) {
    if (__builtin_add_overflow(c->cur, delta, &c->cur)) return fail("byte counts overflow 64 bits");
    if (c->cur > c->max) c->max = c->cur;
    return true;
  }

  bool pick_device(const Value* traces, const Value* segments);
  bool convert_events(const Value& events);
  bool on_alloc(int64_t addr, int64_t size, int32_t stream, uint32_t line);
  bool on_free(bool completed, int64_t addr, int64_t size, int32_t stream, uint32_t line);
  bool prelive(int64_t addr, int64_t size, int32_t stream, uint32_t line, uint32_t* id);
  bool convert_segments(const Value& segments);

  const std::string& name_;
  SnapshotOptions opts_;
  uint64_t budget_;  // visits allowed
  SnapshotFacts facts_;
  Trace trace_;
  std::vector<TraceOp> prelive_ops_;  // mallocs of pre-live allocations: the start of the trace
  std::unordered_map<int64_t, int32_t> streams_;
  // Per address the trace has mentioned: what PyTorch last did to it.
  struct Block {
    enum State : uint8_t { kLive, kFreeRequested, kGone } state = kGone;
    int32_t stream = 0;
    uint32_t id = 0;
    uint64_t size = 0;
    size_t free_op = 0;  // kFreeRequested: the index of its free in trace_.ops
  };
  std::unordered_map<int64_t, Block> blocks_;
  uint64_t serial_ = 0;
  Curve reserved_, allocated_;
  std::string err_;
};

// ---------------------------------------------------------------------------
// Events
// ---------------------------------------------------------------------------

bool Converter::prelive(int64_t addr, int64_t size, int32_t stream, uint32_t line, uint32_t* id) {
  if (__builtin_add_overflow(facts_.prelive_bytes, static_cast<uint64_t>(size), &facts_.prelive_bytes))
    return fail("byte counts overflow 64 bits");
  *id = new_id(addr);
  prelive_ops_.push_back(malloc_op(*id, static_cast<uint64_t>(size), stream, line));
  return true;
}

bool Converter::on_alloc(int64_t addr, int64_t size, int32_t stream, uint32_t line) {
  if (size == 0) {
    ++facts_.ignored;  // PyTorch records none; vpmm (like the trace format) has no size 0
    return true;
  }
  auto it = blocks_.find(addr);
  if (it != blocks_.end() && it->second.state != Block::kGone) {
    // The ring dropped this block's free (or its free_completed): the older
    // allocation must be gone by now.
    ++facts_.repairs;
    Block& old = it->second;
    if (old.state == Block::kLive) {
      trace_.ops.push_back(free_op(old.id, old.stream, line));
      ++facts_.frees;
      if (!add(&allocated_, -static_cast<int64_t>(old.size))) return false;
    }
  }
  Block b;
  b.state = Block::kLive;
  b.stream = stream;
  b.id = new_id(addr);
  b.size = static_cast<uint64_t>(size);
  blocks_[addr] = b;
  trace_.ops.push_back(malloc_op(b.id, b.size, stream, line));
  ++facts_.allocs;
  return add(&allocated_, size);
}

bool Converter::on_free(bool completed, int64_t addr, int64_t size, int32_t stream, uint32_t line) {
  auto it = blocks_.find(addr);
  if (it == blocks_.end()) {
    // Never mentioned before: allocated before recording started (or before
    // the oldest event the ring kept). Live from the start, freed here.
    if (size == 0) {
      ++facts_.ignored;
      return true;
    }
    ++facts_.prelive_from_frees;
    Block b;
    if (!prelive(addr, size, stream, line, &b.id)) return false;
    b.stream = stream;
    b.size = static_cast<uint64_t>(size);
    b.state = completed ? Block::kGone : Block::kFreeRequested;
    blocks_[addr] = b;
    trace_.ops.push_back(free_op(b.id, stream, line));
    ++facts_.frees;
    // Its bytes count from the start (prelive_bytes) until this free.
    return add(&allocated_, -size);
  }
  Block& b = it->second;
  switch (b.state) {
    case Block::kLive:
      // The program's free, or a free_completed with no free_requested
      // before it (e.g. the ring kept only the completion).
      trace_.ops.push_back(free_op(b.id, b.stream, line));
      ++facts_.frees;
      b.state = completed ? Block::kGone : Block::kFreeRequested;
      b.free_op = trace_.ops.size() - 1;
      return add(&allocated_, -static_cast<int64_t>(b.size));
    case Block::kFreeRequested:
      if (completed) {
        b.state = Block::kGone;  // the usual completion: already freed at the request
        // Completed after other ops: PyTorch held the block for another
        // stream's work (record_stream). The free op says how long.
        const size_t after = trace_.ops.size() - 1 - b.free_op;
        if (after > 0) {
          trace_.ops[b.free_op].lag = static_cast<uint32_t>(std::min<size_t>(after, UINT32_MAX));
          ++facts_.lagged_frees;
        }
        return true;
      }
      ++facts_.repairs;  // a second request for the same block: nothing to free
      return true;
    case Block::kGone:
      ++facts_.repairs;  // freed before and not allocated since
      return true;
  }
  return true;
}

bool Converter::convert_events(const Value& events) {
  Where w{"device_traces", facts_.device};
  if (!events.is(Kind::kList))
    return fail_at(w, "is " + vpickle::kind_phrase(events.kind()) + ", want a list of events");
  const std::vector<Value>& ev = events.items();
  facts_.events = ev.size();
  trace_.ops.reserve(ev.size());
  for (size_t i = 0; i < ev.size(); ++i) {
    const Value& e = ev[i];
    w.j = static_cast<long long>(i);
    if (!visit(w)) return false;
    if (!e.is(Kind::kDict))
      return fail_at(w, "is " + vpickle::kind_phrase(e.kind()) + ", want a dict");
    Value action;
    if (!e.find("action", &action)) return fail_at(w, "no 'action'");
    if (!action.is(Kind::kStr))
      return fail_at(w, "'action' is " + vpickle::kind_phrase(action.kind()) + ", want a str");
    const std::string& a = action.as_str();
    // Messages name the event by its index; a trace op's `line` is that
    // index + 1 (what "NAME:LINE:" replay errors print).
    const uint32_t line = i + 1 > UINT32_MAX ? UINT32_MAX : static_cast<uint32_t>(i + 1);
    const bool alloc = a == "alloc";
    const bool free_req = a == "free_requested";
    const bool free_done = a == "free_completed";
    if (alloc || free_req || free_done) {
      int64_t addr = 0, size = 0, handle = 0;
      bool has_stream = false;
      int32_t stream = 0;
      if (!int_field(e, "addr", w, &addr) || !size_field(e, "size", w, &size) ||
          !int_field(e, "stream", w, &handle, &has_stream))
        return false;
      if (has_stream && !stream_of(handle, w, &stream)) return false;
      bool ok = alloc ? on_alloc(addr, size, stream, line) : on_free(free_done, addr, size, stream, line);
      if (!ok) return false;
      continue;
    }
    const bool seg_add = a == "segment_alloc" || a == "segment_map";
    const bool seg_sub = a == "segment_free" || a == "segment_unmap";
    if (seg_add || seg_sub) {
      int64_t size = 0;
      if (!size_field(e, "size", w, &size)) return false;
      if (!add(&reserved_, seg_add ? size : -size)) return false;
      continue;
    }
    if (a == "oom") ++facts_.ooms;
    else if (a != "snapshot") ++facts_.ignored;  // an action of a later PyTorch
  }
  return true;
}

// ---------------------------------------------------------------------------
// Segments: the state at dump time
// ---------------------------------------------------------------------------

bool Converter::convert_segments(const Value& segments) {
  Where w{"segments"};
  if (!segments.is(Kind::kList))
    return fail_at(w, "is " + vpickle::kind_phrase(segments.kind()) + ", want a list");
  uint64_t total = 0;
  for (size_t i = 0; i < segments.items().size(); ++i) {
    const Value& s = segments.items()[i];
    w.i = static_cast<long long>(i);
    w.j = -1;
    if (!visit(w)) return false;
    if (!s.is(Kind::kDict))
      return fail_at(w, "is " + vpickle::kind_phrase(s.kind()) + ", want a dict");
    int64_t device = 0, seg_size = 0, seg_addr = 0, handle = 0;
    bool has_device = false, has_addr = false, has_stream = false;
    if (!int_field(s, "device", w, &device, &has_device)) return false;
    if (device != facts_.device) continue;
    if (!size_field(s, "total_size", w, &seg_size) || !int_field(s, "address", w, &seg_addr, &has_addr) ||
        !int_field(s, "stream", w, &handle, &has_stream))
      return false;
    ++facts_.segments;
    if (__builtin_add_overflow(total, static_cast<uint64_t>(seg_size), &total))
      return fail_at(w, "segment sizes overflow 64 bits");
    Value blocks;
    if (!s.find("blocks", &blocks)) continue;
    if (!blocks.is(Kind::kList))
      return fail_at(w, "'blocks' is " + vpickle::kind_phrase(blocks.kind()) + ", want a list");
    // Blocks are listed in address order from the segment's start; PyTorch
    // before 2.1 gave no block address, so it is that running offset.
    int64_t next_addr = seg_addr;
    for (size_t j = 0; j < blocks.items().size(); ++j) {
      const Value& b = blocks.items()[j];
      w.j = static_cast<long long>(j);
      if (!visit(w)) return false;
      if (!b.is(Kind::kDict))
        return fail_at(w, "is " + vpickle::kind_phrase(b.kind()) + ", want a dict");
      int64_t size = 0, requested = 0, addr = 0;
      bool has_requested = false, has_block_addr = false;
      if (!size_field(b, "size", w, &size) || !size_field(b, "requested_size", w, &requested, &has_requested) ||
          !int_field(b, "address", w, &addr, &has_block_addr))
        return false;
      if (!has_block_addr) {
        if (!has_addr) return fail_at(w, "no 'address' in the block or its segment");
        addr = next_addr;
      }
      if (__builtin_add_overflow(addr, size, &next_addr))
        return fail_at(w, "block address + size overflow 64 bits");
      Value state;
      if (!b.find("state", &state)) return fail_at(w, "no 'state'");
      if (!state.is(Kind::kStr))
        return fail_at(w, "'state' is " + vpickle::kind_phrase(state.kind()) + ", want a str");
      const std::string& st = state.as_str();
      if (st != "active_allocated" && st != "active_pending_free") continue;
      if (blocks_.count(addr)) continue;  // the trace accounts for it
      // Live at dump time and never mentioned by the trace: live all along.
      // Its requested size, like the events' sizes (the block size when an
      // older PyTorch did not record it).
      int64_t bytes = has_requested && requested > 0 ? requested : size;
      if (bytes == 0) continue;
      int32_t stream = 0;
      if (has_stream && !stream_of(handle, w, &stream)) return false;
      uint32_t id = 0;
      if (!prelive(addr, bytes, stream, 0, &id)) return false;
      ++facts_.prelive_from_segments;
      Block blk;
      blk.state = Block::kLive;
      blk.id = id;
      blk.stream = stream;
      blk.size = static_cast<uint64_t>(bytes);
      blocks_[addr] = blk;  // a block listed twice stays one allocation
    }
  }
  facts_.reserved_at_dump = total;
  return true;
}

// ---------------------------------------------------------------------------
// The whole snapshot
// ---------------------------------------------------------------------------

bool Converter::pick_device(const Value* traces, const Value* segments) {
  std::vector<uint64_t> counts;
  if (traces)
    for (const Value& t : traces->items()) counts.push_back(t.size());
  facts_.devices = counts.size();
  // Devices that have segments, for a device with no trace at all.
  int64_t lowest_segment_device = -1;
  bool requested_has_segments = false;
  if (segments && segments->is(Kind::kList)) {
    Where w{"segments"};
    for (const Value& s : segments->items()) {
      ++w.i;
      if (!visit(w)) return false;
      Value d;
      if (!s.find("device", &d) || !d.is(Kind::kInt)) continue;
      if (d.as_int() >= 0 && (lowest_segment_device < 0 || d.as_int() < lowest_segment_device))
        lowest_segment_device = d.as_int();
      if (d.as_int() == opts_.device) requested_has_segments = true;
    }
  }
  if (opts_.device >= 0) {
    if (static_cast<size_t>(opts_.device) >= counts.size() && !requested_has_segments)
      return fail("no device " + std::to_string(opts_.device) + " in the snapshot ('device_traces' has " +
                  std::to_string(counts.size()) + " entries and no segment is on that device)");
    facts_.device = opts_.device;
    return true;
  }
  size_t best = 0;
  for (size_t d = 1; d < counts.size(); ++d)
    if (counts[d] > counts[best]) best = d;
  if (!counts.empty() && counts[best] > 0) facts_.device = static_cast<int>(best);
  else facts_.device = lowest_segment_device >= 0 && lowest_segment_device <= INT32_MAX
                           ? static_cast<int>(lowest_segment_device) : 0;
  return true;
}

// What vpmm.torch adds under the top-level "vpmm" key (bindings/python/
// vpmm/_snapshot.py): whether the segments are PyTorch's reservations, and
// per device the mapped peak libvpmm recorded. Anything else is ignored, and
// a file without the key is PyTorch's own.
void Converter::read_vpmm_facts(const Value& root) {
  Value v, flag, devices, dev, peak;
  if (!root.find("vpmm", &v) || !v.is(Kind::kDict)) return;
  if (v.find("pytorch_reserved", &flag) && flag.is(Kind::kBool)) facts_.reserved_is_pytorch = flag.as_bool();
  if (v.find("devices", &devices) && static_cast<size_t>(facts_.device) < devices.items().size()) {
    dev = devices.items()[facts_.device];
    if (dev.find("mapped_peak_recorded", &peak) && peak.is(Kind::kInt) && peak.as_int() > 0)
      facts_.vpmm_mapped_peak = static_cast<uint64_t>(peak.as_int());
  }
}

bool Converter::run(const Value& root, Trace* out, SnapshotFacts* facts, std::string* err) {
  bool ok = true;
  Value traces, segments;
  bool has_traces = false, has_segments = false;
  if (root.is(Kind::kDict)) {
    has_traces = root.find("device_traces", &traces);
    has_segments = root.find("segments", &segments);
    if (!has_traces && !has_segments)
      ok = fail("not a PyTorch memory snapshot: a dict without 'segments' or 'device_traces'");
  } else if (root.is(Kind::kList)) {
    // torch.cuda.memory_snapshot() (no history): the segments alone.
    segments = root;
    has_segments = true;
  } else {
    ok = fail("not a PyTorch memory snapshot: the pickle holds " + vpickle::kind_phrase(root.kind()) +
              ", want a dict with 'segments' and 'device_traces'");
  }
  if (ok && has_traces && !traces.is(Kind::kList))
    ok = fail("'device_traces' is " + vpickle::kind_phrase(traces.kind()) + ", want a list");
  facts_.stream_handles.push_back(0);
  trace_.name = name_;
  if (ok) ok = pick_device(has_traces ? &traces : nullptr, has_segments ? &segments : nullptr);
  if (ok && root.is(Kind::kDict)) read_vpmm_facts(root);
  if (ok && has_traces && static_cast<size_t>(facts_.device) < traces.items().size())
    ok = convert_events(traces.items()[facts_.device]);
  if (ok && has_segments) ok = convert_segments(segments);
  // Reserved: known at dump time; the events give the change since the
  // start. Allocated: every pre-live byte is live at the start.
  if (ok) {
    const uint64_t dump = facts_.reserved_at_dump;
    uint64_t start = 0;
    if (reserved_.cur >= 0) {
      const uint64_t net = static_cast<uint64_t>(reserved_.cur);
      facts_.reserved_clamped = net > dump;
      start = net > dump ? 0 : dump - net;
    } else if (__builtin_add_overflow(dump, 0 - static_cast<uint64_t>(reserved_.cur), &start)) {
      ok = fail("byte counts overflow 64 bits");
    }
    facts_.reserved_at_start = start;
    if (ok && (__builtin_add_overflow(start, static_cast<uint64_t>(reserved_.max), &facts_.reserved_peak) ||
               __builtin_add_overflow(facts_.prelive_bytes, static_cast<uint64_t>(allocated_.max),
                                      &facts_.allocated_peak)))
      ok = fail("byte counts overflow 64 bits");
  }
  if (!ok) {
    if (err) *err = err_;
    return false;
  }

  // Pre-live mallocs first, then the events' ops.
  prelive_ops_.insert(prelive_ops_.end(), trace_.ops.begin(), trace_.ops.end());
  trace_.ops = std::move(prelive_ops_);
  *out = std::move(trace_);
  if (facts) *facts = std::move(facts_);
  return true;
}

}  // namespace

// ---------------------------------------------------------------------------
// Files
// ---------------------------------------------------------------------------

bool snapshot_to_trace(const vpickle::Value& root, const std::string& name,
                       const SnapshotOptions& opts, Trace* out, SnapshotFacts* facts,
                       std::string* err) {
  Converter c(name, opts);
  return c.run(root, out, facts, err);
}

bool have_zlib() {
#ifdef VPMM_HAVE_ZLIB
  return true;
#else
  return false;
#endif
}

namespace {
bool is_gzip(const uint8_t* data, size_t size) { return size >= 2 && data[0] == 0x1f && data[1] == 0x8b; }

#ifdef VPMM_HAVE_ZLIB
// "4 GiB", "64 MiB" or "1000 bytes".
std::string size_phrase(uint64_t n) {
  if (n >= (uint64_t(1) << 30) && n % (uint64_t(1) << 30) == 0) return std::to_string(n >> 30) + " GiB";
  if (n >= (uint64_t(1) << 20) && n % (uint64_t(1) << 20) == 0) return std::to_string(n >> 20) + " MiB";
  return std::to_string(n) + " bytes";
}

uint64_t le32(const uint8_t* p) {
  return uint64_t(p[0]) | uint64_t(p[1]) << 8 | uint64_t(p[2]) << 16 | uint64_t(p[3]) << 24;
}
#endif
}  // namespace

bool gunzip(const uint8_t* data, size_t size, const std::string& name, std::vector<uint8_t>* out,
            std::string* err, uint64_t max_out) {
#ifndef VPMM_HAVE_ZLIB
  (void)data;
  (void)size;
  (void)out;
  (void)max_out;
  if (err) *err = name + ": gzip-compressed, but vpmm was built without zlib: gunzip it first";
  return false;
#else
  std::vector<uint8_t> buf;
  const uint64_t cap = std::min<uint64_t>(max_out, SIZE_MAX);
  // gzip's trailer holds the size mod 2^32 of the last member: a good first
  // guess, trusted only as far as a plausible ratio (a corrupt trailer must
  // not make us zero gigabytes); doubling covers the rest, up to the cap.
  uint64_t guess = size >= 4 ? le32(data + size - 4) : 0;
  guess = std::min<uint64_t>(guess, uint64_t(size) * 16);
  buf.resize(static_cast<size_t>(std::min<uint64_t>(std::max<uint64_t>(guess, 1 << 16), cap)));
  z_stream z;
  std::memset(&z, 0, sizeof z);
  if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK) {
    if (err) *err = name + ": zlib cannot start";
    return false;
  }
  size_t in_pos = 0, out_pos = 0;
  std::string what;
  for (;;) {
    // Full at the cap: inflate into a byte aside, which must stay empty (a
    // buffer one byte larger would cost a copy of the whole of it).
    const bool full = out_pos == buf.size() && buf.size() >= cap;
    if (out_pos == buf.size() && !full)
      buf.resize(static_cast<size_t>(std::min<uint64_t>(uint64_t(buf.size()) * 2, cap)));
    uint8_t beyond = 0;
    // avail_in/avail_out are 32-bit: feed at most 1 GiB at a time.
    size_t in_chunk = std::min<size_t>(size - in_pos, size_t(1) << 30);
    size_t out_chunk = full ? 1 : std::min<size_t>(buf.size() - out_pos, size_t(1) << 30);
    z.next_in = const_cast<Bytef*>(data + in_pos);
    z.avail_in = static_cast<uInt>(in_chunk);
    z.next_out = full ? &beyond : buf.data() + out_pos;
    z.avail_out = static_cast<uInt>(out_chunk);
    int rc = inflate(&z, Z_NO_FLUSH);
    in_pos += in_chunk - z.avail_in;
    const size_t produced = out_chunk - z.avail_out;
    if (full && produced > 0) {
      what = "more than " + size_phrase(max_out) +
             " once decompressed: the limit on inflated snapshots (a decompression bomb?)";
      break;
    }
    out_pos += produced;
    if (rc == Z_STREAM_END) {
      // Another member may follow (gzip files concatenate).
      if (in_pos == size) break;
      if (!is_gzip(data + in_pos, size - in_pos)) {
        what = "trailing bytes after the gzip data at offset " + std::to_string(in_pos);
        break;
      }
      inflateReset(&z);
      continue;
    }
    if (rc == Z_OK) continue;
    if (rc == Z_BUF_ERROR && in_pos == size && z.avail_out != 0) {
      what = "truncated gzip data";
      break;
    }
    if (rc == Z_BUF_ERROR) continue;  // output full: grow and go on
    what = std::string("corrupt gzip data") + (z.msg ? std::string(" (") + z.msg + ")" : "");
    break;
  }
  inflateEnd(&z);
  if (!what.empty()) {
    if (err) *err = name + ": " + what;
    return false;
  }
  buf.resize(out_pos);
  *out = std::move(buf);
  return true;
#endif
}

namespace {
bool out_of_memory(const std::string& name, std::string* err) {
  if (err) *err = name + ": out of memory reading the snapshot";
  return false;
}

// What a file starts with, for a message: its first line when it reads as
// text, else its first bytes in hex.
std::string describe_start(const uint8_t* data, size_t size) {
  const size_t n = std::min<size_t>(size, 48);
  size_t printable = 0;
  for (size_t i = 0; i < n; ++i)
    if ((data[i] >= 0x20 && data[i] < 0x7f) || data[i] == '\n' || data[i] == '\t' || data[i] == '\r') ++printable;
  std::string out;
  if (n > 0 && printable == n) {
    out = "text \"";
    for (size_t i = 0; i < n && data[i] != '\n' && data[i] != '\r'; ++i) out += static_cast<char>(data[i]);
    return out + (n < size || std::memchr(data, '\n', n) ? "...\"" : "\"");
  }
  char b[4];
  out = "bytes";
  for (size_t i = 0; i < std::min<size_t>(n, 8); ++i) {
    std::snprintf(b, sizeof b, " %02x", data[i]);
    out += b;
  }
  return out;
}

// A pickle of protocol 2 or later (what torch.cuda.memory._dump_snapshot
// writes) opens with PROTO. Input without it that does not parse is no
// snapshot at all: say that, rather than what the first byte means as an
// opcode ("offset 0: TUPLE without a MARK" for a text file).
void explain_not_a_pickle(const uint8_t* data, size_t size, bool inflated, const std::string& name,
                          std::string* err) {
  if (!err || size == 0 || data[0] == 0x80) return;
  const std::string parser = err->compare(0, name.size() + 2, name + ": ") == 0 ? err->substr(name.size() + 2) : *err;
  *err = name + ": not a PyTorch memory snapshot: it holds " + (inflated ? "gzip data of " : "") +
         describe_start(data, size) +
         ", not a pickle (a snapshot is the file torch.cuda.memory._dump_snapshot writes; the pickle reader "
         "says: " + parser + ")";
}
}  // namespace

bool parse_snapshot(const uint8_t* data, size_t size, const std::string& name,
                    const SnapshotOptions& opts, Trace* out, SnapshotFacts* facts,
                    std::string* err) {
  // The limits bound what an input costs; a machine with less memory than
  // they allow must still get a message, not an abort.
  try {
    std::vector<uint8_t> inflated;
    const bool gz = is_gzip(data, size);
    if (gz) {
      if (!gunzip(data, size, name, &inflated, err, opts.max_inflated)) return false;
      data = inflated.data();
      size = inflated.size();
    }
    vpickle::Document doc;
    if (!vpickle::parse(data, size, name, &doc, err)) {
      explain_not_a_pickle(data, size, gz, name, err);
      return false;
    }
    SnapshotOptions o = opts;
    if (o.max_visits == 0) o.max_visits = doc.consumed() / kBytesPerVisit + kVisitSlack;
    return snapshot_to_trace(doc.root(), name, o, out, facts, err);
  } catch (const std::bad_alloc&) {
    return out_of_memory(name, err);
  }
}

bool load_snapshot(const std::string& path, const SnapshotOptions& opts, Trace* out,
                   SnapshotFacts* facts, std::string* err) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    if (err) *err = path + ": cannot open: " + std::strerror(errno);
    return false;
  }
  in.seekg(0, std::ios::end);
  std::streamoff len = in.tellg();
  in.seekg(0, std::ios::beg);
  if (len < 0) {
    if (err) *err = path + ": cannot read";
    return false;
  }
  std::vector<uint8_t> bytes;
  try {
    bytes.resize(static_cast<size_t>(len));
  } catch (const std::bad_alloc&) {
    return out_of_memory(path, err);
  }
  if (len > 0 && !in.read(reinterpret_cast<char*>(bytes.data()), len)) {
    if (err) *err = path + ": read error";
    return false;
  }
  return parse_snapshot(bytes.data(), bytes.size(), path, opts, out, facts, err);
}

bool looks_like_snapshot(const uint8_t* data, size_t size) {
  return (size >= 1 && data[0] == 0x80) || is_gzip(data, size);
}

bool is_snapshot_file(const std::string& path) {
  auto ends_with = [&](const char* suffix) {
    size_t n = std::strlen(suffix);
    return path.size() >= n && path.compare(path.size() - n, n, suffix) == 0;
  };
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  if (ends_with(".pickle") || ends_with(".pkl") || ends_with(".pickle.gz")) return true;
  uint8_t head[2] = {0, 0};
  in.read(reinterpret_cast<char*>(head), 2);
  return looks_like_snapshot(head, static_cast<size_t>(in.gcount()));
}

}  // namespace vtrace
