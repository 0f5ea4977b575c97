/* What bindgen reads for vpmm-sys: the public header and the host backend's
 * streams of vpmm_host_streams.h (the safe crate's tests drive the host
 * backend with them, as `vpmm replay --gpu-lag` models a GPU on them). */
#include "vpmm.h"
#include "vpmm_host_streams.h"
