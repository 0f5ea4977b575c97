"""Memory history and snapshots of libvpmm memory in PyTorch's own format
(what ``torch.cuda.memory._snapshot()`` returns), so that
``torch.cuda._memory_viz``, the memory_viz page, ``vpmm replay`` and
``vpmm plot`` read them unchanged, with libvpmm's facts added where the
format has room. No torch here: vpmm.torch drives it (record_memory_history,
memory_snapshot, dump_snapshot), and tests drive it without PyTorch.

Three parts:

* the recorder: libvpmm_history.so (src/history/), whose hook entry points
  vpmm.torch gives PyTorch; its events are read here. Scopes (tag and backup
  store of vpmm.region) and pauses reach it through vpmm._pool's observers,
  optional Python stacks through a context callback;
* :func:`snapshot_from_history`: the events as a PyTorch snapshot of memory
  allocated through the hooks (``use_as_allocator()``: every tensor is a
  libvpmm allocation): one segment per allocation, as a pluggable allocator's
  memory is to PyTorch;
* :func:`augment_torch_snapshot`: PyTorch's own snapshot of MemPool memory
  (``pool(tag)``), whose blocks PyTorch records itself, with what libvpmm did
  to their segments (tag, paused, backup store) and the pauses and resumes
  inserted at their time.

How libvpmm's facts appear, all in the places PyTorch's format has:

* a pause releases physical memory and keeps addresses: each paused
  allocation is freed (``free_requested``, ``free_completed``, then its
  segment ``segment_free``) at the pause and allocated again
  (``segment_alloc``, ``alloc``) at the resume, so the timelines show the
  memory gone while paused; paused at the dump, it is in no segment (it holds
  no memory) and is listed under the top-level ``"vpmm"`` key;
* the tag is the event's ``category`` (memory_viz colours allocations by it
  and draws a legend; untagged memory is ``"unknown"``, the name memory_viz
  itself uses, which also keeps memory_viz pages that push ``"unknown"``
  under a misspelt name from failing);
* ``user_metadata`` (shown by newer memory_viz pages) says it in words:
  ``vpmm tag=weights backup=pinned``, ``vpmm paused ...``, ``vpmm resumed``,
  ``vpmm remapped 6 MiB``;
* extra keys (``vpmm_tag``, ``vpmm_backup_store``, ``vpmm_remapped``,
  ``vpmm_mapped_bytes`` on events; ``vpmm_tag``, ``vpmm_backup_store``,
  ``vpmm_paused`` on segments), which PyTorch's readers ignore; every event
  of a pause or resume (the frees, the segment's free, its allocation again
  and the blocks') names the tag and backup store of the memory that left
  or came back, so memory_viz's trace view says whose memory it was;
* a top-level ``"vpmm"`` dict: the recording's source and mode, dropped
  events, and per device the pool's stats, the mapped peak the recording
  saw, and what was paused at the dump.

Pickles are written with protocol 4: memory_viz's own unpickler reads
protocols 2 to 4 and a fixed set of opcodes (plain dicts, lists, tuples,
str, int, float, bool, None), which is all a snapshot holds.
"""
from __future__ import annotations

import ctypes
import gzip
import os
import pickle
import threading
import time
import traceback
from bisect import bisect_right
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

from . import _library

# vpmm_history_event.action (src/history/vpmm_history.h)
ALLOC, FREE, PAUSE, RESUME, OOM = 1, 2, 3, 4, 5
_SEP = "\x1f"  # between tag and store in a scope string
_LARGE = 1 << 20  # PyTorch's 'large' segments: 1 MiB and above


class Event(ctypes.Structure):
    """vpmm_history_event, field for field."""
    _fields_ = [("action", ctypes.c_int32), ("device", ctypes.c_int32), ("scope", ctypes.c_uint32),
                ("note", ctypes.c_uint32), ("seq", ctypes.c_uint64), ("addr", ctypes.c_uint64),
                ("size", ctypes.c_uint64), ("stream", ctypes.c_uint64), ("time_us", ctypes.c_uint64),
                ("context", ctypes.c_uint64), ("mapped", ctypes.c_uint64), ("remapped", ctypes.c_uint64)]


# ---------------------------------------------------------------------------
# The recorder library
# ---------------------------------------------------------------------------

HISTORY_LIBRARY = "libvpmm_history.so"
_CONTEXT_FN = ctypes.CFUNCTYPE(ctypes.c_uint64)


def history_library_path() -> str:
    """libvpmm_history.so beside the libvpmm.so.1 this package loaded (the
    wheel's, a build tree's), else the loader's name for it."""
    d = os.path.dirname(_library.path)
    return os.path.join(d, HISTORY_LIBRARY) if d else HISTORY_LIBRARY


class _History:
    """libvpmm_history.so through ctypes, loaded on first use."""

    def __init__(self) -> None:
        self._lib: Optional[ctypes.CDLL] = None
        self._error: Optional[str] = None
        self._lock = threading.Lock()
        self._context_fn: Any = None  # keeps the ctypes callback alive
        self.frames: Dict[int, List[Dict[str, Any]]] = {}
        self._frame_ids: Dict[Tuple[Tuple[str, int, str], ...], int] = {}

    def lib(self) -> Optional[ctypes.CDLL]:
        with self._lock:
            if self._lib is None and self._error is None:
                try:
                    lib = ctypes.CDLL(history_library_path())
                except OSError as e:
                    self._error = f"{history_library_path()}: {e}"
                    return None
                u32, i32, u64, vp = ctypes.c_uint32, ctypes.c_int32, ctypes.c_uint64, ctypes.c_void_p
                for name, res, args in (
                        ("vpmm_history_start", i32, [u64]), ("vpmm_history_stop", None, []),
                        ("vpmm_history_recording", i32, []),
                        ("vpmm_history_read", u64, [ctypes.POINTER(Event), u64, ctypes.POINTER(u64)]),
                        ("vpmm_history_intern", u32, [ctypes.c_char_p]),
                        ("vpmm_history_string", ctypes.c_size_t, [u32, ctypes.c_char_p, ctypes.c_size_t]),
                        ("vpmm_history_scope_push", None, [u32]), ("vpmm_history_scope_pop", None, []),
                        ("vpmm_history_set_context_fn", None, [_CONTEXT_FN]),
                        ("vpmm_history_note", None, [i32, i32, u64, u64, u64, u32]),
                        ("vpmm_history_torch_malloc", vp, [ctypes.c_ssize_t, ctypes.c_int, vp]),
                        ("vpmm_history_torch_free", None, [vp, ctypes.c_ssize_t, ctypes.c_int, vp])):
                    f = getattr(lib, name)
                    f.restype, f.argtypes = res, args
                self._lib = lib
            return self._lib

    def available(self) -> bool:
        return self.lib() is not None

    def require(self) -> ctypes.CDLL:
        lib = self.lib()
        if lib is None:
            raise RuntimeError(f"vpmm: memory history needs {HISTORY_LIBRARY}, which did not load "
                               f"({self._error}); it is built and installed beside libvpmm.so.1")
        return lib

    # -- recording ------------------------------------------------------------
    def start(self, max_entries: int, stacks: bool = False) -> None:
        lib = self.require()
        if max_entries < 1:
            raise ValueError(f"max_entries must be at least 1, not {max_entries}")
        self.set_stacks(stacks)
        if lib.vpmm_history_start(min(max_entries, 1 << 40)) != 0:
            raise MemoryError(f"vpmm: no memory for a history of {max_entries} events")

    def stop(self) -> None:
        lib = self.lib()
        if lib is not None:
            lib.vpmm_history_stop()
            self.set_stacks(False)

    def recording(self) -> bool:
        lib = self.lib()
        return bool(lib is not None and lib.vpmm_history_recording())

    def set_stacks(self, on: bool) -> None:
        lib = self.require()
        if on and self._context_fn is None:
            self._context_fn = _CONTEXT_FN(self._capture_stack)
            lib.vpmm_history_set_context_fn(self._context_fn)
        elif not on and self._context_fn is not None:
            lib.vpmm_history_set_context_fn(_CONTEXT_FN())
            self._context_fn = None

    def _capture_stack(self) -> int:
        # Innermost frame first, as PyTorch's frames; this callback's own
        # frame left out. The same stack gets the same id.
        try:
            stack = traceback.extract_stack()[:-1]
            key = tuple((f.filename, f.lineno or 0, f.name) for f in reversed(stack))
            with self._lock:
                fid = self._frame_ids.get(key)
                if fid is None:
                    fid = self._frame_ids[key] = len(self._frame_ids) + 1
                    self.frames[fid] = [{"filename": f, "line": ln, "name": n} for f, ln, n in key]
            return fid
        except Exception:  # never raise into the allocator
            return 0

    def read(self) -> Tuple[List[Dict[str, Any]], int]:
        """The recorded events (oldest first) as dicts, and how many older
        ones the ring dropped."""
        lib = self.require()
        dropped = ctypes.c_uint64()
        n = lib.vpmm_history_read(None, 0, ctypes.byref(dropped))
        while True:
            buf = (Event * max(n, 1))()
            got = lib.vpmm_history_read(buf, n, ctypes.byref(dropped))
            if got <= n:
                break
            n = got  # grew meanwhile
        names = [f for f, _ in Event._fields_]
        return [{k: getattr(buf[i], k) for k in names} for i in range(got)], dropped.value

    def intern(self, text: str) -> int:
        return int(self.require().vpmm_history_intern(text.encode()))

    def string(self, sid: int) -> str:
        lib = self.require()
        n = lib.vpmm_history_string(sid, None, 0)
        buf = ctypes.create_string_buffer(n + 1)
        lib.vpmm_history_string(sid, buf, n + 1)
        return buf.value.decode(errors="replace")

    def strings(self, events: Iterable[Dict[str, Any]]) -> Dict[int, str]:
        ids = {e["scope"] for e in events} | {e["note"] for e in events}
        ids.discard(0)
        return {i: self.string(i) for i in ids}

    # -- what vpmm._pool's observers report ---------------------------------------
    def scope_enter(self, tag: Optional[str], store: Optional[str]) -> Callable[[], None]:
        lib = self.lib()
        if lib is None:
            return lambda: None
        lib.vpmm_history_scope_push(lib.vpmm_history_intern(scope_text(tag, store).encode()))
        return lib.vpmm_history_scope_pop

    def pause_observer(self, pool: Any, what: str, tag: Optional[str]) -> Callable[[bool], None]:
        """Before a pause or resume of `pool` while recording: the notes of
        the regions it changed, appended after it."""
        if not self.recording():
            return lambda changed: None
        pausing = what == "pause"
        # A region paused by this call was not paused before it (and the
        # reverse for a resume): live allocations and small-object pages.
        before = {r["va"]: r["kind"] == "paused" for r in pool.regions()}
        device = int(pool.config().get("device", 0))
        lib = self.require()

        def after(changed: bool) -> None:
            if not changed:
                return
            note = lib.vpmm_history_intern(f"vpmm {'paused' if pausing else 'resumed'}"
                                           f"{'' if tag is None else ' tag=' + tag}".encode())
            for r in pool.regions():
                was = before.get(r["va"])
                if was is not None and was != pausing and (r["kind"] == "paused") == pausing:
                    lib.vpmm_history_note(PAUSE if pausing else RESUME, device, r["va"], r["size"], 0, note)
        return after


history = _History()


def scope_text(tag: Optional[str], store: Optional[str]) -> str:
    """The recorder's scope string of a vpmm.region: tag and backup store."""
    return f"{tag or ''}{_SEP}{store or ''}"


def parse_scope(text: str) -> Tuple[Optional[str], Optional[str]]:
    """(tag, backup store) of a scope string of :func:`scope_text`."""
    tag, _, store = text.partition(_SEP)
    return tag or None, store or None


def _fmt_bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" or n == int(n) else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


# ---------------------------------------------------------------------------
# Snapshots of hook memory (use_as_allocator)
# ---------------------------------------------------------------------------

def _block(addr: int, size: int, frames: List[Dict[str, Any]]) -> Dict[str, Any]:
    return {"address": addr, "size": size, "requested_size": size, "state": "active_allocated",
            "frames": frames}


def _segment(device: int, addr: int, size: int, stream: int, frames: List[Dict[str, Any]],
             pool_id: Tuple[int, int] = (0, 0)) -> Dict[str, Any]:
    return {"device": device, "address": addr, "total_size": size, "allocated_size": size,
            "active_size": size, "requested_size": size, "stream": stream,
            "segment_type": "large" if size >= _LARGE else "small", "segment_pool_id": pool_id,
            "is_expandable": False, "frames": frames, "blocks": [_block(addr, size, frames)]}


def _entry(action: str, addr: int, size: int, stream: int, time_us: int, frames: List[Dict[str, Any]],
           **extra: Any) -> Dict[str, Any]:
    e = {"action": action, "addr": addr, "size": size, "stream": stream, "time_us": time_us, "frames": frames}
    e.update({k: v for k, v in extra.items() if v is not None})
    return e


def _note_tag(note: str) -> Optional[str]:
    """The tag a pause or resume note names ("vpmm paused tag=weights"; the
    tag ends the note), None for one of every tag."""
    _, found, tag = note.partition(" tag=")
    return tag if found and tag else None


def _describe(tag: Optional[str], store: Optional[str]) -> str:
    return f"tag={tag or '(untagged)'} backup={store or 'none'}"


def snapshot_from_history(events: Sequence[Dict[str, Any]], strings: Dict[int, str],
                          frames: Optional[Dict[int, List[Dict[str, Any]]]] = None,
                          devices: Optional[Iterable[int]] = None, dropped: int = 0,
                          pool_facts: Optional[Dict[int, Dict[str, Any]]] = None) -> Dict[str, Any]:
    """The recorded hook events as a PyTorch snapshot: ``segments`` (what is
    allocated and not paused at the end: one segment with one block per
    allocation), ``device_traces`` (one list per device, 0 to the highest
    seen or asked for) and the top-level ``"vpmm"`` facts. `frames` maps
    context ids to PyTorch frame lists; `pool_facts` adds per-device facts
    (stats, tag stats) under ``"vpmm"``."""
    frames = frames or {}
    devs = set(devices or ()) | {e["device"] for e in events}
    n_dev = max(devs) + 1 if devs else 1
    traces: List[List[Dict[str, Any]]] = [[] for _ in range(n_dev)]
    live: Dict[Tuple[int, int], Dict[str, Any]] = {}  # (device, addr) -> allocation
    mapped_peak = [0] * n_dev
    remapped = [0] * n_dev
    categories = set()

    def scope_of(e: Dict[str, Any]) -> Tuple[Optional[str], Optional[str]]:
        return parse_scope(strings.get(e["scope"], "")) if e["scope"] else (None, None)

    for e in events:
        d, addr, size, t = e["device"], e["addr"], e["size"], e["time_us"]
        tr = traces[d]
        mapped_peak[d] = max(mapped_peak[d], e["mapped"])
        fr = frames.get(e["context"], [])
        if e["action"] == ALLOC:
            tag, store = scope_of(e)
            cat = tag or "unknown"
            categories.add(cat)
            meta = f"vpmm {_describe(tag, store)}"
            if e["remapped"]:
                meta += f" remapped {_fmt_bytes(e['remapped'])}"
                remapped[d] += e["remapped"]
            a = {"size": size, "stream": e["stream"], "tag": tag, "store": store, "frames": fr, "paused": False}
            live[(d, addr)] = a
            tr.append(_entry("segment_alloc", addr, size, e["stream"], t, fr, category="unknown",
                             vpmm_mapped_bytes=e["mapped"]))
            tr.append(_entry("alloc", addr, size, e["stream"], t, fr, category=cat, user_metadata=meta,
                             vpmm_tag=tag, vpmm_backup_store=store, vpmm_remapped=e["remapped"],
                             vpmm_mapped_bytes=e["mapped"]))
        elif e["action"] == FREE:
            a = live.pop((d, addr), None)
            if a is not None and a["paused"]:
                continue  # its memory went at the pause: nothing more to free
            stream = a["stream"] if a else e["stream"]
            sz = a["size"] if a else size
            cat = (a["tag"] or "unknown") if a else "unknown"
            for action in ("free_requested", "free_completed"):
                tr.append(_entry(action, addr, sz, stream, t, fr, category=cat, vpmm_mapped_bytes=e["mapped"]))
            tr.append(_entry("segment_free", addr, sz, stream, t, fr, category="unknown",
                             vpmm_mapped_bytes=e["mapped"]))
        elif e["action"] in (PAUSE, RESUME):
            note = strings.get(e["note"], "")
            pausing = e["action"] == PAUSE
            for (dd, a_addr), a in sorted(live.items()):
                if dd != d or not (addr <= a_addr < addr + size) or a["paused"] == pausing:
                    continue
                a["paused"] = pausing
                cat = a["tag"] or "unknown"
                meta = f"{note or ('vpmm paused' if pausing else 'vpmm resumed')} ({_describe(a['tag'], a['store'])})"
                # Every event of a pause or resume names whose memory it is
                # (memory_viz's trace view shows these keys on hover).
                whose = {"vpmm_tag": a["tag"] or _note_tag(note), "vpmm_backup_store": a["store"],
                         "vpmm_mapped_bytes": e["mapped"]}
                if pausing:
                    for action in ("free_requested", "free_completed"):
                        tr.append(_entry(action, a_addr, a["size"], a["stream"], t, a["frames"], category=cat,
                                         user_metadata=meta, vpmm_paused=True, **whose))
                    tr.append(_entry("segment_free", a_addr, a["size"], a["stream"], t, a["frames"],
                                     category="unknown", user_metadata=meta, vpmm_paused=True, **whose))
                else:
                    tr.append(_entry("segment_alloc", a_addr, a["size"], a["stream"], t, a["frames"],
                                     category="unknown", user_metadata=meta, **whose))
                    tr.append(_entry("alloc", a_addr, a["size"], a["stream"], t, a["frames"], category=cat,
                                     user_metadata=meta, **whose))
        elif e["action"] == OOM:
            tr.append({"action": "oom", "size": size, "stream": e["stream"], "time_us": t, "frames": fr,
                       "device_free": 0, "user_metadata": "vpmm: a malloc through the hook failed",
                       "vpmm_mapped_bytes": e["mapped"]})
    segments = []
    paused: List[List[Dict[str, Any]]] = [[] for _ in range(n_dev)]
    for (d, addr), a in sorted(live.items()):
        if a["paused"]:
            paused[d].append({"address": addr, "size": a["size"], "tag": a["tag"], "backup_store": a["store"]})
            continue
        seg = _segment(d, addr, a["size"], a["stream"], a["frames"])
        seg.update({"vpmm_tag": a["tag"], "vpmm_backup_store": a["store"], "vpmm_paused": False})
        segments.append(seg)
    facts = {"source": "vpmm.torch memory history (libvpmm_history.so)",
             "mode": "use_as_allocator: every segment is one libvpmm allocation, its block the tensor memory",
             # The segments are libvpmm's allocations, not memory PyTorch's
             # allocator reserved: `vpmm replay` reads this.
             "pytorch_reserved": False,
             "dropped_events": dropped,
             "devices": {d: {"mapped_peak_recorded": mapped_peak[d], "remapped_recorded": remapped[d],
                             "paused_at_dump": paused[d]} for d in range(n_dev)}}
    for d, f in (pool_facts or {}).items():
        facts["devices"].setdefault(d, {}).update(f)
    return {"segments": segments, "device_traces": traces, "vpmm": _devices_as_list(facts)}


def _devices_as_list(facts: Dict[str, Any]) -> Dict[str, Any]:
    # By device index, as device_traces: a list reads the same in Python, in
    # memory_viz's JavaScript and in `vpmm replay` (int dict keys would not).
    devs = facts["devices"]
    facts["devices"] = [devs.get(d, {}) for d in range(max(devs) + 1 if devs else 0)]
    return facts


# ---------------------------------------------------------------------------
# PyTorch's own snapshot of MemPool memory (pool(tag)), with libvpmm's facts
# ---------------------------------------------------------------------------

def _blocks_at(trace: List[Dict[str, Any]], final: Dict[int, Dict[str, Any]], upto: int) -> Dict[int, Dict[str, Any]]:
    """The allocated blocks (address -> block) before trace[upto], walked
    back from the final ones as memory_viz does."""
    blocks = dict(final)
    for e in reversed(trace[upto:]):
        a = e.get("action")
        if a == "alloc":
            blocks.pop(e.get("addr"), None)
        elif a == "free_completed":
            blocks[e["addr"]] = {"address": e["addr"], "size": e.get("size", 0),
                                 "requested_size": e.get("size", 0), "frames": e.get("frames", [])}
    return blocks


def _insert_pauses(d: int, trace: List[Dict[str, Any]], notes: List[Dict[str, Any]], snap: Dict[str, Any],
                   seg_tag: Dict[Tuple[int, int], Tuple[Any, ...]], scope_of: Dict[Tuple[int, int], Any],
                   pool_tags: Dict[Tuple[int, int], Tuple[Optional[str], Optional[str]]],
                   strings: Dict[int, str], facts: Dict[str, Any]) -> List[Dict[str, Any]]:
    """PyTorch's trace of device `d` with the pauses and resumes of `notes`
    (oldest first) inserted at their time. Which blocks a pause frees and a
    resume allocates again is PyTorch's own view at that moment (walked back
    from the final blocks over PyTorch's events only); PyTorch's frees of
    blocks a pause already freed (a tensor deleted while paused) are left
    out, since their memory went at the pause."""
    times = [e.get("time_us", 0) for e in trace]
    ordered = bool(times) and times[-1] > 0 and all(times[i] <= times[i + 1] for i in range(len(times) - 1))
    if not ordered:
        facts["devices"].setdefault(d, {})["pauses_appended_at_end"] = True
    final = {b["address"]: b for s in snap.get("segments", []) if s.get("device") == d
             for b in s.get("blocks", []) if b.get("state") == "active_allocated" and "address" in b}
    segs = {a: v for (dd, a), v in seg_tag.items() if dd == d}
    for e in trace:  # segments of the trace (freed before the dump too)
        if e.get("action") in ("segment_alloc", "segment_map") and e["addr"] not in segs:
            tag, store = scope_of.get((d, e["addr"]), (None, None))
            pid = tuple(e.get("pool_id", (0, 0)))
            if pid in pool_tags:
                tag, store = pool_tags[pid]
            segs[e["addr"]] = (tag, store, e.get("size", 0), e.get("stream", 0), -1)
    inserts: List[Tuple[int, List[Dict[str, Any]]]] = []
    freed: Dict[int, Tuple[int, int]] = {}  # block address -> (its segment, index the pause freed it at)
    drop = set()
    for n in notes:
        at = bisect_right(times, n["time_us"]) if ordered else len(trace)
        blocks = _blocks_at(trace, final, at)
        pausing = n["action"] == PAUSE
        note = strings.get(n["note"], "vpmm paused" if pausing else "vpmm resumed")
        added: List[Dict[str, Any]] = []
        for saddr, (tag, store, ssize, stream, _) in sorted(segs.items()):
            if not (n["addr"] <= saddr < n["addr"] + n["size"]):
                continue
            tag = tag or _note_tag(note)
            meta = f"{note} ({_describe(tag, store)})"
            t = n["time_us"]
            # Every event of a pause or resume names whose memory it is.
            whose = {"vpmm_tag": tag, "vpmm_backup_store": store}
            cat = tag or "unknown"
            if pausing:
                for a, b in sorted(blocks.items()):
                    if saddr <= a < saddr + ssize and a not in freed:
                        freed[a] = (saddr, at)
                        for action in ("free_requested", "free_completed"):
                            added.append(_entry(action, a, b["size"], stream, t, b.get("frames", []),
                                                category=cat, user_metadata=meta, vpmm_paused=True, **whose))
                added.append(_entry("segment_free", saddr, ssize, stream, t, [], category="unknown",
                                    user_metadata=meta, vpmm_paused=True, **whose))
            else:
                added.append(_entry("segment_alloc", saddr, ssize, stream, t, [], category="unknown",
                                    user_metadata=meta, **whose))
                for a, (sa, since) in sorted(freed.items()):
                    if sa != saddr:
                        continue
                    del freed[a]
                    b = blocks.get(a)
                    if b is None:  # freed by PyTorch while paused: its free is the pause's
                        drop.update(i for i in range(since, at) if trace[i].get("addr") == a and
                                    trace[i].get("action") in ("free_requested", "free_completed"))
                        continue
                    added.append(_entry("alloc", a, b["size"], stream, t, b.get("frames", []),
                                        category=cat, user_metadata=meta, **whose))
        inserts.append((at, added))
    # Blocks still paused at the end: PyTorch's frees of them after the pause
    # are the pause's too.
    for a, (_, since) in freed.items():
        drop.update(i for i in range(since, len(trace)) if trace[i].get("addr") == a and
                    trace[i].get("action") in ("free_requested", "free_completed"))
    merged: List[Dict[str, Any]] = []
    k = 0
    for i in range(len(trace) + 1):
        while k < len(inserts) and inserts[k][0] == i:
            merged.extend(inserts[k][1])
            k += 1
        if i < len(trace) and i not in drop:
            merged.append(trace[i])
    if drop:
        facts["devices"].setdefault(d, {})["frees_while_paused"] = len(drop) // 2
    return merged


def augment_torch_snapshot(snap: Dict[str, Any], events: Sequence[Dict[str, Any]], strings: Dict[int, str],
                           pool_tags: Dict[Tuple[int, int], Tuple[Optional[str], Optional[str]]],
                           paused_now: Dict[int, List[Tuple[int, int]]],
                           pool_facts: Optional[Dict[int, Dict[str, Any]]] = None,
                           dropped: int = 0) -> Dict[str, Any]:
    """PyTorch's snapshot (a dict of ``_snapshot()``) of memory routed through
    vpmm.torch.pool MemPools, with libvpmm's facts: each segment of a libvpmm
    MemPool (`pool_tags`: MemPool id -> (tag, backup store)) gets
    ``vpmm_tag``, ``vpmm_backup_store`` and ``vpmm_paused`` (from
    `paused_now`: device -> [(address, size)] of paused regions), and the
    recorded pauses and resumes (PAUSE/RESUME `events`) go into
    ``device_traces`` at their time (``time_us``): the blocks in a paused
    segment freed and the segment freed, allocated again at the resume. A
    segment paused at the dump leaves ``segments`` (it holds no memory) for
    the top-level ``"vpmm"`` list. Works on a copy; `snap` is unchanged."""
    out = {k: v for k, v in snap.items()}
    out["segments"] = [dict(s) for s in snap.get("segments", [])]
    out["device_traces"] = [list(t) for t in snap.get("device_traces", [])]
    facts: Dict[str, Any] = {"source": "PyTorch's memory history with libvpmm's pauses (vpmm.torch)",
                             "mode": "pool(tag): PyTorch's caching allocator in libvpmm segments",
                             "pytorch_reserved": True, "dropped_events": dropped, "devices": {}}

    def in_paused(d: int, addr: int, size: int) -> bool:
        return any(p <= addr and addr + size <= p + ps for p, ps in paused_now.get(d, []))

    seg_tag: Dict[Tuple[int, int], Tuple[Optional[str], Optional[str], int, int, int]] = {}
    kept = []
    for s in out["segments"]:
        pid = tuple(s.get("segment_pool_id", (0, 0)))
        if pid in pool_tags:
            tag, store = pool_tags[pid]
            s.update({"vpmm_tag": tag, "vpmm_backup_store": store,
                      "vpmm_paused": in_paused(s["device"], s["address"], s["total_size"])})
            seg_tag[(s["device"], s["address"])] = (tag, store, s["total_size"], s.get("stream", 0),
                                                     len(kept))
        if s.get("vpmm_paused"):
            facts["devices"].setdefault(s["device"], {}).setdefault("paused_at_dump", []).append(
                {"address": s["address"], "size": s["total_size"], "tag": s.get("vpmm_tag"),
                 "backup_store": s.get("vpmm_backup_store")})
            continue  # no memory while paused
        kept.append(s)

    # Segments known from the trace too (allocated and freed within it):
    # their pool id is on the trace entries of newer PyTorch; otherwise the
    # recorder's own events name them (our hook saw their malloc).
    scope_of = {(e["device"], e["addr"]): parse_scope(strings.get(e["scope"], "")) for e in events
                if e["action"] == ALLOC and e["scope"]}
    notes = sorted((e for e in events if e["action"] in (PAUSE, RESUME)), key=lambda e: (e["time_us"], e["seq"]))
    for d, trace in enumerate(out["device_traces"]):
        mine = [n for n in notes if n["device"] == d]
        if mine:
            out["device_traces"][d] = _insert_pauses(d, trace, mine, snap, seg_tag, scope_of, pool_tags, strings,
                                                     facts)
    out["segments"] = kept
    for d, f in (pool_facts or {}).items():
        facts["devices"].setdefault(d, {}).update(f)
    out["vpmm"] = _devices_as_list(facts)
    return out


# ---------------------------------------------------------------------------
# Files
# ---------------------------------------------------------------------------

def dump(snapshot: Dict[str, Any], path: str) -> None:
    """`snapshot` pickled with protocol 4 into `path` (gzip-compressed when
    it ends in .gz: `vpmm replay` reads both; memory_viz wants it plain)."""
    data = pickle.dumps(snapshot, protocol=4)
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "wb") as f:
        f.write(data)


def now_us() -> int:
    """The recorder's clock (CLOCK_REALTIME in microseconds), PyTorch's time_us."""
    return time.time_ns() // 1000


_installed = False


def install_observers() -> bool:
    """Registers the recorder's scope and pause observers with vpmm._pool
    (once); False when libvpmm_history.so is not there."""
    global _installed
    from . import _pool
    if _installed:
        return True
    if not history.available():
        return False
    _pool.scope_observers.append(history.scope_enter)
    _pool.pause_observers.append(history.pause_observer)
    _installed = True
    return True
