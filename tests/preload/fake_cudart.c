/* A stand-in for libcudart and libcuda on machines without CUDA: the "real"
 * functions libvpmm_preload.so falls through to (dlsym RTLD_NEXT) for
 * pointers its pools do not own. Allocates with malloc and counts every call,
 * so tests/preload/test_preload.c can tell which side served each call. */
#include <stdlib.h>
#include <string.h>

#define FAKE_API __attribute__((visibility("default")))

enum { F_MALLOC, F_FREE, F_MALLOC_ASYNC, F_FREE_ASYNC, F_GET_DEVICE, F_DEVICE_SYNC, F_MEM_ALLOC,
       F_MEM_FREE, F_CTX_GET_DEVICE, F_CTX_SYNC, F_STREAM_SYNC, F_CU_STREAM_SYNC, F_SET_DEVICE, F_COUNT };
static const char* const kNames[F_COUNT] = {
    "cudaMalloc", "cudaFree", "cudaMallocAsync", "cudaFreeAsync", "cudaGetDevice",
    "cudaDeviceSynchronize", "cuMemAlloc_v2", "cuMemFree_v2", "cuCtxGetDevice", "cuCtxSynchronize",
    "cudaStreamSynchronize", "cuStreamSynchronize", "cudaSetDevice"};
static int g_calls[F_COUNT];
static void* g_last_freed;

/* Calls of the named fake function so far; -1 for an unknown name. */
FAKE_API int fake_calls(const char* name) {
  int i;
  for (i = 0; i < F_COUNT; i++)
    if (strcmp(kNames[i], name) == 0) return g_calls[i];
  return -1;
}
/* The pointer of the last fake free of any kind. */
FAKE_API void* fake_last_freed(void) { return g_last_freed; }

FAKE_API int cudaMalloc(void** p, size_t n) { g_calls[F_MALLOC]++; *p = malloc(n); return *p ? 0 : 2; }
FAKE_API int cudaFree(void* p) { g_calls[F_FREE]++; g_last_freed = p; free(p); return 0; }
FAKE_API int cudaMallocAsync(void** p, size_t n, void* s) {
  (void)s; g_calls[F_MALLOC_ASYNC]++; *p = malloc(n); return *p ? 0 : 2;
}
FAKE_API int cudaFreeAsync(void* p, void* s) {
  (void)s; g_calls[F_FREE_ASYNC]++; g_last_freed = p; free(p); return 0;
}
FAKE_API int cudaGetDevice(int* d) { g_calls[F_GET_DEVICE]++; *d = 0; return 0; }
FAKE_API int cudaDeviceSynchronize(void) { g_calls[F_DEVICE_SYNC]++; return 0; }
FAKE_API int cuMemAlloc_v2(unsigned long long* p, size_t n) {
  g_calls[F_MEM_ALLOC]++; *p = (unsigned long long)(size_t)malloc(n); return *p ? 0 : 2;
}
FAKE_API int cuMemFree_v2(unsigned long long p) {
  g_calls[F_MEM_FREE]++; g_last_freed = (void*)(size_t)p; free((void*)(size_t)p); return 0;
}
FAKE_API int cuCtxGetDevice(int* d) { g_calls[F_CTX_GET_DEVICE]++; *d = 0; return 0; }
FAKE_API int cuCtxSynchronize(void) { g_calls[F_CTX_SYNC]++; return 0; }
FAKE_API int cudaStreamSynchronize(void* s) { (void)s; g_calls[F_STREAM_SYNC]++; return 0; }
FAKE_API int cuStreamSynchronize(void* s) { (void)s; g_calls[F_CU_STREAM_SYNC]++; return 0; }
FAKE_API int cudaSetDevice(int d) { g_calls[F_SET_DEVICE]++; return d == 0 ? 0 : 101; }
