/* The C side of the Go binding: one static inline wrapper per libvpmm call
 * (see capi.go for why). Included by the package's cgo preambles. */
#ifndef VPMM_GO_H
#define VPMM_GO_H
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "vpmm.h"
#include "vpmm_host_streams.h"

/* What a wrapper reports besides the status: the message of a failure, and
 * the OS thread the call ran on, where any callback it triggered ran too
 * (that is how a panic recovered in a callback finds its call). */
typedef struct go_vpmm_msg {
  char text[512];
  uint64_t thread;
} go_vpmm_msg;

/* The calling OS thread (callbacks.c). */
uint64_t go_vpmm_thread(void);

static inline vpmm_status go_vpmm_ret(vpmm_status st, go_vpmm_msg* m) {
  m->thread = go_vpmm_thread();
  if (st != VPMM_OK) vpmm_last_error_copy(m->text, sizeof m->text);
  return st;
}
#define GO_VPMM(call) go_vpmm_ret((call), m)
#define GO_PTR(x) ((void*)(uintptr_t)(x))

// Trampolines of callbacks.c (they call the //export functions).
int go_vpmm_oom_trampoline(vpmm_pool* pool, uint64_t bytes, void* user);
void go_vpmm_pressure_trampoline(vpmm_pool* pool, int under, uint64_t mapped, void* user);

static inline vpmm_status go_vpmm_pool_create(const vpmm_config* c, vpmm_pool** out, go_vpmm_msg* m) {
  return GO_VPMM(vpmm_pool_create(c, out));
}
// The ledger option's name into c->ledger: the library keeps a copy of it
// for the life of the process, so the Go side frees its C string at once.
static inline vpmm_status go_vpmm_config_set_ledger(vpmm_config* c, const char* name, go_vpmm_msg* m) {
  return GO_VPMM(vpmm_option_parse("ledger", name, c));
}
static inline vpmm_status go_vpmm_pool_destroy(vpmm_pool* p, go_vpmm_msg* m) {
  return GO_VPMM(vpmm_pool_destroy(p));
}
static inline vpmm_status go_vpmm_pool_get_config(vpmm_pool* p, vpmm_config* c, go_vpmm_msg* m) {
  c->struct_size = sizeof *c;
  return GO_VPMM(vpmm_pool_get_config(p, c));
}
static inline vpmm_status go_vpmm_pool_malloc(vpmm_pool* p, uint64_t size, uintptr_t s, uintptr_t* out,
                                              go_vpmm_msg* m) {
  void* ptr = NULL;
  vpmm_status st = GO_VPMM(vpmm_pool_malloc(p, size, GO_PTR(s), &ptr));
  if (st == VPMM_OK) *out = (uintptr_t)ptr;
  return st;
}
static inline vpmm_status go_vpmm_pool_malloc_ex(vpmm_pool* p, uint64_t size, uintptr_t s, uint32_t flags,
                                              const char* tag, vpmm_reservation* r, uintptr_t* out,
                                              go_vpmm_msg* m) {
  vpmm_alloc_attrs a = {0};
  a.struct_size = sizeof a;
  a.flags = flags;
  a.tag = tag;
  a.reservation = r;
  void* ptr = NULL;
  vpmm_status st = GO_VPMM(vpmm_pool_malloc_ex(p, size, GO_PTR(s), &a, &ptr));
  if (st == VPMM_OK) *out = (uintptr_t)ptr;
  return st;
}
static inline vpmm_status go_vpmm_pool_free(vpmm_pool* p, uintptr_t ptr, uintptr_t s, go_vpmm_msg* m) {
  return GO_VPMM(vpmm_pool_free(p, GO_PTR(ptr), GO_PTR(s)));
}
static inline vpmm_status go_vpmm_pool_lookup(vpmm_pool* p, uintptr_t ptr, uintptr_t* base, uint64_t* size,
                                              go_vpmm_msg* m) {
  void* b = NULL;
  vpmm_status st = GO_VPMM(vpmm_pool_lookup(p, GO_PTR(ptr), &b, size));
  if (st == VPMM_OK) *base = (uintptr_t)b;
  return st;
}
static inline vpmm_status go_vpmm_pool_stream_synchronize(vpmm_pool* p, uintptr_t s, go_vpmm_msg* m) {
  return GO_VPMM(vpmm_pool_stream_synchronize(p, GO_PTR(s)));
}
static inline vpmm_status go_vpmm_pool_stream_create(vpmm_pool* p, uintptr_t* out, go_vpmm_msg* m) {
  vpmm_stream s = NULL;
  vpmm_status st = GO_VPMM(vpmm_pool_stream_create(p, &s));
  if (st == VPMM_OK) *out = (uintptr_t)s;
  return st;
}
static inline vpmm_status go_vpmm_pool_stream_destroy(vpmm_pool* p, uintptr_t s, go_vpmm_msg* m) {
  return GO_VPMM(vpmm_pool_stream_destroy(p, GO_PTR(s)));
}
static inline vpmm_status go_vpmm_pool_pause(vpmm_pool* p, const char* tag, uint64_t* n, go_vpmm_msg* m) {
  return GO_VPMM(vpmm_pool_pause_ex(p, tag, n));
}
static inline vpmm_status go_vpmm_pool_resume(vpmm_pool* p, const char* tag, uint64_t* n, go_vpmm_msg* m) {
  return GO_VPMM(vpmm_pool_resume_ex(p, tag, n));
}
static inline vpmm_status go_vpmm_pool_prepare_backups(vpmm_pool* p, const char* tag, uint64_t* n,
                                                       go_vpmm_msg* m) {
  return GO_VPMM(vpmm_pool_prepare_backups(p, tag, n));
}
static inline vpmm_status go_vpmm_pool_trim(vpmm_pool* p, uint64_t keep, go_vpmm_msg* m) {
  return GO_VPMM(vpmm_pool_trim(p, keep));
}
static inline vpmm_status go_vpmm_pool_mark_step(vpmm_pool* p, go_vpmm_msg* m) {
  return GO_VPMM(vpmm_pool_mark_step(p));
}
static inline vpmm_status go_vpmm_pool_set_limit(vpmm_pool* p, uint64_t bytes, go_vpmm_msg* m) {
  return GO_VPMM(vpmm_pool_set_limit(p, bytes));
}
static inline vpmm_status go_vpmm_pool_check(vpmm_pool* p, go_vpmm_msg* m) {
  return GO_VPMM(vpmm_pool_check(p));
}
static inline vpmm_status go_vpmm_pool_stats(vpmm_pool* p, vpmm_stats* s, go_vpmm_msg* m) {
  s->struct_size = sizeof *s;
  return GO_VPMM(vpmm_pool_stats(p, s));
}
static inline vpmm_status go_vpmm_pool_tag_stats(vpmm_pool* p, const char* tag, vpmm_tag_stats* s,
                                                 go_vpmm_msg* m) {
  s->struct_size = sizeof *s;
  return GO_VPMM(vpmm_pool_tag_stats(p, tag, s));
}
static inline vpmm_status go_vpmm_pool_dump(vpmm_pool* p, vpmm_region_info* buf, size_t cap, size_t* count,
                                            go_vpmm_msg* m) {
  if (cap > 0) buf[0].struct_size = sizeof *buf;
  return GO_VPMM(vpmm_pool_dump(p, cap ? buf : NULL, cap, count));
}
static inline uintptr_t go_vpmm_region_stream(const vpmm_region_info* r) {
  return (uintptr_t)r->stream;
}
static inline vpmm_status go_vpmm_pool_reserve(vpmm_pool* p, uint64_t bytes, uint32_t flags, uint64_t timeout_ns,
                                               vpmm_reservation** out, go_vpmm_msg* m) {
  return GO_VPMM(vpmm_pool_reserve_ex(p, bytes, flags, timeout_ns, out));
}
static inline vpmm_status go_vpmm_reservation_info(vpmm_pool* p, vpmm_reservation* r, uint64_t* size,
                                                   uint64_t* used, go_vpmm_msg* m) {
  return GO_VPMM(vpmm_reservation_info(p, r, size, used));
}
static inline vpmm_status go_vpmm_reservation_release(vpmm_pool* p, vpmm_reservation* r, go_vpmm_msg* m) {
  return GO_VPMM(vpmm_reservation_release(p, r));
}
static inline vpmm_status go_vpmm_pool_set_oom(vpmm_pool* p, uintptr_t handle, go_vpmm_msg* m) {
  return GO_VPMM(vpmm_pool_set_oom_callback(p, handle ? go_vpmm_oom_trampoline : NULL, GO_PTR(handle)));
}
static inline vpmm_status go_vpmm_pool_set_pressure(vpmm_pool* p, uintptr_t handle, go_vpmm_msg* m) {
  return GO_VPMM(vpmm_pool_set_pressure_callback(p, handle ? go_vpmm_pressure_trampoline : NULL,
                                                 GO_PTR(handle)));
}
static inline vpmm_status go_vpmm_region_push(const char* tag, uint32_t flags, go_vpmm_msg* m) {
  return GO_VPMM(vpmm_region_push(tag, flags));
}
static inline vpmm_status go_vpmm_region_pop(go_vpmm_msg* m) {
  return GO_VPMM(vpmm_region_pop());
}
static inline vpmm_status go_vpmm_host_stream_create(uintptr_t* out, go_vpmm_msg* m) {
  vpmm_stream s = NULL;
  vpmm_status st = GO_VPMM(vpmm_host_stream_create(&s));
  if (st == VPMM_OK) *out = (uintptr_t)s;
  return st;
}
static inline vpmm_status go_vpmm_host_stream_destroy(uintptr_t s, go_vpmm_msg* m) {
  return GO_VPMM(vpmm_host_stream_destroy(GO_PTR(s)));
}
static inline vpmm_status go_vpmm_host_stream_hold(uintptr_t s, go_vpmm_msg* m) {
  return GO_VPMM(vpmm_host_stream_hold(GO_PTR(s)));
}
static inline vpmm_status go_vpmm_host_stream_release(uintptr_t s, go_vpmm_msg* m) {
  return GO_VPMM(vpmm_host_stream_release(GO_PTR(s)));
}
static inline vpmm_status go_vpmm_host_stream_synchronize(uintptr_t s, go_vpmm_msg* m) {
  return GO_VPMM(vpmm_host_stream_synchronize(GO_PTR(s)));
}
static inline void* go_vpmm_host_ptr(uintptr_t p) { return (void*)p; }
/* One field of a public struct as the library lays it out (vpmm_struct_field):
 * its name (static), offset and size. */
static inline vpmm_status go_vpmm_struct_field(const char* type, uint32_t i, const char** name, uint32_t* offset,
                                               uint32_t* size, go_vpmm_msg* m) {
  vpmm_field_info f;
  memset(&f, 0, sizeof f);
  f.struct_size = sizeof f;
  vpmm_status st = vpmm_struct_field(type, i, &f);
  if (st == VPMM_OK) {
    *name = f.name;
    *offset = f.offset;
    *size = f.size;
  }
  return GO_VPMM(st);
}
#endif
