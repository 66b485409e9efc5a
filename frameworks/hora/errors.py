"""Exceptions raised by Hora.

The engine's typed errors arrive as these classes (``hora._core`` translates them by error code);
invalid arguments arrive as the builtin ``ValueError``. Every class derives from ``HoraError``,
a ``RuntimeError``, so code written for Horovod that catches ``HorovodInternalError`` or
``RuntimeError`` keeps working.
"""

from __future__ import annotations


class HoraError(RuntimeError):
    """Base class of Hora's runtime errors."""


class InternalError(HoraError):
    """A broken invariant inside Hora (a bug); the message names the source file and line."""


class MismatchError(HoraError):
    """Ranks asked for incompatible operations (op, dtype, shape, root, scale) under one name."""


class InvalidCollectiveError(HoraError, ValueError):
    """An operation the engine refused after the ranks negotiated it (for example an allgather
    while some rank has joined, or Adasum on a rank count that is not a power of two).

    Both a ``ValueError`` (what caused it) and a ``HorovodInternalError`` (what Horovod's
    ``synchronize`` raises for any failed operation).
    """


class TransportError(HoraError):
    """A connection failed, a peer closed it, or a peer sent a malformed frame."""


class HoraTimeoutError(HoraError):
    """A bounded wait (rendezvous, a silent peer) ran out."""


class NotSupportedError(HoraError):
    """The operation is not available in this build or with this transport."""


class ShutdownError(HoraError):
    """Hora was shut down (locally, or because a rank failed) while work was pending."""


HorovodInternalError = HoraError
"""Horovod's name for the error a failed collective raises; an alias of ``HoraError``."""


class HostsUpdatedInterrupt(RuntimeError):
    """Raised in elastic training when the set of hosts changed.

    ``skip_sync`` is True when hosts were only removed, so state need not be re-broadcast.
    """

    def __init__(self, skip_sync: bool = False) -> None:
        super().__init__("the hosts of the job were updated")
        self.skip_sync = skip_sync


__all__ = [
    "HoraError",
    "HoraTimeoutError",
    "HorovodInternalError",
    "HostsUpdatedInterrupt",
    "InternalError",
    "InvalidCollectiveError",
    "MismatchError",
    "NotSupportedError",
    "ShutdownError",
    "TransportError",
]
