/* Load libvpmm at run time, with no link-time dependency, and use a pool.
 *
 *   cc -std=c99 -I/usr/include loader_example.c -ldl -o loader_example
 *   VPMM_LIBRARY=/path/to/libvpmm.so.1 ./loader_example     (or on the loader's path)
 *
 * The pattern a plugin (XLA FFI custom call, PJRT plugin, allocator shim)
 * follows: one vpmm_loader for the life of the process, every call through
 * L.api. Runs on any machine: it asks for the host backend when no GPU is
 * usable (VPMM_BACKEND=auto picks CUDA when it can). */
#include <stdio.h>
#include <string.h>

#include "vpmm_loader.h"

int main(void) {
  vpmm_loader L;
  const vpmm_api* api;
  vpmm_config cfg;
  vpmm_pool* pool = NULL;
  vpmm_alloc_attrs attrs;
  void* buf = NULL;
  uint64_t n = 0;

  if (vpmm_loader_open(&L, NULL) != 0) {
    fprintf(stderr, "%s\n", L.error); /* names the file and what was missing */
    return 1;
  }
  api = L.api;
  printf("loaded %s: libvpmm %s, ABI %u, %u-byte table\n", L.path, api->version(),
         (unsigned)api->abi_version, (unsigned)api->struct_size);

  api->config_init(&cfg); /* VPMM_* environment applies */
  if (api->pool_create(&cfg, &pool) != VPMM_OK) {
    fprintf(stderr, "pool_create: %s\n", api->last_error());
    return 1;
  }
  memset(&attrs, 0, sizeof attrs);
  attrs.struct_size = sizeof attrs;
  attrs.tag = "scratch";
  if (api->pool_malloc_ex(pool, 8u << 20, NULL, &attrs, &buf) != VPMM_OK ||
      api->pool_pause_ex(pool, "scratch", &n) != VPMM_OK ||
      api->pool_resume(pool, "scratch") != VPMM_OK) {
    fprintf(stderr, "vpmm: %s\n", api->last_error());
    return 1;
  }
  printf("%s backend: 8 MiB at %p, paused %llu region(s) and resumed at the same address\n",
         api->pool_backend_name(pool), buf, (unsigned long long)n);
  api->pool_free(pool, buf, NULL);
  api->pool_destroy(pool);
  vpmm_loader_close(&L); /* every pool is destroyed: unloading is safe */
  return 0;
}
