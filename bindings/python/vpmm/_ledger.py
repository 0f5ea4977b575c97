"""The ledger: one memory budget for the pools of several processes on a
device (docs/ledger.md). A pool joins one when VPMM_LEDGER names it (every
pool of the process) or through vpmm_pool_create_ledger in C.

    import vpmm
    info = vpmm.ledger("rl-job")            # budget, admitted, members
    for m in info["members"]:
        print(m["pid"], m["ordinal"], m["device_id"], m["admitted_bytes"])
    vpmm.set_ledger_budget("rl-job", 0, 60 << 30)

Reading the ledger reclaims the slots of members whose process is gone.
"""
from __future__ import annotations

import ctypes
import uuid
from typing import Any, Dict, Optional

from . import _library as L

__all__ = ["ledger", "set_ledger_budget", "remove_ledger", "LEDGER_HOST"]

#: vpmm_ledger_set_budget's device for the host budget of backups.
LEDGER_HOST = -1
_MEMBERS = 64  # VPMM_LEDGER_MEMBERS

_have = hasattr(L.lib, "vpmm_ledger_read")
LedgerInfo = L.make_struct("vpmm_ledger_info", "LedgerInfo") if _have else None
LedgerMember = L.make_struct("vpmm_ledger_member", "LedgerMember") if _have else None
_read = L.optional("vpmm_ledger_read", L.i32, L.cp, L.i32, L.vp, L.vp, L.u32, L.P(L.u32))
_set_budget = L.optional("vpmm_ledger_set_budget", L.i32, L.cp, L.i32, L.u64)
_remove = L.optional("vpmm_ledger_remove", L.i32, L.cp)


def _need(f: Any) -> Any:
    if f is None:
        raise L.error_for_status(5, "this libvpmm has no ledger (vpmm_ledger_read): a newer one is needed")
    return f


def _device_id(fields: Dict[str, Any]) -> Optional[str]:
    # The identity as a UUID's text (CUDA: nvidia-smi -L's GPU-... part),
    # None unless the library read it whole (device_id_state 0). A library
    # from before the field has no device_id_state: None too.
    if fields.get("device_id_state", 1) != 0:
        return None
    return str(uuid.UUID(int=(fields["device_id_hi"] << 64) | fields["device_id_lo"]))


def ledger(name: str, device: int = 0) -> Dict[str, Any]:
    """Ledger `name` as its segment says now: the budget and admitted bytes of
    `device` (the ledger's index) and that device's identity, the host
    budget, and every member (pid, device, its own ordinal of the device,
    the device's identity, admitted, mapped, reserved, backed up,
    admissions, refusals, time spent admitting). An identity is
    ``device_id``, a UUID's text, or None when it is not recorded or
    unreadable (``device_id_state`` says which: 1 not recorded, 2 unreadable,
    3 no device of that index yet); a member's ``ordinal`` is -1 when not
    recorded (a member of an earlier libvpmm), -2 when unreadable.
    Raises :class:`InvalidArgument` when there is no such ledger and
    :class:`WrongState` when its segment is refused (another user's, a mode
    other than 0600, a corrupt header)."""
    read = _need(_read)
    info = L.sized(LedgerInfo)
    members = (LedgerMember * _MEMBERS)()
    members[0].struct_size = ctypes.sizeof(LedgerMember)
    n = L.u32()
    L.check(read(name.encode(), device, ctypes.byref(info), ctypes.cast(members, L.vp), _MEMBERS, ctypes.byref(n)))
    out: Dict[str, Any] = {f: getattr(info, f) for f in L.field_names(LedgerInfo)}
    out["name"] = name
    out["device_id"] = _device_id(out)
    out["members"] = [{f: getattr(members[i], f) for f in L.field_names(LedgerMember)}
                      for i in range(min(n.value, _MEMBERS))]
    for m in out["members"]:
        m["device_id"] = _device_id(m)
    return out


def set_ledger_budget(name: str, device: int, nbytes: int) -> None:
    """Set the budget of `device` (the ledger's index 0-15 of a device: devices
    are keyed by identity, numbered in the order they first joined), or with
    LEDGER_HOST the host budget,
    while the ledger runs. A lower budget takes nothing from anyone: nothing
    new is admitted until the members hold less."""
    L.check(_need(_set_budget)(name.encode(), device, nbytes))


def remove_ledger(name: str) -> None:
    """Remove the ledger's name (members keep their mapping; the next pool to
    join makes a new ledger)."""
    L.check(_need(_remove)(name.encode()))
