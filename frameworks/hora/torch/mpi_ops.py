"""Collective operations on torch tensors with Horovod's ``horovod.torch`` signatures.

Synchronous out-of-place operations (``allreduce``, ``allgather``, ``broadcast``, ``alltoall``,
``reducescatter`` and their grouped forms) are differentiable. Names ending in ``_`` work in place;
names ending in ``_async`` return an integer handle for ``poll`` / ``synchronize``.
"""

from __future__ import annotations

from typing import Any

import torch

import hora as _hora
from hora.common import api
from hora.common import basics as _basics  # noqa: F401  (Horovod's name for this module)
from hora.common.api import *
from hora.common.process_sets import ProcessSet, global_process_set
from hora.torch import _async_ops as _a
from hora.torch._async_ops import (
    Average,
    SplitsLike,
    allgather_async,
    allreduce_async,
    allreduce_async_,
    alltoall_async,
    broadcast_async,
    broadcast_async_,
    grouped_allgather_async,
    grouped_allreduce_async,
    grouped_allreduce_async_,
    grouped_reducescatter_async,
    handle_average_backwards_compatibility,
    normalize_splits,
    poll,
    reducescatter_async,
    sparse_allreduce_async,
    synchronize,
)
from hora.torch._autograd import run as _run
from hora.torch.compression import Compression, Compressor, NoneCompressor

__all__ = api.__all__ + [
    "Compression", "Compressor", "SplitsLike", "allgather", "allgather_async",
    "allreduce", "allreduce_", "allreduce_async", "allreduce_async_", "alltoall",
    "alltoall_async", "barrier", "broadcast", "broadcast_", "broadcast_async", "broadcast_async_",
    "grouped_allgather", "grouped_allgather_async", "grouped_allreduce", "grouped_allreduce_",
    "grouped_allreduce_async", "grouped_allreduce_async_", "grouped_reducescatter",
    "grouped_reducescatter_async", "handle_average_backwards_compatibility", "join", "poll",
    "reducescatter", "reducescatter_async", "sparse_allreduce_async", "synchronize",
]


def allreduce(tensor: torch.Tensor, average: bool | None = None, name: str | None = None,
              compression: type[Compressor] = Compression.none, op: int | None = None,
              prescale_factor: float = 1.0, postscale_factor: float = 1.0,
              process_set: ProcessSet = global_process_set) -> torch.Tensor:
    """Reduce ``tensor`` over all ranks of ``process_set`` and return the result as a new tensor.

    Differentiable. ``op`` is Average (default), Sum, Adasum, Min, Max or Product; ``average=``
    is the deprecated spelling. The tensor is compressed for the trip with ``compression``.

    Raises:
        ValueError: both ``average`` and ``op`` given; unsupported dtype.
        HoraError: the ranks disagree on shape, dtype or op, or communication failed.
    """
    if average is not None or op is None:
        op = handle_average_backwards_compatibility(op, average)
    # needs_graph([tensor]), without the list and the call.
    if compression is NoneCompressor and not (tensor.requires_grad and torch.is_grad_enabled()):
        # The common call, as short as it can be: a copy of the tensor reduced in place.
        return _a.run_one("allreduce", tensor, "allreduce_async", False, name, op, None,
                          prescale_factor, postscale_factor, 0, process_set)
    return _compressed("allreduce", [tensor], False, compression, name=name, op=op,
                       prescale=prescale_factor, postscale=postscale_factor,
                       process_set=process_set)[0]


def allreduce_(tensor: torch.Tensor, average: bool | None = None, name: str | None = None,
               op: int | None = None, prescale_factor: float = 1.0,
               postscale_factor: float = 1.0,
               process_set: ProcessSet = global_process_set) -> torch.Tensor:
    """In-place allreduce: ``tensor`` receives the result and is returned."""
    return _a.run_one("allreduce", tensor, "allreduce_async_", True, name, op, average,
                      prescale_factor, postscale_factor, 0, process_set)


def grouped_allreduce(tensors: list[torch.Tensor], average: bool | None = None,
                      name: str | None = None, compression: type[Compressor] = Compression.none,
                      op: int | None = None, prescale_factor: float = 1.0,
                      postscale_factor: float = 1.0,
                      process_set: ProcessSet = global_process_set) -> list[torch.Tensor]:
    """Allreduce a list of tensors as one group (they fuse); returns a list of new tensors.

    Differentiable.
    """
    op = handle_average_backwards_compatibility(op, average)
    return _compressed("allreduce", list(tensors), True, compression, name=name, op=op,
                       prescale=prescale_factor, postscale=postscale_factor,
                       process_set=process_set)


def _compressed(collective: str, tensors: list[torch.Tensor], grouped: bool,
                compression: type[Compressor], **args: Any) -> list[torch.Tensor]:
    """A differentiable call on the compressed tensors; returns the decompressed outputs."""
    if compression is NoneCompressor:  # the usual case, without a per-call round of no-ops
        return list(_run(collective, tensors, grouped, **args)) if tensors else []
    pairs = [compression.compress(t) for t in tensors]
    if not pairs:
        return []
    outs = _run(collective, [p[0] for p in pairs], grouped, **args)
    return [compression.decompress(o, p[1]) for o, p in zip(outs, pairs)]


def grouped_allreduce_(tensors: list[torch.Tensor], average: bool | None = None,
                       name: str | None = None, op: int | None = None,
                       prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                       process_set: ProcessSet = global_process_set) -> list[torch.Tensor]:
    """In-place grouped allreduce; returns the input tensors holding the results."""
    return _a.call("allreduce", tensors, True, "grouped_allreduce_async_", None, True,
                   name=name, op=op, average=average, prescale=prescale_factor,
                   postscale=postscale_factor, process_set=process_set, waits=True).wait()


def allgather(tensor: torch.Tensor, name: str | None = None,
              process_set: ProcessSet = global_process_set) -> torch.Tensor:
    """Concatenate every rank's tensor along dimension 0 (dim0 may differ between ranks).

    Differentiable: the gradient is this rank's slice of the averaged output gradient.
    """
    return _run("allgather", [tensor], False, name=name, process_set=process_set)[0]


def grouped_allgather(tensors: list[torch.Tensor], name: str | None = None,
                      process_set: ProcessSet = global_process_set) -> list[torch.Tensor]:
    """Allgather a list of tensors as one group; returns a list. Differentiable."""
    if not tensors:
        return []
    return list(_run("allgather", list(tensors), True, name=name, process_set=process_set))


def broadcast(tensor: torch.Tensor, root_rank: int, name: str | None = None,
              process_set: ProcessSet = global_process_set) -> torch.Tensor:
    """Return a new tensor holding ``root_rank``'s ``tensor`` (``root_rank`` is a global rank).

    Differentiable: the gradient is the averaged output gradient on the root, zero elsewhere.
    """
    return _run("broadcast", [tensor], False, name=name, root_rank=root_rank,
                process_set=process_set)[0]


def broadcast_(tensor: torch.Tensor, root_rank: int, name: str | None = None,
               process_set: ProcessSet = global_process_set) -> torch.Tensor:
    """In-place broadcast: ``tensor`` receives ``root_rank``'s values and is returned."""
    return _a.run_one("broadcast", tensor, "broadcast_async_", True, name, None, None, 1.0, 1.0,
                      _a.root_rank_of(root_rank), process_set)


def alltoall(tensor: torch.Tensor, splits: SplitsLike = None, name: str | None = None,
             process_set: ProcessSet = global_process_set
             ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Send ``splits[j]`` rows of ``tensor`` to rank j and receive the rows sent to this rank.

    ``splits`` (int32, one entry per rank, sum at most dim0) defaults to equal parts. Returns the
    received rows, or ``(output, received_splits)`` when ``splits`` was given. Differentiable.
    """
    output, received = _run("alltoall", [tensor], False, name=name,
                            splits=normalize_splits(splits), process_set=process_set)
    return output if splits is None else (output, received)


def reducescatter(tensor: torch.Tensor, name: str | None = None,
                  compression: type[Compressor] = Compression.none, op: int = Average,
                  process_set: ProcessSet = global_process_set, prescale_factor: float = 1.0,
                  postscale_factor: float = 1.0) -> torch.Tensor:
    """Reduce over ranks (Average or Sum) and return this rank's block of rows.

    The first ``dim0 % size`` ranks get one row more. Differentiable.
    """
    return _compressed("reducescatter", [tensor], False, compression, name=name, op=op,
                       prescale=prescale_factor, postscale=postscale_factor,
                       process_set=process_set)[0]


def grouped_reducescatter(tensors: list[torch.Tensor], name: str | None = None,
                          compression: type[Compressor] = Compression.none, op: int = Average,
                          process_set: ProcessSet = global_process_set,
                          prescale_factor: float = 1.0,
                          postscale_factor: float = 1.0) -> list[torch.Tensor]:
    """Reducescatter a list of tensors as one group; returns a list. Differentiable."""
    return _compressed("reducescatter", list(tensors), True, compression, name=name, op=op,
                       prescale=prescale_factor, postscale=postscale_factor,
                       process_set=process_set)


def join(device: int = -1) -> int:
    """Declare that this rank has no more data; until every rank joins, the others' allreduces
    proceed with this rank contributing zeros. Returns the last rank that joined.

    ``device`` is accepted for compatibility and ignored (CPU tensors).
    """
    return int(_hora.join())


def barrier(process_set: ProcessSet = global_process_set) -> None:
    """Block until every rank of ``process_set`` reaches the barrier."""
    _hora.barrier(process_set=process_set)
