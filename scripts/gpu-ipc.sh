#!/usr/bin/env bash
# Sharing pool memory between processes (docs/ipc.md) on the GPU machine, run
# from the repository root. Builds what it needs (meson, or g++/nvcc by hand
# when meson is missing), then:
#   1. test_ipc          the host-backend suite (fork + exec, every event
#                        order, misuse; pidfd_getfd on this kernel)
#   2. test_gpu_ipc      two processes on one GPU: 4 GiB trainer -> rollout,
#                        read, written back, pause/resume, 100 weight syncs
#   3. bench_ipc         handle creation with and without the POSIX-FD handle
#                        type, exportable pools, weight-sync bandwidth
#   4. torch             the probe of PyTorch's own CUDA IPC on libvpmm memory,
#                        vpmm.torch.share/open, torch.multiprocessing queues
#                        with vpmm.torch.install_reductions (tests/gpu/test_torch_ipc.py),
#                        then examples/ipc/weight_sync.py (trainer + rollout, 4 syncs)
# Everything under $OUT (at most 8 files): summary.txt build.log unit.log
# gpu.log bench.log torch.log. Each step is time-boxed; the whole run stays
# under DEADLINE seconds (default 460).
# Success: summary.txt ends with "gpu-ipc: OK" followed by the total time
# (steps 1, 2, 4 and 5 passed; the benchmark's numbers are reported, not gated).
set -u
START=$(date +%s)
DEADLINE=${DEADLINE:-460}
OUT=${OUT:-$PWD/gpu-ipc-out}
BUILD=${BUILD:-build-gpu-ipc}
. "$(dirname "$0")/gpu-common.sh"

{
  date -u; uname -a
  nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv,noheader 2>&1 || true
  echo "kernel.yama.ptrace_scope: $(cat /proc/sys/kernel/yama/ptrace_scope 2>/dev/null || echo absent)"
  echo "RLIMIT_NOFILE: $(ulimit -n)"
} >> "$SUM" 2>&1

NAME=gpu-ipc
. "$(dirname "$0")/gpu-ipc-build.sh"

# ------------------------------------------------------------------ 1. host suite
boxed 90 "$BUILD/tests/test_ipc" > "$OUT/unit.log" 2>&1
UNIT=$?
say "test_ipc (host backend, fork+exec): exit $UNIT: $(tail -1 "$OUT/unit.log")"
grep "pidfd_getfd import" "$OUT/unit.log" | head -1 | tee -a "$SUM"

# ------------------------------------------------------------------ 2. GPU suite
boxed 150 "$BUILD/tests/gpu/test_gpu_ipc" > "$OUT/gpu.log" 2>&1
GPU=$?
say "test_gpu_ipc: exit $GPU: $(tail -1 "$OUT/gpu.log")"
grep -E "^  (export sent|device free|100 updates)" "$OUT/gpu.log" | tee -a "$SUM"

# ------------------------------------------------------------------ 3. benchmark
boxed 120 "$BUILD/bench/bench_ipc" > "$OUT/bench.log" 2>&1
say "bench_ipc: exit $?"
grep "^IPC " "$OUT/bench.log" | tee -a "$SUM"

# ------------------------------------------------------------------ 4. PyTorch
TORCH=0
if python3 -c 'import torch; assert torch.cuda.is_available()' >/dev/null 2>&1; then
  VPMM_LIBRARY="$LIBPATH" PYTHONPATH="$PWD/bindings/python${PYTHONPATH:+:$PYTHONPATH}" \
    boxed 150 python3 tests/gpu/test_torch_ipc.py > "$OUT/torch.log" 2>&1
  TORCH=$?
  say "test_torch_ipc.py: exit $TORCH: $(tail -1 "$OUT/torch.log")"
  grep -E "^(ok|FAIL) |PROBE " "$OUT/torch.log" | cut -c1-400 | tee -a "$SUM"
  # 5. the two-process example (trainer + rollout engine), appended to torch.log
  echo "---- examples/ipc/weight_sync.py" >> "$OUT/torch.log"
  VPMM_LIBRARY="$LIBPATH" PYTHONPATH="$PWD/bindings/python${PYTHONPATH:+:$PYTHONPATH}" VPMM_EXPORTABLE=1 \
    boxed 120 python3 examples/ipc/weight_sync.py --steps 4 --width 4096 --layers 16 >> "$OUT/torch.log" 2>&1
  EX=$?
  say "examples/ipc/weight_sync.py: exit $EX"
  grep -E "^(model|step) " "$OUT/torch.log" | tee -a "$SUM"
else
  say "torch: not installed or no CUDA: the PyTorch step did not run"
  TORCH=1
fi

EX=${EX:-1}
if (( UNIT == 0 && GPU == 0 && TORCH == 0 && EX == 0 )); then say "gpu-ipc: OK"; else say "gpu-ipc: FAILED (unit $UNIT, gpu $GPU, torch $TORCH, example $EX)"; fi
say "total $(( $(date +%s) - START )) s"
