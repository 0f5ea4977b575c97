#!/usr/bin/env bash
# The placement policies side by side on every trace: each shipped trace and
# snapshot (traces/*.trace, traces/*.pickle.gz) and every extra file or
# directory of snapshots given, replayed on the host backend under each
# placement chain of `vpmm replay --policy` (default, with the driver
# budget; exact, pages move; views, the default before the budget). One
# row per trace and chain: peak mapped / peak requested, bytes remapped in
# the trace's second half per peak requested, its modelled driver share,
# and the second half's driver
# calls (malloc and free), handles created and mallocs served by a view
# (with no driver call). docs/handles.md ("Placement that learns the loop")
# quotes this table; the targets are peak <= 1.015 and second-half remapping
# <= 1% on training loops.
#
#   scripts/placement-table.sh [-b BUILD] [-p POLICIES] [EXTRA_SNAPSHOT_OR_DIR...]
#
# BUILD (default build) is built first (ninja tools/vpmm). POLICIES is a
# comma-separated list (default views,remap,exact). The backend is the host
# one unless VPMM_TABLE_BACKEND says otherwise (cuda: the same decisions on
# the GPU's driver, with its driver time). Exit status 1 if a replay failed.
set -uo pipefail
cd "$(dirname "$0")/.."
build=build
policies=default,exact,views
while [ $# -gt 0 ]; do
  case "$1" in
    -b) build=$2; shift 2 ;;
    -p) policies=$2; shift 2 ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) break ;;
  esac
done
backend=${VPMM_TABLE_BACKEND:-host}
if [ -f "$build/build.ninja" ]; then
  ninja -C "$build" tools/vpmm >/dev/null || { echo "placement-table: build failed" >&2; exit 1; }
fi
vpmm="$build/tools/vpmm"
[ -x "$vpmm" ] || { echo "placement-table: no $vpmm" >&2; exit 1; }

files=()
for f in traces/*.pickle.gz traces/*.trace; do files+=("$f"); done
for x in "$@"; do
  if [ -d "$x" ]; then
    for f in "$x"/*.pickle.gz "$x"/*.pickle "$x"/*.trace; do [ -f "$f" ] && files+=("$f"); done
  else
    files+=("$x")
  fi
done

printf '%-26s %-7s %9s %11s %10s %10s %9s %12s\n' trace policy peak/req 2nd-remap 2nd-share 2nd-calls 2nd-hdls 2nd-views
status=0
for f in "${files[@]}"; do
  out=$("$vpmm" replay --backend "$backend" --summary --policy "$policies" "$f" 2>&1)
  [ $? -eq 0 ] || status=1
  # The comparison --policy prints after the runs.
  rows=$(printf '%s\n' "$out" | awk '/: placement policies$/ {t = 1; next} t && /^    [a-z]/ && !/^    policy/ {print}')
  if [ -z "$rows" ]; then
    printf '%-26s %s\n' "$(basename "$f")" "replay failed: $(printf '%s\n' "$out" | grep -m1 'vpmm replay')"
    status=1
    continue
  fi
  printf '%s\n' "$rows" | while read -r pol ratio rem share calls hdls views rest; do
    printf '%-26s %-7s %9s %11s %10s %10s %9s %12s\n' "$(basename "$f")" "$pol" "$ratio" "$rem" "$share" "$calls" "$hdls" "$views $rest"
  done
done
exit $status
