# shellcheck shell=bash
# Sourced by gpu-ipc.sh and gpu-ipc-sync.sh (after gpu-common.sh): builds
# libvpmm with the CUDA backend and the IPC programs (test_ipc,
# test_ipc_hostile, test_gpu_ipc, bench_ipc) into $BUILD with meson, or with
# g++/nvcc by hand when meson is missing or fails (FORCE_PLAIN=1 forces it).
# Sets BUILD (the folder used), BUILD_OK and LIBPATH; logs to $OUT/build.log;
# on failure says so in the summary and exits the script.
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
CUDA_HOME=${CUDA_HOME:-$(dirname "$(dirname "$NVCC")")}
export PATH="$CUDA_HOME/bin:$PATH"

# ------------------------------------------------------------------ build
plain_build() {
  local ok=1 f babs
  plain_build_lib || ok=0
  babs=$BABS
  for f in test_ipc test_ipc_hostile; do
    g++ -std=c++17 -O2 -Iinclude -I"$BUILD/include" -Itests/unit "tests/unit/$f.cpp" -o "$BUILD/tests/$f" \
        -L"$babs" -lvpmm -Wl,-rpath,"$babs" -pthread >> "$OUT/build.log" 2>&1 || ok=0
  done
  local NV=(-std=c++17 -O2 -lineinfo -gencode arch=compute_90,code=sm_90 -Iinclude -I"$BUILD/include"
            -I"$CUDA_HOME/include" -L"$babs" -lvpmm -Xlinker -rpath -Xlinker "$babs")
  nvcc "${NV[@]}" tests/gpu/test_gpu_ipc.cu -o "$BUILD/tests/gpu/test_gpu_ipc" >> "$OUT/build.log" 2>&1 || ok=0
  nvcc "${NV[@]}" bench/bench_ipc.cu -o "$BUILD/bench/bench_ipc" -L"$CUDA_HOME/lib64/stubs" -lcuda >> "$OUT/build.log" 2>&1 || ok=0
  (( ok ))
}

BUILD_OK=0
TARGETS=(tests/test_ipc tests/test_ipc_hostile tests/gpu/test_gpu_ipc bench/bench_ipc)
if command -v meson >/dev/null 2>&1 && command -v ninja >/dev/null 2>&1 && [ -z "${FORCE_PLAIN:-}" ]; then
  if [ ! -f "$BUILD/build.ninja" ]; then
    boxed 120 meson setup "$BUILD" -Dgpu_tests=enabled -Dcuda=enabled -Dcuda-include-dir="$CUDA_HOME/include" \
      >> "$OUT/build.log" 2>&1 || rm -rf "$BUILD"
  fi
  if [ -f "$BUILD/build.ninja" ]; then
    LIB=$(cd "$BUILD" && ninja -t targets all 2>/dev/null | sed -n 's/^\(libvpmm\.so\.[0-9.]*\): .*/\1/p' | head -1)
    boxed 240 ninja -C "$BUILD" -j "$JOBS" "${LIB:-libvpmm.so}" "${TARGETS[@]}" >> "$OUT/build.log" 2>&1 && BUILD_OK=1
  fi
fi
if (( ! BUILD_OK )); then
  BUILD=$BUILD-plain
  plain_build && BUILD_OK=1
fi
say "build: $( (( BUILD_OK )) && echo ok || echo FAILED) in $BUILD ($(( $(date +%s) - START )) s)"
if (( ! BUILD_OK )); then tail -40 "$OUT/build.log" | tee -a "$SUM"; say "${NAME:-gpu-ipc}: FAILED (build)"; exit 1; fi
LIBPATH=$(ls "$PWD/$BUILD"/libvpmm.so.1 2>/dev/null || ls "$PWD/$BUILD"/libvpmm.so | head -1)

