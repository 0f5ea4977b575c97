/* Proves include/vpmm.h is C99 clean and libvpmm.so exports a working C ABI:
 * this file compiles with -std=c99 -pedantic-errors -Wall -Wextra -Werror and
 * links only the shared library. It also checks that the C values of the
 * constants (the enumerators bindgen reads) name the same statuses and kinds
 * as the library, which is compiled as C++ and sees the C++ constants. */
#include <stdio.h>
#include <string.h>

#include "vpmm.h"
#include "vpmm_host_streams.h" /* test-only, C99 clean too */

/* The pattern vpmm.h documents for Go: the failing call and the copy of its
 * message in one C call, so both run on the same OS thread. */
static vpmm_status wrapped_malloc(vpmm_pool* p, uint64_t n, void** out, char* err, size_t cap) {
  vpmm_status st = vpmm_pool_malloc(p, n, NULL, out);
  if (st != VPMM_OK) vpmm_last_error_copy(err, cap);
  return st;
}

/* switch/case over the constants: they are integer constant expressions. */
static const char* short_name(vpmm_status s) {
  switch (s) {
    case VPMM_OK: return "ok";
    case VPMM_ERR_TIMEOUT: return "timeout";
    default: return "other";
  }
}

static int passed = 0, failed = 0;
#define EXPECT(c)                                                  \
  do {                                                             \
    if (c) {                                                       \
      ++passed;                                                    \
    } else {                                                       \
      ++failed;                                                    \
      printf("%s:%d: EXPECT(%s) failed: %s\n", __FILE__, __LINE__, #c, vpmm_last_error()); \
    }                                                              \
  } while (0)

int main(void) {
  vpmm_config cfg;
  vpmm_pool* pool = NULL;
  vpmm_stats st;
  void* p = NULL;
  size_t n = 0;
  static const struct {
    vpmm_status st;
    const char* name;
  } names[] = {{VPMM_OK, "VPMM_OK"},
               {VPMM_ERR_INVALID_ARGUMENT, "VPMM_ERR_INVALID_ARGUMENT"},
               {VPMM_ERR_OUT_OF_MEMORY, "VPMM_ERR_OUT_OF_MEMORY"},
               {VPMM_ERR_UNKNOWN_POINTER, "VPMM_ERR_UNKNOWN_POINTER"},
               {VPMM_ERR_WRONG_STATE, "VPMM_ERR_WRONG_STATE"},
               {VPMM_ERR_UNSUPPORTED, "VPMM_ERR_UNSUPPORTED"},
               {VPMM_ERR_BACKEND, "VPMM_ERR_BACKEND"},
               {VPMM_ERR_INTERNAL, "VPMM_ERR_INTERNAL"},
               {VPMM_ERR_TIMEOUT, "VPMM_ERR_TIMEOUT"},
               {VPMM_STATUS_SIGNED_, "VPMM_ERR_UNKNOWN"}};
  size_t i;
  vpmm_region_info regs[8];
  char err[16];
  size_t len;
  /* The README idiom for growable structs: no warning under -Wextra. */
  vpmm_stats s = {0};
  s.struct_size = sizeof s;

  EXPECT(strcmp(vpmm_version(), VPMM_VERSION_STRING) == 0);
  EXPECT(VPMM_VERSION_NUMBER == VPMM_VERSION_MAJOR * 10000 + VPMM_VERSION_MINOR * 100 + VPMM_VERSION_PATCH);
  EXPECT(vpmm_abi_version() == VPMM_ABI_VERSION);
  EXPECT(VPMM_ABI_VERSION == 1);
  for (i = 0; i < sizeof names / sizeof names[0]; ++i)
    EXPECT(strcmp(vpmm_status_string(names[i].st), names[i].name) == 0);
  EXPECT(VPMM_OK == 0 && VPMM_STATUS_SIGNED_ < 0 && VPMM_BACKEND_SIGNED_ < 0 && VPMM_REGION_SIGNED_ < 0);
  EXPECT(strcmp(short_name(VPMM_ERR_TIMEOUT), "timeout") == 0);
  EXPECT(sizeof(vpmm_region_info) == 72);  /* ABI 1 on 64-bit targets, no padding */
  EXPECT(vpmm_last_error() != NULL);
  vpmm_config_init_defaults(&cfg);
  EXPECT(cfg.struct_size == sizeof cfg && cfg.config_error == 0);
  vpmm_config_init(&cfg);
  EXPECT(cfg.struct_size == sizeof cfg);
  cfg.backend = VPMM_BACKEND_HOST;
  cfg.page_size = 1 << 16;
  cfg.va_size = 1 << 24;
  cfg.host_capacity = 1 << 24;
  EXPECT(vpmm_pool_create(&cfg, &pool) == VPMM_OK);
  if (!pool) return 1;
  EXPECT(strcmp(vpmm_pool_backend_name(pool), "host") == 0);
  EXPECT(vpmm_pool_malloc(pool, 100000, NULL, &p) == VPMM_OK);
  memset(p, 0xAB, 100000);
  EXPECT(vpmm_pool_malloc(pool, 0, NULL, &p) == VPMM_ERR_INVALID_ARGUMENT);
  EXPECT(strstr(vpmm_last_error(), "size 0") != NULL);
  /* The same message through the copying wrapper, truncated to err. */
  EXPECT(wrapped_malloc(pool, 0, &p, err, sizeof err) == VPMM_ERR_INVALID_ARGUMENT);
  len = vpmm_last_error_copy(NULL, 0);
  EXPECT(len == strlen(vpmm_last_error()) && len > sizeof err);
  EXPECT(strlen(err) == sizeof err - 1 && strncmp(err, vpmm_last_error(), sizeof err - 1) == 0);
  EXPECT(vpmm_pool_stats(pool, &s) == VPMM_OK && s.mapped_bytes > 0);
  memset(&st, 0, sizeof st);
  st.struct_size = sizeof st;
  EXPECT(vpmm_pool_stats(pool, &st) == VPMM_OK);
  EXPECT(st.live_bytes == 2 * (1 << 16));
  EXPECT(st.requested_bytes == 100000);
  EXPECT(vpmm_pool_dump(pool, NULL, 0, &n) == VPMM_OK && n >= 2);
  memset(regs, 0, sizeof regs);
  regs[0].struct_size = sizeof regs[0];
  EXPECT(vpmm_pool_dump(pool, regs, 8, &n) == VPMM_OK && n >= 2 && n <= 8);
  EXPECT(regs[0].kind == VPMM_REGION_LIVE && regs[0].va == (uint64_t)(uintptr_t)p);
  EXPECT(regs[1].struct_size == sizeof regs[1] && regs[n - 1].kind == VPMM_REGION_HOLE);
  {
    /* The layout string: live region first (2 pages), a hole last. */
    char lay[256];
    size_t need = 0;
    EXPECT(vpmm_pool_layout(pool, NULL, 0, &need) == VPMM_OK && need > 4 && need <= sizeof lay);
    EXPECT(vpmm_pool_layout(pool, lay, sizeof lay, NULL) == VPMM_OK);
    EXPECT(strncmp(lay, "[2]", 3) == 0 && strstr(lay, "[*") != NULL && strlen(lay) + 1 == need);
  }
  memset(&cfg, 0, sizeof cfg);
  cfg.struct_size = sizeof cfg;
  EXPECT(vpmm_pool_get_config(pool, &cfg) == VPMM_OK && cfg.backend == VPMM_BACKEND_HOST);
  EXPECT(vpmm_pool_free(pool, p, NULL) == VPMM_OK);
  EXPECT(vpmm_pool_free(pool, p, NULL) == VPMM_ERR_UNKNOWN_POINTER);
  EXPECT(vpmm_pool_check(pool) == VPMM_OK);
  {
    vpmm_stream hs = NULL;
    EXPECT(vpmm_host_stream_create(&hs) == VPMM_OK);
    EXPECT(vpmm_pool_malloc(pool, 1000, hs, &p) == VPMM_OK);
    EXPECT(vpmm_pool_free(pool, p, hs) == VPMM_OK);
    EXPECT(vpmm_host_stream_destroy(hs) == VPMM_OK);
  }
  {
    /* vpmm_tag_scope_push/pop are vpmm_region_push/pop under a clearer name:
     * the same per-thread stack, so either pop closes either push. */
    vpmm_tag_stats ts;
    memset(&ts, 0, sizeof ts);
    ts.struct_size = sizeof ts;
    EXPECT(vpmm_tag_scope_push("scoped", 0) == VPMM_OK);
    EXPECT(vpmm_pool_malloc(pool, 1 << 16, NULL, &p) == VPMM_OK);
    EXPECT(vpmm_region_pop() == VPMM_OK);
    EXPECT(vpmm_pool_tag_stats(pool, "scoped", &ts) == VPMM_OK && ts.n_live == 1);
    EXPECT(vpmm_pool_pause(pool, "scoped") == VPMM_OK);
    EXPECT(vpmm_pool_resume(pool, "scoped") == VPMM_OK);
    EXPECT(vpmm_pool_free(pool, p, NULL) == VPMM_OK);
    EXPECT(vpmm_region_push("other", VPMM_ALLOC_HOST_BACKUP) == VPMM_OK);
    EXPECT(vpmm_tag_scope_pop() == VPMM_OK);
    EXPECT(vpmm_tag_scope_pop() == VPMM_ERR_WRONG_STATE);
    EXPECT(strstr(vpmm_last_error(), "vpmm_tag_scope_pop") != NULL);
    EXPECT(vpmm_tag_scope_push("t", 0x10) == VPMM_ERR_INVALID_ARGUMENT);
    EXPECT(strstr(vpmm_last_error(), "vpmm_tag_scope_push") != NULL);
    EXPECT(vpmm_region_pop() == VPMM_ERR_WRONG_STATE);
  }
  EXPECT(vpmm_pool_destroy(pool) == VPMM_OK);
  printf("%d passed, %d failed\n", passed, failed);
  return failed != 0;
}
