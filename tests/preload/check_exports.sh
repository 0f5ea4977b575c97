#!/bin/sh
# libvpmm_preload.so exports exactly the interposed CUDA entry points and
# vpmm_preload_open_scope: a missing one would not be interposed, an extra
# one could shadow the program.
# Usage: check_exports.sh LIBVPMM_PRELOAD_SO
set -eu
got=$(nm -D --defined-only "$1" | awk '$2 == "T" { sub(/@.*/, "", $3); print $3 }' | sort)
want=$(printf '%s\n' cuMemAlloc_v2 cuMemFree_v2 cudaFree cudaFreeAsync cudaMalloc cudaMallocAsync \
  vpmm_preload_open_scope | sort)
echo "exported: $(echo $got)"
[ "$got" = "$want" ] || { echo "FAIL: expected: $(echo $want)"; exit 1; }
needed=$(readelf -d "$1" | grep '(NEEDED)')
echo "$needed"
echo "$needed" | grep -q 'libvpmm.so.1' || { echo "FAIL: does not need libvpmm.so.1"; exit 1; }
if echo "$needed" | grep -q -e libcuda -e libcudart; then
  echo "FAIL: links CUDA (must find the real functions at run time)"; exit 1
fi
echo OK
