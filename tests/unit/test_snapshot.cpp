// Unit tests of the pickle reader (tools/pickle.{hpp,cpp}) and of PyTorch
// memory snapshots as traces (tools/snapshot.{hpp,cpp}). No Python at test
// time: pickles are byte strings, either written by CPython and pasted here
// (so the reader is checked against the real pickler) or encoded by the small
// pickler below, which writes what CPython's does for plain data (protocol 2:
// BINPUT/BINGET memo; protocol 4: FRAME and MEMOIZE) and builds snapshots.
// The hostile-input cases (every truncation, random corruption, every
// unknown opcode) matter most under scripts/sanitize.sh: a reader of 100 MB
// files from elsewhere must fail with a message, never touch memory it
// should not.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#ifdef VPMM_HAVE_ZLIB
#include <zlib.h>
#endif

#include "check.hpp"
#include "pickle.hpp"
#include "snapshot.hpp"
#include "trace.hpp"

using vpickle::Kind;
using vpickle::Value;

namespace {

// A byte string from a literal that may hold NULs.
template <size_t N>
std::string B(const char (&s)[N]) {
  return std::string(s, N - 1);
}

const uint8_t* bytes(const std::string& s) { return reinterpret_cast<const uint8_t*>(s.data()); }

bool parse(const std::string& data, vpickle::Document* doc, std::string* err,
           const vpickle::Limits& limits = vpickle::Limits()) {
  return vpickle::parse(bytes(data), data.size(), "t.pickle", doc, err, limits);
}

// "" when `data` parses, else the message.
std::string error_of(const std::string& data, const vpickle::Limits& limits = vpickle::Limits()) {
  vpickle::Document doc;
  std::string err;
  return parse(data, &doc, &err, limits) ? "" : err;
}

std::string repr_of(const std::string& data) {
  vpickle::Document doc;
  std::string err;
  if (!parse(data, &doc, &err)) return "ERROR " + err;
  return vpickle::describe(doc.root(), 8, 100);
}

bool contains(const std::string& s, const std::string& p) { return s.find(p) != std::string::npos; }

std::vector<std::string> ops_of(const vtrace::Trace& t);

// CHECK that a trace's ops (as ops_of writes them) are `want`.
#define CHECK_OPS(trace, ...)                                                   \
  do {                                                                          \
    const std::vector<std::string> want_ = __VA_ARGS__;                         \
    const std::vector<std::string> got_ = ops_of(trace);                        \
    CHECK(got_ == want_);                                                       \
    if (got_ != want_)                                                          \
      for (size_t k_ = 0; k_ < std::max(got_.size(), want_.size()); ++k_)       \
        std::printf("  got %-36s want %s\n", k_ < got_.size() ? got_[k_].c_str() : "-", \
                    k_ < want_.size() ? want_[k_].c_str() : "-");               \
  } while (0)
bool starts_with(const std::string& s, const std::string& p) { return s.compare(0, p.size(), p) == 0; }

#define CHECK_CONTAINS(s, part)                                                 \
  do {                                                                          \
    std::string s_ = (s);                                                       \
    CHECK(contains(s_, part));                                                  \
    if (!contains(s_, part)) std::printf("  got: %s\n", s_.c_str());           \
  } while (0)

// ---------------------------------------------------------------------------
// A pickler for plain data, as CPython's writes it
// ---------------------------------------------------------------------------

struct Py {
  enum T { kNone, kBool, kInt, kStr, kList, kTuple, kDict } t = kNone;
  int64_t i = 0;
  std::string s;
  std::vector<Py> items;  // list/tuple items; dict: key, value, key, value...
};
Py None() { return Py(); }
Py Bool(bool b) {
  Py p;
  p.t = Py::kBool;
  p.i = b;
  return p;
}
Py I(int64_t v) {
  Py p;
  p.t = Py::kInt;
  p.i = v;
  return p;
}
Py S(const std::string& s) {
  Py p;
  p.t = Py::kStr;
  p.s = s;
  return p;
}
Py L(std::vector<Py> items) {
  Py p;
  p.t = Py::kList;
  p.items = std::move(items);
  return p;
}
Py T(std::vector<Py> items) {
  Py p;
  p.t = Py::kTuple;
  p.items = std::move(items);
  return p;
}
Py D(std::vector<std::pair<std::string, Py>> kv) {
  Py p;
  p.t = Py::kDict;
  for (auto& e : kv) {
    p.items.push_back(S(e.first));
    p.items.push_back(std::move(e.second));
  }
  return p;
}

class Pickler {
 public:
  explicit Pickler(int protocol, size_t frame_size = 64) : proto_(protocol), frame_size_(frame_size) {}

  std::string dump(const Py& v) {
    body_.clear();
    starts_.clear();
    memo_.clear();
    next_memo_ = 0;
    value(v);
    op(".");
    std::string out = B("\x80");
    out += static_cast<char>(proto_);
    if (proto_ < 4) return out + body_;
    // Frames at opcode boundaries, each at least frame_size_ bytes (CPython
    // uses 64 KiB; small frames here put many frame edges in a small test).
    size_t from = 0;
    for (size_t k = 0; k <= starts_.size(); ++k) {
      size_t at = k < starts_.size() ? starts_[k] : body_.size();
      if (at - from >= frame_size_ || (k == starts_.size() && at > from)) {
        out += B("\x95");
        out += le(at - from, 8);
        out += body_.substr(from, at - from);
        from = at;
      }
    }
    return out;
  }

 private:
  static std::string le(uint64_t v, int n) {
    std::string s;
    for (int k = 0; k < n; ++k) s += static_cast<char>((v >> (8 * k)) & 0xff);
    return s;
  }
  void op(const std::string& code_and_args) {
    starts_.push_back(body_.size());
    body_ += code_and_args;
  }
  void memoize() {
    uint32_t idx = next_memo_++;
    if (proto_ >= 4) op(B("\x94"));
    else if (idx < 256) op("q" + le(idx, 1));
    else op("r" + le(idx, 4));
  }
  void get(uint32_t idx) {
    if (idx < 256) op("h" + le(idx, 1));
    else op("j" + le(idx, 4));
  }
  void integer(int64_t v) {
    if (v >= 0 && v < 256) return op("K" + le(static_cast<uint64_t>(v), 1));
    if (v >= 0 && v < 65536) return op("M" + le(static_cast<uint64_t>(v), 2));
    if (v >= INT32_MIN && v <= INT32_MAX) return op("J" + le(static_cast<uint64_t>(v), 4));
    // LONG1: little-endian two's complement, as short as the sign allows.
    uint64_t u = static_cast<uint64_t>(v);
    int n = 8;
    while (n > 1) {
      uint8_t top = (u >> (8 * (n - 1))) & 0xff, next = (u >> (8 * (n - 2))) & 0xff;
      if ((top == 0 && !(next & 0x80)) || (top == 0xff && (next & 0x80))) --n;
      else break;
    }
    op(B("\x8a") + le(static_cast<uint64_t>(n), 1) + le(u, n));
  }
  void str(const std::string& s) {
    auto it = memo_.find(s);
    if (it != memo_.end()) return get(it->second);
    if (proto_ >= 4 && s.size() < 256) op(B("\x8c") + le(s.size(), 1) + s);
    else op("X" + le(s.size(), 4) + s);
    memo_[s] = next_memo_;
    memoize();
  }
  // Containers in batches of 1000, as CPython writes them.
  void batched(const std::vector<Py>& items, size_t per_entry, const char* one, const char* many) {
    size_t n = items.size() / per_entry;
    for (size_t b = 0; b < n; b += 1000) {
      size_t e = std::min(n, b + 1000);
      if (e - b > 1) op("(");
      for (size_t k = b * per_entry; k < e * per_entry; ++k) value(items[k]);
      op(e - b > 1 ? many : one);
    }
  }
  void value(const Py& v) {
    switch (v.t) {
      case Py::kNone: return op("N");
      case Py::kBool: return op(v.i ? B("\x88") : B("\x89"));
      case Py::kInt: return integer(v.i);
      case Py::kStr: return str(v.s);
      case Py::kList:
        op("]");
        memoize();
        return batched(v.items, 1, "a", "e");
      case Py::kDict:
        op("}");
        memoize();
        return batched(v.items, 2, "s", "u");
      case Py::kTuple:
        if (v.items.empty()) return op(")");
        if (v.items.size() <= 3) {
          for (const Py& x : v.items) value(x);
          op(std::string(1, static_cast<char>(0x84 + v.items.size())));
        } else {
          op("(");
          for (const Py& x : v.items) value(x);
          op("t");
        }
        return memoize();
    }
  }

  int proto_;
  size_t frame_size_;
  std::string body_;
  std::vector<size_t> starts_;  // offset of each opcode in body_
  std::map<std::string, uint32_t> memo_;
  uint32_t next_memo_ = 0;
};

// ---------------------------------------------------------------------------
// Snapshots
// ---------------------------------------------------------------------------

const int64_t kStreamS = 0x55aa00001000;  // raw cudaStream_t values
const int64_t kStreamT = 0x77bb00002000;
const int64_t MiB = 1 << 20;

Py event(const char* action, int64_t addr, int64_t size, int64_t stream) {
  return D({{"action", S(action)}, {"addr", I(addr)}, {"size", I(size)}, {"stream", I(stream)},
            {"time_us", I(1700000000000000)}, {"compile_context", S("N/A")}, {"user_metadata", S("")}});
}
Py block(int64_t addr, int64_t size, int64_t requested, const char* state) {
  return D({{"address", I(addr)}, {"size", I(size)}, {"requested_size", I(requested)}, {"state", S(state)},
            {"frames", L({})}});
}
Py segment(int device, int64_t addr, int64_t total, int64_t stream, std::vector<Py> blocks) {
  return D({{"device", I(device)}, {"address", I(addr)}, {"total_size", I(total)}, {"allocated_size", I(0)},
            {"active_size", I(0)}, {"requested_size", I(0)}, {"stream", I(stream)},
            {"segment_type", S("large")}, {"segment_pool_id", T({I(0), I(0)})},
            {"is_expandable", Bool(false)}, {"blocks", L(std::move(blocks))}});
}

const int64_t A = 0x7f0001000000, Bk = 0x7f0001000400, C = 0x7f0001100000;
const int64_t P = 0x7f0002000000, Q = 0x7f0003000000;

// The scenario every rule of snapshot.hpp shows up in once; the comments
// give what each event must become.
Py scenario() {
  std::vector<Py> dev0 = {
      event("segment_alloc", A, 20 * MiB, 0),  // 1: reserved +20M
      event("alloc", A, 1000, 0),              // 2: malloc A#1 1000 @0
      event("alloc", Bk, 3 * MiB, kStreamS),   // 3: malloc B 3M @1 (S: first non-zero stream)
      event("free_requested", Bk, 3 * MiB, kStreamS),  // 4: free B @1
      event("free_requested", P, 4096, 0),     // 5: P pre-live (malloc at the start); free P
      event("free_completed", P, 4096, 0),     // 6: follows its request: nothing
      event("free_completed", Q, 8192, kStreamT),  // 7: Q pre-live @2 (T); free Q: no request seen
      event("alloc", A, 2048, 0),              // 8: A still live: repair (free A#1), malloc A 2048
      event("free_completed", Bk, 3 * MiB, kStreamS),  // 9: follows its request: nothing
      event("segment_map", 0x7d0000000000, 2 * MiB, 0),    // 10: reserved +2M
      D({{"action", S("oom")}, {"device_free", I(0)}, {"size", I(int64_t(1) << 40)}, {"stream", I(0)}}),  // 11
      event("segment_unmap", 0x7d0000000000, 2 * MiB, 0),  // 12: reserved -2M
      event("alloc", C, 5 * MiB, kStreamS),    // 13: malloc C 5M @1
      event("free_completed", C, 5 * MiB, kStreamS),   // 14: no request before: free C here
      D({{"action", S("snapshot")}, {"addr", I(0)}, {"size", I(0)}, {"stream", I(0)}}),  // 15: nothing
      event("future_action", A, 1, 0),         // 16: unknown: ignored
      event("free_requested", Bk, 3 * MiB, kStreamS),  // 17: B is gone: repair, nothing
  };
  std::vector<Py> dev1 = {event("alloc", 0x7e0000000000, 100, 0), event("free_requested", 0x7e0000000000, 100, 0)};
  std::vector<Py> segs = {
      segment(0, A, 20 * MiB, 0,
              {block(A, 2048, 2048, "active_allocated"),                    // the trace's A: nothing
               block(A + 2048, 4096, 4000, "active_pending_free"),         // never seen: pre-live 4000 @0
               block(A + 6144, 20 * MiB - 6144, 0, "inactive")}),
      segment(0, 0x7f0004000000, 2 * MiB, kStreamT,
              {block(0x7f0004000000, 2 * MiB, 1536 * 1024, "active_allocated")}),  // pre-live 1.5M @2
      segment(1, 0x7e0000000000, 100 * MiB, 0, {block(0x7e0000000000, 100 * MiB, 0, "inactive")}),
  };
  return D({{"segments", L(segs)}, {"device_traces", L({L(dev0), L(dev1)})},
            {"allocator_settings", D({{"expandable_segments", Bool(true)}, {"max_split_size", I(-1)}})}});
}

// Ops of a trace as short strings: "m ID SIZE @S", "f ID @S".
std::vector<std::string> ops_of(const vtrace::Trace& t) {
  std::vector<std::string> out;
  for (const vtrace::TraceOp& op : t.ops) {
    std::string id = op.id < t.ids.size() ? t.ids[op.id] : "?";
    id = id.substr(0, id.find('#'));  // the address; the serial is checked apart
    if (op.kind == vtrace::OpKind::kMalloc)
      out.push_back("m " + id + " " + std::to_string(op.size) + " @" + std::to_string(op.stream) + " l" +
                    std::to_string(op.line));
    else if (op.kind == vtrace::OpKind::kFree)
      out.push_back("f " + id + " @" + std::to_string(op.stream) + " l" + std::to_string(op.line));
    else
      out.push_back("sync");
  }
  return out;
}

std::string hex(int64_t v) {
  char b[32];
  std::snprintf(b, sizeof b, "0x%llx", static_cast<unsigned long long>(v));
  return b;
}

// The invariants trace.hpp promises of a parsed trace; "" when they hold.
std::string trace_problem(const vtrace::Trace& t) {
  std::vector<bool> live(t.ids.size(), false);
  std::set<std::string> names(t.ids.begin(), t.ids.end());
  if (names.size() != t.ids.size()) return "two IDs with the same name";
  for (size_t k = 0; k < t.ops.size(); ++k) {
    const vtrace::TraceOp& op = t.ops[k];
    if (op.kind == vtrace::OpKind::kSync) return "a sync";
    if (op.id >= t.ids.size()) return "op " + std::to_string(k) + ": id out of range";
    if (op.stream < 0 || op.stream >= vtrace::kMaxStreams) return "op " + std::to_string(k) + ": stream";
    if (op.kind == vtrace::OpKind::kMalloc) {
      if (live[op.id]) return "op " + std::to_string(k) + ": malloc of a live id";
      if (op.size == 0 || op.in_pages) return "op " + std::to_string(k) + ": size";
      live[op.id] = true;
    } else {
      if (!live[op.id]) return "op " + std::to_string(k) + ": free of an id not live";
      live[op.id] = false;
    }
  }
  return "";
}

bool convert(const std::string& data, vtrace::Trace* t, vtrace::SnapshotFacts* f, std::string* err,
             int device = -1) {
  vtrace::SnapshotOptions o;
  o.device = device;
  return vtrace::parse_snapshot(bytes(data), data.size(), "s.pickle", o, t, f, err);
}

}  // namespace

// ---------------------------------------------------------------------------
// The value model, against CPython's own pickles
// ---------------------------------------------------------------------------

// pickle.dumps(plain, protocol=P) of
//   {'ints': [0, 1, -1, 255, 256, 65535, 65536, -2**31, 2**31, 2**63-1, -2**63],
//    'f': [1.5, -0.25], 'none': None, 't': True, 'fa': False, 's': 'café',
//    'tup': ((), (1,), (1, 2), (1, 2, 3), (1, 2, 3, 4)), 'shared': [l, l]}
// with l = [1, 2], by CPython 3.11.
const std::string kPlainP0 = B(
    "(dp0\x0aVints\x0ap1\x0a(lp2\x0aI0\x0a\x61I1\x0a\x61I-1\x0a\x61I255\x0a"
    "\x61I256\x0a\x61I65535\x0a\x61I65536\x0a\x61I-2147483648\x0a\x61L21474836"
    "48L\x0a\x61L9223372036854775807L\x0a\x61L-9223372036854775808L\x0a\x61sVf"
    "\x0ap3\x0a(lp4\x0a\x46\x31.5\x0a\x61\x46-0.25\x0a\x61sVnone\x0ap5\x0aNsVt"
    "\x0ap6\x0aI01\x0asVfa\x0ap7\x0aI00\x0asVs\x0ap8\x0aVcaf\xe9\x0ap9\x0asVtu"
    "p\x0ap10\x0a((t(I1\x0atp11\x0a(I1\x0aI2\x0atp12\x0a(I1\x0aI2\x0aI3\x0atp1"
    "3\x0a(I1\x0aI2\x0aI3\x0aI4\x0atp14\x0atp15\x0asVshared\x0ap16\x0a(lp17"
    "\x0a(lp18\x0aI1\x0a\x61I2\x0a\x61\x61g18\x0a\x61s.");
const std::string kPlainP2 = B(
    "\x80\x02}q\x00(X\x04\x00\x00\x00intsq\x01]q\x02(K\x00K\x01J\xff\xff\xff"
    "\xffK\xffM\x00\x01M\xff\xffJ\x00\x00\x01\x00J\x00\x00\x00\x80\x8a\x05\x00"
    "\x00\x00\x80\x00\x8a\x08\xff\xff\xff\xff\xff\xff\xff\x7f\x8a\x08\x00\x00"
    "\x00\x00\x00\x00\x00\x80\x65X\x01\x00\x00\x00\x66q\x03]q\x04(G\x3f\xf8"
    "\x00\x00\x00\x00\x00\x00G\xbf\xd0\x00\x00\x00\x00\x00\x00\x65X\x04\x00"
    "\x00\x00noneq\x05NX\x01\x00\x00\x00tq\x06\x88X\x02\x00\x00\x00\x66\x61q"
    "\x07\x89X\x01\x00\x00\x00sq\x08X\x05\x00\x00\x00\x63\x61\x66\xc3\xa9q\x09"
    "X\x03\x00\x00\x00tupq\x0a()K\x01\x85q\x0bK\x01K\x02\x86q\x0cK\x01K\x02K"
    "\x03\x87q\x0d(K\x01K\x02K\x03K\x04tq\x0etq\x0fX\x06\x00\x00\x00sharedq"
    "\x10]q\x11(]q\x12(K\x01K\x02\x65h\x12\x65u.");
const std::string kPlainP4 = B(
    "\x80\x04\x95\xbd\x00\x00\x00\x00\x00\x00\x00}\x94(\x8c\x04ints\x94]\x94(K"
    "\x00K\x01J\xff\xff\xff\xffK\xffM\x00\x01M\xff\xffJ\x00\x00\x01\x00J\x00"
    "\x00\x00\x80\x8a\x05\x00\x00\x00\x80\x00\x8a\x08\xff\xff\xff\xff\xff\xff"
    "\xff\x7f\x8a\x08\x00\x00\x00\x00\x00\x00\x00\x80\x65\x8c\x01\x66\x94]\x94"
    "(G\x3f\xf8\x00\x00\x00\x00\x00\x00G\xbf\xd0\x00\x00\x00\x00\x00\x00\x65"
    "\x8c\x04none\x94N\x8c\x01t\x94\x88\x8c\x02\x66\x61\x94\x89\x8c\x01s\x94"
    "\x8c\x05\x63\x61\x66\xc3\xa9\x94\x8c\x03tup\x94()K\x01\x85\x94K\x01K\x02"
    "\x86\x94K\x01K\x02K\x03\x87\x94(K\x01K\x02K\x03K\x04t\x94t\x94\x8c\x06sha"
    "red\x94]\x94(]\x94(K\x01K\x02\x65h\x12\x65u.");
const std::string kPlainRepr =
    "{'ints': [0, 1, -1, 255, 256, 65535, 65536, -2147483648, 2147483648, 9223372036854775807, "
    "-9223372036854775808], 'f': [1.5, -0.25], 'none': None, 't': True, 'fa': False, "
    "'s': 'caf\xc3\xa9', 'tup': ((), (1,), (1, 2), (1, 2, 3), (1, 2, 3, 4)), 'shared': [[1, 2], [1, 2]]}";

// pickle.dumps(odd, protocol=P) of
//   {'big': [2**64, -2**70], 'bytes': b'xy', 'ba': bytearray(b'z'), 'set': {7},
//    'fs': frozenset([8]), 'enum': Color.RED, 'od': OrderedDict(a=1), 'pt': Point()}
// with Color an enum.Enum and Point a class setting x = 1, y = 2 in __init__.
const std::string kOddP2 = B(
    "\x80\x02}q\x00(X\x03\x00\x00\x00\x62igq\x01]q\x02(\x8a\x09\x00\x00\x00"
    "\x00\x00\x00\x00\x00\x01\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x00\xc0\x65X"
    "\x05\x00\x00\x00\x62ytesq\x03\x63_codecs\x0a\x65ncode\x0aq\x04X\x02\x00"
    "\x00\x00xyq\x05X\x06\x00\x00\x00latin1q\x06\x86q\x07Rq\x08X\x02\x00\x00"
    "\x00\x62\x61q\x09\x63__builtin__\x0a\x62ytearray\x0aq\x0ah\x04X\x01\x00"
    "\x00\x00zq\x0bh\x06\x86q\x0cRq\x0d\x85q\x0eRq\x0fX\x03\x00\x00\x00setq"
    "\x10\x63__builtin__\x0aset\x0aq\x11]q\x12K\x07\x61\x85q\x13Rq\x14X\x02"
    "\x00\x00\x00\x66sq\x15\x63__builtin__\x0a\x66rozenset\x0aq\x16]q\x17K\x08"
    "\x61\x85q\x18Rq\x19X\x04\x00\x00\x00\x65numq\x1a\x63__main__\x0a\x43olor"
    "\x0aq\x1bK\x01\x85q\x1cRq\x1dX\x02\x00\x00\x00odq\x1e\x63\x63ollections"
    "\x0aOrderedDict\x0aq\x1f)Rq X\x01\x00\x00\x00\x61q!K\x01sX\x02\x00\x00"
    "\x00ptq\x22\x63__main__\x0aPoint\x0aq#)\x81q$}q%(X\x01\x00\x00\x00xq&K"
    "\x01X\x01\x00\x00\x00yq'K\x02ubu.");
const std::string kOddP5 = B(
    "\x80\x05\x95\xcc\x00\x00\x00\x00\x00\x00\x00}\x94(\x8c\x03\x62ig\x94]\x94"
    "(\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x00\x01\x8a\x09\x00\x00\x00\x00\x00"
    "\x00\x00\x00\xc0\x65\x8c\x05\x62ytes\x94\x43\x02xy\x94\x8c\x02\x62\x61"
    "\x94\x96\x01\x00\x00\x00\x00\x00\x00\x00z\x94\x8c\x03set\x94\x8f\x94(K"
    "\x07\x90\x8c\x02\x66s\x94(K\x08\x91\x94\x8c\x04\x65num\x94\x8c\x08__main_"
    "_\x94\x8c\x05\x43olor\x94\x93\x94K\x01\x85\x94R\x94\x8c\x02od\x94\x8c\x0b"
    "\x63ollections\x94\x8c\x0bOrderedDict\x94\x93\x94)R\x94\x8c\x01\x61\x94K"
    "\x01s\x8c\x02pt\x94h\x0c\x8c\x05Point\x94\x93\x94)\x81\x94}\x94(\x8c\x01x"
    "\x94K\x01\x8c\x01y\x94K\x02ubu.");

TEST("pickle: CPython's protocols 0, 2, 4 and 5 read as the same values") {
  CHECK_EQ(repr_of(kPlainP0), kPlainRepr);
  CHECK_EQ(repr_of(kPlainP2), kPlainRepr);
  CHECK_EQ(repr_of(kPlainP4), kPlainRepr);
  std::string p5 = kPlainP4;
  p5[1] = 5;  // CPython writes these values identically under protocol 5
  CHECK_EQ(repr_of(p5), kPlainRepr);
  vpickle::Document doc;
  std::string err;
  CHECK(parse(kPlainP4, &doc, &err));
  CHECK_EQ(doc.protocol(), 4);
  CHECK_EQ(doc.consumed(), kPlainP4.size());
  const Value& root = doc.root();
  CHECK(root.is(Kind::kDict));
  CHECK_EQ(root.size(), size_t(8));
  Value ints, s, t, missing;
  CHECK(root.find("ints", &ints));
  CHECK(ints.is(Kind::kList));
  CHECK_EQ(ints.items().size(), size_t(11));
  if (ints.items().size() == 11) {
    CHECK_EQ(ints.items()[2].as_int(), int64_t(-1));
    CHECK_EQ(ints.items()[9].as_int(), INT64_MAX);
    CHECK_EQ(ints.items()[10].as_int(), INT64_MIN);
  }
  CHECK(root.find("s", &s));
  CHECK(s.is(Kind::kStr));
  CHECK_EQ(s.as_str(), std::string("caf\xc3\xa9"));
  CHECK(root.find("t", &t));
  CHECK(t.is(Kind::kBool) && t.as_bool());
  CHECK(!root.find("absent", &missing));
  CHECK(!ints.find("ints", &missing));  // find on a list: false
  // Accessors of the wrong kind answer empty, never crash.
  CHECK_EQ(ints.as_int(), int64_t(0));
  CHECK_EQ(ints.as_str(), std::string(""));
  CHECK(s.items().empty());
  CHECK(s.entries().empty());
  CHECK(s.object() == nullptr);
}

TEST("pickle: memo GET shares the container (no copy), cycles are fine") {
  vpickle::Document doc;
  std::string err;
  CHECK(parse(kPlainP2, &doc, &err));
  Value shared;
  CHECK(doc.root().find("shared", &shared));
  CHECK_EQ(shared.items().size(), size_t(2));
  if (shared.items().size() == 2) CHECK(&shared.items()[0].items() == &shared.items()[1].items());
  // l = []; l.append(l): a list holding itself (protocol 2).
  vpickle::Document cyc;
  CHECK(parse(B("\x80\x02]q\x00h\x00\x61."), &cyc, &err));
  const Value& l = cyc.root();
  CHECK_EQ(l.items().size(), size_t(1));
  if (l.items().size() == 1) CHECK(&l.items()[0].items() == &l.items());
  CHECK_EQ(vpickle::describe(l, 3), std::string("[[[[...]]]]"));
  // The Document moves without moving its values.
  vpickle::Document moved = std::move(cyc);
  CHECK_EQ(vpickle::describe(moved.root(), 2), std::string("[[[...]]]"));
}

TEST("pickle: classes, enums, bytes, sets and big ints become opaque objects or plain values") {
  CHECK_EQ(repr_of(kOddP2),
           "{'big': [<int>, <int>], 'bytes': <_codecs.encode>, 'ba': <__builtin__.bytearray>, "
           "'set': <__builtin__.set>, 'fs': <__builtin__.frozenset>, 'enum': <__main__.Color>, "
           "'od': <collections.OrderedDict>, 'pt': <__main__.Point>}");
  CHECK_EQ(repr_of(kOddP5),
           "{'big': [<int>, <int>], 'bytes': b'xy', 'ba': b'z', 'set': {7}, 'fs': {8}, "
           "'enum': <__main__.Color>, 'od': <collections.OrderedDict>, 'pt': <__main__.Point>}");
  vpickle::Document doc;
  std::string err;
  CHECK(parse(kOddP5, &doc, &err));
  Value od, pt, en;
  CHECK(doc.root().find("od", &od));
  CHECK(od.object() != nullptr);
  if (od.object()) {
    CHECK(!od.object()->is_class);
    CHECK_EQ(od.object()->entries.size(), size_t(1));  // SETITEM on the object: kept
  }
  CHECK(doc.root().find("pt", &pt));
  if (pt.object()) CHECK_EQ(vpickle::describe(pt.object()->state), std::string("{'x': 1, 'y': 2}"));
  CHECK(doc.root().find("enum", &en));
  if (en.object()) CHECK_EQ(vpickle::describe(en.object()->args), std::string("(1,)"));
}

TEST("pickle: every other opcode, hand-encoded") {
  const std::string kitchen = B(
      "\x80\x04("
      "S'a\\x41\\n\\'b'\n"            // STRING with escapes
      "U\x03" "abc"                   // SHORT_BINSTRING
      "T\x02\x00\x00\x00hi"           // BINSTRING
      "B\x01\x00\x00\x00\x00"         // BINBYTES
      "\x8d\x02\x00\x00\x00\x00\x00\x00\x00ok"  // BINUNICODE8
      "\x8e\x01\x00\x00\x00\x00\x00\x00\x00z"   // BINBYTES8
      "V\\u00e9\\U0001f600\\\\u0041\n"  // UNICODE: escapes; an even backslash run is literal
      "L123L\n"                       // LONG
      "L-99999999999999999999\n"      // LONG beyond int64: opaque
      "I-7\n"                         // INT
      "F-2.5\n"                       // FLOAT
      "\x8b\x02\x00\x00\x00\xff\xff"  // LONG4 -1
      "\x8a\x00"                      // LONG1 of no bytes: 0
      "\x82\x05"                      // EXT1
      "\x8f(K\x01K\x02\x90"           // EMPTY_SET, ADDITEMS
      "(K\x03\x91"                    // FROZENSET
      "(K\x04K\x05l"                  // LIST
      "(K\x06K\x07" "d"               // DICT
      "(K\x08t"                       // TUPLE
      "K\x2a" "2" "0"                 // DUP, POP: one 42
      "p7\ng7\n"                      // PUT, GET (text): a second 42
      "r\x00\x01\x00\x00j\x00\x01\x00\x00"  // LONG_BINPUT, LONG_BINGET: a third
      "(K\x09" "1"                    // POP_MARK: nothing
      "(K\x01i__main__\nThing\n"      // INST
      "(c__main__\nKls\nK\x02o"       // OBJ
      "\x8c\x03mod\x8c\x03" "cls\x93)}\x92}b"  // STACK_GLOBAL, NEWOBJ_EX, BUILD
      "l.");
  CHECK_EQ(repr_of(kitchen),
           "['aA\\x0a\\'b', 'abc', 'hi', b'\\x00', 'ok', b'z', '\xc3\xa9\xf0\x9f\x98\x80\\\\\\\\u0041', 123, "
           "<int>, -7, -2.5, -1, 0, <ext:5>, {1, 2}, {3}, [4, 5], {6: 7}, (8,), 42, 42, 42, "
           "<__main__.Thing>, <__main__.Kls>, <mod.cls>]");
  // protocol 0's bools and POP of an empty frame (pops the mark, as Python does).
  CHECK_EQ(repr_of(B("(I01\nI00\nl.")), std::string("[True, False]"));
  CHECK_EQ(repr_of(B("K\x01(0.")), std::string("1"));
}

TEST("pickle: malformed input fails with the offset of the opcode and what is wrong") {
  CHECK_EQ(error_of(B("\x80\x04X\x10\x00\x00\x00" "abc")),
           std::string("t.pickle: offset 2: truncated BINUNICODE (wants 16 bytes, 3 left)"));
  CHECK_EQ(error_of(B("\x80\x02\x61.")),
           std::string("t.pickle: offset 2: APPEND needs 2 values on the stack, there are 0"));
  CHECK_EQ(error_of(B("\x80\x02N(.")),
           std::string("t.pickle: offset 4: STOP needs 1 value on the stack, above the mark, there are 0"));
  CHECK_EQ(error_of(B("\x80\x02h\x05.")), std::string("t.pickle: offset 2: memo has no value at index 5"));
  CHECK_EQ(error_of(B("\x80\x06.")), std::string("t.pickle: offset 0: unsupported pickle protocol 6"));
  CHECK_EQ(error_of(""), std::string("t.pickle: offset 0: empty input: no pickle"));
  CHECK_EQ(error_of(B("\x80\x02N")), std::string("t.pickle: offset 3: truncated pickle: no STOP opcode"));
  CHECK_EQ(error_of(B("\x80\x02K\x01u.")), std::string("t.pickle: offset 4: SETITEMS without a MARK"));
  CHECK_EQ(error_of(B("\x80\x02}(K\x01u.")),
           std::string("t.pickle: offset 6: SETITEMS with an odd number of values"));
  CHECK_EQ(error_of(B("\x80\x02K\x01K\x02\x61.")), std::string("t.pickle: offset 6: APPEND to an int, not a list"));
  CHECK_EQ(error_of(B("\x80\x02]K\x01s.")), std::string("t.pickle: offset 5: SETITEM needs 3 values on the stack, there are 2"));
  CHECK_EQ(error_of(B("\x80\x02]N}b.")), std::string("t.pickle: offset 5: BUILD on None"));
  CHECK_EQ(error_of(B("\x80\x04K\x01K\x02\x93.")),
           std::string("t.pickle: offset 6: STACK_GLOBAL wants two str, got an int and an int"));
  CHECK_CONTAINS(error_of(B("\x80\x02Q.")), "offset 2: BINPERSID: persistent IDs are not supported");
  CHECK_CONTAINS(error_of(B("\x80\x05\x97.")), "offset 2: NEXT_BUFFER: out-of-band buffers are not supported");
  CHECK_CONTAINS(error_of(B("\x80\x02\x8b\xff\xff\xff\xff.")), "offset 2: LONG4 with a negative length");
  CHECK_CONTAINS(error_of(B("\x80\x02T\x00\x00\x00\x80.")), "offset 2: BINSTRING with a negative length");
  CHECK_CONTAINS(error_of(B("\x80\x04\x95\xff\x00\x00\x00\x00\x00\x00\x00N.")), "offset 2: truncated FRAME");
  CHECK_CONTAINS(error_of(B("\x80\x04\x8d\xff\xff\xff\xff\xff\xff\xff\xff")), "offset 2: truncated BINUNICODE8");
  CHECK_CONTAINS(error_of(B("Iabc\n.")), "offset 0: malformed INT argument");
  CHECK_CONTAINS(error_of(B("F1.5x\n.")), "offset 0: malformed FLOAT argument");
  CHECK_CONTAINS(error_of(B("Sabc\n.")), "offset 0: STRING argument is not quoted");
  CHECK_CONTAINS(error_of(B("S'a\\x4'\n.")), "invalid \\x escape");
  CHECK_CONTAINS(error_of(B("V\\u12\n.")), "truncated \\u escape");
  CHECK_CONTAINS(error_of(B("V\\U00110000\n.")), "above U+10FFFF");
  CHECK_CONTAINS(error_of(B("cmod\n")), "offset 0: truncated GLOBAL (no end of line)");
  CHECK_CONTAINS(error_of(B("\x80\x02(o.")), "offset 3: OBJ without a class");
  // Caps on the stack and on MARK nesting.
  vpickle::Limits small;
  small.max_stack = 100;
  small.max_marks = 10;
  CHECK_CONTAINS(error_of(std::string(11, '(') + ".", small), "offset 10: MARKs nested deeper than 10");
  CHECK_CONTAINS(error_of(std::string(101, 'N') + ".", small), "offset 100: stack exceeds 100 values");
  CHECK_EQ(error_of(std::string(10, '(') + "N.", small), std::string(""));
}

TEST("pickle: every unknown opcode is rejected with its offset") {
  int unknown = 0;
  for (int b = 0; b < 256; ++b) {
    if (vpickle::opcode_name(static_cast<uint8_t>(b))) continue;
    ++unknown;
    char want[96];
    std::snprintf(want, sizeof want, "t.pickle: offset 3: unknown opcode 0x%02x", b);
    std::string data = B("\x80\x04N");
    data += static_cast<char>(b);
    data += ".";
    CHECK_EQ(error_of(data), std::string(want));
  }
  CHECK_EQ(unknown, 256 - 68);  // 68 opcodes in protocols 0-5
}

TEST("pickle: every truncation of a valid pickle is an error, never a crash") {
  for (const std::string* full : {&kPlainP0, &kPlainP2, &kPlainP4, &kOddP2, &kOddP5}) {
    size_t errors = 0;
    for (size_t cut = 0; cut < full->size(); ++cut) {
      std::string e = error_of(full->substr(0, cut));
      if (starts_with(e, "t.pickle: offset ")) ++errors;
      else std::printf("  cut %zu of %zu: '%s'\n", cut, full->size(), e.c_str());
    }
    CHECK_EQ(errors, full->size());
  }
}

// ---------------------------------------------------------------------------
// The pickler of this file against the reader
// ---------------------------------------------------------------------------

TEST("pickler: protocols 2 and 4 (FRAME, MEMOIZE, batches past 1000) read back") {
  std::vector<Py> many;
  for (int k = 0; k < 2500; ++k) many.push_back(I(k * 1000003LL - 7));
  std::vector<std::pair<std::string, Py>> kv;
  for (int k = 0; k < 1200; ++k) kv.push_back({"key" + std::to_string(k % 300), I(k)});
  Py v = D({{"many", L(many)}, {"kv", D(kv)}, {"neg", L({I(-1), I(-255), I(-256), I(-65536), I(INT64_MIN),
                                                          I(1LL << 40), I(-(1LL << 40)), I(INT32_MIN)})},
            {"t", T({I(1), T({}), T({S("key0"), S("key0")}), T({None(), Bool(true), Bool(false), I(2)})})}});
  for (int proto : {2, 4}) {
    std::string data = Pickler(proto).dump(v);
    vpickle::Document doc;
    std::string err;
    CHECK(parse(data, &doc, &err));
    if (!err.empty()) std::printf("  %s\n", err.c_str());
    Value m, d, n, t;
    CHECK(doc.root().find("many", &m));
    CHECK_EQ(m.items().size(), size_t(2500));
    if (m.items().size() == 2500) CHECK_EQ(m.items()[2499].as_int(), int64_t(2499 * 1000003LL - 7));
    CHECK(doc.root().find("kv", &d));
    CHECK_EQ(d.entries().size(), size_t(1200));  // a key set twice appears twice ...
    Value last;
    CHECK(d.find("key0", &last));
    CHECK_EQ(last.as_int(), int64_t(1200 - 300));  // ... and find() gives the later value, as Python
    CHECK(doc.root().find("neg", &n));
    CHECK_EQ(vpickle::describe(n, 2, 20),
             std::string("[-1, -255, -256, -65536, -9223372036854775808, 1099511627776, -1099511627776, "
                         "-2147483648]"));
    CHECK(doc.root().find("t", &t));
    CHECK_EQ(vpickle::describe(t), std::string("(1, (), ('key0', 'key0'), (None, True, False, 2))"));
  }
}

// ---------------------------------------------------------------------------
// Snapshots
// ---------------------------------------------------------------------------

TEST("snapshot: the rules, op by op (protocols 2 and 4)") {
  for (int proto : {2, 4}) {
    vtrace::Trace t;
    vtrace::SnapshotFacts f;
    std::string err;
    CHECK(convert(Pickler(proto).dump(scenario()), &t, &f, &err));
    CHECK_EQ(err, std::string(""));
    CHECK_OPS(t, {
        // pre-live: discovered from frees in event order, then from the segments
        "m " + hex(P) + " 4096 @0 l5",
        "m " + hex(Q) + " 8192 @2 l7",
        "m " + hex(A + 2048) + " 4000 @0 l0",
        "m " + hex(0x7f0004000000) + " 1572864 @2 l0",
        // the events
        "m " + hex(A) + " 1000 @0 l2",
        "m " + hex(Bk) + " 3145728 @1 l3",
        "f " + hex(Bk) + " @1 l4",
        "f " + hex(P) + " @0 l5",
        "f " + hex(Q) + " @2 l7",
        "f " + hex(A) + " @0 l8",  // the repair
        "m " + hex(A) + " 2048 @0 l8",
        "m " + hex(C) + " 5242880 @1 l13",
        "f " + hex(C) + " @1 l14",
    });
    CHECK_EQ(trace_problem(t), std::string(""));
    // A fresh ID per allocation: A's two allocations are two IDs.
    CHECK(t.ops.size() == 13 && t.ops[4].id != t.ops[10].id);
    CHECK_EQ(t.ids.size(), size_t(8));
    CHECK_EQ(t.name, std::string("s.pickle"));
    CHECK_EQ(f.device, 0);
    CHECK_EQ(f.devices, size_t(2));
    CHECK_EQ(f.events, uint64_t(17));
    CHECK_EQ(f.allocs, uint64_t(4));
    CHECK_EQ(f.frees, uint64_t(5));
    CHECK_EQ(f.prelive_from_frees, uint64_t(2));
    CHECK_EQ(f.prelive_from_segments, uint64_t(2));
    CHECK_EQ(f.prelive_bytes, uint64_t(4096 + 8192 + 4000 + 1572864));
    CHECK_EQ(f.repairs, uint64_t(2));
    CHECK_EQ(f.ignored, uint64_t(1));
    CHECK_EQ(f.ooms, uint64_t(1));
    CHECK(f.stream_handles == std::vector<int64_t>({0, kStreamS, kStreamT}));
    // Reserved: 22M at dump, +20M net over the trace: 2M at the start; the
    // highest point is after the segment_map: 2M + 22M.
    CHECK_EQ(f.segments, uint64_t(2));
    CHECK_EQ(f.reserved_at_dump, uint64_t(22 * MiB));
    CHECK_EQ(f.reserved_at_start, uint64_t(2 * MiB));
    CHECK(!f.reserved_clamped);
    CHECK_EQ(f.reserved_peak, uint64_t(24 * MiB));
    // Allocated: the pre-live bytes, then the most the events add (at event
    // 13: -10240 net so far + 5 MiB).
    CHECK_EQ(f.allocated_peak, uint64_t(4096 + 8192 + 4000 + 1572864) + uint64_t(5 * MiB - 10240));
    vtrace::TraceSummary sum;
    CHECK(vtrace::summarize_trace(t.ops, 4096, &sum, &err));
    CHECK_EQ(sum.peak_requested, f.allocated_peak);  // the replay's peak requested is the same figure
  }
}

TEST("snapshot: --device picks another device; a device that is not there is an error") {
  std::string data = Pickler(4).dump(scenario());
  vtrace::Trace t;
  vtrace::SnapshotFacts f;
  std::string err;
  CHECK(convert(data, &t, &f, &err, 1));
  CHECK_EQ(f.device, 1);
  CHECK_EQ(f.events, uint64_t(2));
  CHECK_EQ(f.segments, uint64_t(1));
  CHECK_EQ(f.reserved_at_dump, uint64_t(100 * MiB));
  CHECK_OPS(t, {"m 0x7e0000000000 100 @0 l1", "f 0x7e0000000000 @0 l2"});
  CHECK(!convert(data, &t, &f, &err, 5));
  CHECK_EQ(err, std::string("s.pickle: no device 5 in the snapshot ('device_traces' has 2 entries and no "
                            "segment is on that device)"));
}

TEST("snapshot: segments alone (torch.cuda.memory_snapshot()) and old blocks without an address") {
  // A list of segments; blocks of PyTorch < 2.1 have no 'address': the
  // running offset from the segment's start stands in.
  Py seg = D({{"device", I(0)}, {"address", I(0x1000000)}, {"total_size", I(8 * MiB)}, {"stream", I(0)},
              {"blocks", L({D({{"size", I(MiB)}, {"state", S("inactive")}}),
                            D({{"size", I(2 * MiB)}, {"requested_size", I(2 * MiB - 100)},
                               {"state", S("active_allocated")}})})}});
  vtrace::Trace t;
  vtrace::SnapshotFacts f;
  std::string err;
  CHECK(convert(Pickler(2).dump(L({seg})), &t, &f, &err));
  CHECK_EQ(err, std::string(""));
  CHECK_OPS(t, {"m 0x1100000 2097052 @0 l0"});
  CHECK_EQ(f.reserved_peak, uint64_t(8 * MiB));
  CHECK_EQ(f.allocated_peak, uint64_t(2 * MiB - 100));
  CHECK_EQ(f.devices, size_t(0));
}

TEST("snapshot: the reserved start clamps at 0 when the events exceed the dump") {
  Py snap = D({{"segments", L({})},
               {"device_traces", L({L({event("segment_alloc", 0x1000, 4 * MiB, 0),
                                       event("segment_free", 0x1000, 4 * MiB, 0),
                                       event("segment_alloc", 0x2000, 6 * MiB, 0)})})}});
  vtrace::Trace t;
  vtrace::SnapshotFacts f;
  std::string err;
  CHECK(convert(Pickler(4).dump(snap), &t, &f, &err));
  CHECK(f.reserved_clamped);
  CHECK_EQ(f.reserved_at_start, uint64_t(0));
  CHECK_EQ(f.reserved_peak, uint64_t(6 * MiB));
  CHECK(t.ops.empty());
}

TEST("snapshot: what is not a snapshot, and malformed fields, name where") {
  vtrace::Trace t;
  t.name = "keep";
  vtrace::SnapshotFacts f;
  std::string err;
  // A text file (a note saved as .pickle.gz): its first line, not what 't'
  // would mean as an opcode.
  CHECK(!convert("this is a note\nsaved with the wrong name\n", &t, &f, &err));
  CHECK_EQ(err, std::string("s.pickle: not a PyTorch memory snapshot: it holds text \"this is a note...\", not a "
                            "pickle (a snapshot is the file torch.cuda.memory._dump_snapshot writes; the pickle "
                            "reader says: offset 0: TUPLE without a MARK)"));
  // Random bytes without PROTO: the first eight in hex.
  CHECK(!convert(B("\xb1\xf0\x62\x13\x55\xf6\x48\x8a\x01\x02"), &t, &f, &err));
  CHECK_CONTAINS(err, "not a PyTorch memory snapshot: it holds bytes b1 f0 62 13 55 f6 48 8a, not a pickle");
  // A pickle with PROTO keeps the reader's own message.
  CHECK(!convert(B("\x80\x04junk"), &t, &f, &err));
  CHECK_EQ(err, std::string("s.pickle: offset 2: truncated LONG_BINGET (wants 4 bytes, 3 left)"));
  CHECK(!convert(B("\x80\x04K\x05."), &t, &f, &err));
  CHECK_EQ(err, std::string("s.pickle: not a PyTorch memory snapshot: the pickle holds an int, want a dict "
                            "with 'segments' and 'device_traces'"));
  CHECK(!convert(Pickler(4).dump(D({{"x", I(1)}})), &t, &f, &err));
  CHECK_CONTAINS(err, "not a PyTorch memory snapshot: a dict without 'segments' or 'device_traces'");
  auto with_events = [](std::vector<Py> ev) {
    return Pickler(4).dump(D({{"segments", L({})}, {"device_traces", L({L(std::move(ev))})}}));
  };
  CHECK(!convert(with_events({event("alloc", 1, 1, 0), D({{"action", S("alloc")}, {"addr", I(2)},
                                                          {"size", S("big")}})}),
                 &t, &f, &err));
  CHECK_EQ(err, std::string("s.pickle: device_traces[0][1]: 'size' is a str, want an int"));
  CHECK(!convert(with_events({D({{"action", S("free_requested")}, {"size", I(4)}})}), &t, &f, &err));
  CHECK_EQ(err, std::string("s.pickle: device_traces[0][0]: no 'addr'"));
  CHECK(!convert(with_events({event("alloc", 1, -5, 0)}), &t, &f, &err));
  CHECK_EQ(err, std::string("s.pickle: device_traces[0][0]: 'size' is negative (-5)"));
  CHECK(!convert(with_events({I(3)}), &t, &f, &err));
  CHECK_EQ(err, std::string("s.pickle: device_traces[0][0]: is an int, want a dict"));
  CHECK(!convert(with_events({D({{"addr", I(1)}})}), &t, &f, &err));
  CHECK_EQ(err, std::string("s.pickle: device_traces[0][0]: no 'action'"));
  CHECK(!convert(Pickler(4).dump(D({{"segments", L({D({{"device", I(0)}, {"total_size", I(1)},
                                                        {"blocks", L({D({{"size", I(1)}})})}})})}})),
                 &t, &f, &err));
  CHECK_EQ(err, std::string("s.pickle: segments[0][0]: no 'address' in the block or its segment"));
  CHECK(!convert(Pickler(4).dump(D({{"device_traces", I(0)}})), &t, &f, &err));
  CHECK_EQ(err, std::string("s.pickle: 'device_traces' is an int, want a list"));
  // A big int where an address belongs.
  std::string big = B("\x80\x02}(X\x0d\x00\x00\x00" "device_traces]]}(X\x06\x00\x00\x00" "actionX\x05\x00\x00\x00"
                      "allocX\x04\x00\x00\x00" "addr\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x00\x01"
                      "X\x04\x00\x00\x00sizeK\x01u\x61\x61u.");
  CHECK(!convert(big, &t, &f, &err));
  CHECK_EQ(err, std::string("s.pickle: device_traces[0][0]: 'addr' is an int beyond 64 bits, want an int"));
  CHECK_EQ(t.name, std::string("keep"));  // untouched on failure
  CHECK(t.ops.empty());
}

TEST("snapshot: opaque objects in fields nobody reads do not matter") {
  // 'allocator_settings' holding an enum (GLOBAL + REDUCE) and an event
  // whose 'user_metadata' is an object: the snapshot still converts.
  std::string data = B("\x80\x02}(X\x12\x00\x00\x00" "allocator_settings" "c__main__\nColor\nK\x01\x85R"
                       "X\x0d\x00\x00\x00" "device_traces]]}(X\x06\x00\x00\x00" "actionX\x05\x00\x00\x00"
                       "allocX\x04\x00\x00\x00" "addrK\x10X\x04\x00\x00\x00" "sizeK\x20X\x0d\x00\x00\x00"
                       "user_metadatac__main__\nMeta\n)\x81}b" "u\x61\x61u.");
  vtrace::Trace t;
  vtrace::SnapshotFacts f;
  std::string err;
  CHECK(convert(data, &t, &f, &err));
  CHECK_EQ(err, std::string(""));
  CHECK_OPS(t, {"m 0x10 32 @0 l1"});
}

TEST("snapshot: more streams than the replay allows is an error") {
  std::vector<Py> ev;
  for (int k = 1; k <= vtrace::kMaxStreams; ++k) ev.push_back(event("alloc", k * 4096, 10, 0x1000 + k));
  vtrace::Trace t;
  vtrace::SnapshotFacts f;
  std::string err;
  CHECK(!convert(Pickler(4).dump(D({{"device_traces", L({L(ev)})}})), &t, &f, &err));
  CHECK_EQ(err, std::string("s.pickle: device_traces[0][1023]: more than 1023 distinct streams"));
  ev.pop_back();
  CHECK(convert(Pickler(4).dump(D({{"device_traces", L({L(ev)})}})), &t, &f, &err));
  CHECK_EQ(f.stream_handles.size(), size_t(vtrace::kMaxStreams));
}

TEST("snapshot: every truncation fails with a message; random corruption never crashes") {
  const std::string full[2] = {Pickler(2).dump(scenario()), Pickler(4, 200).dump(scenario())};
  for (const std::string& data : full) {
    size_t errors = 0;
    for (size_t cut = 0; cut < data.size(); ++cut) {
      vtrace::Trace t;
      vtrace::SnapshotFacts f;
      std::string err;
      if (!convert(data.substr(0, cut), &t, &f, &err) && starts_with(err, "s.pickle: ")) ++errors;
      else std::printf("  cut %zu: '%s'\n", cut, err.c_str());
    }
    CHECK_EQ(errors, data.size());
  }
  // Flip, overwrite, duplicate or drop a few bytes at random: whatever
  // parses must still be a valid trace (and replay), the rest an error.
  uint64_t x = 0x9e3779b97f4a7c15ull;
  auto next = [&x]() {
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    return x * 0x2545f4914f6cdd1dull;
  };
  size_t ok = 0, failed = 0;
  for (int round = 0; round < 6000; ++round) {
    std::string d = full[round % 2];
    int edits = 1 + static_cast<int>(next() % 4);
    for (int e = 0; e < edits && !d.empty(); ++e) {
      size_t at = next() % d.size();
      switch (next() % 4) {
        case 0: d[at] = static_cast<char>(d[at] ^ (1u << (next() % 8))); break;
        case 1: d[at] = static_cast<char>(next()); break;
        case 2: d.insert(at, 1, d[at]); break;
        default: d.erase(at, 1); break;
      }
    }
    vtrace::Trace t;
    vtrace::SnapshotFacts f;
    std::string err;
    if (convert(d, &t, &f, &err)) {
      ++ok;
      std::string problem = trace_problem(t);
      CHECK_EQ(problem, std::string(""));
      vtrace::ReplayHooks h;
      uintptr_t next_ptr = 0x1000;
      h.malloc = [&](const vtrace::TraceOp&, uint64_t, void** p, std::string*) {
        *p = reinterpret_cast<void*>(next_ptr += 16);
        return true;
      };
      h.free = [](const vtrace::TraceOp&, void*, uint64_t, std::string*) { return true; };
      h.sync = [](int, std::string*) { return true; };
      vtrace::ReplayResult r;
      CHECK(vtrace::replay_trace(t.ops, 4096, h, &r, &err, "s.pickle"));
    } else {
      ++failed;
      CHECK(starts_with(err, "s.pickle: "));
    }
  }
  std::printf("  corrupted snapshots: %zu converted, %zu rejected\n", ok, failed);
  CHECK(failed > 0);
}

TEST("snapshot: gzip-compressed files read the same (or say zlib is missing)") {
  std::string raw = Pickler(4).dump(scenario());
  vtrace::Trace plain_t, t;
  vtrace::SnapshotFacts plain_f, f;
  std::string err;
  CHECK(convert(raw, &plain_t, &plain_f, &err));
#ifdef VPMM_HAVE_ZLIB
  CHECK(vtrace::have_zlib());
  // Two gzip members, as `cat a.gz b.gz` makes: one stream to gunzip.
  auto gzip = [](const std::string& in) {
    z_stream z;
    std::memset(&z, 0, sizeof z);
    deflateInit2(&z, 9, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY);
    std::string out(deflateBound(&z, in.size()) + 64, '\0');
    z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
    z.avail_in = static_cast<uInt>(in.size());
    z.next_out = reinterpret_cast<Bytef*>(&out[0]);
    z.avail_out = static_cast<uInt>(out.size());
    deflate(&z, Z_FINISH);
    out.resize(z.total_out);
    deflateEnd(&z);
    return out;
  };
  std::string gz = gzip(raw.substr(0, 100)) + gzip(raw.substr(100));
  CHECK(convert(gz, &t, &f, &err));
  CHECK_EQ(err, std::string(""));
  CHECK(ops_of(t) == ops_of(plain_t));
  CHECK_EQ(f.reserved_peak, plain_f.reserved_peak);
  CHECK(!convert(gz.substr(0, gz.size() - 9), &t, &f, &err));
  CHECK_EQ(err, std::string("s.pickle: truncated gzip data"));
  CHECK(!convert(gz + "junk", &t, &f, &err));
  CHECK_CONTAINS(err, "trailing bytes after the gzip data");
  std::string bad = gz;
  bad[20] = static_cast<char>(bad[20] ^ 0x55);
  CHECK(!convert(bad, &t, &f, &err));
  CHECK(starts_with(err, "s.pickle: "));
  for (size_t cut = 0; cut < gz.size(); cut += 7) CHECK(!convert(gz.substr(0, cut), &t, &f, &err));
  // gzip data that is not a pickle says so, quoting its start (the pickle
  // reader's "unknown opcode 0x6e" for "not ..." follows in parentheses).
  CHECK(!convert(gzip("not a pickle either\n"), &t, &f, &err));
  CHECK_EQ(err, std::string("s.pickle: not a PyTorch memory snapshot: it holds gzip data of text \"not a pickle "
                            "either...\", not a pickle (a snapshot is the file torch.cuda.memory._dump_snapshot "
                            "writes; the pickle reader says: offset 0: unknown opcode 0x6e)"));
#else
  CHECK(!vtrace::have_zlib());
  CHECK(!convert(B("\x1f\x8b\x08\x00"), &t, &f, &err));
  CHECK_CONTAINS(err, "built without zlib: gunzip it first");
#endif
}

TEST("snapshot: files: detection by content or name, load errors") {
  const std::string path = "test_snapshot_tmp.bin";
  auto write = [&](const std::string& data) {
    std::FILE* fp = std::fopen(path.c_str(), "wb");
    if (!fp) return false;
    std::fwrite(data.data(), 1, data.size(), fp);
    return std::fclose(fp) == 0;
  };
  std::string data = Pickler(4).dump(scenario());
  CHECK(write(data));
  CHECK(vtrace::is_snapshot_file(path));
  vtrace::Trace t;
  vtrace::SnapshotFacts f;
  std::string err;
  CHECK(vtrace::load_snapshot(path, vtrace::SnapshotOptions(), &t, &f, &err));
  CHECK_EQ(t.ops.size(), size_t(13));
  CHECK(write("malloc a 1M\nfree a\n"));
  CHECK(!vtrace::is_snapshot_file(path));
  CHECK(write(B("\x1f\x8b")));
  CHECK(vtrace::is_snapshot_file(path));
  CHECK(write(""));
  CHECK(!vtrace::is_snapshot_file(path));
  CHECK(!vtrace::load_snapshot(path, vtrace::SnapshotOptions(), &t, &f, &err));
  CHECK_EQ(err, path + ": offset 0: empty input: no pickle");
  std::remove(path.c_str());
  CHECK(!vtrace::is_snapshot_file("/nonexistent/x.pickle"));
  CHECK(!vtrace::load_snapshot("/nonexistent/x.pickle", vtrace::SnapshotOptions(), &t, &f, &err));
  CHECK_EQ(err, std::string("/nonexistent/x.pickle: cannot open: No such file or directory"));  // the reason, strerror(errno)
  CHECK(vtrace::looks_like_snapshot(bytes(data), data.size()));
  CHECK(!vtrace::looks_like_snapshot(bytes(data), 0));
}

// ---------------------------------------------------------------------------
// Resource limits: small inputs that cost a lot. Each must end fast, in
// bounded memory, converted or refused with a message.
// ---------------------------------------------------------------------------

namespace {

std::string le_n(uint64_t v, int n) {
  std::string s;
  for (int k = 0; k < n; ++k) s += static_cast<char>((v >> (8 * k)) & 0xff);
  return s;
}

// A hand-made protocol 2 pickle: memo GETs list one container many times
// for five bytes each, which CPython's pickler does only for shared objects.
struct Raw {
  std::string b = B("\x80\x02");
  uint32_t next = 0;
  std::map<std::string, uint32_t> strs;

  uint32_t put() {
    b += "r" + le_n(next, 4);
    return next++;
  }
  void get(uint32_t i) { b += "j" + le_n(i, 4); }
  void str(const std::string& s) {  // memoized, as a pickler writes keys
    auto it = strs.find(s);
    if (it != strs.end()) return get(it->second);
    b += "X" + le_n(s.size(), 4) + s;
    strs[s] = put();
  }
  void integer(int64_t v) { b += B("\x8a\x08") + le_n(static_cast<uint64_t>(v), 8); }
};

}  // namespace

TEST("limits: memo indices that double at every PUT stay a map (105 bytes, no 64 GiB vector)") {
  // Each LONG_BINPUT is as far beyond the last as a reader that grows its
  // memo vector to twice its size would follow: 4 billion slots (64 GiB)
  // after 19 of them.
  std::string data = B("\x80\x02N");
  uint64_t idx = 4096, last = 0;
  int puts = 0;
  while (idx <= UINT32_MAX) {
    data += "r" + le_n(idx, 4);
    last = idx;
    idx = 2 * (idx + 1) + 4096;
    ++puts;
  }
  data += "j" + le_n(last, 4) + "0.";
  CHECK_EQ(puts, 19);
  CHECK(data.size() < 120);
  CHECK_EQ(repr_of(data), std::string("None"));
  // The same with a text PUT of 19 digits, and a GET of a slot never set.
  CHECK_EQ(repr_of(B("\x80\x02Np9999999999999999999\ng9999999999999999999\n.")), std::string("None"));
  CHECK_EQ(error_of(B("\x80\x02Nr\x00\x00\x00\x40j\xff\xff\xff\x3f.")),
           std::string("t.pickle: offset 8: memo has no value at index 1073741823"));
}

TEST("limits: 30k segments sharing one 30k-block list are refused at the visit budget") {
  // 9e8 blocks in a pickle of about 2 MB, each a pre-live allocation of
  // its own address if followed.
  auto shared = [](int segments, int blocks) {
    Raw r;
    r.b += "}";
    r.put();
    r.b += "(";
    r.str("segments");
    r.b += "]";
    r.put();
    r.b += "(";
    uint32_t list = 0;
    for (int s = 0; s < segments; ++s) {
      r.b += "}(";
      r.str("device");
      r.b += B("K\x00");
      r.str("address");
      r.integer(0x7f0000000000 + int64_t(s) * 0x100000000);
      r.str("total_size");
      r.integer(int64_t(blocks) * 512);
      r.str("blocks");
      if (s == 0) {
        r.b += "]";
        list = r.put();
        r.b += "(";
        for (int k = 0; k < blocks; ++k) {
          r.b += "}(";
          r.str("size");
          r.b += "M" + le_n(512, 2);
          r.str("state");
          r.str("active_allocated");
          r.b += "u";
        }
        r.b += "e";
      } else {
        r.get(list);
      }
      r.b += "u";
    }
    r.b += "e";
    r.str("device_traces");
    r.b += "]]a";
    r.b += "u.";
    return r.b;
  };
  vtrace::Trace t;
  vtrace::SnapshotFacts f;
  std::string err;
  // Sharing itself is no error: 30 segments of the same 30 blocks.
  CHECK(convert(shared(30, 30), &t, &f, &err));
  CHECK_EQ(f.prelive_from_segments, uint64_t(900));
  CHECK_EQ(f.visits, uint64_t(30 + 30 + 900));  // segments to pick the device, segments, blocks

  const std::string big = shared(30000, 30000);
  std::printf("  %zu bytes\n", big.size());
  CHECK(big.size() < 3000000);
  CHECK(!convert(big, &t, &f, &err));
  CHECK(starts_with(err, "s.pickle: segments["));
  CHECK_CONTAINS(err, " event, segment and block dicts to read, counting each listing");
  // The budget follows the pickle's size; the error names it.
  CHECK_CONTAINS(err, "more than " + std::to_string(big.size() / vtrace::kBytesPerVisit + vtrace::kVisitSlack) + " ");

  // snapshot_to_trace of a parsed document has a budget of its own.
  vpickle::Document doc;
  CHECK(vpickle::parse(bytes(big), big.size(), "s.pickle", &doc, &err));
  vtrace::SnapshotOptions o;
  o.max_visits = 100000;
  CHECK(!vtrace::snapshot_to_trace(doc.root(), "s.pickle", o, &t, &f, &err));
  CHECK_CONTAINS(err, "more than 100000 event, segment and block dicts");
}

TEST("limits: 200k events that are one dict of 200k keys convert with O(log n) comparisons per lookup") {
  // Every lookup of a linear dict would read all 200k keys: 4e10 compares.
  const int n = 200000;
  Raw r;
  r.b += "}(";
  r.str("device_traces");
  r.b += "]]}";  // device_traces, its one device's events, the event
  const uint32_t ev = r.put();
  r.b += "(";
  for (const char* k : {"action", "addr", "size", "stream"}) {
    r.str(k);
    if (std::string(k) == "action") r.str("alloc");
    else r.integer(k[1] == 'd' ? 0x7f0000001000 : k[0] == 's' && k[1] == 'i' ? 4096 : 0);
  }
  r.b += "u";
  for (int b = 0; b < n - 4; b += 1000) {
    r.b += "(";
    for (int k = b; k < std::min(b + 1000, n - 4); ++k) {
      char key[16];
      std::snprintf(key, sizeof key, "%06d", k);  // as long as "action", "stream"
      r.b += "X" + le_n(6, 4) + key;
      r.b += B("K\x01");
    }
    r.b += "u";
  }
  // The last "size" wins, as in Python.
  r.b += "(";
  r.str("size");
  r.b += "M" + le_n(8192, 2);
  r.b += "u";
  r.b += "a(";
  for (int k = 1; k < n; ++k) r.get(ev);
  r.b += "e";
  r.b += "a";  // device_traces = [[ev] * n]
  r.b += "u.";
  std::printf("  %zu bytes\n", r.b.size());
  vtrace::Trace t;
  vtrace::SnapshotFacts f;
  std::string err;
  vpickle::counts() = vpickle::Counts();
  CHECK(convert(r.b, &t, &f, &err));
  CHECK_EQ(err, std::string(""));
  // The claim, counted: every lookup of the 200k-key dict costs at most
  // log2(200k) + 2 = 19.6 key comparisons (a linear one: up to 200k).
  const vpickle::Counts c = vpickle::counts();
  std::printf("  %llu lookups, %llu key comparisons\n", static_cast<unsigned long long>(c.finds),
              static_cast<unsigned long long>(c.find_compares));
  CHECK(c.finds >= uint64_t(n));  // each event reads its keys
  CHECK(c.find_compares <= c.finds * uint64_t(std::log2(double(n)) + 2));
  CHECK_EQ(f.events, uint64_t(n));
  CHECK_EQ(f.allocs, uint64_t(n));
  CHECK_EQ(f.repairs, uint64_t(n - 1));  // the same address, allocated again and again
  CHECK_EQ(f.visits, uint64_t(n));
  CHECK_EQ(f.allocated_peak, uint64_t(8192));
  CHECK_EQ(t.ops.size(), size_t(2 * n - 1));
}

TEST("limits: a dict built one SETITEM at a time grows geometrically: log n growths, < 2n entries moved") {
  // An exact reserve per SETITEM copies the dict each time: 200k entries,
  // 2e10 entry copies.
  const int n = 200000;
  std::string data = B("\x80\x02}");
  for (int k = 0; k < n; ++k) data += "J" + le_n(static_cast<uint64_t>(k), 4) + "Ns";
  data += ".";
  vpickle::Document doc;
  std::string err;
  vpickle::counts() = vpickle::Counts();
  CHECK(parse(data, &doc, &err));
  CHECK_EQ(doc.root().size(), size_t(n));
  // The claim, counted: doubling growth reallocates about log2(n) = 18 times
  // and moves fewer entries in all than its last capacity, under 2n (an exact
  // reserve: n growths, n^2 / 2 = 2e10 entries moved).
  const vpickle::Counts c = vpickle::counts();
  std::printf("  %llu growths moved %llu entries\n", static_cast<unsigned long long>(c.entry_growths),
              static_cast<unsigned long long>(c.entries_moved));
  CHECK(c.entry_growths <= uint64_t(std::log2(double(n)) + 2));
  CHECK(c.entries_moved < 2 * uint64_t(n));
}

TEST("limits: gzip inflates up to max_inflated, never past it, then says so") {
  CHECK(vtrace::kDefaultMaxInflated <= (uint64_t(4) << 30));
#ifdef VPMM_HAVE_ZLIB
  auto gzip = [](const std::string& in) {
    z_stream z;
    std::memset(&z, 0, sizeof z);
    deflateInit2(&z, 9, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY);
    std::string out(deflateBound(&z, in.size()) + 64, '\0');
    z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
    z.avail_in = static_cast<uInt>(in.size());
    z.next_out = reinterpret_cast<Bytef*>(&out[0]);
    z.avail_out = static_cast<uInt>(out.size());
    deflate(&z, Z_FINISH);
    out.resize(z.total_out);
    deflateEnd(&z);
    return out;
  };
  // A bomb: 16 MiB + 1 of zeros in about 16 KiB.
  const uint64_t cap = uint64_t(16) << 20;
  const std::string bomb = gzip(std::string(cap + 1, '\0'));
  CHECK(bomb.size() < 50000);
  std::vector<uint8_t> out;
  std::string err;
  CHECK(!vtrace::gunzip(bytes(bomb), bomb.size(), "s.pickle.gz", &out, &err, cap));
  CHECK_EQ(err, std::string("s.pickle.gz: more than 16 MiB once decompressed: the limit on inflated "
                            "snapshots (a decompression bomb?)"));
  // The same through parse_snapshot, with the limit of its options.
  vtrace::SnapshotOptions o;
  o.max_inflated = cap;
  vtrace::Trace t;
  vtrace::SnapshotFacts f;
  CHECK(!vtrace::parse_snapshot(bytes(bomb), bomb.size(), "s.pickle.gz", o, &t, &f, &err));
  CHECK_CONTAINS(err, "more than 16 MiB once decompressed");
  // Exactly the limit inflates, into a buffer no larger than the limit.
  const std::string exact(1 << 20, 'N');
  const std::string gz = gzip(exact);
  CHECK(vtrace::gunzip(bytes(gz), gz.size(), "s.pickle.gz", &out, &err, exact.size()));
  CHECK_EQ(out.size(), exact.size());
  CHECK(out.capacity() <= exact.size());
  CHECK(!vtrace::gunzip(bytes(gz), gz.size(), "s.pickle.gz", &out, &err, exact.size() - 1));
  CHECK_EQ(err, std::string("s.pickle.gz: more than 1048575 bytes once decompressed: the limit on "
                            "inflated snapshots (a decompression bomb?)"));
#endif
}

TEST_MAIN()
