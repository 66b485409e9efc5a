"""Where the ranks' output lines go.

``PrefixSink`` copies each line to the launcher's stdout/stderr as ``[rank]<stdout>:line``, one
flushed write per line (lines of different ranks never interleave). ``FileSink`` writes the raw
lines of rank ``n`` to ``DIR/rank.<n>/stdout`` and ``DIR/rank.<n>/stderr``. Sinks are shared by
the reader threads of every rank and are thread-safe.
"""

from __future__ import annotations

import os
import sys
import threading
from typing import BinaryIO, Protocol

STREAMS = ("stdout", "stderr")


class Sink(Protocol):
    """Receives every line a rank writes (``data`` ends with b"\\n" except maybe the last)."""

    def line(self, rank: int, stream: str, data: bytes) -> None:
        """Handle one line of ``rank``'s ``stream`` ("stdout" or "stderr")."""

    def close(self) -> None:
        """Flush and release what the sink holds."""


def _binary(stream: object) -> BinaryIO:
    return getattr(stream, "buffer", stream)  # type: ignore[return-value]


class PrefixSink:
    """``[rank]<stdout>:`` / ``[rank]<stderr>:`` prefixed lines on our own stdout/stderr."""

    def __init__(self, stdout: object | None = None, stderr: object | None = None) -> None:
        self._out = {"stdout": _binary(stdout or sys.stdout), "stderr": _binary(stderr or sys.stderr)}
        self._lock = threading.Lock()

    def line(self, rank: int, stream: str, data: bytes) -> None:
        if not data.endswith(b"\n"):
            data += b"\n"
        out = self._out[stream]
        with self._lock:
            try:
                out.write(b"[%d]<%s>:" % (rank, stream.encode()) + data)
                out.flush()
            except (OSError, ValueError):
                pass  # our own output went away (closed pipe); the job goes on

    def close(self) -> None:
        pass


class FileSink:
    """Raw output of rank n in ``directory/rank.<n>/stdout`` and ``.../stderr``."""

    def __init__(self, directory: str, num_ranks: int) -> None:
        self._files: dict[tuple[int, str], BinaryIO] = {}
        self._lock = threading.Lock()
        for rank in range(num_ranks):
            rank_dir = os.path.join(directory, f"rank.{rank}")
            os.makedirs(rank_dir, exist_ok=True)
            for stream in STREAMS:
                self._files[(rank, stream)] = open(os.path.join(rank_dir, stream), "wb")  # noqa: SIM115

    def line(self, rank: int, stream: str, data: bytes) -> None:
        with self._lock:
            f = self._files.get((rank, stream))
            if f is not None:
                f.write(data)
                f.flush()

    def close(self) -> None:
        with self._lock:
            for f in self._files.values():
                f.close()
            self._files.clear()
