"""torch_memory_saver's TMS_* environment variables, read as TMS reads them.

No PyTorch and no libvpmm here: what the drop-in decides from the
environment is tested without either (tests/preload/test_tms_python.py)."""
from __future__ import annotations

import os
from typing import Mapping, Optional

__all__ = ["flag", "text"]

_ON = ("1", "true", "yes", "on")
_OFF = ("0", "false", "no", "off")


def flag(name: str, environ: Optional[Mapping[str, str]] = None) -> bool:
    """A TMS switch: 1/true/yes/on is on; unset, empty (what TMS's own
    change_env leaves behind) or 0/false/no/off is off. Anything else raises
    ValueError naming the variable (TMS exits on it; libvpmm_preload.so, which
    cannot raise, prints it and takes it as off)."""
    value = (os.environ if environ is None else environ).get(name, "")
    v = value.strip().lower()
    if v in _ON:
        return True
    if v in _OFF or not v:
        return False
    raise ValueError(f"torch_memory_saver (libvpmm): {name}={value!r} is neither 1 nor 0")


def text(name: str, environ: Optional[Mapping[str, str]] = None) -> Optional[str]:
    """A TMS setting's value; None when unset or empty."""
    value = (os.environ if environ is None else environ).get(name, "")
    return value or None
