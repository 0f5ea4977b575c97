/*
 * libvpmm: a header-only C99 loader, for plugins that must not link libvpmm
 * (XLA FFI custom calls, PJRT plugins, allocator shims of other runtimes).
 *
 *   #include "vpmm_loader.h"
 *   vpmm_loader L;
 *   if (vpmm_loader_open(&L, NULL) != 0) { fprintf(stderr, "%s\n", L.error); return 1; }
 *   vpmm_pool* pool;
 *   L.api->pool_create(NULL, &pool);          // every vpmm_* function, through L.api
 *   ...
 *   vpmm_loader_close(&L);                    // optional, see below
 *
 * It dlopens the library, looks up ONE symbol (vpmm_get_api), asks it for the
 * table of the ABI version this header was written for, and checks the
 * table's version and size. Nothing here needs libvpmm at link time: link
 * with -ldl where the C library wants it (glibc before 2.34). Only vpmm.h's
 * types are used from the library's headers, so this file plus vpmm.h (and
 * vpmm_version.h, when present) is all a plugin needs.
 *
 * Which file is opened, in order: the `path` argument when not NULL, else the
 * environment variable VPMM_LIBRARY when set and not empty, else
 * "libvpmm.so.1" through the system loader's search (LD_LIBRARY_PATH, the
 * RUNPATH of the calling object, ld.so.cache). The library is opened with
 * RTLD_NOW | RTLD_LOCAL: nothing of it becomes visible to later dlsym calls
 * of the process, and a missing dependency fails here, not at a later call.
 *
 * Errors: every function returns 0 on success and -1 on failure; on failure
 * loader->error holds a sentence naming the file and what is missing (the
 * library, the symbol, the ABI version, table entries), loader->api is NULL
 * and nothing stays open.
 *
 * Ownership and lifetime: the table belongs to the library and is valid
 * until the library is unloaded. vpmm_loader_close drops this loader's
 * reference (dlclose); the library is unloaded only when no other reference
 * remains (the dynamic loader counts them). Close only after every pool
 * created through the table is destroyed; a process that used the default
 * pools (vpmm_default_pool, vpmm_torch_malloc) must never unload the library
 * (those pools live until exit), so such plugins simply never close.
 *
 * Thread safety: a vpmm_loader is a plain struct, used by one thread while
 * it is opened or closed; the table it holds may then be used from any
 * thread, as the functions' own rules allow. dlopen itself is thread safe.
 */
#ifndef VPMM_LOADER_H
#define VPMM_LOADER_H

#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vpmm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The ABI version this header asks for: the one of the vpmm.h next to it. */
#ifdef VPMM_ABI_VERSION
#define VPMM_LOADER_ABI_VERSION ((uint32_t)VPMM_ABI_VERSION)
#else
#define VPMM_LOADER_ABI_VERSION 1u /* vpmm.h read from a source tree, without vpmm_version.h */
#endif

/* The default file name (the SONAME of ABI 1). */
#define VPMM_LOADER_DEFAULT_NAME "libvpmm.so.1"

typedef struct vpmm_loader {
  const vpmm_api* api; /* the table, or NULL when not open */
  void* handle;        /* the dlopen handle, or NULL */
  char path[512];      /* the file name that was (or was to be) opened */
  char error[1024];    /* "" or why the last open failed */
} vpmm_loader;

/* Open with explicit requirements: abi_version is the table to ask for
 * (VPMM_LOADER_ABI_VERSION), min_table_size the fewest bytes of table the
 * caller needs (sizeof(vpmm_api) to require every entry of its vpmm.h;
 * smaller, down to offsetof(vpmm_api, version), to accept an older library
 * and test VPMM_API_HAS before calling newer entries). path may be NULL (see
 * the top of this file). loader must not be NULL and must be zeroed
 * (vpmm_loader L = {0}; as vpmm_loader_open does) or have been opened
 * before: a loader still open is closed first. */
static inline int vpmm_loader_open_ex(vpmm_loader* loader, const char* path,
                                      uint32_t abi_version, size_t min_table_size) {
  typedef const vpmm_api* (*get_api_fn)(uint32_t);
  const char* env = getenv("VPMM_LIBRARY");
  const char* source = "the argument";
  const char* dl_msg;
  void* sym;
  get_api_fn get_api;
  const vpmm_api* api;

  if (loader->handle != NULL) {
    dlclose(loader->handle);
  }
  loader->api = NULL;
  loader->handle = NULL;
  loader->error[0] = '\0';
  if (path == NULL || path[0] == '\0') {
    if (env != NULL && env[0] != '\0') {
      path = env;
      source = "VPMM_LIBRARY";
    } else {
      path = VPMM_LOADER_DEFAULT_NAME;
      source = "the default name";
    }
  }
  snprintf(loader->path, sizeof loader->path, "%s", path);

  loader->handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (loader->handle == NULL) {
    dl_msg = dlerror();
    snprintf(loader->error, sizeof loader->error,
             "vpmm_loader: cannot load libvpmm from %s (%s): %s", path, source,
             dl_msg ? dl_msg : "unknown dlopen error");
    return -1;
  }
  dlerror(); /* clear a stale message, so a NULL result below is explained by this lookup */
  sym = dlsym(loader->handle, "vpmm_get_api");
  if (sym == NULL) {
    dl_msg = dlerror();
    snprintf(loader->error, sizeof loader->error,
             "vpmm_loader: %s does not export vpmm_get_api (not libvpmm, or a libvpmm older "
             "than the run-time loading contract): %s",
             path, dl_msg ? dl_msg : "symbol is NULL");
    dlclose(loader->handle);
    loader->handle = NULL;
    return -1;
  }
  /* ISO C has no conversion from void* to a function pointer; POSIX
   * guarantees the representation is the same, and memcpy says so without a
   * cast that -pedantic rejects. */
  memcpy(&get_api, &sym, sizeof get_api);

  api = get_api(abi_version);
  if (api == NULL) {
    snprintf(loader->error, sizeof loader->error,
             "vpmm_loader: %s does not provide ABI version %u of the vpmm API "
             "(vpmm_get_api(%u) returned NULL); this program was built for ABI %u",
             path, (unsigned)abi_version, (unsigned)abi_version,
             (unsigned)VPMM_LOADER_ABI_VERSION);
    dlclose(loader->handle);
    loader->handle = NULL;
    return -1;
  }
  if (api->abi_version != abi_version) {
    snprintf(loader->error, sizeof loader->error,
             "vpmm_loader: %s returned a table of ABI version %u when asked for %u",
             path, (unsigned)api->abi_version, (unsigned)abi_version);
    dlclose(loader->handle);
    loader->handle = NULL;
    return -1;
  }
  if (min_table_size < offsetof(vpmm_api, version)) min_table_size = offsetof(vpmm_api, version);
  if ((size_t)api->struct_size < min_table_size) {
    snprintf(loader->error, sizeof loader->error,
             "vpmm_loader: %s (libvpmm %s) has a function table of %u bytes, this program "
             "needs %u: the library is older than the vpmm.h it was built against and lacks "
             "%u entries",
             path, VPMM_API_HAS(api, version) ? api->version() : "?",
             (unsigned)api->struct_size, (unsigned)min_table_size,
             (unsigned)((min_table_size - api->struct_size) / sizeof(void (*)(void))));
    dlclose(loader->handle);
    loader->handle = NULL;
    return -1;
  }
  loader->api = api;
  return 0;
}

/* Open the library (path may be NULL), requiring the ABI version and every
 * table entry of the vpmm.h this file was compiled with. See the top of this
 * file for which file is opened and what an error says. */
static inline int vpmm_loader_open(vpmm_loader* loader, const char* path) {
  memset(loader, 0, sizeof *loader);
  return vpmm_loader_open_ex(loader, path, VPMM_LOADER_ABI_VERSION, sizeof(vpmm_api));
}

/* Drop this loader's reference to the library (see the lifetime rules at the
 * top); loader->api becomes NULL. Closing a closed loader does nothing. */
static inline void vpmm_loader_close(vpmm_loader* loader) {
  if (loader->handle != NULL) dlclose(loader->handle);
  loader->handle = NULL;
  loader->api = NULL;
}

#ifdef __cplusplus
}
#endif
#endif /* VPMM_LOADER_H */
