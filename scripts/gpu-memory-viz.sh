#!/usr/bin/env bash
# PyTorch's memory tools on libvpmm memory, pause-aware (docs/python.md,
# "Memory history and snapshots"), on the GPU machine, from the repository
# root: builds with meson (the GPU suite enabled), then runs
# gpu_py_torch_memory_viz (tests/gpu/test_torch_memory_viz.py): a training
# client under vpmm.torch.use_as_allocator() records its history, pauses its
# optimizer and weights, dumps a snapshot while paused, and
# torch.cuda._memory_viz renders it; then the same with pool(tag) MemPools.
# Everything under $OUT: summary.txt, build.log, tests.log and viz/ (the
# snapshots, the trace and segment views as HTML, segsum and trace texts).
# Time-boxed; the whole run stays under DEADLINE seconds (default 500).
set -u
START=$(date +%s)
DEADLINE=${DEADLINE:-500}
OUT=${OUT:-$PWD/gpu-memory-viz-out}
BUILD=${BUILD:-build-gpu}
. "$(dirname "$0")/gpu-common.sh"

gpu_meson_setup
# Only what the test needs: the libraries, the vpmm command.
boxed 240 ninja -C "$BUILD" -j "$JOBS" tools/vpmm libvpmm_history.so >> "$OUT/build.log" 2>&1
say "build: exit $? ($(( $(date +%s) - START )) s)"

export VPMM_VIZ_OUT="$OUT/viz"
mkdir -p "$VPMM_VIZ_OUT"
boxed 400 meson test -C "$BUILD" --no-rebuild -v gpu_py_torch_memory_viz > "$OUT/tests.log" 2>&1
say "gpu_py_torch_memory_viz: exit $?"
grep -E "^(ok|FAIL) |PyTorch .* under the pluggable|rendered|events,|vpmm replay:|passed, " "$OUT/tests.log" |
  tee -a "$SUM"
say "artifacts: $(ls "$VPMM_VIZ_OUT" | tr '\n' ' ')"
say "total: $(( $(date +%s) - START )) s"
