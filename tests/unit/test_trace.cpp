// Unit tests of the trace parser and replay engine of tools/trace.{hpp,cpp}
// (no pool involved: the replay runs against fake hooks). Every malformed
// line must be rejected with "NAME:LINE: what", because a trace that replays
// "mostly" would make fragmentation figures silently wrong; the good-path
// cases pin the format of docs/trace-format.md (separators, suffixes, the `p`
// unit, RMM's logging CSV).
#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "check.hpp"
#include "trace.hpp"

using vtrace::OpKind;
using vtrace::Trace;
using vtrace::TraceOp;

namespace {

bool parse(const std::string& text, Trace* t, std::string* err) {
  return vtrace::parse_trace_text(text, "t.trace", t, err);
}

// The error a malformed trace gives ("" when it parses).
std::string error_of(const std::string& text) {
  Trace t;
  std::string err;
  if (parse(text, &t, &err)) return "";
  return err;
}

bool starts_with(const std::string& s, const std::string& p) { return s.compare(0, p.size(), p) == 0; }
bool contains(const std::string& s, const std::string& p) { return s.find(p) != std::string::npos; }

// CHECK that `text` fails at `line` with a message containing `what`.
#define CHECK_FAILS_AT(text, line, what)                                            \
  do {                                                                              \
    std::string e_ = error_of(text);                                                \
    CHECK(starts_with(e_, "t.trace:" + std::to_string(line) + ": "));               \
    CHECK(contains(e_, what));                                                      \
    if (!starts_with(e_, "t.trace:" + std::to_string(line) + ": ") || !contains(e_, what)) \
      std::printf("  got: %s\n", e_.c_str());                                       \
  } while (0)

uint64_t size_of(const std::string& tok, bool* pages = nullptr) {
  uint64_t v = 0;
  bool p = false;
  if (!vtrace::parse_size(tok, &v, &p)) return UINT64_MAX;
  if (pages) *pages = p;
  return v;
}

}  // namespace

TEST("sizes: decimal, hex, K/M/G/T suffixes in every spelling") {
  CHECK_EQ(size_of("10"), uint64_t(10));
  CHECK_EQ(size_of("010"), uint64_t(10));  // decimal, not octal
  CHECK_EQ(size_of("0x10"), uint64_t(16));
  CHECK_EQ(size_of("0X1f"), uint64_t(31));
  CHECK_EQ(size_of("0x1B"), uint64_t(27));  // hex digits are greedy: B is a digit here
  CHECK_EQ(size_of("0x2M"), uint64_t(2) << 20);
  CHECK_EQ(size_of("4K"), uint64_t(4096));
  CHECK_EQ(size_of("4k"), uint64_t(4096));
  CHECK_EQ(size_of("4KB"), uint64_t(4096));
  CHECK_EQ(size_of("4KiB"), uint64_t(4096));
  CHECK_EQ(size_of("100B"), uint64_t(100));
  CHECK_EQ(size_of("3M"), uint64_t(3) << 20);
  CHECK_EQ(size_of("3MiB"), uint64_t(3) << 20);
  CHECK_EQ(size_of("2G"), uint64_t(2) << 30);
  CHECK_EQ(size_of("1T"), uint64_t(1) << 40);
  CHECK_EQ(size_of("18446744073709551615"), UINT64_MAX);
}

TEST("sizes: the p unit counts pages") {
  bool pages = false;
  CHECK_EQ(size_of("10p", &pages), uint64_t(10));
  CHECK(pages);
  CHECK_EQ(size_of("0x10P", &pages), uint64_t(16));
  CHECK(pages);
  CHECK_EQ(size_of("10", &pages), uint64_t(10));
  CHECK(!pages);
  uint64_t v = 0;
  CHECK(!vtrace::parse_size("10p", &v, nullptr));  // no page size where in_pages is NULL
  TraceOp op;
  op.kind = OpKind::kMalloc;
  op.size = 10;
  op.in_pages = true;
  CHECK(vtrace::op_bytes(op, 64 << 10, &v));
  CHECK_EQ(v, uint64_t(640) << 10);
  op.size = UINT64_MAX / 2;
  CHECK(!vtrace::op_bytes(op, 4, &v));  // overflow is refused, not wrapped
}

TEST("sizes: malformed ones are rejected") {
  for (const char* bad : {"", "0", "0K", "0p", "-1", "+1", "1.5M", "1e6", "10Q", "K", "p", "0x", "0xg",
                          "10 M", "10MM", "18446744073709551616", "16777216T", "0x10000000000000000"}) {
    uint64_t v = 7;
    bool p = false;
    bool ok = vtrace::parse_size(bad, &v, &p);
    CHECK(!ok);
    CHECK_EQ(v, uint64_t(7));  // untouched on failure
    if (ok) std::printf("  accepted '%s'\n", bad);
  }
}

TEST("native format: good lines, separators, comments, defaults") {
  const std::string text =
      "# a comment\n"
      "\n"
      "malloc a 10M\n"                 // line 3
      "malloc,b,0x100,2   # trailing\n" // line 4: commas
      "  malloc  c\t4p  1\n"           // line 5: whitespace runs, tab
      "free a\n"                       // line 6
      "free, b, 2\n"                   // line 7: comma + space
      "sync\n"                         // line 8: every stream
      "sync 1\n"                       // line 9
      "MALLOC a 1K\n"                  // line 10: a freed ID may be reused; verbs any case
      "alloc 0x7f00 5\n";              // line 11: alias; any token is an ID
  Trace t;
  std::string err;
  CHECK(parse(text, &t, &err));
  CHECK_EQ(err, std::string(""));
  CHECK(t.format == vtrace::TraceFormat::kNative);
  CHECK_EQ(t.ops.size(), size_t(9));
  if (t.ops.size() != 9) return;
  const TraceOp* o = t.ops.data();
  CHECK(o[0].kind == OpKind::kMalloc);
  CHECK_EQ(o[0].size, uint64_t(10) << 20);
  CHECK_EQ(o[0].stream, 0);
  CHECK_EQ(o[0].line, uint32_t(3));
  CHECK_EQ(t.ids[o[0].id], std::string("a"));
  CHECK_EQ(o[1].size, uint64_t(256));
  CHECK_EQ(o[1].stream, 2);
  CHECK_EQ(o[2].size, uint64_t(4));
  CHECK(o[2].in_pages);
  CHECK_EQ(o[2].stream, 1);
  CHECK_EQ(o[2].line, uint32_t(5));
  CHECK(o[3].kind == OpKind::kFree);
  CHECK_EQ(o[3].id, o[0].id);
  CHECK_EQ(o[4].stream, 2);
  CHECK(o[5].kind == OpKind::kSync);
  CHECK_EQ(o[5].stream, -1);
  CHECK_EQ(o[6].stream, 1);
  CHECK_EQ(o[7].id, o[0].id);  // same token, same dense id
  CHECK_EQ(o[7].size, uint64_t(1024));
  CHECK_EQ(t.ids[o[8].id], std::string("0x7f00"));
  CHECK_EQ(t.ids.size(), size_t(4));
}

TEST("native format: an empty or comment-only trace is valid") {
  Trace t;
  std::string err;
  CHECK(parse("", &t, &err));
  CHECK(t.ops.empty());
  CHECK(parse("# nothing\n\n   # at all\n", &t, &err));
  CHECK(t.ops.empty());
}

TEST("native format: every malformed line names its line") {
  CHECK_FAILS_AT("malloc a 1\nbogus a 1\n", 2, "unknown op 'bogus'");
  CHECK_FAILS_AT("\n\nmalloc\n", 3, "malloc without an ID");
  CHECK_FAILS_AT("malloc a\n", 1, "without a size");
  CHECK_FAILS_AT("# c\nmalloc a 12Q\n", 2, "malformed size '12Q'");
  CHECK_FAILS_AT("malloc a 0\n", 1, "malformed size '0'");
  CHECK_FAILS_AT("malloc a -5\n", 1, "malformed size '-5'");
  CHECK_FAILS_AT("malloc a 1.5M\n", 1, "malformed size '1.5M'");
  CHECK_FAILS_AT("malloc a 1 0 extra\n", 1, "unexpected field 'extra'");
  CHECK_FAILS_AT("malloc a 1\nfree a 0 x\n", 2, "unexpected field 'x'");
  CHECK_FAILS_AT("sync 0 1\n", 1, "unexpected field '1'");
  CHECK_FAILS_AT("malloc a 1 x\n", 1, "malformed stream 'x'");
  CHECK_FAILS_AT("malloc a 1 -1\n", 1, "malformed stream '-1'");
  CHECK_FAILS_AT("malloc a 1 1024\n", 1, "malformed stream '1024'");
  CHECK_FAILS_AT("malloc a 1\nfree a 1.0\n", 2, "malformed stream '1.0'");
  CHECK_FAILS_AT("sync s\n", 1, "malformed stream 's'");
  CHECK_FAILS_AT("free\n", 1, "free without an ID");
  CHECK_FAILS_AT("malloc a 1\nfree b\n", 2, "free of unknown ID 'b'");
  CHECK_FAILS_AT("malloc a 1\nfree a\n\nfree a\n", 4, "already freed");
  CHECK_FAILS_AT("malloc a 1\nmalloc b 1\n# x\nmalloc a 2\n", 4, "'a' that is still live (allocated at line 1)");
}

TEST("native format: the first error wins and the output is untouched") {
  Trace t;
  t.name = "keep";
  std::string err;
  CHECK(!parse("malloc a 1\nfree zz\nbogus\n", &t, &err));
  CHECK(starts_with(err, "t.trace:2: "));
  CHECK_EQ(t.name, std::string("keep"));
  CHECK(t.ops.empty());
}

TEST("RMM logging CSV: allocate/free/failure rows, streams by first appearance") {
  const std::string text =
      "Thread,Time,Action,Pointer,Size,Stream\r\n"
      "140573312345856,08:23:19.234134,allocate,7f8a40000000,1024,0\r\n"       // line 2
      "140573312345856,08:23:19.234200,allocate,0x7f8a40000400,2048,7f8a38001020\r\n"
      "140573312345857,08:23:19.234300,allocate failure,0,1099511627776,0\r\n"   // skipped
      "140573312345856,08:23:19.234400,free,7f8a40000000,1024,0\r\n"
      "140573312345856,08:23:19.234500,allocate,7f8a40000000,4096,0x55aa\r\n"  // pointer reused
      "140573312345856,08:23:19.234600,deallocate,0x7f8a40000400,2048,7f8a38001020\r\n"
      "140573312345856,08:23:19.234700,allocate,0,0,0\r\n"                     // zero bytes: skipped
      "140573312345856,08:23:19.234800,free,0,0,0\r\n";                        // ... with its free
  Trace t;
  std::string err;
  CHECK(parse(text, &t, &err));
  CHECK_EQ(err, std::string(""));
  CHECK(t.format == vtrace::TraceFormat::kRmmCsv);
  CHECK_EQ(t.skipped_failures, uint64_t(2));
  CHECK_EQ(t.ops.size(), size_t(5));
  if (t.ops.size() != 5) return;
  CHECK(t.ops[0].kind == OpKind::kMalloc);
  CHECK_EQ(t.ops[0].size, uint64_t(1024));
  CHECK_EQ(t.ops[0].stream, 0);
  CHECK_EQ(t.ops[0].line, uint32_t(2));
  CHECK_EQ(t.ops[1].stream, 1);  // first non-zero stream handle
  CHECK(t.ops[2].kind == OpKind::kFree);
  CHECK_EQ(t.ops[2].id, t.ops[0].id);
  CHECK_EQ(t.ops[3].stream, 2);  // the next new handle
  CHECK_EQ(t.ops[3].id, t.ops[0].id);
  CHECK_EQ(t.ops[3].size, uint64_t(4096));
  CHECK(t.ops[4].kind == OpKind::kFree);
  CHECK_EQ(t.ops[4].stream, 1);
  CHECK_EQ(t.ops[4].id, t.ops[1].id);  // "0x7f8a40000400" and the logged token match
}

TEST("RMM logging CSV: columns found by name; comments before the header") {
  const std::string text =
      "# captured with RMM_LOG_FILE\n"
      "Thread,Time,Action,Pointer,Size,Stream,Extra\n"
      "1,0.1,allocate,0xa0,100,0x0,foo\n"
      "1,0.2,free,0xa0,100,0x0,bar\n";
  Trace t;
  std::string err;
  CHECK(parse(text, &t, &err));
  CHECK_EQ(t.ops.size(), size_t(2));
}

TEST("RMM logging CSV: malformed rows name their line") {
  const std::string h = "Thread,Time,Action,Pointer,Size,Stream\n";
  CHECK_FAILS_AT(h + "1,0.1,allocate,0xa0\n", 2, "has 4 fields, want 6");
  CHECK_FAILS_AT(h + "1,0.1,allocate,0xa0,100,0\n1,0.2,reallocate,0xa0,100,0\n", 3, "unknown RMM action 'reallocate'");
  CHECK_FAILS_AT(h + "1,0.1,allocate,0xa0,lots,0\n", 2, "malformed size 'lots'");
  CHECK_FAILS_AT(h + "1,0.1,allocate,0xa0,100,stream7\n", 2, "malformed stream 'stream7'");
  CHECK_FAILS_AT(h + "1,0.1,free,0xa0,100,0\n", 2, "free of unknown ID '0xa0'");
  CHECK_FAILS_AT(h + "1,0.1,allocate,0xa0,100,0\n1,0.1,allocate,0xa0,100,0\n", 3, "still live");
  CHECK_FAILS_AT("Thread,Time,What,Pointer\n", 1, "lacks an Action, Pointer or Size column");
}

TEST("summary: peak and final requested bytes, streams used, p resolved") {
  Trace t;
  std::string err;
  CHECK(parse("malloc a 2p 3\nmalloc b 100\nfree a 3\nmalloc c 1p 1\nsync\n", &t, &err));
  vtrace::TraceSummary s;
  CHECK(vtrace::summarize_trace(t.ops, 1000, &s, &err));
  CHECK_EQ(s.mallocs, uint64_t(3));
  CHECK_EQ(s.frees, uint64_t(1));
  CHECK_EQ(s.syncs, uint64_t(1));
  CHECK_EQ(s.peak_requested, uint64_t(2100));
  CHECK_EQ(s.final_requested, uint64_t(1100));
  CHECK_EQ(s.streams.size(), size_t(3));
  if (s.streams.size() == 3) {
    CHECK_EQ(s.streams[0], 0);
    CHECK_EQ(s.streams[1], 1);
    CHECK_EQ(s.streams[2], 3);
  }
  Trace big;
  CHECK(parse("\nmalloc a 0x1000000000000p\n", &big, &err));
  CHECK(!vtrace::summarize_trace(big.ops, 1 << 20, &s, &err));
  CHECK(starts_with(err, "2: "));
}

// A fake allocator: hands out increasing addresses and logs every call.
struct Fake {
  std::vector<std::string> log;
  uintptr_t next = 0x1000;
  std::map<void*, uint64_t> live;
  int fail_at_malloc = -1;
  int mallocs = 0;
  vtrace::ReplayHooks hooks() {
    vtrace::ReplayHooks h;
    h.malloc = [this](const TraceOp& op, uint64_t bytes, void** p, std::string* e) {
      if (mallocs++ == fail_at_malloc) {
        *e = "out of fake memory";
        return false;
      }
      *p = reinterpret_cast<void*>(next);
      next += 0x1000;
      live[*p] = bytes;
      log.push_back("m" + std::to_string(bytes) + "@" + std::to_string(op.stream));
      return true;
    };
    h.free = [this](const TraceOp& op, void* p, uint64_t bytes, std::string* e) {
      auto it = live.find(p);
      if (it == live.end() || it->second != bytes) {
        *e = "bad free";
        return false;
      }
      live.erase(it);
      log.push_back("f" + std::to_string(bytes) + "@" + std::to_string(op.stream));
      return true;
    };
    h.sync = [this](int s, std::string*) {
      log.push_back("s@" + std::to_string(s));
      return true;
    };
    return h;
  }
};

TEST("replay: IDs map to the new pointers, p uses the page size, sync fans out") {
  Trace t;
  std::string err;
  CHECK(parse("malloc x 2p 3\nmalloc y 10 1\nfree x 1\nsync\nmalloc x 5\nsync 3\n", &t, &err));
  Fake f;
  vtrace::ReplayHooks h = f.hooks();
  size_t afters = 0;
  h.after = [&](size_t done, const TraceOp&, std::string*) {
    CHECK_EQ(done, ++afters);
    return true;
  };
  vtrace::ReplayResult r;
  CHECK(vtrace::replay_trace(t.ops, 4096, h, &r, &err, "t.trace"));
  const std::vector<std::string> want = {"m8192@3", "m10@1", "f8192@1", "s@0", "s@1", "s@3",
                                         "m5@0", "s@3"};
  CHECK(f.log == want);
  if (f.log != want)
    for (auto& l : f.log) std::printf("    got %s\n", l.c_str());
  CHECK_EQ(afters, size_t(6));
  CHECK_EQ(r.ops_done, size_t(6));
  CHECK_EQ(r.mallocs, uint64_t(3));
  CHECK_EQ(r.frees, uint64_t(1));
  CHECK_EQ(r.syncs, uint64_t(2));
  CHECK_EQ(r.peak_requested, uint64_t(8202));
  CHECK_EQ(r.final_requested, uint64_t(15));
  CHECK_EQ(r.live.size(), size_t(2));
}

TEST("replay: a failing hook stops with NAME:LINE and reports what is live") {
  Trace t;
  std::string err;
  CHECK(parse("malloc a 1\n# gap\nmalloc b 2\nmalloc c 3\n", &t, &err));
  Fake f;
  f.fail_at_malloc = 1;
  vtrace::ReplayResult r;
  CHECK(!vtrace::replay_trace(t.ops, 4096, f.hooks(), &r, &err, "t.trace"));
  CHECK_EQ(err, std::string("t.trace:3: out of fake memory"));
  CHECK_EQ(r.ops_done, size_t(1));
  CHECK_EQ(r.live.size(), size_t(1));
  if (!r.live.empty()) CHECK_EQ(r.live[0].bytes, uint64_t(1));
  Fake g;
  vtrace::ReplayHooks h = g.hooks();
  h.after = [](size_t done, const TraceOp&, std::string* e) {
    if (done < 2) return true;
    *e = "check failed";
    return false;
  };
  CHECK(!vtrace::replay_trace(t.ops, 4096, h, &r, &err, "t.trace"));
  CHECK_EQ(err, std::string("t.trace:3: check failed"));
}

TEST("files: load_trace and parse_trace read a file; a missing file is an error") {
  const std::string path = "test_trace_tmp.trace";
  {
    std::ofstream f(path);
    f << "malloc a 1M\nfree a\n";
  }
  std::vector<TraceOp> ops;
  std::string err;
  CHECK(vtrace::parse_trace(path, &ops, &err));
  CHECK_EQ(ops.size(), size_t(2));
  {
    std::ofstream f(path);
    f << "malloc a 1M\nfree b\n";
  }
  CHECK(!vtrace::parse_trace(path, &ops, &err));
  CHECK_EQ(err, path + ":2: free of unknown ID 'b' (never allocated)");
  std::remove(path.c_str());
  Trace t;
  CHECK(!vtrace::load_trace("/nonexistent/x.trace", &t, &err));
  CHECK_EQ(err, std::string("/nonexistent/x.trace: cannot open: No such file or directory"));  // the reason, strerror(errno)
}

TEST_MAIN()
