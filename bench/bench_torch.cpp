// PyTorch's CUDA caching allocator through its C++ API
// (c10::cuda::CUDACachingAllocator::raw_alloc_with_stream / raw_delete), on
// the same workloads as bench_vpmm.cu (bench_common.hpp): the hot path, the
// fragmentation traces, and growth (the first allocation of 8 and 32 GiB
// after emptyCache(), as bench_vpmm times libvpmm's growth). The allocator's
// mode comes from
// PYTORCH_CUDA_ALLOC_CONF, read once per process, so scripts/gpu-run.sh runs
// this program twice: native, and with expandable_segments:True.
//
// Not built by meson (PyTorch is not a project dependency): scripts/gpu-run.sh
// compiles it with g++ against the torch headers and libc10 / libc10_cuda of
// the Python installation, when there is one.
//
// Usage: bench_torch [--quick] [--only hotpath,frag,growth] [trace files...]
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <cuda_runtime_api.h>

#include <chrono>
#include <exception>
#include <set>
#include <thread>

#include "bench_common.hpp"

using namespace bench;
namespace cca = c10::cuda::CUDACachingAllocator;

namespace {

bool g_quick = false;

std::string mode_name() {
  const char* conf = std::getenv("PYTORCH_CUDA_ALLOC_CONF");
  std::string c = conf ? conf : "";
  return c.find("expandable_segments:True") != std::string::npos ? "torch_expandable" : "torch_native";
}

class TorchAlloc : public Allocator {
 public:
  TorchAlloc() : name_(mode_name()) {}
  ~TorchAlloc() override {
    cudaDeviceSynchronize();
    cca::emptyCache();
  }
  std::string name() const override { return name_; }
  void* alloc(uint64_t n, cudaStream_t s) override {
    try {
      return cca::raw_alloc_with_stream(n, s);
    } catch (const std::exception&) {
      return nullptr;  // c10::OutOfMemoryError after the allocator's own retry
    }
  }
  void free(void* p, uint64_t, cudaStream_t) override { cca::raw_delete(p); }
  void reset_peaks() override { cca::resetPeakStats(0); }
  uint64_t peak_physical() override { return cca::getDeviceStats(0).reserved_bytes[0].peak; }
  uint64_t physical() override { return cca::getDeviceStats(0).reserved_bytes[0].current; }
  uint64_t peak_rounded_live() override { return cca::getDeviceStats(0).allocated_bytes[0].peak; }
  uint64_t release_all() override {
    cudaDeviceSynchronize();
    cca::emptyCache();
    return physical();
  }
  std::string extra() override {
    auto st = cca::getDeviceStats(0);
    return "allocated_peak=" + std::to_string(st.allocated_bytes[0].peak) +
           " num_alloc_retries=" + std::to_string(st.num_alloc_retries) +
           " num_ooms=" + std::to_string(st.num_ooms);
  }

 private:
  std::string name_;
};

// First allocation of 8 and 32 GiB with nothing cached: emptyCache(), then
// raw_alloc_with_stream + cudaDeviceSynchronize timed on the CPU (the native
// allocator's cudaMalloc, or expandable segments' create + map). 1 warm-up +
// 5 timed runs (1 + 1 with --quick), 300 ms apart as in bench_vpmm's growth
// section (released memory is scrubbed in the background). Release =
// raw_delete + emptyCache + cudaDeviceSynchronize.
void bench_growth(cudaStream_t s) {
  const uint64_t sizes[] = {8 * GiB, 32 * GiB};
  const int reps = g_quick ? 1 : 5, warm = 1;
  auto settle = [] { std::this_thread::sleep_for(std::chrono::milliseconds(g_quick ? 10 : 300)); };
  const std::string name = mode_name();
  for (uint64_t sz : sizes) {
    std::vector<double> grow_us, release_us;
    std::string error;
    for (int r = 0; r < warm + reps; ++r) {
      cudaDeviceSynchronize();
      cca::emptyCache();
      cudaDeviceSynchronize();
      double t0 = now_us();
      void* p = nullptr;
      try {
        p = cca::raw_alloc_with_stream(sz, s);
      } catch (const std::exception& e) {
        error = e.what();
        size_t nl = error.find('\n');
        if (nl != std::string::npos) error.resize(nl);
      }
      cudaDeviceSynchronize();
      double t1 = now_us();
      if (!p) {
        if (error.empty()) error = "raw_alloc_with_stream returned null";
        std::printf("# growth: %s alloc of %llu bytes failed: %s\n", name.c_str(), (unsigned long long)sz,
                    error.c_str());
        break;
      }
      cca::raw_delete(p);
      cca::emptyCache();
      cudaDeviceSynchronize();
      double t2 = now_us();
      if (r >= warm) {
        grow_us.push_back(t1 - t0);
        release_us.push_back(t2 - t1);
      }
      settle();
    }
    Result res("growth");
    res.str("alloc", name).num("bytes", double(sz)).boolean("ok", error.empty()).num("us", median(grow_us))
        .num("min_us", grow_us.empty() ? NAN : *std::min_element(grow_us.begin(), grow_us.end()))
        .nums("runs", grow_us).num("release_us", median(release_us));
    if (!error.empty()) res.str("error", error);
    res.emit();
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::set<std::string> only;
  std::vector<std::string> trace_files;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--quick") {
      g_quick = true;
    } else if (a == "--only" && i + 1 < argc) {
      std::string list = argv[++i];
      size_t pos = 0;
      while (pos != std::string::npos) {
        size_t c = list.find(',', pos);
        only.insert(list.substr(pos, c == std::string::npos ? c : c - pos));
        pos = c == std::string::npos ? c : c + 1;
      }
    } else {
      trace_files.push_back(a);
    }
  }
  auto want = [&](const char* k) { return only.empty() || only.count(k); };
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n < 1) {
    std::printf("SKIP: no CUDA device\n");
    return 77;
  }
  cudaSetDevice(0);
  cudaFree(nullptr);
  cca::init(static_cast<int>(c10::cuda::device_count()));
  Result("torch").str("alloc", mode_name()).emit();

  cudaStream_t streams[kMaxStreams];
  for (auto& s : streams) cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);

  if (want("hotpath")) {
    TorchAlloc a;
    const struct {
      const char* label;
      uint64_t bytes;
    } sizes[] = {{"4KiB", 4 * KiB}, {"1MiB", MiB}, {"2MiB", 2 * MiB}, {"64MiB", 64 * MiB}};
    const int fast_n = g_quick ? 2000 : 50000, reps = 7;
    std::vector<double> runs;
    for (const auto& sz : sizes) {
      bool ok = false;
      double us = hot_pairs(a, sz.bytes, streams[0], fast_n, reps, 1000, &runs, &ok);
      Result("hotpath").str("alloc", a.name()).str("case", sz.label).boolean("ok", ok).num("us", us)
          .num("min_us", runs.empty() ? NAN : *std::min_element(runs.begin(), runs.end())).nums("runs", runs).emit();
    }
    bool ok = false;
    double us = hot_churn(a, streams[0], fast_n, reps, 2000, &runs, &ok);
    Result("hotpath").str("alloc", a.name()).str("case", "churn").boolean("ok", ok).num("us", us)
        .num("min_us", runs.empty() ? NAN : *std::min_element(runs.begin(), runs.end())).nums("runs", runs).emit();
  }
  if (want("frag")) {
    std::vector<Trace> traces{walkthrough_trace(), training_trace()};
    for (const std::string& f : trace_files) {
      Trace t;
      std::string e = load_trace(f, &t);
      if (e.empty()) traces.push_back(std::move(t));
      else std::printf("# skipping trace %s\n", e.c_str());
    }
    for (const Trace& t : traces) {
      uint64_t cap = trace_cap(t);
      Blocker block(cap);
      TorchAlloc a;
      ReplayResult r = replay(a, t, streams, true, cap);
      emit_frag(a.name(), t, r);
    }
  }
  if (want("growth")) bench_growth(streams[0]);
  for (auto& s : streams) cudaStreamDestroy(s);
  std::printf("# done\n");
  return 0;
}
