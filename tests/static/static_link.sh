#!/usr/bin/env bash
# Installs the build into a scratch DESTDIR, then links static_c.c with
# `pkg-config --static --cflags --libs vpmm` and -static (so libvpmm.a, not
# libvpmm.so, is what resolves -lvpmm) and runs it; then static_auto.c, the
# default backend and CUDA/HIP by name in a static program (which must be
# told it cannot load a GPU runtime, never crash where one is installed).
# Usage: static_link.sh BUILD_DIR SOURCE_DIR CC [CC ARGS...]
set -euo pipefail
build=$1
src=$2
shift 2
cc=("$@")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
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
# The default backend and the GPU backends by name: a static program cannot
# load a vendor runtime, and must be told so instead of crashing where one
# is installed (VPMM_HIP_LIBRARY, when set, names one that exists).
"${cc[@]}" -static -o "$tmp/static_auto" "$src/static_auto.c" $flags 2> "$tmp/link.log" || {
  cat "$tmp/link.log"; exit 1; }
env -u VPMM_BACKEND "$tmp/static_auto"
for lib in /usr/lib/x86_64-linux-gnu/libamdhip64.so.5 /opt/rocm/lib/libamdhip64.so; do
  [ -e "$lib" ] && env -u VPMM_BACKEND VPMM_HIP_LIBRARY="$lib" "$tmp/static_auto"
done
echo "PASS"
