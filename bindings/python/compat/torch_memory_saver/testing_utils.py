"""Helpers torch_memory_saver's example scripts import."""
from __future__ import annotations

__all__ = ["get_device"]


def get_device() -> str:
    """The accelerator device name the examples allocate on ("cuda")."""
    return "cuda"
