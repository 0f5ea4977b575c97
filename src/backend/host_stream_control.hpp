// HostStreamControl: an optional backend extension, the streams a test can
// hold and launch host "kernels" on (vpmm_host_streams.h). Only the host
// backend provides it, through its registry entry; the C API reaches it there
// and never includes a backend's internals. A table of plain functions: the
// streams are process-wide, not tied to one Backend object.
//
// Each function has the semantics and errors of its vpmm_host_stream_*
// counterpart, is thread safe and never throws.
#pragma once

#include "vpmm.h"

namespace vpmm {

struct HostStreamControl {
  vpmm_status (*create)(vpmm_stream* out);
  vpmm_status (*destroy)(vpmm_stream s);
  vpmm_status (*hold)(vpmm_stream s);
  vpmm_status (*release)(vpmm_stream s);
  vpmm_status (*launch)(vpmm_stream s, void (*fn)(void*), void* user);
  vpmm_status (*synchronize)(vpmm_stream s);
};

}  // namespace vpmm
