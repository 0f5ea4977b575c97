/* Includes vpmm_hooks.h first (test_subheaders.c says why): it must bring
 * vpmm.h with it, and its functions answer as documented there. */
#include "vpmm_hooks.h"

#include <stddef.h>

int hooks_first_check(void);

int hooks_first_check(void) {
  vpmm_pool* pool = (vpmm_pool*)&pool; /* must stay untouched on error */
  /* vpmm_default_pool: INVALID_ARGUMENT for a device outside 0..63, *out
   * untouched; vpmm_torch_malloc: NULL for size <= 0 (the reason in
   * vpmm_last_error()). Neither creates a pool. */
  if (vpmm_default_pool(64, &pool) != VPMM_ERR_INVALID_ARGUMENT || pool != (vpmm_pool*)&pool) return 0;
  if (vpmm_torch_malloc(0, 0, NULL) != NULL) return 0;
  return VPMM_DEFAULT_POOL_LARGE_ROUNDING == 512;
}
