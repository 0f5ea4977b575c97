// Trace parsing and the allocator-independent replay engine (see trace.hpp
// for the contract and docs/trace-format.md for the format). Parsing runs a
// liveness pass over the IDs as it reads, which is what lets replay_trace
// trust a parsed trace and keeps every "free of an unknown ID" error pointing
// at its line instead of surfacing as an allocator error mid-replay.
#include "trace.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <unordered_map>

namespace vtrace {

namespace {

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

// Native lines: fields are separated by any run of commas and whitespace, so
// "malloc a 10M", "malloc,a,10M" and "malloc, a, 10M" all read the same.
std::vector<std::string> split_fields(const std::string& line) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : line) {
    if (c == ',' || std::isspace(static_cast<unsigned char>(c))) {
      if (!cur.empty()) out.push_back(cur), cur.clear();
    } else {
      cur += c;
    }
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

// CSV rows: exactly one comma between fields (an empty field is a field).
std::vector<std::string> split_csv(const std::string& line) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : line) {
    if (c == ',') {
      out.push_back(trim(cur));
      cur.clear();
    } else {
      cur += c;
    }
  }
  out.push_back(trim(cur));
  return out;
}

bool parse_stream(const std::string& tok, int32_t* out) {
  if (tok.empty() || tok.size() > 6) return false;
  int32_t v = 0;
  for (char c : tok) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
    v = v * 10 + (c - '0');
  }
  if (v >= kMaxStreams) return false;
  *out = v;
  return true;
}

// RMM logs a stream as its handle value in hex, with or without "0x".
bool parse_hex_value(const std::string& tok, uint64_t* out) {
  std::string t = lower(tok);
  if (t == "nullptr" || t == "(nil)") {
    *out = 0;
    return true;
  }
  if (t.rfind("0x", 0) == 0) t = t.substr(2);
  if (t.empty() || t.size() > 16) return false;
  uint64_t v = 0;
  for (char c : t) {
    if (!std::isxdigit(static_cast<unsigned char>(c))) return false;
    v = v * 16 + static_cast<uint64_t>(std::isdigit(static_cast<unsigned char>(c)) ? c - '0' : c - 'a' + 10);
  }
  *out = v;
  return true;
}

const char* const kSizeHelp =
    "want a decimal or 0x-hex integer > 0 with an optional K/M/G/T suffix, or N p for pages";

// Builds a Trace line by line; owns the ID liveness state shared by both
// formats.
class Builder {
 public:
  explicit Builder(const std::string& name) { t_.name = name; }

  bool fail(uint32_t line, const std::string& what) {
    err_ = t_.name + ":" + std::to_string(line) + ": " + what;
    return false;
  }

  bool malloc_op(uint32_t line, const std::string& id, uint64_t size, bool pages, int32_t stream) {
    uint32_t k = intern(id);
    if (live_line_[k] != 0)
      return fail(line, "malloc of ID '" + id + "' that is still live (allocated at line " +
                            std::to_string(live_line_[k]) + ")");
    live_line_[k] = line;
    TraceOp op;
    op.kind = OpKind::kMalloc;
    op.id = k;
    op.size = size;
    op.in_pages = pages;
    op.stream = stream;
    op.line = line;
    t_.ops.push_back(op);
    return true;
  }

  bool free_op(uint32_t line, const std::string& id, int32_t stream) {
    auto it = index_.find(id);
    if (it == index_.end())
      return fail(line, "free of unknown ID '" + id + "' (never allocated)");
    if (live_line_[it->second] == 0)
      return fail(line, "free of ID '" + id + "' that is not live (already freed)");
    live_line_[it->second] = 0;
    TraceOp op;
    op.kind = OpKind::kFree;
    op.id = it->second;
    op.stream = stream;
    op.line = line;
    t_.ops.push_back(op);
    return true;
  }

  void sync_op(uint32_t line, int32_t stream) {
    TraceOp op;
    op.kind = OpKind::kSync;
    op.stream = stream;
    op.line = line;
    t_.ops.push_back(op);
  }

  Trace& trace() { return t_; }
  const std::string& error() const { return err_; }

 private:
  uint32_t intern(const std::string& id) {
    auto it = index_.find(id);
    if (it != index_.end()) return it->second;
    uint32_t k = static_cast<uint32_t>(t_.ids.size());
    index_.emplace(id, k);
    t_.ids.push_back(id);
    live_line_.push_back(0);
    return k;
  }

  Trace t_;
  std::string err_;
  std::unordered_map<std::string, uint32_t> index_;
  std::vector<uint32_t> live_line_;  // per id: line of its live malloc, 0 when not live
};

// One native line (comment already stripped, not blank).
bool native_line(Builder& b, uint32_t line, const std::vector<std::string>& f) {
  if (f.empty()) return b.fail(line, "a line of separators only: no operation");
  const std::string verb = lower(f[0]);
  auto extra = [&](size_t max_fields) {
    return b.fail(line, "unexpected field '" + f[max_fields] + "' after " + verb + " (at most " +
                            std::to_string(max_fields - 1) + " operands)");
  };
  auto stream_at = [&](size_t i, int32_t* s) {
    if (f.size() <= i) return true;  // absent: default stream 0 (sync: every stream)
    if (!parse_stream(f[i], s))
      return b.fail(line, "malformed stream '" + f[i] + "' (want an integer 0.." +
                              std::to_string(kMaxStreams - 1) + ")");
    return true;
  };
  if (verb == "malloc" || verb == "alloc") {
    if (f.size() < 2) return b.fail(line, "malloc without an ID (want: malloc ID SIZE [STREAM])");
    if (f.size() < 3) return b.fail(line, "malloc of '" + f[1] + "' without a size (want: malloc ID SIZE [STREAM])");
    if (f.size() > 4) return extra(4);
    uint64_t size = 0;
    bool pages = false;
    if (!parse_size(f[2], &size, &pages))
      return b.fail(line, "malformed size '" + f[2] + "' (" + kSizeHelp + ")");
    int32_t s = 0;
    if (!stream_at(3, &s)) return false;
    return b.malloc_op(line, f[1], size, pages, s);
  }
  if (verb == "free") {
    if (f.size() < 2) return b.fail(line, "free without an ID (want: free ID [STREAM])");
    if (f.size() > 3) return extra(3);
    int32_t s = 0;
    if (!stream_at(2, &s)) return false;
    return b.free_op(line, f[1], s);
  }
  if (verb == "sync") {
    if (f.size() > 2) return extra(2);
    int32_t s = -1;
    if (!stream_at(1, &s)) return false;
    b.sync_op(line, s);
    return true;
  }
  return b.fail(line, "unknown op '" + f[0] + "' (want malloc, free or sync)");
}

// Columns of an RMM logging_resource_adaptor CSV, found by header name so
// that extra or reordered columns still parse.
struct RmmColumns {
  int action = -1, pointer = -1, size = -1, stream = -1;
  size_t needed = 0;  // fields a row must have
};

// "Thread," cannot start a native line (there is no op of that name), so it
// identifies RMM's header even when the header lacks a column we need.
bool is_rmm_header(const std::string& line) {
  return lower(trim(line)).rfind("thread,", 0) == 0;
}

bool rmm_header(Builder& b, uint32_t line, const std::string& text, RmmColumns* c) {
  std::vector<std::string> f = split_csv(text);
  for (size_t i = 0; i < f.size(); ++i) {
    std::string n = lower(f[i]);
    int idx = static_cast<int>(i);
    if (n == "action") c->action = idx;
    else if (n == "pointer") c->pointer = idx;
    else if (n == "size") c->size = idx;
    else if (n == "stream") c->stream = idx;
  }
  if (c->action < 0 || c->pointer < 0 || c->size < 0)
    return b.fail(line, "RMM CSV header lacks an Action, Pointer or Size column");
  c->needed = static_cast<size_t>(std::max({c->action, c->pointer, c->size, c->stream})) + 1;
  return true;
}

struct RmmState {
  std::unordered_map<uint64_t, int32_t> streams;  // logged stream handle -> index
  std::set<std::string> zero_live;                // pointers of live zero-byte allocations
};

bool rmm_row(Builder& b, uint32_t line, const std::string& text, const RmmColumns& c,
             RmmState* st) {
  std::vector<std::string> f = split_csv(text);
  if (f.size() < c.needed)
    return b.fail(line, "RMM CSV row has " + std::to_string(f.size()) + " fields, want " +
                            std::to_string(c.needed));
  const std::string action = lower(f[c.action]);
  const std::string ptr = lower(f[c.pointer]);
  int32_t stream = 0;
  if (c.stream >= 0 && !f[c.stream].empty()) {
    uint64_t handle = 0;
    if (!parse_hex_value(f[c.stream], &handle))
      return b.fail(line, "malformed stream '" + f[c.stream] + "' (want a hex stream handle)");
    // Handle 0 is the default stream; every other handle gets the next index
    // in order of first appearance.
    if (handle != 0) {
      auto it = st->streams.find(handle);
      if (it == st->streams.end()) {
        int32_t k = static_cast<int32_t>(st->streams.size()) + 1;
        if (k >= kMaxStreams)
          return b.fail(line, "more than " + std::to_string(kMaxStreams - 1) + " distinct streams");
        it = st->streams.emplace(handle, k).first;
      }
      stream = it->second;
    }
  }
  if (action == "allocate failure" || action == "allocate_failure") {
    ++b.trace().skipped_failures;  // the original program got no memory: nothing to replay
    return true;
  }
  if (action == "allocate") {
    uint64_t size = 0;
    const std::string s = trim(f[c.size]);
    if (s == "0") {
      // Zero-byte requests are legal in RMM but not in vpmm: skip the pair.
      st->zero_live.insert(ptr);
      ++b.trace().skipped_failures;
      return true;
    }
    if (!parse_size(s, &size, nullptr))
      return b.fail(line, "malformed size '" + s + "' (" + kSizeHelp + ")");
    return b.malloc_op(line, ptr, size, false, stream);
  }
  if (action == "free" || action == "deallocate") {
    if (st->zero_live.erase(ptr)) return true;
    return b.free_op(line, ptr, stream);
  }
  return b.fail(line, "unknown RMM action '" + f[c.action] +
                          "' (want allocate, allocate failure, free or deallocate)");
}

}  // namespace

bool parse_size(const std::string& token, uint64_t* value, bool* in_pages) {
  const std::string t = trim(token);
  size_t i = 0;
  uint64_t v = 0;
  const uint64_t kMax = UINT64_MAX;
  if (t.size() > 2 && t[0] == '0' && (t[1] == 'x' || t[1] == 'X')) {
    // Hex digits are taken greedily, so "0x1B" is 27 bytes, not 1 byte.
    i = 2;
    size_t start = i;
    while (i < t.size() && std::isxdigit(static_cast<unsigned char>(t[i]))) {
      char c = static_cast<char>(std::tolower(static_cast<unsigned char>(t[i])));
      uint64_t d = static_cast<uint64_t>(std::isdigit(static_cast<unsigned char>(c)) ? c - '0' : c - 'a' + 10);
      if (v > (kMax - d) / 16) return false;
      v = v * 16 + d;
      ++i;
    }
    if (i == start) return false;
  } else {
    // Decimal only (a leading 0 is not octal, unlike strtoull base 0).
    size_t start = i;
    while (i < t.size() && std::isdigit(static_cast<unsigned char>(t[i]))) {
      uint64_t d = static_cast<uint64_t>(t[i] - '0');
      if (v > (kMax - d) / 10) return false;
      v = v * 10 + d;
      ++i;
    }
    if (i == start) return false;
  }
  const std::string suf = lower(t.substr(i));
  bool pages = false;
  uint64_t mult = 1;
  if (suf.empty() || suf == "b") mult = 1;
  else if (suf == "k" || suf == "kb" || suf == "kib") mult = 1ull << 10;
  else if (suf == "m" || suf == "mb" || suf == "mib") mult = 1ull << 20;
  else if (suf == "g" || suf == "gb" || suf == "gib") mult = 1ull << 30;
  else if (suf == "t" || suf == "tb" || suf == "tib") mult = 1ull << 40;
  else if (suf == "p" && in_pages != nullptr) pages = true;
  else return false;
  if (v == 0 || v > kMax / mult) return false;
  *value = v * mult;
  if (in_pages) *in_pages = pages;
  return true;
}

bool parse_trace_stream(std::istream& in, const std::string& name, Trace* out, std::string* err) {
  Builder b(name);
  std::string raw;
  uint32_t line = 0;
  bool seen_content = false;
  RmmColumns cols;
  RmmState rmm;
  while (std::getline(in, raw)) {
    ++line;
    if (!raw.empty() && raw.back() == '\r') raw.pop_back();  // CRLF logs
    size_t hash = raw.find('#');
    std::string text = hash == std::string::npos ? raw : raw.substr(0, hash);
    if (trim(text).empty()) continue;
    if (!seen_content) {
      seen_content = true;
      // The first content line decides the format: RMM's header, or ops.
      if (is_rmm_header(text)) {
        b.trace().format = TraceFormat::kRmmCsv;
        if (!rmm_header(b, line, text, &cols)) break;
        continue;
      }
    }
    bool ok = b.trace().format == TraceFormat::kRmmCsv ? rmm_row(b, line, text, cols, &rmm)
                                                       : native_line(b, line, split_fields(text));
    if (!ok) break;
  }
  if (!b.error().empty()) {
    if (err) *err = b.error();
    return false;
  }
  if (in.bad()) {
    if (err) *err = name + ": read error";
    return false;
  }
  *out = std::move(b.trace());
  return true;
}

bool parse_trace_text(const std::string& text, const std::string& name, Trace* out,
                      std::string* err) {
  std::istringstream in(text);
  return parse_trace_stream(in, name, out, err);
}

bool load_trace(const std::string& path, Trace* out, std::string* err) {
  std::ifstream in(path);
  if (!in) {
    if (err) *err = path + ": cannot open: " + std::strerror(errno);
    return false;
  }
  return parse_trace_stream(in, path, out, err);
}

bool parse_trace(const std::string& path, std::vector<TraceOp>* ops, std::string* err) {
  Trace t;
  if (!load_trace(path, &t, err)) return false;
  *ops = std::move(t.ops);
  return true;
}

bool op_bytes(const TraceOp& op, uint64_t page_size, uint64_t* bytes) {
  if (!op.in_pages) {
    *bytes = op.size;
    return true;
  }
  if (page_size == 0 || op.size > UINT64_MAX / page_size) return false;
  *bytes = op.size * page_size;
  return true;
}

namespace {
std::string overflow_what(const TraceOp& op, uint64_t page_size) {
  return std::to_string(op.size) + "p overflows with a page size of " + std::to_string(page_size);
}
}  // namespace

bool summarize_trace(const std::vector<TraceOp>& ops, uint64_t page_size, TraceSummary* out,
                     std::string* err) {
  TraceSummary s;
  std::set<int> streams{0};
  std::vector<uint64_t> live;  // per id: requested bytes (ids are dense)
  uint64_t cur = 0;
  for (const TraceOp& op : ops) {
    if (op.stream >= 0) streams.insert(op.stream);
    if (op.kind == OpKind::kMalloc) {
      uint64_t n = 0;
      if (!op_bytes(op, page_size, &n)) {
        if (err) *err = std::to_string(op.line) + ": " + overflow_what(op, page_size);  // caller adds NAME:
        return false;
      }
      if (live.size() <= op.id) live.resize(op.id + 1, 0);
      live[op.id] = n;
      cur += n;
      s.peak_requested = std::max(s.peak_requested, cur);
      ++s.mallocs;
    } else if (op.kind == OpKind::kFree) {
      if (op.id < live.size()) cur -= live[op.id], live[op.id] = 0;
      ++s.frees;
    } else {
      ++s.syncs;
    }
  }
  s.final_requested = cur;
  s.streams.assign(streams.begin(), streams.end());
  *out = std::move(s);
  return true;
}

bool replay_trace(const std::vector<TraceOp>& ops, uint64_t page_size, const ReplayHooks& hooks,
                  ReplayResult* res, std::string* err, const std::string& where) {
  ReplayResult r;
  // Pointer and size per dense id; a slot is reused when a freed ID is
  // allocated again (RMM logs reuse addresses all the time).
  struct Slot {
    void* ptr = nullptr;
    uint64_t bytes = 0;
    int stream = 0;
    bool live = false;
  };
  std::vector<Slot> slots;
  std::set<int> used{0};
  for (const TraceOp& op : ops)
    if (op.stream >= 0) used.insert(op.stream);
  uint64_t cur = 0;
  std::string msg;
  auto fail = [&](const TraceOp& op, const std::string& what) {
    if (err) *err = where + ":" + std::to_string(op.line) + ": " + what;
    return false;
  };
  bool ok = true;
  for (const TraceOp& op : ops) {
    msg.clear();
    if (op.kind == OpKind::kMalloc) {
      uint64_t n = 0;
      if (!op_bytes(op, page_size, &n)) {
        ok = fail(op, overflow_what(op, page_size));
        break;
      }
      if (slots.size() <= op.id) slots.resize(op.id + 1);
      if (slots[op.id].live) {
        ok = fail(op, "malloc of an ID that is still live");
        break;
      }
      void* p = nullptr;
      if (!hooks.malloc(op, n, &p, &msg)) {
        ok = fail(op, msg);
        break;
      }
      slots[op.id] = Slot{p, n, op.stream, true};
      cur += n;
      r.peak_requested = std::max(r.peak_requested, cur);
      ++r.mallocs;
    } else if (op.kind == OpKind::kFree) {
      if (op.id >= slots.size() || !slots[op.id].live) {
        ok = fail(op, "free of an ID that is not live");
        break;
      }
      Slot& s = slots[op.id];
      if (!hooks.free(op, s.ptr, s.bytes, &msg)) {
        ok = fail(op, msg);
        break;
      }
      s.live = false;
      cur -= s.bytes;
      ++r.frees;
    } else {
      bool sync_ok = true;
      if (op.stream >= 0) {
        sync_ok = hooks.sync(op.stream, &msg);
      } else {
        for (int s : used)
          if (!(sync_ok = hooks.sync(s, &msg))) break;
      }
      if (!sync_ok) {
        ok = fail(op, msg);
        break;
      }
      ++r.syncs;
    }
    ++r.ops_done;
    if (hooks.after && !hooks.after(r.ops_done, op, &msg)) {
      ok = fail(op, msg);
      break;
    }
  }
  r.final_requested = cur;
  for (const Slot& s : slots)
    if (s.live) r.live.push_back(ReplayLive{s.ptr, s.bytes, s.stream});
  if (res) *res = std::move(r);
  return ok;
}

}  // namespace vtrace
