#!/usr/bin/env python3
"""Writes a synthetic PyTorch CUDA memory snapshot (stdlib only: no torch).

The file has the structure torch.cuda.memory._dump_snapshot() writes (a
pickled dict with 'segments', 'device_traces' and 'allocator_settings'), made
by a small model of PyTorch's caching allocator so that the events and the
segments at dump time agree the way real ones do:

  - two streams on device 0 (the default stream, 0, and a side stream given
    by its raw cudaStream_t value), a few events on device 1;
  - requests rounded to 512 bytes; blocks up to 1 MiB from 2 MiB small-pool
    segments, larger ones from 20 MiB segments or a segment of their own;
  - activations in an expandable segment that grows with 'segment_map' and
    shrinks with 'segment_unmap' at empty_cache();
  - record_stream-style frees: 'free_requested' when the program drops the
    tensor, 'free_completed' several events later once the side stream is done;
  - allocations made before recording started: some still live at dump time
    (only 'segments' knows them), some freed during the trace, one whose
    'free_requested' happened before recording (only 'free_completed' is seen);
  - one 'oom' event, and a few events with 'frames' (most have none, as with
    _record_memory_history(context=None)).

Usage:
  make_snapshot.py -o FILE [--protocol N]     # FILE ending in .gz is gzipped
  make_snapshot.py --fuzz-seeds DIR           # small seeds for fuzz/fuzz_snapshot.cpp

The committed tests/data/synthetic_snapshot.pickle.gz is
`make_snapshot.py -o tests/data/synthetic_snapshot.pickle.gz` (protocol 4,
what pickle.dump writes on Python 3.8-3.13); the output is deterministic. It
prints what a replay should report (pre-live allocations, PyTorch's reserved
and allocated peaks) so the C++ side can be checked against this model.
"""
import argparse
import collections
import gzip
import io
import os
import pickle
import random

KiB = 1 << 10
MiB = 1 << 20
SIDE_STREAM = 0x55D1C3A0F2B0  # a raw cudaStream_t, as PyTorch records it
SMALL_LIMIT = 1 * MiB  # requests up to this come from the small pool
SMALL_SEGMENT = 2 * MiB
LARGE_SEGMENT = 20 * MiB  # requests under 10 MiB share a segment this big
EXPANDABLE_GRANULE = 2 * MiB


def round_size(n):
    return max(512, (n + 511) // 512 * 512)


class Block:
    def __init__(self, addr, size, state="inactive", requested=0):
        self.addr, self.size, self.state, self.requested = addr, size, state, requested


class Segment:
    def __init__(self, addr, size, stream, large, expandable=False):
        self.addr, self.size, self.stream, self.large, self.expandable = addr, size, stream, large, expandable
        self.blocks = [Block(addr, size)]


class Allocator:
    """PyTorch's caching allocator for one device, reduced to what the trace shows."""

    def __init__(self, device, va_base, rng):
        self.device = device
        self.rng = rng
        self.next_va = va_base
        self.segments = []
        self.expandable = None
        self.events = []
        self.recording = False
        self.time_us = 1_700_000_000_000_000 + device * 1000
        # What a replay should find, measured while recording.
        self.reserved = 0
        self.allocated = 0
        self.reserved_peak = 0
        self.allocated_peak = 0
        self.seen = set()  # addresses the trace mentions

    # -- recording ---------------------------------------------------------
    def record(self, action, addr, size, stream, frames=None):
        self.time_us += self.rng.randint(3, 400)
        if not self.recording:
            return
        e = {"action": action, "addr": addr, "size": size, "stream": stream, "time_us": self.time_us,
             "compile_context": "N/A", "user_metadata": ""}
        if action == "oom":
            e["device_free"] = e.pop("addr")
        if frames is not None:
            e["frames"] = frames
        self.events.append(e)
        if action in ("alloc", "free_requested", "free_completed"):
            self.seen.add(addr)

    def start_recording(self):
        self.recording = True
        self.reserved_peak = self.reserved
        self.allocated_peak = self.allocated

    def _track(self):
        if self.recording:
            self.reserved_peak = max(self.reserved_peak, self.reserved)
            self.allocated_peak = max(self.allocated_peak, self.allocated)

    # -- segments ----------------------------------------------------------
    def _new_segment(self, size, stream, large):
        seg = Segment(self.next_va, size, stream, large)
        self.next_va += size + 64 * MiB  # gaps, as cudaMalloc leaves them
        self.segments.append(seg)
        self.reserved += size
        self.record("segment_alloc", seg.addr, size, stream)
        self._track()
        return seg

    def _grow_expandable(self, need):
        seg = self.expandable
        grow = (need + EXPANDABLE_GRANULE - 1) // EXPANDABLE_GRANULE * EXPANDABLE_GRANULE
        tail = seg.blocks[-1]
        start = seg.addr + seg.size
        seg.size += grow
        if tail.state == "inactive":
            tail.size += grow
        else:
            seg.blocks.append(Block(start, grow))
        self.reserved += grow
        self.record("segment_map", start, grow, seg.stream)
        self._track()

    # -- blocks ------------------------------------------------------------
    def _find(self, size, stream, large, expandable):
        best = None
        for seg in self.segments:
            if seg.stream != stream or seg.large != large or seg.expandable != expandable:
                continue
            for i, b in enumerate(seg.blocks):
                if b.state == "inactive" and b.size >= size and (best is None or b.size < best[2].size):
                    best = (seg, i, b)
        return best

    def malloc(self, requested, stream, expandable=False, frames=None):
        size = round_size(requested)
        large = size > SMALL_LIMIT
        found = self._find(size, stream, large, expandable)
        if found is None:
            if expandable:
                tail = self.expandable.blocks[-1]
                have = tail.size if tail.state == "inactive" else 0
                self._grow_expandable(size - have)
            elif not large:
                self._new_segment(SMALL_SEGMENT, stream, False)
            else:
                self._new_segment(LARGE_SEGMENT if size < 10 * MiB else
                                  (size + 2 * MiB - 1) // (2 * MiB) * (2 * MiB), stream, True)
            found = self._find(size, stream, large, expandable)
        seg, i, b = found
        # Split off the rest when it is worth keeping apart (PyTorch's rule
        # in spirit: any remainder in the small pool, > 1 MiB in the large).
        rest = b.size - size
        if rest >= (512 if not large else MiB):
            seg.blocks.insert(i + 1, Block(b.addr + size, rest))
            b.size = size
        b.state, b.requested = "active_allocated", requested
        self.allocated += requested
        self.record("alloc", b.addr, requested, stream, frames)
        self._track()
        return b

    def free(self, b, stream, deferred=False):
        """The program drops the tensor; with deferred (record_stream), the
        block returns to the pool only at complete()."""
        self.record("free_requested", b.addr, b.requested, stream)
        self.allocated -= b.requested
        b.state = "active_pending_free"
        self._track()
        if not deferred:
            self.complete(b, stream)

    def complete(self, b, stream):
        self.record("free_completed", b.addr, b.requested, stream)
        b.state = "inactive"
        for seg in self.segments:  # merge with free neighbours
            if b in seg.blocks:
                merged = []
                for x in seg.blocks:
                    if merged and merged[-1].state == "inactive" and x.state == "inactive":
                        merged[-1].size += x.size
                    else:
                        merged.append(x)
                seg.blocks = merged

    def empty_cache(self):
        for seg in list(self.segments):
            if seg.expandable:
                tail = seg.blocks[-1]
                unmap = tail.size // EXPANDABLE_GRANULE * EXPANDABLE_GRANULE if tail.state == "inactive" else 0
                if unmap:
                    tail.size -= unmap  # an empty tail block stays: the next map grows it
                    seg.size -= unmap
                    self.reserved -= unmap
                    self.record("segment_unmap", seg.addr + seg.size, unmap, seg.stream)
            elif len(seg.blocks) == 1 and seg.blocks[0].state == "inactive":
                self.segments.remove(seg)
                self.reserved -= seg.size
                self.record("segment_free", seg.addr, seg.size, seg.stream)

    def add_expandable(self, stream):
        seg = Segment(self.next_va, 0, stream, True, expandable=True)
        seg.blocks = []
        self.next_va += 1 << 40  # expandable segments reserve a huge VA range
        self.segments.append(seg)
        self.expandable = seg
        seg.blocks.append(Block(seg.addr, 0))

    # -- the dump ----------------------------------------------------------
    def segment_dicts(self):
        out = []
        for seg in sorted(self.segments, key=lambda s: s.addr):
            blocks = [b for b in seg.blocks if b.size > 0]
            if not blocks:
                continue
            out.append({
                "device": self.device,
                "address": seg.addr,
                "total_size": seg.size,
                "allocated_size": sum(b.size for b in blocks if b.state == "active_allocated"),
                "active_size": sum(b.size for b in blocks if b.state != "inactive"),
                "requested_size": sum(b.requested for b in blocks if b.state != "inactive"),
                "stream": seg.stream,
                "segment_type": "large" if seg.large else "small",
                "segment_pool_id": (0, 0),
                "is_expandable": seg.expandable,
                "frames": [],
                "blocks": [{"address": b.addr, "size": b.size,
                            "requested_size": b.requested if b.state != "inactive" else 0,
                            "state": b.state, "frames": []} for b in blocks],
            })
        return out

    def prelive_at_dump(self):
        n = 0
        for seg in self.segments:
            for b in seg.blocks:
                if b.state != "inactive" and b.addr not in self.seen:
                    n += 1
        return n


FRAMES = [{"filename": "train.py", "line": 87, "name": "forward"},
          {"filename": "torch/nn/modules/module.py", "line": 1747, "name": "_call_impl"}]


def build(seed=1):
    rng = random.Random(seed)
    dev0 = Allocator(0, 0x7F3A00000000, rng)
    dev1 = Allocator(1, 0x7E1000000000, rng)
    dev0.add_expandable(0)

    # Before recording: weights (kept), an optimizer buffer freed during the
    # trace, and a side-stream buffer whose free_requested is unrecorded.
    weights = [dev0.malloc(rng.choice([4, 6, 8, 16]) * MiB + rng.randrange(0, 4096), 0) for _ in range(6)]
    small_params = [dev0.malloc(rng.randrange(1, 900) * KiB, 0) for _ in range(5)]
    old_buffers = [dev0.malloc(3 * MiB + 512 * k, 0) for k in range(3)]
    comm = dev0.malloc(5 * MiB, SIDE_STREAM)
    dev0.free(comm, SIDE_STREAM, deferred=True)  # requested before recording...
    w1 = dev1.malloc(12 * MiB, 0)

    dev0.start_recording()
    dev1.start_recording()
    dev0.complete(comm, SIDE_STREAM)  # ... completed after it started
    for b in old_buffers:  # allocated before, freed during the trace
        dev0.free(b, 0)

    pending = []  # (block, stream, events to wait) of record_stream frees
    for it in range(6):
        acts = []
        for layer in range(10):
            frames = FRAMES if (it == 0 and layer < 2) else None
            acts.append(dev0.malloc(rng.choice([6, 10, 12, 24]) * MiB + rng.randrange(0, 8192), 0,
                                    expandable=True, frames=frames))
            tmp = dev0.malloc(rng.randrange(1, 400) * KiB, 0)
            dev0.free(tmp, 0)
            if layer % 3 == 2:
                # A bucket the side stream reduces: record_stream, late completion.
                bucket = dev0.malloc(rng.choice([2, 4, 6]) * MiB, SIDE_STREAM)
                dev0.free(bucket, SIDE_STREAM, deferred=True)
                pending.append((bucket, SIDE_STREAM, rng.randint(2, 6)))
            for p in list(pending):
                b, s, wait = p
                pending.remove(p)
                if wait <= 1:
                    dev0.complete(b, s)
                else:
                    pending.append((b, s, wait - 1))
        for a in reversed(acts):
            grad = dev0.malloc(a.requested // 2 + 512, 0)
            dev0.free(a, 0)
            dev0.free(grad, 0)
        step = [dev0.malloc(rng.randrange(64, 2048) * KiB, 0) for _ in range(4)]
        for b in step:
            dev0.free(b, 0)
        if it == 3:
            dev0.record("oom", 0, 96 * (1 << 30), 0)  # device_free 0: a request that failed
        if it == 4:
            dev0.empty_cache()
        # Device 1: a little traffic.
        x = dev1.malloc(rng.randrange(1, 8) * MiB, 0)
        dev1.free(x, 0)
    for b, s, _ in pending:
        dev0.complete(b, s)
    last = dev0.malloc(7 * MiB, SIDE_STREAM)  # live at dump, and in the trace
    dev0.free(small_params[0], 0)
    dev0.empty_cache()
    del weights, w1, last

    snapshot = {
        "segments": dev0.segment_dicts() + dev1.segment_dicts(),
        "device_traces": [dev0.events, dev1.events],
        "allocator_settings": {
            "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
            "max_split_size": -1,
            "garbage_collection_threshold": 0.0,
            "expandable_segments": True,
            "pinned_num_register_threads": 1,
            "release_lock_on_cudamalloc": False,
            "pinned_use_host_register": False,
            "roundup_power2_divisions": {"1": 0, "2": 0, "4": 0},
        },
    }
    return snapshot, dev0


def dump(obj, path, protocol):
    data = pickle.dumps(obj, protocol=protocol)
    if path.endswith(".gz"):
        buf = io.BytesIO()
        # mtime=0 and no name: the same bytes on every run.
        with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0, compresslevel=9) as g:
            g.write(data)
        data = buf.getvalue()
    with open(path, "wb") as f:
        f.write(data)
    return len(data)


def tiny_snapshot(protocol_tag):
    """A few events: small enough for libFuzzer's -max_len=4096."""
    s = SIDE_STREAM
    ev = [
        {"action": "segment_alloc", "addr": 0x7F0000000000, "size": 20 * MiB, "stream": 0, "time_us": 1},
        {"action": "alloc", "addr": 0x7F0000000000, "size": 1000, "stream": 0, "time_us": 2},
        {"action": "alloc", "addr": 0x7F0000000400, "size": 3 * MiB, "stream": s, "time_us": 3,
         "frames": FRAMES[:1]},
        {"action": "free_requested", "addr": 0x7F0000000400, "size": 3 * MiB, "stream": s, "time_us": 4},
        {"action": "free_requested", "addr": 0x7E0000000000, "size": 4096, "stream": 0, "time_us": 5},
        {"action": "free_completed", "addr": 0x7E0000000000, "size": 4096, "stream": 0, "time_us": 6},
        {"action": "alloc", "addr": 0x7F0000000000, "size": 2048, "stream": 0, "time_us": 7},
        {"action": "free_completed", "addr": 0x7F0000000400, "size": 3 * MiB, "stream": s, "time_us": 8},
        {"action": "segment_map", "addr": 0x7D0000000000, "size": 2 * MiB, "stream": 0, "time_us": 9},
        {"action": "oom", "device_free": 0, "size": 1 << 40, "stream": 0, "time_us": 10},
        {"action": "segment_unmap", "addr": 0x7D0000000000, "size": 2 * MiB, "stream": 0, "time_us": 11},
    ]
    seg = {"device": 0, "address": 0x7F0000000000, "total_size": 20 * MiB, "stream": 0,
           "segment_type": "large", "segment_pool_id": (0, 0), "is_expandable": False,
           "blocks": [{"address": 0x7F0000000000, "size": 2048, "requested_size": 2048,
                       "state": "active_allocated"},
                      {"address": 0x7F0000000800, "size": 4096, "requested_size": 4000,
                       "state": "active_pending_free"},
                      {"address": 0x7F0000001800, "size": 20 * MiB - 6144, "requested_size": 0,
                       "state": "inactive"}]}
    # An OrderedDict: GLOBAL/REDUCE and SETITEMS on an object, which the
    # reader keeps opaque.
    settings = collections.OrderedDict(tag=protocol_tag)
    return {"segments": [seg], "device_traces": [ev, ev[:2]], "allocator_settings": settings}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-o", "--output")
    ap.add_argument("--protocol", type=int, default=4)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--fuzz-seeds", metavar="DIR")
    args = ap.parse_args()
    if args.fuzz_seeds:
        os.makedirs(args.fuzz_seeds, exist_ok=True)
        for proto in range(6):
            path = os.path.join(args.fuzz_seeds, "tiny_p%d" % proto)
            n = dump(tiny_snapshot(proto), path, proto)
            assert n <= 4096, (path, n)
        return
    if not args.output:
        ap.error("-o FILE or --fuzz-seeds DIR")
    snapshot, dev0 = build(args.seed)
    n = dump(snapshot, args.output, args.protocol)
    print("%s: %d bytes, protocol %d; device 0: %d events, pre-live at dump %d, "
          "reserved peak %d, allocated peak %d" % (
              args.output, n, args.protocol, len(dev0.events), dev0.prelive_at_dump(),
              dev0.reserved_peak, dev0.allocated_peak))


if __name__ == "__main__":
    main()
