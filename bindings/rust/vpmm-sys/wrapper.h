/* What bindgen reads for vpmm-sys: the public header and the test-only host
 * streams (the safe crate's tests drive the host backend with them). */
#include "vpmm.h"
#include "vpmm_host_streams.h"
