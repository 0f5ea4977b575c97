#!/usr/bin/env bash
# Builds libvpmm and runs the whole test suite: the unit suite on the host
# backend and, where a GPU is usable, the GPU suite (which otherwise reports
# every GPU test as SKIPPED with a visible reason: never as passed).
# Ends with one "N passed, N failed, N skipped" line.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
BUILD=${BUILD:-build}
[ -f "$BUILD/build.ninja" ] || meson setup "$BUILD" >/dev/null
ninja -C "$BUILD"
status=0
meson test -C "$BUILD" --print-errorlogs --num-processes 2 || status=$?
python3 - "$BUILD/meson-logs/testlog.json" <<'PY'
import json, sys
counts = {"OK": 0, "FAIL": 0, "SKIP": 0}
for line in open(sys.argv[1]):
    r = json.loads(line)
    res = r.get("result", "")
    key = "OK" if res in ("OK", "EXPECTEDFAIL") else "SKIP" if res == "SKIP" else "FAIL"
    counts[key] += 1
    if key != "OK":
        print(f"  {res:8} {r.get('name')}")
print(f"{counts['OK']} passed, {counts['FAIL']} failed, {counts['SKIP']} skipped")
PY
exit $status
