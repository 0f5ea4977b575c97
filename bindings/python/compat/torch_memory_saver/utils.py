"""Helpers torch_memory_saver's own tests import."""
from __future__ import annotations

import contextlib
import os
from typing import Iterator, Optional

__all__ = ["change_env", "is_xpu"]


@contextlib.contextmanager
def change_env(key: str, value: Optional[str]) -> Iterator[None]:
    """Set (or, with None, remove) an environment variable for the block,
    then restore what was there before."""
    old = os.environ.get(key)
    if value is None:
        os.environ.pop(key, None)
    else:
        os.environ[key] = value
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = old


def is_xpu() -> bool:
    """False: the drop-in runs on CUDA devices only."""
    return False
