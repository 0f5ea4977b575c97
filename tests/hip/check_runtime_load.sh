#!/bin/sh
# The HIP backend is a run-time load: libvpmm.so has no NEEDED entry for any
# HIP/ROCm library and no undefined hip* symbol, yet the backend is compiled
# in (the sonames it dlopens are in the library). Usage: check_runtime_load.sh LIBVPMM
set -eu
lib=$1
fail=0
if readelf -d "$lib" | grep NEEDED | grep -Ei 'amdhip|hsa-runtime|rocm'; then
  echo "FAIL: $lib links a HIP/ROCm library at link time"; fail=1
fi
if nm -D --undefined-only "$lib" | awk '{print $NF}' | grep -E '^hip'; then
  echo "FAIL: $lib has undefined hip* symbols"; fail=1
fi
for so in libamdhip64.so.7 libamdhip64.so.6 libamdhip64.so.5 VPMM_HIP_LIBRARY; do
  if ! grep -q "$so" "$lib"; then
    echo "FAIL: $lib does not mention $so: the HIP backend is not compiled in"; fail=1
  fi
done
[ $fail -eq 0 ] && echo "ok: $lib loads the HIP runtime at run time only (NEEDED: $(readelf -d "$lib" | grep NEEDED | sed 's/.*\[\(.*\)\]/\1/' | tr '\n' ' '))"
exit $fail
