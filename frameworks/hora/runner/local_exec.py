"""Run the ranks of a job as child processes of this host and supervise them.

Each rank runs in its own process group (so a signal reaches the rank and everything it
started). Its stdout and stderr lines are copied to ours with a ``[rank]<stdout>:`` /
``[rank]<stderr>:`` prefix, one flushed write per line. When a rank exits non-zero, or the
launcher is asked to stop, every other rank gets SIGTERM, then SIGKILL after a grace period.
"""

from __future__ import annotations

import dataclasses
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from typing import BinaryIO

GRACE_SECONDS = 5.0
_POLL_SECONDS = 0.05


@dataclasses.dataclass
class _Rank:
    rank: int
    process: subprocess.Popen
    readers: list[threading.Thread]


def _binary(stream: object) -> BinaryIO:
    return getattr(stream, "buffer", stream)  # type: ignore[return-value]


class _PrefixWriter:
    """Writes whole prefixed lines to one of our streams; shared by every rank's reader."""

    def __init__(self, stream: object) -> None:
        self._out = _binary(stream)
        self._lock = threading.Lock()

    def write_line(self, prefix: bytes, line: bytes) -> None:
        if not line.endswith(b"\n"):
            line += b"\n"
        with self._lock:
            try:
                self._out.write(prefix + line)
                self._out.flush()
            except (OSError, ValueError):
                pass  # our own output went away (closed pipe); the job goes on


def _pump(source: BinaryIO, prefix: bytes, writer: _PrefixWriter) -> None:
    with source:
        for line in iter(source.readline, b""):
            writer.write_line(prefix, line)


def exit_code_of(returncode: int) -> int:
    """A process's return code as a shell exit code (killed by signal N -> 128 + N)."""
    return 128 - returncode if returncode < 0 else returncode


def describe_exit(returncode: int) -> str:
    """``exit code 3`` or ``signal SIGKILL``."""
    if returncode >= 0:
        return f"exit code {returncode}"
    try:
        return f"signal {signal.Signals(-returncode).name}"
    except ValueError:
        return f"signal {-returncode}"


class LocalJob:
    """The ranks of one job on this host.

    ``start()`` spawns them, ``wait()`` supervises until the job ends and returns the exit code;
    ``request_stop(signum)`` (safe in a signal handler) makes ``wait()`` stop every rank.
    """

    def __init__(self, command: Sequence[str], envs: Sequence[Mapping[str, str]],
                 grace_seconds: float = GRACE_SECONDS) -> None:
        self._command = list(command)
        self._envs = [dict(e) for e in envs]
        self._grace = grace_seconds
        self._ranks: list[_Rank] = []
        self._stop_signal: int | None = None
        self._exits: queue.Queue[tuple[int, int]] = queue.Queue()  # (rank, code), in exit order
        self._stdout = _PrefixWriter(sys.stdout)
        self._stderr = _PrefixWriter(sys.stderr)

    def start(self) -> None:
        """Spawn every rank.

        Raises:
            OSError: the command cannot be started (ranks already started are stopped).
        """
        try:
            for rank, env in enumerate(self._envs):
                self._ranks.append(self._spawn(rank, env))
        except OSError:
            self._terminate_all()
            raise

    def _spawn(self, rank: int, env: Mapping[str, str]) -> _Rank:
        process = subprocess.Popen(
            self._command, env=dict(env), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, start_new_session=True,
        )
        readers = []
        for source, tag, writer in ((process.stdout, b"stdout", self._stdout),
                                    (process.stderr, b"stderr", self._stderr)):
            prefix = b"[%d]<%s>:" % (rank, tag)
            thread = threading.Thread(target=_pump, args=(source, prefix, writer),
                                      name=f"horarun-rank{rank}-{tag.decode()}", daemon=True)
            thread.start()
            readers.append(thread)
        threading.Thread(target=lambda: self._exits.put((rank, process.wait())),
                         name=f"horarun-rank{rank}-wait", daemon=True).start()
        return _Rank(rank, process, readers)

    def request_stop(self, signum: int) -> None:
        """Ask ``wait()`` to stop the job (called from the launcher's signal handlers)."""
        self._stop_signal = signum

    def wait(self) -> int:
        """Supervise until every rank exited 0 (returns 0), a rank failed (returns its exit code
        after stopping the others), or a stop was requested (returns 128 + signal)."""
        running = len(self._ranks)
        while True:
            if self._stop_signal is not None:
                print(f"horarun: received {signal.Signals(self._stop_signal).name}; stopping "
                      "all ranks", file=sys.stderr, flush=True)
                self._terminate_all()
                return 128 + self._stop_signal
            try:
                rank, code = self._exits.get(timeout=_POLL_SECONDS)
            except queue.Empty:
                continue
            running -= 1
            if code != 0:
                print(f"horarun: rank {rank} exited with {describe_exit(code)}; stopping the "
                      "other ranks", file=sys.stderr, flush=True)
                self._terminate_all()
                print(f"horarun: job failed: rank {rank} was the first to exit with a non-zero "
                      f"status ({describe_exit(code)})", file=sys.stderr, flush=True)
                return exit_code_of(code)
            if running == 0:
                self._drain()
                return 0

    def _signal_all(self, signum: int) -> None:
        for r in self._ranks:
            try:
                os.killpg(r.process.pid, signum)
            except (ProcessLookupError, PermissionError):
                pass  # the whole group is gone already

    def _terminate_all(self) -> None:
        self._signal_all(signal.SIGTERM)
        deadline = time.monotonic() + self._grace
        while time.monotonic() < deadline:
            if all(r.process.poll() is not None for r in self._ranks):
                break
            time.sleep(_POLL_SECONDS)
        self._signal_all(signal.SIGKILL)  # also reaches children a rank left behind
        for r in self._ranks:
            r.process.wait()
        self._drain()

    def _drain(self, timeout: float = 2.0) -> None:
        """Let the reader threads copy what the ranks wrote last (bounded: a grandchild may still
        hold a pipe open)."""
        deadline = time.monotonic() + timeout
        for r in self._ranks:
            for thread in r.readers:
                thread.join(max(0.0, deadline - time.monotonic()))
