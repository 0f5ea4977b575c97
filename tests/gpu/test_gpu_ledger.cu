// The ledger on a real GPU (docs/ledger.md): two processes on device 0 in
// one ledger whose budget fits one of their buffers and a half. The trainer
// (a child process: this program run with --trainer) holds its weights in
// a tag with a host backup, marked evictable; the engine (this process)
// then allocates as much again: its admission asks, the trainer's watcher
// pauses the weights, the engine is admitted, writes and verifies its
// tokens, frees and trims; the trainer resumes (admitted again) and
// verifies its weights. Meanwhile a sampler reads the ledger every
// millisecond: what the members hold never passes the budget.
//
// Processes, not threads: the budget is between processes. The child is
// exec'd (CUDA does not survive a fork).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <string>
#include <thread>

#include "gpu_util.cuh"

namespace {

constexpr uint64_t kWeights = 1 * gt::GiB;
constexpr uint64_t kEngine = 1 * gt::GiB;
constexpr uint64_t kBudget = kWeights + kEngine / 2;

vpmm_pool* join(const char* ledger) {
  vpmm_config c;
  vpmm_config_init(&c);
  c.backend = VPMM_BACKEND_CUDA;
  c.device = 0;
  vpmm_pool* p = nullptr;
  if (vpmm_pool_create_ledger(&c, ledger, &p) != VPMM_OK) {
    std::printf("  join %s: %s\n", ledger, vpmm_last_error());
    return nullptr;
  }
  return p;
}

// The trainer: weights, evictable; "ready" on stdout; resumes after a line on stdin.
int trainer_main(const char* ledger) {
  vpmm_pool* t = join(ledger);
  if (!t) return 2;
  vpmm_alloc_attrs at;
  std::memset(&at, 0, sizeof at);
  at.struct_size = sizeof at;
  at.tag = "weights";
  at.flags = VPMM_ALLOC_HOST_BACKUP | VPMM_ALLOC_BACKUP_MMAP;  // no pinning inside the engine's 1 s wait
  void* w = nullptr;
  if (vpmm_pool_malloc_ex(t, kWeights, nullptr, &at, &w) != VPMM_OK) {
    std::fprintf(stderr, "trainer malloc: %s\n", vpmm_last_error());
    return 3;
  }
  gt::fill(w, kWeights, 11, nullptr);
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
  gt::verify(w, kWeights, 11, bad.d, nullptr);
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

}  // namespace

GPU_TEST("ledger: the engine's allocation is admitted by the trainer's pause, both intact, never over budget") {
  char name[64];
  std::snprintf(name, sizeof name, "vt-gpu-ledger-%d", static_cast<int>(getpid()));
  vpmm_ledger_remove(name);
  vpmm_pool* e = join(name);  // the engine makes the ledger: slot 0 (the sampler reads it first)
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
    execl(exe.c_str(), exe.c_str(), "--trainer", name, static_cast<char*>(nullptr));
    _exit(127);
  }
  close(in[0]);
  close(out[1]);
  FILE* from = fdopen(out[0], "r");
  char line[16] = {};
  CHECK(from && std::fgets(line, sizeof line, from) && std::strncmp(line, "ready", 5) == 0);
  // The sampler: members are read in slot order, the engine's first, so a
  // sum never counts the trainer's weights after the engine got their bytes.
  std::atomic<bool> done{false};
  std::atomic<uint64_t> peak{0}, samples{0};
  std::thread sampler([&] {
    while (!done.load()) {
      vpmm_ledger_info info;
      std::memset(&info, 0, sizeof info);
      info.struct_size = sizeof info;
      if (vpmm_ledger_read(name, 0, &info, nullptr, 0, nullptr) == VPMM_OK) {
        uint64_t p = peak.load();
        while (info.admitted_bytes > p && !peak.compare_exchange_weak(p, info.admitted_bytes)) {
        }
        samples.fetch_add(1);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  const double t0 = gt::now_ms();
  void* x = nullptr;
  CHECK_OK(vpmm_pool_malloc(e, kEngine, nullptr, &x));  // admitted once the trainer paused
  std::printf("  engine admitted after %.1f ms\n", gt::now_ms() - t0);
  if (x) {
    gt::Counters bad(1);
    gt::fill(x, kEngine, 29, nullptr);
    gt::verify(x, kEngine, 29, bad.d, nullptr);
    CHECK(cudaDeviceSynchronize() == cudaSuccess);
    CHECK_EQ(bad.h[0], 0ull);
    CHECK_OK(vpmm_pool_free(e, x, nullptr));
  }
  CHECK_OK(vpmm_pool_trim(e, 0));
  CHECK(write(in[1], "go\n", 3) == 3);
  int st = 0;
  CHECK(waitpid(pid, &st, 0) == pid);
  CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 0, "trainer exit status %d", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
  done.store(true);
  sampler.join();
  std::printf("  %llu samples, peak admitted %.1f MiB of a %.1f MiB budget\n",
              static_cast<unsigned long long>(samples.load()), peak.load() / double(gt::MiB),
              kBudget / double(gt::MiB));
  CHECK(peak.load() <= kBudget);
  vpmm_pool_destroy(e);
  if (from) fclose(from);
  close(in[1]);
  vpmm_ledger_remove(name);
}

int main(int argc, char** argv) {
  if (argc == 3 && std::strcmp(argv[1], "--trainer") == 0) return trainer_main(argv[2]);
  return gt::run_all(argc, argv);
}
