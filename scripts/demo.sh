#!/usr/bin/env bash
# The main job: builds libvpmm and replays the shipped allocation traces on
# the default backend (CUDA when a GPU is usable, else the host backend),
# printing stats and fragmentation figures for each.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
BUILD=${BUILD:-build}
[ -f "$BUILD/build.ninja" ] || meson setup "$BUILD" >/dev/null
ninja -C "$BUILD" >/dev/null
"$BUILD/tools/vpmm" info
for t in traces/training.trace traces/multistream.trace; do
  "$BUILD/tools/vpmm" replay --check "$t"
done
"$BUILD/tools/vpmm" replay --page-size 64K --va-size 4M --pages 15 --dump traces/walkthrough_c.trace
