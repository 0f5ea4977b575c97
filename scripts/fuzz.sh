#!/usr/bin/env bash
# Build the libFuzzer targets of fuzz/ with clang (ASan + UBSan, UB aborts)
# into build-fuzz/ and run each for a bounded time on its seed corpus; then
# run the model-based target (fuzz_ops) on random inputs, with the same
# sanitizers and in a release build (-O2, no sanitizer: faults that the
# instrumentation hides show there). Fails on any crash, leak, timeout or
# sanitizer report; prints the executions libFuzzer made per target and the
# operations fuzz_ops ran.
#
#   scripts/fuzz.sh                 # every target, sharing 3 x FUZZ_TIME seconds (default 60),
#                                   # then fuzz_ops on random inputs: FUZZ_TIME s sanitized, FUZZ_TIME/2 s release
#   scripts/fuzz.sh 20 fuzz_ops     # 20 s, one target (named targets get the time each; no random runs)
#   FUZZ_TIME=300 scripts/fuzz.sh   # longer local runs
#   scripts/fuzz.sh --build-only
#   scripts/fuzz.sh --random 600    # fuzz_ops on random inputs only, 600 s with ASan/UBSan
#   scripts/fuzz.sh --release 600   # the same in the release build (build-fuzz-release/), niced
#
# FUZZ_BUILD, FUZZ_RELEASE_BUILD: other build directories.
# FUZZ_SKIP=name,... (or all) makes fuzz_ops look past known defects while
# they are open (the names are in fuzz/fuzz_ops.cpp, kSkipNames).
# Random runs: input k of seed S is a function of (S, k); a crash prints both
# and leaves the input in <build>/artifacts/crash-S-k. To reproduce:
# <build>/fuzz_ops_random --seed S --iter k (or the file as argument).
#
# Targets: fuzz_ops (op sequences on a host pool, views taking other streams'
# pending frees, and the PyTorch hooks' record_stream and frees on the
# default pool with third streams held), fuzz_api (hostile arguments
# to every exported function), fuzz_config (VPMM_* environment, config fields
# and, when tools/trace.hpp exists, the trace parser), fuzz_snapshot (the
# pickle reader and PyTorch memory snapshots as traces, tools/pickle.hpp and
# tools/snapshot.hpp), fuzz_ipc (exports and imports under a hostile
# importer: mangled descriptors, file descriptor games, the exporter's frees,
# pauses and unread sends). Run all at once, the targets share the time three
# targets had before fuzz_snapshot came (3 x FUZZ_TIME), so a CI budget stays
# what it was. Seeds: fuzz/corpus/<t>/
# (read only); inputs libFuzzer finds go to build-fuzz/corpus/<t>/, crashes to
# build-fuzz/artifacts/. To reproduce: build-fuzz/<t> build-fuzz/artifacts/<file>.
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD
BUILD=${FUZZ_BUILD:-$ROOT/build-fuzz}
RBUILD=${FUZZ_RELEASE_BUILD:-$ROOT/build-fuzz-release}
ALL_TARGETS=(fuzz_ops fuzz_api fuzz_config fuzz_snapshot fuzz_ipc)

build_only=0
mode=libfuzzer
case "${1:-}" in
  --build-only) build_only=1; shift ;;
  --random) mode=random; shift ;;
  --release) mode=release; shift ;;
esac
TIME=${FUZZ_TIME:-60}
if [[ "${1:-}" =~ ^[0-9]+$ ]]; then
  TIME=$1
  shift
fi
TARGETS=("$@")
PER_TARGET=$TIME
random_after=0
if [[ ${#TARGETS[@]} -eq 0 ]]; then
  TARGETS=("${ALL_TARGETS[@]}")
  PER_TARGET=$(( TIME * 3 / ${#ALL_TARGETS[@]} ))
  (( PER_TARGET >= 1 )) || PER_TARGET=1
  random_after=1
fi

CC=${FUZZ_CC:-clang}
CXX=${FUZZ_CXX:-clang++}
SAN="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:symbolize=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:abort_on_error=1:print_stacktrace=1}

# fuzz_ops on random inputs (fuzz/standalone.cpp) for $2 seconds; $1 names
# the binary. Fresh seeds until the time is used; stops at the first crash.
OPS_TOTAL=0
run_random() {
  local bin=$1 secs=$2 label=$3 art=$4
  mkdir -p "$art"
  local end=$(( $(date +%s) + secs )) seed=${FUZZ_SEED:-$(date +%s)} log ops inputs rc=0
  log=$(dirname "$bin")/$(basename "$bin").log
  : >"$log"
  while (( $(date +%s) < end )); do
    local left=$(( end - $(date +%s) ))
    (( left >= 1 )) || break
    set +e
    (cd "$art" && nice -n 10 "$bin" --seconds "$left" --seed "$seed" --out "$art") >>"$log" 2>&1
    rc=$?
    set -e
    if [[ $rc -ne 0 ]]; then
      echo "$label FAILED (exit $rc); the end of $log:"
      tail -n 60 "$log"
      break
    fi
    seed=$(( seed + 1 ))
  done
  ops=$(grep -o 'fuzz_ops: [0-9]* operations' "$log" | awk '{s += $2} END {print s + 0}')
  inputs=$(grep -o 'over [0-9]* inputs' "$log" | awk '{s += $2} END {print s + 0}')
  OPS_TOTAL=$(( OPS_TOTAL + ops ))
  echo "$label: $ops operations over $inputs inputs in ${secs}s ($(( ops / (secs > 0 ? secs : 1) )) per second)"
  return $rc
}

build_release() {
  # The library as shipped (buildtype release) and fuzz_ops with a main of
  # its own: no sanitizer, no coverage instrumentation.
  if [[ ! -f $RBUILD/build.ninja ]]; then
    meson setup "$RBUILD" -Dbuildtype=release -Dtests=false -Dgpu_tests=disabled >/dev/null
  fi
  ninja -C "$RBUILD" libvpmm_objs.a >/dev/null
  local out=$RBUILD/fuzz_ops_random newer=0 dep
  for dep in fuzz/fuzz_ops.cpp fuzz/standalone.cpp fuzz/fuzz_common.hpp $RBUILD/libvpmm_objs.a; do
    [[ $dep -nt $out ]] && newer=1
  done
  if [[ ! -x $out || $newer == 1 ]]; then
    echo "building fuzz_ops_random (release)"
    ${RELEASE_CXX:-c++} -std=c++17 -O2 -g -I"$ROOT/include" -I"$RBUILD/include" -I"$ROOT/fuzz" \
      fuzz/fuzz_ops.cpp fuzz/standalone.cpp "$RBUILD/libvpmm_objs.a" -lpthread -ldl -o "$out"
  fi
}

if [[ $mode == release ]]; then
  build_release
  [[ $build_only == 1 ]] && exit 0
  echo "== fuzz_ops, random inputs, release build: ${TIME}s"
  run_random "$RBUILD/fuzz_ops_random" "$TIME" "fuzz_ops (release)" "$RBUILD/artifacts"
  exit $?
fi

command -v "$CXX" >/dev/null || { echo "fuzz.sh: $CXX not found (libFuzzer needs clang)" >&2; exit 2; }

# 1. The library objects, instrumented for coverage (fuzzer-no-link), via
#    meson so the source list is the project's own.
if [[ ! -f $BUILD/build.ninja ]]; then
  CC=$CC CXX=$CXX meson setup "$BUILD" \
    -Dbuildtype=debugoptimized -Db_lundef=false -Db_sanitize=address,undefined \
    -Dtests=false -Dgpu_tests=disabled \
    -Dc_args="-fsanitize=fuzzer-no-link -fno-sanitize-recover=undefined" \
    -Dcpp_args="-fsanitize=fuzzer-no-link -fno-sanitize-recover=undefined" >/dev/null
fi
ninja -C "$BUILD" libvpmm_objs.a >/dev/null

# 2. The targets, and fuzz_ops with a main of its own for random runs.
# $BUILD/include: the generated vpmm_version.h that vpmm.h includes.
CXXFLAGS="-std=c++17 -g -O1 $SAN -I$ROOT/include -I$BUILD/include -I$ROOT/src -I$ROOT -I$ROOT/fuzz"
LIBS="$BUILD/libvpmm_objs.a -lpthread -ldl"
build_targets=("${TARGETS[@]}")
[[ $mode == random || $random_after == 1 ]] && build_targets+=(fuzz_ops_random)
[[ $mode == random ]] && build_targets=(fuzz_ops_random)
for t in "${build_targets[@]}"; do
  extra=()
  main=(-fsanitize=fuzzer)
  src=fuzz/$t.cpp
  if [[ $t == fuzz_ops_random ]]; then
    src=fuzz/fuzz_ops.cpp
    main=(fuzz/standalone.cpp)
  fi
  if [[ $t == fuzz_config && -f tools/trace.hpp && -f tools/trace.cpp ]]; then
    extra=(-DVPMM_FUZZ_TRACE tools/trace.cpp)
  fi
  # Built without zlib: the target covers the reader, not zlib.
  [[ $t == fuzz_snapshot ]] && extra=(tools/pickle.cpp tools/snapshot.cpp tools/trace.cpp)
  out=$BUILD/$t
  newer=0
  for dep in $src fuzz/fuzz_common.hpp fuzz/standalone.cpp $BUILD/libvpmm_objs.a tools/trace.cpp tools/trace.hpp \
             tools/pickle.cpp tools/pickle.hpp tools/snapshot.cpp tools/snapshot.hpp; do
    [[ -f $dep && $dep -nt $out ]] && newer=1
  done
  if [[ ! -x $out || $newer == 1 ]]; then
    echo "building $t"
    # shellcheck disable=SC2086
    $CXX $CXXFLAGS "${main[@]}" "${extra[@]}" "$src" $LIBS -o "$out"
  fi
done
[[ $build_only == 1 ]] && exit 0

if [[ $mode == random ]]; then
  echo "== fuzz_ops, random inputs, ASan/UBSan: ${TIME}s"
  run_random "$BUILD/fuzz_ops_random" "$TIME" "fuzz_ops (ASan/UBSan)" "$BUILD/artifacts"
  exit $?
fi

# 3. Bounded runs. detect_leaks: per-input leak checks (LeakSanitizer).
# -len_control=0: long inputs from the start (fuzz_ops runs up to 256
# operations per input; short ones spend their time creating pools).
mkdir -p "$BUILD/artifacts"
failed=()
declare -A execs
for t in "${TARGETS[@]}"; do
  mkdir -p "$BUILD/corpus/$t"
  log=$BUILD/$t.log
  echo "== $t: ${PER_TARGET}s"
  # The snapshot reader must stay bounded on hostile input: a slow unit or
  # one big allocation is a finding there (timeout-*/oom-* artifacts), not
  # only a crash.
  limits=(-timeout=20 -rss_limit_mb=4096)
  [[ $t == fuzz_snapshot ]] && limits=(-timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=512 -report_slow_units=2)
  set +e
  "$BUILD/$t" -max_total_time="$PER_TARGET" "${limits[@]}" -max_len=4096 -len_control=0 \
    -print_final_stats=1 -artifact_prefix="$BUILD/artifacts/$t-" \
    "$BUILD/corpus/$t" "fuzz/corpus/$t" >"$log" 2>&1
  rc=$?
  set -e
  n=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | tail -n 1 | grep -o '[0-9]*$' || true)
  execs[$t]=${n:-?}
  ops=$(grep -o 'fuzz_ops: [0-9]* operations' "$log" | tail -n 1 | awk '{print $2}' || true)
  [[ -n $ops ]] && { execs[$t]="${execs[$t]} executions, $ops operations"; OPS_TOTAL=$(( OPS_TOTAL + ops )); } \
                || execs[$t]="${execs[$t]} executions"
  if [[ $rc -ne 0 ]]; then
    failed+=("$t")
    echo "$t FAILED (exit $rc); the end of $log:"
    tail -n 60 "$log"
  else
    echo "$t ok: ${execs[$t]}, $(grep -o 'cov: [0-9]*' "$log" | tail -n 1)"
  fi
done

# 4. fuzz_ops on random inputs: long sequences at several thousand operations
# a second under the sanitizers, then in the release build.
if [[ $random_after == 1 ]]; then
  echo "== fuzz_ops, random inputs, ASan/UBSan: ${TIME}s"
  run_random "$BUILD/fuzz_ops_random" "$TIME" "fuzz_ops (ASan/UBSan)" "$BUILD/artifacts" || failed+=(fuzz_ops_random)
  rel=$(( TIME / 2 ))
  if (( rel >= 1 )); then
    echo "== fuzz_ops, random inputs, release build: ${rel}s"
    build_release
    run_random "$RBUILD/fuzz_ops_random" "$rel" "fuzz_ops (release)" "$RBUILD/artifacts" || failed+=(fuzz_ops_release)
  fi
fi

echo
echo "fuzz summary (${PER_TARGET}s per target):"
for t in "${TARGETS[@]}"; do printf '  %-14s %s\n' "$t" "${execs[$t]}"; done
echo "  fuzz_ops operations in all: $OPS_TOTAL"
if [[ ${#failed[@]} -ne 0 ]]; then
  echo "FAILED: ${failed[*]} (artifacts in $BUILD/artifacts/, $RBUILD/artifacts/)"
  exit 1
fi
echo "no crashes"
