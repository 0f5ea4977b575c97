// libvpmm's PyTorch hooks with a clock around each call, for
// bench/torch/alloc_call_cost.py's 'vpmm-timed' (bench/torch/allocator.py):
// how long vpmm_torch_malloc and vpmm_torch_free take inside a real training
// step, where caches are cold, against the same pair in a tight loop. A probe
// of issue 46 (the hard loop's host-side gap), not part of the build.
//   cc -O2 -shared -fPIC -o libtimedhooks.so bench/torch/timed_hooks.c -ldl
// The hooks' library is the one at VPMM_LIBRARY, already loaded by the vpmm
// binding (dlopen returns that same copy).
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef void* (*malloc_fn)(ptrdiff_t, int, void*);
typedef void (*free_fn)(void*, ptrdiff_t, int, void*);
typedef void (*record_fn)(void*, void*);

static malloc_fn g_malloc;
static free_fn g_free;
static record_fn g_record;

// Per kind (0 malloc, 1 free, 2 record_stream): calls, nanoseconds, and
// calls by duration: < 250 ns, < 1 us, < 4 us, < 16 us, < 64 us, < 1 ms, more.
enum { kBuckets = 7, kPerKind = 2 + kBuckets };
static uint64_t g_counts[3][kPerKind];
static const uint64_t kBounds[kBuckets - 1] = {250, 1000, 4000, 16000, 64000, 1000000};

static void resolve(void) {
  const char* path = getenv("VPMM_LIBRARY");
  void* lib = dlopen(path ? path : "libvpmm.so", RTLD_NOW);
  if (!lib) {
    fprintf(stderr, "timed_hooks: %s\n", dlerror());
    abort();
  }
  g_malloc = (malloc_fn)dlsym(lib, "vpmm_torch_malloc");
  g_free = (free_fn)dlsym(lib, "vpmm_torch_free");
  g_record = (record_fn)dlsym(lib, "vpmm_torch_record_stream");
  if (!g_malloc || !g_free || !g_record) {
    fprintf(stderr, "timed_hooks: libvpmm's torch hooks are missing\n");
    abort();
  }
}

static uint64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

// PyTorch calls the hooks from more than one thread (autograd's backward
// thread), one at a time in this loop; the counts are a probe's, not exact
// under a race.
static void count(int kind, uint64_t ns) {
  uint64_t* c = g_counts[kind];
  c[0]++;
  c[1] += ns;
  int b = 0;
  while (b < kBuckets - 1 && ns >= kBounds[b]) b++;
  c[2 + b]++;
}

void* timed_malloc(ptrdiff_t size, int device, void* stream) {
  if (!g_malloc) resolve();
  uint64_t t = now_ns();
  void* p = g_malloc(size, device, stream);
  count(0, now_ns() - t);
  return p;
}

void timed_free(void* ptr, ptrdiff_t size, int device, void* stream) {
  uint64_t t = now_ns();
  g_free(ptr, size, device, stream);
  count(1, now_ns() - t);
}

void timed_record_stream(void* ptr, void* stream) {
  if (!g_record) resolve();
  uint64_t t = now_ns();
  g_record(ptr, stream);
  count(2, now_ns() - t);
}

// Copies the counts (3 kinds x kPerKind values) to out; returns kPerKind.
int timed_counts(uint64_t* out) {
  for (int k = 0; k < 3; k++)
    for (int i = 0; i < kPerKind; i++) out[k * kPerKind + i] = g_counts[k][i];
  return kPerKind;
}
