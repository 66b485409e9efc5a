"""Work objects of the ``hora`` torch.distributed backend, and the thread that completes them.

A collective submitted through the backend returns a ``HoraWork`` at once; the engine runs it in
the background. One completer thread per process waits for the engine handles in submission order
(the wait releases the GIL), copies results into torch's output tensors, marks the work done and
completes its ``torch.futures.Future``. Future callbacks (DDP communication hooks chain them with
``then``) therefore run on the completer thread, never on the thread that submitted.

Names: the engine matches an operation across ranks by its name, so every rank must name the
same operation alike. Operations submitted by an application thread take the next number of their
group's counter (torch requires every rank to issue a group's collectives in the same order). An
operation submitted inside a future callback on the completer thread is named after the operation
whose completion ran the callback, so its name does not depend on how the completer's work
interleaves with the application's submissions on each rank.
"""

from __future__ import annotations

import collections
import datetime
import threading
from typing import Any, Callable

import torch
import torch.distributed as dist

from hora.common.ops import AsyncResult
from hora.errors import HoraTimeoutError

_callback_context = threading.local()


def callback_parent() -> str | None:
    """The name of the operation whose completion is running callbacks on this thread, if any."""
    return getattr(_callback_context, "parent", None)


def _next_child_name() -> str | None:
    parent = callback_parent()
    if parent is None:
        return None
    count = getattr(_callback_context, "children", 0)
    _callback_context.children = count + 1
    return f"{parent}.then{count}"


class NameSequence:
    """Names for one process group's operations (see the module docstring)."""

    def __init__(self, prefix: str) -> None:
        self._prefix = prefix
        self._count = 0
        self._lock = threading.Lock()

    def next(self, op: str) -> str:
        """A name equal on every rank for the same operation of this group."""
        child = _next_child_name()
        if child is not None:
            return f"{child}.{op}"
        with self._lock:
            self._count += 1
            return f"{self._prefix}.{self._count}.{op}"


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
        self._future: torch.futures.Future = torch.futures.Future()

    # Called by the completer thread only.
    def _complete(self) -> None:
        try:
            if self._result is not None:
                self._result.wait(self._timeout.total_seconds())
            self._outputs = self._finish()
        except BaseException as exc:  # noqa: BLE001 (the error belongs to whoever waits)
            self._error = exc
        self._result = None
        self._done.set()
        saved = (callback_parent(), getattr(_callback_context, "children", 0))
        _callback_context.parent, _callback_context.children = self.name, 0
        try:
            if self._error is None:
                self._future.set_result(self._outputs)
            else:
                self._future.set_exception(self._error)
        finally:
            _callback_context.parent, _callback_context.children = saved

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
        """Only meaningful for receive operations, which this backend does not have."""
        raise RuntimeError("hora backend: source_rank() is only defined for recv works")

    def wait(self, timeout: datetime.timedelta = datetime.timedelta(0)) -> bool:
        """Block until the operation finished; raise its error if it failed.

        ``timeout`` of 0 means the process group's timeout. Raises ``HoraTimeoutError`` when it
        passes first. Called inside a future callback (on the completer thread) it completes
        earlier work itself instead of waiting for the thread it runs on.
        """
        limit = timeout if timeout.total_seconds() > 0 else self._timeout
        if threading.current_thread() is _completer.thread:
            _completer.drain_until(self)
        elif not self._done.wait(limit.total_seconds()):
            raise HoraTimeoutError(
                f"hora backend: operation {self.name} not finished after "
                f"{limit.total_seconds():g} s"
            )
        if self._error is not None:
            raise self._error
        return True

    def get_future(self) -> torch.futures.Future:
        """A future completed with the list of output tensors (or the operation's error)."""
        return self._future

    def result(self) -> list[torch.Tensor]:
        """The output tensors of a finished operation."""
        self.wait()
        return self._outputs

    def synchronize(self) -> None:
        """CPU tensors need no stream synchronisation."""


class _Completer:
    """The process-wide thread that completes works in submission order."""

    def __init__(self) -> None:
        self._queue: collections.deque[HoraWork] = collections.deque()
        self._cond = threading.Condition()
        self.thread: threading.Thread | None = None

    def submit(self, work: HoraWork) -> HoraWork:
        """Queue ``work`` for completion (starting the thread on first use)."""
        with self._cond:
            self._queue.append(work)
            if self.thread is None or not self.thread.is_alive():
                self.thread = threading.Thread(target=self._run, name="hora-torch-dist",
                                               daemon=True)
                self.thread.start()
            self._cond.notify()
        return work

    def _pop(self, block: bool) -> HoraWork | None:
        with self._cond:
            while not self._queue:
                if not block:
                    return None
                self._cond.wait()
            return self._queue.popleft()

    def _run(self) -> None:
        while True:
            work = self._pop(block=True)
            if work is not None:
                work._complete()

    def drain_until(self, target: HoraWork) -> None:
        """Complete queued works up to ``target`` on the calling (completer) thread."""
        while not target.is_completed():
            work = self._pop(block=False)
            if work is None:
                break
            work._complete()


_completer = _Completer()


def submit(name: str, result: AsyncResult | None, finish: Callable[[], list[torch.Tensor]],
           timeout: datetime.timedelta) -> HoraWork:
    """A work for the engine operation ``result``; ``finish`` builds the outputs once it is done
    (``result`` None: nothing to wait for)."""
    return _completer.submit(HoraWork(name, result, finish, timeout))


def completed(tensors: list[Any], name: str) -> HoraWork:
    """A work that is already complete (an operation with nothing to communicate)."""
    work = HoraWork(name, None, lambda: list(tensors), datetime.timedelta(seconds=1))
    return _completer.submit(work)
