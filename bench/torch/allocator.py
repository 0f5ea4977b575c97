"""Chooses the allocator of this process from the command line, before the
first CUDA allocation: 'native', 'expandable' (PyTorch's expandable_segments),
'cudamallocasync' (PyTorch's backend:cudaMallocAsync, the driver's pool) or
'vpmm' (libvpmm through CUDAPluggableAllocator; VPMM_* variables pick its
policy); 'pluggable-async' is a CUDAPluggableAllocator over cudaMallocAsync
(bench/torch/passthrough_allocator.cu, built to PASSTHROUGH_LIBRARY): what
the pluggable path costs whatever allocator is behind it;
'pluggable-async-nodeps' the same with the pool's GPU-side waits across
streams turned off (internal dependencies, opportunistic reuse); 'vpmm-timed'
libvpmm's hooks through bench/torch/timed_hooks.c (built to
TIMED_HOOKS_LIBRARY), which clocks each call. Shared by the scripts in
bench/torch/ and tests/gpu/."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "bindings", "python"))


# PyTorch's own allocators besides the native one, by PYTORCH_CUDA_ALLOC_CONF.
# Under cudaMallocAsync PyTorch reports the driver pool's reserved and used
# high-water marks as reserved_bytes and allocated_bytes.
TORCH_CONF = {"expandable": "expandable_segments:True",
              "cudamallocasync": "backend:cudaMallocAsync"}


def choose(name):
    """Returns a function giving (peak device bytes held by the allocator,
    current bytes held). Must run before torch touches the GPU."""
    if name in TORCH_CONF:
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = TORCH_CONF[name]
    elif name == "native":
        os.environ.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    import torch

    def vpmm_held():
        import vpmm
        s = vpmm.default_pool_stats()
        return s["peak_mapped_bytes"], s["mapped_bytes"]
    if name == "vpmm":
        import vpmm
        vpmm.use_as_torch_allocator()
        return vpmm_held
    if name == "vpmm-timed":  # libvpmm's hooks through bench/torch/timed_hooks.c's clock
        import ctypes
        import vpmm  # noqa: F401  (loads the library the hooks forward to)
        lib = os.environ.get("TIMED_HOOKS_LIBRARY")
        if not lib:
            raise SystemExit("vpmm-timed needs TIMED_HOOKS_LIBRARY (bench/torch/timed_hooks.c, built)")
        pluggable = torch.cuda.memory.CUDAPluggableAllocator(lib, "timed_malloc", "timed_free")
        pluggable.allocator().set_record_stream_fn(
            ctypes.cast(ctypes.CDLL(lib).timed_record_stream, ctypes.c_void_p).value)
        torch.cuda.memory.change_current_allocator(pluggable)
        return vpmm_held
    if name in ("pluggable-async", "pluggable-async-nodeps"):
        lib = os.environ.get("PASSTHROUGH_LIBRARY")
        if not lib:
            raise SystemExit(f"{name} needs PASSTHROUGH_LIBRARY (bench/torch/passthrough_allocator.cu, built)")
        prefix = "passthrough_nodeps" if name.endswith("-nodeps") else "passthrough"
        torch.cuda.memory.change_current_allocator(
            torch.cuda.memory.CUDAPluggableAllocator(lib, prefix + "_malloc", prefix + "_free"))

        def held():  # the driver pool's, as under backend:cudaMallocAsync: not read here
            return 0, 0
        return held
    if name != "native" and name not in TORCH_CONF:
        raise SystemExit(f"unknown allocator {name!r}: native, {', '.join(TORCH_CONF)}, vpmm, vpmm-timed, "
                         "pluggable-async or pluggable-async-nodeps")

    def held():
        st = torch.cuda.memory_stats()
        return st.get("reserved_bytes.all.peak", 0), st.get("reserved_bytes.all.current", 0)
    return held


# The pool's own work a client reports under libvpmm, to tell the driver
# calls of a slow step from its kernels (driver_ns: time the allocating
# threads spent in driver calls the pool made, where the library counts it),
# and the driver's calls by kind ("drv_<kind>_calls" / "drv_<kind>_ns", all
# of the pool's threads: vpmm_pool_driver_profile).
POOL_WORK = ("n_defrag", "n_grow", "bytes_remapped", "handles_created", "n_malloc", "driver_ns", "handles_moved",
             "n_budget_grow", "bytes_budget_grown", "n_stream_waits", "n_cross_stream_reuse")


def pool_work(name):
    """POOL_WORK's counters now under libvpmm ({} under another allocator)."""
    if not name.startswith("vpmm"):
        return {}
    import vpmm
    st = vpmm.default_pool_stats()
    work = {k: st[k] for k in POOL_WORK if k in st}
    try:  # the driver's calls by kind (vpmm_pool_driver_profile), where the library has it
        work.update({"drv_" + k: v for k, v in vpmm.default_pool(0).driver_profile().items()})
    except vpmm.Error:
        pass
    return work


def live_peak_and_work(name):
    """(peak live tensor bytes, pool work) after a run under `name`. The live
    peak is the floor no allocator goes below (PyTorch: allocated_bytes peak,
    block-rounded; libvpmm: peak_live_bytes, page-rounded); the pool work is
    POOL_WORK's counters under libvpmm, {} otherwise."""
    if name.startswith("vpmm"):
        import vpmm
        st = vpmm.default_pool_stats()
        return st["peak_live_bytes"], pool_work(name)
    if name.startswith("pluggable-async"):
        return 0, {}
    import torch
    return torch.cuda.memory_stats().get("allocated_bytes.all.peak", 0), {}
