#!/usr/bin/env bash
# Build the libFuzzer targets of fuzz/ with clang (ASan + UBSan, UB aborts)
# into build-fuzz/ and run each for a bounded time on its seed corpus.
# Fails on any crash, leak, timeout or sanitizer report; prints the executions
# libFuzzer made per target.
#
#   scripts/fuzz.sh                 # every target, FUZZ_TIME seconds each (default 60)
#   scripts/fuzz.sh 20 fuzz_ops     # 20 s, one target
#   FUZZ_TIME=300 scripts/fuzz.sh   # longer local runs
#   scripts/fuzz.sh --build-only
#
# Targets: fuzz_ops (op sequences on a host pool), fuzz_api (hostile arguments
# to every exported function), fuzz_config (VPMM_* environment, config fields
# and, when tools/trace.hpp exists, the trace parser). Seeds: fuzz/corpus/<t>/
# (read only); inputs libFuzzer finds go to build-fuzz/corpus/<t>/, crashes to
# build-fuzz/artifacts/. To reproduce: build-fuzz/<t> build-fuzz/artifacts/<file>.
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD
BUILD=$ROOT/build-fuzz
ALL_TARGETS=(fuzz_ops fuzz_api fuzz_config)

build_only=0
if [[ "${1:-}" == "--build-only" ]]; then
  build_only=1
  shift
fi
TIME=${FUZZ_TIME:-60}
if [[ "${1:-}" =~ ^[0-9]+$ ]]; then
  TIME=$1
  shift
fi
TARGETS=("$@")
[[ ${#TARGETS[@]} -eq 0 ]] && TARGETS=("${ALL_TARGETS[@]}")

CC=${FUZZ_CC:-clang}
CXX=${FUZZ_CXX:-clang++}
command -v "$CXX" >/dev/null || { echo "fuzz.sh: $CXX not found (libFuzzer needs clang)" >&2; exit 2; }

SAN="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"

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

# 2. The targets.
CXXFLAGS="-std=c++17 -g -O1 -fsanitize=fuzzer $SAN -I$ROOT/include -I$ROOT/src -I$ROOT -I$ROOT/fuzz"
LIBS="$BUILD/libvpmm_objs.a -lpthread -ldl"
for t in "${TARGETS[@]}"; do
  extra=()
  if [[ $t == fuzz_config && -f tools/trace.hpp && -f tools/trace.cpp ]]; then
    extra=(-DVPMM_FUZZ_TRACE tools/trace.cpp)
  fi
  src=fuzz/$t.cpp
  out=$BUILD/$t
  if [[ ! -x $out || $src -nt $out || fuzz/fuzz_common.hpp -nt $out || $BUILD/libvpmm_objs.a -nt $out ||
        ( -f tools/trace.cpp && tools/trace.cpp -nt $out ) ]]; then
    echo "building $t"
    # shellcheck disable=SC2086
    $CXX $CXXFLAGS "${extra[@]}" "$src" $LIBS -o "$out"
  fi
done
[[ $build_only == 1 ]] && exit 0

# 3. Bounded runs. detect_leaks: per-input leak checks (LeakSanitizer).
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:symbolize=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
mkdir -p "$BUILD/artifacts"
failed=()
declare -A execs
for t in "${TARGETS[@]}"; do
  mkdir -p "$BUILD/corpus/$t"
  log=$BUILD/$t.log
  echo "== $t: ${TIME}s"
  set +e
  "$BUILD/$t" -max_total_time="$TIME" -timeout=20 -rss_limit_mb=4096 -max_len=4096 \
    -print_final_stats=1 -artifact_prefix="$BUILD/artifacts/$t-" \
    "$BUILD/corpus/$t" "fuzz/corpus/$t" >"$log" 2>&1
  rc=$?
  set -e
  n=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | tail -n 1 | grep -o '[0-9]*$' || true)
  execs[$t]=${n:-?}
  if [[ $rc -ne 0 ]]; then
    failed+=("$t")
    echo "$t FAILED (exit $rc); the end of $log:"
    tail -n 60 "$log"
  else
    echo "$t ok: ${execs[$t]} executions, $(grep -o 'cov: [0-9]*' "$log" | tail -n 1)"
  fi
done

echo
echo "fuzz summary (${TIME}s per target):"
for t in "${TARGETS[@]}"; do printf '  %-12s %s executions\n' "$t" "${execs[$t]}"; done
if [[ ${#failed[@]} -ne 0 ]]; then
  echo "FAILED: ${failed[*]} (artifacts in $BUILD/artifacts/)"
  exit 1
fi
echo "no crashes"
