#!/usr/bin/env bash
# The weight sync between processes on the GPU machine (docs/ipc.md, issue
# 34 item 2; issue 35's importer guarantee), run from the repository root.
# Builds what it needs (scripts/gpu-ipc-build.sh), then:
#   1. rl_sync_client    bench/torch/rl_sync_client.py: trainer and rollout
#                        processes on one GPU, a ~0.8B Llama's state dict
#                        through a torch.multiprocessing queue: PyTorch's CUDA
#                        IPC (native allocator) against vpmm (one export per
#                        send) and vpmm's per-tensor path, first send and
#                        re-send after pause/resume, greedy tokens checked,
#                        every round printed (RL_ROUNDS, default 6; RL_BOX
#                        seconds at most, default 140; RL_WAYS, default
#                        torch,vpmm: rl_sync_client's --ways)
#   2. bench_ipc exports where a send's time goes: the driver's first and
#                        second export of a handle, 128 exports serial and
#                        from 4 threads, vpmm_pool_export_many first / again /
#                        after a pause-resume, sent to a second process
#   3. test_gpu_ipc      two processes on one GPU: 4 GiB trainer -> rollout,
#                        pause/resume with device memory counted, 100 syncs
#   4. test_torch_ipc.py the PyTorch cases: share/open, queues, a state dict
#                        as one export (share_many/open_many), the sync loop
#   5. test_ipc_hostile  the hostile importer on this machine's kernel (host
#                        backend: seals, locks, a peer that does not read)
# Everything under $OUT: summary.txt build.log rl.log bench.log gpu.log
# torch.log hostile.log. Each step is time-boxed; the whole run stays under
# DEADLINE seconds (default 290).
# Success: summary.txt ends with "gpu-ipc-sync: OK" and the total time
# (steps 1, 3, 4 and 5 passed; the target line of step 1 and the benchmark's
# numbers are reported, not gated).
set -u
START=$(date +%s)
DEADLINE=${DEADLINE:-290}
OUT=${OUT:-$PWD/gpu-ipc-sync-out}
BUILD=${BUILD:-build-gpu-ipc}
. "$(dirname "$0")/gpu-common.sh"

{
  date -u; uname -a
  nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv,noheader 2>&1 || true
  python3 -c 'import torch, sys; print("torch", torch.__version__)' 2>&1 | tail -1
  python3 -c 'import transformers; print("transformers", transformers.__version__)' 2>&1 | tail -1
  echo "kernel.yama.ptrace_scope: $(cat /proc/sys/kernel/yama/ptrace_scope 2>/dev/null || echo absent)"
} >> "$SUM" 2>&1

NAME=gpu-ipc-sync
. "$(dirname "$0")/gpu-ipc-build.sh"
PY_ENV=(env VPMM_LIBRARY="$LIBPATH" PYTHONPATH="$PWD/bindings/python${PYTHONPATH:+:$PYTHONPATH}")

# ------------------------------------------------------------------ 1. the RL client
RL=1
if python3 -c 'import torch; assert torch.cuda.is_available()' >/dev/null 2>&1; then
  boxed "${RL_BOX:-140}" "${PY_ENV[@]}" python3 bench/torch/rl_sync_client.py --rounds "${RL_ROUNDS:-6}" --ways "${RL_WAYS:-torch,vpmm}" > "$OUT/rl.log" 2>&1
  RL=$?
  say "rl_sync_client: exit $RL"
  grep -E "ready|^round|^model|^median|identical|^target|Error|error" "$OUT/rl.log" | cut -c1-600 | tee -a "$SUM"
else
  say "torch: not installed or no CUDA: the PyTorch steps did not run"
fi

# ------------------------------------------------------------------ 2. export costs
boxed 50 "$BUILD/bench/bench_ipc" exports > "$OUT/bench.log" 2>&1
say "bench_ipc exports: exit $?"
grep "^IPC " "$OUT/bench.log" | tee -a "$SUM"

# ------------------------------------------------------------------ 3. GPU suite
boxed 100 "$BUILD/tests/gpu/test_gpu_ipc" > "$OUT/gpu.log" 2>&1
GPU=$?
say "test_gpu_ipc: exit $GPU: $(tail -1 "$OUT/gpu.log")"
grep -E "^  (export sent|device free|100 updates)" "$OUT/gpu.log" | tee -a "$SUM"

# ------------------------------------------------------------------ 4. PyTorch cases
TORCH=1
if python3 -c 'import torch; assert torch.cuda.is_available()' >/dev/null 2>&1; then
  boxed 120 "${PY_ENV[@]}" python3 tests/gpu/test_torch_ipc.py > "$OUT/torch.log" 2>&1
  TORCH=$?
  say "test_torch_ipc.py: exit $TORCH: $(tail -1 "$OUT/torch.log")"
  grep -E "^(ok|FAIL) |PROBE " "$OUT/torch.log" | cut -c1-400 | tee -a "$SUM"
fi

# ------------------------------------------------------------------ 5. hostile importer
boxed 60 "$BUILD/tests/test_ipc_hostile" > "$OUT/hostile.log" 2>&1
HOSTILE=$?
say "test_ipc_hostile (host backend): exit $HOSTILE: $(tail -1 "$OUT/hostile.log")"

if (( RL == 0 && GPU == 0 && TORCH == 0 && HOSTILE == 0 )); then say "gpu-ipc-sync: OK"; else
  say "gpu-ipc-sync: FAILED (rl $RL, gpu $GPU, torch $TORCH, hostile $HOSTILE)"; fi
say "total $(( $(date +%s) - START )) s"
