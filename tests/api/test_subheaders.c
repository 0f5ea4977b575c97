/* vpmm.h is an umbrella: vpmm_get_api's table (vpmm_api_table.h) and the
 * framework hooks (vpmm_hooks.h) live in headers of their own that it
 * includes. This program proves the split costs a C99 caller nothing: each
 * part compiles when it is the first header a translation unit includes
 * (subheader_table.c, subheader_hooks.c), and what it declares is the
 * library's (the table of vpmm_get_api has the size this header gives it;
 * the default pool and the hooks answer as vpmm_hooks.h says). Built with
 * -std=c99 -pedantic-errors -Wall -Wextra -Werror; links only libvpmm. */
#include <stdio.h>

#include "vpmm.h"

/* Defined in the two other files, each of which includes only its part. */
int table_first_check(void);
int hooks_first_check(void);

int main(void) {
  int failed = 0;
  if (!table_first_check()) {
    printf("vpmm_api_table.h included first: the table does not match the library\n");
    failed = 1;
  }
  if (!hooks_first_check()) {
    printf("vpmm_hooks.h included first: the hooks do not answer as documented\n");
    failed = 1;
  }
  /* Through the umbrella, both parts are there. */
  if (VPMM_DEFAULT_POOL_LARGE_ROUNDING != 512 || vpmm_get_api(1) == NULL) {
    printf("vpmm.h: the parts it includes are missing\n");
    failed = 1;
  }
  printf("%d passed, %d failed\n", failed ? 0 : 3, failed);
  return failed;
}
