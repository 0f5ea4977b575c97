#!/usr/bin/env bash
# Installs the build into a scratch DESTDIR, then links static_c.c with
# `pkg-config --static --cflags --libs vpmm` and -static (so libvpmm.a, not
# libvpmm.so, is what resolves -lvpmm) and runs it.
# Usage: static_link.sh BUILD_DIR SOURCE_DIR CC [CC ARGS...]
set -euo pipefail
build=$1
src=$2
shift 2
cc=("$@")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# A toolchain that cannot link any C++ program statically cannot test ours:
# skip with its reason (seen on an image whose /opt/gcc libstdc++.a misses
# symbols of its own), rather than fail on a fault that is not libvpmm's.
printf '#include <stdexcept>\n#include <string>\nint main(int c, char**) { std::string s(c, 120); if (c > 5) throw std::runtime_error(s); return int(s.size()) - 1; }\n' \
  > "$tmp/probe.cpp"
if ! "${cc[@]}" -x c++ -static -o "$tmp/probe" "$tmp/probe.cpp" -lstdc++ -lm > "$tmp/probe.log" 2>&1; then
  echo "SKIP: ${cc[*]} cannot link a C++ program with -static: $(grep -m1 -E 'undefined|error|cannot' "$tmp/probe.log")"
  exit 77
fi
meson install -C "$build" --destdir "$tmp/root" --no-rebuild --quiet >/dev/null
pcdir=$(dirname "$(find "$tmp/root" -name vpmm.pc | head -n1)")
[ -n "$pcdir" ] || { echo "no vpmm.pc installed"; exit 1; }
export PKG_CONFIG_PATH=$pcdir PKG_CONFIG_SYSROOT_DIR=$tmp/root
flags=$(pkg-config --static --cflags --libs vpmm)
echo "pkg-config --static --cflags --libs vpmm: $flags"
# glibc warns that dlopen in a static program needs the shared libc at run
# time (the CUDA backend's probe); the host backend used here needs nothing.
"${cc[@]}" -static -o "$tmp/static_c" "$src/static_c.c" $flags 2> "$tmp/link.log" || {
  cat "$tmp/link.log"; exit 1; }
grep -v "dlopen\|statically linked\|in function" "$tmp/link.log" || true
"$tmp/static_c"
