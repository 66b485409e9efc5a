"""The pipeline every frontend submits work through: the engine's constants, the op table,
op/average/Adasum resolution, naming, argument checks, the conversion of NumPy arrays (and any
``__dlpack__`` object) into engine requests, and waiting with one error policy.

``submit`` never copies: in-place operations need contiguous tensors and raise ``ValueError``
otherwise. It checks what Horovod checks at enqueue time (process-set membership, broadcast root,
alltoall splits, reducescatter op, scalar allgather) so the error is raised where the call was made.
"""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from hora import _core
from hora.common import basics, gpu
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
    ``reduce_ops`` lists the ops it takes (empty when it takes none; the engine's
    ``_core.submit`` refuses the others with Horovod's message).
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


_numpy_bool_dlpack: bool | None = None


def _numpy_exports_bool() -> bool:
    global _numpy_bool_dlpack
    if _numpy_bool_dlpack is None:
        try:
            probe: Any = np.zeros(1, dtype=np.bool_)
            probe.__dlpack__()
            _numpy_bool_dlpack = True
        except (BufferError, TypeError, AttributeError):
            _numpy_bool_dlpack = False
    return _numpy_bool_dlpack


_capsule_exporters: dict[type, Callable[[Any], Any]] = {}


def register_capsule_exporter(cls: type, export: Callable[[Any], Any]) -> None:
    """Let a frontend hand ``cls`` objects to the engine as DLPack capsules it makes itself.

    ``export(tensor)`` returns the capsule, or None to take the generic path (a tensor's
    ``__dlpack__``, which for CUDA tensors also orders the engine's stream after the producer).
    A framework's own exporter skips the Python-level checks of ``__dlpack__`` and
    ``__dlpack_device__``: several microseconds of every call.
    """
    _capsule_exporters[cls] = export


def _prepare(tensor: Any) -> tuple[Any, str | None]:
    """The object to hand to the engine and its dtype override (for types DLPack lacks)."""
    export = _capsule_exporters.get(type(tensor))
    if export is not None:
        capsule = export(tensor)
        if capsule is not None:
            return capsule, None
    if isinstance(tensor, np.ndarray):
        # ml_dtypes' bfloat16 is a kind-"V" dtype; checking the kind first skips the slow name
        # lookup for every ordinary dtype (and kind "b", bool, a comparison of dtypes).
        kind = tensor.dtype.kind
        if kind == "V" and tensor.dtype.name == _BFLOAT16:
            return tensor.view(np.uint16), _BFLOAT16
        if kind == "b" and not _numpy_exports_bool():
            return tensor.view(np.uint8), "bool"
        # The capsule made here spares the engine's import its generic probing of the object
        # (four Python attribute lookups and calls); an array NumPy will not export goes down
        # that path, which raises the error.
        try:
            return tensor.__dlpack__(), None
        except (AttributeError, BufferError):
            return tensor, None
    if hasattr(tensor, "__dlpack__") or type(tensor).__name__ == "PyCapsule":
        if gpu.is_cuda(tensor):
            gpu.ensure_loaded()
        return tensor, None
    raise TypeError(
        "expected a NumPy array, a tensor with __dlpack__ or a DLPack capsule, got "
        f"{type(tensor).__name__}"
    )


# What _core.submit borrows: the exporter table is read on every call, so frontends that
# register later count.
_core.set_submit_helpers(_prepare, _capsule_exporters, np.ndarray)


def _check_splits(splits: Any, set_size: int, dim0: int | None) -> list[int]:
    array = np.asarray(splits)
    if array.ndim != 1 or not (np.issubdtype(array.dtype, np.integer) or array.size == 0):
        raise ValueError("splits must be a 1-D tensor of integers (int32)")
    # Both a ValueError and a HoraError: Horovod's torch raises the one, its MXNet and
    # TensorFlow frontends the other (HorovodInternalError, a RuntimeError).
    if array.size != set_size:
        raise InvalidCollectiveError(
            "Number of entries in splits does not equal number of workers."
        )
    values = [int(v) for v in array]
    if any(v < 0 for v in values):
        raise ValueError("splits must not be negative")
    if dim0 is not None and sum(values) > dim0:
        raise InvalidCollectiveError(
            "Sum of splits entries is greater than the first dimension of tensor."
        )
    return values


def _shape(tensor: Any) -> tuple[int, ...] | None:
    shape = getattr(tensor, "shape", None)
    return None if shape is None else tuple(int(d) for d in shape)


def _alltoall_splits(tensors: Sequence[Any], splits: Any, process_set: ProcessSet) -> list[int] | None:
    """The rows an alltoall sends to each member, checked as Horovod checks them (None: even
    splits). The other checks of every call are the engine's (``_core.submit``); an unregistered
    set is left to them, which name it."""
    members = process_set.ranks
    if members is None:
        return None
    first = _shape(tensors[0]) if tensors else None
    dim0 = first[0] if first else None
    if splits is not None:
        return _check_splits(splits, len(members), dim0)
    if dim0 is not None and dim0 % len(members) != 0:
        raise InvalidCollectiveError(
            f"alltoall without splits needs the first dimension ({dim0}) to be divisible by the "
            f"number of workers ({len(members)}); pass splits otherwise"
        )
    return None


def submit(
    kind: int,
    tensors: Sequence[Any],
    names: Sequence[str],
    *,
    op: int = Sum,
    prescale: float = 1.0,
    postscale: float = 1.0,
    root_rank: int = 0,
    splits: Any = None,
    process_set: ProcessSet = global_process_set,
) -> list:
    """Enqueue one group of operations on the engine; returns one ``_core.Handle`` per name.

    Args:
        kind: ALLREDUCE ... REDUCESCATTER.
        tensors: NumPy arrays (ml_dtypes.bfloat16 included) or objects with ``__dlpack__``;
            empty for JOIN and BARRIER. Allreduce, adasum and broadcast write in place.
        names: one per tensor (one for JOIN/BARRIER); equal across ranks for the same operation.
        op: reduce op (Average, Sum, Adasum, Min, Max, Product).
        prescale, postscale: factors applied before and after the reduction.
        root_rank: broadcast root, a global rank.
        splits: alltoall rows sent to each member of the set.
        process_set: where the operation runs.

    Raises:
        ValueError: non-contiguous tensor, unsupported dtype, duplicate in-flight name, or a
            failed check (membership, root, splits, op); a reduce op the operation does not
            take raises ``InvalidCollectiveError``, also a ``HoraError`` as in Horovod.
        TypeError: an object that is not a tensor.
    """
    return _submit(kind, list(tensors), [str(n) for n in names], op, prescale, postscale,
                   root_rank, splits, process_set,
                   int(getattr(process_set, "process_set_id", 0) or 0), 1)


def _submit(kind: int, tensors: list, names: list[str], op: int, prescale: float,
            postscale: float, root_rank: int, splits: Any, process_set: ProcessSet,
            set_id: int, hora_callers: int) -> list:
    """``submit`` on lists it may keep (names already strings; ``set_id`` the set's id;
    ``hora_callers`` the frames above this one that are certainly Hora's, which the call
    site's search skips: ``submit`` and what it was told).

    The checks, the DLPack export, the call site and the enqueue are one call into the engine
    (``_core.submit``, with positional arguments: keyword parsing in the binding costs most of
    a microsecond); only an alltoall's splits are checked here first.
    """
    checked_splits = _alltoall_splits(tensors, splits, process_set) if kind == ALLTOALL else None
    return _core.submit(kind, tensors, names, int(op), float(prescale), float(postscale),
                        int(root_rank), checked_splits, process_set, set_id, 1 + hora_callers)


def enqueue(collective: str, buffers: Sequence[Any], *, name: str | None = None,
            names: Sequence[str] | None = None, grouped: bool = False, op: int | None = None,
            average: bool | None = None, prescale: float = 1.0, postscale: float = 1.0,
            root_rank: int = 0, splits: Any = None,
            process_set: ProcessSet = global_process_set) -> list:
    """Submit one frontend call of ``collective`` (a key of ``OPS``).

    The pipeline every frontend shares: the op table gives the engine kind, names are
    ``names`` when given, else Horovod's automatic names from ``name`` (``<prefix>.<name>``, or
    ``<base>_<i>of<n>`` when ``grouped``), the reduce op is resolved (``average=`` and Adasum for
    allreduce; Average by default for reducescatter), then ``submit`` checks and enqueues
    (with ``prescale``, ``postscale``, ``root_rank``, ``splits`` and ``process_set``).
    Returns one engine handle per buffer ([] for an empty group).
    """
    return enqueue_call(collective, list(buffers), name, names, grouped, op, average, prescale,
                        postscale, root_rank, splits, process_set, 1)


def enqueue_call(collective: str, buffers: list, name: str | None,
                 names: Sequence[str] | None, grouped: bool, op: int | None,
                 average: bool | None, prescale: float, postscale: float, root_rank: int,
                 splits: Any, process_set: ProcessSet, hora_callers: int = 0) -> list:
    """``enqueue`` with every argument by position and ``buffers`` a list it may keep: the
    frontends' per-call path (keyword arguments and the copies cost on every call).

    ``hora_callers``: how many of the frames calling this one are certainly Hora's own (the
    frontend's private helpers and the API function that called them); the search for the
    user's call site starts above them.
    """
    spec = OPS[collective]
    set_id = int(getattr(process_set, "process_set_id", 0) or 0)
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
    # _submit's two steps inline: every frontend call passes here, and a frame costs.
    checked_splits = _alltoall_splits(buffers, splits, process_set) if kind == ALLTOALL else None
    return _core.submit(kind, buffers, names, op, float(prescale), float(postscale),
                        int(root_rank), checked_splits, process_set, set_id, 1 + hora_callers)


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
    operation's own tensors, without a closure made per call).
    """

    __slots__ = ("_done", "_finish", "_handles", "_result")

    def __init__(self, handles: Sequence[Any], finish: Callable[[list], Any] | None,
                 result: Any = None) -> None:
        self._handles = list(handles)
        self._finish = finish
        self._done = False
        self._result: Any = result

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
