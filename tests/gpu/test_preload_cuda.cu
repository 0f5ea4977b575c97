// An unmodified-style CUDA program under LD_PRELOAD=libvpmm_preload.so:
// plain cudaMalloc / cudaMallocAsync / cudaFree, built with -cudart shared
// (a statically linked cudart cannot be interposed). It includes no vpmm
// header and does not link libvpmm. The pause in the middle is requested
// twice: through the VPMM_PRELOAD_CTL channel (as a controller outside the
// process would: write "pause app" to the FIFO, read the answer), and
// through the libvpmm the interposer put in the process (dlsym
// RTLD_DEFAULT), as framework glue would. Meson runs it with
// VPMM_PRELOAD_TAG=app VPMM_PRELOAD_HOST_BACKUP=1 VPMM_PRELOAD_CTL=<fifo>.
// Exit 77 (SKIP) without a CUDA device; FAIL when not run under the preload.
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {
int g_failed = 0, g_passed = 0;
#define CHECK(c)                                                                   \
  do {                                                                             \
    if (c) ++g_passed;                                                             \
    else { ++g_failed; std::fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #c); } \
  } while (0)

__global__ void fill(uint32_t* p, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(blockDim.x) * gridDim.x)
    p[i] = uint32_t(i * 2654435761u + 7u);
}
__global__ void verify(const uint32_t* p, size_t n, unsigned long long* bad) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(blockDim.x) * gridDim.x)
    if (p[i] != uint32_t(i * 2654435761u + 7u)) atomicAdd(bad, 1ull);
}

// The few libvpmm entry points the pause needs, by their C signatures (the
// program has no vpmm header: it is "unmodified" apart from this hook).
using PoolFn = int (*)(int32_t, void**);
using TagFn = int (*)(void*, const char*, uint64_t*);
using LookupFn = int (*)(void*, const void*, void**, uint64_t*);
// One command through the VPMM_PRELOAD_CTL FIFO; returns the answer line.
std::string ctl(const char* command) {
  const char* path = std::getenv("VPMM_PRELOAD_CTL");
  if (!path) return "no VPMM_PRELOAD_CTL";
  int fd = open(path, O_WRONLY);  // blocks until the control thread listens
  if (fd < 0) return "cannot open the control FIFO";
  ssize_t w = write(fd, command, std::strlen(command));
  close(fd);
  if (w != ssize_t(std::strlen(command))) return "short write";
  fd = open((std::string(path) + ".reply").c_str(), O_RDONLY);  // blocks until answered
  if (fd < 0) return "cannot open the reply FIFO";
  std::string answer;
  char buf[256];
  ssize_t got;
  while ((got = read(fd, buf, sizeof buf)) > 0) answer.append(buf, size_t(got));
  close(fd);
  return answer;
}

template <typename F> F sym(const char* name) {
  void* p = dlsym(RTLD_DEFAULT, name);
  F f;
  std::memcpy(&f, &p, sizeof f);
  return f;
}
}  // namespace

int main() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::printf("SKIP: no CUDA device\n");
    return 77;
  }
  auto default_pool = sym<PoolFn>("vpmm_default_pool");
  auto pause = sym<TagFn>("vpmm_pool_pause_ex");
  auto resume = sym<TagFn>("vpmm_pool_resume_ex");
  auto lookup = sym<LookupFn>("vpmm_pool_lookup");
  Dl_info info;
  void* malloc_sym = dlsym(RTLD_DEFAULT, "cudaMalloc");
  if (!default_pool || !malloc_sym || !dladdr(malloc_sym, &info) ||
      !std::strstr(info.dli_fname, "libvpmm_preload")) {
    std::fprintf(stderr, "FAIL: cudaMalloc is not libvpmm_preload.so's: run under "
                         "LD_PRELOAD=libvpmm_preload.so with a -cudart shared build\n");
    return 1;
  }
  cudaSetDevice(0);
  void* pool = nullptr;
  CHECK(default_pool(0, &pool) == 0 && pool);

  const size_t n = (64u << 20) / sizeof(uint32_t);
  uint32_t* a = nullptr;
  unsigned long long* bad = nullptr;
  CHECK(cudaMalloc(&a, n * sizeof(uint32_t)) == cudaSuccess);
  CHECK(cudaMallocManaged(&bad, sizeof *bad) == cudaSuccess);  // not interposed: the real runtime
  CHECK(lookup(pool, a, nullptr, nullptr) == 0);               // cudaMalloc was routed to the pool
  CHECK(lookup(pool, bad, nullptr, nullptr) != 0);
  fill<<<1024, 256>>>(a, n);
  CHECK(cudaDeviceSynchronize() == cudaSuccess);

  // Pause the tag of every routed allocation from outside (the control
  // FIFO), resume, check the bytes.
  std::string answer = ctl("pause app\n");
  std::printf("ctl pause app: %s", answer.c_str());
  CHECK(answer == "ok 1\n");
  answer = ctl("resume app\n");
  std::printf("ctl resume app: %s", answer.c_str());
  CHECK(answer == "ok 1\n");
  *bad = 0;
  verify<<<1024, 256>>>(a, n, bad);
  CHECK(cudaDeviceSynchronize() == cudaSuccess);
  CHECK(*bad == 0);

  // And from inside, through the libvpmm in the process.
  uint64_t changed = 0;
  CHECK(pause(pool, "app", &changed) == 0 && changed == 1);
  CHECK(resume(pool, "app", &changed) == 0 && changed == 1);
  *bad = 0;
  verify<<<1024, 256>>>(a, n, bad);
  CHECK(cudaDeviceSynchronize() == cudaSuccess);
  CHECK(*bad == 0);

  // Stream-ordered allocation on a stream of the program's own.
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
  void* b = nullptr;
  CHECK(cudaMallocAsync(&b, 8u << 20, s) == cudaSuccess && lookup(pool, b, nullptr, nullptr) == 0);
  CHECK(cudaMemsetAsync(b, 0x5a, 8u << 20, s) == cudaSuccess);
  CHECK(cudaFreeAsync(b, s) == cudaSuccess);
  CHECK(cudaStreamSynchronize(s) == cudaSuccess);
  CHECK(lookup(pool, b, nullptr, nullptr) != 0);

  // Memory the pool does not own goes to the real cudaFree.
  void* pitched = nullptr;
  size_t pitch = 0;
  CHECK(cudaMallocPitch(&pitched, &pitch, 4096, 16) == cudaSuccess);  // not interposed
  CHECK(lookup(pool, pitched, nullptr, nullptr) != 0);
  CHECK(cudaFree(pitched) == cudaSuccess);

  CHECK(cudaFree(a) == cudaSuccess && lookup(pool, a, nullptr, nullptr) != 0);
  CHECK(cudaFree(bad) == cudaSuccess);
  CHECK(cudaStreamDestroy(s) == cudaSuccess);
  CHECK(cudaGetLastError() == cudaSuccess);
  std::printf("%d passed, %d failed\n", g_passed, g_failed);
  return g_failed ? 1 : 0;
}
