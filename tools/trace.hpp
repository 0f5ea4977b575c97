// Allocation traces: parsing (format v1 and RMM's logging CSV) and a replay
// engine that is independent of the allocator it drives. The `vpmm replay`
// command plugs libvpmm into the engine; a benchmark can plug in
// cudaMallocAsync (or anything with malloc/free/sync) and replay the very same
// ops. Parsing validates the whole trace up front (sizes, streams, and that
// every free names a live ID and no malloc reuses a live ID), so a replay
// never discovers a malformed trace half way through, and every error names
// file:line. The format is specified in docs/trace-format.md.
//
// Invariants of a parsed trace: ops are in file order (the global order a
// replay keeps); a malloc's `id` is not live at that point and a free's `id`
// is; malloc sizes are > 0; streams are in [0, kMaxStreams). Nothing here
// depends on libvpmm: only the C++ standard library.
#pragma once

#include <cstdint>
#include <functional>
#include <istream>
#include <string>
#include <vector>

namespace vtrace {

// Streams are small integers; a trace naming more than this many is almost
// certainly a mis-parsed column, and each one costs a real stream at replay.
constexpr int kMaxStreams = 1024;

enum class OpKind : uint8_t { kMalloc, kFree, kSync };

struct TraceOp {
  OpKind kind = OpKind::kSync;
  bool in_pages = false;  // malloc: `size` counts pages of the replay's page size (the `p` unit)
  int32_t stream = 0;     // 0 = default stream; sync: -1 = every stream the trace uses
  uint32_t id = 0;        // malloc/free: dense index of the ID token (Trace::ids)
  uint32_t line = 0;      // 1-based line in the source, for messages
  uint64_t size = 0;      // malloc: bytes, or pages when in_pages; free/sync: 0
  // free of a snapshot: how many ops later PyTorch completed it (its
  // 'free_completed' came after other events: memory another stream still
  // used, record_stream); 0 = at once. `vpmm replay --lag` keeps the memory
  // pending that long; nothing else reads it.
  uint32_t lag = 0;
};

enum class TraceFormat : uint8_t { kNative, kRmmCsv };

struct Trace {
  std::string name;               // the path (or a caller-chosen name): prefix of messages
  TraceFormat format = TraceFormat::kNative;
  std::vector<TraceOp> ops;
  std::vector<std::string> ids;   // ID token of each dense id, for messages
  uint64_t skipped_failures = 0;  // RMM "allocate failure" rows (nothing to replay)
};

// Parse a size token: decimal or 0x-hex integer, optional suffix K/M/G/T
// (powers of 1024; KB/KiB spellings and a plain B accepted, any case), or the
// unit `p` (pages: *in_pages = true and *value counts pages). Rejects zero,
// signs, fractions, overflow and anything else. in_pages may be NULL, in which
// case `p` is rejected (for places that have no page size).
bool parse_size(const std::string& token, uint64_t* value, bool* in_pages);

// Parse a whole trace from a stream/string/file. On failure *err is
// "NAME:LINE: what is wrong" (or "NAME: ..." when no line applies) and *out is
// untouched.
bool parse_trace_stream(std::istream& in, const std::string& name, Trace* out, std::string* err);
bool parse_trace_text(const std::string& text, const std::string& name, Trace* out,
                      std::string* err);
bool load_trace(const std::string& path, Trace* out, std::string* err);

// The ops only, for callers that need nothing else (benchmarks).
bool parse_trace(const std::string& path, std::vector<TraceOp>* ops, std::string* err);

// Bytes a malloc op asks for under a given page size. False on overflow.
bool op_bytes(const TraceOp& op, uint64_t page_size, uint64_t* bytes);

// Static facts of a trace, computed without an allocator: what a replay
// needs to size its pool and create its streams.
struct TraceSummary {
  uint64_t mallocs = 0, frees = 0, syncs = 0;
  uint64_t peak_requested = 0;   // max over the trace of the sum of live requested bytes
  uint64_t final_requested = 0;  // requested bytes still live at the end
  std::vector<int> streams;      // stream indices used, ascending (0 always included)
};
// False only when a `p` size overflows under page_size; *err is then
// "LINE: what" (the caller prefixes the trace's name).
bool summarize_trace(const std::vector<TraceOp>& ops, uint64_t page_size, TraceSummary* out,
                     std::string* err);

// What the engine calls. malloc/free/sync are required; after is optional.
// A hook returns false and fills *err to stop the replay; the engine then
// returns false with "WHERE:LINE: " prefixed to that message.
struct ReplayHooks {
  // Allocate `bytes` for op (op.stream says where); store the pointer in *ptr.
  std::function<bool(const TraceOp& op, uint64_t bytes, void** ptr, std::string* err)> malloc;
  // Free `ptr` (allocated with `bytes`) on op.stream.
  std::function<bool(const TraceOp& op, void* ptr, uint64_t bytes, std::string* err)> free;
  // Synchronize one stream. A trace's `sync` without a stream arrives as one
  // call per stream the trace uses, in ascending order.
  std::function<bool(int stream, std::string* err)> sync;
  // Called after each op with the number of ops done so far (1-based), e.g.
  // to check invariants or record a timeline.
  std::function<bool(size_t done, const TraceOp& op, std::string* err)> after;
};

struct ReplayLive {
  void* ptr;
  uint64_t bytes;
  int stream;  // stream of the malloc
};

struct ReplayResult {
  size_t ops_done = 0;
  uint64_t mallocs = 0, frees = 0, syncs = 0;
  uint64_t peak_requested = 0, final_requested = 0;
  std::vector<ReplayLive> live;  // allocations still live at the end (or at the failure)
};

// Replay ops in order, mapping each trace ID to the pointer its malloc
// returned, so frees reach the new pointers. `where` prefixes messages (the
// trace's name). On failure *res still describes what was done and what is
// live, so the caller can clean up.
bool replay_trace(const std::vector<TraceOp>& ops, uint64_t page_size, const ReplayHooks& hooks,
                  ReplayResult* res, std::string* err, const std::string& where = "trace");

}  // namespace vtrace
