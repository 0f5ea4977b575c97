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
