#!/usr/bin/env bash
# The main job: builds libvpmm and the `vpmm` command (nothing else: no test
# suites, no GPU tests), replays the shipped allocation traces on the default
# backend (CUDA when a GPU is usable, else the host backend), then replays
# the shipped PyTorch memory snapshots and ends with what libvpmm would map
# against what PyTorch reserved for the same allocations.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
# A directory of its own, configured without the test suites and GPU tests
# and optimised without debug info (a third less compile time than the
# debugoptimized default that scripts/test.sh builds in build/).
BUILD=${BUILD:-build-demo}
if [ ! -f "$BUILD/build.ninja" ]; then
  echo "== configuring $BUILD (meson setup -Dtests=false -Dgpu_tests=disabled -Dbuildtype=release)"
  meson setup "$BUILD" -Dtests=false -Dgpu_tests=disabled -Dbuildtype=release >/dev/null
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
