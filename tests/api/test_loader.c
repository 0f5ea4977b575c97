/* The run-time loading contract, as a plugin sees it: this program does NOT
 * link libvpmm (meson links only libdl; tests/api/check_no_needed.sh checks
 * the ELF), loads it through vpmm_loader.h, drives a host-backend pool
 * through the table, and checks that every way of failing says clearly why.
 * Usage: test_loader PATH_TO_LIBVPMM_SO */
#define _POSIX_C_SOURCE 200112L /* setenv */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vpmm_loader.h"

static int g_passed, g_failed;

#define CHECK(cond)                                                    \
  do {                                                                 \
    if (cond) {                                                        \
      g_passed++;                                                      \
    } else {                                                           \
      g_failed++;                                                      \
      fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);  \
    }                                                                  \
  } while (0)

#define CHECK_OK(expr)                                                           \
  do {                                                                           \
    vpmm_status st_ = (expr);                                                    \
    if (st_ == VPMM_OK) {                                                        \
      g_passed++;                                                                \
    } else {                                                                     \
      g_failed++;                                                                \
      fprintf(stderr, "FAIL %s:%d: %s -> %s: %s\n", __FILE__, __LINE__, #expr,   \
              api->status_string(st_), api->last_error());                       \
    }                                                                            \
  } while (0)

static int contains(const char* text, const char* part) { return strstr(text, part) != NULL; }

/* Every failure leaves the loader closed with a sentence naming the cause. */
static void test_failures(const char* lib) {
  vpmm_loader L;
  memset(&L, 0, sizeof L);

  /* A missing file, named through VPMM_LIBRARY. */
  setenv("VPMM_LIBRARY", "/nonexistent/dir/libvpmm.so.1", 1);
  CHECK(vpmm_loader_open(&L, NULL) == -1);
  CHECK(L.api == NULL && L.handle == NULL);
  CHECK(contains(L.error, "/nonexistent/dir/libvpmm.so.1"));
  CHECK(contains(L.error, "VPMM_LIBRARY"));
  printf("missing file: %s\n", L.error);
  unsetenv("VPMM_LIBRARY");

  /* A library without the symbol (the C library is always there). */
  CHECK(vpmm_loader_open(&L, "libc.so.6") == -1);
  CHECK(L.api == NULL && L.handle == NULL);
  CHECK(contains(L.error, "does not export vpmm_get_api"));
  printf("not libvpmm: %s\n", L.error);

  /* An ABI version the library does not implement. */
  memset(&L, 0, sizeof L);
  CHECK(vpmm_loader_open_ex(&L, lib, VPMM_LOADER_ABI_VERSION + 1, sizeof(vpmm_api)) == -1);
  CHECK(L.api == NULL && L.handle == NULL);
  CHECK(contains(L.error, "does not provide ABI version 2"));
  printf("wrong ABI: %s\n", L.error);

  /* A caller built against a newer header with more entries than this library has. */
  memset(&L, 0, sizeof L);
  CHECK(vpmm_loader_open_ex(&L, lib, VPMM_LOADER_ABI_VERSION, sizeof(vpmm_api) + 16) == -1);
  CHECK(L.api == NULL && L.handle == NULL);
  CHECK(contains(L.error, "lacks 2 entries"));
  printf("table too small: %s\n", L.error);

  /* Asking the library itself: NULL, and vpmm_last_error says why. */
  memset(&L, 0, sizeof L);
  CHECK(vpmm_loader_open(&L, lib) == 0);
  if (L.api) {
    const vpmm_api* api = L.api;
    void* sym = dlsym(L.handle, "vpmm_get_api");
    const vpmm_api* (*get_api)(uint32_t);
    memcpy(&get_api, &sym, sizeof get_api);
    CHECK(sym != NULL && get_api(7) == NULL);
    CHECK(contains(api->last_error(), "ABI version 7 is not provided"));
    CHECK(get_api(VPMM_LOADER_ABI_VERSION) == api); /* one static table */
  }
  vpmm_loader_close(&L);
  vpmm_loader_close(&L); /* closing twice does nothing */
  CHECK(L.api == NULL && L.handle == NULL);
}

static void test_host_pool(const vpmm_api* api) {
  vpmm_config c;
  vpmm_pool* pool = NULL;
  vpmm_alloc_attrs attrs;
  vpmm_stats stats;
  vpmm_tag_stats ts;
  void* p = NULL;
  void* kv = NULL;
  void* base = NULL;
  uint64_t size = 0, n = 0;
  size_t i;
  unsigned char* bytes;
  vpmm_stream s = NULL;

  api->config_init_defaults(&c);
  /* The sized init, through the table: this program's struct, defaults only. */
  if (VPMM_API_HAS(api, config_init_sized)) {
    CHECK_OK(api->config_init_sized(&c, (uint32_t)sizeof c, VPMM_CONFIG_DEFAULTS_ONLY));
    CHECK(c.struct_size == sizeof c && c.backend == VPMM_BACKEND_AUTO);
    CHECK(api->config_init_sized(&c, 4, 0) == VPMM_ERR_INVALID_ARGUMENT);
  }
  c.backend = VPMM_BACKEND_HOST;
  c.host_capacity = 64u << 20;
  CHECK_OK(api->pool_create(&c, &pool));
  if (!pool) return;
  CHECK(strcmp(api->pool_backend_name(pool), "host") == 0);

  CHECK_OK(api->pool_malloc(pool, 3u << 20, NULL, &p));
  CHECK_OK(api->pool_lookup(pool, (char*)p + 100, &base, &size));
  CHECK(base == p && size == (3u << 20));

  /* A tagged, host-backed allocation: pause releases it, resume restores the
   * bytes at the same address. */
  memset(&attrs, 0, sizeof attrs);
  attrs.struct_size = sizeof attrs;
  attrs.flags = VPMM_ALLOC_HOST_BACKUP;
  attrs.tag = "kv";
  CHECK_OK(api->pool_malloc_ex(pool, 4u << 20, NULL, &attrs, &kv));
  bytes = (unsigned char*)kv;
  for (i = 0; i < (4u << 20); i++) bytes[i] = (unsigned char)(i * 7 + 3);
  CHECK_OK(api->pool_pause_ex(pool, "kv", &n));
  CHECK(n == 1);
  memset(&ts, 0, sizeof ts);
  ts.struct_size = sizeof ts;
  CHECK_OK(api->pool_tag_stats(pool, "kv", &ts));
  CHECK(ts.paused_bytes == (4u << 20) && ts.n_paused == 1);
  CHECK_OK(api->pool_resume_ex(pool, "kv", &n));
  CHECK(n == 1);
  /* The entries the backup stores added. */
  CHECK(api->pool_pause_flags(pool, "kv", 0x80, &n) == VPMM_ERR_INVALID_ARGUMENT);
  CHECK(api->pool_set_backup_dir(pool, NULL) == VPMM_OK);
  CHECK(api->tag_scope_push_ex(NULL) == VPMM_OK && api->tag_scope_pop() == VPMM_OK);
  CHECK(api->pool_resume_flags(pool, "kv", 0x80, &n) == VPMM_ERR_INVALID_ARGUMENT);
  {
    size_t bad = 0;
    for (i = 0; i < (4u << 20); i++) bad += bytes[i] != (unsigned char)(i * 7 + 3);
    CHECK(bad == 0);
  }

  /* The test-only host streams are in the table too. */
  CHECK_OK(api->host_stream_create(&s));
  CHECK_OK(api->pool_free(pool, p, s));
  CHECK_OK(api->host_stream_synchronize(s));
  CHECK_OK(api->pool_stream_retire(pool, s));
  CHECK_OK(api->host_stream_destroy(s));

  /* Errors through the table: the status and the thread's message. */
  CHECK(api->pool_malloc(pool, 0, NULL, &p) == VPMM_ERR_INVALID_ARGUMENT);
  CHECK(contains(api->last_error(), "vpmm_pool_malloc"));
  CHECK(api->pool_free(pool, (char*)kv + 1, NULL) == VPMM_ERR_UNKNOWN_POINTER);

  memset(&stats, 0, sizeof stats);
  stats.struct_size = sizeof stats;
  CHECK_OK(api->pool_stats(pool, &stats));
  CHECK(stats.n_pause == 1 && stats.n_resume == 1 && stats.n_live == 1);
  CHECK_OK(api->pool_check(pool));
  CHECK_OK(api->pool_free(pool, kv, NULL));
  CHECK_OK(api->pool_destroy(pool));
}

int main(int argc, char** argv) {
  vpmm_loader L;
  const vpmm_api* api;
  if (argc != 2) {
    fprintf(stderr, "usage: %s PATH_TO_LIBVPMM_SO\n", argv[0]);
    return 2;
  }
  /* No link-time dependency: the library is not in the process before the
   * loader opens it (RTLD_NOLOAD finds only what is already loaded). */
  CHECK(dlopen(argv[1], RTLD_NOW | RTLD_NOLOAD) == NULL);

  test_failures(argv[1]);

  /* The success path through VPMM_LIBRARY (path NULL). */
  setenv("VPMM_LIBRARY", argv[1], 1);
  memset(&L, 0, sizeof L);
  if (vpmm_loader_open(&L, NULL) != 0) {
    fprintf(stderr, "FAIL: %s\n", L.error);
    return 1;
  }
  api = L.api;
  CHECK(strcmp(L.path, argv[1]) == 0 && L.error[0] == '\0');
  CHECK(api->abi_version == 1 && api->abi_version_fn() == 1);
  CHECK(api->struct_size == sizeof(vpmm_api));
  CHECK(VPMM_API_HAS(api, host_stream_synchronize));
  CHECK(VPMM_API_HAS(api, tag_scope_pop));
  CHECK(VPMM_API_HAS(api, pool_set_backup_dir));
  CHECK(api->tag_scope_push("loader", 0) == VPMM_OK && api->region_pop() == VPMM_OK);
  CHECK(api->tag_scope_pop() == VPMM_ERR_WRONG_STATE);
#ifdef VPMM_VERSION_STRING
  CHECK(strcmp(api->version(), VPMM_VERSION_STRING) == 0);
#endif
  test_host_pool(api);
  /* Left loaded, as a plugin leaves it: libvpmm keeps process-wide state
   * (thread-local messages, host stream workers) whose memory an unload
   * would strand (LeakSanitizer reports it). test_failures closed a loader
   * that made no pool. */

  printf("%d passed, %d failed\n", g_passed, g_failed);
  return g_failed ? 1 : 0;
}
