#!/usr/bin/env bash
# Placement (docs/handles.md, "Placement that learns the loop") on the GPU
# machine, measured as users measure it; run from the repository root:
#   1. builds the library and the vpmm tool (meson, CUDA; no GPU tests);
#   2. `vpmm replay --backend cuda --policy default,exact,views` of the shipped
#      training snapshots: the same decisions as the host replays, on the
#      real driver, with its time per call;
#   3. ROUNDS rounds (default 6) of the hard client (bench/torch/hard_client.py:
#      MoE with uneven routing, recompute, pinned offload, side-stream
#      gathers, eight shapes) and the dense training client
#      (bench/torch/train_client.py: GPT, 16 layers, d=1024, batch scale
#      TRAIN_SCALE, six shapes) under PyTorch native, expandable_segments,
#      cudaMallocAsync and libvpmm's default chain ("vpmm"; "vpmm-exact",
#      "vpmm-views", "vpmm-pending" run the other chains), one process
#      each, the five alternating within a round and the order rotated by one
#      every round. With two GPUs or more the hard client runs on GPU 0 and
#      the dense one on GPU 1 at the same time (each comparison stays on one
#      GPU); with one GPU they take turns, and fewer rounds may fit;
#   4. bench/torch/placement_report.py over the results: every round's median
#      step, peak / live, steady driver time share and remapped bytes per
#      allocator, libvpmm / fastest PyTorch allocator per round and its
#      geometric mean.
# Everything goes under $OUT: summary.txt (the report), build.log,
# replays.log, hard.jsonl, train.jsonl, clients.err. Each step is time-boxed
# and no process starts unless it can finish before DEADLINE (default 570 s),
# so the logs always come back within a 600 s call.
#
# Environment: OUT (default ./gpu-placement-out), BUILD (default
# build-gpu-placement), DEADLINE, ROUNDS, HARD_CYCLES (default 2: a warm-up
# cycle over the eight shapes, then a measured one), TRAIN_ROUNDS (default
# 2), TRAIN_SCALE (default 4), JOBS (build jobs). To spread six rounds over
# several calls on one warm machine: FIRST_ROUND (default 1; rounds are
# numbered and rotated from it), ROUND_NEED (seconds; a round starts only
# with that much time left, so no round is cut in two), ALLOCS (default
# "native expandable cudamallocasync vpmm"; vpmm-exact, vpmm-views and
# vpmm-pending run the other chains, VPMM_PLACEMENT; vpmm-never the default
# chain with VPMM_DRIVER_BUDGET=never; vpmm-unlimited one handle per growth
# (VPMM_MAX_HANDLE_SIZE=unlimited); vpmm-base the default of the library
# at BASE_LIBRARY, a build of another tree), HARD_PER_STEP=1 (the hard client's
# steps one JSON line each, to clients.err), CLIENTS (default
# "hard train"; "serve" adds bench/torch/serve_client.py, SERVE_WAVES
# waves; "lockstep" runs bench/torch/serve_lockstep.py over ALLOCS once, up
# to SERVE_WAVES waves, to lockstep.jsonl; "lockstep-hard" and "lockstep-train" run
# bench/torch/step_lockstep.py over ALLOCS, the hard or the dense client
# cycle by cycle, up to LOCKSTEP_CYCLES (default 40) cycles, to
# lockstep-hard.jsonl / lockstep-train.jsonl; the lockstep kinds share all
# the time left, so give them a call of their own; "profile" runs
# bench/torch/step_profile.py over ALLOCS, PROFILE_ROUNDS rounds (default 2),
# to profile.log and profile/), REPLAYS=0 (skip the CUDA replays). pluggable-async (or
# pluggable-async-nodeps: no GPU-side waits across streams in the driver's
# pool) in ALLOCS builds bench/torch/passthrough_allocator.cu with nvcc into
# $BUILD unless PASSTHROUGH_LIBRARY names a build. Each process's wall time
# goes to clients.err. PIN_CPUS (a taskset list, e.g. 2-9) runs every client
# process on those CPUs: on the lent VMs the same process swings 15-25%
# from one launch to the next with where the scheduler puts it, which the
# comparison is not about.
set -u
START=$(date +%s)
DEADLINE=${DEADLINE:-570}
OUT=${OUT:-$PWD/gpu-placement-out}
BUILD=${BUILD:-build-gpu-placement}
ROUNDS=${ROUNDS:-6}
FIRST_ROUND=${FIRST_ROUND:-1}
ROUND_NEED=${ROUND_NEED:-0}
CLIENTS=${CLIENTS:-hard train}
REPLAYS=${REPLAYS:-1}
HARD_CYCLES=${HARD_CYCLES:-2}
TRAIN_ROUNDS=${TRAIN_ROUNDS:-2}
TRAIN_SCALE=${TRAIN_SCALE:-4}
SERVE_WAVES=${SERVE_WAVES:-14}
LOCKSTEP_CYCLES=${LOCKSTEP_CYCLES:-40}
BOX_RESERVE=20
. "$(dirname "$0")/gpu-common.sh"

# ------------------------------------------------------------------ build
{
  echo "date: $(date -u)"; uname -a
  nvidia-smi --query-gpu=index,name,memory.total,memory.used,driver_version --format=csv,noheader || true
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' || true
} > "$OUT/build.log" 2>&1
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
CUDA_HOME=${CUDA_HOME:-$(dirname "$(dirname "$NVCC")")}
export PATH="$CUDA_HOME/bin:$PATH"
if command -v meson >/dev/null 2>&1; then MESON=(meson); else MESON=(python3 -m mesonbuild.mesonmain); fi
if [ ! -f "$BUILD/build.ninja" ]; then
  boxed 120 "${MESON[@]}" setup "$BUILD" -Dgpu_tests=disabled -Dcuda=enabled \
    -Dcuda-include-dir="$CUDA_HOME/include" >> "$OUT/build.log" 2>&1 || rm -rf "$BUILD"
fi
# The shared library's target is its versioned file (libvpmm.so.X.Y.Z).
LIB_TARGET=$(ninja -C "$BUILD" -t targets all 2>/dev/null | sed -n 's/^\(libvpmm\.so\.[0-9.]*[0-9]\): cpp_LINKER$/\1/p' | head -1)
boxed 200 ninja -C "$BUILD" -j "$JOBS" "${LIB_TARGET:-libvpmm.so}" tools/vpmm >> "$OUT/build.log" 2>&1
BUILD_RC=$?
say "build: exit $BUILD_RC ($(( $(date +%s) - START )) s); git $(git rev-parse --short HEAD 2>/dev/null || echo ?)"
if [ "$BUILD_RC" != 0 ] || [ ! -f "$BUILD/${LIB_TARGET:-libvpmm.so}" ]; then
  tail -30 "$OUT/build.log" >> "$SUM"
  exit 1
fi
grep -E "^[0-9]+, " "$OUT/build.log" | sed 's/^/   gpu /' >> "$SUM"
export VPMM_LIBRARY="$PWD/$BUILD/${LIB_TARGET:-libvpmm.so}"
read -r -a ALLOCS <<< "${ALLOCS:-native expandable cudamallocasync vpmm}"
if [[ " ${ALLOCS[*]} " == *" pluggable-async"* ]] && [ -z "${PASSTHROUGH_LIBRARY:-}" ]; then
  boxed 60 "$NVCC" -shared -Xcompiler -fPIC -o "$BUILD/libpassthrough.so" bench/torch/passthrough_allocator.cu \
    >> "$OUT/build.log" 2>&1 && export PASSTHROUGH_LIBRARY="$PWD/$BUILD/libpassthrough.so"
  say "pluggable-async: ${PASSTHROUGH_LIBRARY:-not built (see build.log)}"
fi
NGPU=$(nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null | wc -l)
(( NGPU < 1 )) && NGPU=1

# ------------------------------------------------------------------ replays
(( REPLAYS )) && for t in traces/moe_training.pickle.gz traces/llama_training.pickle.gz traces/training.pickle.gz; do
  echo "---- $t" >> "$OUT/replays.log"
  CUDA_VISIBLE_DEVICES=0 boxed 60 "$BUILD/tools/vpmm" replay --backend cuda --policy default,exact,views "$t" \
    >> "$OUT/replays.log" 2>&1
  echo "---- exit $?" >> "$OUT/replays.log"
done
(( REPLAYS )) && say "replays (CUDA backend): $(grep -c ': placement policies$' "$OUT/replays.log") traces compared"
(( REPLAYS )) && awk '/: placement policies$/ {t = 1; print "   " $0; next} t && /^    / {print "   " $0; next} {t = 0}' \
  "$OUT/replays.log" >> "$SUM"
grep -E "driver by malloc" "$OUT/replays.log" | sed 's/^/   /' >> "$SUM"

# ------------------------------------------------------------------ clients
read -r -a KINDS <<< "$CLIENTS"

# run_client KIND GPU ROUND NAME: one process on GPU, its JSON line appended
# to KIND.jsonl. Returns 124 (and runs nothing) when it could not finish
# before the deadline, 0 otherwise (a failed process is noted in clients.err).
run_client() {
  local kind=$1 gpu=$2 rnd=$3 name=$4 alloc=$4 want t0=$(date +%s)
  local -a env=(-u VPMM_VIEW_MIN_SIZE CUDA_VISIBLE_DEVICES="$gpu") pin=()
  [ -n "${PIN_CPUS:-}" ] && pin=(taskset -c "$PIN_CPUS")
  case "$name" in  # the other placement chains (VPMM_PLACEMENT)
    vpmm-exact | vpmm-views | vpmm-pending) alloc=vpmm; env+=(VPMM_PLACEMENT="${name#vpmm-}") ;;
    vpmm-never) alloc=vpmm; env+=(VPMM_DRIVER_BUDGET=never) ;;  # the default chain, never paying for a move
    vpmm-unlimited) alloc=vpmm; env+=(VPMM_MAX_HANDLE_SIZE=unlimited) ;;  # one handle per growth
    vpmm-base) alloc=vpmm; env+=(VPMM_LIBRARY="${BASE_LIBRARY:?vpmm-base needs BASE_LIBRARY}") ;;  # another build
  esac
  if [ "$kind" = serve ]; then
    want=75
    (( $(left) - BOX_RESERVE < 35 )) && return 124
    boxed "$want" "${pin[@]}" env "${env[@]}" python3 bench/torch/serve_client.py --alloc "$alloc" \
      --waves "$SERVE_WAVES" --label "r$rnd $name" >> "$OUT/serve.jsonl" 2>> "$OUT/clients.err"
  elif [ "$kind" = hard ]; then
    want=90
    (( $(left) - BOX_RESERVE < 45 )) && return 124
    boxed "$want" "${pin[@]}" env "${env[@]}" python3 bench/torch/hard_client.py --alloc "$alloc" \
      --cycles "$HARD_CYCLES" --label "r$rnd $name" ${HARD_PER_STEP:+--per-step} >> "$OUT/hard.jsonl" 2>> "$OUT/clients.err"
  else
    want=75
    (( $(left) - BOX_RESERVE < 35 )) && return 124
    boxed "$want" "${pin[@]}" env "${env[@]}" python3 bench/torch/train_client.py --alloc "$alloc" \
      --rounds "$TRAIN_ROUNDS" --batch-scale "$TRAIN_SCALE" --label "r$rnd $name" \
      >> "$OUT/train.jsonl" 2>> "$OUT/clients.err"
  fi
  local rc=$?
  (( rc != 0 )) && echo "$kind r$rnd $name: exit $rc" >> "$OUT/clients.err"
  echo "$kind r$rnd $name: $(( $(date +%s) - t0 )) s" >> "$OUT/clients.err"
  return 0
}
# rounds KIND GPU: ROUNDS rounds, the allocators rotated by one each round.
rounds() {
  local kind=$1 gpu=$2 r i n=${#ALLOCS[@]}
  for r in $(seq "$FIRST_ROUND" $(( FIRST_ROUND + ROUNDS - 1 ))); do
    (( $(left) < ROUND_NEED )) && return 0
    for i in $(seq 0 $((n - 1))); do
      run_client "$kind" "$gpu" "$r" "${ALLOCS[$(( (i + r - 1) % n ))]}" || return 0
    done
  done
}
: > "$OUT/hard.jsonl"; : > "$OUT/train.jsonl"; : > "$OUT/serve.jsonl"; : > "$OUT/clients.err"
pin=(); [ -n "${PIN_CPUS:-}" ] && pin=(taskset -c "$PIN_CPUS")
# The profile kind: bench/torch/step_profile.py, the hard client's GPU
# timeline under each allocator, PROFILE_ROUNDS rounds, to profile.log.
rest=()
for k in "${KINDS[@]}"; do
  [ "$k" != profile ] && { rest+=("$k"); continue; }
  mkdir -p "$OUT/profile"
  say "profile: ${ALLOCS[*]}, ${PROFILE_ROUNDS:-2} rounds"
  boxed $(( $(left) - BOX_RESERVE )) "${pin[@]}" env -u VPMM_VIEW_MIN_SIZE CUDA_VISIBLE_DEVICES=0 \
    python3 bench/torch/step_profile.py --allocs "$(IFS=,; echo "${ALLOCS[*]}")" --rounds "${PROFILE_ROUNDS:-2}" \
    --out "$OUT/profile" > "$OUT/profile.log" 2>> "$OUT/clients.err"
  echo "profile: exit $?" | tee -a "$SUM"
  grep -E "^(median|    (kernel|host self))" "$OUT/profile.log" >> "$SUM"
done
KINDS=("${rest[@]}")
# Lockstep kinds: every allocator's process loaded at once, taking turns
# (serve_lockstep.py wave by wave; step_lockstep.py cycle by cycle for
# lockstep-hard and lockstep-train); the time left is shared among them and
# bounds each (--seconds), so their summary lines always come back.
LOCKSTEP=(); rest=()
for k in "${KINDS[@]}"; do case "$k" in lockstep*) LOCKSTEP+=("$k") ;; *) rest+=("$k") ;; esac; done
KINDS=("${rest[@]}")
for i in "${!LOCKSTEP[@]}"; do
  k=${LOCKSTEP[$i]}
  LS_SECONDS=$(( ($(left) - BOX_RESERVE - 30) / (${#LOCKSTEP[@]} - i) ))
  client_args=()  # step_lockstep.py passes what follows "--" to every worker
  case "$k" in
    lockstep) log=lockstep.jsonl; units=waves
      cmd=(bench/torch/serve_lockstep.py --waves "$SERVE_WAVES") ;;
    lockstep-hard) log=lockstep-hard.jsonl; units=cycles
      cmd=(bench/torch/step_lockstep.py --client hard --cycles "$LOCKSTEP_CYCLES") ;;
    lockstep-train) log=lockstep-train.jsonl; units=cycles
      cmd=(bench/torch/step_lockstep.py --client train --cycles "$LOCKSTEP_CYCLES")
      client_args=(-- --batch-scale "$TRAIN_SCALE") ;;
    *) say "unknown client kind $k"; continue ;;
  esac
  cmd+=(--allocs "$(IFS=,; echo "${ALLOCS[*]}")" --seconds "$LS_SECONDS" --label "$k r$FIRST_ROUND"
        "${client_args[@]}")
  say "$k: ${ALLOCS[*]}, in ${LS_SECONDS} s"
  boxed $(( LS_SECONDS + 25 )) "${pin[@]}" env -u VPMM_VIEW_MIN_SIZE CUDA_VISIBLE_DEVICES=0 \
    python3 "${cmd[@]}" > "$OUT/$log" 2>> "$OUT/clients.err"
  echo "$k: exit $? after $(grep -c '"\(wave\|cycle\)"' "$OUT/$log") $units" | tee -a "$SUM"
  tail -1 "$OUT/$log" | python3 -c 'import json,sys
s = json.loads(sys.stdin.read() or "{}")
for k in ("tokens_per_s", "step_ms_median", "paired_step_gm"):
    if k in s: print("  ", k, s[k])
for k, v in s.items():
    if k.endswith("_gm") and k != "paired_step_gm": print("  ", k, v)
for a, r in s.get("results", {}).items():
    if r.get("peak_gib"): print("  ", a, "peak", r["peak_gib"], "GiB, live", r.get("live_peak_gib"),
                                "driver share", r.get("steady_driver_share"), "remapped", r.get("steady_remapped_bytes"))' >> "$SUM" 2>&1
done
if (( ${#KINDS[@]} == 0 )); then
  :  # only lockstep kinds were asked for
elif (( NGPU >= 2 )); then
  say "clients: hard on GPU 0 and dense on GPU 1 at the same time, $ROUNDS rounds each"
  rounds hard 0 &
  HARD_PID=$!
  rounds train 1
  wait "$HARD_PID"
else
  say "clients: one GPU, the hard and the dense client take turns, up to $ROUNDS rounds"
  n=${#ALLOCS[@]}
  for r in $(seq "$FIRST_ROUND" $(( FIRST_ROUND + ROUNDS - 1 ))); do
    (( $(left) < ROUND_NEED )) && break
    for k in "${KINDS[@]}"; do
      for i in $(seq 0 $((n - 1))); do run_client "$k" 0 "$r" "${ALLOCS[$(( (i + r - 1) % n ))]}" || break 3; done
    done
  done
fi
say "hard client: $(grep -c '^{' "$OUT/hard.jsonl") processes; dense client: $(grep -c '^{' "$OUT/train.jsonl") processes; serving client: $(grep -c '^{' "$OUT/serve.jsonl") processes"
grep -E "exit [0-9]+$" "$OUT/clients.err" | sed 's/^/   failed: /' >> "$SUM"
python3 bench/torch/placement_report.py "$OUT/hard.jsonl" "$OUT/train.jsonl" "$OUT/serve.jsonl" >> "$SUM" 2>&1
say "total: $(( $(date +%s) - START )) s"
cat "$SUM"
