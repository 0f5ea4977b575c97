/* A fully static program (linked -static against libvpmm.a, as
 * tests/static/static_link.sh does) that leaves the backend to libvpmm,
 * then asks for each GPU backend by name. A static program cannot load a
 * vendor runtime at run time (dlopen would bring a second C library into a
 * process that has one built in), so: the default backend ('auto') must
 * give a working pool on the host, and CUDA and HIP must fail with
 * UNSUPPORTED and a message that says why, never crash (issue 35 item 12:
 * dlopen of libamdhip64 segfaulted inside vpmm_pool_create where the HIP
 * runtime is installed). */
#include <stdio.h>
#include <string.h>
#include <vpmm.h>

static int expect_unsupported(int32_t backend, const char* name) {
  vpmm_config c;
  vpmm_pool* pool = NULL;
  vpmm_status st;
  vpmm_config_init_defaults(&c);
  c.backend = backend;
  st = vpmm_pool_create(&c, &pool);
  if (st == VPMM_OK) {
    fprintf(stderr, "FAIL: a %s pool in a static program\n", name);
    vpmm_pool_destroy(pool);
    return 1;
  }
  printf("%s: %s: %s\n", name, vpmm_status_string(st), vpmm_last_error());
  /* A library built without that backend (no CUDA headers where it was
   * built) says so instead: as good a reason, and as clear. */
  if (st != VPMM_ERR_UNSUPPORTED || pool != NULL ||
      (strstr(vpmm_last_error(), "statically linked") == NULL && strstr(vpmm_last_error(), "built without the") == NULL)) {
    fprintf(stderr, "FAIL: %s in a static program: want UNSUPPORTED saying it is statically linked (or not built)\n",
            name);
    return 1;
  }
  return 0;
}

int main(void) {
  vpmm_config c;
  vpmm_pool* pool = NULL;
  void* p = NULL;
  int bad = 0;
  vpmm_config_init_defaults(&c); /* backend 'auto' */
  c.host_capacity = 64u << 20;
  if (vpmm_pool_create(&c, &pool) != VPMM_OK) {
    fprintf(stderr, "FAIL: auto in a static program: %s\n", vpmm_last_error());
    return 1;
  }
  printf("auto: %s\n", vpmm_pool_backend_name(pool));
  if (strcmp(vpmm_pool_backend_name(pool), "host") != 0) bad = 1;
  if (vpmm_pool_malloc(pool, 1 << 20, NULL, &p) != VPMM_OK) return 1;
  memset(p, 0x5a, 1 << 20);
  if (vpmm_pool_free(pool, p, NULL) != VPMM_OK || vpmm_pool_destroy(pool) != VPMM_OK) return 1;
  bad |= expect_unsupported(VPMM_BACKEND_CUDA, "cuda");
  bad |= expect_unsupported(VPMM_BACKEND_HIP, "hip");
  if (!bad) printf("PASS\n");
  return bad;
}
