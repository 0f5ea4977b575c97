#!/usr/bin/env bash
# Builds libvpmm and runs the whole test suite: the unit suite on the host
# backend and, where a GPU is usable, the GPU suite (which otherwise reports
# every GPU test as SKIPPED with its reason: never as passed).
# Shows the build as it goes (ninja's [n/N] lines), each test as it finishes,
# then every test that did not pass with the reason it gave, and ends with
# one line: "test.sh: N passed, N failed, N skipped" and why GPU tests skipped.
set -euo pipefail
cd "$(dirname "$0")/.."
# Everything the whole suite builds against, from Debian (only what is
# missing): bindgen and rustc for 'bindgen' and 'rust_bindgen_current'
# (with libclang-dev, which bindgen loads, and rustfmt, whose formatting the
# checks read: a fresh Debian 12 has neither, and both tests failed there),
# cargo for 'rust_binding', golang-go for 'go_binding', libamdhip64-dev for
# the HIP backend (compiled against ROCm's real headers; 'hip_no_gpu' runs
# the real runtime without a GPU), python3-numpy for 'jax_dlpack_cpu' where
# the tests' python3 is Debian's, python3-pip for 'python_pip_install' where
# that Python's venv has no pip of its own (deps.sh always installs
# python3-mesonpy and python3-venv, which it needs too). Without them those
# tests report SKIP.
scripts/deps.sh bindgen libclang-dev rustfmt golang-go libamdhip64-dev python3-numpy python3-pip
command -v cargo >/dev/null 2>&1 || scripts/deps.sh cargo rustc
command -v rustc >/dev/null 2>&1 || scripts/deps.sh rustc
BUILD=${BUILD:-build}
if [ ! -f "$BUILD/build.ninja" ]; then
  echo "== configuring $BUILD (meson setup)"
  meson setup "$BUILD" | grep -E "^(Project|Build type|C\+\+ compiler|Run-time dependency|Message|WARNING)" || true
fi
echo "== building (ninja -C $BUILD; several minutes on two cores from a fresh tree)"
ninja -C "$BUILD"
echo "== testing (meson test; GPU tests skip without a GPU)"
status=0
meson test -C "$BUILD" --print-errorlogs --num-processes 2 || status=$?
python3 - "$BUILD/meson-logs/testlog.json" <<'PY'
import json, sys
counts = {"OK": 0, "FAIL": 0, "SKIP": 0}
skip_reasons = {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    res = r.get("result", "")
    key = "OK" if res in ("OK", "EXPECTEDFAIL") else "SKIP" if res == "SKIP" else "FAIL"
    counts[key] += 1
    if key == "OK":
        continue
    # A skipping test says why on a line of its own ("SKIP: no CUDA device ...").
    out = (r.get("stdout") or "").splitlines()
    reason = next((l.strip() for l in out if l.startswith("SKIP")), out[-1].strip() if out else "")
    print(f"  {res:8} {r.get('name')}: {reason}")
    if key == "SKIP":
        skip_reasons[reason] = skip_reasons.get(reason, 0) + 1
why = ""
if skip_reasons:
    top = max(skip_reasons, key=skip_reasons.get)
    why = f" ({skip_reasons[top]} skipped because {top.removeprefix('SKIP:').strip()})"
print(f"test.sh: {counts['OK']} passed, {counts['FAIL']} failed, {counts['SKIP']} skipped{why}")
PY
exit $status
