#!/usr/bin/env bash
# One script for the GPU machine, run from the repository root:
#   configure + build (meson; a plain g++/nvcc build when meson is missing),
#   the unit suite, the GPU suite (meson test --suite gpu), the benchmarks
#   (bench_vpmm; bench_torch natively and with expandable_segments when torch
#   is installed), then the real workloads: when torch is installed the live
#   training client (bench/torch/train_client.py, batch scale TRAIN_SCALE)
#   under native, expandable_segments, cudaMallocAsync and libvpmm (default,
#   VPMM_MAX_HANDLE_SIZE=unlimited, 1p, 32M), the live serving client
#   (bench/torch/serve_client.py, SERVE_WAVES waves) under the three PyTorch
#   allocators and libvpmm's default, and bench/torch/growth.py (expandable,
#   native, cudaMallocAsync) -> clients.log;
#   `vpmm replay --backend cuda` of every traces/*.pickle.gz under the
#   default, unlimited and 1p handle policies -> replays.log; all of it ->
#   bench/results/h100.md (bench/report.py), and compute-sanitizer memcheck
#   over every GPU test program. Every step is time-boxed so the whole run
#   stays under DEADLINE seconds and the logs always come back.
#
# Usage: scripts/gpu-run.sh [--lane=quick|long|multi|all] [--unit] [--sanitizer]
#                           [--quick] [--no-bench] [--no-sanitizer] [--no-torch]
#                           [--no-real | --real-only]
#   --lane=L     run one lane of the GPU suite (tests/gpu/meson.build says which
#                test is in which) and nothing else (no benchmarks, workloads or
#                sanitizer unless asked):
#                  quick  builds only what suite gpu-quick needs and runs it: the
#                         CUDA programs of the pool (DEADLINE 230: one device
#                         call with time to spare);
#                  long   builds everything, runs suite gpu-long: the frameworks
#                         and the GiB-moving programs (DEADLINE 560);
#                  multi  builds what suite gpu-multi needs and runs it: the
#                         two-GPU tests (gpu_multi_device, gpu_py_nccl_pause),
#                         on a machine with two GPUs (DEADLINE 300);
#                  all    (default) everything below, suite gpu whole.
#                A second lane on the same machine reuses the build (ninja
#                rebuilds nothing). GPU_TESTS="gpu_x gpu_y" runs those tests
#                instead of the lane's suite (a lane cut short, rerun in part).
#   --unit       also the unit suite (always run by --lane=all)
#   --sanitizer  also compute-sanitizer over the lane's CUDA programs
#   --no-real    skip the real workloads (clients and replays)
#   --real-only  only the real workloads (no bench_vpmm, bench_pause_resume,
#                bench_torch): with SKIP_TESTS=1 and --no-sanitizer, the
#                second call of a run split in two for the 600 s device limit
# Environment:
#   OUT       where logs go (default ./gpu-out); at most 8 files are written:
#             summary.txt build.log tests.log bench.log sanitizer.log h100.md
#             clients.log replays.log (temporary files go to /tmp, not OUT)
#   BUILD     build directory (default build-gpu)
#   DEADLINE  seconds the whole script may take (default 540)
#   TRAIN_SCALE  the training client's batch scale (default 4: ~21.5 GiB live,
#             where a step is ~85 ms and the machine's drift matters least)
#   SERVE_WAVES  the serving client's waves (default 6: they include the largest
#             KV cache of the 14, batch 8 x 400 tokens, at ~30 s per allocator;
#             0 = no serving runs; all 14 take ~80 s per allocator)
#   BENCH_LOG    with --real-only: an earlier call's bench.log, for sections 1-5
#   JOBS      parallel build jobs (default: nproc)
#   FORCE_PLAIN=1  build without meson (the fallback used when meson is missing)
# Exit status: 0 when the build, the unit suite and the GPU suite pass (the
# benchmarks and the sanitizer are reported in summary.txt, not gated).
set -u
START=$(date +%s)
QUICK=""; BENCH=1; SAN=1; TORCH=1; WORKLOADS=1; MICRO=1; LANE=all; UNIT=1; SAN_ASKED=0
for a in "$@"; do
  case "$a" in
    --lane=quick|--lane=long|--lane=multi|--lane=all) LANE=${a#--lane=} ;;
    --unit) UNIT=2 ;;
    --sanitizer) SAN_ASKED=1 ;;
    --quick) QUICK="--quick" ;;
    --no-bench) BENCH=0 ;;
    --no-sanitizer) SAN=0 ;;
    --no-torch) TORCH=0 ;;
    --no-real) WORKLOADS=0 ;;
    --real-only) MICRO=0 ;;
    *) echo "unknown option $a" >&2; exit 2 ;;
  esac
done
# A lane runs its suite and nothing else unless asked.
case "$LANE" in
  quick) SUITE=gpu-quick; DEFAULT_DEADLINE=230; TEST_BOX=170 ;;
  long) SUITE=gpu-long; DEFAULT_DEADLINE=560; TEST_BOX=480 ;;
  multi) SUITE=gpu-multi; DEFAULT_DEADLINE=300; TEST_BOX=240 ;;
  *) SUITE=gpu; DEFAULT_DEADLINE=540; TEST_BOX=360 ;;
esac
if [ "$LANE" != all ]; then
  BENCH=0; WORKLOADS=0; SAN=$SAN_ASKED
  (( UNIT == 2 )) || UNIT=0
fi
DEADLINE=${DEADLINE:-$DEFAULT_DEADLINE}
OUT=${OUT:-$PWD/gpu-out}
BUILD=${BUILD:-build-gpu}
BOX_RESERVE=15
. "$(dirname "$0")/gpu-common.sh"

# ------------------------------------------------------------------ tools
{
  echo "date: $(date -u)"; uname -a
  nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv,noheader || true
  for t in meson ninja nvcc compute-sanitizer python3 g++; do echo "$t: $(command -v $t || echo missing)"; done
  python3 -c 'import mesonbuild, sys; print("mesonbuild importable from", sys.executable)' || true
  nvcc --version | tail -2
} > "$OUT/build.log" 2>&1
if command -v meson >/dev/null 2>&1; then MESON=(meson)
elif python3 -c 'import mesonbuild' >/dev/null 2>&1; then MESON=(python3 -m mesonbuild.mesonmain)
else MESON=(); fi
[ -n "${FORCE_PLAIN:-}" ] && MESON=()
say "tools: meson=${MESON[*]:-none} ninja=$(command -v ninja || echo none) nvcc=$(command -v nvcc || echo none)"

# ------------------------------------------------------------------ build
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
CUDA_HOME=${CUDA_HOME:-$(dirname "$(dirname "$NVCC")")}
export PATH="$CUDA_HOME/bin:$PATH"
plain_build() {
  # Without meson: the library, the GPU tests and bench_vpmm by hand.
  PLAIN=1
  local ok=1 t babs
  plain_build_lib || ok=0
  babs=$BABS
  local NV=(-std=c++17 -O2 -lineinfo -gencode arch=compute_90,code=sm_90
            -gencode arch=compute_80,code=compute_80 -Iinclude -I"$BUILD/include" -I"$CUDA_HOME/include"
            -L"$babs" -lvpmm -Xlinker -rpath -Xlinker "$babs")
  for t in walkthrough streams zombie growth small oom split_handle pause_resume; do
    nvcc "${NV[@]}" "tests/gpu/test_gpu_$t.cu" -o "$BUILD/tests/gpu/test_gpu_$t" >> "$OUT/build.log" 2>&1 || ok=0
  done
  nvcc "${NV[@]}" bench/bench_vpmm.cu -o "$BUILD/bench/bench_vpmm" -ldl >> "$OUT/build.log" 2>&1 || ok=0
  (( ok )) && BUILD_OK=1
}
BUILD_OK=0; PLAIN=0
if (( ${#MESON[@]} )); then
  if [ ! -f "$BUILD/build.ninja" ]; then
    boxed 120 "${MESON[@]}" setup "$BUILD" -Dgpu_tests=enabled -Dcuda=enabled \
      -Dcuda-include-dir="$CUDA_HOME/include" >> "$OUT/build.log" 2>&1 || rm -rf "$BUILD"
  fi
  if [ -f "$BUILD/build.ninja" ]; then
    # The quick and multi lanes build only what their suite runs (the GPU
    # programs of the lane, the library, the interposer, the conformance
    # program); long and all build everything.
    LIBS=(libvpmm.so.1.0.0 libvpmm_preload.so)
    case "$LANE" in
      quick) TARGETS=("${LIBS[@]}" tests/conformance/test_backend_contract tests/gpu/test_gpu_cuda_backend
                      tests/gpu/test_gpu_preload_cuda)
             for t in walkthrough streams zombie growth small oom split_handle pause_resume copies views; do
               TARGETS+=("tests/gpu/test_gpu_$t"); done
             NEED=(libvpmm.so tests/gpu/test_gpu_walkthrough tests/gpu/test_gpu_pause_resume) ;;
      multi) TARGETS=("${LIBS[@]}" tests/gpu/test_gpu_multi_device)
             NEED=(libvpmm.so tests/gpu/test_gpu_multi_device) ;;
      long) TARGETS=(); NEED=(libvpmm.so tests/gpu/test_gpu_backup_stores tests/gpu/test_gpu_ipc) ;;
      *) TARGETS=(); NEED=(libvpmm.so tests/gpu/test_gpu_walkthrough tests/gpu/test_gpu_streams
                           tests/gpu/test_gpu_zombie tests/gpu/test_gpu_growth tests/gpu/test_gpu_small
                           tests/gpu/test_gpu_oom bench/bench_vpmm) ;;
    esac
    # -k 0: a broken target elsewhere (another engineer's test) must not stop
    # the GPU programs; what matters is that they and the library got built.
    boxed 300 ninja -C "$BUILD" -k 0 -j "$JOBS" ${TARGETS[@]+"${TARGETS[@]}"} >> "$OUT/build.log" 2>&1 \
      || say "build: some targets failed: $(grep -c '^FAILED' "$OUT/build.log") (see build.log)"
    BUILD_OK=1
    for f in "${NEED[@]}"; do
      [ -e "$BUILD/$f" ] || { BUILD_OK=0; say "build: missing $f"; }
    done
  else
    MESON=()
    BUILD=$BUILD-plain
    plain_build
  fi
else
  plain_build
fi
say "build: $( (( BUILD_OK )) && echo ok || echo FAILED) ($(( $(date +%s) - START )) s, lane $LANE)"
if [ "$LANE" = multi ]; then
  NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
  say "GPUs: ${NGPU:-0}$( (( ${NGPU:-0} < 2 )) && echo ' (gpu-multi needs two: its tests will SKIP)')"
fi
if (( ! BUILD_OK )); then tail -60 "$OUT/build.log"; fi

# ------------------------------------------------------------------ tests
TESTS_OK=0
if (( BUILD_OK )) && [ -z "${SKIP_TESTS:-}" ]; then  # SKIP_TESTS=1: benchmarks only (tests ran in an earlier call)
  {
    if (( ${#MESON[@]} )); then
      # The whole suite took ~9 min on an H200 (2026-11-27); its lanes fit a
      # call each (tests/gpu/meson.build). GPU_TESTS names tests instead.
      if [ -n "${GPU_TESTS:-}" ]; then
        # shellcheck disable=SC2086
        boxed "$TEST_BOX" "${MESON[@]}" test -C "$BUILD" -v --no-rebuild $GPU_TESTS
      else
        boxed "$TEST_BOX" "${MESON[@]}" test -C "$BUILD" --suite "$SUITE" -v --no-rebuild
      fi
      echo "meson test --suite gpu: exit $?"
      if (( UNIT )); then
        boxed 120 "${MESON[@]}" test -C "$BUILD" --suite unit --no-rebuild --print-errorlogs
        echo "meson test --suite unit: exit $?"
      else
        echo "meson test --suite unit: exit 0 (not run in lane $LANE; --unit runs it)"
      fi
    else
      rcs=0
      for t in "$BUILD"/tests/gpu/test_gpu_*; do
        [ -x "$t" ] || continue
        echo "---- $t"; boxed 240 "$t"; rc=$?; echo "exit $rc"
        (( rc != 0 )) && rcs=1
      done
      echo "meson test --suite gpu: exit $rcs (plain run)"
      echo "meson test --suite unit: exit 0 (not run without meson)"
    fi
  } > "$OUT/tests.log" 2>&1
  grep -E "^ *[0-9]+/[0-9]+ .*(OK|FAIL|SKIP|TIMEOUT|ERROR)|^(Ok|Fail|Skipped|Timeout|Expected Fail|Unexpected Pass):|exit [0-9]+$|: exit [0-9]+" \
    "$OUT/tests.log" | tee -a "$SUM"
  if grep -q "meson test --suite gpu: exit 0" "$OUT/tests.log" && grep -q "meson test --suite unit: exit 0" "$OUT/tests.log"; then
    TESTS_OK=1
  fi
  # Per-case lines of the GPU programs (ok / FAIL / SKIP).
  grep -E "^(ok|FAIL) |^  FAIL |SKIP: |FATAL" "$OUT/tests.log" | head -80 >> "$SUM"
fi
say "tests: $( (( TESTS_OK )) && echo pass || echo 'NOT all passed') ($(( $(date +%s) - START )) s)"

# ------------------------------------------------------------------ benchmarks
if (( BUILD_OK && BENCH )); then
  # --real-only: sections 1-5 come from BENCH_LOG, an earlier call's bench.log
  BENCH_LOG=${BENCH_LOG:-$OUT/bench.log}
  if (( MICRO )); then
    # the walkthrough traces repeat the built-in walkthrough (bench_common.hpp)
    TRACES=$(ls traces/*.trace 2>/dev/null | grep -v walkthrough || true)
    {
      echo "### bench_vpmm $QUICK $TRACES"
      boxed 200 "$BUILD/bench/bench_vpmm" $QUICK $TRACES
      echo "bench_vpmm: exit $?"
    } > "$OUT/bench.log" 2>&1
    say "bench_vpmm: $(tail -1 "$OUT/bench.log") ($(( $(date +%s) - START )) s)"
    if [ -x "$BUILD/bench/bench_pause_resume" ]; then
      { echo "### bench_pause_resume"; boxed 200 "$BUILD/bench/bench_pause_resume"; echo "bench_pause_resume: exit $?"; } \
        >> "$OUT/bench.log" 2>&1
      grep -E "^PAUSE |bench_pause_resume: exit" "$OUT/bench.log" | tee -a "$SUM"
    fi
    if (( TORCH )) && python3 -c 'import torch' >/dev/null 2>&1; then
      TD=$(python3 -c 'import torch, os; print(os.path.dirname(torch.__file__))')
      ABI=$(python3 -c 'import torch; print(int(torch._C._GLIBCXX_USE_CXX11_ABI))')
      TB="$BUILD/bench/bench_torch"
      for std in c++20 c++17; do
        boxed 120 g++ -std=$std -O2 -D_GLIBCXX_USE_CXX11_ABI="$ABI" -Ibench -I"$TD/include" \
          -I/usr/local/cuda/include bench/bench_torch.cpp -o "$TB" -L"$TD/lib" -lc10_cuda -lc10 \
          -L/usr/local/cuda/lib64 -lcudart -Wl,-rpath,"$TD/lib" >> "$OUT/build.log" 2>&1 && break
      done
      if [ -x "$TB" ]; then
        {
          echo "### bench_torch (native) $QUICK"
          boxed 120 env -u PYTORCH_CUDA_ALLOC_CONF "$TB" $QUICK $TRACES; echo "bench_torch native: exit $?"
          echo "### bench_torch (expandable_segments:True) $QUICK"
          boxed 120 env PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "$TB" $QUICK $TRACES
          echo "bench_torch expandable: exit $?"
        } >> "$OUT/bench.log" 2>&1
        say "bench_torch: $(grep -E 'bench_torch .*: exit' "$OUT/bench.log" | tr '\n' ' ')"
      else
        say "bench_torch: build failed (see build.log)"
      fi
    else
      say "bench_torch: skipped (no torch)"
    fi
  fi
  # ---------------------------------------------------------- real workloads
  BABS=$(cd "$BUILD" && pwd)
  VLIB="$BABS/libvpmm.so.1"
  [ -e "$VLIB" ] || VLIB="$BABS/libvpmm.so"  # the plain build has no soname link
  REAL=()
  if (( WORKLOADS )); then
    if (( TORCH )) && python3 -c 'import torch' >/dev/null 2>&1; then
      : > "$OUT/clients.log"
      (
        # The python binding finds the library through VPMM_LIBRARY.
        export VPMM_LIBRARY="$VLIB"
        client() {  # client LABEL CMD...: one time-boxed run, its exit marked for report.py
          local label=$1; shift
          echo "### client $label: $*"
          boxed 90 "$@"
          echo "### client $label: exit $?"
        }
        TC="bench/torch/train_client.py --batch-scale ${TRAIN_SCALE:-4}"
        SC="bench/torch/serve_client.py --waves ${SERVE_WAVES:-6}"
        for a in native expandable cudamallocasync; do
          client $a env -u VPMM_MAX_HANDLE_SIZE python3 $TC --alloc $a
        done
        client vpmm_default env -u VPMM_MAX_HANDLE_SIZE python3 $TC --alloc vpmm --label vpmm_default
        client vpmm_growth_handles env VPMM_MAX_HANDLE_SIZE=unlimited python3 $TC --alloc vpmm \
          --label vpmm_growth_handles
        client vpmm_page_handles env VPMM_MAX_HANDLE_SIZE=1p python3 $TC --alloc vpmm --label vpmm_page_handles
        client vpmm_cap_32MiB env VPMM_MAX_HANDLE_SIZE=32M python3 $TC --alloc vpmm --label vpmm_cap_32MiB
        if (( ${SERVE_WAVES:-6} > 0 )); then
          for a in native expandable cudamallocasync; do
            client serve_$a env -u VPMM_MAX_HANDLE_SIZE python3 $SC --alloc $a
          done
          client serve_vpmm_default env -u VPMM_MAX_HANDLE_SIZE python3 $SC --alloc vpmm --label vpmm_default
        fi
        for a in expandable native cudamallocasync; do
          client growth_$a python3 bench/torch/growth.py --alloc $a
        done
      ) >> "$OUT/clients.log" 2>&1
      REAL+=(--clients "$OUT/clients.log")
      say "clients: $(grep -cE '^\{"client": "train"' "$OUT/clients.log") training runs; non-zero exits: $(grep -E '^### client .*: exit [1-9]' "$OUT/clients.log" | sed 's/^### client //' | tr '\n' ' ')($(( $(date +%s) - START )) s)"
    else
      say "clients: skipped (no torch)"
    fi
    SNAPS=$(ls traces/*.pickle.gz 2>/dev/null || true)
    if [ -n "$SNAPS" ] && [ -x "$BUILD/tools/vpmm" ]; then
      : > "$OUT/replays.log"
      for f in $SNAPS; do
        for pol in default unlimited 1p; do
          MH=(); [ "$pol" != default ] && MH=(--max-handle-size "$pol")
          {
            echo "== $(basename "$f") $pol"
            boxed 120 "$BUILD/tools/vpmm" replay --backend cuda ${MH[@]+"${MH[@]}"} "$f"
            echo "-- exit $?"
          } >> "$OUT/replays.log" 2>&1
        done
      done
      REAL+=(--replays "$OUT/replays.log")
      say "replays: $(grep -c '^== ' "$OUT/replays.log") runs; non-zero exits: $(grep -c '^-- exit [1-9]' "$OUT/replays.log") ($(( $(date +%s) - START )) s)"
    elif [ -n "$SNAPS" ]; then
      say "replays: skipped (no $BUILD/tools/vpmm)"
    fi
  fi
  mkdir -p bench/results
  [ -f "$BENCH_LOG" ] || BENCH_LOG=/dev/null
  python3 bench/report.py --out "$OUT/h100.md" --findings bench/results/h100-findings.md \
    --command "scripts/gpu-run.sh $*  (bench_vpmm $QUICK; bench_torch native and PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True)" \
    ${REAL[@]+"${REAL[@]}"} "$BENCH_LOG" > /dev/null 2>> "$SUM" && cp "$OUT/h100.md" bench/results/h100.md
  say "report: $OUT/h100.md"
fi

# ------------------------------------------------------------------ compute-sanitizer
if (( BUILD_OK && SAN )) && command -v compute-sanitizer >/dev/null 2>&1; then
  : > "$OUT/sanitizer.log"
  SAN_PROGRAMS=(cuda_backend walkthrough streams zombie growth small split_handle oom pause_resume)
  [ "$LANE" = multi ] && SAN_PROGRAMS=(multi_device)
  [ "$LANE" = long ] && SAN_PROGRAMS=(backup_stores)
  for t in "${SAN_PROGRAMS[@]}"; do
    exe="$BUILD/tests/gpu/test_gpu_$t"
    [ -x "$exe" ] || continue
    one=$(mktemp "${TMPDIR:-/tmp}/vpmm-san-$t.XXXXXX")  # not under OUT: at most 8 files there
    {
      echo "######## compute-sanitizer --tool memcheck $exe"
      # --report-api-errors no: the tests provoke driver errors on purpose
      # (OOM, partial map/unmap); memcheck's memory-access checks stay on.
      boxed 150 env VPMM_GPU_SANITIZER=1 compute-sanitizer --tool memcheck --error-exitcode 99 \
        --report-api-errors no --print-limit 20 "$exe"
      echo "exit $?"
    } > "$one" 2>&1
    cat "$one" >> "$OUT/sanitizer.log"
    say "sanitizer $t: $(tail -1 "$one"); $(grep -E 'ERROR SUMMARY' "$one" | tail -1); $(grep -E '^[0-9]+ passed' "$one" | tail -1)"
    rm -f "$one"
  done
else
  say "sanitizer: skipped"
fi
say "total: $(( $(date +%s) - START )) s"
(( BUILD_OK && TESTS_OK ))
