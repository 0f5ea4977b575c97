#!/usr/bin/env bash
# What a newcomer meets at the `vpmm` command, checked: the auto backend's
# fallback is said at VPMM_LOG=info and `vpmm info` says why each GPU backend
# was not used; an empty trace, a directory and a binary file given as a
# trace fail with a message (exit 1, no raw bytes on the terminal); `vpmm
# plot --trace` takes the trace's path; a snapshot replay prints the peaks
# table and its timeline the PyTorch reserved column that plot draws.
# Usage: check_cli.sh VPMM_TOOL SOURCE_DIR
set -euo pipefail
vpmm=$1
src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
export VPMM_BACKEND=auto
unset VPMM_LOG

# -- auto fallback ------------------------------------------------------------
"$vpmm" info > "$work/info.out" 2> "$work/info.err" || fail "vpmm info: $(cat "$work/info.err")"
picked=$(sed -n 's/^backend: \([a-z]*\) .*/\1/p' "$work/info.out")
echo "auto picks: $picked"
if [ "$picked" = host ]; then
  grep -Eq "^  cuda (not used: VPMM_ERR_|usable)" "$work/info.out" || fail "vpmm info has no cuda line: $(cat "$work/info.out")"
  VPMM_LOG=info "$vpmm" info > /dev/null 2> "$work/log.err"
  # The GPU backends it tried and why each is not usable: CUDA where it was
  # built, HIP where the runtime is installed (a fresh Debian machine that
  # test.sh provisioned has libamdhip64 and no CUDA headers: HIP only).
  grep -Eq "vpmm: info: backend auto: (cuda|hip) is not usable: " "$work/log.err" ||
    fail "no fallback at info: $(cat "$work/log.err")"
  grep -q "vpmm: info: backend auto: using host" "$work/log.err" || fail "no 'using host' at info"
  VPMM_LOG=warn "$vpmm" info > /dev/null 2> "$work/warn.err"
  ! grep -q "backend auto" "$work/warn.err" || fail "the fallback is printed at warn"
fi

# -- bad traces -------------------------------------------------------------
expect_fail() {  # NAME PATTERN ARGS...
  local name=$1 pat=$2
  shift 2
  set +e
  "$vpmm" "$@" > "$work/out" 2> "$work/err"
  local rc=$?
  set -e
  [ $rc = 1 ] || fail "$name: exit $rc, want 1 ($(cat "$work/out" "$work/err"))"
  grep -q -- "$pat" "$work/err" || fail "$name: stderr lacks '$pat': $(cat "$work/err")"
  # Nothing but printable ASCII, tab and newline on either stream.
  if LC_ALL=C grep -q '[^[:print:][:space:]]' "$work/out" "$work/err"; then fail "$name: raw bytes written"; fi
  echo "ok   $name: $(head -c 160 "$work/err" | head -n1)"
}
: > "$work/empty.trace"
expect_fail "empty trace" "no allocation in the trace" replay --backend host "$work/empty.trace"
printf '# only a comment\n' > "$work/comment.trace"
expect_fail "comment-only trace" "no allocation in the trace" replay --backend host "$work/comment.trace"
mkdir "$work/dir.trace"
expect_fail "directory" "is a directory" replay --backend host "$work/dir.trace"
head -c 4096 "$vpmm" > "$work/binary.trace"
expect_fail "binary file" "binary data, not a trace" replay --backend host "$work/binary.trace"
printf 'malloc a 1M\n\x01\x02\xff\xfe garbage\n' > "$work/bytes.trace"
expect_fail "control bytes" "vpmm replay" replay --backend host "$work/bytes.trace"

# -- snapshot table, timeline and plot ----------------------------------------
snap="$src/traces/training.pickle.gz"
"$vpmm" replay --backend host --summary --timeline "$work/tl.csv" "$snap" "$src/traces/growth.trace" > "$work/sum.out"
grep -q "PyTorch reserved  *9.2 GiB   1.000x" "$work/sum.out" || fail "no PyTorch row: $(cat "$work/sum.out")"
grep -q "libvpmm would map .* less than PyTorch reserved at its peak" "$work/sum.out" || fail "no saving line"
head -n1 "$work/tl.csv" | grep -q ",pytorch_reserved_bytes$" || fail "timeline header: $(head -n1 "$work/tl.csv")"
"$vpmm" plot "$work/tl.csv" -o "$work/t.svg" --trace "$snap" 2> "$work/plot.err" || fail "plot --trace PATH: $(cat "$work/plot.err")"
grep -q "PyTorch reserved (peak 9.2 GiB)" "$work/t.svg" || fail "no PyTorch line in the plot"
"$vpmm" plot "$work/tl.csv" -o "$work/g.svg" --trace growth
! grep -q "PyTorch reserved" "$work/g.svg" || fail "a text trace got a PyTorch line"
expect_fail "plot unknown trace" "its traces: training, growth" plot "$work/tl.csv" -o "$work/x.svg" --trace nope
echo "PASS"
