#!/usr/bin/env bash
# The main job: builds libvpmm and replays the shipped allocation traces on
# the default backend (CUDA when a GPU is usable, else the host backend),
# printing stats and fragmentation figures for each.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
BUILD=${BUILD:-build}
[ -f "$BUILD/build.ninja" ] || { echo "== configuring $BUILD"; meson setup "$BUILD" >/dev/null; }
echo "== building (ninja -C $BUILD; about a minute on a fresh tree)"
ninja -C "$BUILD"
"$BUILD/tools/vpmm" info
for t in traces/training.trace traces/multistream.trace; do
  "$BUILD/tools/vpmm" replay --check "$t"
done
# The walkthrough trace's `# replay:` line sets its pool shape (64 KiB pages).
"$BUILD/tools/vpmm" replay --dump traces/walkthrough_c.trace
