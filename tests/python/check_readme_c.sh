#!/usr/bin/env bash
# The README's "C API in a dozen lines" block, compiled and run exactly as
# written (host backend, default capacity): it must build with no warning
# about undeclared names and run without printing an error.
# Usage: check_readme_c.sh BUILD_DIR SOURCE_DIR CC [CC ARGS...]
set -euo pipefail
build=$(cd "$1" && pwd)
src=$2
shift 2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
awk '/^## The C API/ {inside = 1} inside && /^```c$/ {code = 1; next} code && /^```$/ {exit} code {print}' \
  "$src/README.md" > "$work/readme.c"
[ -s "$work/readme.c" ] || { echo "FAIL: no C block under '## The C API' in README.md"; exit 1; }
"$@" -std=c99 -Wall -Werror -o "$work/readme" "$work/readme.c" -I"$src/include" -I"$build/include" \
  -L"$build" -lvpmm -Wl,-rpath,"$build" 2> "$work/cc.err" || { cat "$work/readme.c" "$work/cc.err"; exit 1; }
VPMM_BACKEND=host "$work/readme" > "$work/out" 2> "$work/err" || { cat "$work/out" "$work/err"; echo "FAIL: exit $?"; exit 1; }
[ ! -s "$work/err" ] || { cat "$work/err"; echo "FAIL: the README's program printed an error"; exit 1; }
cat "$work/out"
echo "PASS"
