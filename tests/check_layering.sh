#!/bin/sh
# The layering rules of docs/design.md, "Layers" (data flows down, never up), checked
# by grep so that a violation fails the unit suite rather than a review:
#   common/   the bottom layer: includes nothing of the library but vpmm.h
#   backend/  may include common/ and backend/ only, never config/, core/ or api/
#   config/   the option table and PoolOptions: common/, config/ and of the
#             backends only the interface (backend/backend.hpp, whose
#             granularity and memory resolve the defaults); never the core,
#             so the core reads its options from below
#   core/     pure C++: no driver or system headers, no mmap/memfd/syscalls, no
#             environment (getenv, common/settings.hpp: the options are read below),
#             and of backend/ only the interfaces (backend/backend.hpp, the
#             device; backend/host_services/host_services.hpp, the host's files and memory);
#             of config/ only PoolOptions and the defaults, never the table;
#             inside it, modules include only lower modules (src/core/modules.txt)
#   ipc/      status pages, sockets and pidfds of exports and imports: may
#             include common/, ipc/ and the interfaces it implements
#             (core/share/channel_interfaces.hpp), nothing else of the core, never the API
#   hooks/    the allocator hooks: the library seen through the public headers
#             (vpmm*.h) and their own headers only, like a binding would; what
#             vpmm.h lacks (last error, VPMM_LOG) comes from the C API layer
#             through hooks/report.hpp
#   preload/  a library of its own (libvpmm_preload.so) linked against
#             libvpmm.so, whose internal symbols are hidden: public headers and
#             its own headers only, or it would not link
#   history/  the same for libvpmm_history.so (the PyTorch hooks' history)
# Usage: check_layering.sh SOURCE_ROOT. Prints every violation; exits 1 if any.
root=${1:-.}
src="$root/src"
bad=0

# Lines of C/C++ sources under $1 matching the extended regex $2, with
# whole-line // comments dropped (they may name a call they explain).
scan() {
  find "$1" -type f \( -name '*.cpp' -o -name '*.hpp' -o -name '*.h' -o -name '*.cu' \) \
    -exec grep -HnE "$2" {} + 2>/dev/null | grep -vE '^[^:]+:[0-9]+:[[:space:]]*//'
}

report() {  # $1 = rule, $2 = offending lines
  found=$2
  if [ -n "$found" ]; then
    echo "layering violation: $1"
    echo "$found" | sed 's/^/  /'
    bad=1
  fi
}

report "src/common/ includes a higher layer" "$(scan "$src/common" '#[[:space:]]*include[[:space:]]*["<](config|core|backend|api|hooks)/')"
report "src/backend/ includes the configuration, the core, the C API or the hooks" "$(scan "$src/backend" '#[[:space:]]*include[[:space:]]*["<]((\.\./)*(config|core)|api|hooks)/')"
report "src/config/ includes more than common/, config/ and backend/backend.hpp" "$(scan "$src/config" '#[[:space:]]*include[[:space:]]*["<](core|ipc|api|hooks|preload|backend)/' | grep -v '"backend/backend.hpp"')"
report "src/core/ includes the option table (config/config.hpp): PoolOptions and the defaults are its door" "$(scan "$src/core" '#[[:space:]]*include[[:space:]]*"config/' | grep -vE '"config/(pool_options|defaults)\.hpp"')"
report "src/core/ includes a driver or system header" "$(scan "$src/core" '#[[:space:]]*include[[:space:]]*["<](cuda|cuda_runtime|hip/[a-z_]*|dlfcn|fcntl|unistd|sys/[a-z_]*|linux/[a-z_]*)\.h[">]')"
report "src/core/ includes the ipc layer, the ledger or the C API (they build on the core)" "$(scan "$src/core" '#[[:space:]]*include[[:space:]]*["<](ipc|ledger|api|hooks)/')"
# ledger/: the segment shared with other processes (docs/ledger.md); it implements
# core/state/admission.hpp and sees nothing else of the core, nor the backends or the API.
report "src/ledger/ includes more than common/, ledger/ and core/state/admission.hpp" "$(scan "$src/ledger" '#[[:space:]]*include[[:space:]]*["<](backend|api|hooks|preload|ipc|config)/|#[[:space:]]*include[[:space:]]*"core/[a-z_/]+\.hpp"' | grep -v '"core/state/admission.hpp"')"
# ipc/: the operating system's side of sharing memory between processes
# (status pages, sockets, pidfds); it implements the channel interfaces of
# core/share/channel_interfaces.hpp and sees nothing else of the core, nor the backends or the API.
report "src/ipc/ includes more than common/, ipc/ and core/share/channel_interfaces.hpp" "$(scan "$src/ipc" '#[[:space:]]*include[[:space:]]*["<](backend|api|hooks|preload)/|#[[:space:]]*include[[:space:]]*"core/[a-z_/]+\.hpp"' | grep -v '"core/share/channel_interfaces.hpp"')"
report "src/core/ includes a backend's internals (backend/backend.hpp and backend/host_services/host_services.hpp are the doors)" "$(scan "$src/core" '#[[:space:]]*include[[:space:]]*"backend/' | grep -vE '"backend/(backend|host_services/host_services)\.hpp"')"
report "src/core/ reads the environment (options are read once, through the option list: src/config/)" "$(scan "$src/core" '(^|[^A-Za-z0-9_])(getenv|secure_getenv|setting_on|setting_text)[[:space:]]*\(|#[[:space:]]*include[[:space:]]*"common/settings\.hpp"')"
report "src/core/ makes a system call (the backend does that)" "$(scan "$src/core" '(^|[^A-Za-z0-9_.>])(mmap|munmap|mprotect|madvise|mlock|munlock|memfd_create|syscall|fallocate|ftruncate|dlopen|dlsym|posix_memalign)[[:space:]]*\(')"

# hooks/, preload/ and history/: every quoted include is a public header or their own.
for top in hooks preload history; do
  report "src/$top/ includes a library header other than vpmm*.h and $top/" \
    "$(scan "$src/$top" '#[[:space:]]*include[[:space:]]*["<]' | grep -vE "#[[:space:]]*include[[:space:]]*(<[^/\">]*>|<(sys|linux|bits)/[a-z_]+\.h>|\"vpmm[a-z_]*\.h\"|\"$top/[a-z_]+\.h(pp)?\")")"
done

# Inside src/core, modules form layers too (src/core/modules.txt, the one
# place their ranks are written): a file includes only core headers of its
# own module or of lower-ranked ones. A file's module is the longest folder
# of the table containing it; files directly in src/core/ are the facade,
# module "pool".
table="$src/core/modules.txt"
# The module of a path relative to src/core/ (a file, or a header an
# include names), or nothing when the table has none.
module_of() {
  awk -v p="$1" '!/^#/ && NF >= 2 {
      m = $2
      if (m == "pool") { if (p !~ /\//) { best = m; len = 0 } ; next }
      if (index(p, m "/") == 1 && length(m) > len) { best = m; len = length(m) }
    } END { print best }' "$table"
}
rank_of() { awk -v m="$1" '!/^#/ && $2 == m { print $1 }' "$table"; }
for f in $(find "$src/core" -type f \( -name '*.cpp' -o -name '*.hpp' \) | sort); do
  rel=${f#"$src"/core/}
  mine=$(module_of "$rel")
  if [ -z "$mine" ]; then
    report "src/core/$rel is in no module of src/core/modules.txt (add its folder)" "$f"
    continue
  fi
  my_rank=$(rank_of "$mine")
  for dep in $(grep -oE '#[[:space:]]*include[[:space:]]*"core/[a-z_/]+\.hpp"' "$f" | sed -E 's|.*"core/([a-z_/]+\.hpp)"|\1|'); do
    theirs=$(module_of "$dep")
    [ "$theirs" = "$mine" ] && continue
    their_rank=$(rank_of "$theirs")
    if [ -z "$theirs" ] || [ "$their_rank" -ge "$my_rank" ]; then
      report "src/core/$rel (module $mine, rank $my_rank) includes core/$dep (module ${theirs:-none}, rank ${their_rank:-none}): a module may only include lower ones" "$f"
    fi
  done
done

if [ "$bad" -eq 0 ]; then
  echo "layering: common <- backend <- config <- core <- ipc <- api <- hooks, preload: no violations"
fi
exit "$bad"
