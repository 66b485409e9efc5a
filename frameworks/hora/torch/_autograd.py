"""Differentiable collectives: torch.autograd.Function wrappers around the async operations.

Gradients follow Horovod's conventions:
- allreduce: allreduce of the incoming gradient with the same op and scale factors;
- allgather: Average-allreduce of the gradient, then this rank's rows;
- broadcast: Average-allreduce of the gradient, zero on every rank but the root;
- alltoall: alltoall of the gradient back with the received splits;
- reducescatter: allgather of the gradient (divided by the set size for Average, times the
  scale factors).
"""

from __future__ import annotations

from typing import Any

import torch

from hora.common.process_sets import ProcessSet
from hora.torch import _async_ops as _a
from hora.torch._handles import synchronize


def _rank_offsets(dims: list[int], process_set: ProcessSet) -> tuple[int, list[int]]:
    """This rank's set rank and the row offsets of every rank for allgathered dim0 sizes."""
    offsets = [0]
    for d in dims[:-1]:
        offsets.append(offsets[-1] + d)
    return process_set.rank(), offsets


def _gathered_dims(local: list[int], process_set: ProcessSet) -> torch.Tensor:
    """dim0 of each of the local tensors on every rank: shape [set size, len(local)]."""
    counts = torch.tensor(local, dtype=torch.int64).reshape(1, len(local))
    gathered = synchronize(_a.allgather_async(counts, process_set=process_set))
    return gathered.reshape(process_set.size(), len(local))


class AllreduceFunction(torch.autograd.Function):
    """Allreduce whose gradient is the allreduce of the output gradient."""

    @staticmethod
    def forward(
        ctx: Any,
        tensor: torch.Tensor,
        name: str | None,
        op: int,
        prescale_factor: float,
        postscale_factor: float,
        process_set: ProcessSet,
    ) -> torch.Tensor:
        ctx.op = op
        ctx.scales = (prescale_factor, postscale_factor)
        ctx.process_set = process_set
        handle = _a.allreduce_async(
            tensor,
            name=name,
            op=op,
            prescale_factor=prescale_factor,
            postscale_factor=postscale_factor,
            process_set=process_set,
        )
        return synchronize(handle)

    @staticmethod
    def backward(ctx: Any, grad_output: torch.Tensor) -> tuple:
        handle = _a.allreduce_async(
            grad_output,
            op=ctx.op,
            prescale_factor=ctx.scales[0],
            postscale_factor=ctx.scales[1],
            process_set=ctx.process_set,
        )
        return synchronize(handle), None, None, None, None, None


class GroupedAllreduceFunction(torch.autograd.Function):
    """Grouped allreduce; the gradients are one grouped allreduce of the output gradients."""

    @staticmethod
    def forward(
        ctx: Any,
        name: str | None,
        op: int,
        prescale_factor: float,
        postscale_factor: float,
        process_set: ProcessSet,
        *tensors: torch.Tensor,
    ) -> tuple:
        ctx.op = op
        ctx.scales = (prescale_factor, postscale_factor)
        ctx.process_set = process_set
        handle = _a.grouped_allreduce_async(
            list(tensors),
            name=name,
            op=op,
            prescale_factor=prescale_factor,
            postscale_factor=postscale_factor,
            process_set=process_set,
        )
        return tuple(synchronize(handle))

    @staticmethod
    def backward(ctx: Any, *grad_outputs: torch.Tensor) -> tuple:
        handle = _a.grouped_allreduce_async(
            list(grad_outputs),
            op=ctx.op,
            prescale_factor=ctx.scales[0],
            postscale_factor=ctx.scales[1],
            process_set=ctx.process_set,
        )
        return (None, None, None, None, None, *synchronize(handle))


class AllgatherFunction(torch.autograd.Function):
    """Allgather; the gradient is this rank's rows of the averaged output gradient."""

    @staticmethod
    def forward(
        ctx: Any, tensor: torch.Tensor, name: str | None, process_set: ProcessSet
    ) -> torch.Tensor:
        ctx.dim0 = tensor.shape[0] if tensor.dim() > 0 else 1
        ctx.process_set = process_set
        return synchronize(_a.allgather_async(tensor, name=name, process_set=process_set))

    @staticmethod
    def backward(ctx: Any, grad_output: torch.Tensor) -> tuple:
        ps = ctx.process_set
        reduced = synchronize(_a.allreduce_async(grad_output, op=_a.Average, process_set=ps))
        dims = _gathered_dims([ctx.dim0], ps)[:, 0].tolist()
        rank, offsets = _rank_offsets(dims, ps)
        return reduced.narrow(0, offsets[rank], ctx.dim0), None, None


class GroupedAllgatherFunction(torch.autograd.Function):
    """Grouped allgather with the allgather gradient for each tensor."""

    @staticmethod
    def forward(
        ctx: Any, name: str | None, process_set: ProcessSet, *tensors: torch.Tensor
    ) -> tuple:
        ctx.dims = [t.shape[0] if t.dim() > 0 else 1 for t in tensors]
        ctx.process_set = process_set
        handle = _a.grouped_allgather_async(list(tensors), name=name, process_set=process_set)
        return tuple(synchronize(handle))

    @staticmethod
    def backward(ctx: Any, *grad_outputs: torch.Tensor) -> tuple:
        ps = ctx.process_set
        reduced = synchronize(
            _a.grouped_allreduce_async(list(grad_outputs), op=_a.Average, process_set=ps)
        )
        table = _gathered_dims(ctx.dims, ps)
        grads = []
        for i, (grad, dim0) in enumerate(zip(reduced, ctx.dims)):
            rank, offsets = _rank_offsets(table[:, i].tolist(), ps)
            grads.append(grad.narrow(0, offsets[rank], dim0))
        return (None, None, *grads)


class BroadcastFunction(torch.autograd.Function):
    """Broadcast; the gradient is the averaged output gradient on the root, zero elsewhere."""

    @staticmethod
    def forward(
        ctx: Any, tensor: torch.Tensor, root_rank: int, name: str | None, process_set: ProcessSet
    ) -> torch.Tensor:
        ctx.root_rank = root_rank
        ctx.process_set = process_set
        handle = _a.broadcast_async(tensor, root_rank, name=name, process_set=process_set)
        return synchronize(handle)

    @staticmethod
    def backward(ctx: Any, grad_output: torch.Tensor) -> tuple:
        ps = ctx.process_set
        reduced = synchronize(_a.allreduce_async(grad_output, op=_a.Average, process_set=ps))
        if _world_rank() != ctx.root_rank:
            reduced = reduced * 0
        return reduced, None, None, None


class AlltoallFunction(torch.autograd.Function):
    """Alltoall; the gradient travels back by an alltoall with the received splits."""

    @staticmethod
    def forward(
        ctx: Any,
        tensor: torch.Tensor,
        splits: torch.Tensor | None,
        name: str | None,
        process_set: ProcessSet,
    ) -> tuple:
        ctx.process_set = process_set
        ctx.dim0 = tensor.shape[0] if tensor.dim() > 0 else 0
        handle = _a.alltoall_async(tensor, splits=splits, name=name, process_set=process_set)
        output, received = synchronize(handle)
        ctx.received = received
        ctx.mark_non_differentiable(received)
        return output, received

    @staticmethod
    def backward(ctx: Any, grad_output: torch.Tensor, _grad_received: Any) -> tuple:
        handle = _a.alltoall_async(grad_output, splits=ctx.received, process_set=ctx.process_set)
        grad, _ = synchronize(handle)
        if grad.shape[0] < ctx.dim0:
            unsent = grad.new_zeros((ctx.dim0 - grad.shape[0], *grad.shape[1:]))
            grad = torch.cat([grad, unsent])
        return grad, None, None, None


def _reducescatter_grad_scale(op: int, scales: tuple[float, float], size: int) -> float:
    factor = scales[0] * scales[1]
    if op == _a.Average:
        factor /= size
    return factor


class ReducescatterFunction(torch.autograd.Function):
    """Reducescatter; the gradient is the allgathered output gradient, scaled like the op."""

    @staticmethod
    def forward(
        ctx: Any,
        tensor: torch.Tensor,
        name: str | None,
        op: int,
        process_set: ProcessSet,
        prescale_factor: float,
        postscale_factor: float,
    ) -> torch.Tensor:
        ctx.op = op
        ctx.scales = (prescale_factor, postscale_factor)
        ctx.process_set = process_set
        handle = _a.reducescatter_async(
            tensor,
            name=name,
            op=op,
            process_set=process_set,
            prescale_factor=prescale_factor,
            postscale_factor=postscale_factor,
        )
        return synchronize(handle)

    @staticmethod
    def backward(ctx: Any, grad_output: torch.Tensor) -> tuple:
        ps = ctx.process_set
        gathered = synchronize(_a.allgather_async(grad_output, process_set=ps))
        factor = _reducescatter_grad_scale(ctx.op, ctx.scales, ps.size())
        if factor != 1.0:
            gathered = gathered * factor
        return gathered, None, None, None, None, None


class GroupedReducescatterFunction(torch.autograd.Function):
    """Grouped reducescatter with the reducescatter gradient for each tensor."""

    @staticmethod
    def forward(
        ctx: Any,
        name: str | None,
        op: int,
        process_set: ProcessSet,
        prescale_factor: float,
        postscale_factor: float,
        *tensors: torch.Tensor,
    ) -> tuple:
        ctx.op = op
        ctx.scales = (prescale_factor, postscale_factor)
        ctx.process_set = process_set
        handle = _a.grouped_reducescatter_async(
            list(tensors),
            name=name,
            op=op,
            process_set=process_set,
            prescale_factor=prescale_factor,
            postscale_factor=postscale_factor,
        )
        return tuple(synchronize(handle))

    @staticmethod
    def backward(ctx: Any, *grad_outputs: torch.Tensor) -> tuple:
        ps = ctx.process_set
        gathered = synchronize(_a.grouped_allgather_async(list(grad_outputs), process_set=ps))
        factor = _reducescatter_grad_scale(ctx.op, ctx.scales, ps.size())
        if factor != 1.0:
            gathered = [g * factor for g in gathered]
        return (None, None, None, None, None, *gathered)


def _world_rank() -> int:
    from hora.common import basics

    return basics.rank()
