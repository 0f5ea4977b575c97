// Sharing pool memory between two processes on one GPU (docs/ipc.md): a
// trainer (this process) exports a 4 GiB weight tensor of an exportable CUDA
// pool, a rollout process (this binary again, fork + exec, commands over a
// Unix socket: tests/unit/ipc_harness.hpp) imports it into its own pool,
// reads it with a kernel and writes it back; then the trainer pauses and
// resumes the tag, and a weight-sync loop of 100 updates copies the weights
// into the rollout's own buffer after each trainer update. Kernels do every
// read and write. Device memory is counted with cudaMemGetInfo: after a pause
// the exporter's memory stays in use while the rollout still maps it, and
// comes back when the rollout closes.
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "ipc_rollout.cuh"

namespace {

using gt::GiB;
using gt::MiB;
using gt::bad_words;
using gt::send_to;

constexpr uint64_t kWeights = 4 * GiB;

vpmm_pool* cuda_pool(bool exportable) { return gt::ipc_cuda_pool(exportable); }
void fill(void* p, uint64_t bytes, uint64_t seed) { gt::fill_words(p, bytes, seed); }

uint64_t device_free() {
  size_t f = 0, t = 0;
  cudaMemGetInfo(&f, &t);
  return f;
}

// --- the trainer ----------------------------------------------------------------
void* malloc_weights(vpmm_pool* p, uint64_t bytes) {
  vpmm_alloc_attrs a;
  std::memset(&a, 0, sizeof a);
  a.struct_size = sizeof a;
  a.tag = "weights";
  a.flags = VPMM_ALLOC_HOST_BACKUP;
  void* w = nullptr;
  vpmm_status st = vpmm_pool_malloc_ex(p, bytes, nullptr, &a, &w);
  if (st != VPMM_OK) std::printf("  malloc: %s\n", vpmm_last_error());
  return w;
}

int64_t rollout_bad(vt::Child& ch, int64_t i, uint64_t seed) {
  int64_t bad = -1;
  ch.ask('V', i, static_cast<int64_t>(seed), &bad);
  return bad;
}

int32_t rollout_state(vt::Child& ch, int64_t i) {
  int64_t st = -1, s = -1;
  ch.ask('S', i, 0, &st, &s);
  return st == VPMM_OK ? static_cast<int32_t>(s) : -1;
}

using vt::ipc_stats;

GPU_TEST("4 GiB of weights: trainer -> rollout, read and written back, across a pause and resume") {
  vpmm_pool* pool = cuda_pool(true);
  CHECK(pool != nullptr);
  if (!pool) return;
  void* w = malloc_weights(pool, kWeights);
  CHECK(w != nullptr);
  if (!w) return;
  fill(w, kWeights, 1);
  CUDA_OK(cudaDeviceSynchronize());
  vpmm_export* ex = nullptr;
  CHECK_OK(vpmm_pool_export(pool, w, &ex));
  vt::Child ch = vt::spawn_child();
  int64_t i = -1;
  const double t0 = gt::now_ms();
  CHECK_EQ(send_to(ch, ex, &i), VPMM_OK);
  std::printf("  export sent and imported in %.2f ms\n", gt::now_ms() - t0);
  CHECK_EQ(rollout_bad(ch, i, 1), 0);  // the rollout reads the trainer's bytes
  int64_t st = -1;
  ch.ask('W', i, 2, &st);              // and writes back
  CHECK_EQ(st, 0);
  CHECK_EQ(bad_words(w, kWeights, 2), 0u);
  fill(w, kWeights, 3);                // the trainer writes, the rollout sees it
  CUDA_OK(cudaDeviceSynchronize());
  CHECK_EQ(rollout_bad(ch, i, 3), 0);

  // Pause with the rollout still mapping the weights: the trainer releases
  // its handles, the device memory stays in use (the rollout holds it) until
  // the rollout closes its import.
  const uint64_t free_before = device_free();
  CHECK_OK(vpmm_pool_pause(pool, "weights"));
  const uint64_t free_paused = device_free();
  CHECK_EQ(rollout_state(ch, i), VPMM_EXPORT_PAUSED);
  CHECK_EQ(rollout_bad(ch, i, 3), 0);  // the old memory, still readable there
  CHECK_EQ(ipc_stats(pool).held_by_importers_bytes, kWeights);
  ch.ask('C', i, 0, &st);
  CHECK_EQ(st, VPMM_OK);
  const uint64_t free_closed = device_free();
  std::printf("  device free: before pause %.2f GiB, paused %.2f GiB, rollout closed %.2f GiB\n",
              free_before / double(GiB), free_paused / double(GiB), free_closed / double(GiB));
  CHECK(free_paused < free_before + GiB / 2);   // not given back while imported
  CHECK(free_closed > free_paused + 3 * GiB);   // given back at the importer's close
  CHECK_EQ(ipc_stats(pool).held_by_importers_bytes, 0u);

  // Resume: the same address, the same bytes (from the host backup), new
  // memory: the old export stays PAUSED, a new one shares the new memory.
  CHECK_OK(vpmm_pool_resume(pool, "weights"));
  CHECK_EQ(bad_words(w, kWeights, 3), 0u);
  vpmm_export* again = nullptr;
  CHECK_OK(vpmm_pool_export(pool, w, &again));
  int64_t j = -1;
  CHECK_EQ(send_to(ch, again, &j), VPMM_OK);
  CHECK_EQ(rollout_bad(ch, j, 3), 0);
  ch.ask('W', j, 4, &st);
  CHECK_EQ(bad_words(w, kWeights, 4), 0u);
  int32_t s = 0;
  CHECK_OK(vpmm_export_state(ex, &s, nullptr, nullptr));
  CHECK_EQ(s, VPMM_EXPORT_PAUSED);
  ch.ask('C', j, 0, &st);
  CHECK_EQ(st, VPMM_OK);
  CHECK_EQ(ch.quit(), 0);
  CHECK_OK(vpmm_export_close(pool, ex));
  CHECK_OK(vpmm_export_close(pool, again));
  CHECK_OK(vpmm_pool_free(pool, w, nullptr));
  CHECK_OK(vpmm_pool_destroy(pool));
}

GPU_TEST("weight sync: 100 updates copied by the rollout through one import") {
  vpmm_pool* pool = cuda_pool(true);
  if (!pool) return;
  void* w = malloc_weights(pool, kWeights);
  CHECK(w != nullptr);
  if (!w) return;
  vpmm_export* ex = nullptr;
  CHECK_OK(vpmm_pool_export(pool, w, &ex));
  vt::Child ch = vt::spawn_child();
  int64_t i = -1;
  CHECK_EQ(send_to(ch, ex, &i), VPMM_OK);
  double copy_ns = 0;
  int failures = 0;
  for (int u = 1; u <= 100; ++u) {
    fill(w, kWeights, 100 + u);  // the trainer's step
    CUDA_OK(cudaDeviceSynchronize());
    // The rollout copies; every 10th update it checks the copy's bytes.
    int64_t r = -1, ns = 0;
    ch.ask('U', i, u % 10 == 0 ? 100 + u : 0, &r, &ns);
    if (r != 0) ++failures;
    copy_ns += static_cast<double>(ns);
  }
  CHECK_EQ(failures, 0);
  std::printf("  100 updates of %.0f GiB: the rollout's copies averaged %.0f GB/s\n", kWeights / double(GiB),
              kWeights * 100.0 / copy_ns);
  int64_t st = -1;
  ch.ask('C', i, 0, &st);
  CHECK_EQ(st, VPMM_OK);
  CHECK_EQ(ch.quit(), 0);
  CHECK_OK(vpmm_export_close(pool, ex));
  CHECK_OK(vpmm_pool_destroy(pool));
}

GPU_TEST("misuse on the GPU: a non-exportable pool refuses, an import into another device's pool is refused") {
  vpmm_pool* plain = cuda_pool(false);
  void* p = nullptr;
  CHECK_OK(vpmm_pool_malloc(plain, 64 * MiB, nullptr, &p));
  vpmm_export* ex = nullptr;
  CHECK_EQ(vpmm_pool_export(plain, p, &ex), VPMM_ERR_UNSUPPORTED);
  CHECK_OK(vpmm_pool_free(plain, p, nullptr));
  CHECK_OK(vpmm_pool_destroy(plain));
  int n = 0;
  cudaGetDeviceCount(&n);
  if (n < 2) {
    std::printf("  (one device: the other-device case needs two)\n");
    return;
  }
  vpmm_pool* pool = cuda_pool(true);
  CHECK_OK(vpmm_pool_malloc(pool, 64 * MiB, nullptr, &p));
  CHECK_OK(vpmm_pool_export(pool, p, &ex));
  size_t size = 0, nf = 0;
  CHECK_OK(vpmm_export_descriptor(ex, nullptr, 0, &size, nullptr, 0, &nf));
  std::string d(size, '\0');
  std::vector<int> fds(nf);
  CHECK_OK(vpmm_export_descriptor(ex, &d[0], size, &size, fds.data(), nf, &nf));
  vpmm_config c;
  vpmm_config_init(&c);
  c.backend = VPMM_BACKEND_CUDA;
  c.device = 1;
  vpmm_pool* other = nullptr;
  CHECK_OK(vpmm_pool_create(&c, &other));
  vpmm_import* imp = nullptr;
  CHECK_EQ(vpmm_pool_import(other, d.data(), d.size(), fds.data(), fds.size(), &imp), VPMM_ERR_INVALID_ARGUMENT);
  CHECK_OK(vpmm_pool_destroy(other));
  CHECK_OK(vpmm_export_close(pool, ex));
  CHECK_OK(vpmm_pool_free(pool, p, nullptr));
  CHECK_OK(vpmm_pool_destroy(pool));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::strcmp(argv[1], "--child") == 0) return gt::rollout_main(std::atoi(argv[2]));
  return gt::run_all(argc, argv);
}
