"""Work objects of the ``hora`` torch.distributed backend, and the threads that complete them.

A collective submitted through the backend returns a ``HoraWork`` at once; the engine runs it in
the background. A completion thread waits for that work's engine handles (the wait releases the
GIL), copies the results into torch's output tensors, marks the work done and completes its
``torch.futures.Future``, which runs the future's callbacks there. Each in-flight work has its own
completion thread (idle ones are reused; one is added whenever all are busy), so works complete
in whatever order the engine finishes them, and a callback that submits more collectives and
waits for them (PyTorch's PowerSGD hook does, even on the application's thread when the future
was already complete as ``then`` attached it) never holds up another work. Completing in
submission order instead can deadlock: a rank whose oldest work needs a peer that is itself
waiting for a younger work of this rank would never complete the younger one.

Names: the engine matches an operation across ranks by its name, so every rank must name the
same operation alike, whichever thread submits it. An operation submitted by the application is
named by its group, kind, dtype and shape, and how many operations with that signature the group
has submitted before (program order, the same on every rank). An operation submitted inside a
future's callback is named after that callback instead: PyTorch's PowerSGD hook submits its P and
Q allreduces from callbacks, and the callbacks of several buckets run concurrently, in an order
that differs between ranks, on completion threads or, when the future is already complete as
``then`` attaches the callback, on the application's thread. Counting by signature there would let
two buckets' allreduces of one shape swap names between ranks and add up the wrong tensors. So a
work's future is a ``HoraFuture`` whose ``then`` runs the callback under a name derived from the
work's name (``<work>>k`` for its k-th ``then``, and so on down a chain), and the i-th operation
the callback submits is named ``<that>/i``, which no scheduling can change.
"""

from __future__ import annotations

import collections
import datetime
import threading
import time
from typing import Any, Callable

import torch
import torch.distributed as dist

from hora.common.ops import AsyncResult
from hora.errors import HoraTimeoutError


class _CallbackScope(threading.local):
    """The callbacks running on this thread, innermost last: [name, operations submitted]."""

    def __init__(self) -> None:
        self.stack: list[list[Any]] = []


_callbacks = _CallbackScope()


class NameSequence:
    """Names for one process group's operations (see the module docstring)."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self._counts: dict[str, int] = collections.defaultdict(int)
        self._lock = threading.Lock()

    def next(self, op: str, *tensors: torch.Tensor) -> str:
        """A name equal on every rank for the same operation of this group."""
        signature = ".".join([op] + [f"{str(t.dtype)[6:]}{list(t.shape)}" for t in tensors])
        if _callbacks.stack:
            scope = _callbacks.stack[-1]
            scope[1] += 1
            return f"{scope[0]}/{scope[1] - 1}.{signature}".replace(" ", "")
        with self._lock:
            count = self._counts[signature]
            self._counts[signature] = count + 1
        return f"{self.prefix}.{signature}.{count}".replace(" ", "")


class HoraFuture(torch.futures.Future):
    """A ``torch.futures.Future`` whose ``then`` and ``add_done_callback`` callbacks name the
    operations they submit after this future (see the module docstring); the futures ``then``
    returns do the same."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name
        self._thens = 0
        self._callbacks = 0
        self._lock = threading.Lock()

    def then(self, callback: Callable[[Any], Any]) -> HoraFuture:  # type: ignore[override]
        """torch's ``then``: a future completed with ``callback(self)``'s value or error."""
        with self._lock:
            child = HoraFuture(f"{self.name}>{self._thens}")
            self._thens += 1

        def run(_: Any) -> None:
            _callbacks.stack.append([child.name, 0])
            try:
                value = callback(self)
            except BaseException as exc:  # noqa: BLE001 (torch hands it to the child future)
                _callbacks.stack.pop()
                child.set_exception(exc)
                return
            _callbacks.stack.pop()
            child.set_result(value)

        super().add_done_callback(run)
        return child

    def add_done_callback(self, callback: Callable[[Any], None]) -> None:
        """torch's ``add_done_callback``, its operations named like a ``then`` callback's."""
        with self._lock:
            scope = f"{self.name}+{self._callbacks}"
            self._callbacks += 1

        def run(_: Any) -> None:
            _callbacks.stack.append([scope, 0])
            try:
                callback(self)
            finally:
                _callbacks.stack.pop()

        super().add_done_callback(run)


class HoraWork(dist.Work):
    """One submitted collective: ``wait``, ``is_completed``, ``is_success``, ``exception`` and
    ``get_future`` with torch's meaning. The future's value is the list of output tensors."""

    def __init__(self, name: str, result: AsyncResult | None,
                 finish: Callable[[], list[torch.Tensor]], timeout: datetime.timedelta) -> None:
        super().__init__()
        self.name = name
        self._result = result
        self._finish = finish
        self._timeout = timeout
        self._done = threading.Event()
        self._error: BaseException | None = None
        self._outputs: list[torch.Tensor] = []
        self._future = HoraFuture(name)
        self.source = -1  # a receive's sender (group rank), once it completed

    def _complete(self) -> None:
        """Wait for the engine and build the outputs (waiter thread)."""
        try:
            if self._result is not None:
                try:
                    self._result.wait(self._timeout.total_seconds())
                except HoraTimeoutError:
                    raise self._timed_out(self._timeout) from None
            self._outputs = self._finish()
        except BaseException as exc:  # noqa: BLE001 (the error belongs to whoever waits)
            self._error = exc
        self._result = None
        self._done.set()

    def _fire(self) -> None:
        """Complete the future, running its callbacks (completion thread)."""
        if self._error is None:
            self._future.set_result(self._outputs)
        else:
            self._future.set_exception(self._error)

    def is_completed(self) -> bool:
        """True once the operation finished, successfully or not."""
        return self._done.is_set()

    def is_success(self) -> bool:
        """True once the operation finished without error."""
        return self._done.is_set() and self._error is None

    def exception(self) -> BaseException | None:
        """The error of a failed operation, None otherwise."""
        return self._error

    def source_rank(self) -> int:
        """The group rank a completed receive came from."""
        self.wait()
        if self.source < 0:
            raise RuntimeError(f"hora backend: source_rank() is only defined for receives, and "
                               f"{self.name} is not one")
        return self.source

    def _source_rank(self) -> int:
        """``source_rank`` under the name torch's ``recv`` calls."""
        return self.source_rank()

    def wait(self, timeout: datetime.timedelta = datetime.timedelta(0)) -> bool:
        """Block until the operation finished; raise its error if it failed.

        ``timeout`` of 0 means the process group's timeout; ``HoraTimeoutError`` when it passes
        first.
        """
        limit = timeout if timeout.total_seconds() > 0 else self._timeout
        if not self._done.wait(limit.total_seconds()):
            raise self._timed_out(limit)
        if self._error is not None:
            raise self._error
        return True

    def _timed_out(self, limit: datetime.timedelta) -> HoraTimeoutError:
        """The error of a wait that ran out, in the words torch's callers match (as gloo's)."""
        return HoraTimeoutError(
            f"hora backend: operation {self.name} on rank {_rank()}: Timed out waiting "
            f"{round(limit.total_seconds() * 1000)}ms for it to complete"
        )

    def get_future(self) -> HoraFuture:
        """A future completed with the list of output tensors (or the operation's error)."""
        return self._future

    def result(self) -> list[torch.Tensor]:
        """The output tensors of a finished operation."""
        self.wait()
        return self._outputs

    def synchronize(self) -> None:
        """CPU tensors need no stream synchronisation."""


class _CompletionThreads:
    """Runs tasks on daemon threads, adding one whenever no thread is idle (see the module
    docstring), so that a task that blocks never delays another; a thread idle for a minute
    ends, and idle threads end when the interpreter starts to exit (a daemon thread still alive
    at finalization can be torn down inside the engine's C++ code, which aborts the process)."""

    _IDLE_SECONDS = 60.0
    _EXIT_JOIN_SECONDS = 2.0

    def __init__(self) -> None:
        self._tasks: collections.deque[Callable[[], None]] = collections.deque()
        self._cond = threading.Condition()
        self._idle = 0
        self._stopping = False
        self._threads: set[threading.Thread] = set()

    def run(self, task: Callable[[], None]) -> None:
        """Run ``task`` on a completion thread."""
        with self._cond:
            self._tasks.append(task)
            if self._idle > len(self._tasks) - 1:
                self._cond.notify()
                return
            thread = threading.Thread(target=self._loop, name="hora-torch-dist", daemon=True)
            self._threads.add(thread)
        thread.start()

    def _loop(self) -> None:
        try:
            while True:
                with self._cond:
                    self._idle += 1
                    if not self._tasks and not self._stopping:
                        self._cond.wait(self._IDLE_SECONDS)
                    self._idle -= 1
                    if not self._tasks:
                        return
                    task = self._tasks.popleft()
                task()
        finally:
            with self._cond:
                self._threads.discard(threading.current_thread())

    def stop(self) -> None:
        """Let every thread finish its queued tasks and end; wait a bounded time for them."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
            threads = list(self._threads)
        deadline = time.monotonic() + self._EXIT_JOIN_SECONDS
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))


_threads = _CompletionThreads()
# Runs when the interpreter starts to exit, before it tears down daemon threads.
threading._register_atexit(_threads.stop)  # type: ignore[attr-defined]


def submit(name: str, result: AsyncResult | None, finish: Callable[[], list[torch.Tensor]],
           timeout: datetime.timedelta) -> HoraWork:
    """A work for the engine operation ``result``; ``finish`` builds the outputs once it is done
    (``result`` None: nothing to wait for)."""
    work = HoraWork(name, result, finish, timeout)
    _threads.run(lambda: complete(work))
    return work


def completed(tensors: list[Any], name: str) -> HoraWork:
    """A work that is already complete (an operation with nothing to communicate)."""
    work = HoraWork(name, None, lambda: list(tensors), datetime.timedelta(seconds=1))
    _threads.run(lambda: complete(work))
    return work


def complete(work: HoraWork) -> None:
    """Run ``work`` to its end on this thread: wait for the engine, build the outputs, complete
    the future (its callbacks run here)."""
    work._complete()
    work._fire()


def _rank() -> int | str:
    import hora

    return hora.rank() if hora.is_initialized() else "?"
