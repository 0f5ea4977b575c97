"""TMS's backup options in libvpmm's words: which vpmm.region / resume
keywords a region's enable_cpu_backup, cpu_backup_backend ("pinned" or
"mmap"), enable_disk_backup and disk_backup_dir, and retain_cpu_backup,
become. The mapping lives in region_kwargs() and resume_kwargs() alone.

Stores beyond pinned host memory (mmap, disk) and retained backups need
libvpmm's backup stores; where the loaded vpmm package does not take those
keywords, require() raises NotImplementedError naming the option, instead
of quietly keeping the bytes somewhere else. No PyTorch and no libvpmm
here (tests/preload/test_tms_python.py runs it without either)."""
from __future__ import annotations

import inspect
from typing import Any, Callable, Dict, Mapping, Optional

from . import _env

__all__ = ["BACKENDS", "region_kwargs", "resume_kwargs", "require"]

#: TMS's cpu_backup_backend values.
BACKENDS = ("pinned", "mmap")


def region_kwargs(enable_cpu_backup: bool = False, cpu_backup_backend: Optional[str] = None,
                  enable_disk_backup: bool = False, disk_backup_dir: Optional[str] = None,
                  environ: Optional[Mapping[str, str]] = None) -> Dict[str, Any]:
    """The vpmm.region keywords (after the tag) of a TMS region with these
    options. TMS's rules are kept: the two backups exclude each other, a
    backend needs enable_cpu_backup, a backend left None is
    TMS_INIT_CPU_BACKUP_BACKEND's or "pinned", a disk backup needs a
    directory (the argument, set_disk_backup_dir() or TMS_DISK_BACKUP_DIR).
    Raises ValueError on a combination TMS refuses."""
    if enable_cpu_backup and enable_disk_backup:
        raise ValueError("enable_cpu_backup and enable_disk_backup are mutually exclusive")
    if cpu_backup_backend is not None and not enable_cpu_backup:
        raise ValueError("cpu_backup_backend requires enable_cpu_backup=True")
    if enable_disk_backup:
        directory = disk_backup_dir or _env.text("TMS_DISK_BACKUP_DIR", environ)
        if not directory:
            raise ValueError("enable_disk_backup needs a directory: disk_backup_dir=, "
                             "set_disk_backup_dir() or TMS_DISK_BACKUP_DIR")
        return {"host_backup": True, "backup_store": "disk", "backup_dir": directory}
    if not enable_cpu_backup:
        return {"host_backup": False}
    backend = cpu_backup_backend or _env.text("TMS_INIT_CPU_BACKUP_BACKEND", environ) or "pinned"
    if backend not in BACKENDS:
        raise ValueError(f"cpu_backup_backend must be one of {BACKENDS}, not {backend!r}")
    if backend == "pinned":  # libvpmm's own host backup (pinned, cached across pauses)
        return {"host_backup": True}
    return {"host_backup": True, "backup_store": backend}


def resume_kwargs(retain_cpu_backup: bool) -> Dict[str, Any]:
    """The Pool.resume keywords for TMS's retain_cpu_backup, which TMS reads
    when it resumes: the backups then survive the resume (get_cpu_backup
    still answers, at the same host address)."""
    return {"retain_backup": True} if retain_cpu_backup else {}


_PINNED_INSTEAD = "use enable_cpu_backup=True with the default (pinned) backend"


def require(fn: Callable[..., Any], kwargs: Mapping[str, Any], what: str,
            instead: str = _PINNED_INSTEAD) -> None:
    """Raise NotImplementedError when `fn` (the vpmm function the keywords go
    to) does not take a keyword in `kwargs`: the backup store it names is not
    in this libvpmm's Python package yet. `what` names the TMS call, `instead`
    what to do meanwhile."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):  # no signature to read: let the call itself decide
        return
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return
    missing = sorted(k for k in kwargs if k not in params)
    if missing:
        options = ", ".join(f"{k}={kwargs[k]!r}" for k in missing)
        raise NotImplementedError(f"torch_memory_saver (libvpmm): {what} needs libvpmm's backup stores "
                                  f"({options}), which this libvpmm does not offer yet; {instead}")
