"""vpmm.torch's memory history and snapshots (docs/python.md, "Memory history
and snapshots"): record_memory_history, memory_snapshot and dump_snapshot,
PyTorch's _record_memory_history/_snapshot/_dump_snapshot for memory that
libvpmm holds, with its pauses in them. The format and the recorder are
vpmm/_snapshot.py's; this module knows PyTorch: which mode vpmm.torch is in,
its MemPools, and PyTorch's own recorder in MemPool mode.

What PyTorch records itself (its source, CUDAPluggableAllocator.cpp): with a
pluggable allocator as the process's allocator (``use_as_allocator()``),
``torch.cuda.memory._record_memory_history`` and ``_snapshot`` raise
"CUDAPluggableAllocator does not yet support recordHistory" / "... snapshot":
PyTorch has no history of that memory at all, so libvpmm's recorder is the
only one. With ``pool(tag)`` the caching allocator stays in charge and
records its blocks in libvpmm's segments as usual; libvpmm adds which tag
each segment has and what its pauses did."""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

import torch as _torch

from . import _snapshot
from ._pool import _STORE_FLAGS, ALLOC_HOST_BACKUP, default_pool as _default_pool

_snapshot.install_observers()

_torch_recording = False


def entry_points() -> Tuple[str, str, str]:
    """(library, malloc, free) for CUDAPluggableAllocator: the recording hooks
    of libvpmm_history.so where it is there (off, they cost one atomic load),
    else vpmm_torch_malloc / vpmm_torch_free of libvpmm."""
    if _snapshot.history.available():
        return _snapshot.history_library_path(), "vpmm_history_torch_malloc", "vpmm_history_torch_free"
    from . import _library
    return _library.path, "vpmm_torch_malloc", "vpmm_torch_free"


def _is_global() -> bool:
    from . import torch as vt
    return vt.is_global()


def record_memory_history(enabled: Optional[str] = "all", stacks: Optional[str] = None,
                          max_entries: int = 1_000_000) -> None:
    """Start (enabled="all") or stop (None) recording the allocation history
    of libvpmm's PyTorch memory, like torch.cuda.memory._record_memory_history:
    every malloc and free through the hook, the tag and backup store of each,
    what the pool remapped, and every pause and resume, in a ring of
    max_entries events (the oldest dropped first). stacks="python" adds the
    Python stack of each allocation (a callback into Python per event: slower).

    After ``use_as_allocator()`` this is the only history there is (PyTorch's
    own raises for a pluggable allocator). Otherwise (``pool(tag)``) PyTorch's
    recorder is started too, with the same max_entries and stacks, since its
    blocks inside libvpmm's segments are PyTorch's to record."""
    global _torch_recording
    if enabled not in (None, "all", "state"):
        raise ValueError(f"enabled must be 'all', 'state' or None, not {enabled!r}")
    if stacks not in (None, "python", "all"):
        raise ValueError(f"stacks must be None, 'python' or 'all', not {stacks!r}")
    h = _snapshot.history
    if enabled is None:
        h.stop()
        if _torch_recording:
            _torch.cuda.memory._record_memory_history(None)
            _torch_recording = False
        return
    h.start(max_entries, stacks is not None and _is_global())
    if not _is_global():
        _torch.cuda.memory._record_memory_history(
            "all", context="all" if stacks else None, stacks="python" if stacks in (None, "python") else "all",
            max_entries=max_entries)
        _torch_recording = True


def _store_of(flags: int) -> Optional[str]:
    if not flags & ALLOC_HOST_BACKUP:
        return None
    for name, bit in _STORE_FLAGS.items():
        if bit and flags & bit:
            return name
    return "pinned"


def _pool_facts(devices: List[int]) -> Dict[int, Dict[str, Any]]:
    out = {}
    for d in devices:
        p = _default_pool(d)
        out[d] = {"pool_stats": p.stats(), "layout": p.layout()}
    return out


def memory_snapshot(device: Any = None) -> Dict[str, Any]:
    """The snapshot of libvpmm's PyTorch memory in PyTorch's format (what
    ``torch.cuda.memory._snapshot()`` returns), with libvpmm's facts: see
    vpmm/_snapshot.py. `device` is accepted for symmetry; every device
    recorded is in it."""
    from . import torch as vt
    h = _snapshot.history
    events, dropped = h.read() if h.available() else ([], 0)
    strings = h.strings(events) if events else {}
    devices = sorted({e["device"] for e in events} | {_torch.cuda.current_device()})
    if vt.is_global():
        return _snapshot.snapshot_from_history(events, strings, h.frames, devices, dropped,
                                               _pool_facts(devices))
    snap = _torch.cuda.memory._snapshot()
    with vt._lock:
        pools = dict(vt._mem_pools)
    pool_tags = {tuple(mp.id): (key[1], _store_of(key[2][0])) for key, mp in pools.items()}
    paused = {d: [(r["va"], r["size"]) for r in _default_pool(d).regions() if r["kind"] == "paused"]
              for d in devices}
    return _snapshot.augment_torch_snapshot(snap, events, strings, pool_tags, paused, _pool_facts(devices),
                                            dropped)


def dump_snapshot(filename: str = "vpmm_snapshot.pickle") -> str:
    """:func:`memory_snapshot` pickled into `filename` (protocol 4; gzip when
    it ends in .gz), like torch.cuda.memory._dump_snapshot: open it in
    memory_viz, ``torch.cuda._memory_viz``, ``vpmm replay`` or ``vpmm plot``.
    Returns the file name."""
    _snapshot.dump(memory_snapshot(), filename)
    return filename


__all__ = ["record_memory_history", "memory_snapshot", "dump_snapshot", "entry_points"]
