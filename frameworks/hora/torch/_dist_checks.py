"""Argument checks and conversions shared by the ``hora`` torch.distributed backend's operations.

Every message starts with ``hora backend:`` and names the operation, so an error raised deep in a
training library still says which call it came from.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Callable

import torch
import torch.distributed as dist

from hora.common import ops as _ops
from hora.errors import NotSupportedError

_REDUCE_OPS: list[tuple[Any, int]] = [
    (dist.ReduceOp.SUM, _ops.Sum),
    (dist.ReduceOp.AVG, _ops.Average),
    (dist.ReduceOp.MIN, _ops.Min),
    (dist.ReduceOp.MAX, _ops.Max),
    (dist.ReduceOp.PRODUCT, _ops.Product),
]

BITWISE_OPS = {
    dist.ReduceOp.BAND: torch.bitwise_and,
    dist.ReduceOp.BOR: torch.bitwise_or,
    dist.ReduceOp.BXOR: torch.bitwise_xor,
}
"""The bitwise reductions, which Hora's engine does not have: the backend gathers and reduces."""


def is_bitwise(reduce_op: Any) -> bool:
    """True for BAND, BOR and BXOR."""
    return any(reduce_op == op for op in BITWISE_OPS)


def bitwise_function(reduce_op: Any) -> Any:
    """The torch function of a bitwise ``ReduceOp``."""
    return next(fn for op, fn in BITWISE_OPS.items() if reduce_op == op)


def hora_op(reduce_op: Any) -> tuple[int, float]:
    """Hora's reduce op and prescale factor for a torch ``ReduceOp`` (not a bitwise one)."""
    for torch_op, engine_op in _REDUCE_OPS:
        if reduce_op == torch_op:
            return engine_op, 1.0
    if reduce_op == dist.ReduceOp.PREMUL_SUM:
        return _ops.Sum, float(reduce_op.factor)
    raise NotSupportedError(
        f"hora backend does not support ReduceOp {reduce_op}; supported: SUM, AVG, MIN, MAX, "
        "PRODUCT, PREMUL_SUM, BAND, BOR, BXOR"
    )


def cpu(tensor: torch.Tensor, what: str) -> torch.Tensor:
    """``tensor``, after checking that it is a CPU tensor."""
    if tensor.device.type != "cpu":
        raise NotSupportedError(
            f"hora backend: {what} got a tensor on {tensor.device}; this backend runs CPU "
            "tensors only (use hora.torch's own API or NCCL for GPU tensors)"
        )
    return tensor


def one(tensors: Sequence[torch.Tensor], what: str) -> torch.Tensor:
    """The single CPU tensor of a one-tensor-per-process list."""
    if len(tensors) != 1:
        raise ValueError(f"hora backend: {what} takes one tensor per process, got {len(tensors)}")
    return cpu(tensors[0], what)


def group_list(lists: Sequence[Sequence[torch.Tensor]], size: int, what: str, role: str,
               like: torch.Tensor, like_role: str) -> list[torch.Tensor]:
    """The one list of ``size`` CPU tensors that ``lists`` must hold, each with the size and
    dtype of ``like`` (``role`` and ``like_role`` name both in errors)."""
    if len(lists) != 1 or len(lists[0]) != size:
        raise ValueError(f"hora backend: {what} takes one list of {size} {role} (the group size)")
    for t in lists[0]:
        cpu(t, what)
        if t.numel() != like.numel() or t.dtype != like.dtype:
            raise ValueError(f"hora backend: {what} {role} must match the {like_role}'s size and "
                             f"dtype ({like.numel()} {like.dtype}), got {t.numel()} {t.dtype}")
    return list(lists[0])


def flat(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` as one contiguous dimension (a private copy when it is not contiguous)."""
    return tensor.detach().contiguous().reshape(-1)


def flat_rows(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` as one contiguous row (a private copy when it is not contiguous)."""
    return flat(tensor).reshape(1, -1)


def writable_view(tensor: torch.Tensor) -> torch.Tensor:
    """A contiguous tensor the engine may write into: ``tensor`` itself when it is contiguous,
    else a copy to be written back (``write_back``)."""
    view = tensor.detach()
    return view if view.is_contiguous() else view.contiguous()


def write_back(targets: Sequence[torch.Tensor], bufs: Sequence[torch.Tensor]) -> None:
    """Copy each buffer into its target where ``writable_view`` had to make a copy."""
    for target, buf in zip(targets, bufs):
        if buf.data_ptr() != target.data_ptr():
            target.copy_(buf)


def deliver_into(outputs: list[torch.Tensor]) -> Callable[[torch.Tensor], list[torch.Tensor]]:
    """A delivery of one result row: the row, split in order, copied into ``outputs``."""
    def deliver(row: torch.Tensor) -> list[torch.Tensor]:
        for out, part in zip(outputs, row.reshape(-1).split([t.numel() for t in outputs])):
            out.copy_(part.reshape(out.shape))
        return outputs

    return deliver
