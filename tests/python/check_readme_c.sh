#!/usr/bin/env bash
# The README's C block (the one marked ```c tested), compiled and run exactly as
# written (host backend, default capacity): it must build with no warning
# under -Wall -Wextra and run without printing an error; and where pool
# creation fails (a malformed VPMM_* variable) it must say why and exit
# with a failure status, never crash on the pool it did not get.
# Usage: check_readme_c.sh BUILD_DIR SOURCE_DIR CC [CC ARGS...]
set -euo pipefail
build=$(cd "$1" && pwd)
src=$2
shift 2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
awk '/^```c tested$/ {code = 1; next} code && /^```$/ {exit} code {print}' "$src/README.md" > "$work/readme.c"
[ -s "$work/readme.c" ] || { echo "FAIL: no \`\`\`c tested block in README.md"; exit 1; }
"$@" -std=c99 -Wall -Wextra -Werror -o "$work/readme" "$work/readme.c" -I"$src/include" -I"$build/include" \
  -L"$build" -lvpmm -Wl,-rpath,"$build" 2> "$work/cc.err" || { cat "$work/readme.c" "$work/cc.err"; exit 1; }
VPMM_BACKEND=host "$work/readme" > "$work/out" 2> "$work/err" || { cat "$work/out" "$work/err"; echo "FAIL: exit $?"; exit 1; }
[ ! -s "$work/err" ] || { cat "$work/err"; echo "FAIL: the README's program printed an error"; exit 1; }
cat "$work/out"
# A pool that cannot be made: the program prints the library's message
# naming the variable (or its field) and exits 1 (a crash exits
# 128+signal). Each case is VARIABLE=VALUE:WHAT_THE_MESSAGE_NAMES.
for case in VPMM_PAGE_SIZE=abc:VPMM_PAGE_SIZE VPMM_VA_SIZE=1K:va_size; do
  bad=${case%%:*}
  rc=0
  env VPMM_BACKEND=host "$bad" "$work/readme" > "$work/out" 2> "$work/err" || rc=$?
  if [ "$rc" -ne 1 ] || ! grep -q "${case##*:}" "$work/err"; then
    cat "$work/out" "$work/err"
    echo "FAIL: with $bad the README's program exited $rc instead of printing why pool creation failed"
    exit 1
  fi
  echo "$bad: $(head -c 200 "$work/err")"
done
echo "PASS"
