// runtime_loading_possible (see runtime_loading.hpp). The executable's own
// program headers say how it was linked: a dynamically linked one names its
// interpreter (PT_INTERP, the dynamic loader), a static one, static-pie
// included, names none. The auxiliary vector points at them; glibc points it
// at the program's headers even when the loader was run by hand
// (ld-linux.so ./prog), where AT_BASE, the other usual test, reads 0.
#include "backend/runtime_loading.hpp"

#include <elf.h>
#include <link.h>
#include <sys/auxv.h>

#include <cstdio>

namespace vpmm {

bool runtime_loading_possible(const char* library, char* why, size_t n) {
  const auto* ph = reinterpret_cast<const ElfW(Phdr)*>(getauxval(AT_PHDR));
  const unsigned long count = getauxval(AT_PHNUM);
  if (ph == nullptr || count == 0) return true;  // unknown: try, as before
  for (unsigned long i = 0; i < count; ++i)
    if (ph[i].p_type == PT_INTERP) return true;
  if (why != nullptr && n > 0)
    std::snprintf(why, n,
                  "this program is statically linked, and a static program cannot load %s at run time "
                  "(dlopen would bring a second C library into it): link it dynamically (pkg-config --libs "
                  "vpmm, or vpmm-static to keep libvpmm.a in a dynamic program) or use the host backend",
                  library);
  return false;
}

}  // namespace vpmm
