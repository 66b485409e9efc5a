"""Run the ranks of a job as child processes of this host and supervise them.

A rank's child is the rank itself (local ranks) or the ssh client that runs it elsewhere (remote
ranks). Each child runs in its own process group, so a signal reaches the child and everything it
started. Output lines go to a :class:`~hora.runner.output.Sink`.

Stopping a rank: a local rank gets SIGTERM on its process group. A remote rank's ssh client has
its stdin on a pipe that the launcher keeps open; closing it is the stop request (the remote
wrapper, see ``ssh_exec``, then terminates the rank there and the ssh client exits once the rank
is gone). Whatever still runs after the grace period gets SIGKILL on its process group.

When a rank exits non-zero, or the launcher is asked to stop, every other rank is stopped.

When the launcher itself dies abruptly (``kill -9``, an OOM kill) it cannot stop anything, so a
small reaper process (see ``reaper``) watches it: the launcher tells the reaper each local rank's
process group, and the reaper stops the groups still listed when its pipe from the launcher
breaks. Remote ranks end through their ssh stdin, which breaks the same way.
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
from collections.abc import Sequence
from typing import IO, BinaryIO

from hora.runner.output import PrefixSink, Sink

GRACE_SECONDS = 5.0
_POLL_SECONDS = 0.05


@dataclasses.dataclass
class RankSpec:
    """How to start one rank's child process.

    ``stdin`` None: the child reads /dev/null and is stopped with SIGTERM. Bytes: written to the
    child's stdin, which then stays open until the rank is to stop (ssh ranks). ``cpus``: the
    CPUs a local child is bound to (None: not bound).
    """

    rank: int
    host: str
    argv: list[str]
    env: dict[str, str]
    stdin: bytes | None = None
    remote: bool = False
    cpus: list[int] | None = None


class _Child:
    """One running rank: the process, its output readers and (ssh ranks) its stdin holder."""

    def __init__(self, spec: RankSpec, sink: Sink) -> None:
        self.spec = spec
        self._close_stdin = threading.Event()
        self.process = subprocess.Popen(
            spec.argv, env=spec.env,
            stdin=subprocess.DEVNULL if spec.stdin is None else subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
        )
        if spec.cpus:
            # Popen returns once the child has exec'd, long before its interpreter starts a
            # thread (NumPy's, the framework's), so every thread of the rank inherits this.
            try:
                os.sched_setaffinity(self.process.pid, spec.cpus)
            except OSError as exc:
                _say(f"could not bind rank {spec.rank} to CPUs {spec.cpus}: {exc.strerror}")
        self.threads: list[threading.Thread] = []
        for source, stream in ((self.process.stdout, "stdout"), (self.process.stderr, "stderr")):
            self.threads.append(_start(_pump, source, spec.rank, stream, sink,
                                       name=f"horarun-rank{spec.rank}-{stream}"))
        if spec.stdin is not None:
            _start(self._hold_stdin, spec.stdin, name=f"horarun-rank{spec.rank}-stdin")

    def _hold_stdin(self, data: bytes) -> None:
        pipe = self.process.stdin
        assert pipe is not None
        try:
            pipe.write(data)
            pipe.flush()
            self._close_stdin.wait()
        except OSError:
            pass  # the child is gone already
        finally:
            try:
                pipe.close()
            except OSError:
                pass

    def request_stop(self) -> None:
        """Ask the rank to end: close the ssh stdin, or SIGTERM the local process group (then
        SIGCONT, so that a stopped rank acts on the SIGTERM now, not at the SIGKILL)."""
        if self.spec.stdin is not None:
            self._close_stdin.set()
        else:
            self.signal(signal.SIGTERM)
            self.signal(signal.SIGCONT)

    def signal(self, signum: int) -> None:
        try:
            os.killpg(self.process.pid, signum)
        except (ProcessLookupError, PermissionError):
            pass  # the whole group is gone already

    def release(self) -> None:
        """Let go of the stdin pipe (the rank ended)."""
        self._close_stdin.set()


class _Reaper:
    """The launcher's end of the reaper process: announces and withdraws rank process groups."""

    def __init__(self, grace_seconds: float) -> None:
        script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "reaper.py")
        self._lock = threading.Lock()
        self._pipe: IO[bytes] | None = None
        try:
            self._process: subprocess.Popen[bytes] | None = subprocess.Popen(
                [sys.executable, "-I", "-S", script, str(grace_seconds)],
                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, start_new_session=True)
            self._pipe = self._process.stdin
        except OSError as exc:
            _say(f"warning: cannot start the reaper ({exc}); if this launcher is killed, its "
                 "ranks may outlive it")
            self._process = None

    def _send(self, line: str) -> None:
        with self._lock:
            if self._pipe is None:
                return
            try:
                self._pipe.write(line.encode() + b"\n")
                self._pipe.flush()
            except OSError:
                self._pipe = None  # the reaper is gone; nothing more to tell it

    def add(self, pgid: int) -> None:
        self._send(f"+{pgid}")

    def remove(self, pgid: int) -> None:
        self._send(f"-{pgid}")

    def close(self, timeout: float = 2.0) -> None:
        """Ends the reaper normally (every group withdrawn first by the caller)."""
        with self._lock:
            pipe, self._pipe = self._pipe, None
        if pipe is not None:
            try:
                pipe.close()
            except OSError:
                pass
        if self._process is not None:
            try:
                self._process.wait(timeout)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()


def _start(target: object, *args: object, name: str) -> threading.Thread:
    thread = threading.Thread(target=target, args=args, name=name, daemon=True)  # type: ignore[arg-type]
    thread.start()
    return thread


def _pump(source: BinaryIO, rank: int, stream: str, sink: Sink) -> None:
    with source:
        for line in iter(source.readline, b""):
            sink.line(rank, stream, line)


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


class Job:
    """The ranks of one job.

    ``start()`` spawns them, ``wait()`` supervises until the job ends and returns the exit code;
    ``request_stop(signum)`` (safe in a signal handler) makes ``wait()`` stop every rank. After a
    failure ``failed_rank`` names the first rank that exited non-zero.
    """

    def __init__(self, specs: Sequence[RankSpec], sink: Sink | None = None,
                 grace_seconds: float = GRACE_SECONDS) -> None:
        self._specs = list(specs)
        self._sink: Sink = sink if sink is not None else PrefixSink()
        self._grace = grace_seconds
        self._children: list[_Child] = []
        self._reaper: _Reaper | None = None
        self._stop_signal: int | None = None
        self._exits: queue.Queue[tuple[int, int]] = queue.Queue()  # (index, code) in exit order
        self.failed_rank: int | None = None
        self.returncodes: dict[int, int] = {}

    def start(self) -> None:
        """Spawn every rank.

        Raises:
            OSError: a command cannot be started (ranks already started are stopped).
        """
        if any(not spec.remote for spec in self._specs):
            self._reaper = _Reaper(max(1.0, self._grace - 2.0))
        try:
            for index, spec in enumerate(self._specs):
                child = _Child(spec, self._sink)
                self._children.append(child)
                if self._reaper is not None and not spec.remote:
                    self._reaper.add(child.process.pid)  # its own session: pgid == pid
                _start(self._watch, index, child, name=f"horarun-rank{spec.rank}-wait")
        except OSError:
            self._terminate_all()
            self._close_reaper()
            raise

    def _watch(self, index: int, child: _Child) -> None:
        code = child.process.wait()
        child.release()
        reaper = self._reaper
        if code == 0 and reaper is not None and not child.spec.remote:
            reaper.remove(child.process.pid)  # ended by itself: the launcher lets it be
        self._exits.put((index, code))

    def request_stop(self, signum: int) -> None:
        """Ask ``wait()`` to stop the job (called from the launcher's signal handlers)."""
        self._stop_signal = signum

    def _close_reaper(self) -> None:
        if self._reaper is None:
            return
        for child in self._children:
            if not child.spec.remote:
                self._reaper.remove(child.process.pid)
        self._reaper.close()
        self._reaper = None

    def wait(self) -> int:
        """Supervise until every rank exited 0 (returns 0), a rank failed (returns its exit code
        after stopping the others), or a stop was requested (returns 128 + signal)."""
        try:
            return self._supervise()
        finally:
            self._close_reaper()

    def _supervise(self) -> int:
        running = len(self._children)
        while True:
            if self._stop_signal is not None:
                _say(f"received {signal.Signals(self._stop_signal).name}; stopping all ranks")
                self._terminate_all()
                return 128 + self._stop_signal
            try:
                index, code = self._exits.get(timeout=_POLL_SECONDS)
            except queue.Empty:
                continue
            running -= 1
            spec = self._specs[index]
            self.returncodes[spec.rank] = code
            if code != 0:
                self.failed_rank = spec.rank
                where = f" on {spec.host}" if spec.remote else ""
                hint = " (ssh could not run the command there?)" if spec.remote and code == 255 else ""
                _say(f"rank {spec.rank}{where} exited with {describe_exit(code)}{hint}; "
                     "stopping the other ranks")
                self._terminate_all()
                _say(f"job failed: rank {spec.rank} was the first to exit with a non-zero status "
                     f"({describe_exit(code)})")
                return exit_code_of(code)
            if running == 0:
                self._drain()
                return 0

    def _terminate_all(self) -> None:
        for child in self._children:
            if child.process.poll() is None:
                child.request_stop()
        deadline = time.monotonic() + self._grace
        while time.monotonic() < deadline:
            if all(c.process.poll() is not None for c in self._children):
                break
            time.sleep(_POLL_SECONDS)
        self._report_unstopped([c.spec for c in self._children if c.process.poll() is None])
        for child in self._children:
            child.signal(signal.SIGKILL)  # also reaches children a rank left behind
            child.release()
        for child in self._children:
            child.process.wait()
        self._drain()

    def _report_unstopped(self, specs: Sequence[RankSpec]) -> None:
        """Says which ranks outlived the grace period, host by host: a remote host whose ranks
        all did is likely unreachable (its ssh sessions got no answer), which names the host that
        a failure on the others' side came from."""
        by_host: dict[tuple[str, bool], list[int]] = {}
        for spec in specs:
            by_host.setdefault((spec.host, spec.remote), []).append(spec.rank)
        for (host, remote), ranks in by_host.items():
            which, them = (f"rank {ranks[0]}", "it") if len(ranks) == 1 else \
                (f"ranks {', '.join(map(str, ranks))}", "them")
            where = f" on {host}" if remote else ""
            why = f" (no answer over ssh: is {host} reachable?)" if remote else ""
            _say(f"{which}{where} did not stop within {self._grace:g} s of being asked{why}; "
                 f"killing {them}")

    def _drain(self, timeout: float = 2.0) -> None:
        """Let the reader threads copy what the ranks wrote last (bounded: a grandchild may still
        hold a pipe open)."""
        deadline = time.monotonic() + timeout
        for child in self._children:
            for thread in child.threads:
                thread.join(max(0.0, deadline - time.monotonic()))


def _say(message: str) -> None:
    print(f"horarun: {message}", file=sys.stderr, flush=True)
