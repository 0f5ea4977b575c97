// The ledger keys devices by identity, not ordinal (docs/ledger.md,
// "Joining"): two processes that number one GPU differently share its
// budget. The engine (this process) sees every GPU and uses device 1; the
// trainer (a child: this program run with --trainer, exec'd with
// CUDA_VISIBLE_DEVICES=1) sees only that GPU, as its device 0. The trainer
// holds evictable weights; the engine's allocation passes the budget only
// if the trainer's bytes count against the same device, so it is admitted
// by the trainer's pause; both members show the same ledger device; the
// engine's tokens and, after its resume, the trainer's weights are intact.
// Needs two CUDA devices: with fewer it prints the reason and exits 77
// (SKIP), never passes.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "gpu_util.cuh"

namespace {

constexpr uint64_t kWeights = 1 * gt::GiB;
constexpr uint64_t kEngine = 1 * gt::GiB;
constexpr uint64_t kBudget = kWeights + kEngine / 2;

vpmm_pool* join(const char* ledger, int device) {
  vpmm_config c;
  c.struct_size = sizeof c;
  vpmm_config_init(&c);
  c.backend = VPMM_BACKEND_CUDA;
  c.device = device;
  c.ledger = ledger;  // the pool option (vpmm_config.ledger)
  vpmm_pool* p = nullptr;
  if (vpmm_pool_create(&c, &p) != VPMM_OK) {
    std::printf("  join %s on device %d: %s\n", ledger, device, vpmm_last_error());
    return nullptr;
  }
  return p;
}

// The trainer, on its device 0 (the engine's device 1): weights, evictable;
// "ready" on stdout; verifies and exits after a line on stdin.
int trainer_main(const char* ledger) {
  if (cudaSetDevice(0) != cudaSuccess) return 10;
  vpmm_pool* t = join(ledger, 0);
  if (!t) return 2;
  vpmm_alloc_attrs at;
  std::memset(&at, 0, sizeof at);
  at.struct_size = sizeof at;
  at.tag = "weights";
  at.flags = VPMM_ALLOC_HOST_BACKUP | VPMM_ALLOC_BACKUP_MMAP;
  void* w = nullptr;
  if (vpmm_pool_malloc_ex(t, kWeights, nullptr, &at, &w) != VPMM_OK) {
    std::fprintf(stderr, "trainer malloc: %s\n", vpmm_last_error());
    return 3;
  }
  gt::fill(w, kWeights, 13, nullptr);
  if (cudaDeviceSynchronize() != cudaSuccess) return 4;
  const char* tags[] = {"weights"};
  if (vpmm_pool_ledger_evictable(t, tags, 1) != VPMM_OK) return 5;
  std::printf("ready\n");
  std::fflush(stdout);
  char line[16];
  if (!std::fgets(line, sizeof line, stdin)) return 6;
  vpmm_tag_stats ts;
  std::memset(&ts, 0, sizeof ts);
  ts.struct_size = sizeof ts;
  if (vpmm_pool_tag_stats(t, "weights", &ts) != VPMM_OK || ts.paused_bytes != kWeights) {
    std::fprintf(stderr, "trainer: the weights were not paused (%llu paused bytes)\n",
                 static_cast<unsigned long long>(ts.paused_bytes));
    return 7;
  }
  if (vpmm_pool_resume(t, "weights") != VPMM_OK) {
    std::fprintf(stderr, "trainer resume: %s\n", vpmm_last_error());
    return 8;
  }
  gt::Counters bad(1);
  gt::verify(w, kWeights, 13, bad.d, nullptr);
  if (cudaDeviceSynchronize() != cudaSuccess || bad.h[0] != 0) {
    std::fprintf(stderr, "trainer: %llu words of the weights differ after the resume\n", bad.h[0]);
    return 9;
  }
  vpmm_pool_destroy(t);
  return 0;
}

std::string self_path() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "";
  buf[n] = '\0';
  return buf;
}

// The members as the ledger lists them.
uint32_t read_members(const char* name, vpmm_ledger_member* ms, uint32_t cap, vpmm_ledger_info* info) {
  std::memset(ms, 0, sizeof(vpmm_ledger_member) * cap);
  ms[0].struct_size = sizeof ms[0];
  std::memset(info, 0, sizeof *info);
  info->struct_size = sizeof *info;
  uint32_t n = 0;
  if (vpmm_ledger_read(name, 0, info, ms, cap, &n) != VPMM_OK) return 0;
  return n < cap ? n : cap;
}

}  // namespace

GPU_TEST("ledger: one GPU seen as device 1 here and as device 0 under CUDA_VISIBLE_DEVICES=1 has one budget") {
  char name[64];
  std::snprintf(name, sizeof name, "vt-gpu-ledger-visible-%d", static_cast<int>(getpid()));
  vpmm_ledger_remove(name);
  CHECK(cudaSetDevice(1) == cudaSuccess);
  vpmm_pool* e = join(name, 1);  // the engine's device 1 becomes the ledger's device 0
  CHECK(e != nullptr);
  if (!e) return;
  CHECK_OK(vpmm_ledger_set_budget(name, 0, kBudget));
  int in[2], out[2];
  CHECK(pipe(in) == 0 && pipe(out) == 0);
  const std::string exe = self_path();
  pid_t pid = fork();
  if (pid == 0) {
    dup2(in[0], 0);
    dup2(out[1], 1);
    setenv("CUDA_VISIBLE_DEVICES", "1", 1);
    execl(exe.c_str(), exe.c_str(), "--trainer", name, static_cast<char*>(nullptr));
    _exit(127);
  }
  close(in[0]);
  close(out[1]);
  FILE* from = fdopen(out[0], "r");
  char line[16] = {};
  CHECK(from && std::fgets(line, sizeof line, from) && std::strncmp(line, "ready", 5) == 0);
  vpmm_ledger_member ms[8];
  vpmm_ledger_info info;
  uint32_t n = read_members(name, ms, 8, &info);
  CHECK_EQ(n, 2u);
  for (uint32_t i = 0; i < n; ++i) CHECK_EQ(ms[i].device, 0);  // one ledger device, two ordinals
  // Each member shows its own ordinal (the engine's 1, the trainer's 0) and
  // both the GPU's UUID, the one cudaGetDeviceProperties gives for device 1 here.
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 1) == cudaSuccess);
  uint64_t hi = 0, lo = 0;
  for (int i = 0; i < 8; ++i) {
    hi = (hi << 8) | static_cast<unsigned char>(prop.uuid.bytes[i]);
    lo = (lo << 8) | static_cast<unsigned char>(prop.uuid.bytes[8 + i]);
  }
  for (uint32_t i = 0; i < n; ++i) {
    CHECK_EQ(ms[i].ordinal, ms[i].pid == static_cast<int32_t>(getpid()) ? 1 : 0);
    CHECK_EQ(ms[i].device_id_state, uint32_t{VPMM_LEDGER_ID_OK});
    CHECK(ms[i].device_id_hi == hi && ms[i].device_id_lo == lo);
  }
  CHECK(info.device_id_state == VPMM_LEDGER_ID_OK && info.device_id_hi == hi && info.device_id_lo == lo);
  CHECK_EQ(info.admitted_bytes, kWeights);
  // kWeights + kEngine pass the budget of that one device: only the
  // trainer's pause admits the engine.
  void* x = nullptr;
  CHECK_OK(vpmm_pool_malloc(e, kEngine, nullptr, &x));
  n = read_members(name, ms, 8, &info);
  CHECK(info.admitted_bytes <= kBudget);
  if (x) {
    gt::Counters bad(1);
    gt::fill(x, kEngine, 31, nullptr);
    gt::verify(x, kEngine, 31, bad.d, nullptr);
    CHECK(cudaDeviceSynchronize() == cudaSuccess);
    CHECK_EQ(bad.h[0], 0ull);
    CHECK_OK(vpmm_pool_free(e, x, nullptr));
  }
  CHECK_OK(vpmm_pool_trim(e, 0));
  CHECK(write(in[1], "go\n", 3) == 3);
  int st = 0;
  CHECK(waitpid(pid, &st, 0) == pid);
  CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 0, "trainer exit status %d", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
  vpmm_pool_destroy(e);
  if (from) fclose(from);
  close(in[1]);
  vpmm_ledger_remove(name);
}

int main(int argc, char** argv) {
  if (argc == 3 && std::strcmp(argv[1], "--trainer") == 0) return trainer_main(argv[2]);
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n < 2) {
    std::printf("SKIP: needs two CUDA devices, found %d\n", n);
    return 77;
  }
  return gt::run_all(argc, argv);
}
