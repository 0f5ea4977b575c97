#!/usr/bin/env bash
# Builds libvpmm.a as ONE relocatable object (ld -r over the library's
# objects) whose hidden symbols are then made local (objcopy
# --localize-symbols; weak std:: instantiations excepted, see below). The
# objects are compiled with -fvisibility=hidden and only the vpmm_* API is
# marked default, so the archive then defines the same
# globals as libvpmm.so's version script exports: no helper, C++ class of the
# core or backend can clash with a symbol of the program that links it.
# Usage: prelink-static.sh OUT.a OBJECTS.a   (run by meson; LD/READELF/OBJCOPY/AR override)
set -euo pipefail
out=$1
in=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"${LD:-ld}" -r -o "$tmp/vpmm.o" --whole-archive "$in" --no-whole-archive
# Every hidden symbol becomes local except weak (COMDAT) instantiations of the
# C++ standard library: libstdc++.a may count on the program for some of them
# (GCC 13's system_error.o calls basic_string::_M_dispose and nothing else in
# that libstdc++.a defined it for the link), and a program that links only C
# objects has no other copy. Localising those failed the static link under GCC 13.
# The pattern is tests/static/check_symbols.py's, which lets them stay global.
# An instantiation over one of libvpmm's own types (its mangled name holds
# "4vpmm", the namespace) is local all the same: neither libstdc++ nor the
# program can refer to it, and it would be a global that names vpmm::.
std='^_Z(Z?N?K?(St|9__gnu_cxx)|T[ISV]St|GVZN?St)'
"${READELF:-readelf}" -sW "$tmp/vpmm.o" |
  awk -v std="$std" '$6 == "HIDDEN" && $7 != "UND" &&
      ($5 == "GLOBAL" || ($5 == "WEAK" && ($8 !~ std || $8 ~ /4vpmm/))) { print $8 }' |
  sort -u > "$tmp/localize"
"${OBJCOPY:-objcopy}" --localize-symbols="$tmp/localize" "$tmp/vpmm.o"
rm -f "$out"
"${AR:-ar}" rcs "$out" "$tmp/vpmm.o"
