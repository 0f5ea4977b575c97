/* The pool's hot path on the host backend, for A/B runs of two builds of
 * libvpmm on one machine (no GPU): alloc+free pairs at a few sizes, and a
 * mixed churn (a window of live allocations, sizes from 256 B to 64 MiB,
 * the oldest freed as each new one comes). Prints the median ns per
 * operation over ROUNDS runs. Time lives in the allocator's own bookkeeping
 * here: the host backend's map calls happen only on growth, which the
 * warm-up does.
 *
 *   cc -O2 bench/host_hot_path.c -Iinclude -Lbuild -lvpmm -o /tmp/hot
 *   LD_LIBRARY_PATH=build /tmp/hot            (LD_LIBRARY_PATH=other/build: the B side)
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "vpmm.h"

enum { ROUNDS = 7, PAIRS = 200000, CHURN_OPS = 200000, WINDOW = 64 };

static double now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

static int cmp(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

static vpmm_pool* make_pool(void) {
  vpmm_config c;
  vpmm_config_init(&c);
  c.backend = VPMM_BACKEND_HOST;
  c.host_capacity = 4ull << 30;
  vpmm_pool* p = NULL;
  if (vpmm_pool_create(&c, &p) != VPMM_OK) {
    fprintf(stderr, "create: %s\n", vpmm_last_error());
    exit(1);
  }
  return p;
}

static double pairs(uint64_t size) {
  double runs[ROUNDS];
  vpmm_pool* p = make_pool();
  void* x;
  for (int i = 0; i < 1000; ++i) { /* warm-up: growth happens here */
    vpmm_pool_malloc(p, size, NULL, &x);
    vpmm_pool_free(p, x, NULL);
  }
  for (int r = 0; r < ROUNDS; ++r) {
    double t0 = now_ns();
    for (int i = 0; i < PAIRS; ++i) {
      if (vpmm_pool_malloc(p, size, NULL, &x) != VPMM_OK) exit(2);
      vpmm_pool_free(p, x, NULL);
    }
    runs[r] = (now_ns() - t0) / PAIRS;
  }
  vpmm_pool_destroy(p);
  qsort(runs, ROUNDS, sizeof runs[0], cmp);
  return runs[ROUNDS / 2];
}

static double churn(void) {
  double runs[ROUNDS];
  vpmm_pool* p = make_pool();
  void* live[WINDOW] = {0};
  uint64_t rng = 12345;
  for (int r = -1; r < ROUNDS; ++r) { /* round -1 warms up */
    double t0 = now_ns();
    for (int i = 0; i < CHURN_OPS; ++i) {
      rng = rng * 6364136223846793005ull + 1442695040888963407ull;
      int slot = i % WINDOW;
      if (live[slot]) vpmm_pool_free(p, live[slot], NULL);
      uint64_t size = 256ull << ((rng >> 33) % 19); /* 256 B .. 64 MiB */
      size += (rng >> 20) % size;
      if (vpmm_pool_malloc(p, size, NULL, &live[slot]) != VPMM_OK) exit(3);
    }
    if (r >= 0) runs[r] = (now_ns() - t0) / CHURN_OPS;
  }
  for (int i = 0; i < WINDOW; ++i)
    if (live[i]) vpmm_pool_free(p, live[i], NULL);
  vpmm_pool_destroy(p);
  qsort(runs, ROUNDS, sizeof runs[0], cmp);
  return runs[ROUNDS / 2];
}

int main(void) {
  printf("pair 4 KiB   %7.1f ns\n", pairs(4096));
  printf("pair 2 MiB   %7.1f ns\n", pairs(2ull << 20));
  printf("pair 64 MiB  %7.1f ns\n", pairs(64ull << 20));
  printf("churn        %7.1f ns\n", churn());
  return 0;
}
