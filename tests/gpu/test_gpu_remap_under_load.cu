// Remap under in-flight work (issue 42, deliverable 7): kernels of several
// streams keep writing and verifying patterns they own over live allocations
// while the pool reaps zombies (Phase 0), moves free pages (Phase 2), maps
// views, trims and pauses and resumes another tag around them; then no
// kernel may have faulted and every byte must be intact. The workload is
// bench/probes/remap_load.cuh (the probe of the same name runs it for
// minutes). VPMM_REMAP_LOAD_SECONDS sets the churn time of each case
// (default 30: about a minute for the program).
#include <cstdlib>

#include "gpu_util.cuh"
#include "../../bench/probes/remap_load.cuh"

namespace {

double case_seconds() {
  const char* v = std::getenv("VPMM_REMAP_LOAD_SECONDS");
  const double s = v && *v ? std::atof(v) : 30.0;
  return s > 0 ? s : 30.0;
}

void check_result(const remap_load::Options& o, const remap_load::Result& r, const char* what) {
  remap_load::print(what, o, r);
  CHECK_MSG(r.device == cudaSuccess, "cudaDeviceSynchronize at the end: %s (a kernel faulted)",
            cudaGetErrorName(r.device));
  gt::die_if_sticky(r.device);
  CHECK_MSG(r.launch == cudaSuccess, "a worker's launch failed: %s", cudaGetErrorName(r.launch));
  CHECK_EQ(r.worker_bad, 0ull);  // no worker kernel read a byte it did not write
  CHECK_EQ(r.churn_bad, 0ull);   // nor a churn kernel, nor the other tag after its resumes
  CHECK_EQ(r.final_bad, 0ull);   // every worker allocation holds its last pattern
  CHECK_MSG(r.unexpected == 0, "%llu pool calls failed: %s", r.unexpected, r.first_error.c_str());
  CHECK_MSG(r.check.empty(), "vpmm_pool_check: %s", r.check.c_str());
  CHECK(r.launches > 0 && r.passes > 0);
  CHECK(r.replaced > 0);  // stream-ordered frees behind the workers' own kernels
  CHECK(r.big_served > 0 && r.trims > 0 && r.pauses > 0);
}

}  // namespace

GPU_TEST("views off: Phase 2 moves free pages, trim and another tag's pause around running kernels") {
  remap_load::Options o;
  o.seconds = case_seconds();
  o.views = false;
  const remap_load::Result r = remap_load::run(o);
  check_result(o, r, "Phase 2");
  CHECK(r.stats.n_defrag > 0);  // the large requests moved pages
  CHECK(r.stats.bytes_remapped > 0);
}

GPU_TEST("views on: views over free handles, trim and another tag's pause around running kernels") {
  remap_load::Options o;
  o.seconds = case_seconds();
  o.views = true;
  const remap_load::Result r = remap_load::run(o);
  check_result(o, r, "views");
  CHECK(r.stats.n_view_malloc > 0);  // the large requests were views
}

GPU_TEST_MAIN()
