// C trampolines of the OOM and pressure callbacks: libvpmm calls these with
// the cgo.Handle of the Go callback as its user pointer; they hand it, as an
// integer, to the exported Go functions of callbacks.go.
#include <pthread.h>

#include "_cgo_export.h"

uint64_t go_vpmm_thread(void) { return (uint64_t)pthread_self(); }

int go_vpmm_oom_trampoline(vpmm_pool* pool, uint64_t bytes, void* user) {
  return goVpmmOOM(pool, bytes, (uintptr_t)user);
}

void go_vpmm_pressure_trampoline(vpmm_pool* pool, int under, uint64_t mapped, void* user) {
  goVpmmPressure(pool, under, mapped, (uintptr_t)user);
}
