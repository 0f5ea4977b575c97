/* libvpmm_preload.so's environment scope from torch_memory_saver's variables
 * (TMS_INIT_ENABLE, TMS_INIT_ENABLE_CPU_BACKUP), on a CPU against the fake
 * CUDA (fake_cudart.c), under LD_PRELOAD on the host backend. meson runs it
 * once per environment, with what that environment must give:
 *   test_preload_tms TAG BACKUP
 * TAG is the tag every allocation outside the program's own scopes must get
 * ("-": untagged), BACKUP 1 when that tag's memory is backed up on pause.
 * Also: a scope the program pushes before its first allocation wins over the
 * environment's (main thread: opened when the library loaded; another thread:
 * through vpmm_preload_open_scope), an untagged scope stays untagged, and a
 * blocking free gives the freed memory back to the device while an async
 * free keeps it cached. */
#define _GNU_SOURCE /* RTLD_DEFAULT */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vpmm.h"

int cudaMalloc(void** p, size_t n);
int cudaFree(void* p);
int cudaMallocAsync(void** p, size_t n, void* stream);
int cudaFreeAsync(void* p, void* stream);

static int g_passed, g_failed;
#define CHECK(cond)                                                                    \
  do {                                                                                 \
    if (cond) g_passed++;                                                              \
    else { g_failed++; fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond); } \
  } while (0)

static const vpmm_api* api;
static vpmm_pool* pool;
static const char* want_tag; /* NULL: untagged */
static int want_backup;
static int (*open_scope)(void);

/* live_bytes of `tag` (NULL: every tagged allocation); 0 for a tag the pool
 * never saw. */
static uint64_t tag_live(const char* tag) {
  vpmm_tag_stats ts;
  memset(&ts, 0, sizeof ts);
  ts.struct_size = sizeof ts;
  return api->pool_tag_stats(pool, tag, &ts) == VPMM_OK ? ts.live_bytes : 0;
}

static uint64_t mapped(void) {
  vpmm_stats st;
  memset(&st, 0, sizeof st);
  st.struct_size = sizeof st;
  return api->pool_stats(pool, &st) == VPMM_OK ? st.mapped_bytes : ~0ull;
}

/* The environment's tag got `n` more bytes (or, untagged, no tag did). */
static int env_tagged(uint64_t tagged_before, uint64_t n) {
  return want_tag ? tag_live(want_tag) >= tagged_before + n : tag_live(NULL) == tagged_before;
}
static uint64_t env_live(void) { return want_tag ? tag_live(want_tag) : tag_live(NULL); }

static void* second_thread(void* arg) {
  void *a = NULL, *b = NULL;
  uint64_t before;
  (void)arg;
  /* It pushes a scope before allocating: the environment's must be opened
   * first, or it would land above the program's. */
  CHECK(open_scope() == 0);
  CHECK(open_scope() == 0); /* once per thread; a second call changes nothing */
  CHECK(api->region_push("t2", 0) == VPMM_OK);
  CHECK(cudaMalloc(&a, 1u << 20) == 0);
  CHECK(api->region_pop() == VPMM_OK);
  CHECK(tag_live("t2") >= (1u << 20));
  before = env_live();
  CHECK(cudaMalloc(&b, 1u << 20) == 0);
  CHECK(env_tagged(before, 1u << 20));
  CHECK(cudaFree(a) == 0 && cudaFree(b) == 0);
  return NULL;
}

int main(int argc, char** argv) {
  void* sym = dlsym(RTLD_DEFAULT, "vpmm_get_api");
  const vpmm_api* (*get_api)(uint32_t);
  void *inner = NULL, *a = NULL, *u = NULL, *c = NULL;
  unsigned char* bytes;
  uint64_t n = 0, before;
  size_t i, bad = 0;
  pthread_t t;
  vpmm_tag_stats ts;

  if (argc != 3) {
    fprintf(stderr, "usage: %s TAG|- BACKUP(0|1)\n", argv[0]);
    return 2;
  }
  want_tag = strcmp(argv[1], "-") == 0 ? NULL : argv[1];
  want_backup = atoi(argv[2]);
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
  sym = dlsym(RTLD_DEFAULT, "vpmm_preload_open_scope");
  CHECK(sym != NULL);
  if (!sym) return 1;
  memcpy(&open_scope, &sym, sizeof open_scope);

  /* The program's own scope, pushed before its first allocation, wins: the
   * environment's was opened when the library loaded. */
  CHECK(api->region_push("inner", 0) == VPMM_OK);
  CHECK(cudaMalloc(&inner, 1u << 20) == 0);
  CHECK(api->region_pop() == VPMM_OK);
  CHECK(tag_live("inner") >= (1u << 20));

  /* Outside it: the environment's tag (or none). */
  before = env_live();
  CHECK(cudaMalloc(&a, 3u << 20) == 0);
  CHECK(env_tagged(before, 3u << 20));
  bytes = (unsigned char*)a;
  for (i = 0; i < (3u << 20); i++) bytes[i] = (unsigned char)(i * 7 + 3);
  if (want_tag) {
    memset(&ts, 0, sizeof ts);
    ts.struct_size = sizeof ts;
    CHECK(api->pool_pause_ex(pool, want_tag, &n) == VPMM_OK && n >= 1);
    CHECK(api->pool_tag_stats(pool, want_tag, &ts) == VPMM_OK);
    CHECK(want_backup ? ts.backup_bytes >= (3u << 20) : ts.backup_bytes == 0);
    CHECK(tag_live("inner") >= (1u << 20)); /* another tag: untouched */
    CHECK(api->pool_resume_ex(pool, want_tag, &n) == VPMM_OK && n >= 1);
    if (want_backup) {
      for (i = 0; i < (3u << 20); i++) bad += bytes[i] != (unsigned char)(i * 7 + 3);
      CHECK(bad == 0);
    }
  }

  /* An untagged scope (the drop-in's disable()) is untagged, whatever the
   * environment says. */
  before = tag_live(NULL);
  CHECK(api->region_push(NULL, 0) == VPMM_OK);
  CHECK(cudaMalloc(&u, 2u << 20) == 0);
  CHECK(api->region_pop() == VPMM_OK);
  CHECK(tag_live(NULL) == before);

  CHECK(pthread_create(&t, NULL, second_thread, NULL) == 0);
  CHECK(pthread_join(t, NULL) == 0);

  /* cudaFreeAsync keeps the memory cached for stream-ordered reuse; a
   * blocking free gives everything free back, as the real cudaFree does. */
  CHECK(cudaMallocAsync(&c, 4u << 20, NULL) == 0);
  CHECK(cudaFreeAsync(c, NULL) == 0);
  CHECK(mapped() >= (4u << 20) + (3u << 20));
  CHECK(cudaFree(inner) == 0 && cudaFree(u) == 0);
  CHECK(mapped() >= (3u << 20)); /* `a` is still live */
  CHECK(cudaFree(a) == 0);
  CHECK(mapped() == 0);

  CHECK(api->pool_check(pool) == VPMM_OK);
  printf("%d passed, %d failed (environment tag %s, backup %d)\n", g_passed, g_failed,
         want_tag ? want_tag : "none", want_backup);
  return g_failed ? 1 : 0;
}
