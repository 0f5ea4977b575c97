// What every benchmark program shares (bench_vpmm.cu and bench_torch.cpp):
// timing and medians, the machine-readable result lines report.py turns into
// bench/results/h100.md, the allocator interface the workloads run against,
// the hot-path and churn workloads, the trace format and its replay with
// fragmentation accounting, and the synthetic training-like trace.
//
// Plain C++17 + the CUDA runtime API (no kernels), so g++ builds it for the
// PyTorch program and nvcc for the rest. Every workload is deterministic
// (fixed seeds): each allocator sees exactly the same sequence.
//
// Result lines: `RESULT {json}` on stdout, one per measurement.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

namespace bench {

constexpr uint64_t KiB = 1ull << 10;
constexpr uint64_t MiB = 1ull << 20;
constexpr uint64_t GiB = 1ull << 30;
constexpr uint64_t kPage = 2 * MiB;  // trace `Np` unit and CUDA VMM granularity on the H100
constexpr int kMaxStreams = 8;

inline double now_us() {
  return std::chrono::duration<double, std::micro>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

inline double median(std::vector<double> v) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

inline double percentile(std::vector<double> v, double q) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  size_t i = static_cast<size_t>(q * (v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

// A flat JSON object built field by field: RESULT {"k": v, ...}.
class Result {
 public:
  explicit Result(const char* bench) { str("bench", bench); }
  Result& str(const char* k, const std::string& v) {
    std::string e;
    for (char c : v) {
      if (c == '"' || c == '\\') e += '\\';
      if (c == '\n') { e += "\\n"; continue; }
      e += c;
    }
    add(k, "\"" + e + "\"");
    return *this;
  }
  Result& num(const char* k, double v) {
    char b[64];
    if (std::isnan(v) || std::isinf(v)) std::snprintf(b, sizeof b, "null");
    else if (v == std::floor(v) && std::fabs(v) < 9e15) std::snprintf(b, sizeof b, "%.0f", v);
    else std::snprintf(b, sizeof b, "%.6g", v);
    add(k, b);
    return *this;
  }
  Result& boolean(const char* k, bool v) {
    add(k, v ? "true" : "false");
    return *this;
  }
  Result& nums(const char* k, const std::vector<double>& v) {
    std::string s = "[";
    for (size_t i = 0; i < v.size(); ++i) {
      char b[64];
      std::snprintf(b, sizeof b, "%s%.6g", i ? ", " : "", v[i]);
      s += b;
    }
    add(k, s + "]");
    return *this;
  }
  void emit() const {
    std::printf("RESULT {%s}\n", body_.c_str());
    std::fflush(stdout);
  }

 private:
  void add(const char* k, const std::string& v) {
    if (!body_.empty()) body_ += ", ";
    body_ += "\"" + std::string(k) + "\": " + v;
  }
  std::string body_;
};

// ---------------------------------------------------------------------------
// The allocator interface
// ---------------------------------------------------------------------------
class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual std::string name() const = 0;
  // nullptr on failure (out of memory); never throws.
  virtual void* alloc(uint64_t n, cudaStream_t s) = 0;
  virtual void free(void* p, uint64_t n, cudaStream_t s) = 0;
  // Fragmentation accounting: start a fresh peak, then read it.
  virtual void reset_peaks() {}
  virtual uint64_t peak_physical() = 0;  // bytes of device memory held, at peak
  virtual uint64_t physical() = 0;       // bytes of device memory held now
  // The allocator's own peak of live bytes after its rounding (0 = unknown):
  // peak physical over this separates fragmentation from rounding.
  virtual uint64_t peak_rounded_live() { return 0; }
  // Gives every cached byte back (trim / emptyCache / TrimTo(0)) once
  // nothing is live; returns the bytes still held afterwards.
  virtual uint64_t release_all() { return physical(); }
  virtual std::string extra() { return ""; }  // allocator-specific notes for the report
};

// ---------------------------------------------------------------------------
// Hot path: alloc+free pairs of one size, and the mixed churn
// ---------------------------------------------------------------------------
// Median over `reps` runs of `n` pairs (after `warm` pairs), in us per pair.
inline double hot_pairs(Allocator& a, uint64_t size, cudaStream_t s, int n, int reps, int warm,
                        std::vector<double>* runs, bool* ok) {
  *ok = true;
  for (int i = 0; i < warm; ++i) {
    void* p = a.alloc(size, s);
    if (!p) { *ok = false; return NAN; }
    a.free(p, size, s);
  }
  runs->clear();
  for (int r = 0; r < reps; ++r) {
    double t0 = now_us();
    for (int i = 0; i < n; ++i) {
      void* p = a.alloc(size, s);
      if (!p) { *ok = false; return NAN; }
      a.free(p, size, s);
    }
    runs->push_back((now_us() - t0) / n);
  }
  return median(*runs);
}

struct ChurnOp {
  uint32_t slot;
  uint64_t size;
};

// 64 live slots; each op frees one random slot and allocates a new random
// size there (log-uniform 4 KiB .. 16 MiB, byte-granular). Fixed seed.
inline std::vector<ChurnOp> churn_ops(size_t count, uint64_t seed = 42) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> lg(std::log(4096.0), std::log(16.0 * MiB));
  std::vector<ChurnOp> ops(count);
  for (auto& o : ops) {
    o.slot = static_cast<uint32_t>(rng() % 64);
    o.size = static_cast<uint64_t>(std::exp(lg(rng)));
  }
  return ops;
}

// Median us per (free + alloc) pair of the churn after filling the 64 slots
// and `warm` ops. The ops vector must hold 64 + warm + reps * n entries.
inline double hot_churn(Allocator& a, cudaStream_t s, int n, int reps, int warm,
                        std::vector<double>* runs, bool* ok) {
  *ok = true;
  std::vector<ChurnOp> ops = churn_ops(64 + warm + size_t(reps) * n);
  std::vector<std::pair<void*, uint64_t>> slot(64, {nullptr, 0});
  size_t k = 0;
  for (; k < 64; ++k) {
    slot[k].first = a.alloc(ops[k].size, s);
    slot[k].second = ops[k].size;
    if (!slot[k].first) { *ok = false; return NAN; }
  }
  auto step = [&](const ChurnOp& o) {
    a.free(slot[o.slot].first, slot[o.slot].second, s);
    slot[o.slot].first = a.alloc(o.size, s);
    slot[o.slot].second = o.size;
    return slot[o.slot].first != nullptr;
  };
  for (int i = 0; i < warm; ++i, ++k)
    if (!step(ops[k])) { *ok = false; break; }
  runs->clear();
  for (int r = 0; r < reps && *ok; ++r) {
    double t0 = now_us();
    for (int i = 0; i < n; ++i, ++k)
      if (!step(ops[k])) { *ok = false; break; }
    runs->push_back((now_us() - t0) / n);
  }
  for (auto& sl : slot)
    if (sl.first) a.free(sl.first, sl.second, s);
  return *ok ? median(*runs) : NAN;
}

// ---------------------------------------------------------------------------
// Traces
// ---------------------------------------------------------------------------
// Format (shared with tools/trace): one op per line,
//   malloc ID SIZE [STREAM]    SIZE: bytes, with K/M/G (powers of 1024), or Np pages
//   free ID [STREAM]
//   sync [STREAM]              no STREAM: every stream
// '#' starts a comment; blank lines are ignored. STREAM is a small integer
// (0 when absent); IDs are any token.
struct Op {
  enum Kind { kMalloc, kFree, kSync } kind;
  uint32_t id = 0;
  uint64_t size = 0;
  int stream = 0;  // -1 for sync of every stream
};

struct Trace {
  std::string name;
  std::vector<Op> ops;
  uint64_t peak_live = 0;   // max over the trace of the sum of requested bytes
  uint64_t final_live = 0;  // requested bytes still live at the end
  int streams = 1;
};

inline bool parse_size(const std::string& t, uint64_t* out) {
  if (t.empty()) return false;
  char* end = nullptr;
  double v = std::strtod(t.c_str(), &end);
  if (end == t.c_str() || v < 0) return false;
  std::string suf(end);
  double mul = 1;
  if (suf.empty() || suf == "B") mul = 1;
  else if (suf == "K" || suf == "KB" || suf == "KiB" || suf == "k") mul = double(KiB);
  else if (suf == "M" || suf == "MB" || suf == "MiB") mul = double(MiB);
  else if (suf == "G" || suf == "GB" || suf == "GiB") mul = double(GiB);
  else if (suf == "T" || suf == "TB" || suf == "TiB") mul = double(GiB) * 1024;
  else if (suf == "p" || suf == "P") mul = double(kPage);
  else return false;
  *out = static_cast<uint64_t>(v * mul + 0.5);
  return *out > 0;
}

// Fills peak_live / final_live / streams; validates ids. "" when fine.
inline std::string finish_trace(Trace* t) {
  std::unordered_map<uint32_t, uint64_t> live;
  uint64_t cur = 0;
  t->peak_live = 0;
  t->streams = 1;
  for (size_t i = 0; i < t->ops.size(); ++i) {
    const Op& o = t->ops[i];
    if (o.stream >= kMaxStreams) return "stream index too large at op " + std::to_string(i);
    t->streams = std::max(t->streams, o.stream + 1);
    if (o.kind == Op::kMalloc) {
      if (live.count(o.id)) return "id reused while live at op " + std::to_string(i);
      live[o.id] = o.size;
      cur += o.size;
      t->peak_live = std::max(t->peak_live, cur);
    } else if (o.kind == Op::kFree) {
      auto it = live.find(o.id);
      if (it == live.end()) return "free of an unknown id at op " + std::to_string(i);
      cur -= it->second;
      live.erase(it);
    }
  }
  t->final_live = cur;
  return "";
}

inline std::string parse_trace(std::istream& in, const std::string& name, Trace* out) {
  Trace t;
  t.name = name;
  std::unordered_map<std::string, uint32_t> ids;
  std::string line;
  int lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    size_t hash = line.find('#');
    if (hash != std::string::npos) line.resize(hash);
    std::istringstream ss(line);
    std::string verb;
    if (!(ss >> verb)) continue;
    Op o;
    std::string a, b, c;
    auto stream_of = [&](const std::string& tok, int* s) {
      if (tok.empty()) return true;
      char* end = nullptr;
      long v = std::strtol(tok.c_str(), &end, 10);
      if (*end || v < 0) return false;
      *s = static_cast<int>(v);
      return true;
    };
    auto id_of = [&](const std::string& tok) {
      auto it = ids.find(tok);
      if (it != ids.end()) return it->second;
      uint32_t v = static_cast<uint32_t>(ids.size());
      ids.emplace(tok, v);
      return v;
    };
    if (verb == "malloc" || verb == "alloc") {
      ss >> a >> b >> c;
      o.kind = Op::kMalloc;
      if (a.empty() || !parse_size(b, &o.size) || !stream_of(c, &o.stream))
        return name + ":" + std::to_string(lineno) + ": bad malloc line";
      o.id = id_of(a);
    } else if (verb == "free") {
      ss >> a >> c;
      o.kind = Op::kFree;
      if (a.empty() || !stream_of(c, &o.stream))
        return name + ":" + std::to_string(lineno) + ": bad free line";
      o.id = id_of(a);
    } else if (verb == "sync") {
      ss >> c;
      o.kind = Op::kSync;
      o.stream = -1;
      if (!c.empty() && !stream_of(c, &o.stream))
        return name + ":" + std::to_string(lineno) + ": bad sync line";
    } else {
      continue;  // unknown verbs (e.g. future extensions) are skipped
    }
    t.ops.push_back(o);
  }
  std::string e = finish_trace(&t);
  if (!e.empty()) return name + ": " + e;
  *out = std::move(t);
  return "";
}

inline std::string load_trace(const std::string& path, Trace* out) {
  std::ifstream f(path);
  if (!f) return path + ": cannot open";
  std::string name = path;
  size_t slash = name.find_last_of('/');
  if (slash != std::string::npos) name = name.substr(slash + 1);
  if (name.size() > 6 && name.substr(name.size() - 6) == ".trace") name.resize(name.size() - 6);
  return parse_trace(f, name, out);
}

// The seed's walkthrough: +10 > +1 > -10 > +4 > +11 pages on one stream; the
// survivors ([1], [4], [11]) stay live at the end.
inline Trace walkthrough_trace() {
  std::istringstream s(
      "malloc a 10p\nmalloc b 1p\nfree a\nmalloc c 4p\nmalloc d 11p\n");
  Trace t;
  parse_trace(s, "walkthrough", &t);
  return t;
}

// A synthetic training-like trace, deterministic: a 16-layer transformer-ish
// model (hidden 1024, batch 4, bf16) over 8 steps with a different sequence
// length each step (ragged batches: sizes not page multiples), on 3 streams
// (0 compute, 1 gradient communication buckets, 2 input loading).
//  - persistent: parameters; Adam states (fp32 m, v) from the first step on
//  - per step: inputs on stream 2 (freed on stream 0 after a sync of 2);
//    forward: per layer saved activations + temporaries freed at once, small
//    norm statistics; the loss: logits and their gradient (large, transient);
//    backward in reverse: gradient temporaries, the layer's saved activations
//    freed, parameter gradients allocated (set_to_none), bucketed into
//    communication buffers on stream 1 every 4 layers; optimizer: an fp32
//    temporary per parameter; gradients freed; sync at the step end.
inline Trace training_trace(uint64_t seed = 7) {
  std::mt19937_64 rng(seed);
  Trace t;
  t.name = "training_synth";
  uint32_t next = 0;
  auto mal = [&](uint64_t n, int s) {
    Op o;
    o.kind = Op::kMalloc;
    o.id = next++;
    o.size = std::max<uint64_t>(n, 1);
    o.stream = s;
    t.ops.push_back(o);
    return o.id;
  };
  auto fre = [&](uint32_t id, int s) {
    Op o;
    o.kind = Op::kFree;
    o.id = id;
    o.stream = s;
    t.ops.push_back(o);
  };
  auto syn = [&](int s) {
    Op o;
    o.kind = Op::kSync;
    o.stream = s;
    t.ops.push_back(o);
  };
  const uint64_t h = 1024, L = 16, b = 4, vocab = 32000, bf = 2;
  // Parameters per layer: qkv (3h^2), out (h^2), mlp up (4h^2), down (4h^2), 2 norms (h).
  const uint64_t pshape[] = {3 * h * h, h * h, 4 * h * h, 4 * h * h, h, h};
  std::vector<uint32_t> params;
  std::vector<uint64_t> psize;
  uint32_t emb = mal(vocab * h * bf, 0);
  params.push_back(emb);
  psize.push_back(vocab * h * bf);
  for (uint64_t l = 0; l < L; ++l)
    for (uint64_t e : pshape) {
      params.push_back(mal(e * bf, 0));
      psize.push_back(e * bf);
    }
  std::vector<uint32_t> adam;
  const int steps = 8;
  for (int step = 0; step < steps; ++step) {
    const uint64_t seq = 300 + rng() % 1749;  // 300 .. 2048 tokens, ragged
    const uint64_t tok = b * seq;
    syn(2);
    uint32_t in_ids = mal(tok * 8, 2), labels = mal(tok * 8, 2);
    syn(2);
    // forward
    std::vector<std::vector<uint32_t>> saved(L);
    uint32_t x = mal(tok * h * bf, 0);
    for (uint64_t l = 0; l < L; ++l) {
      auto& s = saved[l];
      s.push_back(mal(tok * h * bf, 0));          // norm output
      s.push_back(mal(tok * 4 * 2, 0));           // norm statistics (small)
      uint32_t qkv = mal(tok * 3 * h * bf, 0);    // temporary
      s.push_back(mal(tok * h * bf, 0));          // attention output
      s.push_back(mal(b * 16 * seq * 4, 0));      // softmax lse (small)
      fre(qkv, 0);
      s.push_back(mal(tok * 4 * h * bf, 0));      // mlp up
      s.push_back(mal(tok * 4 * h * bf, 0));      // activation
      uint32_t tmp = mal(tok * h * bf, 0);        // residual temp
      fre(tmp, 0);
      s.push_back(x);
      x = mal(tok * h * bf, 0);                   // layer output
    }
    uint32_t logits = mal(tok * vocab * bf, 0);
    uint32_t loss = mal(4, 0);
    uint32_t glogits = mal(tok * vocab * bf, 0);
    fre(logits, 0);
    uint32_t gx = mal(tok * h * bf, 0);
    fre(glogits, 0);
    fre(x, 0);
    // backward
    std::vector<uint32_t> grads(params.size(), UINT32_MAX);
    std::vector<uint32_t> bucket_grads;
    uint32_t bucket = UINT32_MAX;
    for (uint64_t li = L; li-- > 0;) {
      uint32_t t1 = mal(tok * 4 * h * bf, 0);
      uint32_t t2 = mal(tok * 3 * h * bf, 0);
      for (size_t k = 0; k < std::size(pshape); ++k) {
        size_t pi = 1 + li * std::size(pshape) + k;
        grads[pi] = mal(psize[pi], 0);
      }
      fre(t2, 0);
      fre(t1, 0);
      for (uint32_t id : saved[li]) fre(id, 0);
      uint32_t ngx = mal(tok * h * bf, 0);
      fre(gx, 0);
      gx = ngx;
      if (li % 4 == 0) {  // gradient bucket: all-reduce on stream 1
        syn(0);
        if (bucket != UINT32_MAX) fre(bucket, 1);
        bucket = mal(25 * MiB + (rng() % 4096) * 256, 1);
      }
    }
    grads[0] = mal(psize[0], 0);
    fre(gx, 0);
    fre(in_ids, 0);
    fre(labels, 0);
    fre(loss, 0);
    syn(1);
    if (bucket != UINT32_MAX) fre(bucket, 1);
    // optimizer
    if (adam.empty())
      for (size_t i = 0; i < params.size(); ++i) {
        adam.push_back(mal(psize[i] * 2, 0));  // fp32 m
        adam.push_back(mal(psize[i] * 2, 0));  // fp32 v
      }
    for (size_t i = 0; i < params.size(); ++i) {
      uint32_t tmp = mal(psize[i] * 2, 0);
      fre(tmp, 0);
    }
    for (uint32_t g : grads)
      if (g != UINT32_MAX) fre(g, 0);
    syn(-1);
  }
  finish_trace(&t);
  return t;
}

// ---------------------------------------------------------------------------
// Replay with fragmentation accounting
// ---------------------------------------------------------------------------
struct ReplayResult {
  bool ok = true;
  std::string error;
  uint64_t peak_physical = 0;
  uint64_t physical_end = 0;
  uint64_t largest_after = 0;  // largest single allocation served after the trace
  uint64_t cap = 0;            // device free memory the trace ran within
  uint64_t rounded_live = 0;   // the allocator's own live peak (0 = unknown)
  uint64_t held_after_release = 0;  // bytes still held after release_all()
  std::string extra;           // allocator notes, read before the probe
};

// Keeps the device's free memory at about `cap` bytes (a cudaMalloc of the
// rest) so "the largest allocation still served" is measured against a known
// budget and stays cheap to probe. cap 0: no blocker.
class Blocker {
 public:
  explicit Blocker(uint64_t cap) {
    if (cap == 0) return;
    size_t f = 0, t = 0;
    cudaMemGetInfo(&f, &t);
    if (f <= cap + 256 * MiB) return;
    uint64_t take = (f - cap) / (2 * MiB) * (2 * MiB);
    if (cudaMalloc(&p_, take) != cudaSuccess) {
      p_ = nullptr;
      cudaGetLastError();
    }
  }
  ~Blocker() {
    if (p_) cudaFree(p_);
  }
  Blocker(const Blocker&) = delete;
  Blocker& operator=(const Blocker&) = delete;

 private:
  void* p_ = nullptr;
};

inline uint64_t round_up(uint64_t v, uint64_t m) { return (v + m - 1) / m * m; }

// Largest n (multiple of `step`) in [0, hi] with a successful alloc(n), by
// bisection; each success is freed at once (the allocator may cache it).
inline uint64_t largest_alloc(Allocator& a, cudaStream_t s, uint64_t hi, uint64_t step) {
  uint64_t lo = 0;
  hi = hi / step * step;
  while (hi - lo > step) {
    uint64_t mid = (lo + hi) / 2 / step * step;
    if (mid <= lo) mid = lo + step;
    void* p = a.alloc(mid, s);
    if (p) {
      a.free(p, mid, s);
      cudaStreamSynchronize(s);
      lo = mid;
    } else {
      hi = mid;
    }
  }
  void* p = a.alloc(hi, s);
  if (p) {
    a.free(p, hi, s);
    cudaStreamSynchronize(s);
    return hi;
  }
  return lo;
}

// Replays `t` against `a` on `streams`, touching the first bytes of every
// allocation with a memset (real stream work, so events are real); then,
// with the trace's final live set still held, finds the largest allocation
// still served, then frees everything.
inline ReplayResult replay(Allocator& a, const Trace& t, cudaStream_t* streams, bool probe_largest,
                           uint64_t cap) {
  ReplayResult r;
  r.cap = cap;
  std::unordered_map<uint32_t, std::pair<void*, uint64_t>> live;
  std::unordered_map<uint32_t, int> live_stream;
  a.reset_peaks();
  for (size_t i = 0; i < t.ops.size() && r.ok; ++i) {
    const Op& o = t.ops[i];
    if (o.kind == Op::kMalloc) {
      void* p = a.alloc(o.size, streams[o.stream]);
      if (!p) {
        r.ok = false;
        r.error = "alloc of " + std::to_string(o.size) + " bytes failed at op " + std::to_string(i);
        break;
      }
      cudaMemsetAsync(p, 0x5a, std::min<uint64_t>(o.size, 4096), streams[o.stream]);
      live[o.id] = {p, o.size};
      live_stream[o.id] = o.stream;
    } else if (o.kind == Op::kFree) {
      auto it = live.find(o.id);
      a.free(it->second.first, it->second.second, streams[o.stream]);
      live.erase(it);
    } else if (o.stream < 0) {
      for (int k = 0; k < t.streams; ++k) cudaStreamSynchronize(streams[k]);
    } else {
      cudaStreamSynchronize(streams[o.stream]);
    }
  }
  for (int k = 0; k < t.streams; ++k) cudaStreamSynchronize(streams[k]);
  r.peak_physical = a.peak_physical();
  r.physical_end = a.physical();
  r.rounded_live = a.peak_rounded_live();
  r.extra = a.extra();
  if (r.ok && probe_largest && cap) {
    size_t f = 0, tot = 0;
    cudaMemGetInfo(&f, &tot);
    r.largest_after = largest_alloc(a, streams[0], r.physical_end + f, 64 * MiB);
  }
  for (auto& kv : live) a.free(kv.second.first, kv.second.second, streams[live_stream[kv.first]]);
  for (int k = 0; k < t.streams; ++k) cudaStreamSynchronize(streams[k]);
  r.held_after_release = a.release_all();
  if (cudaGetLastError() != cudaSuccess && r.ok) {
    r.ok = false;
    r.error = "a CUDA error during the replay";
  }
  return r;
}

// The budget a trace runs in: twice its peak live bytes plus 1 GiB, whole GiB.
inline uint64_t trace_cap(const Trace& t) { return round_up(2 * t.peak_live + GiB, GiB); }

inline void emit_frag(const std::string& alloc, const Trace& t, const ReplayResult& r) {
  Result res("frag");
  res.str("alloc", alloc).str("trace", t.name).boolean("ok", r.ok);
  res.num("peak_live", double(t.peak_live)).num("final_live", double(t.final_live));
  res.num("peak_physical", double(r.peak_physical));
  res.num("ratio", t.peak_live ? double(r.peak_physical) / double(t.peak_live) : NAN);
  res.num("cap", double(r.cap)).num("largest_after", double(r.largest_after));
  // What an ideal allocator could still serve: the budget minus what is live.
  double ideal = double(r.cap) - double(round_up(t.final_live, kPage));
  res.num("largest_ideal", ideal);
  res.num("rounded_live", double(r.rounded_live));
  res.num("held_after_release", double(r.held_after_release));
  if (!r.error.empty()) res.str("error", r.error);
  if (!r.extra.empty()) res.str("extra", r.extra);
  res.emit();
}

}  // namespace bench
