// Failure reports of the allocator hooks (PyTorch, CuPy): a hook returns
// NULL and cannot say why, so the reason goes to stderr as VPMM_LOG allows.
#pragma once

#include "vpmm.h"

namespace vpmm {

// Report on stderr, as VPMM_LOG allows, why `hook` returned NULL (defined
// in default_pools.cpp).
void report_hook_failure(const char* hook, vpmm_status st);

}  // namespace vpmm
