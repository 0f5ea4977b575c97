"""A drop-in for torch_memory_saver on libvpmm.

Code written against torch_memory_saver runs unchanged with the directory
holding this package (bindings/python/compat) on PYTHONPATH, next to the
vpmm package (bindings/python, or vpmm installed):

    from torch_memory_saver import torch_memory_saver
    with torch_memory_saver.region(tag="weights", enable_cpu_backup=True):
        w = torch.randn(1 << 20, device="cuda")
    torch_memory_saver.pause("weights"); torch_memory_saver.resume("weights")

Both of TMS's hook modes: "torch" (PyTorch's allocations inside regions)
and "preload" (every cudaMalloc of a process started inside
configure_subprocess(), which puts libvpmm_preload.so under it; with
TMS_INIT_ENABLE=1 all of them pausable from the start). Every deliberate
difference from torch_memory_saver is listed in docs/torch_memory_saver.md
of the libvpmm tree; the main ones: a resume that runs out of memory raises
vpmm.OutOfMemory (retry it) instead of exiting the process, and misuse
raises exceptions instead of exit(1).
"""
from __future__ import annotations

from . import _preload

# Under libvpmm_preload.so the vpmm package must load the libvpmm the
# interposer loaded, before anything imports vpmm.
_preload.bind_library()

from .entrypoint import TorchMemorySaver, configure_subprocess  # noqa: E402

__all__ = ["TorchMemorySaver", "torch_memory_saver", "configure_subprocess"]

#: The process-wide instance (torch_memory_saver's public singleton).
torch_memory_saver = TorchMemorySaver()
