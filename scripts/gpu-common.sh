# Sourced by the GPU machine's scripts (gpu-run.sh, gpu-backup-stores.sh,
# gpu-ipc.sh, gpu-tms.sh): the log folder, the one-line summary and the time
# boxes that keep a run inside its deadline so the logs always come back.
# Reads START, DEADLINE, OUT (set before sourcing); sets SUM, JOBS and
# PYTHONUNBUFFERED; BOX_RESERVE (default 10) is the seconds boxed() keeps in
# hand for the lines that report.
mkdir -p "$OUT"
SUM="$OUT/summary.txt"
: > "$SUM"
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 8)}
export PYTHONUNBUFFERED=1
say() { echo "== $*" | tee -a "$SUM"; }
left() { echo $(( DEADLINE - ($(date +%s) - START) )); }
# boxed WANT CMD...: runs CMD with a limit of min(WANT, time left - reserve)
# seconds; "(skipped: out of time)" and status 124 when too little is left.
boxed() {
  local want=$1; shift
  local l; l=$(( $(left) - ${BOX_RESERVE:-10} ))
  (( l < want )) && want=$l
  if (( want < 5 )); then echo "(skipped: out of time)"; return 124; fi
  timeout --kill-after=5 "$want" "$@"
}
# gpu_meson_setup: nvcc's CUDA on PATH (CUDA_HOME from nvcc's place unless
# set) and, where $BUILD has no build.ninja yet, `meson setup` of it with the
# GPU suite and the CUDA backend, logged to $OUT/build.log.
gpu_meson_setup() {
  NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
  CUDA_HOME=${CUDA_HOME:-$(dirname "$(dirname "$NVCC")")}
  export PATH="$CUDA_HOME/bin:$PATH"
  if [ ! -f "$BUILD/build.ninja" ]; then
    boxed 120 meson setup "$BUILD" -Dgpu_tests=enabled -Dcuda=enabled -Dcuda-include-dir="$CUDA_HOME/include" \
      > "$OUT/build.log" 2>&1
  fi
}
# plain_build_lib: without meson, libvpmm itself by hand into $BUILD
# (libvpmm.so.1 with its soname, libvpmm.so beside it): the registry's entry
# list as src/backend/meson.build writes it (AUTO order), vpmm_version.h as
# meson's configure_file writes it (the version of project() and
# vpmm_abi_version, read from meson.build, their only home), every library
# source. Logs to $OUT/build.log; sets BABS (the absolute $BUILD). Status 0
# when everything compiled and linked. The caller builds its own programs.
plain_build_lib() {
  echo "plain build (no usable meson)" >> "$OUT/build.log"
  mkdir -p "$BUILD/obj" "$BUILD/include" "$BUILD/gen/backend" "$BUILD/tests/gpu" "$BUILD/bench"
  BABS=$(cd "$BUILD" && pwd)
  printf 'VPMM_BACKEND_ENTRY(kCudaBackendEntry)\nVPMM_BACKEND_ENTRY(kHostBackendEntry)\n' \
    > "$BUILD/gen/backend/backend_entries.h"
  local ver abi vmaj vmin vpat ok=1 f
  ver=$(sed -n "s/^  version : '\([0-9]*\.[0-9]*\.[0-9]*\)',.*/\1/p" meson.build | head -1)
  abi=$(sed -n 's/^vpmm_abi_version = \([0-9]*\).*/\1/p' meson.build | head -1)
  IFS=. read -r vmaj vmin vpat <<<"$ver"
  sed -e "s/@VPMM_VERSION_MAJOR@/$vmaj/" -e "s/@VPMM_VERSION_MINOR@/$vmin/" \
      -e "s/@VPMM_VERSION_PATCH@/$vpat/" -e "s/@VPMM_VERSION_STRING@/$ver/" \
      -e "s/@VPMM_ABI_VERSION@/$abi/g" include/vpmm_version.h.in > "$BUILD/include/vpmm_version.h"
  local CXXF=(-std=c++17 -O2 -g -fPIC -Iinclude -I"$BUILD/include" -Isrc -I"$BUILD/gen" -I"$CUDA_HOME/include"
              -DVPMM_HAVE_CUDA=1 -fvisibility=hidden -pthread)
  for f in src/api/*.cpp src/common/*.cpp $(find src/config src/core -name "*.cpp" | sort) src/ipc/*.cpp \
           src/backend/*.cpp src/backend/host/*.cpp src/backend/cuda/cuda_backend.cpp \
           src/backend/cuda/cuda_driver.cpp src/hooks/*.cpp; do
    g++ "${CXXF[@]}" -c "$f" -o "$BUILD/obj/$(echo "$f" | tr / _).o" >> "$OUT/build.log" 2>&1 || ok=0
  done
  g++ -shared -o "$BUILD/libvpmm.so.1" "$BUILD"/obj/*.o -ldl -pthread -Wl,-soname,libvpmm.so.1 \
      -Wl,--version-script=src/api/vpmm.map >> "$OUT/build.log" 2>&1 || ok=0
  ln -sf libvpmm.so.1 "$BUILD/libvpmm.so"
  (( ok ))
}
