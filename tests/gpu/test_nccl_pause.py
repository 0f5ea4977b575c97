"""Gradient buckets in a pausable libvpmm region under torch.distributed's
NCCL backend: two processes, one GPU each (world size 2). Each case starts
both ranks as processes of their own and watches them: a rank that stops
making progress is killed after VPMM_NCCL_TIMEOUT seconds (150) and the case
fails naming the step it hung in, instead of leaving the suite stuck.

Cases (pyharness runs each in a process of its own):
  eager_host_backup       all_reduce, pause "grads" (host backup), a collective
                          while paused, resume: values and addresses kept;
                          all_reduce again.
  eager_no_backup         the same without backup: refilled after resume.
  graph_replay_after_resume
                          all_reduce (in place) + all_gather_into_tensor (out
                          of place, which NCCL may register at capture) in a
                          CUDA graph, replayed before and after two pause /
                          resume cycles; default (non-exportable) pools.
  graph_exportable_probe  the same with VPMM_EXPORTABLE=1, where NCCL can
                          export the buffers' handles and register them at
                          capture: the question torch_memory_saver's users
                          raised (a registration made at capture still points
                          at the old physical memory after a same-address
                          resume; docs/multi-gpu.md).
                          A probe: whatever the replay after resume does
                          (right, stale or hung) is reported, not judged:
                          pyharness prints its last line, "PROBE ...", as
                          INFO and counts it neither passed nor failed; it
                          fails only when something before the pause is wrong.
                          The line says what happened, then whether an eager
                          collective and a re-captured graph are right.
  graph_exportable_register_off
                          exportable pools with NCCL_GRAPH_REGISTER=0, the
                          remedy docs/multi-gpu.md names: must be right.

NCCL's INFO log (subsystems INIT,REG) goes to files that the case reads for
NCCL's own registration lines; VPMM_NCCL_LOG_DIR keeps them. NVLink SHARP
stays off (NCCL_NVLS_ENABLE=0 in the ranks). Exits 77 (meson: SKIP) with
fewer than two GPUs, without torch, NCCL or libvpmm."""
import gc
import glob
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback

import pyharness

WORLD = 2
MiB = 1 << 20
# float32 elements: a large bucket, one just over a page, a small one.
BUCKETS = (1 << 21, (1 << 19) + 1, 3000)
# Elements each rank contributes to the all-gather (16 MiB: NCCL's SIMPLE
# protocol, the one whose buffers it registers).
GATHER = 1 << 22
TAG = "grads"

TMS88 = ("A replay that hangs or goes wrong after a resume is what torch_memory_saver issue 88 "
         "reports: a registration NCCL made at capture (NCCL_GRAPH_REGISTER=1, its default; the "
         "'registered' count above says whether it did) points at the physical memory of that "
         "moment, while the resume put new physical memory behind the same addresses. Remedies "
         "(docs/multi-gpu.md): NCCL_GRAPH_REGISTER=0 before the capture, the buffers NCCL sees in "
         "non-exportable pools (VPMM_EXPORTABLE unset), or the graph destroyed and captured again "
         "after the resume.")


# --- the ranks ---------------------------------------------------------------------
def _step(name):
    print("STEP", name, flush=True)


def _pattern(torch, n):
    return torch.arange(n, device="cuda", dtype=torch.float32) % 251


# Small integers (exact in float32) that differ by rank, bucket and run
# (`gen`), over a pattern that differs along the buffer.
def _bucket_value(torch, i, n, rank, gen=0):
    return _pattern(torch, n) + 1000.0 * (rank + 1) + i + 20000.0 * gen


def _bucket_sum(torch, i, n, world, gen=0):
    return sum(_bucket_value(torch, i, n, r, gen) for r in range(world))


def _gather_in(torch, rank, gen):
    return _pattern(torch, GATHER) + 10000.0 * (rank + 1) + 100000.0 * gen


def _mismatch(torch, got, want, what):
    if torch.equal(got, want):
        return None
    bad = (got != want).nonzero().flatten()
    i = int(bad[0].item())
    return (f"{what}: {bad.numel()} of {got.numel()} elements wrong, first at {i}: "
            f"{got[i].item()} != {want[i].item()}")


def _in_pool(pool, t):
    base, size = pool.lookup(t.data_ptr())
    assert base <= t.data_ptr() and t.data_ptr() + t.numel() * t.element_size() <= base + size, \
        f"tensor at {t.data_ptr():#x} is not inside libvpmm allocation {base:#x}+{size}"


def _small_all_reduce(torch, dist, world):
    x = torch.full((1024,), 1.0, device="cuda")
    dist.all_reduce(x)
    assert x[0].item() == world, f"all_reduce of ones gave {x[0].item()}"


def _pause(torch, dist, vt, pool, nbytes, world):
    free0 = torch.cuda.mem_get_info()[0]
    assert vt.pause(TAG), "nothing was paused"
    ts = pool.tag_stats(TAG)
    assert ts["n_live"] == 0 and ts["n_paused"] >= 1 and ts["paused_bytes"] >= nbytes, ts
    freed = torch.cuda.mem_get_info()[0] - free0
    # The communicator and memory outside the tag keep working while paused;
    # the collective also holds both ranks paused at the same time.
    _small_all_reduce(torch, dist, world)
    return freed


def _eager(torch, dist, vt, rank, world, host_backup):
    pool = vt.default_pool()
    _step("allocate")
    with vt.pool(tag=TAG, host_backup=host_backup):
        buckets = [torch.empty(n, device="cuda") for n in BUCKETS]
    for b in buckets:
        _in_pool(pool, b)
    addrs = [b.data_ptr() for b in buckets]
    nbytes = sum(b.numel() * 4 for b in buckets)

    def fill():
        for i, b in enumerate(buckets):
            b.copy_(_bucket_value(torch, i, b.numel(), rank))

    _step("all_reduce before pause")
    fill()
    for b in buckets:
        dist.all_reduce(b)
    torch.cuda.synchronize()
    sums = [_bucket_sum(torch, i, b.numel(), world) for i, b in enumerate(buckets)]
    errs = [_mismatch(torch, b, s, f"bucket {i} after all_reduce") for i, (b, s) in enumerate(zip(buckets, sums))]
    assert not any(errs), errs
    _step("pause")
    freed = _pause(torch, dist, vt, pool, nbytes, world)
    _step("resume")
    assert vt.resume(TAG), "nothing was resumed"
    assert [b.data_ptr() for b in buckets] == addrs, "a bucket moved"
    if host_backup:
        errs = [_mismatch(torch, b, s, f"bucket {i} restored from backup") for i, (b, s) in
                enumerate(zip(buckets, sums))]
        assert not any(errs), errs
        want = [world * s for s in sums]  # every rank holds the same sums
    else:
        fill()  # contents are undefined after a resume without backup
        want = sums
    _step("all_reduce after resume")
    for b in buckets:
        dist.all_reduce(b)
    torch.cuda.synchronize()
    errs = [_mismatch(torch, b, w, f"bucket {i} after resume and all_reduce") for i, (b, w) in
            enumerate(zip(buckets, want))]
    assert not any(errs), errs
    return {"paused_mib": nbytes / MiB, "freed_mib": freed / MiB}


def _capture(torch, collectives):
    g = torch.cuda.CUDAGraph()
    # No collection mid-capture: a MemPool released then is an error in PyTorch.
    gc.collect()
    gc.disable()
    try:
        # thread_local: the process group's watchdog thread queries events meanwhile.
        with torch.cuda.graph(g, capture_error_mode="thread_local"):
            collectives()
    finally:
        gc.enable()
    torch.cuda.synchronize()
    return g


def _graph(torch, dist, vt, rank, world, probe):
    pool = vt.default_pool()
    _step("allocate")
    with vt.pool(tag=TAG, host_backup=True):
        buckets = [torch.empty(n, device="cuda") for n in BUCKETS]
        gin = torch.empty(GATHER, device="cuda")
        gout = torch.empty(GATHER * world, device="cuda")
    for t in buckets + [gin, gout]:
        _in_pool(pool, t)
    addrs = [t.data_ptr() for t in buckets + [gin, gout]]
    nbytes = sum(t.numel() * 4 for t in buckets + [gin, gout])

    def collectives():
        for b in buckets:
            dist.all_reduce(b)  # in place: NCCL's ring and tree never register these
            b.div_(world)       # the mean, as data parallel training takes it
        dist.all_gather_into_tensor(gout, gin)  # out of place: registrable

    # Every run gets inputs of its own generation and a zeroed output, so that
    # memory NCCL reaches through a stale registration shows: old values read
    # from the old memory, or zeros where writes went to it.
    def arm(gen):
        for i, b in enumerate(buckets):
            b.copy_(_bucket_value(torch, i, b.numel(), rank, gen))
        gin.copy_(_gather_in(torch, rank, gen))
        gout.zero_()

    def wrong(what, gen):
        errs = [_mismatch(torch, b, _bucket_sum(torch, i, b.numel(), world, gen) / world,
                          f"{what}: bucket {i}") for i, b in enumerate(buckets)]
        gathered = torch.cat([_gather_in(torch, r, gen) for r in range(world)])
        errs.append(_mismatch(torch, gout, gathered, f"{what}: all-gather output"))
        return [e for e in errs if e]

    def replay(g, what, gen):
        _step(what)
        arm(gen)
        g.replay()
        torch.cuda.synchronize()
        return wrong(what, gen)

    # Eager first, with the very collectives and sizes the graph captures:
    # the communicator connects each algorithm on first use, never mid-capture.
    _step("eager warm-up")
    arm(0)
    collectives()
    torch.cuda.synchronize()
    errs = wrong("eager warm-up", 0)
    assert not errs, errs
    _step("capture")
    g = _capture(torch, collectives)
    errs = replay(g, "replay before pause", 1)
    assert not errs, errs
    gen = 1
    result = {"paused_mib": nbytes / MiB}
    cycles = 1 if probe else 2
    for cycle in range(1, cycles + 1):
        _step(f"pause {cycle}")
        result[f"freed_mib_{cycle}"] = _pause(torch, dist, vt, pool, nbytes, world) / MiB
        _step(f"resume {cycle}")
        assert vt.resume(TAG), "nothing was resumed"
        assert [t.data_ptr() for t in buckets + [gin, gout]] == addrs, "a buffer moved"
        errs = wrong(f"restored from backup {cycle}", gen)  # the last run's results
        assert not errs, errs
        gen += 1
        errs = replay(g, f"replay after resume {cycle}", gen)
        if not probe:
            assert not errs, errs + [TMS88]
        result[f"after_resume_{cycle}"] = errs or "ok"
    if probe:
        _step("eager after resume")
        gen += 1
        arm(gen)
        collectives()
        torch.cuda.synchronize()
        result["eager_after_resume"] = wrong("eager after resume", gen) or "ok"
        _step("recapture")
        # NCCL drops a graph's registrations when the graph is destroyed; the
        # collective after it gives NCCL a call to reclaim them in.
        del g
        gc.collect()
        torch.cuda.synchronize()
        _small_all_reduce(torch, dist, world)
        g = _capture(torch, collectives)
        gen += 1
        result["recaptured"] = replay(g, "replay of the recaptured graph", gen) or "ok"
    del g
    return result


SCENARIOS = {
    "eager_backup": lambda *a: _eager(*a, host_backup=True),
    "eager_no_backup": lambda *a: _eager(*a, host_backup=False),
    "graph": lambda *a: _graph(*a, probe=False),
    "graph_probe": lambda *a: _graph(*a, probe=True),
}


def rank_main(scenario):
    from datetime import timedelta

    import torch
    import torch.distributed as dist
    import vpmm.torch as vt
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=torch.device("cuda", rank),
                            timeout=timedelta(seconds=120))
    try:
        result = SCENARIOS[scenario](torch, dist, vt, rank, world)
    except BaseException:
        # Out at once: tearing the process group down would wait for the
        # other rank, which may be blocked in a collective with this one.
        traceback.print_exc()
        sys.stdout.flush()
        os._exit(1)
    if rank == 0:
        v = torch.cuda.nccl.version()
        result["torch"] = torch.__version__
        result["nccl"] = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
    print("RESULT", json.dumps(result), flush=True)
    dist.destroy_process_group()
    return 0


# --- the case side: start the ranks, watch them, read NCCL's log -----------------------
def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Rank:
    def __init__(self, rank, proc):
        self.rank, self.proc, self.lines = rank, proc, []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def last_step(self):
        steps = [l[5:] for l in self.lines if l.startswith("STEP ")]
        return steps[-1] if steps else "(before the first step)"

    def result(self):
        for l in reversed(self.lines):
            if l.startswith("RESULT "):
                return json.loads(l[7:])
        return None

    def tail(self, n=40):
        return "\n".join(f"  [rank {self.rank}] {l}" for l in self.lines[-n:])


def _nccl_registrations(logdir):
    """Counts of NCCL's own INFO lines about user buffer registration (the
    wording of NCCL 2.2x's REG subsystem; another version may word them
    differently, so zero of everything proves nothing)."""
    pats = {"registered": r"IPC register buffer", "reused": r"IPC reuse buffer",
            "refused": r"failed to IPC register"}
    counts = {k: 0 for k in pats}
    for path in glob.glob(os.path.join(logdir, "*")):
        with open(path, errors="replace") as f:
            for line in f:
                for k, p in pats.items():
                    if re.search(p, line):
                        counts[k] += 1
    return counts


def run_ranks(scenario, env_extra):
    timeout = float(os.environ.get("VPMM_NCCL_TIMEOUT", "150"))
    keep = os.environ.get("VPMM_NCCL_LOG_DIR")
    logdir = os.path.join(keep, scenario + "-" + str(os.getpid())) if keep else tempfile.mkdtemp(prefix="vpmm-nccl-")
    os.makedirs(logdir, exist_ok=True)
    port = _free_port()
    ranks = []
    for r in range(WORLD):
        env = dict(os.environ)
        env.setdefault("NCCL_DEBUG", "INFO")
        env.setdefault("NCCL_DEBUG_SUBSYS", "INIT,REG")
        env.setdefault("NCCL_DEBUG_FILE", os.path.join(logdir, "nccl.%h.%p.log"))
        env.update(env_extra)
        env.update({"RANK": str(r), "LOCAL_RANK": str(r), "WORLD_SIZE": str(WORLD),
                    "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
                    "NCCL_NVLS_ENABLE": "0"})  # never NVLink SHARP (multicast objects)
        p = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--rank", scenario], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        ranks.append(Rank(r, p))
    deadline = time.monotonic() + timeout
    hung = False
    failed_at = None
    while any(rk.proc.poll() is None for rk in ranks):
        now = time.monotonic()
        if failed_at is None and any(rk.proc.poll() not in (None, 0) for rk in ranks):
            failed_at = now  # the other rank may wait for it forever in a collective
        if now > deadline or (failed_at is not None and now > failed_at + 10):
            hung = failed_at is None
            for rk in ranks:
                if rk.proc.poll() is None:
                    rk.proc.kill()
            break
        time.sleep(0.2)
    for rk in ranks:
        rk.proc.wait()
        rk.reader.join(timeout=5)
    reg = _nccl_registrations(logdir)
    if not keep:
        shutil.rmtree(logdir, ignore_errors=True)
    return ranks, hung, reg, timeout


def _report(ranks):
    return "\n".join(rk.tail() for rk in ranks)


def _must_pass(scenario, env_extra=None):
    ranks, hung, reg, timeout = run_ranks(scenario, env_extra or {})
    if hung:
        steps = "; ".join(f"rank {rk.rank} at '{rk.last_step()}'" for rk in ranks)
        after_resume = any("after resume" in rk.last_step() for rk in ranks)
        raise AssertionError(f"no progress for {timeout:.0f} s, ranks killed: {steps}. NCCL registration "
                             f"lines: {reg}." + (" " + TMS88 if after_resume else "") + "\n" + _report(ranks))
    bad = [rk for rk in ranks if rk.proc.returncode != 0]
    assert not bad, "rank(s) " + ", ".join(f"{rk.rank} (exit {rk.proc.returncode})" for rk in bad) + \
        f" failed; NCCL registration lines: {reg}\n" + _report(ranks)
    res = ranks[0].result()
    assert res is not None, "rank 0 printed no RESULT\n" + _report(ranks)
    return res, reg


def _versions(res):
    return f"torch {res.get('torch')}, NCCL {res.get('nccl')}"


def eager_host_backup():
    res, _ = _must_pass("eager_backup")
    print(f"pause released {res['freed_mib']:.0f} of {res['paused_mib']:.0f} MiB on rank 0; "
          f"values kept by the backup and all_reduce right after resume ({_versions(res)})")


def eager_no_backup():
    res, _ = _must_pass("eager_no_backup")
    print(f"pause released {res['freed_mib']:.0f} of {res['paused_mib']:.0f} MiB on rank 0; "
          f"refilled after resume, all_reduce right ({_versions(res)})")


def graph_replay_after_resume():
    res, reg = _must_pass("graph")
    print(f"graph replays right after 2 pause/resume cycles; pause released "
          f"{res['freed_mib_1']:.0f} of {res['paused_mib']:.0f} MiB; NCCL registration lines "
          f"{reg} ({_versions(res)})")


def graph_exportable_register_off():
    res, reg = _must_pass("graph", {"VPMM_EXPORTABLE": "1", "NCCL_GRAPH_REGISTER": "0"})
    print(f"exportable pools, NCCL_GRAPH_REGISTER=0: graph replays right after 2 pause/resume "
          f"cycles; NCCL registration lines {reg} ({_versions(res)})")


def graph_exportable_probe():
    ranks, hung, reg, timeout = run_ranks("graph_probe", {"VPMM_EXPORTABLE": "1"})
    steps = [rk.last_step() for rk in ranks]
    # One rank may have got past its replay and wait in the next collective.
    if hung and any(s.startswith("replay after resume") for s in steps):
        print(f"PROBE exportable pools, NCCL_GRAPH_REGISTER default: the replay after resume HUNG "
              f"(killed after {timeout:.0f} s); NCCL registration lines {reg}. {TMS88}")
        return
    if hung:
        raise AssertionError(f"no progress for {timeout:.0f} s at steps {steps} (not the replay "
                             f"after resume); NCCL registration lines {reg}\n" + _report(ranks))
    bad = [rk for rk in ranks if rk.proc.returncode != 0]
    assert not bad, "rank(s) " + ", ".join(f"{rk.rank} (exit {rk.proc.returncode})" for rk in bad) + \
        f" failed; NCCL registration lines: {reg}\n" + _report(ranks)
    res = [rk.result() for rk in ranks]
    assert all(r is not None for r in res), "a rank printed no RESULT\n" + _report(ranks)

    def say(key):
        outs = [r[key] for r in res]
        if all(o == "ok" for o in outs):
            return "right"
        return "WRONG (" + "; ".join(f"rank {i}: {o if o == 'ok' else o[0]}" for i, o in enumerate(outs)) + ")"

    print(f"  pause released {res[0]['freed_mib_1']:.0f} of {res[0]['paused_mib']:.0f} MiB on rank 0")
    print(f"PROBE exportable pools, NCCL_GRAPH_REGISTER default ({_versions(res[0])}): NCCL "
          f"registration lines {reg}; replay after resume {say('after_resume_1')}; eager after "
          f"resume {say('eager_after_resume')}; re-captured graph {say('recaptured')}")


CASES = {f.__name__: f for f in (eager_host_backup, eager_no_backup, graph_replay_after_resume,
                                 graph_exportable_register_off, graph_exportable_probe)}


# --- skipping --------------------------------------------------------------------------
def _visible_gpus():
    """(count, notes): through torch, which counts without creating a CUDA
    context, or through the driver where torch is missing."""
    try:
        import torch
    except ImportError as e:
        notes = [f"torch is not installed either ({e})"]
        import ctypes
        try:
            cuda = ctypes.CDLL("libcuda.so.1")
        except OSError as e2:
            return 0, [f"no CUDA driver ({e2})"] + notes
        n = ctypes.c_int(0)
        if cuda.cuInit(0) != 0 or cuda.cuDeviceGetCount(ctypes.byref(n)) != 0:
            return 0, ["the CUDA driver found no usable device"] + notes
        return n.value, notes
    return torch.cuda.device_count(), []


def skip_reason():
    n, notes = _visible_gpus()
    if n < WORLD:
        return f"needs {WORLD} GPUs ({n} visible)" + "".join("; " + x for x in notes)
    reason = pyharness.skip_reason("torch")
    if reason:
        return reason
    import torch.distributed as dist
    if not dist.is_available() or not dist.is_nccl_available():
        return "this torch has no NCCL backend (torch.distributed.is_nccl_available() is False)"
    return None


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--rank":
        sys.exit(rank_main(sys.argv[2]))
    if len(sys.argv) == 1:
        reason = skip_reason()
        if reason:
            pyharness.skip(reason)
    sys.exit(pyharness.main(__file__, CASES, needs="torch", probes={"graph_exportable_probe"}))
