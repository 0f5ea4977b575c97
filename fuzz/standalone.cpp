// A main() for the fuzz targets without libFuzzer: runs a target on random
// inputs for a given time, so the same targets can run for hours in a
// release build (-O2, no sanitizer), where a fault that instrumentation
// hides may show.
//
//   fuzz_ops_release [--seconds T] [--seed S] [--max-len N] [--iter I] [--out DIR] [FILE...]
//
// Input k of seed S is a function of (S, k) only, so "--seed S --iter k"
// replays it alone. FILEs (e.g. a libFuzzer corpus or crash) are run first,
// once each; with FILEs and no --seconds nothing else runs. On a crash
// (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT) or an input that runs longer
// than 60 s the handler prints the seed, the input number and the fault
// address, and writes the input to DIR/crash-S-k (DIR defaults to .).
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <random>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

std::vector<uint8_t> g_input;
struct sigaction g_old[65];
uint64_t g_seed = 0, g_iter = 0;
char g_path[4096];

// Async-signal-safe decimal and hex writers.
void put(const char* s) { (void)!write(2, s, std::strlen(s)); }
void put_u64(uint64_t v, int base) {
  char b[32];
  int i = 31;
  b[i] = 0;
  do {
    b[--i] = "0123456789abcdef"[v % base];
    v /= base;
  } while (v);
  put(b + i);
}

void on_fatal(int sig, siginfo_t* si, void*) {
  put("\nstandalone: signal ");
  put_u64(static_cast<uint64_t>(sig), 10);
  if (sig == SIGSEGV || sig == SIGBUS) {
    put(" at address 0x");
    put_u64(reinterpret_cast<uintptr_t>(si->si_addr), 16);
  }
  put(sig == SIGALRM ? " (input ran past 60 s)" : "");
  put(" on seed ");
  put_u64(g_seed, 10);
  put(" input ");
  put_u64(g_iter, 10);
  put(" (");
  put_u64(g_input.size(), 10);
  put(" bytes); written to ");
  put(g_path);
  put("\n");
  int fd = open(g_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd >= 0) {
    (void)!write(fd, g_input.data(), g_input.size());
    close(fd);
  }
  // Hand the signal to whoever had it before (a sanitizer's report), else
  // the default action: a fault returns and faults again, the rest are raised.
  sigaction(SIGABRT, &g_old[SIGABRT], nullptr);
  sigaction(sig, &g_old[sig], nullptr);
  if (sig == SIGSEGV || sig == SIGBUS || sig == SIGFPE || sig == SIGILL) return;
  raise(sig == SIGALRM ? SIGABRT : sig);
}

void make_input(uint64_t seed, uint64_t iter, size_t max_len) {
  std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull ^ (iter + 1) * 0xBF58476D1CE4E5B9ull);
  size_t n = 16 + rng() % (max_len > 16 ? max_len - 15 : 1);
  g_input.resize(n);
  for (size_t i = 0; i < n; i += 8) {
    uint64_t v = rng();
    for (size_t k = 0; k < 8 && i + k < n; ++k) g_input[i + k] = static_cast<uint8_t>(v >> (8 * k));
  }
}

void run_current(const char* dir) {
  std::snprintf(g_path, sizeof g_path, "%s/crash-%" PRIu64 "-%" PRIu64, dir, g_seed, g_iter);
  alarm(60);
  LLVMFuzzerTestOneInput(g_input.data(), g_input.size());
  alarm(0);
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = -1;
  uint64_t seed = static_cast<uint64_t>(std::chrono::system_clock::now().time_since_epoch().count());
  size_t max_len = 4096;
  long long only_iter = -1;
  const char* dir = ".";
  std::vector<const char*> files;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&] { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--seconds") seconds = std::atof(next());
    else if (a == "--seed") seed = std::strtoull(next(), nullptr, 10);
    else if (a == "--max-len") max_len = std::strtoull(next(), nullptr, 10);
    else if (a == "--iter") only_iter = std::atoll(next());
    else if (a == "--out") dir = next();
    else files.push_back(argv[i]);
  }
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_fatal;
  sa.sa_flags = SA_SIGINFO;
  for (int s : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGALRM}) sigaction(s, &sa, &g_old[s]);

  g_seed = seed;
  for (const char* f : files) {
    FILE* fp = std::fopen(f, "rb");
    if (!fp) {
      std::fprintf(stderr, "standalone: cannot read %s\n", f);
      return 2;
    }
    g_input.clear();
    int ch;
    while ((ch = std::fgetc(fp)) != EOF) g_input.push_back(static_cast<uint8_t>(ch));
    std::fclose(fp);
    std::fprintf(stderr, "standalone: running %s (%zu bytes)\n", f, g_input.size());
    run_current(dir);
  }
  if (only_iter >= 0) {
    g_iter = static_cast<uint64_t>(only_iter);
    make_input(seed, g_iter, max_len);
    std::fprintf(stderr, "standalone: seed %" PRIu64 " input %" PRIu64 " (%zu bytes)\n", seed, g_iter,
                 g_input.size());
    run_current(dir);
    return 0;
  }
  if (seconds < 0) {
    if (!files.empty()) return 0;
    seconds = 10;
  }
  std::fprintf(stderr, "standalone: seed %" PRIu64 ", %.0f s, inputs up to %zu bytes\n", seed, seconds, max_len);
  auto t0 = std::chrono::steady_clock::now();
  double el = 0;
  for (g_iter = 0;; ++g_iter) {
    el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (el >= seconds) break;
    make_input(seed, g_iter, max_len);
    run_current(dir);
  }
  std::fprintf(stderr, "standalone: seed %" PRIu64 ": %" PRIu64 " inputs in %.1f s, no crash\n", seed, g_iter, el);
  return 0;
}
