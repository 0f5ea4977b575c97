// Probe (not part of the build): remap under in-flight work for as long as
// asked (bench/probes/remap_load.cuh says what runs), the Phase 2 pool and
// the views pool one after the other, each for SECONDS of churn (default
// 300), with WORKERS worker streams (default 4); prints what the pool did
// and exits 1 on a fault or a byte out of place. The GPU suite's
// tests/gpu/test_gpu_remap_under_load.cu is the same workload for a minute.
//   nvcc -O2 -std=c++17 -gencode arch=compute_90,code=sm_90 -Iinclude -Ibuild \
//     bench/probes/remap_under_load_probe.cu -Lbuild -lvpmm -Xlinker -rpath=$PWD/build -o /tmp/rulp
//   /tmp/rulp [SECONDS] [WORKERS]
#include <cstdlib>

#include "remap_load.cuh"

int main(int argc, char** argv) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n < 1) {
    std::printf("no CUDA device\n");
    return 77;
  }
  cudaDeviceProp prop;
  if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess)
    std::printf("device 0: %s, sm_%d%d\n", prop.name, prop.major, prop.minor);
  remap_load::Options o;
  o.seconds = argc > 1 ? std::atof(argv[1]) : 300;
  o.workers = argc > 2 ? std::atoi(argv[2]) : 4;
  o.verbose = true;
  bool ok = true;
  for (bool views : {false, true}) {
    o.views = views;
    const remap_load::Result r = remap_load::run(o);
    remap_load::print(views ? "views" : "Phase 2", o, r);
    ok = ok && r.ok() && (views ? r.stats.n_view_malloc > 0 : r.stats.n_defrag > 0);
    if (r.device != cudaSuccess) break;  // a sticky fault: nothing more can run
  }
  std::printf("%s\n", ok ? "PASS: no fault, every byte intact" : "FAIL");
  return ok ? 0 : 1;
}
