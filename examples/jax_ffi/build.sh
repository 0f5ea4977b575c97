#!/bin/sh
# Builds libvpmm_scratch_ffi.so, the XLA FFI example, against jaxlib's FFI
# headers (jax.ffi.include_dir()) and libvpmm's headers (include/: only
# vpmm.h and vpmm_loader.h; no libvpmm at link time).
# Usage: build.sh [OUTDIR]          (default: examples/jax_ffi/build)
# Environment: PYTHON (python3), NVCC (nvcc), CUDA_ARCH_FLAGS (sm_90 code +
# compute_80 PTX, as the GPU tests).
# Exit status 77 (meson: skip) when JAX or nvcc is missing, with the reason.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
out=${1:-$here/build}
PYTHON=${PYTHON:-python3}
NVCC=${NVCC:-nvcc}
ARCH=${CUDA_ARCH_FLAGS:--gencode arch=compute_90,code=sm_90 -gencode arch=compute_80,code=compute_80}

if ! command -v "$NVCC" >/dev/null 2>&1; then
  echo "SKIP: nvcc not found (set NVCC)"; exit 77
fi
if ! ffi_inc=$("$PYTHON" -c 'import jax.ffi; print(jax.ffi.include_dir())' 2>/dev/null); then
  echo "SKIP: $PYTHON cannot import jax.ffi (jax >= 0.4.31 needed)"; exit 77
fi
mkdir -p "$out"
# -cudart static (nvcc's default): the plugin carries its runtime and works
# whatever libcudart JAX ships; kernels run on XLA's stream all the same.
# shellcheck disable=SC2086
"$NVCC" -std=c++17 -O2 -shared -Xcompiler -fPIC $ARCH \
  -I"$ffi_inc" -I"$repo/include" \
  "$here/vpmm_scratch_ffi.cu" -o "$out/libvpmm_scratch_ffi.so" -ldl
echo "built $out/libvpmm_scratch_ffi.so"
