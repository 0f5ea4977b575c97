#!/usr/bin/env bash
# The torch_memory_saver drop-in on a GPU machine, from the repository root:
#   1. build libvpmm, libvpmm_preload.so and what the tests below run
#      (meson, release, in $BUILD; only those targets);
#   2. the interposer's CPU suite there too (meson test --suite preload);
#   3. tests/gpu/test_tms_preload.py: hook mode "preload" under the interposer
#      (a GPT + AdamW paused whole with TMS_INIT_ENABLE: >= 95% of the device
#      memory released, loss bit-identical after resume; nested regions,
#      disable(), cuda_graph, raw cudaMalloc, empty_cache, mmap RSS);
#   4. TMS's own harness and examples, unchanged, from .tms_upstream/ (when
#      it was copied along): tests/gpu/run_tms_upstream.py, which prints a
#      pass / fail / left out / skipped table;
#   5. tests/gpu/test_tms_dropin.py (hook mode "torch"), gpu_preload_torch and
#      gpu_preload_cuda (the interposer under PyTorch and a plain CUDA program).
# Every step is time-boxed so that the whole run ends within DEADLINE seconds
# (default 460) and the logs always come back.
# Output (OUT, default ./gpu-out; 4 files): summary.txt (one line per step and
# the upstream table), build.log, tests.log (steps 2, 3 and 5, verbose),
# upstream.log (step 4: every run's outcome; the last 40 lines of each run
# that did not pass).
# Exit status: 0 when the build and steps 2, 3 and 5 passed and no upstream
# run failed other than for a known upstream defect (the table says which).
set -u
START=$(date +%s)
DEADLINE=${DEADLINE:-460}
OUT=${OUT:-$PWD/gpu-out}
BUILD=${BUILD:-build-tms}
. "$(dirname "$0")/gpu-common.sh"
OK=1

# ------------------------------------------------------------------ build
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
CUDA_HOME=${CUDA_HOME:-$(dirname "$(dirname "$NVCC")")}
export PATH="$CUDA_HOME/bin:$PATH"
if command -v meson >/dev/null 2>&1; then MESON=(meson); else MESON=(python3 -m mesonbuild.mesonmain); fi
{
  date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "devices", torch.cuda.device_count())' || true
  if [ ! -f "$BUILD/build.ninja" ]; then
    boxed 120 "${MESON[@]}" setup "$BUILD" --buildtype=release -Dgpu_tests=enabled -Dcuda=enabled \
      -Dcuda-include-dir="$CUDA_HOME/include" || rm -rf "$BUILD"
  fi
  boxed 240 ninja -C "$BUILD" -j "$JOBS" libvpmm.so.1.0.0 libvpmm_preload.so tests/preload/libfakecudart.so \
    tests/preload/test_preload tests/preload/test_preload_tms tests/gpu/test_gpu_preload_cuda
} > "$OUT/build.log" 2>&1
if [ -e "$BUILD/libvpmm.so.1" ] && [ -e "$BUILD/libvpmm_preload.so" ]; then
  say "build: ok ($(( $(date +%s) - START )) s)"
else
  say "build: FAILED (see build.log)"; tail -40 "$OUT/build.log"; exit 1
fi
export VPMM_LIBRARY="$PWD/$BUILD/libvpmm.so.1"

# mtest SECONDS ARGS... : meson test ARGS, verbose, appended to tests.log;
# its result lines and the cases' ok/FAIL/skip lines go to the summary.
mtest() {
  local want=$1; shift
  local one; one=$(mktemp "${TMPDIR:-/tmp}/gpu-tms.XXXXXX")  # not under OUT: at most 8 files there
  {
    echo "######## meson test $*"
    boxed "$want" "${MESON[@]}" test -C "$BUILD" --no-rebuild -v --print-errorlogs "$@"
    echo "######## exit $?"
  } > "$one" 2>&1
  cat "$one" >> "$OUT/tests.log"
  grep -E "^ *[0-9]+/[0-9]+ .*(OK|FAIL|SKIP|TIMEOUT|ERROR)|^(ok|FAIL|skip) |^[0-9]+ passed" "$one" \
    | sed 's/^/   /' | tee -a "$SUM"
  if [ "$(tail -1 "$one")" != "######## exit 0" ] || grep -q "No suitable tests defined" "$one"; then
    OK=0; echo "   meson test $*: NOT passed (see tests.log)" | tee -a "$SUM"
  fi
  rm -f "$one"
}
: > "$OUT/tests.log"

# ------------------------------------------------------------------ 2. CPU preload suite
mtest 60 --suite preload
say "preload suite (CPU) done ($(( $(date +%s) - START )) s)"

# ------------------------------------------------------------------ 3. hook mode "preload" on the GPU
mtest 200 gpu_py_tms_preload
say "gpu_py_tms_preload done ($(( $(date +%s) - START )) s)"

# ------------------------------------------------------------------ 4. TMS's own examples
if [ -f .tms_upstream/test/test_examples.py ]; then
  # leave ~110 s for step 5
  budget=$(( $(left) - 120 ))
  (( budget < 60 )) && budget=60
  boxed $(( budget + 15 )) python3 tests/gpu/run_tms_upstream.py --upstream .tms_upstream \
    --timeout 150 --deadline "$budget" > "$OUT/upstream.log" 2>&1
  urc=$?
  {
    echo "== upstream examples (exit $urc):"
    if grep -q '^| run |' "$OUT/upstream.log"; then sed -n '/^| run |/,$p' "$OUT/upstream.log"
    else tail -8 "$OUT/upstream.log"; fi
  } | tee -a "$SUM"
  (( urc == 0 )) || OK=0
else
  say "upstream examples: no .tms_upstream/ in this copy (run_tms_upstream.py needs it)"
  OK=0
fi

# ------------------------------------------------------------------ 5. hook mode "torch" and the interposer
mtest 150 gpu_py_tms_dropin gpu_preload_torch gpu_preload_cuda
say "total: $(( $(date +%s) - START )) s; $( (( OK )) && echo 'all passed' || echo 'NOT all passed')"
(( OK ))
