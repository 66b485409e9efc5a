"""The NumPy-level collective API (exported by ``hora``): NumPy arrays in, NumPy arrays out.

Out-of-place operations copy their input into a fresh C-contiguous array first; ``*_`` operations
work in place and need a contiguous, writable array. ``*_async`` functions return an
``AsyncResult`` for ``poll`` and ``synchronize``. Tensor names follow Horovod: ``allreduce.<name>``
or ``allreduce.noname.<n>``; grouped calls name their tensors ``<base>_<i>of<n>``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from hora.common import gpu, ops
from hora.common.ops import AsyncResult, Average
from hora.common.process_sets import ProcessSet, global_process_set


def _copy(tensor: Any) -> np.ndarray:
    if gpu.is_cuda(tensor):
        raise TypeError(
            "this NumPy-level call copies its input on the host; for a CUDA tensor use the "
            "in-place form (allreduce_, broadcast_) or a framework frontend (hora.torch)"
        )
    return np.array(tensor, copy=True, order="C")


def _input(tensor: Any) -> Any:
    """What an operation that only reads its input gets: a CUDA tensor as it is (DLPack),
    anything else as a private host copy."""
    return tensor if gpu.is_cuda(tensor) else _copy(tensor)


def _outputs(hs: list) -> list:
    return [ops.handle_output(h) for h in hs]


def _output(hs: list) -> Any:
    return ops.handle_output(hs[0])


def _run(collective: str, tensors: list, single: bool, name: str | None,
         process_set: ProcessSet, op: int | None = None, average: bool | None = None,
         prescale: float = 1.0, postscale: float = 1.0, root_rank: int = 0,
         waits: bool = False) -> Any:
    """Submit one call; its result is the (in-place) inputs or the engine's outputs. Returns an
    AsyncResult, or with ``waits`` (the blocking form, which returns once the engine finished:
    ``ops.enqueue``) the result itself."""
    # Two frames certainly Hora's above the pipeline: this one and the API function calling it.
    handles = ops.enqueue(collective, tensors, name=name, grouped=not single, op=op,
                          average=average, prescale=prescale, postscale=postscale,
                          root_rank=root_rank, process_set=process_set, hora_frames=2,
                          waits=waits)
    if ops.OPS[collective].in_place:
        result = tensors[0] if single else list(tensors)
        return result if waits else AsyncResult(handles, None, result)
    finish = _output if single else _outputs
    return finish(handles) if waits else AsyncResult(handles, finish)


# ---------------------------------------------------------------------------------- allreduce


def allreduce_async_(tensor: np.ndarray, average: bool | None = None, name: str | None = None,
                     op: int | None = None, prescale_factor: float = 1.0,
                     postscale_factor: float = 1.0,
                     process_set: ProcessSet = global_process_set) -> AsyncResult:
    """Start an in-place allreduce of ``tensor``; ``synchronize`` returns ``tensor``."""
    return _run("allreduce", [tensor], True, name, process_set, op, average, prescale_factor,
                postscale_factor)


def allreduce_async(tensor: Any, average: bool | None = None, name: str | None = None,
                    op: int | None = None, prescale_factor: float = 1.0,
                    postscale_factor: float = 1.0,
                    process_set: ProcessSet = global_process_set) -> AsyncResult:
    """Start an allreduce into a copy of ``tensor``; ``synchronize`` returns the copy."""
    return allreduce_async_(_copy(tensor), average, name, op, prescale_factor, postscale_factor,
                            process_set)


def allreduce_(tensor: np.ndarray, average: bool | None = None, name: str | None = None,
               op: int | None = None, prescale_factor: float = 1.0,
               postscale_factor: float = 1.0,
               process_set: ProcessSet = global_process_set) -> np.ndarray:
    """Allreduce ``tensor`` in place across the process set and return it.

    ``op`` is Average (default), Sum, Adasum, Min, Max or Product; ``average=`` is deprecated.
    """
    return _run("allreduce", [tensor], True, name, process_set, op, average, prescale_factor,
                postscale_factor, waits=True)


def allreduce(tensor: Any, average: bool | None = None, name: str | None = None,
              op: int | None = None, prescale_factor: float = 1.0,
              postscale_factor: float = 1.0,
              process_set: ProcessSet = global_process_set) -> np.ndarray:
    """Return the reduction of ``tensor`` over the process set (a new array).

    ``op`` is Average (default), Sum, Adasum, Min, Max or Product; ``average=`` is deprecated
    (DeprecationWarning) and may not be combined with ``op``. Average divides by the set size
    after a sum (integers truncate).
    """
    return _run("allreduce", [_copy(tensor)], True, name, process_set, op, average,
                prescale_factor, postscale_factor, waits=True)


def grouped_allreduce_async_(tensors: Sequence[np.ndarray], average: bool | None = None,
                             name: str | None = None, op: int | None = None,
                             prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                             process_set: ProcessSet = global_process_set) -> AsyncResult:
    """Start an in-place allreduce of every tensor as one group (negotiated and fused together)."""
    return _run("allreduce", list(tensors), False, name=name, op=op, average=average,
                prescale=prescale_factor, postscale=postscale_factor, process_set=process_set)


def grouped_allreduce_async(tensors: Sequence[Any], average: bool | None = None,
                            name: str | None = None, op: int | None = None,
                            prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                            process_set: ProcessSet = global_process_set) -> AsyncResult:
    """Start a grouped allreduce into copies of the tensors."""
    return grouped_allreduce_async_([_copy(t) for t in tensors], average, name, op,
                                    prescale_factor, postscale_factor, process_set)


def grouped_allreduce_(tensors: Sequence[np.ndarray], average: bool | None = None,
                       name: str | None = None, op: int | None = None,
                       prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                       process_set: ProcessSet = global_process_set) -> list:
    """Allreduce every tensor in place as one group; returns the tensors."""
    return grouped_allreduce_async_(tensors, average, name, op, prescale_factor,
                                    postscale_factor, process_set).wait()


def grouped_allreduce(tensors: Sequence[Any], average: bool | None = None,
                      name: str | None = None, op: int | None = None,
                      prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                      process_set: ProcessSet = global_process_set) -> list:
    """Return the reductions of every tensor, computed as one group (new arrays)."""
    return grouped_allreduce_async(tensors, average, name, op, prescale_factor,
                                   postscale_factor, process_set).wait()


# ---------------------------------------------------------------------------------- allgather


def allgather_async(tensor: Any, name: str | None = None,
                    process_set: ProcessSet = global_process_set) -> AsyncResult:
    """Start an allgather; ``synchronize`` returns the concatenation along dim 0."""
    return _run("allgather", [_input(tensor)], True, name=name, process_set=process_set)


def allgather(tensor: Any, name: str | None = None,
              process_set: ProcessSet = global_process_set) -> np.ndarray:
    """Concatenate ``tensor`` from every rank of the set along dim 0 (which may differ per rank)."""
    return _run("allgather", [_input(tensor)], True, name=name, process_set=process_set,
                waits=True)


def grouped_allgather_async(tensors: Sequence[Any], name: str | None = None,
                            process_set: ProcessSet = global_process_set) -> AsyncResult:
    """Start an allgather of every tensor as one group."""
    return _run("allgather", [_input(t) for t in tensors], False, name=name,
                process_set=process_set)


def grouped_allgather(tensors: Sequence[Any], name: str | None = None,
                      process_set: ProcessSet = global_process_set) -> list:
    """Allgather every tensor as one group; returns the gathered arrays."""
    return grouped_allgather_async(tensors, name, process_set).wait()


# ---------------------------------------------------------------------------------- broadcast


def broadcast_async_(tensor: np.ndarray, root_rank: int, name: str | None = None,
                     process_set: ProcessSet = global_process_set) -> AsyncResult:
    """Start an in-place broadcast from ``root_rank`` (a global rank)."""
    return _run("broadcast", [tensor], True, name=name, root_rank=root_rank,
                process_set=process_set)


def broadcast_async(tensor: Any, root_rank: int, name: str | None = None,
                    process_set: ProcessSet = global_process_set) -> AsyncResult:
    """Start a broadcast into a copy of ``tensor``."""
    return broadcast_async_(_copy(tensor), root_rank, name, process_set)


def broadcast_(tensor: np.ndarray, root_rank: int, name: str | None = None,
               process_set: ProcessSet = global_process_set) -> np.ndarray:
    """Overwrite ``tensor`` with the root's values, in place, and return it."""
    return _run("broadcast", [tensor], True, name=name, root_rank=root_rank,
                process_set=process_set, waits=True)


def broadcast(tensor: Any, root_rank: int, name: str | None = None,
              process_set: ProcessSet = global_process_set) -> np.ndarray:
    """Return the value of ``tensor`` on ``root_rank`` (a global rank) as a new array."""
    return _run("broadcast", [_copy(tensor)], True, name=name, root_rank=root_rank,
                process_set=process_set, waits=True)


# ----------------------------------------------------------------------------------- alltoall


def alltoall_async(tensor: Any, splits: Any = None, name: str | None = None,
                   process_set: ProcessSet = global_process_set) -> AsyncResult:
    """Start an alltoall; ``synchronize`` returns ``out`` or ``(out, received_splits)``."""
    handles = ops.enqueue("alltoall", [_input(tensor)], name=name, splits=splits,
                          process_set=process_set)

    def finish(hs: list) -> Any:
        out = ops.handle_output(hs[0])
        if splits is None:
            return out
        return out, np.asarray(hs[0].received_splits(), dtype=np.int32)

    return AsyncResult(handles, finish)


def alltoall(tensor: Any, splits: Any = None, name: str | None = None,
             process_set: ProcessSet = global_process_set) -> np.ndarray | tuple:
    """Send ``splits[i]`` rows of ``tensor`` (in order) to set rank i and gather what the others
    sent. Without splits dim 0 is split equally. Returns ``out``, or ``(out, received_splits)``
    when splits were given."""
    return alltoall_async(tensor, splits, name, process_set).wait()


# ------------------------------------------------------------------------------ reducescatter


def reducescatter_async(tensor: Any, op: int = Average, name: str | None = None,
                        process_set: ProcessSet = global_process_set,
                        prescale_factor: float = 1.0,
                        postscale_factor: float = 1.0) -> AsyncResult:
    """Start a reducescatter; ``synchronize`` returns this rank's rows of the reduction."""
    return _run("reducescatter", [_input(tensor)], True, name=name, op=op,
                prescale=prescale_factor, postscale=postscale_factor, process_set=process_set)


def reducescatter(tensor: Any, op: int = Average, name: str | None = None,
                  process_set: ProcessSet = global_process_set, prescale_factor: float = 1.0,
                  postscale_factor: float = 1.0) -> np.ndarray:
    """Reduce ``tensor`` over the set (Sum or Average) and return this rank's share of dim 0;
    the first ``dim0 % size`` ranks get one extra row."""
    return reducescatter_async(tensor, op, name, process_set, prescale_factor,
                               postscale_factor).wait()


def grouped_reducescatter_async(tensors: Sequence[Any], op: int = Average,
                                name: str | None = None,
                                process_set: ProcessSet = global_process_set,
                                prescale_factor: float = 1.0,
                                postscale_factor: float = 1.0) -> AsyncResult:
    """Start a reducescatter of every tensor as one group."""
    return _run("reducescatter", [_input(t) for t in tensors], False, name=name, op=op,
                prescale=prescale_factor, postscale=postscale_factor, process_set=process_set)


def grouped_reducescatter(tensors: Sequence[Any], op: int = Average, name: str | None = None,
                          process_set: ProcessSet = global_process_set,
                          prescale_factor: float = 1.0, postscale_factor: float = 1.0) -> list:
    """Reducescatter every tensor as one group; returns this rank's shares."""
    return grouped_reducescatter_async(tensors, op, name, process_set, prescale_factor,
                                       postscale_factor).wait()


# -------------------------------------------------------------------------- barrier and join


def barrier(process_set: ProcessSet = global_process_set) -> None:
    """Block until every rank of the set reached the barrier."""
    ops.enqueue("barrier", [], names=["barrier.noname"], process_set=process_set, waits=True)


def join() -> int:
    """Declare that this rank has no more data; until every rank joined, this rank contributes
    zeros to the others' allreduces. Returns the last rank that joined (the same everywhere)."""
    handles = ops.enqueue("join", [], names=["join.noname"])
    ops.wait_all(handles)
    return int(handles[0].last_joined_rank())


def poll(handle: Any) -> bool:
    """True when the asynchronous operation behind ``handle`` has finished."""
    return bool(handle.poll())


def synchronize(handle: Any) -> Any:
    """Wait for an asynchronous operation and return its result (raising its error).

    Returns the output array, a list for grouped operations, ``(out, received_splits)`` for an
    alltoall with splits; None for an unknown handle.
    """
    if isinstance(handle, AsyncResult):
        return handle.wait()
    if hasattr(handle, "wait") and hasattr(handle, "output"):
        ops.wait_all([handle])
        return ops.handle_output(handle)
    return None
