/* A C program linked statically against libvpmm.a with nothing but what
 * `pkg-config --static --cflags --libs vpmm` prints (tests/static/
 * static_link.sh): proves Libs.private carries the C++ runtime. It also
 * defines symbols named like the helpers the archive once exported
 * (format_bytes, dump_text, malloc_with): they must not clash. */
#include <stdio.h>
#include <string.h>
#include <vpmm.h>

int format_bytes(void) { return 1; }
int dump_text(void) { return 2; }
int malloc_with(void) { return 3; }

int main(void) {
  vpmm_config c;
  vpmm_pool* pool = NULL;
  void* p = NULL;
  vpmm_config_init(&c);
  c.backend = VPMM_BACKEND_HOST;
  if (vpmm_pool_create(&c, &pool) != VPMM_OK) {
    fprintf(stderr, "create: %s\n", vpmm_last_error());
    return 1;
  }
  if (vpmm_pool_malloc(pool, 1000, NULL, &p) != VPMM_OK) return 1;
  memset(p, 0x5a, 1000);
  if (vpmm_pool_free(pool, p, NULL) != VPMM_OK || vpmm_pool_destroy(pool) != VPMM_OK) return 1;
  printf("static link ok: libvpmm %s, %d\n", vpmm_version(), format_bytes() + dump_text() + malloc_with());
  return 0;
}
