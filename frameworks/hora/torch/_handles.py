"""The integer handles of asynchronous torch operations, as in Horovod's torch API.

Each handle maps to the engine handles of one frontend call and a function that builds the call's
result (output tensor, list, or tuple) once they are done.
"""

from __future__ import annotations

import itertools
import threading
from typing import Any, Callable

from hora.errors import HoraError, InvalidCollectiveError


class _Pending:
    """Engine handles of one frontend operation and how to build its result once they are done."""

    __slots__ = ("finish", "handles")

    def __init__(self, handles: list, finish: Callable[[], Any]) -> None:
        self.handles = handles
        self.finish = finish


_table: dict[int, _Pending] = {}
_table_lock = threading.Lock()
_next_id = itertools.count(1)


def register(handles: list, finish: Callable[[], Any]) -> int:
    with _table_lock:
        handle = next(_next_id)
        _table[handle] = _Pending(handles, finish)
    return handle


def poll(handle: int) -> bool:
    """Return True when the operation behind ``handle`` has finished (successfully or not).

    Raises:
        ValueError: the handle was never created or was already synchronized.
    """
    record = _table.get(handle)
    if record is None:
        raise ValueError(f"Handle {handle} was not created or has been cleared.")
    return all(h.poll() for h in record.handles)


def _as_frontend_error(exc: Exception) -> Exception:
    if isinstance(exc, HoraError):
        return exc
    if isinstance(exc, ValueError):
        return InvalidCollectiveError(str(exc))
    if isinstance(exc, RuntimeError):
        return HoraError(str(exc))
    return exc


def synchronize(handle: int) -> Any:
    """Wait for the operation behind ``handle`` and return its result.

    The result is the output tensor (for in-place operations, the tensor that was passed in), a
    list for grouped operations, and ``(output, received_splits)`` for alltoall. An unknown handle
    gives None. The handle is released either way.

    Raises:
        HoraError: the operation failed on the engine (mismatch across ranks, transport failure,
            shutdown, refused after negotiation, ...). ``hora.HorovodInternalError`` is the same
            class.
    """
    with _table_lock:
        record = _table.get(handle)
    if record is None:
        return None
    try:
        first_error: Exception | None = None
        for h in record.handles:
            try:
                h.wait()
            except (RuntimeError, ValueError, TypeError) as exc:  # wait for the rest first
                if first_error is None:
                    first_error = exc
        if first_error is not None:
            converted = _as_frontend_error(first_error)
            if converted is first_error:
                raise first_error
            raise converted from first_error
        return record.finish()
    finally:
        with _table_lock:
            _table.pop(handle, None)
