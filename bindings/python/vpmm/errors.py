"""The exceptions of libvpmm: one class per VPMM_ERR_* status, all under VpmmError.

Every failed call raises the class of its status; the exception carries the
status code (``.status``), its name (``.name``, e.g. ``"VPMM_ERR_OUT_OF_MEMORY"``)
and the library's sentence naming the call and the offending value
(``.message``). Classes also derive from the closest built-in exception, so
``except MemoryError`` catches :class:`OutOfMemory` and ``except ValueError``
catches :class:`InvalidArgument`.
"""
from __future__ import annotations

from typing import Dict, Type

__all__ = ["VpmmError", "InvalidArgument", "OutOfMemory", "UnknownPointer", "WrongState",
           "Unsupported", "BackendError", "InternalError", "Timeout", "STATUS_NAMES",
           "error_for_status"]

#: VPMM_* status codes (pinned forever in vpmm.h) and their names, as the
#: library's one table has them (tests/api/check_status_names.py compares).
STATUS_NAMES: Dict[int, str] = {
    0: "VPMM_OK", 1: "VPMM_ERR_INVALID_ARGUMENT", 2: "VPMM_ERR_OUT_OF_MEMORY",
    3: "VPMM_ERR_UNKNOWN_POINTER", 4: "VPMM_ERR_WRONG_STATE", 5: "VPMM_ERR_UNSUPPORTED",
    6: "VPMM_ERR_BACKEND", 7: "VPMM_ERR_INTERNAL", 8: "VPMM_ERR_TIMEOUT",
}


class VpmmError(RuntimeError):
    """A libvpmm call failed.

    Attributes:
        status: the VPMM_ERR_* code.
        name: its name, e.g. ``"VPMM_ERR_WRONG_STATE"``.
        message: the library's explanation (vpmm_last_error() of the call).
    """

    status: int = -1

    def __init__(self, status: int, message: str = "") -> None:
        self.status = status
        self.name = STATUS_NAMES.get(status, "VPMM_ERR_UNKNOWN")
        self.message = message
        super().__init__(f"{self.name}: {message}" if message else self.name)


class InvalidArgument(VpmmError, ValueError):
    """VPMM_ERR_INVALID_ARGUMENT: a bad size, tag, flag, configuration or handle."""

    status = 1


class OutOfMemory(VpmmError, MemoryError):
    """VPMM_ERR_OUT_OF_MEMORY: the device (or a limit) refused memory.

    The pool is unchanged; a failed resume leaves the rest paused with backups
    intact, so the call can be retried once memory was freed."""

    status = 2


class UnknownPointer(VpmmError):
    """VPMM_ERR_UNKNOWN_POINTER: the pointer is not an allocation of this pool."""

    status = 3


class WrongState(VpmmError):
    """VPMM_ERR_WRONG_STATE: the operation is not valid in the object's state."""

    status = 4


class Unsupported(VpmmError):
    """VPMM_ERR_UNSUPPORTED: backend not built, no device, or a missing capability."""

    status = 5


class BackendError(VpmmError):
    """VPMM_ERR_BACKEND: the driver (or host OS) failed for a reason other than OOM."""

    status = 6


class InternalError(VpmmError):
    """VPMM_ERR_INTERNAL: an invariant of the pool does not hold (a bug: please report)."""

    status = 7


class Timeout(VpmmError, TimeoutError):
    """VPMM_ERR_TIMEOUT: a wait with a timeout ran out; nothing changed."""

    status = 8


_BY_STATUS: Dict[int, Type[VpmmError]] = {
    c.status: c for c in (InvalidArgument, OutOfMemory, UnknownPointer, WrongState, Unsupported,
                          BackendError, InternalError, Timeout)}


def error_for_status(status: int, message: str = "") -> VpmmError:
    """The exception for a failed status: its own class, VpmmError for codes
    newer than this binding."""
    return _BY_STATUS.get(status, VpmmError)(status, message)
