"""Collective operations on torch tensors with Horovod's ``horovod.torch`` signatures.

Synchronous out-of-place operations (``allreduce``, ``allgather``, ``broadcast``, ``alltoall``,
``reducescatter`` and their grouped forms) are differentiable. Names ending in ``_`` work in place;
names ending in ``_async`` return an integer handle for ``poll`` / ``synchronize``.
"""

from __future__ import annotations

import torch

import hora as _hora
from hora.common.basics import (
    ccl_built,
    cross_rank,
    cross_size,
    cuda_built,
    ddl_built,
    gloo_built,
    gloo_enabled,
    init,
    is_homogeneous,
    is_initialized,
    local_rank,
    local_size,
    mpi_built,
    mpi_enabled,
    mpi_threads_supported,
    nccl_built,
    rank,
    rocm_built,
    shutdown,
    size,
)
from hora.common.process_sets import (
    ProcessSet,
    add_process_set,
    global_process_set,
    remove_process_set,
)
from hora.errors import (
    HoraError,
    HorovodInternalError,
    HostsUpdatedInterrupt,
    NotSupportedError,
)
from hora.torch import _autograd
from hora.torch._async_ops import (
    Adasum,
    Average,
    Max,
    Min,
    Product,
    SplitsLike,
    Sum,
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
    reducescatter_async,
    sparse_allreduce_async,
)
from hora.torch._handles import InvalidCollectiveError, poll, synchronize
from hora.torch.compression import Compression, Compressor

__all__ = [
    "Adasum",
    "Average",
    "Compression",
    "Compressor",
    "HoraError",
    "HorovodInternalError",
    "HostsUpdatedInterrupt",
    "InvalidCollectiveError",
    "Max",
    "Min",
    "ProcessSet",
    "Product",
    "SplitsLike",
    "Sum",
    "add_process_set",
    "allgather",
    "allgather_async",
    "allreduce",
    "allreduce_",
    "allreduce_async",
    "allreduce_async_",
    "alltoall",
    "alltoall_async",
    "barrier",
    "broadcast",
    "broadcast_",
    "broadcast_async",
    "broadcast_async_",
    "ccl_built",
    "cross_rank",
    "cross_size",
    "cuda_built",
    "ddl_built",
    "global_process_set",
    "gloo_built",
    "gloo_enabled",
    "grouped_allgather",
    "grouped_allgather_async",
    "grouped_allreduce",
    "grouped_allreduce_",
    "grouped_allreduce_async",
    "grouped_allreduce_async_",
    "grouped_reducescatter",
    "grouped_reducescatter_async",
    "handle_average_backwards_compatibility",
    "init",
    "is_homogeneous",
    "is_initialized",
    "join",
    "local_rank",
    "local_size",
    "mpi_built",
    "mpi_enabled",
    "mpi_threads_supported",
    "nccl_built",
    "poll",
    "rank",
    "reducescatter",
    "reducescatter_async",
    "remove_process_set",
    "rocm_built",
    "shutdown",
    "size",
    "sparse_allreduce_async",
    "start_timeline",
    "stop_timeline",
    "synchronize",
]


def start_timeline(file_path: str, mark_cycles: bool = False) -> None:
    """Start writing a Chrome-trace timeline to ``file_path`` (needs HORA_TIMELINE=DYNAMIC).

    Raises:
        NotSupportedError: this build of the hora package has no runtime timeline control.
    """
    start = getattr(_hora, "start_timeline", None)
    if start is None:
        raise NotSupportedError("this build of Hora has no start_timeline()")
    start(file_path, mark_cycles=mark_cycles)


def stop_timeline() -> None:
    """Stop the timeline started by ``start_timeline``.

    Raises:
        NotSupportedError: this build of the hora package has no runtime timeline control.
    """
    stop = getattr(_hora, "stop_timeline", None)
    if stop is None:
        raise NotSupportedError("this build of Hora has no stop_timeline()")
    stop()


def allreduce(
    tensor: torch.Tensor,
    average: bool | None = None,
    name: str | None = None,
    compression: type[Compressor] = Compression.none,
    op: int | None = None,
    prescale_factor: float = 1.0,
    postscale_factor: float = 1.0,
    process_set: ProcessSet = global_process_set,
) -> torch.Tensor:
    """Reduce ``tensor`` over all ranks of ``process_set`` and return the result as a new tensor.

    Differentiable. ``op`` is Average (default), Sum, Adasum, Min, Max or Product; ``average=``
    is the deprecated spelling. The tensor is compressed for the trip with ``compression``.

    Raises:
        ValueError: both ``average`` and ``op`` given; unsupported dtype.
        HoraError: the ranks disagree on shape, dtype or op, or communication failed.
    """
    op = handle_average_backwards_compatibility(op, average)
    compressed, ctx = compression.compress(tensor)
    reduced = _autograd.AllreduceFunction.apply(
        compressed, name, op, prescale_factor, postscale_factor, process_set
    )
    return compression.decompress(reduced, ctx)


def allreduce_(
    tensor: torch.Tensor,
    average: bool | None = None,
    name: str | None = None,
    op: int | None = None,
    prescale_factor: float = 1.0,
    postscale_factor: float = 1.0,
    process_set: ProcessSet = global_process_set,
) -> torch.Tensor:
    """In-place allreduce: ``tensor`` receives the result and is returned."""
    op = handle_average_backwards_compatibility(op, average)
    return synchronize(
        allreduce_async_(
            tensor,
            name=name,
            op=op,
            prescale_factor=prescale_factor,
            postscale_factor=postscale_factor,
            process_set=process_set,
        )
    )


def grouped_allreduce(
    tensors: list[torch.Tensor],
    average: bool | None = None,
    name: str | None = None,
    compression: type[Compressor] = Compression.none,
    op: int | None = None,
    prescale_factor: float = 1.0,
    postscale_factor: float = 1.0,
    process_set: ProcessSet = global_process_set,
) -> list[torch.Tensor]:
    """Allreduce a list of tensors as one group (they fuse); returns a list of new tensors.

    Differentiable.
    """
    op = handle_average_backwards_compatibility(op, average)
    pairs = [compression.compress(t) for t in tensors]
    if not pairs:
        return []
    reduced = _autograd.GroupedAllreduceFunction.apply(
        name, op, prescale_factor, postscale_factor, process_set, *[p[0] for p in pairs]
    )
    return [compression.decompress(r, p[1]) for r, p in zip(reduced, pairs)]


def grouped_allreduce_(
    tensors: list[torch.Tensor],
    average: bool | None = None,
    name: str | None = None,
    op: int | None = None,
    prescale_factor: float = 1.0,
    postscale_factor: float = 1.0,
    process_set: ProcessSet = global_process_set,
) -> list[torch.Tensor]:
    """In-place grouped allreduce; returns the input tensors holding the results."""
    op = handle_average_backwards_compatibility(op, average)
    return synchronize(
        grouped_allreduce_async_(
            tensors,
            name=name,
            op=op,
            prescale_factor=prescale_factor,
            postscale_factor=postscale_factor,
            process_set=process_set,
        )
    )


def allgather(
    tensor: torch.Tensor, name: str | None = None, process_set: ProcessSet = global_process_set
) -> torch.Tensor:
    """Concatenate every rank's tensor along dimension 0 (dim0 may differ between ranks).

    Differentiable: the gradient is this rank's slice of the averaged output gradient.
    """
    return _autograd.AllgatherFunction.apply(tensor, name, process_set)


def grouped_allgather(
    tensors: list[torch.Tensor],
    name: str | None = None,
    process_set: ProcessSet = global_process_set,
) -> list[torch.Tensor]:
    """Allgather a list of tensors as one group; returns a list. Differentiable."""
    if not tensors:
        return []
    return list(_autograd.GroupedAllgatherFunction.apply(name, process_set, *tensors))


def broadcast(
    tensor: torch.Tensor,
    root_rank: int,
    name: str | None = None,
    process_set: ProcessSet = global_process_set,
) -> torch.Tensor:
    """Return a new tensor holding ``root_rank``'s ``tensor`` (``root_rank`` is a global rank).

    Differentiable: the gradient is the averaged output gradient on the root, zero elsewhere.
    """
    return _autograd.BroadcastFunction.apply(tensor, root_rank, name, process_set)


def broadcast_(
    tensor: torch.Tensor,
    root_rank: int,
    name: str | None = None,
    process_set: ProcessSet = global_process_set,
) -> torch.Tensor:
    """In-place broadcast: ``tensor`` receives ``root_rank``'s values and is returned."""
    return synchronize(broadcast_async_(tensor, root_rank, name=name, process_set=process_set))


def alltoall(
    tensor: torch.Tensor,
    splits: SplitsLike = None,
    name: str | None = None,
    process_set: ProcessSet = global_process_set,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Send ``splits[j]`` rows of ``tensor`` to rank j and receive the rows sent to this rank.

    ``splits`` (int32, one entry per rank, sum at most dim0) defaults to equal parts. Returns the
    received rows, or ``(output, received_splits)`` when ``splits`` was given. Differentiable.
    """
    output, received = _autograd.AlltoallFunction.apply(tensor, splits, name, process_set)
    if splits is None:
        return output
    return output, received


def reducescatter(
    tensor: torch.Tensor,
    name: str | None = None,
    compression: type[Compressor] = Compression.none,
    op: int = Average,
    process_set: ProcessSet = global_process_set,
    prescale_factor: float = 1.0,
    postscale_factor: float = 1.0,
) -> torch.Tensor:
    """Reduce over ranks (Average or Sum) and return this rank's block of rows.

    The first ``dim0 % size`` ranks get one row more. Differentiable.
    """
    compressed, ctx = compression.compress(tensor)
    out = _autograd.ReducescatterFunction.apply(
        compressed, name, op, process_set, prescale_factor, postscale_factor
    )
    return compression.decompress(out, ctx)


def grouped_reducescatter(
    tensors: list[torch.Tensor],
    name: str | None = None,
    compression: type[Compressor] = Compression.none,
    op: int = Average,
    process_set: ProcessSet = global_process_set,
    prescale_factor: float = 1.0,
    postscale_factor: float = 1.0,
) -> list[torch.Tensor]:
    """Reducescatter a list of tensors as one group; returns a list. Differentiable."""
    pairs = [compression.compress(t) for t in tensors]
    if not pairs:
        return []
    outs = _autograd.GroupedReducescatterFunction.apply(
        name, op, process_set, prescale_factor, postscale_factor, *[p[0] for p in pairs]
    )
    return [compression.decompress(o, p[1]) for o, p in zip(outs, pairs)]


def join(device: int = -1) -> int:
    """Declare that this rank has no more data; until every rank joins, the others' allreduces
    proceed with this rank contributing zeros. Returns the last rank that joined.

    ``device`` is accepted for compatibility and ignored (CPU tensors).
    """
    return int(_hora.join())


def barrier(process_set: ProcessSet = global_process_set) -> None:
    """Block until every rank of ``process_set`` reaches the barrier."""
    _hora.barrier(process_set=process_set)
