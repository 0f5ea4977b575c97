#!/usr/bin/env bash
# Builds libvpmm.a as ONE relocatable object (ld -r over the library's
# objects) whose hidden symbols are then made local (objcopy
# --localize-hidden). The objects are compiled with -fvisibility=hidden and
# only the vpmm_* API is marked default, so the archive then defines the same
# globals as libvpmm.so's version script exports: no helper, C++ class of the
# core or backend can clash with a symbol of the program that links it.
# Usage: prelink-static.sh OUT.a OBJECTS.a   (run by meson; LD/OBJCOPY/AR override)
set -euo pipefail
out=$1
in=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"${LD:-ld}" -r -o "$tmp/vpmm.o" --whole-archive "$in" --no-whole-archive
"${OBJCOPY:-objcopy}" --localize-hidden "$tmp/vpmm.o"
rm -f "$out"
"${AR:-ar}" rcs "$out" "$tmp/vpmm.o"
