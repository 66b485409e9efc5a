"""The pipeline every frontend submits work through: the engine's constants, the op table,
op/average/Adasum resolution, naming, waiting with one error policy, and ``enqueue``, the one
call that hands a request to the engine (``_core.submit``).

``enqueue`` never copies: in-place operations need contiguous tensors and raise ``ValueError``
otherwise. Every rule about the request (process-set membership, broadcast root, alltoall splits,
reducescatter op, scalar allgather) is the engine's, checked when the request is queued, with
Horovod's messages, so the error is raised where the call was made.
"""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from hora import _core
from hora.common import basics
from hora.common.process_sets import ProcessSet, global_process_set
from hora.errors import HoraError, HoraTimeoutError, InternalError, InvalidCollectiveError

# The engine's numbering, read from the engine itself.
ALLREDUCE = int(_core.OpKind.ALLREDUCE)
ALLGATHER = int(_core.OpKind.ALLGATHER)
BROADCAST = int(_core.OpKind.BROADCAST)
JOIN = int(_core.OpKind.JOIN)
ADASUM = int(_core.OpKind.ADASUM)
ALLTOALL = int(_core.OpKind.ALLTOALL)
BARRIER = int(_core.OpKind.BARRIER)
REDUCESCATTER = int(_core.OpKind.REDUCESCATTER)

Average = int(_core.ReduceOp.AVERAGE)
Sum = int(_core.ReduceOp.SUM)
Adasum = int(_core.ReduceOp.ADASUM)
Min = int(_core.ReduceOp.MIN)
Max = int(_core.ReduceOp.MAX)
Product = int(_core.ReduceOp.PRODUCT)

REDUCE_OPS = frozenset((Average, Sum, Adasum, Min, Max, Product))


@dataclass(frozen=True)
class OpSpec:
    """What the pipeline knows about one collective.

    ``prefix`` starts its automatic names (``allreduce.noname.0``); ``in_place`` says whether the
    engine writes the result into the submitted buffer (else it allocates the output);
    ``reduce_ops`` lists the ops it takes (empty when it takes none; the engine refuses the
    others with Horovod's message).
    """

    kind: int
    prefix: str
    in_place: bool
    reduce_ops: frozenset = frozenset()

    @property
    def grouped_prefix(self) -> str:
        """The name prefix of the grouped form (``grouped_allreduce``)."""
        return f"grouped_{self.prefix}"


OPS: dict[str, OpSpec] = {
    "allreduce": OpSpec(ALLREDUCE, "allreduce", True, REDUCE_OPS),
    "allgather": OpSpec(ALLGATHER, "allgather", False),
    "broadcast": OpSpec(BROADCAST, "broadcast", True),
    "alltoall": OpSpec(ALLTOALL, "alltoall", False),
    "reducescatter": OpSpec(REDUCESCATTER, "reducescatter", False, frozenset((Average, Sum))),
    "join": OpSpec(JOIN, "join", True),
    "barrier": OpSpec(BARRIER, "barrier", True),
}

_BFLOAT16 = "bfloat16"

# The name counters and the handle table take no lock: each step on them is one operation on a
# dict or an itertools.count, which CPython performs atomically, while a threading.Lock costs
# about half a microsecond per use on the reference machine, on every call.
_name_counters: dict[str, Iterator[int]] = {}


def auto_name(prefix: str, process_set_id: int = 0) -> str:
    """A default tensor name, ``f"{prefix}.noname.{n}"``, from a per-process counter per prefix
    and process set (``f"{prefix}.set{id}.noname.{n}"`` outside the global set).

    Unnamed operations therefore match across ranks only when every rank issues them in the
    same order (as in Horovod). Counting per process set (Horovod counts every operation
    together) keeps the global set's names in step when the ranks of different sets issued
    different numbers of unnamed operations in their own sets.
    """
    key = prefix if process_set_id == 0 else f"{prefix}.set{process_set_id}"
    counter = _name_counters.get(key)
    if counter is None:
        counter = _name_counters.setdefault(key, itertools.count())
    return f"{key}.noname.{next(counter)}"


def reset_names() -> None:
    """Restart the auto-name counters (after shutdown, so re-initialized ranks agree)."""
    _name_counters.clear()


def op_name(prefix: str, name: str | None, process_set_id: int = 0) -> str:
    """The engine name of one operation: ``prefix.name``, or an auto name (Horovod's scheme)."""
    return f"{prefix}.{name}" if name else auto_name(prefix, process_set_id)


def group_names(prefix: str, name: str | None, count: int, process_set_id: int = 0) -> list[str]:
    """Names for the tensors of one grouped call, sharing one base: ``<base>_<i>of<count>``
    with i counted from 1 (as in Horovod)."""
    base = op_name(prefix, name, process_set_id)
    return [f"{base}_{i + 1}of{count}" for i in range(count)]


def split_evenly(items: list, parts: int) -> list[list]:
    """Split ``items`` into at most ``parts`` contiguous chunks whose sizes differ by at most 1."""
    parts = max(1, min(parts, len(items)))
    base, extra = divmod(len(items), parts)
    out, start = [], 0
    for i in range(parts):
        stop = start + base + (1 if i < extra else 0)
        out.append(items[start:stop])
        start = stop
    return [chunk for chunk in out if chunk]


def handle_average_backwards_compatibility(op: int | None, average: bool | None) -> int:
    """Resolve Horovod's deprecated ``average=`` against ``op=``; the default is Average.

    Raises:
        ValueError: both were given.
    """
    if op is not None:
        if average is not None:
            raise ValueError(
                "The op parameter supersedes average. Please provide only one of them."
            )
        return int(op)
    if average is not None:
        warnings.warn(
            "Parameter `average` has been replaced with `op` and will be removed",
            DeprecationWarning, stacklevel=3,
        )
        return Average if average else Sum
    return Average


def resolve_allreduce(op: int | None, average: bool | None) -> tuple[int, int]:
    """The engine kind and reduce op of an allreduce: ``op``/``average`` resolved as Horovod
    does, and Adasum, which the engine runs as its own kind."""
    op = handle_average_backwards_compatibility(op, average)
    return (ADASUM if op == Adasum else ALLREDUCE), op


def process_set_id(process_set: ProcessSet) -> int:
    """The engine's id of ``process_set``; -1 for a set not registered (the engine refuses it,
    naming the call)."""
    set_id = getattr(process_set, "process_set_id", 0)
    return -1 if set_id is None else int(set_id)


def split_counts(splits: Any) -> list[int] | None:
    """Alltoall ``splits`` (a 1-D sequence or array of integers, or None) as a list of ints.

    Raises:
        ValueError: not 1-D integers. The engine checks the counts against the set and tensor.
    """
    if splits is None:
        return None
    array = np.asarray(splits)
    if array.ndim != 1 or not (np.issubdtype(array.dtype, np.integer) or array.size == 0):
        raise ValueError("splits must be a 1-D tensor of integers (int32)")
    return [int(v) for v in array]


def enqueue(collective: str, buffers: Sequence[Any], *, name: str | None = None,
            names: Sequence[str] | None = None, grouped: bool = False, op: int | None = None,
            average: bool | None = None, prescale: float = 1.0, postscale: float = 1.0,
            root_rank: int = 0, splits: Any = None,
            process_set: ProcessSet = global_process_set, hora_frames: int = 0,
            waits: bool = False, copy: bool = False) -> list:
    """Submit one frontend call of ``collective`` (a key of ``OPS``): the one way every
    frontend hands a request to the engine.

    The op table gives the engine kind, names are ``names`` when given, else Horovod's
    automatic names from ``name`` (``<prefix>.<name>``, or ``<base>_<i>of<n>`` when
    ``grouped``), the reduce op is resolved (``average=`` and Adasum for allreduce; Average by
    default for reducescatter), then the engine checks and enqueues the group (with
    ``prescale``, ``postscale``, ``root_rank`` (a global rank), ``splits`` and
    ``process_set``). ``buffers``: NumPy arrays (ml_dtypes.bfloat16 included), DLPack capsules
    or objects with ``__dlpack__``; empty for join and barrier. Allreduce, adasum and broadcast
    write in place. ``hora_frames``: how many frames above this one are certainly Hora's (the
    frontend's own), which the search for the user's call site skips. ``waits``: a blocking
    call. The engine waits inside the submission (the GIL released) and returns the handles
    finished, raising the first failure as ``wait_all`` does; where waiting threads drive the
    engine, its background thread is not woken for the work. ``copy`` (a blocking allreduce,
    adasum or broadcast of host buffers): the engine works on its own copy of each buffer, an
    out-of-place call without a framework's copy, and returns the results as DLPack capsules.

    Returns one engine handle per buffer ([] for an empty group, and for a blocking
    allreduce, adasum, broadcast or barrier, whose result is in its buffers; the result
    capsules with ``copy``).

    Raises:
        ValueError: non-contiguous tensor, unsupported dtype, duplicate in-flight name, or a
            failed check (membership, root, op); bad splits or a reduce op the operation does
            not take raise ``InvalidCollectiveError``, also a ``HoraError`` as in Horovod.
        TypeError: an object that is not a tensor.
    """
    spec = OPS[collective]
    # The global set's id without a call: a training loop's small operations pay for every call
    # on this path.
    set_id = 0 if process_set is global_process_set else process_set_id(process_set)
    if names is None:
        if grouped:
            names = group_names(spec.grouped_prefix, name, len(buffers), set_id)
        else:
            names = [op_name(spec.prefix, name, set_id)]
    else:
        names = [str(n) for n in names]
    kind = spec.kind
    if kind == ALLREDUCE:
        if op is not None and average is None:
            # resolve_allreduce's answer for an explicit op, without its two calls.
            op = int(op)
            if op == Adasum:
                kind = ADASUM
        else:
            kind, op = resolve_allreduce(op, average)
    elif spec.reduce_ops:
        op = Average if op is None else int(op)
    else:
        op = Sum
    if not buffers and kind not in (JOIN, BARRIER):
        return []
    return _core.submit(kind, buffers, names, op=op, prescale=prescale, postscale=postscale,
                        root_rank=root_rank, splits=None if splits is None else split_counts(splits),
                        process_set_id=set_id, hora_frames=1 + hora_frames, waits=waits,
                        copy=copy)


def engine_error(exc: BaseException) -> BaseException:
    """The one error policy of every frontend for an operation that failed in the engine.

    Hora's own classes pass as they are; a ``ValueError`` (the engine refused the operation)
    becomes ``InvalidCollectiveError``, which is both a ``ValueError`` and a ``HoraError``; any
    other ``RuntimeError`` becomes ``HoraError``; anything else passes unchanged.
    """
    if isinstance(exc, HoraError):
        return exc
    if isinstance(exc, ValueError):
        return InvalidCollectiveError(str(exc))
    if isinstance(exc, RuntimeError):
        return HoraError(str(exc))
    return exc


def wait_all(handles: Sequence[Any], timeout: float | None = None) -> None:
    """Wait for every engine handle, then raise the first error (see ``engine_error``).

    Every handle is waited for even after one failed, so that none of their names stays in
    flight.

    Raises:
        HoraTimeoutError: ``timeout`` seconds passed before a handle finished.
    """
    first_error: BaseException | None = None
    for h in handles:
        try:
            finished = h.wait(timeout)
        except Exception as exc:  # noqa: BLE001 (every handle is waited for before raising)
            first_error = first_error or exc
            continue
        if finished is False:
            raise HoraTimeoutError(f"operation not finished after {timeout} s")
    if first_error is not None:
        converted = engine_error(first_error)
        if converted is first_error:
            raise first_error
        raise converted from first_error


def handle_output(handle: Any) -> Any:
    """The engine-owned result of a finished handle as a NumPy array (zero-copy), with
    ml_dtypes.bfloat16 restored when the input was bfloat16; a ``_core.DeviceTensor`` (DLPack)
    for a GPU result; None for in-place operations."""
    out = handle.output()
    if isinstance(out, _core.DeviceTensor):
        return out  # a GPU result: use it through DLPack
    if out is not None and getattr(handle, "_hora_dtype", None) == _BFLOAT16:
        import ml_dtypes

        out = out.view(ml_dtypes.bfloat16)
    return out


def allocated_output(handle: Any) -> np.ndarray:
    """The result of a finished operation that allocates its output (allgather, alltoall,
    reducescatter), as ``handle_output`` gives it.

    Raises:
        InternalError: the operation has no output (it works in place).
    """
    out = handle_output(handle)
    if out is None:
        raise InternalError("an allocating operation finished without an output array")
    return out


class AsyncResult:
    """The handle of an asynchronous NumPy-level operation, for ``poll`` and ``synchronize``.

    Holds the engine handles of one call and how to build its result once they are done:
    ``finish(handles)``, or with ``finish=None`` the ``result`` given here (an in-place
    operation's own tensors, without a closure made per call). ``waited``: the handles come
    from a blocking submission (``enqueue``'s ``waits``), finished and their errors raised.
    """

    __slots__ = ("_done", "_finish", "_handles", "_result", "_waited")

    def __init__(self, handles: Sequence[Any], finish: Callable[[list], Any] | None,
                 result: Any = None, waited: bool = False) -> None:
        self._handles = list(handles)
        self._finish = finish
        self._done = False
        self._result: Any = result
        self._waited = waited

    def poll(self) -> bool:
        """True when every operation of the call has finished."""
        return all(h.poll() for h in self._handles)

    def wait(self, timeout: float | None = None) -> Any:
        """Wait for every operation and return the result (raising the first error).

        Raises:
            HoraTimeoutError: ``timeout`` seconds passed first.
        """
        if self._done:
            return self._result
        if not self._waited:
            wait_all(self._handles, timeout)
        if self._finish is not None:
            self._result = self._finish(self._handles)
        self._done = True
        return self._result

    @property
    def handles(self) -> list:
        """The engine handles, one per tensor."""
        return list(self._handles)


_handle_table: dict[int, AsyncResult] = {}
_handle_ids = itertools.count(1)


def register_handle(result: AsyncResult) -> int:
    """An integer handle for ``result`` (Horovod's torch API returns ints from ``*_async``)."""
    handle = next(_handle_ids)
    _handle_table[handle] = result
    return handle


def poll_handle(handle: int) -> bool:
    """True when the operation behind an integer handle has finished (with or without error).

    Raises:
        ValueError: the handle was never created or was already synchronized.
    """
    result = _handle_table.get(handle)
    if result is None:
        raise ValueError(f"Handle {handle} was not created or has been cleared.")
    return result.poll()


def synchronize_handle(handle: int) -> Any:
    """Wait for the operation behind an integer handle and return its result; None for an
    unknown handle. The handle is released either way."""
    result = _handle_table.get(handle)
    if result is None:
        return None
    try:
        return result.wait()
    finally:
        _handle_table.pop(handle, None)


basics.add_shutdown_hook(reset_names)
