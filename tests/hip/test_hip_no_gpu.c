/* The HIP backend on a machine with the real HIP runtime (Debian's
 * libamdhip64) and no AMD GPU: asking for VPMM_BACKEND_HIP must return a
 * clean status with a message, never crash; AUTO must pass over HIP.
 * Exit 77 (skip) when the machine has no HIP runtime at all, or has an AMD
 * GPU (then this is not the situation tested). */
#define _POSIX_C_SOURCE 200809L /* unsetenv */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vpmm.h"

static int failed = 0;
#define EXPECT(c)                                                  \
  do {                                                             \
    if (!(c)) {                                                    \
      printf("FAIL %s:%d: %s\n", __FILE__, __LINE__, #c);          \
      failed = 1;                                                  \
    }                                                              \
  } while (0)

int main(void) {
  unsetenv("VPMM_HIP_LIBRARY"); /* the real runtime, found as libvpmm finds it */
  const char* found = NULL;
  const char* names[] = {"libamdhip64.so.7", "libamdhip64.so.6", "libamdhip64.so.5"};
  for (int i = 0; i < 3 && !found; ++i) {
    void* h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (h) found = names[i];
  }
  if (!found) {
    printf("SKIP: no HIP runtime installed (apt-get install libamdhip64-dev; scripts/deps.sh does)\n");
    return 77;
  }
  char info[1024];
  size_t n = 0;
  EXPECT(vpmm_backend_info(VPMM_BACKEND_HIP, info, sizeof info, &n) == VPMM_OK);
  printf("vpmm_backend_info(HIP): %s\n", info);
  EXPECT(strstr(info, "HIP runtime ") != NULL);

  vpmm_config c;
  vpmm_config_init_defaults(&c);
  c.backend = VPMM_BACKEND_HIP;
  vpmm_pool* p = NULL;
  vpmm_status st = vpmm_pool_create(&c, &p);
  if (st == VPMM_OK) {
    printf("SKIP: an AMD GPU is usable here (%s): not the no-GPU case\n", found);
    vpmm_pool_destroy(p);
    return 77;
  }
  printf("vpmm_pool_create(HIP) = %s: %s\n", vpmm_status_string(st), vpmm_last_error());
  EXPECT(st == VPMM_ERR_UNSUPPORTED);
  EXPECT(p == NULL);
  EXPECT(strstr(vpmm_last_error(), "vpmm_pool_create: hip") != NULL);
  EXPECT(strstr(vpmm_last_error(), "no AMD GPU") != NULL);
  EXPECT(strstr(vpmm_last_error(), "libamdhip64") != NULL); /* names the runtime it loaded */

  c.backend = VPMM_BACKEND_AUTO;
  st = vpmm_pool_create(&c, &p);
  EXPECT(st == VPMM_OK);
  if (st == VPMM_OK) {
    EXPECT(strcmp(vpmm_pool_backend_name(p), "hip") != 0);
    vpmm_pool_destroy(p);
  }
  printf("%s\n", failed ? "FAILED" : "ok");
  return failed;
}
