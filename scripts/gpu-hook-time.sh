#!/usr/bin/env bash
# GPU machine: the time inside libvpmm's PyTorch hooks during the hard
# client's real steps (bench/torch/alloc_call_cost.py's vpmm-timed, through
# bench/torch/timed_hooks.c), this tree's library against a base tree's, the
# two alternating for ROUNDS rounds (default 3). The base is BASE_TGZ, a
# `git archive --format=tar.gz` of the other tree; without it only this
# tree's library runs. Builds both libraries (this tree's into
# build-gpu-placement, where scripts/gpu-placement.sh finds it again) and
# prints BASE_LIBRARY=... for a following gpu-placement.sh's vpmm-base.
#   DEADLINE=300 BASE_TGZ=base-src.tgz scripts/gpu-hook-time.sh
# Logs under $OUT (default ./gpu-hook-time-out): build.log, hooks.log.
set -u
START=$(date +%s)
DEADLINE=${DEADLINE:-300}
OUT=${OUT:-$PWD/gpu-hook-time-out}
ROUNDS=${ROUNDS:-3}
BUILD=${BUILD:-build-gpu-placement}
BASE_DIR=${BASE_DIR:-$PWD/build-base-tree}  # the base tree, unpacked and built
BOX_RESERVE=15
. "$(dirname "$0")/gpu-common.sh"

NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
CUDA_HOME=${CUDA_HOME:-$(dirname "$(dirname "$NVCC")")}
export PATH="$CUDA_HOME/bin:$PATH"
# build_lib SRC_DIR BUILD_DIR: the CUDA-enabled library, its path on stdout.
build_lib() {
  local src=$1 dir=$2 target
  [ -f "$dir/build.ninja" ] || (cd "$src" && meson setup "$dir" -Dgpu_tests=disabled -Dcuda=enabled \
    -Dcuda-include-dir="$CUDA_HOME/include") >> "$OUT/build.log" 2>&1 || return 1
  target=$(ninja -C "$dir" -t targets all 2>/dev/null | sed -n 's/^\(libvpmm\.so\.[0-9.]*[0-9]\): cpp_LINKER$/\1/p' | head -1)
  ninja -C "$dir" -j "$JOBS" "${target:-libvpmm.so}" >> "$OUT/build.log" 2>&1 || return 1
  echo "$dir/${target:-libvpmm.so}"
}
LIB=$(build_lib "$PWD" "$PWD/$BUILD") || { say "build failed"; tail -20 "$OUT/build.log"; exit 1; }
BASE_LIB=
if [ -n "${BASE_TGZ:-}" ]; then
  rm -rf "$BASE_DIR" && mkdir -p "$BASE_DIR" && tar xzf "$BASE_TGZ" -C "$BASE_DIR" &&
    BASE_LIB=$(build_lib "$BASE_DIR" "$BASE_DIR/build") || { say "base build failed"; tail -20 "$OUT/build.log"; }
fi
cc -O2 -shared -fPIC -o "$OUT/libtimedhooks.so" bench/torch/timed_hooks.c -ldl >> "$OUT/build.log" 2>&1 ||
  { say "timed_hooks.c: build failed"; exit 1; }
say "built in $(( $(date +%s) - START )) s: $LIB${BASE_LIB:+, base $BASE_LIB}"
allocs=vpmm-timed
[ -n "$BASE_LIB" ] && allocs=vpmm-timed,vpmm-timed-base
VPMM_LIBRARY="$LIB" TIMED_HOOKS_LIBRARY="$OUT/libtimedhooks.so" PYTHONPATH=bindings/python \
  boxed $(( $(left) - BOX_RESERVE )) taskset -c "${PIN_CPUS:-2-9}" python3 bench/torch/alloc_call_cost.py \
  --allocs "$allocs" --rounds "$ROUNDS" ${BASE_LIB:+--base-library "$BASE_LIB"} > "$OUT/hooks.log" 2>&1
say "alloc_call_cost: exit $?"
grep -E "^round|^median" "$OUT/hooks.log" | sed 's/pairs ns.*| step wall/step wall/' | tee -a "$SUM"
[ -n "$BASE_LIB" ] && echo "BASE_LIBRARY=$BASE_LIB"
say "total: $(( $(date +%s) - START )) s"
