/* libvpmm_preload.so's routing, on a CPU: this program links only a fake
 * CUDA (fake_cudart.c) and is run with
 *   LD_PRELOAD=libvpmm_preload.so VPMM_BACKEND=host VPMM_PRELOAD_TAG=preload
 *   VPMM_PRELOAD_HOST_BACKUP=1
 * so its cudaMalloc & co. land in the interposer. It checks which side served
 * each call (the fake counts its calls), that pool memory pauses and resumes
 * with its bytes under the environment's tag, that a vpmm_region_push scope
 * overrides that tag, and that pointers the pool does not own reach the
 * "real" functions. libvpmm is reached only through the process's global
 * scope (dlsym RTLD_DEFAULT), where the interposer put it. */
#define _GNU_SOURCE /* RTLD_DEFAULT, dladdr */
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "vpmm.h"

/* The CUDA entry points as a program sees them (no CUDA header here). */
int cudaMalloc(void** p, size_t n);
int cudaFree(void* p);
int cudaMallocAsync(void** p, size_t n, void* stream);
int cudaFreeAsync(void* p, void* stream);
int cuMemAlloc_v2(unsigned long long* p, size_t n);
int cuMemFree_v2(unsigned long long p);
/* The fake's counters. */
int fake_calls(const char* name);
void* fake_last_freed(void);

static int g_passed, g_failed;
#define CHECK(cond)                                                                    \
  do {                                                                                 \
    if (cond) g_passed++;                                                              \
    else { g_failed++; fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond); } \
  } while (0)

static const vpmm_api* api;
static vpmm_pool* pool;

static int owned(const void* p) {
  void* base = NULL;
  return api->pool_lookup(pool, p, &base, NULL) == VPMM_OK && base == p;
}

static uint64_t tag_live(const char* tag) {
  vpmm_tag_stats ts;
  memset(&ts, 0, sizeof ts);
  ts.struct_size = sizeof ts;
  return api->pool_tag_stats(pool, tag, &ts) == VPMM_OK ? ts.live_bytes : 0;
}

/* One command through the VPMM_PRELOAD_CTL channel, as a controller outside
 * the process would send it; the answer line goes to `answer`. */
static int ctl(const char* command, char* answer, size_t cap) {
  const char* path = getenv("VPMM_PRELOAD_CTL");
  char reply_path[1024];
  size_t len = 0;
  ssize_t got;
  int fd;
  if (!path) return -1;
  fd = open(path, O_WRONLY); /* blocks until the control thread listens */
  if (fd < 0 || write(fd, command, strlen(command)) != (ssize_t)strlen(command)) return -1;
  close(fd);
  snprintf(reply_path, sizeof reply_path, "%s.reply", path);
  fd = open(reply_path, O_RDONLY); /* blocks until the answer comes */
  if (fd < 0) return -1;
  while (len + 1 < cap && (got = read(fd, answer + len, cap - 1 - len)) > 0) len += (size_t)got;
  close(fd);
  answer[len] = '\0';
  return 0;
}

int main(void) {
  char answer[512];
  void* sym = dlsym(RTLD_DEFAULT, "vpmm_get_api");
  const vpmm_api* (*get_api)(uint32_t);
  Dl_info info;
  void *a = NULL, *b = NULL, *c = NULL, *z = (void*)1, *huge = NULL;
  unsigned long long d = 0;
  unsigned char* bytes;
  uint64_t n = 0;
  size_t i, bad = 0;

  if (!sym) {
    fprintf(stderr, "FAIL: libvpmm is not in the process: run under LD_PRELOAD=libvpmm_preload.so\n");
    return 1;
  }
  memcpy(&get_api, &sym, sizeof get_api);
  api = get_api(1);
  if (!api || api->default_pool(0, &pool) != VPMM_OK) {
    fprintf(stderr, "FAIL: no default pool: %s\n", api ? api->last_error() : "no table");
    return 1;
  }
  CHECK(strcmp(api->pool_backend_name(pool), "host") == 0);

  /* The program's cudaMalloc binds to the interposer, not to the fake. */
  sym = dlsym(RTLD_DEFAULT, "cudaMalloc");
  CHECK(sym && dladdr(sym, &info) && strstr(info.dli_fname, "libvpmm_preload.so"));

  /* cudaMalloc: pool memory, tagged by VPMM_PRELOAD_TAG, pausable with its bytes. */
  CHECK(cudaMalloc(&a, 3u << 20) == 0);
  CHECK(a != NULL && owned(a));
  CHECK(fake_calls("cudaMalloc") == 0);
  CHECK(tag_live("preload") >= (3u << 20));
  bytes = (unsigned char*)a;
  for (i = 0; i < (3u << 20); i++) bytes[i] = (unsigned char)(i * 13 + 1);
  CHECK(api->pool_pause_ex(pool, "preload", &n) == VPMM_OK && n == 1);
  CHECK(tag_live("preload") == 0);
  CHECK(api->pool_resume_ex(pool, "preload", &n) == VPMM_OK && n == 1);
  for (i = 0; i < (3u << 20); i++) bad += bytes[i] != (unsigned char)(i * 13 + 1);
  CHECK(bad == 0);

  /* The same from outside the program: the VPMM_PRELOAD_CTL channel. Pausing
   * synchronises the device first (cudaSetDevice + cudaDeviceSynchronize). */
  CHECK(ctl("pause preload\n", answer, sizeof answer) == 0 && strcmp(answer, "ok 1\n") == 0);
  CHECK(tag_live("preload") == 0);
  CHECK(fake_calls("cudaSetDevice") == 1 && fake_calls("cudaDeviceSynchronize") == 1);
  CHECK(ctl("resume preload\n", answer, sizeof answer) == 0 && strcmp(answer, "ok 1\n") == 0);
  bad = 0;
  for (i = 0; i < (3u << 20); i++) bad += bytes[i] != (unsigned char)(i * 13 + 1);
  CHECK(bad == 0);
  CHECK(ctl("resume preload\n", answer, sizeof answer) == 0 && strcmp(answer, "ok 0\n") == 0);
  CHECK(ctl("pause nosuchtag\n", answer, sizeof answer) == 0 && strcmp(answer, "ok 0\n") == 0);
  CHECK(ctl("frobnicate\n", answer, sizeof answer) == 0 &&
        strncmp(answer, "error unknown command", 21) == 0);

  /* A vpmm_region_push scope of the program wins over the environment's tag. */
  CHECK(api->region_push("inner", 0) == VPMM_OK);
  CHECK(cudaMalloc(&b, 1u << 20) == 0 && owned(b));
  CHECK(api->region_pop() == VPMM_OK);
  CHECK(tag_live("inner") >= (1u << 20));

  /* An interior pointer is refused and the allocation stays. */
  CHECK(cudaFree((char*)b + 256) == 1);
  CHECK(owned(b));

  /* cudaFree of pool memory: the device is synchronised first, the fake never frees. */
  CHECK(cudaFree(a) == 0 && cudaFree(b) == 0);
  CHECK(!owned(a));
  CHECK(fake_calls("cudaFree") == 0);
  CHECK(fake_calls("cudaDeviceSynchronize") == 4); /* two ctl pauses, two frees */

  /* Pointers the pool does not own go to the real functions. */
  {
    void* foreign = malloc(64);
    CHECK(cudaFree(foreign) == 0);
    CHECK(fake_calls("cudaFree") == 1 && fake_last_freed() == foreign);
    foreign = malloc(64);
    CHECK(cudaFreeAsync(foreign, NULL) == 0);
    CHECK(fake_calls("cudaFreeAsync") == 1 && fake_last_freed() == foreign);
    foreign = malloc(64);
    CHECK(cuMemFree_v2((unsigned long long)(size_t)foreign) == 0);
    CHECK(fake_calls("cuMemFree_v2") == 1 && fake_last_freed() == foreign);
  }
  /* cudaFree(NULL) (the context-creation idiom) reaches the runtime too. */
  CHECK(cudaFree(NULL) == 0 && fake_calls("cudaFree") == 2);

  /* Blocking allocations before any async free need no stream synchronisation. */
  CHECK(fake_calls("cudaStreamSynchronize") == 0);

  /* Stream-ordered allocation. */
  CHECK(cudaMallocAsync(&c, 5000, NULL) == 0 && owned(c));
  CHECK(cudaFreeAsync(c, NULL) == 0 && !owned(c));
  CHECK(fake_calls("cudaMallocAsync") == 0 && fake_calls("cudaFreeAsync") == 1);
  CHECK(fake_calls("cudaStreamSynchronize") == 0);

  /* After an async free, a blocking allocation synchronises its stream: the
   * region it got may carry a GPU-side wait for the freeing stream. */
  CHECK(cudaMalloc(&c, 1u << 20) == 0 && owned(c));
  CHECK(fake_calls("cudaStreamSynchronize") == 1);
  CHECK(cudaFree(c) == 0);

  /* The driver API: the current context's device (cuCtxGetDevice). */
  CHECK(cuMemAlloc_v2(&d, 2u << 20) == 0 && owned((void*)(size_t)d));
  CHECK(fake_calls("cuCtxGetDevice") == 1 && fake_calls("cuMemAlloc_v2") == 0);
  CHECK(fake_calls("cuStreamSynchronize") == 1);
  CHECK(cuMemFree_v2(d) == 0 && !owned((void*)(size_t)d));
  CHECK(fake_calls("cuCtxSynchronize") == 1 && fake_calls("cuMemFree_v2") == 1);

  /* Size 0 succeeds with NULL; a request the pool cannot serve is
   * cudaErrorMemoryAllocation, not a silent fall-back to the real allocator. */
  CHECK(cudaMalloc(&z, 0) == 0 && z == NULL);
  CHECK(cudaMalloc(&huge, (size_t)1 << 40) == 2 && huge == NULL);
  CHECK(fake_calls("cudaMalloc") == 0);

  CHECK(api->pool_check(pool) == VPMM_OK);
  printf("%d passed, %d failed\n", g_passed, g_failed);
  return g_failed ? 1 : 0;
}
