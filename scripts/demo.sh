#!/usr/bin/env bash
# The main job: builds libvpmm and the `vpmm` command (nothing else: no test
# suites, no GPU tests), replays the shipped allocation traces on the default
# backend (CUDA when a GPU is usable, else the host backend), then replays
# the shipped PyTorch memory snapshots and ends with what libvpmm would map
# against what PyTorch reserved for the same allocations.
set -euo pipefail
cd "$(dirname "$0")/.."
# meson, ninja, g++, zlib, and python3-mesonpy + python3-venv for the
# `pip install .` the last line suggests (scripts/deps.sh's list).
scripts/deps.sh
# A directory of its own, configured for a fast first build: no test suites
# or GPU tests, no debug info, precompiled standard headers (src/pch/) and
# -O1. CPU seconds of `ninja tools/vpmm` from an empty build directory, ccache
# off, on two loaded cores (one run each, load 8-13): -O1 with precompiled
# headers 37.4 s, without them 51.6 s, -O0 with them 36.2 s but the demo's
# replays then take 8.7 s instead of 1.9 s. A unity build (-Dunity=on) does
# not compile: translation units share file-local names.
# A library for real work is built with `pip install .` or the meson lines
# of docs/building.md, optimised (-O3 / -O2).
BUILD=${BUILD:-build-demo}
DEMO_SETUP=(-Dtests=false -Dgpu_tests=disabled -Doptimization=1 -Ddebug=false -Db_ndebug=true -Db_pch=true)
# Without a GPU device (NVIDIA's /dev/nvidiactl, AMD's /dev/kfd) every replay
# runs on the host backend: the CUDA and HIP backends, which are built where
# their headers happen to be installed, are left out: 64 translation units
# instead of 69, 3.6% of the compile time in ninja's log of a -O1 build (too
# little to see in CPU seconds measured at load 12-17).
# A machine that gets a GPU later: rm -rf build-demo.
if [ ! -e /dev/nvidiactl ] && [ ! -e /dev/kfd ]; then
  DEMO_SETUP+=(-Dcuda=disabled -Dhip=disabled)
fi
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
echo "Your own PyTorch job: pip install . with the Python that has torch, then"
echo "  python3 -m vpmm.estimate your_script.py ARGS    (docs/python.md)"
echo "Debian's python3: python3 -m venv --system-site-packages ~/venv && ~/venv/bin/pip install ."
