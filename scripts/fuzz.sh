#!/usr/bin/env bash
# Build the libFuzzer targets of fuzz/ with clang (ASan + UBSan, UB aborts)
# into build-fuzz/ and run each for a bounded time on its seed corpus.
# Fails on any crash, leak, timeout or sanitizer report; prints the executions
# libFuzzer made per target.
#
#   scripts/fuzz.sh                 # every target, sharing 3 x FUZZ_TIME seconds (default 60)
#   scripts/fuzz.sh 20 fuzz_ops     # 20 s, one target (named targets get the time each)
#   FUZZ_TIME=300 scripts/fuzz.sh   # longer local runs
#   scripts/fuzz.sh --build-only
#
# Targets: fuzz_ops (op sequences on a host pool), fuzz_api (hostile arguments
# to every exported function), fuzz_config (VPMM_* environment, config fields
# and, when tools/trace.hpp exists, the trace parser), fuzz_snapshot (the
# pickle reader and PyTorch memory snapshots as traces, tools/pickle.hpp and
# tools/snapshot.hpp). Run all at once, the targets share the time three
# targets had before fuzz_snapshot came (3 x FUZZ_TIME), so a CI budget stays
# what it was. Seeds: fuzz/corpus/<t>/
# (read only); inputs libFuzzer finds go to build-fuzz/corpus/<t>/, crashes to
# build-fuzz/artifacts/. To reproduce: build-fuzz/<t> build-fuzz/artifacts/<file>.
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD
BUILD=$ROOT/build-fuzz
ALL_TARGETS=(fuzz_ops fuzz_api fuzz_config fuzz_snapshot)

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
PER_TARGET=$TIME
if [[ ${#TARGETS[@]} -eq 0 ]]; then
  TARGETS=("${ALL_TARGETS[@]}")
  PER_TARGET=$(( TIME * 3 / ${#ALL_TARGETS[@]} ))
  (( PER_TARGET >= 1 )) || PER_TARGET=1
fi

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
# $BUILD/include: the generated vpmm_version.h that vpmm.h includes.
CXXFLAGS="-std=c++17 -g -O1 -fsanitize=fuzzer $SAN -I$ROOT/include -I$BUILD/include -I$ROOT/src -I$ROOT -I$ROOT/fuzz"
LIBS="$BUILD/libvpmm_objs.a -lpthread -ldl"
for t in "${TARGETS[@]}"; do
  extra=()
  if [[ $t == fuzz_config && -f tools/trace.hpp && -f tools/trace.cpp ]]; then
    extra=(-DVPMM_FUZZ_TRACE tools/trace.cpp)
  fi
  # Built without zlib: the target covers the reader, not zlib.
  [[ $t == fuzz_snapshot ]] && extra=(tools/pickle.cpp tools/snapshot.cpp tools/trace.cpp)
  src=fuzz/$t.cpp
  out=$BUILD/$t
  newer=0
  for dep in $src fuzz/fuzz_common.hpp $BUILD/libvpmm_objs.a tools/trace.cpp tools/trace.hpp \
             tools/pickle.cpp tools/pickle.hpp tools/snapshot.cpp tools/snapshot.hpp; do
    [[ -f $dep && $dep -nt $out ]] && newer=1
  done
  if [[ ! -x $out || $newer == 1 ]]; then
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
  echo "== $t: ${PER_TARGET}s"
  set +e
  "$BUILD/$t" -max_total_time="$PER_TARGET" -timeout=20 -rss_limit_mb=4096 -max_len=4096 \
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
echo "fuzz summary (${PER_TARGET}s per target):"
for t in "${TARGETS[@]}"; do printf '  %-14s %s executions\n' "$t" "${execs[$t]}"; done
if [[ ${#failed[@]} -ne 0 ]]; then
  echo "FAILED: ${failed[*]} (artifacts in $BUILD/artifacts/)"
  exit 1
fi
echo "no crashes"
