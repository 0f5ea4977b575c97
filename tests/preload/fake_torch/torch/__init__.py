"""A stand-in for PyTorch with just what the torch_memory_saver drop-in
calls in hook mode "preload", for tests/preload/test_tms_python.py on a
machine without PyTorch or a GPU. Allocation is the test's business (it
calls cudaMalloc through ctypes, as PyTorch's caching allocator would); this
module records which MemPool is active and how many MemPools live."""
import contextlib
import types
import weakref

__version__ = "0.0-fake"

_live_pools = weakref.WeakSet()
active_pools = []  # the use_mem_pool stack, innermost last


class _MemPool:
    def __init__(self, allocator=None):
        self.allocator = allocator
        _live_pools.add(self)

    def snapshot(self):
        return []  # no blocks: empty


def live_mem_pools():
    """How many MemPools are alive (the drop-in drops disable()'s when empty)."""
    return len(_live_pools)


@contextlib.contextmanager
def _use_mem_pool(pool, device=None):
    active_pools.append(pool)
    try:
        yield
    finally:
        active_pools.pop()


def _no_op(*args, **kwargs):
    return None


class _Graph:
    def __init__(self, cuda_graph, pool=None, stream=None, capture_error_mode="global"):
        self.cuda_graph = cuda_graph

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


cuda = types.SimpleNamespace(
    MemPool=_MemPool,
    use_mem_pool=_use_mem_pool,
    current_device=lambda: 0,
    device_count=lambda: 1,
    device=lambda d: contextlib.nullcontext(),
    synchronize=_no_op,
    empty_cache=_no_op,
    is_current_stream_capturing=lambda: False,
    is_available=lambda: True,
    mem_get_info=lambda device=None: (1 << 30, 1 << 31),
    graph=_Graph,
)
version = types.SimpleNamespace(cuda="13.0", hip=None)
_C = types.SimpleNamespace(_cuda_hasPrimaryContext=lambda d: d == 0)
Tensor = object
