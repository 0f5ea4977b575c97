#!/usr/bin/env bash
# A program that links libvpmm.a but is otherwise dynamic, with both
# libraries installed: `pkg-config --libs vpmm-static` must give a binary
# with no libvpmm.so.1 dependency (`pkg-config --static --libs vpmm` gives
# -lvpmm, which the linker takes from libvpmm.so unless linking -static).
# Usage: check_static_pkgconfig.sh BUILD_DIR SOURCE_DIR CC [CC ARGS...]
set -euo pipefail
build=$1
src=$2
shift 2
command -v pkg-config >/dev/null 2>&1 || { echo "SKIP: pkg-config is missing"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
meson install -C "$build" --destdir "$work/root" --no-rebuild --quiet >/dev/null
pc=$(find "$work/root" -name vpmm-static.pc | head -n1)
[ -n "$pc" ] || { echo "FAIL: no vpmm-static.pc installed"; exit 1; }
[ -n "$(find "$work/root" -name 'libvpmm.so*' | head -n1)" ] || { echo "FAIL: libvpmm.so not installed beside"; exit 1; }
export PKG_CONFIG_PATH=$(dirname "$pc") PKG_CONFIG_SYSROOT_DIR=$work/root
flags=$(pkg-config --cflags --libs vpmm-static)
echo "pkg-config --cflags --libs vpmm-static: $flags"
if ! "$@" -o "$work/prog" "$src/tests/static/static_c.c" $flags 2>"$work/link.err"; then
  cat "$work/link.err"
  # Some toolchains (the H100 image's /opt/gcc) resolve -lstdc++ from a C
  # driver to a libstdc++.a built without -fPIC, which no PIE can take in:
  # that is the toolchain's archive, not libvpmm's, so link position-dependent.
  grep -q "making a PIE object" "$work/link.err" || exit 1
  echo "NOTE: the toolchain's libstdc++.a cannot go into a PIE; linking with -no-pie"
  "$@" -no-pie -o "$work/prog" "$src/tests/static/static_c.c" $flags
fi
if readelf -d "$work/prog" | grep -q 'NEEDED.*libvpmm'; then
  readelf -d "$work/prog" | grep NEEDED
  echo "FAIL: linked against the shared library"
  exit 1
fi
"$work/prog"
echo "PASS"
