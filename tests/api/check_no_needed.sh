#!/bin/sh
# A run-time loader client has no link-time dependency on libvpmm: no
# DT_NEEDED entry names it (the point of vpmm_loader.h).
# Usage: check_no_needed.sh BINARY
set -eu
needed=$(readelf -d "$1" | grep '(NEEDED)' || true)
echo "$needed"
[ -n "$needed" ] || { echo "FAIL: readelf printed no NEEDED entry at all"; exit 1; }
if echo "$needed" | grep -q 'libvpmm'; then
  echo "FAIL: $1 has a link-time dependency on libvpmm"; exit 1
fi
echo "OK: $1 does not need libvpmm"
