#!/usr/bin/env bash
# Replays every trace and snapshot through `vpmm replay` under its reporting
# options and several pool policies, writing each output to a file of OUT_DIR,
# so that two builds can be compared byte for byte: a restructuring that
# claims "no behaviour change" must leave every file identical.
#
# Usage:
#   scripts/replay-outputs.sh [-b BUILD_DIR] OUT_DIR [EXTRA_TRACE...]
#   scripts/replay-outputs.sh --compare DIR_BEFORE DIR_AFTER
#
# BUILD_DIR (default: build) is built first (ninja vpmm). The traces are
# traces/*.trace and traces/*.pickle.gz, plus any EXTRA_TRACE given (held-out
# snapshots, for instance). For each trace it writes:
#   NAME.full       the report (peaks, steady-state remapping, driver calls),
#                   --check after every op, --dump at the end, --log-remaps
#   NAME.summary    --summary (the peaks table)
#   NAME.release    --release-all (what stays mapped after freeing everything)
#   NAME.timeline   --timeline CSV (stats after every op)
#   NAME.remap      views off (VPMM_VIEW_MIN_SIZE=off: pages move), --log-remaps --dump
#   NAME.views      views from 16 MiB (VPMM_VIEW_MIN_SIZE=16M), --log-remaps --dump
#   NAME.exact      page-exact (VPMM_REMAP_SLACK=exact), --log-remaps --dump
#   NAME.policies   --policy views,remap,exact (the placement table)
#   NAME.pagehandles, NAME.unlimited   --max-handle-size 1p / unlimited, --dump
#   NAME.wholepages --large-rounding 1p, --dump
#   NAME.rc         the exit status of each run
# Times measured by the replay (its own duration, the backend's driver time,
# the snapshot's read time) change from run to run: they are masked as
# "<T> ms" so that only the allocator's behaviour is compared.
#
# --compare prints every file that differs (diff -u, first lines) and exits 1
# if any does.
set -uo pipefail
cd "$(dirname "$0")/.."

if [ "${1:-}" = "--compare" ]; then
  [ $# -eq 3 ] || { echo "usage: $0 --compare DIR_BEFORE DIR_AFTER" >&2; exit 2; }
  status=0
  n=0
  for f in "$2"/*; do
    n=$((n + 1))
    g="$3/$(basename "$f")"
    if [ ! -f "$g" ]; then
      echo "missing in $3: $(basename "$f")"
      status=1
    elif ! cmp -s "$f" "$g"; then
      echo "differs: $(basename "$f")"
      diff -u "$f" "$g" | head -20
      status=1
    fi
  done
  for g in "$3"/*; do
    [ -f "$2/$(basename "$g")" ] || { echo "missing in $2: $(basename "$g")"; status=1; }
  done
  [ $status -eq 0 ] && echo "replay-outputs: $n files identical"
  exit $status
fi

build=build
if [ "${1:-}" = "-b" ]; then
  build=$2
  shift 2
fi
[ $# -ge 1 ] || { echo "usage: $0 [-b BUILD_DIR] OUT_DIR [EXTRA_TRACE...]" >&2; exit 2; }
out=$1
shift
ninja -C "$build" tools/vpmm >/dev/null || { echo "build failed" >&2; exit 1; }
vpmm="$build/tools/vpmm"
mkdir -p "$out"

# The replay's own timings, masked.
mask() {
  sed -E -e 's/[0-9]+(\.[0-9]+)? ms/<T> ms/g' -e 's/[0-9]+(\.[0-9]+)? us/<T> us/g'
}

# run NAME SUFFIX [ENV=VALUE...] -- ARGS...
run() {
  local name=$1 suffix=$2
  shift 2
  local envs=()
  while [ "$1" != "--" ]; do
    envs+=("$1")
    shift
  done
  shift
  env "${envs[@]}" "$vpmm" replay --backend host "$@" 2>&1 | mask > "$out/$name.$suffix"
  echo "$suffix ${PIPESTATUS[0]}" >> "$out/$name.rc"
}

traces=(traces/*.trace traces/*.pickle.gz "$@")
for t in "${traces[@]}"; do
  name=$(basename "$t")
  name=${name%.gz}
  rm -f "$out/$name.rc"
  run "$name" full -- --check --dump --log-remaps "$t"
  run "$name" summary -- --summary "$t"
  run "$name" release -- --release-all "$t"
  run "$name" timeline -- --quiet --timeline "$out/$name.timeline.csv" "$t"
  run "$name" remap VPMM_VIEW_MIN_SIZE=off -- --log-remaps --dump "$t"
  run "$name" views VPMM_VIEW_MIN_SIZE=16M -- --log-remaps --dump "$t"
  run "$name" exact VPMM_REMAP_SLACK=exact -- --log-remaps --dump "$t"
  run "$name" policies -- --summary --policy views,remap,exact "$t"
  run "$name" pagehandles -- --max-handle-size 1p --dump "$t"
  run "$name" unlimited -- --max-handle-size unlimited --dump "$t"
  run "$name" wholepages -- --large-rounding 1p --dump "$t"
  echo "replayed $t"
done
