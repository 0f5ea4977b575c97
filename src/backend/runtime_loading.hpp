// Whether this process can load a vendor runtime (libcuda, libamdhip64) at
// run time. libvpmm links neither: the CUDA and HIP backends dlopen them.
// A fully static program (libvpmm.a linked with -static) has no dynamic
// loader, and glibc's static dlopen would map the runtime together with a
// second C library beside the one built into the program: it crashes inside
// the runtime's initialisers (seen: libamdhip64 in vpmm_pool_create). Such a
// program gets a clear "not usable" from those backends instead, and the
// default backend ('auto') passes over them to the host backend.
#pragma once

#include <cstddef>

namespace vpmm {

// False in a statically linked program (its executable has no PT_INTERP);
// then *why (if given, `n` bytes) says so, naming `library`.
bool runtime_loading_possible(const char* library, char* why, size_t n);

}  // namespace vpmm
