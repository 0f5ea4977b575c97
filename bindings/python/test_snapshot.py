"""Memory history and snapshots in PyTorch's format, without PyTorch or a GPU
(host backend): the recorder of libvpmm_history.so driven through its hook
entry points as PyTorch's CUDAPluggableAllocator would drive them, tags and
pauses reaching it through vpmm.region and Pool.pause, the snapshot built
from it, and PyTorch's own snapshot of MemPool memory augmented with pauses.

What holds the format to what PyTorch's readers need:
* every key _snapshot() has on segments, blocks and trace entries;
* memory_viz's segment view walks the trace back from the final state and
  needs every allocated block inside a segment at every step (else it fails
  on the block's segment): replayed here as it does it (MemoryView's
  simulate_memory);
* its trace view pairs each alloc with one free (process_alloc_data);
* its pickle reader takes protocols 2-4 and a fixed set of opcodes;
* categories include "unknown" whenever there are any (memory_viz adds it
  under a misspelt name otherwise, and fails);
* `vpmm replay` and `vpmm plot` read the dumped file.
Environment (meson sets it): VPMM_LIBRARY, VPMM_BACKEND=host, VPMM_TOOL."""
import os
import pickle
import pickletools
import subprocess
import sys
import tempfile
import textwrap
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import vpmm  # noqa: E402
from vpmm import _snapshot as S  # noqa: E402

MIB = 1 << 20
VIZ_OPCODES = {"PROTO", "FRAME", "EMPTY_DICT", "EMPTY_LIST", "EMPTY_TUPLE", "MEMOIZE", "BINPUT", "LONG_BINPUT",
               "BINGET", "LONG_BINGET", "MARK", "SETITEM", "SETITEMS", "APPEND", "APPENDS", "DICT", "LIST",
               "TUPLE", "TUPLE1", "TUPLE2", "TUPLE3", "BININT", "BININT1", "BININT2", "LONG1", "BINFLOAT",
               "NEWTRUE", "NEWFALSE", "NONE", "SHORT_BINUNICODE", "BINUNICODE", "STOP"}
SEGMENT_KEYS = {"device", "address", "total_size", "allocated_size", "active_size", "requested_size", "stream",
                "segment_type", "segment_pool_id", "is_expandable", "frames", "blocks"}
BLOCK_KEYS = {"address", "size", "requested_size", "state", "frames"}


def viz_consistent(test, snap, device=0):
    """memory_viz's MemoryView.simulate_memory, backwards from the final
    state over every event: every allocated block must lie in a segment at
    every step, and a freed segment must exist. Also its trace view's
    pairing: each alloc is freed at most once."""
    segs = {s["address"]: s["total_size"] for s in snap["segments"] if s["device"] == device}
    blocks = {b["address"]: b["size"] for s in snap["segments"] if s["device"] == device
              for b in s["blocks"] if b["state"] == "active_allocated"}
    trace = snap["device_traces"][device]

    def check(i):
        for a in blocks:
            test.assertTrue(any(sa <= a < sa + ss for sa, ss in segs.items()),
                            f"event {i}: block {a:#x} in no segment")
    check(len(trace))
    for i in range(len(trace) - 1, -1, -1):
        e = trace[i]
        act = e["action"]
        if act == "alloc":
            blocks.pop(e["addr"], None)
        elif act == "free_completed":
            blocks[e["addr"]] = e["size"]
        elif act in ("segment_free", "segment_unmap"):
            segs[e["addr"]] = e["size"]
        elif act in ("segment_alloc", "segment_map"):
            test.assertIn(e["addr"], segs, f"event {i}: {act} of a segment that is not there")
            del segs[e["addr"]]
        check(i)
    live = set()
    for e in trace:
        if e["action"] == "alloc":
            test.assertNotIn(e["addr"], live, "allocated twice without a free")
            live.add(e["addr"])
        elif e["action"] == "free_completed":
            live.discard(e["addr"])


def check_format(test, snap):
    test.assertIn("segments", snap)
    test.assertIn("device_traces", snap)
    for s in snap["segments"]:
        test.assertLessEqual(SEGMENT_KEYS, set(s))
        for b in s["blocks"]:
            test.assertLessEqual(BLOCK_KEYS, set(b))
    cats = {e["category"] for t in snap["device_traces"] for e in t if "category" in e}
    if cats:
        test.assertIn("unknown", cats)
    # Entries of libvpmm's own (a history, or what augment inserted) carry
    # every key PyTorch's do when it records stacks; PyTorch's own entries
    # may lack frames (no context) and are PyTorch's business.
    ours_only = snap.get("vpmm", {}).get("pytorch_reserved") is not False
    for t in snap["device_traces"]:
        for e in t:
            test.assertIn("action", e)
            test.assertIn("size", e)
            if ours_only and not str(e.get("user_metadata") or "").startswith("vpmm"):
                continue
            test.assertIn("time_us", e)
            test.assertIn("frames", e)
            if e["action"] != "oom":
                test.assertIn("addr", e)
    ops = {op.name for op, _, _ in pickletools.genops(pickle.dumps(snap, protocol=4))}
    test.assertLessEqual(ops, VIZ_OPCODES, f"opcodes memory_viz cannot read: {ops - VIZ_OPCODES}")


class Recorder(unittest.TestCase):
    """The recording hooks on the host backend's default pool."""

    @classmethod
    def setUpClass(cls):
        h = S.history
        if not h.available():
            raise unittest.SkipTest(f"no {S.HISTORY_LIBRARY} beside {vpmm.library_path()}")
        cls.lib = h.require()
        assert S.install_observers()

    def malloc(self, size):
        p = self.lib.vpmm_history_torch_malloc(size, 0, None)
        self.assertTrue(p, vpmm.library_path())
        return p

    def free(self, p, size):
        self.lib.vpmm_history_torch_free(p, size, 0, None)

    def tearDown(self):
        S.history.stop()

    def test_off_records_nothing(self):
        S.history.start(16)
        S.history.stop()
        p = self.malloc(MIB)
        self.free(p, MIB)
        self.assertEqual(S.history.read()[0], [])

    def test_a_paused_training_step(self):
        h = S.history
        h.start(10000, stacks=True)
        with vpmm.region("weights", host_backup=True):
            w = [self.malloc(8 * MIB), self.malloc(8 * MIB)]
        with vpmm.region("optimizer", host_backup=True, backup_store="mmap"):
            o = self.malloc(16 * MIB)
        acts = [self.malloc(4 * MIB) for _ in range(3)]
        small = self.malloc(4096)
        for a in acts:
            self.free(a, 4 * MIB)
        pool = vpmm.default_pool(0)
        self.assertTrue(pool.pause("weights"))
        self.assertTrue(pool.pause("optimizer"))
        self.assertTrue(pool.resume("weights"))
        events, dropped = h.read()
        strings = h.strings(events)
        self.assertEqual(dropped, 0)
        kinds = [e["action"] for e in events]
        self.assertEqual(kinds.count(S.ALLOC), 7)
        self.assertEqual(kinds.count(S.FREE), 3)
        self.assertGreaterEqual(kinds.count(S.PAUSE), 2)
        scopes = {S.parse_scope(strings[e["scope"]]) for e in events if e["scope"]}
        self.assertIn(("weights", "pinned"), scopes)
        self.assertIn(("optimizer", "mmap"), scopes)
        self.assertTrue(all(e["mapped"] > 0 for e in events if e["action"] == S.ALLOC))
        self.assertEqual([e["seq"] for e in events], list(range(1, len(events) + 1)))

        snap = S.snapshot_from_history(events, strings, h.frames, [0], dropped)
        check_format(self, snap)
        viz_consistent(self, snap)
        # At the end: the weights resumed, the optimizer paused (no memory,
        # listed under "vpmm"), the small block untagged.
        seg_tags = sorted((s["vpmm_tag"] or "", s["total_size"]) for s in snap["segments"])
        self.assertEqual(seg_tags, [("", 4096), ("weights", 8 * MIB), ("weights", 8 * MIB)])
        paused = snap["vpmm"]["devices"][0]["paused_at_dump"]
        self.assertEqual([(p["address"], p["tag"], p["backup_store"]) for p in paused], [(o, "optimizer", "mmap")])
        trace = snap["device_traces"][0]
        pause_frees = [e for e in trace if e["action"] == "free_completed" and e.get("vpmm_paused")]
        self.assertEqual(sorted(e["addr"] for e in pause_frees), sorted(w + [o]))
        self.assertTrue(all("vpmm paused tag=" in e["user_metadata"] for e in pause_frees))
        resumed = [e for e in trace if e["action"] == "alloc" and "resumed" in e.get("user_metadata", "")]
        self.assertEqual(sorted(e["addr"] for e in resumed), sorted(w))
        cats = {e["category"] for e in trace if e["action"] == "alloc"}
        self.assertEqual(cats, {"weights", "optimizer", "unknown"})
        # Every event of a pause or resume names the tag and backup store of
        # the memory that left or came back.
        whose = {p: ("weights", "pinned") for p in w}
        whose[o] = ("optimizer", "mmap")
        moves = [e for e in trace if e.get("vpmm_paused") or "resumed" in e.get("user_metadata", "")]
        self.assertEqual(len(moves), 3 * 3 + 2 * 2, [e["action"] for e in moves])
        for e in moves:
            self.assertEqual((e.get("vpmm_tag"), e.get("vpmm_backup_store")), whose[e["addr"]], e)
        # Python stacks: this test's frame is in each allocation's frames.
        allocs = [e for e in trace if e["action"] == "alloc"]
        self.assertTrue(all(any(f["name"] == "malloc" and f["filename"] == __file__ for f in e["frames"])
                            for e in allocs))
        self.assertEqual(allocs[0]["frames"][0]["name"], "malloc", "innermost frame first, as PyTorch")
        self.free(small, 4096)
        for p in w:
            self.free(p, 8 * MIB)
        self.assertTrue(pool.resume("optimizer"))
        self.free(o, 16 * MIB)

    def test_a_full_ring_keeps_the_newest(self):
        S.history.start(4)
        ps = [self.malloc(MIB) for _ in range(5)]
        for p in ps:
            self.free(p, MIB)
        events, dropped = S.history.read()
        self.assertEqual(len(events), 4)
        self.assertEqual(dropped, 6)
        self.assertEqual([e["seq"] for e in events], [7, 8, 9, 10])
        snap = S.snapshot_from_history(events, {}, None, [0], dropped)
        check_format(self, snap)
        viz_consistent(self, snap)  # frees of allocations before the window
        self.assertEqual(snap["vpmm"]["dropped_events"], 6)

    def test_the_tools_read_the_file(self):
        tool = os.environ.get("VPMM_TOOL")
        if not tool:
            self.skipTest("VPMM_TOOL is not set")
        S.history.start(1000)
        keep = []
        with vpmm.region("kv", host_backup=True):
            for i in range(20):
                keep.append(self.malloc((i % 5 + 1) * MIB))
                if i % 3 == 2:
                    self.free(keep.pop(0), 0)
        vpmm.default_pool(0).pause("kv")
        vpmm.default_pool(0).resume("kv")
        events, dropped = S.history.read()
        snap = S.snapshot_from_history(events, S.history.strings(events), None, [0], dropped)
        with tempfile.TemporaryDirectory() as d:
            for name in ("s.pickle", "s.pickle.gz"):
                path = os.path.join(d, name)
                S.dump(snap, path)
                r = subprocess.run([tool, "replay", "--backend", "host", "--check", "--timeline",
                                    os.path.join(d, "t.csv"), path], capture_output=True, text=True)
                self.assertEqual(r.returncode, 0, r.stderr)
                self.assertIn("PyTorch snapshot", r.stdout)
                r = subprocess.run([tool, "plot", os.path.join(d, "t.csv"), "-o", os.path.join(d, "t.svg")],
                                   capture_output=True, text=True)
                self.assertEqual(r.returncode, 0, r.stderr)
        for p in keep:
            self.free(p, 0)


def torch_like_snapshot():
    """What PyTorch's _snapshot() holds for one libvpmm MemPool segment of
    8 MiB (pool id (1, 0)) with two blocks, and one segment of its own."""
    base, other = 0x7f0000000000, 0x7f1000000000
    fr = [{"filename": "train.py", "line": 3, "name": "step"}]

    def ev(action, addr, size, t, **kw):
        e = {"action": action, "addr": addr, "size": size, "stream": 0, "time_us": t, "frames": fr}
        e.update(kw)
        return e
    trace = [ev("segment_alloc", base, 8 * MIB, 100), ev("alloc", base, 2 * MIB, 101),
             ev("alloc", base + 2 * MIB, 4 * MIB, 102), ev("segment_alloc", other, 2 * MIB, 103),
             ev("alloc", other, MIB, 104),
             ev("free_requested", other, MIB, 300), ev("free_completed", other, MIB, 301)]

    def seg(addr, size, pool, blocks):
        return {"device": 0, "address": addr, "total_size": size, "allocated_size": 0, "active_size": 0,
                "requested_size": 0, "stream": 0, "segment_type": "large", "segment_pool_id": pool,
                "is_expandable": False, "frames": [], "blocks": blocks}
    blk = lambda a, s, st="active_allocated": {"address": a, "size": s, "requested_size": s, "state": st,
                                                "frames": fr}
    return {"segments": [seg(base, 8 * MIB, (1, 0), [blk(base, 2 * MIB), blk(base + 2 * MIB, 4 * MIB),
                                                     blk(base + 6 * MIB, 2 * MIB, "inactive")]),
                         seg(other, 2 * MIB, (0, 0), [blk(other, 2 * MIB, "inactive")])],
            "device_traces": [trace], "allocator_settings": {}}, base


def note(action, addr, size, t, nid=0):
    return {"action": action, "device": 0, "scope": 0, "note": nid, "seq": 0, "addr": addr, "size": size,
            "stream": 0, "time_us": t, "context": 0, "mapped": 0, "remapped": 0}


class AugmentTorchSnapshot(unittest.TestCase):
    """pool(tag): PyTorch's snapshot with libvpmm's pauses inserted."""

    def test_pause_and_resume_within_the_trace(self):
        snap, base = torch_like_snapshot()
        events = [note(S.PAUSE, base, 8 * MIB, 200, 1), note(S.RESUME, base, 8 * MIB, 250, 2)]
        out = S.augment_torch_snapshot(snap, events, {1: "vpmm paused tag=w", 2: "vpmm resumed tag=w"},
                                       {(1, 0): ("w", "pinned")}, {0: []})
        check_format(self, out)
        viz_consistent(self, out)
        acts = [(e["action"], e["addr"] - base if e["addr"] >= base and e["addr"] < base + 8 * MIB else None)
                for e in out["device_traces"][0]]
        i = acts.index(("segment_free", 0))
        self.assertEqual(acts[i - 4:i], [("free_requested", 0), ("free_completed", 0),
                                          ("free_requested", 2 * MIB), ("free_completed", 2 * MIB)])
        j = acts.index(("segment_alloc", 0), i)
        self.assertEqual(acts[j + 1:j + 3], [("alloc", 0), ("alloc", 2 * MIB)])
        self.assertLess(i, j)
        self.assertLess(j, acts.index(("free_requested", None)), "inserted by time, before t=300")
        seg = [s for s in out["segments"] if s["address"] == base][0]
        self.assertEqual((seg["vpmm_tag"], seg["vpmm_backup_store"], seg["vpmm_paused"]), ("w", "pinned", False))
        self.assertEqual(len(snap["device_traces"][0]), 7, "the input is left alone")
        inserted = [e for e in out["device_traces"][0] if str(e.get("user_metadata", "")).startswith("vpmm")]
        self.assertEqual(len(inserted), 5 + 3)
        for e in inserted:
            self.assertEqual((e.get("vpmm_tag"), e.get("vpmm_backup_store")), ("w", "pinned"), e)

    def test_the_note_names_the_tag_of_a_segment_of_unknown_tag(self):
        snap, base = torch_like_snapshot()
        out = S.augment_torch_snapshot(snap, [note(S.PAUSE, base, 8 * MIB, 200, 1)], {1: "vpmm paused tag=w"},
                                       {(1, 0): (None, "pinned")}, {0: []})
        inserted = [e for e in out["device_traces"][0] if e.get("vpmm_paused")]
        self.assertEqual(len(inserted), 5)
        self.assertEqual({(e["vpmm_tag"], e["vpmm_backup_store"]) for e in inserted}, {("w", "pinned")})
        self.assertEqual(S._note_tag("vpmm paused"), None)
        self.assertEqual(S._note_tag("vpmm resumed tag=kv cache"), "kv cache")

    def test_paused_at_the_dump(self):
        snap, base = torch_like_snapshot()
        out = S.augment_torch_snapshot(snap, [note(S.PAUSE, base, 8 * MIB, 200)], {},
                                       {(1, 0): ("w", None)}, {0: [(base, 8 * MIB)]})
        check_format(self, out)
        viz_consistent(self, out)
        self.assertNotIn(base, [s["address"] for s in out["segments"]], "no memory while paused")
        self.assertEqual(out["vpmm"]["devices"][0]["paused_at_dump"][0]["address"], base)


def run_with_stand_in_torch(test, d, script, **env):
    """Runs `script` in a new Python whose `import torch` finds FAKE_TORCH
    (written into the folder d), with `env` added to the environment; fails
    `test` unless it exits 0, and returns its stdout."""
    os.makedirs(os.path.join(d, "torch"), exist_ok=True)
    with open(os.path.join(d, "torch", "__init__.py"), "w") as f:
        f.write(FAKE_TORCH)
    with open(os.path.join(d, "torch", "multiprocessing.py"), "w") as f:
        f.write(FAKE_TORCH_MULTIPROCESSING)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([d, os.path.dirname(os.path.abspath(__file__))]), **env)
    r = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True)
    test.assertEqual(r.returncode, 0, r.stdout + r.stderr)
    return r.stdout


class TorchFacade(unittest.TestCase):
    """vpmm.torch's record_memory_history / dump_snapshot after
    use_as_allocator(), against a stand-in torch whose pluggable allocator
    calls the entry points vpmm.torch gives it."""

    def test_use_as_allocator_marks_optimizer_steps(self):
        with tempfile.TemporaryDirectory() as d:
            # torch.optim.optimizer's global step hook, as PyTorch >= 2.0 has it.
            os.makedirs(os.path.join(d, "torch", "optim"))
            with open(os.path.join(d, "torch", "optim", "__init__.py"), "w") as f:
                f.write("")
            with open(os.path.join(d, "torch", "optim", "optimizer.py"), "w") as f:
                f.write("HOOKS = []\n"
                        "def register_optimizer_step_post_hook(hook):\n"
                        "    HOOKS.append(hook)\n"
                        "    return len(HOOKS)\n")
            script = textwrap.dedent("""
                import torch, vpmm, vpmm.torch as vt
                from torch.optim import optimizer
                vt.use_as_allocator()
                vt.use_as_allocator()  # idempotent: one hook
                assert len(optimizer.HOOKS) == 1, optimizer.HOOKS
                A = torch.cuda.memory.current
                for step in range(3):  # an optimizer's step() ends by calling the global hooks
                    x = A.malloc(4 << 20)
                    A.free(x, 4 << 20)
                    optimizer.HOOKS[0](object(), (), {})
                s = vt.memory_stats()
                assert s["vpmm.n_steps"] == 2, s["vpmm.n_steps"]
                assert s["vpmm.steps_ns"] >= s["vpmm.steps_driver_ns"] and s["vpmm.last_step_ns"] > 0, s
                vt.mark_step()  # by hand, for a loop without an optimizer
                assert vt.memory_stats()["vpmm.n_steps"] == 3
                print("ok")
            """)
            self.assertIn("ok", run_with_stand_in_torch(self, d, script))

    def test_use_as_allocator_path(self):
        tool = os.environ.get("VPMM_TOOL")
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "snap.pickle")
            script = textwrap.dedent(f"""
                import torch, vpmm, vpmm.torch as vt
                vt.use_as_allocator()
                vt.record_memory_history(stacks="python")
                A = torch.cuda.memory.current
                with vt.pool("weights", host_backup=True):
                    w = A.malloc(8 << 20)
                x = A.malloc(2 << 20)
                A.free(x, 2 << 20)
                assert vt.pause("weights") and vt.resume("weights") and vt.pause("weights")
                path = vt.dump_snapshot({out!r})
                vt.record_memory_history(None)
                print("dumped", path)
            """)
            run_with_stand_in_torch(self, d, script)
            with open(out, "rb") as f:
                snap = pickle.load(f)
            check_format(self, snap)
            viz_consistent(self, snap)
            self.assertEqual(snap["segments"], [], "the weights are paused, the rest freed")
            self.assertEqual(snap["vpmm"]["devices"][0]["paused_at_dump"][0]["tag"], "weights")
            self.assertIn("pool_stats", snap["vpmm"]["devices"][0])
            # The pauses and the resume name the tag and the backup store.
            moves = [e for e in snap["device_traces"][0]
                     if e.get("vpmm_paused") or "resumed" in e.get("user_metadata", "")]
            self.assertEqual(len(moves), 3 + 2 + 3)
            self.assertEqual({(e.get("vpmm_tag"), e.get("vpmm_backup_store")) for e in moves}, {("weights", "pinned")})
            names = {f["name"] for e in snap["device_traces"][0] for f in e["frames"]}
            self.assertIn("<module>", names)
            if tool:
                r = subprocess.run([tool, "replay", "--backend", "host", "--summary", out], capture_output=True,
                                   text=True)
                self.assertEqual(r.returncode, 0, r.stderr)


class TorchRecordStream(unittest.TestCase):
    """Tensor.record_stream under use_as_allocator(): vpmm.torch gives the
    pluggable allocator vpmm_torch_record_stream (the stand-in torch calls it
    as PyTorch's recordStream would), and a tensor read on another stream
    whose work is still queued is not handed out again on its own stream
    before that work (host streams: a held stream's work is in flight)."""

    def test_record_stream_orders_reuse(self):
        with tempfile.TemporaryDirectory() as d:
            script = textwrap.dedent("""
                import ctypes, torch, vpmm, vpmm.torch as vt
                from vpmm import _library as L
                vt.use_as_allocator()
                assert vt.record_stream_supported
                A = torch.cuda.memory.current
                lib = L.lib
                lib.vpmm_host_stream_synchronize.argtypes = [ctypes.c_void_p]
                def stream():
                    s = ctypes.c_void_p()
                    assert lib.vpmm_host_stream_create(ctypes.byref(s)) == 0
                    return s.value
                own, other = stream(), stream()
                n = 4 << 20
                p = A.malloc(n, own)
                assert lib.vpmm_host_stream_hold(ctypes.c_void_p(other)) == 0  # other's read of p in flight
                A.record_stream(p, other)
                A.free(p, n, own)
                q = A.malloc(n, own)
                # Reused at once only with own waiting for other's work (WRONG_STATE: other is held).
                assert q != p or lib.vpmm_host_stream_synchronize(ctypes.c_void_p(own)) != 0, \
                    "handed out again on its own stream, ahead of the other stream's queued work"
                assert lib.vpmm_host_stream_release(ctypes.c_void_p(other)) == 0
                assert lib.vpmm_host_stream_synchronize(ctypes.c_void_p(other)) == 0
                A.free(q, n, own)
                print("ok")
            """)
            self.assertIn("ok", run_with_stand_in_torch(self, d, script, VPMM_BACKEND="host"))


    def test_missing_record_stream_fn_warns_only_for_the_global_allocator(self):
        # A PyTorch whose pluggable allocator takes no record_stream function:
        # MemPools (PyTorch's caching allocator honours record_stream there)
        # stay quiet; use_as_allocator() warns once and says record_stream is
        # not supported.
        with tempfile.TemporaryDirectory() as d:
            script = textwrap.dedent("""
                import warnings, torch, vpmm, vpmm.torch as vt
                del torch.cuda.memory.CUDAPluggableAllocator.set_record_stream_fn
                with warnings.catch_warnings(record=True) as seen:
                    warnings.simplefilter("always")
                    vt.pluggable_allocator()
                    assert not seen, [str(w.message) for w in seen]
                    vt.use_as_allocator()
                    vt.use_as_allocator()
                msgs = [str(w.message) for w in seen]
                assert len(msgs) == 1 and "record_stream" in msgs[0], msgs
                assert not vt.record_stream_supported
                print("ok")
            """)
            self.assertIn("ok", run_with_stand_in_torch(self, d, script, VPMM_BACKEND="host"))


class TorchShare(unittest.TestCase):
    """vpmm.torch.share against the stand-in torch: a tensor shared, its tag
    paused and resumed, shared again: the second share must be a live export
    of the memory as it is now, not the first one (ended by the pause), which
    a receiver could no longer import (seen on the GPU before the fix)."""

    def test_share_after_pause_resume_is_a_live_export(self):
        with tempfile.TemporaryDirectory() as d:
            script = textwrap.dedent("""
                import types, torch, vpmm, vpmm.torch as vt
                from vpmm import _torch_ipc
                vt.use_as_allocator()
                A = torch.cuda.memory.current
                with vt.pool("weights", host_backup=True):
                    w = A.malloc(8 << 20)
                class Tensor:  # what share() reads of a tensor
                    is_cuda = True
                    device = types.SimpleNamespace(index=0)
                    dtype = "torch.float32"
                    shape = (2 << 20,)
                    def data_ptr(self): return w
                    def untyped_storage(self): return self
                    def stride(self): return (1,)
                t = Tensor()
                def live():
                    (s,) = _torch_ipc._sent.values()
                    return s.export._state()[0]
                # Nothing shared yet: a resume prepares no exports.
                assert vt.pause("weights") and vt.resume("weights")
                assert "weights" not in vt.sharing_ahead, vt.sharing_ahead
                first = vt.share(t)
                assert live() == "active", live()
                assert vt.share(t).handle.descriptor == first.handle.descriptor, "one export while it lasts"
                assert vt.pause("weights") and vt.resume("weights")
                # Shared before: the resume prepared the next send's exports.
                fut = vt.sharing_ahead["weights"]
                assert fut.result(timeout=60) >= 1, "no handle prepared"
                again = vt.share(t)
                assert live() == "active", "the export sent after the resume is " + live()
                assert again.handle.descriptor != first.handle.descriptor
                vt.release_shared()
                assert vt.pause("weights") and vt.resume("weights", prepare_share=False)
                assert vt.sharing_ahead["weights"] is fut, "prepare_share=False started another"
                print("ok")
            """)
            self.assertIn("ok", run_with_stand_in_torch(self, d, script, VPMM_EXPORTABLE="1"))

class TorchPinAhead(unittest.TestCase):
    """A tagged block with a pinned host backup pins its backups in the
    background when it ends (vpmm.region under use_as_allocator(), and
    pool()), so that the first pause pins nothing: the pinned bytes are
    counted in stats (backup_cache_bytes, then in use) and bounded by
    backup_pinned_limit; pin_ahead=False, set_pin_ahead(False),
    VPMM_PIN_AHEAD=0 and the other stores pin nothing ahead."""

    def test_blocks_pin_their_backups_ahead(self):
        with tempfile.TemporaryDirectory() as d:
            script = textwrap.dedent("""
                import warnings, torch, vpmm, vpmm.torch as vt
                warnings.simplefilter("error")  # a failed or pointless pinning would warn
                vt.use_as_allocator()
                A = torch.cuda.memory.current
                pool = vt.default_pool(0)
                MiB = 1 << 20
                assert vt.pin_ahead_enabled()
                with vpmm.region("weights", host_backup=True):
                    w = A.malloc(8 * MiB)
                    ctypes = __import__("ctypes"); ctypes.memset(w, 0x5a, 8 * MiB)
                assert vt.pinning_ahead["weights"].result(timeout=60) >= 8 * MiB
                st = pool.stats()
                assert st["backup_cache_bytes"] >= 8 * MiB and st["backup_pinned_bytes"] >= 8 * MiB, st
                pinned = st["backup_pinned_bytes"]
                assert vt.pause("weights")
                st = pool.stats()
                assert st["backup_pinned_bytes"] == pinned, ("the first pause pinned again", pinned, st)
                assert st["backup_cache_bytes"] == 0 and st["backup_bytes"] >= 8 * MiB, st
                assert vt.resume("weights") and ctypes.string_at(w + 8 * MiB - 1, 1) == b"\\x5a"
                # pool() under use_as_allocator pins the same way; pin_ahead=False does not.
                with vt.pool("opt", host_backup=True):
                    o = A.malloc(4 * MiB)
                assert vt.pinning_ahead["opt"].result(timeout=60) >= 4 * MiB
                with vt.pool("kv", host_backup=True, pin_ahead=False):
                    k = A.malloc(4 * MiB)
                with vpmm.region("mm", host_backup=True, backup_store="mmap"):
                    m = A.malloc(4 * MiB)
                with vpmm.region("nothing", host_backup=True):
                    pass
                assert vt.pinning_ahead["nothing"].result(timeout=60) == 0
                vt.set_pin_ahead(False)
                with vpmm.region("late", host_backup=True):
                    l = A.malloc(4 * MiB)
                assert not {"kv", "mm", "late"} & set(vt.pinning_ahead), vt.pinning_ahead
                vt.set_pin_ahead(True)
                # A region inside pool() pins for itself.
                with vt.pool("outer", host_backup=True, pin_ahead=False):
                    with vpmm.region("inner", host_backup=True):
                        i = A.malloc(2 * MiB)
                assert "outer" not in vt.pinning_ahead and vt.pinning_ahead["inner"].result(timeout=60) > 0
                print("ok")
            """)
            self.assertIn("ok", run_with_stand_in_torch(self, d, script, VPMM_BACKEND="host"))

    def test_the_pinned_limit_bounds_it_and_the_switch_turns_it_off(self):
        with tempfile.TemporaryDirectory() as d:
            script = textwrap.dedent("""
                import ctypes, torch, vpmm, vpmm.torch as vt
                vt.use_as_allocator()
                A = torch.cuda.memory.current
                pool = vt.default_pool(0)
                MiB = 1 << 20
                with vpmm.region("a", host_backup=True):
                    a = [A.malloc(2 * MiB) for _ in range(4)]
                for p in a:
                    ctypes.memset(p, 0x33, 2 * MiB)
                vt.pinning_ahead["a"].result(timeout=60)
                st = pool.stats()
                assert 0 < st["backup_pinned_bytes"] <= 5 * MiB, st
                assert vt.pause("a") and vt.resume("a")  # the rest in pageable memory, bytes kept
                assert all(ctypes.string_at(p + 2 * MiB - 1, 1) == b"\\x33" for p in a)
                print("ok")
            """)
            self.assertIn("ok", run_with_stand_in_torch(self, d, script, VPMM_BACKEND="host",
                                                        VPMM_BACKUP_PINNED_LIMIT="5M"))
            script = textwrap.dedent("""
                import torch, vpmm, vpmm.torch as vt
                vt.use_as_allocator()
                A = torch.cuda.memory.current
                assert not vt.pin_ahead_enabled()
                with vpmm.region("a", host_backup=True):
                    a = A.malloc(1 << 20)
                with vt.pool("b", host_backup=True):
                    b = A.malloc(1 << 20)
                assert not vt.pinning_ahead and vt.default_pool(0).stats()["backup_pinned_bytes"] == 0
                with vt.pool("c", host_backup=True, pin_ahead=True):  # asked for: still pins
                    c = A.malloc(1 << 20)
                assert vt.pinning_ahead["c"].result(timeout=60) > 0
                print("ok")
            """)
            self.assertIn("ok", run_with_stand_in_torch(self, d, script, VPMM_BACKEND="host", VPMM_PIN_AHEAD="0"))


# What both sides of a send compare: a message's structure, with each
# tensor's class, dtype, shape, stride, requires_grad and bytes.
DESCRIBE = """
import collections, hashlib, torch
def describe(o):
    if isinstance(o, torch.Tensor):
        return ["tensor", type(o).__name__, str(o.dtype), list(o.shape), list(o.stride()), o.requires_grad,
                hashlib.sha1(o.tobytes()).hexdigest()]
    if isinstance(o, dict):
        return [type(o).__name__, [[describe(k), describe(v)] for k, v in o.items()],
                describe(getattr(o, "_metadata", None))]
    if isinstance(o, (list, tuple)):
        return [type(o).__name__, [describe(v) for v in o]]
    if hasattr(o, "__dict__"):
        return [type(o).__name__, describe(vars(o))]
    return o
"""

# The receiver: a separate Python on the other end of a multiprocessing
# Connection (ForkingPickler's loads), answering with what it received.
CONTAINER_RECEIVER = DESCRIBE + """
import gc, json, os, vpmm.torch as vt
from multiprocessing.connection import Connection
conn = Connection(int(os.environ["RECEIVER_FD"]))
pool = vt.default_pool(0)
got = None
while True:
    cmd = conn.recv()
    if cmd == "stop":
        break
    if cmd == "drop":
        got = None
        gc.collect()
        conn.send(pool.ipc_stats()["imports"])
        continue
    if isinstance(cmd, tuple) and cmd[0] == "write":  # into the dict's tensor cmd[1]
        got[cmd[1]].write(cmd[2])
        conn.send("written")
        continue
    if isinstance(cmd, tuple) and cmd[0] == "read":
        conn.send(got[cmd[1]].tobytes()[:len(cmd[2])] == cmd[2])
        continue
    before = pool.ipc_stats()["n_imports"]
    got = conn.recv() if cmd == "message" else __import__("pickle").loads(conn.recv_bytes())
    conn.send((describe(got), pool.ipc_stats()["n_imports"] - before))
"""


class TorchContainers(unittest.TestCase):
    """install_reductions(): every container of libvpmm tensors a message
    holds (a plain dict, an OrderedDict state dict with _metadata, a list, a
    tuple, (name, tensor) pairs, nested) goes through a real multiprocessing
    Connection (ForkingPickler) as one export of the sender's pool, mapped by
    the receiver (another process) with one import: the bytes identical,
    Parameters and requires_grad kept, writes seen both ways, a CPU tensor
    and a CUDA tensor libvpmm does not own sent by PyTorch's own reductions,
    and a re-send after pause/resume one export again."""

    def test_every_container_is_one_export(self):
        with tempfile.TemporaryDirectory() as d:
            script = DESCRIBE + textwrap.dedent("""
                import collections, ctypes, gc, io, os, socket, subprocess, sys, types
                import torch, vpmm, vpmm.torch as vt
                from multiprocessing.connection import Connection
                from multiprocessing.reduction import ForkingPickler
                vt.use_as_allocator()
                vt.install_reductions()
                A = torch.cuda.memory.current
                pool = vt.default_pool(0)
                sys.path.insert(0, os.environ["REQUEST_DIR"])
                from request import Request  # a dataclass the receiver can import too
                def tensor(nbytes, fill):
                    t = torch.cuda_tensor(A.malloc(nbytes), nbytes)
                    t.write(bytes([fill]) * nbytes)
                    return t
                with vt.pool("weights", host_backup=True):
                    ws = [tensor((i + 1) << 20, 10 + i) for i in range(4)]
                ws[0].write(bytes(range(256)) * 16)
                param = torch.nn.Parameter(ws[3])
                foreign_buf = ctypes.create_string_buffer(4096)
                foreign = torch.cuda_tensor(ctypes.addressof(foreign_buf), 4096)  # CUDA, not libvpmm's
                sd = collections.OrderedDict((f"layer.{i}.weight", w) for i, w in enumerate(ws))
                sd._metadata = collections.OrderedDict({"": {"version": 1}, "layer": {"version": 2}})
                shapes = {
                    "dict": {k: v.detach() for k, v in sd.items()},
                    "ordered": sd,
                    "list": list(ws),
                    "tuple": tuple(ws),
                    "pairs": list(sd.items()),
                    "nested": {"model": {"layers": [ws[0], (ws[1], {"w": ws[2]})], "p": param},
                               "step": 7, "view": ws[0][16:32], "cpu": torch.cpu_tensor(b"cpu bytes!"),
                               "set": frozenset({"a"}), "again": ws[0]},
                }
                a, b = socket.socketpair()
                rx = subprocess.Popen([sys.executable, "-c", RECEIVER], env=dict(os.environ, RECEIVER_FD=str(b.fileno())),
                                      pass_fds=(b.fileno(),))
                b.close()
                conn = Connection(a.detach())
                def send(obj, direct=False, expect=None):
                    before = pool.ipc_stats()["n_exports"]
                    if direct:  # SGLang's MultiprocessingSerializer: ForkingPickler(buf).dump(obj)
                        buf = io.BytesIO()
                        ForkingPickler(buf).dump(obj)
                        exports = pool.ipc_stats()["n_exports"] - before
                        conn.send("bytes")
                        conn.send_bytes(buf.getvalue())
                    else:
                        conn.send("message")
                        conn.send(obj)
                        exports = pool.ipc_stats()["n_exports"] - before
                    seen, imports = conn.recv()
                    want = describe(obj if expect is None else expect)
                    assert seen == want, (seen, want)
                    return exports, imports
                for name, obj in shapes.items():
                    assert send(obj) == (1, 1), (name, "exports and imports of one send")
                    if name == "dict":  # the receiver maps the sender's memory: writes go both ways
                        conn.send(("write", "layer.1.weight", b"from the receiver"))
                        assert conn.recv() == "written"
                        assert ws[1].tobytes().startswith(b"from the receiver")
                        ws[2].write(b"from the sender")
                        conn.send(("read", "layer.2.weight", b"from the sender"))
                        assert conn.recv() is True, "the receiver does not see the sender's write"
                    conn.send("drop")
                    assert conn.recv() == 0, "the receiver's import outlived its tensors"
                assert send(shapes["pairs"], direct=True) == (1, 1)
                conn.send("drop"); conn.recv()
                # Only PyTorch's reductions for what libvpmm does not own.
                cpu = torch.cpu_tensor(b"x" * 8)
                assert send({"cpu": cpu, "foreign": foreign, "n": 3},
                            expect={"cpu": cpu, "foreign": ("cuda-ipc", foreign.data_ptr()), "n": 3}) == (0, 0)
                # Objects pickled by their __dict__ (a dataclass) are walked too; a
                # tensor inside an object with a reducer of its own (SimpleNamespace
                # has __reduce__) is not: one export of its own.
                assert send({"sd": shapes["dict"], "req": Request("update", list(sd.items()))}) == (1, 1)
                conn.send("drop"); conn.recv()
                assert send({"sd": shapes["dict"], "obj": types.SimpleNamespace(w=torch.cuda_tensor(
                    A.malloc(1 << 20), 1 << 20))}) == (2, 2)
                conn.send("drop"); conn.recv()
                # After a pause and resume (new memory, the bytes restored from the
                # backup), the exports were prepared ahead; the re-send is one export.
                assert vt.pause("weights") and vt.resume("weights")
                assert vt.sharing_ahead["weights"].result(timeout=60) >= 4
                assert send(shapes["dict"]) == (1, 1)
                conn.send("drop"); conn.recv()
                # A message that fails to pickle leaves no export behind.
                vt.release_shared()
                made = pool.ipc_stats()["n_exports"]
                try:
                    ForkingPickler.dumps({"w": ws[0], "bad": lambda: 0})
                except Exception:
                    pass
                else:
                    raise AssertionError("a lambda pickled")
                st = pool.ipc_stats()
                assert st["n_exports"] == made + 1 and st["exports"] == 0, ("the failed message's export stayed", st)
                conn.send("stop")
                assert rx.wait(60) == 0
                print("ok")
            """).replace("RECEIVER]", repr(CONTAINER_RECEIVER) + "]")
            with open(os.path.join(d, "request.py"), "w") as f:
                f.write("import dataclasses\n@dataclasses.dataclass\nclass Request:\n    what: str\n"
                        "    named_tensors: list\n")
            self.assertIn("ok", run_with_stand_in_torch(self, d, script, VPMM_BACKEND="host", VPMM_EXPORTABLE="1",
                                                        REQUEST_DIR=d))


# Just what vpmm.torch calls with use_as_allocator(), and a "tensor
# allocator" for the test: the pluggable allocator's own functions, loaded
# from the library and names vpmm.torch gave it, as PyTorch would call them.
FAKE_TORCH = '''
import ctypes, types, contextlib
__version__ = "0.0-fake"

class _Pluggable:
    def __init__(self, path, malloc, free):
        lib = ctypes.CDLL(path)
        self._malloc = getattr(lib, malloc)
        self._malloc.restype, self._malloc.argtypes = ctypes.c_void_p, [ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]
        self._free = getattr(lib, free)
        self._free.restype, self._free.argtypes = None, [ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]
        self.names = (path, malloc, free)
    def allocator(self):
        return self
    def malloc(self, n, stream=None):
        return self._malloc(n, 0, stream)
    def free(self, p, n, stream=None):
        self._free(p, n, 0, stream)
    def set_record_stream_fn(self, address):
        self.record_stream = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)(address)

class _Memory:
    current = None
    CUDAPluggableAllocator = _Pluggable
    @staticmethod
    def change_current_allocator(a):
        _Memory.current = a
    @staticmethod
    def _record_memory_history(*a, **k):
        raise RuntimeError("CUDAPluggableAllocator does not yet support recordHistory")

cuda = types.SimpleNamespace(memory=_Memory, current_device=lambda: 0, synchronize=lambda d=None: None,
                             device=lambda d: contextlib.nullcontext(), MemPool=object)

# Tensors, as far as vpmm.torch's sharing reads and builds them: a pointer,
# shape, stride and dtype over bytes this process can read and write with
# ctypes (host backend memory for "cuda" tensors, a ctypes buffer for CPU).
class dtype:
    def __init__(self, name, itemsize):
        self._name, self.itemsize = name, itemsize
    def __str__(self):
        return "torch." + self._name
    __repr__ = __str__

float32, bfloat16, uint8 = dtype("float32", 4), dtype("bfloat16", 2), dtype("uint8", 1)

class _Device:
    def __init__(self, type, index=None):
        self.type, self.index = type, index
    def __str__(self):
        return self.type if self.index is None else f"{self.type}:{self.index}"

def device(spec):
    if isinstance(spec, _Device):
        return spec
    t, _, i = str(spec).partition(":")
    return _Device(t, int(i) if i else (0 if t == "cuda" else None))

class _Storage:
    def __init__(self, ptr, keep=None):
        self._ptr, self.keep = ptr, keep
    def data_ptr(self):
        return self._ptr

class Tensor:
    def __init__(self, ptr, shape, stride, dt, dev, storage, requires_grad=False):
        self._ptr, self.shape, self._stride, self.dtype = ptr, tuple(shape), tuple(stride), dt
        self.device, self._storage, self.requires_grad = dev, storage, requires_grad
    @property
    def is_cuda(self):
        return self.device.type == "cuda"
    def data_ptr(self):
        return self._ptr
    def numel(self):
        n = 1
        for s in self.shape:
            n *= s
        return n
    def stride(self):
        return self._stride
    def element_size(self):
        return self.dtype.itemsize
    def untyped_storage(self):
        return self._storage
    def detach(self):
        return Tensor(self._ptr, self.shape, self._stride, self.dtype, self.device, self._storage)
    def requires_grad_(self, on=True):
        self.requires_grad = on
        return self
    def view(self, dt):
        return Tensor(self._ptr, (self.numel() * self.dtype.itemsize // dt.itemsize,), (1,), dt, self.device,
                      self._storage)
    def as_strided(self, shape, stride):
        return Tensor(self._ptr, shape, stride, self.dtype, self.device, self._storage)
    def __getitem__(self, sl):  # 1-D slices
        start, stop, _ = sl.indices(self.shape[0])
        return Tensor(self._ptr + start * self.dtype.itemsize, (stop - start,), (1,), self.dtype, self.device,
                      self._storage)
    def tobytes(self):  # contiguous tensors
        return ctypes.string_at(self._ptr, self.numel() * self.dtype.itemsize) if self.numel() else b""
    def write(self, data, offset=0):
        ctypes.memmove(self._ptr + offset, data, len(data))

class Parameter(Tensor):
    def __init__(self, data, requires_grad=True):
        Tensor.__init__(self, data._ptr, data.shape, data._stride, data.dtype, data.device, data._storage,
                        requires_grad)

nn = types.SimpleNamespace(Parameter=Parameter, parameter=types.SimpleNamespace(Parameter=Parameter))

def cpu_tensor(data, dt=uint8):
    buf = ctypes.create_string_buffer(bytes(data), max(len(data), 1))
    n = len(data) // dt.itemsize
    return Tensor(ctypes.addressof(buf), (n,), (1,), dt, _Device("cpu"), _Storage(ctypes.addressof(buf), buf))

def cuda_tensor(ptr, nbytes, dt=float32):
    """The test's tensor over nbytes at ptr (libvpmm's, or anyone's), on cuda:0."""
    return Tensor(ptr, (nbytes // dt.itemsize,), (1,), dt, _Device("cuda", 0), _Storage(ptr))

def empty(shape, dtype=float32, device=None):
    n = 1
    for s in shape:
        n *= s
    t = cpu_tensor(bytes(n * dtype.itemsize), dtype).as_strided(shape, tuple(1 for _ in shape))
    if device is not None and str(device).startswith("cuda"):
        assert n == 0, "the stand-in makes no CUDA memory"
        t.device = globals()["device"](device)
    return t

def as_tensor(obj, device=None):
    iface = obj.__cuda_array_interface__
    ptr, n = iface["data"][0], iface["shape"][0]
    return Tensor(ptr, (n,), (1,), uint8, globals()["device"](device), _Storage(ptr, obj))
'''

# torch.multiprocessing's part: PyTorch's reductions registered with
# ForkingPickler, which install_reductions() must leave to every tensor that
# is not libvpmm's. CUDA tensors travel as their pointer ("CUDA IPC"), so a
# receiver can tell which way a tensor went.
FAKE_TORCH_MULTIPROCESSING = '''
from multiprocessing.reduction import ForkingPickler
import torch

def rebuild_cpu(data, dt):
    return torch.cpu_tensor(data, getattr(torch, dt))

def rebuild_cuda_ipc(ptr):
    return ("cuda-ipc", ptr)

def reduce_tensor(t):
    if t.is_cuda:
        return (rebuild_cuda_ipc, (t.data_ptr(),))
    return (rebuild_cpu, (t.tobytes(), str(t.dtype).replace("torch.", "")))

for cls in (torch.Tensor, torch.Parameter if hasattr(torch, "Parameter") else torch.nn.Parameter):
    ForkingPickler.register(cls, reduce_tensor)
'''


if __name__ == "__main__":
    unittest.main()
