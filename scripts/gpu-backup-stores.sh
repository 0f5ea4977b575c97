#!/usr/bin/env bash
# The backup stores on the GPU machine, from the repository root, in one run:
#   build (meson into BUILD, only the targets below; a plain g++/nvcc build
#   when meson is missing), then
#   - the CPU tests of the stores (unit: backup_stores, fault_injection,
#     pause; Python: bindings/python/test_backup_stores.py),
#   - the GPU tests: tests/gpu/test_gpu_backup_stores (each store's bytes
#     over 3 cycles, VmRSS after an mmap resume, disk files constant and
#     removed, retained backups and the unchanged re-pause, a missing
#     directory) and test_gpu_pause_resume (the pinned path's regression
#     test), and tests/gpu/test_torch_backup_stores.py when torch is there,
#   - bench/bench_backup_stores (ceilings; pinned first/steady/unchanged
#     re-pause of WEIGHTS_GIB retained weights and resume against the H2D
#     ceiling; mmap bandwidth and VmRSS; disk bandwidth against the
#     directory's own write/read bandwidth),
#   - compute-sanitizer memcheck over test_gpu_backup_stores (time left).
# Every step is time-boxed so the run ends within DEADLINE seconds.
#
# Environment:
#   OUT          where the logs go (default ./gpu-out); 5 files: summary.txt
#                build.log tests.log bench.log sanitizer.log
#   BUILD        build directory (default build-gpu)
#   DEADLINE     seconds for the whole script (default 470)
#   BENCH_DIR    directory the disk store and its ceiling use (default /tmp)
#   WEIGHTS_GIB  weights of the pinned and mmap benchmarks (default 16)
#   DISK_GIB     size of the disk benchmark (default 8)
#   JOBS         parallel build jobs (default: nproc)
# Success: summary.txt ends with "RESULT: PASS" (exit 0): the build, the CPU
# tests and the GPU tests passed (a GPU test that skips for want of a device
# counts as failed). The benchmark's "TARGET ... PASS|FAIL"
# lines (re-pause >= 20x faster than a steady pause, pinned resume >= 90% of
# H2D, mmap VmRSS back within 10%, disk footprint constant) are reported in
# summary.txt, not gated.
set -u
START=$(date +%s)
DEADLINE=${DEADLINE:-470}
OUT=${OUT:-$PWD/gpu-out}
BUILD=${BUILD:-build-gpu}
export BENCH_DIR=${BENCH_DIR:-/tmp}
. "$(dirname "$0")/gpu-common.sh"

{
  echo "date: $(date -u)"; uname -a
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
  df -T "$BENCH_DIR" || true
  cat /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null || true
  for t in meson ninja nvcc compute-sanitizer python3 g++; do echo "$t: $(command -v $t || echo missing)"; done
} > "$OUT/build.log" 2>&1

# ------------------------------------------------------------------ build
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
CUDA_HOME=${CUDA_HOME:-$(dirname "$(dirname "$NVCC")")}
export PATH="$CUDA_HOME/bin:$PATH"
if command -v meson >/dev/null 2>&1; then MESON=(meson)
elif python3 -c 'import mesonbuild' >/dev/null 2>&1; then MESON=(python3 -m mesonbuild.mesonmain)
else MESON=(); fi
TARGETS=(libvpmm.so.1.0.0 tests/test_backup_stores tests/test_fault_injection tests/test_pause
         tests/gpu/test_gpu_backup_stores tests/gpu/test_gpu_pause_resume bench/bench_backup_stores)
BUILD_OK=0; PLAIN=0
if (( ${#MESON[@]} )); then
  if [ ! -f "$BUILD/build.ninja" ]; then
    boxed 120 "${MESON[@]}" setup "$BUILD" -Dgpu_tests=enabled -Dcuda=enabled \
      -Dcuda-include-dir="$CUDA_HOME/include" >> "$OUT/build.log" 2>&1 || rm -rf "$BUILD"
  fi
  if [ -f "$BUILD/build.ninja" ]; then
    boxed 240 ninja -C "$BUILD" -j "$JOBS" "${TARGETS[@]}" >> "$OUT/build.log" 2>&1 && BUILD_OK=1
  fi
fi
if (( ! BUILD_OK )) && [ ! -f "$BUILD/build.ninja" ]; then
  # Without meson: the library, the GPU test and the benchmark by hand.
  PLAIN=1
  BUILD=$BUILD-plain
  ok=1
  plain_build_lib || ok=0
  babs=$BABS
  NV=(-std=c++17 -O2 -lineinfo -gencode arch=compute_90,code=sm_90 -Iinclude -I"$BUILD/include"
      -I"$CUDA_HOME/include" -L"$babs" -l:libvpmm.so.1 -Xlinker -rpath -Xlinker "$babs")
  nvcc "${NV[@]}" tests/gpu/test_gpu_backup_stores.cu -o "$BUILD/tests/gpu/test_gpu_backup_stores" \
    >> "$OUT/build.log" 2>&1 || ok=0
  nvcc "${NV[@]}" tests/gpu/test_gpu_pause_resume.cu -o "$BUILD/tests/gpu/test_gpu_pause_resume" \
    >> "$OUT/build.log" 2>&1 || ok=0
  nvcc "${NV[@]}" bench/bench_backup_stores.cu -o "$BUILD/bench/bench_backup_stores" >> "$OUT/build.log" 2>&1 || ok=0
  (( ok )) && BUILD_OK=1
fi
say "build: $( (( BUILD_OK )) && echo ok || echo FAILED) ($(( $(date +%s) - START )) s, $( (( PLAIN )) && echo plain || echo meson))"
if (( ! BUILD_OK )); then
  tail -40 "$OUT/build.log" >> "$SUM"
  say "RESULT: FAIL (build)"
  exit 1
fi
VLIB="$(cd "$BUILD" && pwd)/libvpmm.so.1"

# ------------------------------------------------------------------ tests
CPU_OK=1; GPU_OK=1
run_test() {  # run_test KIND NAME SECONDS CMD...: one program, its exit counted
  local kind=$1 name=$2 secs=$3; shift 3
  echo "######## $name: $*"
  boxed "$secs" "$@"
  local rc=$?
  echo "######## $name: exit $rc"
  # A GPU program that skips (77: no device) did not pass: this script is
  # for the GPU machine. A CPU program never skips.
  if (( rc != 0 )); then
    [ "$kind" = cpu ] && CPU_OK=0 || GPU_OK=0
  fi
  echo "$name: exit $rc" >> "$SUM.tmp"
}
: > "$SUM.tmp"
{
  if (( ! PLAIN )); then
    run_test cpu unit_backup_stores 60 "$BUILD/tests/test_backup_stores"
    run_test cpu unit_fault_injection 120 "$BUILD/tests/test_fault_injection"
    run_test cpu unit_pause 60 "$BUILD/tests/test_pause"
    run_test cpu python_backup_stores 60 env VPMM_LIBRARY="$VLIB" python3 bindings/python/test_backup_stores.py
  fi
  run_test gpu gpu_backup_stores 150 "$BUILD/tests/gpu/test_gpu_backup_stores"
  run_test gpu gpu_pause_resume 120 "$BUILD/tests/gpu/test_gpu_pause_resume"
  if python3 -c 'import torch' >/dev/null 2>&1; then
    run_test gpu torch_backup_stores 150 env VPMM_LIBRARY="$VLIB" python3 tests/gpu/test_torch_backup_stores.py
  else
    echo "torch_backup_stores: skipped (no torch)" >> "$SUM.tmp"
  fi
} > "$OUT/tests.log" 2>&1
cat "$SUM.tmp" >> "$SUM"; rm -f "$SUM.tmp"
grep -E "^FAIL |^  .*failed$|^[0-9]+ passed, [0-9]+ failed|VmRSS|SKIP: |FATAL" "$OUT/tests.log" | head -60 >> "$SUM"
say "tests: cpu $( (( CPU_OK )) && echo pass || echo FAIL), gpu $( (( GPU_OK )) && echo pass || echo FAIL) ($(( $(date +%s) - START )) s)"

# ------------------------------------------------------------------ benchmark
{
  echo "### bench_backup_stores (BENCH_DIR=$BENCH_DIR WEIGHTS_GIB=${WEIGHTS_GIB:-16} DISK_GIB=${DISK_GIB:-8})"
  boxed 200 "$BUILD/bench/bench_backup_stores"
  echo "bench_backup_stores: exit $?"
} > "$OUT/bench.log" 2>&1
grep -E "^BACKUP |^TARGET |bench_backup_stores: exit|FATAL" "$OUT/bench.log" >> "$SUM"
say "bench: $(grep -c '^TARGET .* PASS' "$OUT/bench.log") targets pass, $(grep -c '^TARGET .* FAIL' "$OUT/bench.log") fail ($(( $(date +%s) - START )) s)"

# ------------------------------------------------------------------ compute-sanitizer
if command -v compute-sanitizer >/dev/null 2>&1 && (( $(left) > 60 )); then
  {
    echo "######## compute-sanitizer --tool memcheck test_gpu_backup_stores"
    boxed 150 env VPMM_GPU_SANITIZER=1 compute-sanitizer --tool memcheck --error-exitcode 99 \
      --report-api-errors no --print-limit 20 "$BUILD/tests/gpu/test_gpu_backup_stores"
    echo "exit $?"
  } > "$OUT/sanitizer.log" 2>&1
  say "sanitizer: $(tail -1 "$OUT/sanitizer.log"); $(grep -E 'ERROR SUMMARY' "$OUT/sanitizer.log" | tail -1)"
else
  say "sanitizer: skipped"
fi
say "total: $(( $(date +%s) - START )) s"
if (( CPU_OK && GPU_OK )); then say "RESULT: PASS"; exit 0; fi
say "RESULT: FAIL (tests)"
exit 1
