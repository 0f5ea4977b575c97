/* Proves include/vpmm.h is C99 clean and libvpmm.so exports a working C ABI:
 * this file compiles with -std=c99 -pedantic-errors and links only the shared
 * library. */
#include <stdio.h>
#include <string.h>

#include "vpmm.h"
#include "vpmm_host_streams.h" /* test-only, C99 clean too */

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
  EXPECT(strcmp(vpmm_version(), "0.1.0") == 0);
  EXPECT(vpmm_abi_version() == VPMM_ABI_VERSION);
  EXPECT(strcmp(vpmm_status_string(VPMM_ERR_OUT_OF_MEMORY), "VPMM_ERR_OUT_OF_MEMORY") == 0);
  EXPECT(vpmm_last_error() != NULL);
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
  memset(&st, 0, sizeof st);
  st.struct_size = sizeof st;
  EXPECT(vpmm_pool_stats(pool, &st) == VPMM_OK);
  EXPECT(st.live_bytes == 2 * (1 << 16));
  EXPECT(st.requested_bytes == 100000);
  EXPECT(vpmm_pool_dump(pool, NULL, 0, &n) == VPMM_OK && n >= 2);
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
  EXPECT(vpmm_pool_destroy(pool) == VPMM_OK);
  printf("%d passed, %d failed\n", passed, failed);
  return failed != 0;
}
