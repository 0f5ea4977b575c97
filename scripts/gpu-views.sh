#!/usr/bin/env bash
# Views (docs/handles.md, "Views") on the GPU machine, run from the
# repository root: builds with meson (the GPU suite enabled), then
#   1. the GPU tests that gpu-run.sh's time box may cut (VIEWS_TESTS, default
#      the views test and the four that run last in the suite)
#   2. `vpmm replay --backend cuda` of the shipped training snapshots with
#      views (the default) and without (VPMM_VIEW_MIN_SIZE=off): the same
#      decisions on the real driver, with its time per call
#   3. the hard client (bench/torch/hard_client.py), ROUNDS alternating
#      rounds of: libvpmm default, libvpmm without views, expandable_segments,
#      cudaMallocAsync, PyTorch native; one JSON line per process
# Everything under $OUT: summary.txt build.log tests.log replays.log
# hard.log. Each step is time-boxed; the whole run stays under DEADLINE
# seconds (default 570).
set -u
START=$(date +%s)
DEADLINE=${DEADLINE:-570}
OUT=${OUT:-$PWD/gpu-views-out}
BUILD=${BUILD:-build-gpu}
ROUNDS=${ROUNDS:-3}
VIEWS_TESTS=${VIEWS_TESTS:-"gpu_views gpu_jax_ffi gpu_estimate_torch gpu_preload_torch gpu_preload_cuda"}
. "$(dirname "$0")/gpu-common.sh"

gpu_meson_setup
boxed 240 ninja -C "$BUILD" -k 0 -j "$JOBS" >> "$OUT/build.log" 2>&1
say "build: exit $? ($(( $(date +%s) - START )) s)"

# shellcheck disable=SC2086
boxed 150 meson test -C "$BUILD" --no-rebuild -v $VIEWS_TESTS > "$OUT/tests.log" 2>&1
say "tests ($VIEWS_TESTS): exit $?"
grep -E "^ *[0-9]+/[0-9]+ " "$OUT/tests.log" | grep -v RUNNING | tee -a "$SUM"

for t in traces/moe_training.pickle.gz traces/llama_training.pickle.gz; do
  for v in default off; do
    echo "---- $t views=$v" >> "$OUT/replays.log"
    if [ "$v" = off ]; then
      VPMM_VIEW_MIN_SIZE=off boxed 60 "$BUILD/tools/vpmm" replay --backend cuda "$t" >> "$OUT/replays.log" 2>&1
    else
      boxed 60 "$BUILD/tools/vpmm" replay --backend cuda "$t" >> "$OUT/replays.log" 2>&1
    fi
  done
done
say "replays: $(grep -c 'peak mapped / peak requested' "$OUT/replays.log") done"
grep -E "^----|peak mapped / peak requested|second half|views  |driver by malloc" "$OUT/replays.log" >> "$SUM"

export VPMM_LIBRARY="$PWD/$BUILD/libvpmm.so"
for r in $(seq 1 "$ROUNDS"); do
  for a in vpmm vpmm-noviews expandable cudamallocasync native; do
    case $a in
      vpmm-noviews) env VPMM_VIEW_MIN_SIZE=off timeout 90 python3 bench/torch/hard_client.py --alloc vpmm \
                      --label "round$r noviews" ;;
      *) timeout 90 python3 bench/torch/hard_client.py --alloc "$a" --label "round$r" ;;
    esac >> "$OUT/hard.log" 2>> "$OUT/hard.err"
    (( $(left) < 40 )) && break 2
  done
done
say "hard client: $(grep -c '^{' "$OUT/hard.log") runs"
say "total: $(( $(date +%s) - START )) s"
