"""libvpmm through ctypes: no third-party packages, no build step.

    import vpmm
    pool = vpmm.Pool(backend="host")          # or "auto" / "cuda" / "hip"
    p = pool.malloc(1 << 20)
    with vpmm.region("weights", host_backup=True):
        w = pool.malloc(64 << 20)             # tagged: pausable
    pool.pause("weights"); pool.resume("weights")   # True: something changed
    print(pool.stats()["mapped_bytes"], pool.regions()[0]["kind"])

    vpmm.use_as_torch_allocator()             # PyTorch CUDAPluggableAllocator

The library is found through $VPMM_LIBRARY, then next to a source checkout's
build/ directory, then the system loader (libvpmm.so.1).
"""
import contextlib
import ctypes
import ctypes.util
import os

__all__ = ["Error", "Pool", "region", "library_path", "use_as_torch_allocator", "default_pool_stats",
           "version", "BACKENDS", "backend_info"]

_STATUS = {
    0: "VPMM_OK", 1: "VPMM_ERR_INVALID_ARGUMENT", 2: "VPMM_ERR_OUT_OF_MEMORY",
    3: "VPMM_ERR_UNKNOWN_POINTER", 4: "VPMM_ERR_WRONG_STATE", 5: "VPMM_ERR_UNSUPPORTED",
    6: "VPMM_ERR_BACKEND", 7: "VPMM_ERR_INTERNAL", 8: "VPMM_ERR_TIMEOUT",
}
ALLOC_HOST_BACKUP = 1
BACKENDS = {"auto": 0, "cuda": 1, "hip": 2, "host": 3}
REGION_KINDS = {1: "live", 2: "free", 3: "hole", 4: "zombie", 5: "small", 6: "paused"}


def library_path():
    env = os.environ.get("VPMM_LIBRARY")
    if env:
        return env
    here = os.path.dirname(os.path.abspath(__file__))
    for build in ("build", "build-ci", "build-gpu"):
        cand = os.path.join(here, "..", "..", "..", build, "libvpmm.so.1")
        if os.path.exists(cand):
            return os.path.normpath(cand)
    return ctypes.util.find_library("vpmm") or "libvpmm.so.1"


_lib = ctypes.CDLL(library_path())
_u64, _i32, _u32, _vp = ctypes.c_uint64, ctypes.c_int32, ctypes.c_uint32, ctypes.c_void_p


class _Config(ctypes.Structure):
    _fields_ = [("struct_size", _u32), ("backend", _i32), ("device", _i32), ("config_error", _i32),
                ("page_size", _u64), ("va_size", _u64), ("initial_pages", _u64),
                ("host_capacity", _u64), ("max_handle_size", _u64), ("small_size", _u64),
                ("backup_cache_size", _u64), ("memory_limit", _u64),
                ("memory_limit_fraction", ctypes.c_double), ("watermark_trigger", ctypes.c_double),
                ("watermark_stop", ctypes.c_double), ("backup_pinned_limit", _u64),
                ("hip_chunk_size", _u64)]


_STAT_FIELDS = [
    "mapped_bytes", "reserved_va_bytes", "live_bytes", "requested_bytes", "free_bytes", "hole_bytes",
    "zombie_bytes", "peak_mapped_bytes", "peak_live_bytes", "n_malloc", "n_free", "n_defrag", "n_grow",
    "pages_created", "bytes_remapped", "page_size", "handles", "handles_created", "va_chunks",
    "largest_free_bytes", "small_bytes", "small_live_bytes", "n_small_malloc", "n_cross_stream_reuse",
    "n_stream_waits", "n_events_recorded", "n_zombies_reaped", "n_live", "paused_bytes", "backup_bytes",
    "backup_cache_bytes", "n_pause", "n_resume", "n_trim", "bytes_trimmed", "capacity_bytes",
    "reserved_bytes", "reservation_used_bytes", "available_bytes", "watermark_trigger_bytes",
    "watermark_stop_bytes", "under_pressure", "n_oom", "n_oom_recovered", "backup_pinned_bytes",
    "backup_pageable_bytes"]


class _Stats(ctypes.Structure):
    _fields_ = [("struct_size", _u32), ("reserved0", _u32)] + [(n, _u64) for n in _STAT_FIELDS]


class _RegionInfo(ctypes.Structure):
    # vpmm_region_info of ABI 1 (72 bytes on 64-bit targets, no padding).
    _fields_ = [("struct_size", _u32), ("kind", _i32), ("va", _u64), ("size", _u64),
                ("chunk_offset", _u64), ("chunk", _u32), ("handles", _u32), ("event_pending", _i32),
                ("reserved0", _u32), ("id", _u64), ("requested", _u64), ("stream", _vp)]


_REGION_FIELDS = ["va", "size", "chunk_offset", "chunk", "handles", "event_pending", "id", "requested",
                  "stream"]


class _Attrs(ctypes.Structure):
    _fields_ = [("struct_size", _u32), ("flags", _u32), ("tag", ctypes.c_char_p), ("reservation", _vp)]


def _sig(name, res, *args):
    f = getattr(_lib, name)
    f.restype, f.argtypes = res, list(args)
    return f


_version = _sig("vpmm_version", ctypes.c_char_p)
_last_error = _sig("vpmm_last_error", ctypes.c_char_p)
_config_init = _sig("vpmm_config_init", None, ctypes.POINTER(_Config))
_config_init_defaults = _sig("vpmm_config_init_defaults", None, ctypes.POINTER(_Config))
_create = _sig("vpmm_pool_create", _i32, ctypes.POINTER(_Config), ctypes.POINTER(_vp))
_destroy = _sig("vpmm_pool_destroy", _i32, _vp)
_malloc_ex = _sig("vpmm_pool_malloc_ex", _i32, _vp, _u64, _vp, ctypes.POINTER(_Attrs), ctypes.POINTER(_vp))
_malloc = _sig("vpmm_pool_malloc", _i32, _vp, _u64, _vp, ctypes.POINTER(_vp))
_free = _sig("vpmm_pool_free", _i32, _vp, _vp, _vp)
_stats = _sig("vpmm_pool_stats", _i32, _vp, ctypes.POINTER(_Stats))
_check = _sig("vpmm_pool_check", _i32, _vp)
_pause_ex = _sig("vpmm_pool_pause_ex", _i32, _vp, ctypes.c_char_p, ctypes.POINTER(_u64))
_resume_ex = _sig("vpmm_pool_resume_ex", _i32, _vp, ctypes.c_char_p, ctypes.POINTER(_u64))
_dump = _sig("vpmm_pool_dump", _i32, _vp, ctypes.POINTER(_RegionInfo), ctypes.c_size_t,
             ctypes.POINTER(ctypes.c_size_t))
_trim = _sig("vpmm_pool_trim", _i32, _vp, _u64)
_push = _sig("vpmm_region_push", _i32, ctypes.c_char_p, _u32)
_pop = _sig("vpmm_region_pop", _i32)
_dump_text = _sig("vpmm_pool_dump_text", _i32, _vp, ctypes.c_char_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_size_t))
_backend_name = _sig("vpmm_pool_backend_name", ctypes.c_char_p, _vp)
_default_pool = _sig("vpmm_default_pool", _i32, _i32, ctypes.POINTER(_vp))
_backend_info = _sig("vpmm_backend_info", _i32, _i32, ctypes.c_char_p, ctypes.c_size_t,
                     ctypes.POINTER(ctypes.c_size_t))


class Error(RuntimeError):
    """A vpmm call failed: .status is the code, .name its VPMM_* name."""

    def __init__(self, status):
        self.status = status
        self.name = _STATUS.get(status, "VPMM_ERR_UNKNOWN")
        super().__init__(f"{self.name}: {_last_error().decode(errors='replace')}")


def _ok(status):
    # VPMM_OK is the only success (ABI 1 has no non-zero success status).
    if status != 0:
        raise Error(status)


def version():
    return _version().decode()


def backend_info(backend):
    """One line about the driver a backend would use here ("hip": the HIP
    runtime's file and version and the ROCm paths it takes). Raises Error
    (VPMM_ERR_UNSUPPORTED) when the backend is not built in or has nothing
    to describe."""
    buf = ctypes.create_string_buffer(1024)
    n = ctypes.c_size_t()
    _ok(_backend_info(BACKENDS[backend], buf, len(buf), ctypes.byref(n)))
    return buf.value.decode(errors="replace")


class Pool:
    """A libvpmm pool. Keyword arguments are vpmm_config fields
    (page_size, va_size, initial_pages, host_capacity, max_handle_size, ...).
    With use_env=False the VPMM_* environment variables are ignored
    (vpmm_config_init_defaults); by default they apply (vpmm_config_init)."""

    def __init__(self, backend="auto", use_env=True, **fields):
        cfg = _Config()
        (_config_init if use_env else _config_init_defaults)(ctypes.byref(cfg))
        cfg.backend = BACKENDS[backend]
        for k, v in fields.items():
            if not hasattr(cfg, k):
                raise TypeError(f"unknown vpmm_config field {k!r}")
            setattr(cfg, k, v)
        h = _vp()
        _ok(_create(ctypes.byref(cfg), ctypes.byref(h)))
        self._h = h

    def close(self):
        if self._h:
            _ok(_destroy(self._h))
            self._h = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @property
    def backend(self):
        return _backend_name(self._h).decode()

    def malloc(self, size, stream=None, tag=None, host_backup=False):
        out = _vp()
        if tag is None and not host_backup:
            _ok(_malloc(self._h, size, stream, ctypes.byref(out)))
        else:
            a = _Attrs(ctypes.sizeof(_Attrs), ALLOC_HOST_BACKUP if host_backup else 0,
                       tag.encode() if tag else None, None)
            _ok(_malloc_ex(self._h, size, stream, ctypes.byref(a), ctypes.byref(out)))
        return out.value

    def free(self, ptr, stream=None):
        _ok(_free(self._h, ptr, stream))

    def pause(self, tag=None):
        """True if something was paused, False if nothing with `tag` was active."""
        n = _u64()
        _ok(_pause_ex(self._h, tag.encode() if tag else None, ctypes.byref(n)))
        return n.value > 0

    def resume(self, tag=None):
        """True if something was resumed, False if nothing with `tag` was paused."""
        n = _u64()
        _ok(_resume_ex(self._h, tag.encode() if tag else None, ctypes.byref(n)))
        return n.value > 0

    def trim(self, keep_bytes=0):
        _ok(_trim(self._h, keep_bytes))

    def check(self):
        _ok(_check(self._h))

    def stats(self):
        s = _Stats()
        s.struct_size = ctypes.sizeof(_Stats)
        _ok(_stats(self._h, ctypes.byref(s)))
        return {n: getattr(s, n) for n in _STAT_FIELDS}

    def regions(self):
        """Every region in ascending VA order, as dicts of vpmm_region_info
        fields with kind as a name ("live", "free", "hole", ...)."""
        n = ctypes.c_size_t()
        _ok(_dump(self._h, None, 0, ctypes.byref(n)))
        while True:
            cap = max(n.value, 1)
            buf = (_RegionInfo * cap)()
            buf[0].struct_size = ctypes.sizeof(_RegionInfo)  # the stride the library writes with
            _ok(_dump(self._h, buf, cap, ctypes.byref(n)))
            if n.value <= cap:
                break
        return [dict({"kind": REGION_KINDS.get(r.kind, r.kind)}, **{f: getattr(r, f) for f in _REGION_FIELDS})
                for r in buf[:n.value]]

    def dump(self):
        need = ctypes.c_size_t()
        _ok(_dump_text(self._h, None, 0, ctypes.byref(need)))
        buf = ctypes.create_string_buffer(need.value)
        _ok(_dump_text(self._h, buf, need.value, None))
        return buf.value.decode()


@contextlib.contextmanager
def region(tag, host_backup=False):
    """Tag every allocation this thread makes inside the block (nestable)."""
    _ok(_push(tag.encode() if tag else None, ALLOC_HOST_BACKUP if host_backup else 0))
    try:
        yield
    finally:
        _ok(_pop())


def use_as_torch_allocator():
    """Route PyTorch's CUDA allocations to libvpmm's default pools. Call before
    the first CUDA allocation. Returns the CUDAPluggableAllocator."""
    import torch  # only here: the binding itself needs no third-party package
    alloc = torch.cuda.memory.CUDAPluggableAllocator(library_path(), "vpmm_torch_malloc", "vpmm_torch_free")
    torch.cuda.memory.change_current_allocator(alloc)
    return alloc


def default_pool_stats(device=0):
    """Statistics of the default pool of `device` (the pool the PyTorch hooks
    allocate from), as a dict of vpmm_stats fields. Creates the pool if no
    allocation made it yet."""
    h = _vp()
    _ok(_default_pool(device, ctypes.byref(h)))
    s = _Stats()
    s.struct_size = ctypes.sizeof(_Stats)
    _ok(_stats(h, ctypes.byref(s)))
    return {n: getattr(s, n) for n in _STAT_FIELDS}
