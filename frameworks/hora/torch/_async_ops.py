"""Asynchronous collective operations on torch tensors (integer handles, as in Horovod).

Every ``*_async`` function enqueues work on the engine and returns an ``int`` handle, as Horovod's
torch API does. ``synchronize(handle)`` waits for it and returns the result; ``poll(handle)`` asks
whether it finished. Tensors cross to the engine through DLPack (``tensor.detach()``, which shares
memory): allreduce and broadcast results land in the memory of the tensor handed over, while the
engine allocates the outputs of allgather, alltoall and reducescatter and hands them back as NumPy
arrays that are wrapped without a copy.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Union

import numpy as np
import torch

from hora.common import ops as _ops
from hora.common.process_sets import ProcessSet, global_process_set
from hora.torch import _handles

Average = _ops.Average
Sum = _ops.Sum
Adasum = _ops.Adasum
Min = _ops.Min
Max = _ops.Max
Product = _ops.Product

handle_average_backwards_compatibility = _ops.handle_average_backwards_compatibility

SplitsLike = Union[torch.Tensor, Sequence[int], np.ndarray, None]

_SUPPORTED_DTYPES = frozenset(
    d
    for d in (
        torch.uint8,
        torch.int8,
        getattr(torch, "uint16", None),
        torch.int16,
        torch.int32,
        torch.int64,
        torch.float16,
        torch.bfloat16,
        torch.float32,
        torch.float64,
        torch.bool,
    )
    if d is not None
)


def _check_tensor(tensor: Any, what: str) -> None:
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"{what} expects a torch.Tensor, got {type(tensor).__name__}")
    if tensor.layout != torch.strided:
        raise ValueError(
            f"{what} expects a dense tensor, got layout {tensor.layout}; "
            "use sparse_allreduce_async for sparse tensors"
        )
    if tensor.dtype not in _SUPPORTED_DTYPES:
        raise ValueError(f"Tensor type {tensor.dtype} is not supported.")


def _inplace_view(tensor: torch.Tensor, what: str) -> torch.Tensor:
    """The tensor's own memory, as the engine will write into it."""
    _check_tensor(tensor, what)
    view = tensor.detach()
    if not view.is_contiguous():
        raise ValueError(
            f"{what}: tensor is not contiguous (shape {list(tensor.shape)}, strides "
            f"{list(tensor.stride())}); in-place operations need contiguous memory"
        )
    return view


def _contiguous_input(tensor: torch.Tensor, what: str) -> torch.Tensor:
    _check_tensor(tensor, what)
    view = tensor.detach()
    return view if view.is_contiguous() else view.contiguous()


def _fresh_copy(tensor: torch.Tensor, what: str) -> torch.Tensor:
    _check_tensor(tensor, what)
    return tensor.detach().clone(memory_format=torch.contiguous_format)


def _from_engine(
    array: np.ndarray | None, dtype: torch.dtype, shape: Sequence[int]
) -> torch.Tensor:
    """Wrap an engine-owned result array as a tensor of ``dtype`` without copying."""
    if array is None:
        return torch.empty((0, *shape[1:]), dtype=dtype)
    if array.dtype == np.uint16 and dtype != getattr(torch, "uint16", None):
        array = array.view(np.int16)
    if not array.flags.writeable:
        array = array.copy()
    result = torch.from_numpy(array)
    if result.dtype != dtype:
        result = result.view(dtype)
    return result


def _allreduce_kind(op: int) -> int:
    return _ops.ADASUM if op == Adasum else _ops.ALLREDUCE


def _submit_allreduce(
    buffers: list[torch.Tensor],
    names: list[str],
    op: int,
    prescale_factor: float,
    postscale_factor: float,
    process_set: ProcessSet,
) -> list:
    return _ops.submit(
        _allreduce_kind(op),
        buffers,
        names,
        op=op,
        prescale=float(prescale_factor),
        postscale=float(postscale_factor),
        process_set=process_set,
    )


# ----------------------------------------------------------------------------------- allreduce


def allreduce_async(
    tensor: torch.Tensor,
    average: bool | None = None,
    name: str | None = None,
    op: int | None = None,
    prescale_factor: float = 1.0,
    postscale_factor: float = 1.0,
    process_set: ProcessSet = global_process_set,
) -> int:
    """Start an allreduce into a new tensor; ``synchronize`` returns that tensor.

    ``op`` is one of Average (default), Sum, Adasum, Min, Max, Product. ``prescale_factor``
    multiplies each input before the reduction, ``postscale_factor`` the result after it.
    """
    op = handle_average_backwards_compatibility(op, average)
    output = _fresh_copy(tensor, "allreduce_async")
    handles = _submit_allreduce(
        [output],
        [_ops.op_name("allreduce", name)],
        op,
        prescale_factor,
        postscale_factor,
        process_set,
    )
    return _handles.register(handles, lambda: output)


def allreduce_async_(
    tensor: torch.Tensor,
    average: bool | None = None,
    name: str | None = None,
    op: int | None = None,
    prescale_factor: float = 1.0,
    postscale_factor: float = 1.0,
    process_set: ProcessSet = global_process_set,
) -> int:
    """Start an in-place allreduce of ``tensor``; ``synchronize`` returns ``tensor``.

    Raises:
        ValueError: the tensor is not contiguous or its dtype is not supported.
    """
    op = handle_average_backwards_compatibility(op, average)
    view = _inplace_view(tensor, "allreduce_async_")
    handles = _submit_allreduce(
        [view],
        [_ops.op_name("allreduce", name)],
        op,
        prescale_factor,
        postscale_factor,
        process_set,
    )
    return _handles.register(handles, lambda: tensor)


def grouped_allreduce_async(
    tensors: Sequence[torch.Tensor],
    average: bool | None = None,
    name: str | None = None,
    op: int | None = None,
    prescale_factor: float = 1.0,
    postscale_factor: float = 1.0,
    process_set: ProcessSet = global_process_set,
) -> int:
    """Start one allreduce of several tensors, enqueued together so they fuse.

    ``synchronize`` returns a list of new tensors.
    """
    op = handle_average_backwards_compatibility(op, average)
    outputs = [_fresh_copy(t, "grouped_allreduce_async") for t in tensors]
    names = _ops.group_names("grouped_allreduce", name, len(outputs))
    handles = (
        _submit_allreduce(outputs, names, op, prescale_factor, postscale_factor, process_set)
        if outputs
        else []
    )
    return _handles.register(handles, lambda: list(outputs))


def grouped_allreduce_async_(
    tensors: Sequence[torch.Tensor],
    average: bool | None = None,
    name: str | None = None,
    op: int | None = None,
    prescale_factor: float = 1.0,
    postscale_factor: float = 1.0,
    process_set: ProcessSet = global_process_set,
) -> int:
    """In-place form of ``grouped_allreduce_async``; ``synchronize`` returns the input tensors."""
    op = handle_average_backwards_compatibility(op, average)
    tensors = list(tensors)
    views = [_inplace_view(t, "grouped_allreduce_async_") for t in tensors]
    names = _ops.group_names("grouped_allreduce", name, len(views))
    handles = (
        _submit_allreduce(views, names, op, prescale_factor, postscale_factor, process_set)
        if views
        else []
    )
    return _handles.register(handles, lambda: tensors)


# ----------------------------------------------------------------------------------- allgather


def _gather(
    kind_prefix: str, tensors: list[torch.Tensor], names: list[str], process_set: ProcessSet
) -> tuple[list, list[torch.Tensor]]:
    inputs = [_contiguous_input(t, kind_prefix) for t in tensors]
    handles = _ops.submit(_ops.ALLGATHER, inputs, names, process_set=process_set) if inputs else []
    return handles, inputs


def allgather_async(
    tensor: torch.Tensor, name: str | None = None, process_set: ProcessSet = global_process_set
) -> int:
    """Start an allgather: the result concatenates every rank's tensor along dimension 0.

    The first dimension may differ between ranks; the others must match.
    """
    handles, _ = _gather(
        "allgather_async", [tensor], [_ops.op_name("allgather", name)], process_set
    )
    shape = list(tensor.shape)
    return _handles.register(
        handles, lambda: _from_engine(handles[0].output(), tensor.dtype, shape)
    )


def grouped_allgather_async(
    tensors: Sequence[torch.Tensor],
    name: str | None = None,
    process_set: ProcessSet = global_process_set,
) -> int:
    """Start allgathers of several tensors together; ``synchronize`` returns a list."""
    tensors = list(tensors)
    names = _ops.group_names("grouped_allgather", name, len(tensors))
    handles, _ = _gather("grouped_allgather_async", tensors, names, process_set)

    def finish() -> list[torch.Tensor]:
        return [_from_engine(h.output(), t.dtype, list(t.shape)) for h, t in zip(handles, tensors)]

    return _handles.register(handles, finish)


# ----------------------------------------------------------------------------------- broadcast


def _check_root(root_rank: Any) -> int:
    if isinstance(root_rank, bool) or not isinstance(root_rank, (int, np.integer)):
        raise TypeError(f"root_rank must be an int, got {type(root_rank).__name__}")
    return int(root_rank)


def broadcast_async(
    tensor: torch.Tensor,
    root_rank: int,
    name: str | None = None,
    process_set: ProcessSet = global_process_set,
) -> int:
    """Start a broadcast of ``root_rank``'s tensor (a global rank) into a new tensor."""
    root = _check_root(root_rank)
    output = _fresh_copy(tensor, "broadcast_async")
    handles = _ops.submit(
        _ops.BROADCAST,
        [output],
        [_ops.op_name("broadcast", name)],
        root_rank=root,
        process_set=process_set,
    )
    return _handles.register(handles, lambda: output)


def broadcast_async_(
    tensor: torch.Tensor,
    root_rank: int,
    name: str | None = None,
    process_set: ProcessSet = global_process_set,
) -> int:
    """Start an in-place broadcast: ``tensor`` receives ``root_rank``'s values."""
    root = _check_root(root_rank)
    view = _inplace_view(tensor, "broadcast_async_")
    handles = _ops.submit(
        _ops.BROADCAST,
        [view],
        [_ops.op_name("broadcast", name)],
        root_rank=root,
        process_set=process_set,
    )
    return _handles.register(handles, lambda: tensor)


# ------------------------------------------------------------------------------------ alltoall


def _normalize_splits(splits: SplitsLike) -> list[int] | None:
    if splits is None:
        return None
    if isinstance(splits, torch.Tensor):
        if splits.dtype != torch.int32:
            raise ValueError(f"splits must be an int32 tensor, got {splits.dtype}")
        if splits.dim() != 1:
            raise ValueError(f"splits must be a 1-D tensor, got {splits.dim()} dimensions")
        return [int(x) for x in splits.tolist()]
    array = np.asarray(splits)
    if array.ndim != 1:
        raise ValueError(f"splits must be one-dimensional, got shape {list(array.shape)}")
    if array.size and (array.dtype == np.bool_ or not np.issubdtype(array.dtype, np.integer)):
        raise ValueError(f"splits must hold integers, got {array.dtype}")
    return [int(x) for x in array.tolist()]


def alltoall_async(
    tensor: torch.Tensor,
    splits: SplitsLike = None,
    name: str | None = None,
    process_set: ProcessSet = global_process_set,
) -> int:
    """Start an alltoall: rank i sends ``splits[j]`` rows of ``tensor`` to rank j.

    Without ``splits`` dimension 0 is split equally (it must divide by the set size).
    ``synchronize`` returns ``(output, received_splits)``, received_splits an int32 tensor.
    """
    split_list = _normalize_splits(splits)
    source = _contiguous_input(tensor, "alltoall_async")
    handles = _ops.submit(
        _ops.ALLTOALL,
        [source],
        [_ops.op_name("alltoall", name)],
        splits=split_list,
        process_set=process_set,
    )
    shape = list(tensor.shape)

    def finish() -> tuple[torch.Tensor, torch.Tensor]:
        output = _from_engine(handles[0].output(), tensor.dtype, shape)
        received = torch.tensor(list(handles[0].received_splits()), dtype=torch.int32)
        return output, received

    return _handles.register(handles, finish)


# ------------------------------------------------------------------------------- reducescatter


def _check_reducescatter_op(op: int) -> None:
    if op not in (Average, Sum):
        raise ValueError("Reducescatter currently only supports AVERAGE and SUM.")


def reducescatter_async(
    tensor: torch.Tensor,
    name: str | None = None,
    op: int = Average,
    process_set: ProcessSet = global_process_set,
    prescale_factor: float = 1.0,
    postscale_factor: float = 1.0,
) -> int:
    """Start a reducescatter: reduce over ranks, then rank i keeps the i-th block of rows.

    The first ``dim0 % size`` ranks get one row more than the others. ``op``: Average or Sum.
    """
    _check_reducescatter_op(op)
    source = _contiguous_input(tensor, "reducescatter_async")
    handles = _ops.submit(
        _ops.REDUCESCATTER,
        [source],
        [_ops.op_name("reducescatter", name)],
        op=op,
        prescale=float(prescale_factor),
        postscale=float(postscale_factor),
        process_set=process_set,
    )
    shape = list(tensor.shape)
    return _handles.register(
        handles, lambda: _from_engine(handles[0].output(), tensor.dtype, shape)
    )


def grouped_reducescatter_async(
    tensors: Sequence[torch.Tensor],
    name: str | None = None,
    op: int = Average,
    process_set: ProcessSet = global_process_set,
    prescale_factor: float = 1.0,
    postscale_factor: float = 1.0,
) -> int:
    """Start reducescatters of several tensors together; ``synchronize`` returns a list."""
    _check_reducescatter_op(op)
    tensors = list(tensors)
    sources = [_contiguous_input(t, "grouped_reducescatter_async") for t in tensors]
    names = _ops.group_names("grouped_reducescatter", name, len(sources))
    handles = (
        _ops.submit(
            _ops.REDUCESCATTER,
            sources,
            names,
            op=op,
            prescale=float(prescale_factor),
            postscale=float(postscale_factor),
            process_set=process_set,
        )
        if sources
        else []
    )

    def finish() -> list[torch.Tensor]:
        return [_from_engine(h.output(), t.dtype, list(t.shape)) for h, t in zip(handles, tensors)]

    return _handles.register(handles, finish)


# ------------------------------------------------------------------------------------- sparse


def sparse_allreduce_async(
    tensor: torch.Tensor,
    name: str | None = None,
    op: int = Average,
    process_set: ProcessSet = global_process_set,
) -> int:
    """Start the reduction of a sparse COO tensor by allgathering its indices and values.

    ``synchronize`` returns a sparse tensor holding every rank's entries (uncoalesced; duplicates
    add up when coalesced). With Average the values are divided by the set size.
    """
    if op not in (Average, Sum):
        raise ValueError("sparse_allreduce_async supports only Average and Sum")
    if tensor.layout != torch.sparse_coo:
        raise ValueError(f"sparse_allreduce_async expects a sparse COO tensor, got {tensor.layout}")
    sparse = tensor.detach()
    indices = sparse._indices().t().contiguous()
    values = sparse._values().contiguous()
    base = name if name else _ops.auto_name("sparse_allreduce")
    names = [f"allgather.{base}.indices", f"allgather.{base}.values"]
    handles, _ = _gather("sparse_allreduce_async", [indices, values], names, process_set)
    size = process_set.size()
    index_shape = list(indices.shape)
    value_shape = list(values.shape)

    def finish() -> torch.Tensor:
        all_indices = _from_engine(handles[0].output(), indices.dtype, index_shape)
        all_values = _from_engine(handles[1].output(), values.dtype, value_shape)
        if op == Average:
            all_values = all_values / size
        return torch.sparse_coo_tensor(
            all_indices.t(), all_values, sparse.size(), check_invariants=False
        )

    return _handles.register(handles, finish)
