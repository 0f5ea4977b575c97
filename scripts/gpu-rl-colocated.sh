#!/usr/bin/env bash
# Colocated RL on the GPU machine (issue 43), run from the repository root.
# Builds libvpmm with the CUDA backend (scripts/gpu-ipc-build.sh), then:
#   1. rl_sync_client   bench/torch/rl_sync_client.py: trainer and rollout on
#                       one GPU, a ~0.8B Llama's weights through a
#                       torch.multiprocessing queue as a plain dict, a list of
#                       (name, tensor) pairs and the state dict, PyTorch's CUDA
#                       IPC against vpmm in the same run, first send and
#                       re-send after pause/resume, one export per send
#                       checked (RL_ROUNDS, default 3; RL_WAYS, default
#                       torch,vpmm,vpmm_prepared)
#   2. first_pause      bench/torch/first_pause.py: a Llama's weights paused
#                       the first time against later pauses, under
#                       use_as_allocator()+vpmm.region and vpmm.torch.pool,
#                       pinning ahead on and off, right after the block and
#                       PAUSE_GAP (default 1) s after it (PAUSE_GIB, default
#                       0.75)
#   3. test_torch_ipc.py and test_torch_pools.py (tests/gpu): the state dict
#                       as one export, pinning ahead in the background
# Everything under $OUT: summary.txt build.log rl.log pause.log torch.log.
# Each step is time-boxed; the whole run stays under DEADLINE seconds
# (default 580). Success: summary.txt ends with "gpu-rl-colocated: OK"
# (steps 1 to 3 exited 0; the target lines are reported, not gated).
set -u
START=$(date +%s)
DEADLINE=${DEADLINE:-580}
OUT=${OUT:-$PWD/gpu-rl-colocated-out}
BUILD=${BUILD:-build-gpu-ipc}
. "$(dirname "$0")/gpu-common.sh"

{
  date -u
  nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv,noheader 2>&1 || true
  python3 -c 'import torch; print("torch", torch.__version__)' 2>&1 | tail -1
  python3 -c 'import transformers; print("transformers", transformers.__version__)' 2>&1 | tail -1
} >> "$SUM" 2>&1

NAME=gpu-rl-colocated
. "$(dirname "$0")/gpu-ipc-build.sh"
PY_ENV=(env VPMM_LIBRARY="$LIBPATH" PYTHONPATH="$PWD/bindings/python${PYTHONPATH:+:$PYTHONPATH}")
if ! python3 -c 'import torch; assert torch.cuda.is_available()' >/dev/null 2>&1; then
  say "torch: not installed or no CUDA: nothing to run"; say "$NAME: FAILED (no torch)"; exit 1
fi

boxed 260 "${PY_ENV[@]}" python3 bench/torch/rl_sync_client.py --rounds "${RL_ROUNDS:-3}" \
  --ways "${RL_WAYS:-torch,vpmm,vpmm_prepared}" > "$OUT/rl.log" 2>&1
RL=$?
say "rl_sync_client: exit $RL"
grep -E "ready|^round|^model|^median|identical|^target|Error|error" "$OUT/rl.log" | cut -c1-600 | tee -a "$SUM"

boxed 170 "${PY_ENV[@]}" python3 bench/torch/first_pause.py --gib "${PAUSE_GIB:-0.75}" --gap "${PAUSE_GAP:-1}" \
  > "$OUT/pause.log" 2>&1
PAUSE=$?
say "first_pause: exit $PAUSE"
grep -E "^(global|pool) |^target|FAILED|Error" "$OUT/pause.log" | cut -c1-600 | tee -a "$SUM"

TORCH=0
for t in test_torch_ipc test_torch_pools; do
  boxed 90 "${PY_ENV[@]}" python3 "tests/gpu/$t.py" > "$OUT/$t.log" 2>&1
  st=$?
  (( st == 0 )) || TORCH=$st
  say "$t.py: exit $st: $(tail -1 "$OUT/$t.log")"
done
cat "$OUT"/test_torch_*.log > "$OUT/torch.log" 2>/dev/null && rm -f "$OUT"/test_torch_*.log

if (( RL == 0 && PAUSE == 0 && TORCH == 0 )); then say "$NAME: OK"; else
  say "$NAME: FAILED (rl $RL, pause $PAUSE, torch $TORCH)"; fi
say "total $(( $(date +%s) - START )) s"
