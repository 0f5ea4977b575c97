/*
 * libvpmm: vpmm_get_api's function table, for programs that load the
 * library at run time (dlopen) instead of linking it.
 *
 * Part of the public header: vpmm.h includes it at its end, so a program
 * includes vpmm.h (or vpmm_loader.h, which does the dlopen) and never needs
 * to name this file; including it first works too (it includes vpmm.h).
 * Kept apart because the table repeats every function of vpmm.h as a
 * pointer: vpmm.h stays the API, this file its run-time loading form.
 * Moving it here changed no declaration, layout or symbol. The conventions
 * of vpmm.h hold; plain C99.
 */
#ifndef VPMM_API_TABLE_H
#define VPMM_API_TABLE_H

#include "vpmm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Run-time loading: the function table                                     */
/* ------------------------------------------------------------------------ */
/* Plugins that must not link libvpmm (XLA FFI custom calls, PJRT plugins,
 * allocator shims of other runtimes) dlopen it and look up ONE symbol,
 * vpmm_get_api, which hands out every other function of the ABI in a table.
 * include/vpmm_loader.h does the dlopen, the lookup and the checks for C99
 * callers.
 *
 * The table covers every exported function of the library except
 * vpmm_get_api itself, the host streams of vpmm_host_streams.h included
 * (tests and `vpmm replay --gpu-lag` use them; they are exported, so a
 * dlopen consumer of the host backend's streams needs them too; the entries
 * exist whether or not the caller includes that header). Entries are named
 * like the functions without the vpmm_ prefix: api->pool_malloc is
 * vpmm_pool_malloc. The table is size-prefixed
 * and only grows: a function added to the library is appended at the end of
 * the struct, never inserted; nothing is reordered or removed within an ABI
 * version. A caller built against a newer header than the library it loads
 * tests VPMM_API_HAS(api, entry) before calling an entry the older library
 * may not have. */
typedef struct vpmm_api {
  uint32_t struct_size; /* the library's sizeof(vpmm_api): entries past it do not exist */
  uint32_t abi_version; /* the ABI version this table implements (= the one asked for) */
  /* versions and errors */
  const char* (*version)(void);
  int32_t (*abi_version_fn)(void); /* vpmm_abi_version (the name abi_version is the field above) */
  const char* (*status_string)(vpmm_status status);
  const char* (*last_error)(void);
  size_t (*last_error_copy)(char* buf, size_t capacity);
  /* configuration and pool lifetime */
  void (*config_init)(vpmm_config* config);
  void (*config_init_defaults)(vpmm_config* config);
  vpmm_status (*pool_create)(const vpmm_config* config, vpmm_pool** out);
  vpmm_status (*pool_destroy)(vpmm_pool* pool);
  /* allocation and streams */
  vpmm_status (*pool_malloc)(vpmm_pool* pool, uint64_t size, vpmm_stream stream, void** out);
  vpmm_status (*pool_free)(vpmm_pool* pool, void* ptr, vpmm_stream stream);
  vpmm_status (*pool_lookup)(vpmm_pool* pool, const void* ptr, void** base, uint64_t* size);
  vpmm_status (*pool_stream_synchronize)(vpmm_pool* pool, vpmm_stream stream);
  vpmm_status (*pool_stream_create)(vpmm_pool* pool, vpmm_stream* out);
  vpmm_status (*pool_stream_destroy)(vpmm_pool* pool, vpmm_stream stream);
  vpmm_status (*pool_stream_retire)(vpmm_pool* pool, vpmm_stream stream);
  /* tags, pause and resume */
  vpmm_status (*pool_malloc_ex)(vpmm_pool* pool, uint64_t size, vpmm_stream stream,
                                const vpmm_alloc_attrs* attrs, void** out);
  vpmm_status (*region_push)(const char* tag, uint32_t flags);
  vpmm_status (*region_pop)(void);
  vpmm_status (*pool_pause)(vpmm_pool* pool, const char* tag);
  vpmm_status (*pool_pause_ex)(vpmm_pool* pool, const char* tag, uint64_t* n_changed);
  vpmm_status (*pool_resume)(vpmm_pool* pool, const char* tag);
  vpmm_status (*pool_resume_ex)(vpmm_pool* pool, const char* tag, uint64_t* n_changed);
  vpmm_status (*pool_trim)(vpmm_pool* pool, uint64_t keep_bytes);
  vpmm_status (*pool_tag_stats)(vpmm_pool* pool, const char* tag, vpmm_tag_stats* out);
  /* limits, reservations, callbacks */
  vpmm_status (*pool_reserve)(vpmm_pool* pool, uint64_t bytes, uint32_t flags,
                              vpmm_reservation** out);
  vpmm_status (*pool_reserve_ex)(vpmm_pool* pool, uint64_t bytes, uint32_t flags,
                                 uint64_t timeout_ns, vpmm_reservation** out);
  vpmm_status (*reservation_info)(vpmm_pool* pool, const vpmm_reservation* res, uint64_t* size,
                                  uint64_t* used);
  vpmm_status (*reservation_release)(vpmm_pool* pool, vpmm_reservation* res);
  vpmm_status (*pool_set_limit)(vpmm_pool* pool, uint64_t bytes);
  vpmm_status (*pool_set_oom_callback)(vpmm_pool* pool, vpmm_oom_fn fn, void* user);
  vpmm_status (*pool_set_pressure_callback)(vpmm_pool* pool, vpmm_pressure_fn fn, void* user);
  /* observability */
  vpmm_status (*pool_stats)(vpmm_pool* pool, vpmm_stats* stats);
  vpmm_status (*pool_dump)(vpmm_pool* pool, vpmm_region_info* buf, size_t capacity,
                           size_t* count);
  vpmm_status (*pool_visit)(vpmm_pool* pool, vpmm_region_info_fn fn, void* user);
  vpmm_status (*pool_dump_text)(vpmm_pool* pool, char* buf, size_t capacity, size_t* needed);
  vpmm_status (*pool_check)(vpmm_pool* pool);
  vpmm_status (*pool_get_config)(vpmm_pool* pool, vpmm_config* config);
  const char* (*pool_backend_name)(vpmm_pool* pool);
  /* default pools and allocator hooks */
  vpmm_status (*default_pool)(int32_t device, vpmm_pool** out);
  void* (*torch_malloc)(ptrdiff_t size, int device, void* stream);
  void (*torch_free)(void* ptr, ptrdiff_t size, int device, void* stream);
  /* option table and struct facts */
  uint32_t (*option_count)(void);
  vpmm_status (*option_get)(uint32_t i, vpmm_option_info* out);
  vpmm_status (*option_find)(const char* name, vpmm_option_info* out, uint32_t* index);
  vpmm_status (*struct_layout)(const char* name, uint32_t* size, uint32_t* fields);
  vpmm_status (*struct_field)(const char* name, uint32_t i, vpmm_field_info* out);
  /* host backend streams (vpmm_host_streams.h: tests, vpmm replay --gpu-lag) */
  vpmm_status (*host_stream_create)(vpmm_stream* out);
  vpmm_status (*host_stream_destroy)(vpmm_stream stream);
  vpmm_status (*host_stream_hold)(vpmm_stream stream);
  vpmm_status (*host_stream_release)(vpmm_stream stream);
  vpmm_status (*host_stream_launch)(vpmm_stream stream, void (*fn)(void*), void* user);
  vpmm_status (*host_stream_synchronize)(vpmm_stream stream);
  /* layout string, backups of paused allocations, CuPy hooks */
  vpmm_status (*pool_layout)(vpmm_pool* pool, char* buf, size_t capacity, size_t* needed);
  vpmm_status (*pool_backup_lookup)(vpmm_pool* pool, const void* ptr, void** host, uint64_t* bytes);
  void* (*cupy_malloc)(void* param, size_t size, int device);
  void (*cupy_free)(void* param, void* ptr, int device);
  /* what a backend would use here (vpmm info) */
  vpmm_status (*backend_info)(int32_t backend, char* buf, size_t capacity, size_t* length);
  /* pinning backups ahead of the first pause */
  vpmm_status (*pool_prepare_backups)(vpmm_pool* pool, const char* tag, uint64_t* cached_bytes);
  /* tag scopes under their clearer names (= region_push, region_pop) */
  vpmm_status (*tag_scope_push)(const char* tag, uint32_t flags);
  vpmm_status (*tag_scope_pop)(void);
  /* backup stores, retained backups, unchanged re-pause */
  vpmm_status (*tag_scope_push_ex)(const vpmm_alloc_attrs* attrs);
  vpmm_status (*pool_pause_flags)(vpmm_pool* pool, const char* tag, uint32_t flags, uint64_t* n_changed);
  vpmm_status (*pool_set_backup_dir)(vpmm_pool* pool, const char* dir);
  /* sharing memory with other processes */
  vpmm_status (*pool_export)(vpmm_pool* pool, const void* ptr, vpmm_export** out);
  vpmm_status (*pool_export_tag)(vpmm_pool* pool, const char* tag, vpmm_export** out);
  vpmm_status (*export_entry)(const vpmm_export* ex, size_t index, vpmm_ipc_entry* out);
  vpmm_status (*export_descriptor)(const vpmm_export* ex, void* buf, size_t capacity, size_t* size, int* fds,
                                   size_t fd_capacity, size_t* n_fds);
  vpmm_status (*export_send)(const vpmm_export* ex, int socket);
  vpmm_status (*export_state)(const vpmm_export* ex, int32_t* state, uint32_t* importers, uint64_t* imports);
  vpmm_status (*export_close)(vpmm_pool* pool, vpmm_export* ex);
  vpmm_status (*pool_import)(vpmm_pool* pool, const void* desc, size_t size, const int* fds, size_t n_fds,
                             vpmm_import** out);
  vpmm_status (*import_entry)(const vpmm_import* imp, size_t index, vpmm_ipc_entry* out);
  vpmm_status (*import_state)(const vpmm_import* imp, int32_t* state);
  vpmm_status (*import_close)(vpmm_pool* pool, vpmm_import* imp);
  vpmm_status (*ipc_send)(int socket, const void* desc, size_t size, const int* fds, size_t n_fds);
  vpmm_status (*ipc_recv)(int socket, void* buf, size_t capacity, size_t* size, int* fds, size_t fd_capacity,
                          size_t* n_fds);
  vpmm_status (*pool_ipc_stats)(vpmm_pool* pool, vpmm_ipc_stats* stats);
  /* retained backups chosen at resume */
  vpmm_status (*pool_resume_flags)(vpmm_pool* pool, const char* tag, uint32_t flags, uint64_t* n_changed);
  /* one export of many allocations */
  vpmm_status (*pool_export_many)(vpmm_pool* pool, const void* const* ptrs, size_t n, vpmm_export** out);
  vpmm_status (*pool_prepare_export)(vpmm_pool* pool, const char* tag, uint64_t* n_handles);
  /* a configuration of the caller's size */
  vpmm_status (*config_init_sized)(vpmm_config* config, uint32_t struct_size, uint32_t flags);
  /* PyTorch's record_stream for the torch hooks */
  void (*torch_record_stream)(void* ptr, void* stream);
  /* driver calls by kind */
  vpmm_status (*pool_driver_profile)(vpmm_pool* pool, vpmm_driver_profile* out);
  /* the ledger shared by the pools of several processes (vpmm_ledger.h) */
  vpmm_status (*pool_create_ledger)(const vpmm_config* config, const char* ledger, vpmm_pool** out);
  vpmm_status (*ledger_read)(const char* name, int32_t device, struct vpmm_ledger_info* info,
                             struct vpmm_ledger_member* members, uint32_t capacity, uint32_t* n_members);
  vpmm_status (*ledger_set_budget)(const char* name, int32_t device, uint64_t bytes);
  vpmm_status (*ledger_remove)(const char* name);
  vpmm_status (*pool_ledger_evictable)(vpmm_pool* pool, const char* const* tags, size_t n);
  /* the name tables: backend kinds, backup stores */
  const char* (*backend_kind_name)(int32_t kind);
  const char* (*backup_store_name)(uint32_t index, uint32_t* flag);
  /* options parsed as their variables are */
  vpmm_status (*option_parse)(const char* name, const char* text, vpmm_config* config);
  const char* (*placement_name)(int32_t placement);
  /* the ledger's disk fallback for pauses the host budget refuses */
  vpmm_status (*pool_ledger_set_fallback)(vpmm_pool* pool, uint32_t flags);
  /* the program's steps */
  vpmm_status (*pool_mark_step)(vpmm_pool* pool);
  /* New entries are appended here, never inserted above. */
} vpmm_api;

/* Whether the loaded library's table has `entry` (a field name of vpmm_api):
 * its struct_size reaches past the end of that field. */
#define VPMM_API_HAS(api, entry)                                                       \
  ((api) != NULL && (size_t)(api)->struct_size >=                                      \
                        offsetof(vpmm_api, entry) + sizeof(((vpmm_api*)0)->entry))

/* The table of ABI version abi_version (pass VPMM_ABI_VERSION, or 1). The
 * table is static and constant: valid while the library stays loaded, never
 * freed, shared by every caller. Returns NULL when this library does not
 * implement that ABI version (only 1 exists today); the reason is then in
 * vpmm_last_error() (which a caller holding no table reaches with dlsym, or
 * simply reports "ABI version N not provided", as vpmm_loader.h does).
 * Never fails otherwise; thread safe; callable before any other vpmm_* call. */
VPMM_API const vpmm_api* vpmm_get_api(uint32_t abi_version);

#ifdef __cplusplus
}
#endif
#endif /* VPMM_API_TABLE_H */
