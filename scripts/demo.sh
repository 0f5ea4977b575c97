#!/usr/bin/env bash
# The main job: builds libvpmm and the `vpmm` command (nothing else: no test
# suites, no GPU tests), replays the shipped allocation traces on the default
# backend (CUDA when a GPU is usable, else the host backend), then replays
# the shipped PyTorch memory snapshots and ends with what libvpmm would map
# against what PyTorch reserved for the same allocations.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
# A directory of its own, configured for a fast first build: no test suites
# or GPU tests, no debug info, precompiled standard headers (src/pch/) and
# -O1. Measured on two cores (CPU seconds of the compiles, three rounds):
# -O3 43 s, -O3 with the precompiled headers 37 s, -O1 with them 30 s; the
# demo's replays take the same 1.3 s CPU at -O1 as at -O3 (at -O0: 5.7 s).
# A library for real work is built with `pip install .` or the README's
# meson lines, optimised (-O3 / -O2).
BUILD=${BUILD:-build-demo}
DEMO_SETUP=(-Dtests=false -Dgpu_tests=disabled -Doptimization=1 -Ddebug=false -Db_ndebug=true -Db_pch=true)
if [ ! -f "$BUILD/build.ninja" ]; then
  echo "== configuring $BUILD (meson setup ${DEMO_SETUP[*]})"
  meson setup "$BUILD" "${DEMO_SETUP[@]}" >/dev/null
fi
echo "== building libvpmm and the vpmm command (ninja -C $BUILD tools/vpmm)"
start=$SECONDS
ninja -C "$BUILD" tools/vpmm
echo "== built in $((SECONDS - start)) s"
vpmm="$BUILD/tools/vpmm"
"$vpmm" info
for t in traces/training.trace traces/multistream.trace; do
  "$vpmm" replay --check "$t"
done
# The walkthrough trace's `# replay:` line sets its pool shape (64 KiB pages).
"$vpmm" replay --dump traces/walkthrough_c.trace
echo
echo "== PyTorch memory snapshots recorded on an H100 (traces/*.pickle.gz):"
echo "== what PyTorch's caching allocator reserved, what libvpmm maps for the same allocations"
"$vpmm" replay --summary traces/training.pickle.gz traces/inference.pickle.gz
echo
echo "Your own job: python3 -m vpmm.estimate your_script.py ARGS  (after pip install .; see docs/python.md)"
