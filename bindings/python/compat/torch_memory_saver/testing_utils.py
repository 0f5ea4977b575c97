"""Helpers torch_memory_saver's example scripts import (device name, cache
emptying, device memory in use)."""
from __future__ import annotations

from .utils import is_xpu

__all__ = ["get_device", "empty_cache", "get_and_print_gpu_memory", "is_xpu"]


def get_device() -> str:
    """The accelerator device name the examples allocate on ("cuda"; libvpmm
    drives CUDA devices only)."""
    return "cuda"


def empty_cache() -> None:
    """torch.cuda.empty_cache() (under libvpmm_preload.so the freed memory
    goes back to the device too)."""
    import torch
    torch.cuda.empty_cache()


def get_and_print_gpu_memory(message: str, gpu_id: int = 0) -> int:
    """Bytes in use on device `gpu_id` (total minus free, as the driver
    reports it, so every process and allocator counts), printed with
    `message`; returned for before/after comparisons."""
    import torch
    free, total = torch.cuda.mem_get_info(gpu_id)
    used = total - free
    print(f"GPU {gpu_id} memory: {used / 1024 ** 3:.2f} GB ({message})")
    return used
