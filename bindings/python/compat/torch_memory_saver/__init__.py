"""A drop-in for torch_memory_saver on libvpmm.

Code written against torch_memory_saver runs unchanged with the directory
holding this package (bindings/python/compat) on PYTHONPATH, next to the
vpmm package (bindings/python, or vpmm installed):

    from torch_memory_saver import torch_memory_saver
    with torch_memory_saver.region(tag="weights", enable_cpu_backup=True):
        w = torch.randn(1 << 20, device="cuda")
    torch_memory_saver.pause("weights"); torch_memory_saver.resume("weights")

Every behavioural difference from torch_memory_saver is listed in
docs/torch_memory_saver.md of the libvpmm tree; the main ones: a resume
that runs out of memory raises vpmm.OutOfMemory (retry it) instead of
exiting the process, and misuse raises exceptions instead of exit(1).
"""
from __future__ import annotations

from .entrypoint import TorchMemorySaver, configure_subprocess

__all__ = ["TorchMemorySaver", "torch_memory_saver", "configure_subprocess"]

#: The process-wide instance (torch_memory_saver's public singleton).
torch_memory_saver = TorchMemorySaver()
