#!/bin/sh
# The layering rules of docs/ARCHITECTURE (data flows down, never up), checked
# by grep so that a violation fails the unit suite rather than a review:
#   common/   the bottom layer: includes nothing of the library but vpmm.h
#   backend/  may include common/ and backend/ only, never config/, core/ or api/
#   config/   the option table and PoolOptions: common/, config/ and of the
#             backends only the interface (backend/backend.hpp, whose
#             granularity and memory resolve the defaults); never the core,
#             so the core reads its options from below
#   core/     pure C++: no driver or system headers, no mmap/memfd/syscalls,
#             and of the backends only the interface (backend/backend.hpp);
#             of config/ only PoolOptions and the defaults, never the table;
#             inside it, modules include only lower modules (core_rank below)
#   ipc/      status pages, sockets and pidfds of exports and imports: may
#             include common/, ipc/ and the interfaces it implements
#             (core/ipc.hpp), nothing else of the core, never the API
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
report "src/core/ includes the ipc layer or the C API (they build on the core)" "$(scan "$src/core" '#[[:space:]]*include[[:space:]]*["<](ipc|api|hooks)/')"
# ipc/: the operating system's side of sharing memory between processes
# (status pages, sockets, pidfds); it implements the channel interfaces of
# core/ipc.hpp and sees nothing else of the core, nor the backends or the API.
report "src/ipc/ includes more than common/, ipc/ and core/ipc.hpp" "$(scan "$src/ipc" '#[[:space:]]*include[[:space:]]*["<](backend|api|hooks|preload)/|#[[:space:]]*include[[:space:]]*"core/[a-z_]+\.hpp"' | grep -v '"core/ipc.hpp"')"
report "src/core/ includes a backend's internals (only backend/backend.hpp is the door)" "$(scan "$src/core" '#[[:space:]]*include[[:space:]]*"backend/[a-z_]+/')"
report "src/core/ makes a system call (the backend does that)" "$(scan "$src/core" '(^|[^A-Za-z0-9_.>])(mmap|munmap|mprotect|madvise|mlock|munlock|memfd_create|syscall|fallocate|ftruncate|dlopen|dlsym|posix_memalign)[[:space:]]*\(')"

# hooks/, preload/ and history/: every quoted include is a public header or their own.
for top in hooks preload history; do
  report "src/$top/ includes a library header other than vpmm*.h and $top/" \
    "$(scan "$src/$top" '#[[:space:]]*include[[:space:]]*["<]' | grep -vE "#[[:space:]]*include[[:space:]]*(<[^/\">]*>|<(sys|linux|bits)/[a-z_]+\.h>|\"vpmm[a-z_]*\.h\"|\"$top/[a-z_]+\.h(pp)?\")")"
done

# Inside src/core, modules form layers too: a file includes only the headers
# of lower modules (and its own), so no concern reaches back up into one that
# builds on it. Pool's implementation spans several files (phases, pause,
# capacity calls, stats); they are one module. Rank, lowest first:
core_rank() {
  case "$1" in
    layout) echo 0 ;;
    regions|tags|capacity|backup) echo 1 ;;
    small|backup_store|ipc|views|view_gate) echo 2 ;;
    backups) echo 3 ;;
    pause_pipeline|pause_stage) echo 4 ;;
    pool|defrag|pause|pool_capacity|stats|pool_ipc|pool_views) echo 5 ;;
    *) echo unknown ;;
  esac
}
core_module() {  # files of one module share its rank
  case "$1" in
    defrag|pause|pool_capacity|stats|pool_ipc|pool_views) echo pool ;;
    pause_stage) echo pause_pipeline ;;
    *) echo "$1" ;;
  esac
}
for f in "$src"/core/*.hpp "$src"/core/*.cpp; do
  [ -e "$f" ] || continue
  name=$(basename "$f"); name=${name%.*}
  mine=$(core_rank "$name")
  if [ "$mine" = unknown ]; then
    report "src/core/$name has no rank in tests/check_layering.sh (give it one)" "$f"
    continue
  fi
  for dep in $(grep -oE '#[[:space:]]*include[[:space:]]*"core/[a-z_]+\.hpp"' "$f" | sed -E 's|.*core/([a-z_]+)\.hpp"|\1|'); do
    [ "$(core_module "$dep")" = "$(core_module "$name")" ] && continue
    theirs=$(core_rank "$dep")
    if [ "$theirs" = unknown ] || [ "$theirs" -ge "$mine" ]; then
      report "src/core/$name (rank $mine) includes core/$dep.hpp (rank $theirs): a module may only include lower ones" "$f"
    fi
  done
done

if [ "$bad" -eq 0 ]; then
  echo "layering: common <- backend <- config <- core <- ipc <- api <- hooks, preload: no violations"
fi
exit "$bad"
