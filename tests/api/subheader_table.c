/* Includes vpmm_api_table.h first (test_subheaders.c says why): it must bring
 * vpmm.h with it, and its table must be the library's. */
#include "vpmm_api_table.h"

#include <stddef.h>

int table_first_check(void);

int table_first_check(void) {
  const vpmm_api* api = vpmm_get_api(1);
  if (api == NULL) return 0;
  /* The whole table this header declares is there, and its entries are the
   * functions vpmm.h declares. */
  return api->struct_size == sizeof(vpmm_api) && api->abi_version == 1 &&
         VPMM_API_HAS(api, pool_resume_flags) && api->pool_create == vpmm_pool_create &&
         api->torch_malloc == vpmm_torch_malloc;
}
