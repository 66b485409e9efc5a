"""The autograd adapter: one ``torch.autograd.Function`` for every differentiable collective.

The forward pass runs the collective through ``hora.torch._async_ops``; the backward pass hands
private copies of the output gradients to the collective's rule in ``hora.common.gradients`` and
wraps what comes back as tensors.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from hora.common import gradients
from hora.torch import _async_ops as _a

# Rules that write into the gradients they are given need a private copy of each.
_WRITES_GRADIENTS = frozenset(("allreduce", "allgather", "broadcast"))


class CollectiveFunction(torch.autograd.Function):
    """A collective call (``collective`` on ``tensors``, grouped or not) with its gradient."""

    @staticmethod
    def forward(ctx: Any, collective: str, grouped: bool, args: dict,
                *tensors: torch.Tensor) -> tuple:
        ctx.collective, ctx.args = collective, args
        ctx.dims = [t.shape[0] if t.dim() > 0 else 1 for t in tensors]
        ctx.dim0 = tensors[0].shape[0] if tensors[0].dim() > 0 else 0
        outputs = call_now(collective, tensors, grouped, args)
        if collective == "alltoall":
            ctx.received = outputs[1].tolist()
            ctx.mark_non_differentiable(outputs[1])
        return outputs

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor) -> tuple:
        collective, args = ctx.collective, ctx.args
        ps = args["process_set"]
        if collective == "alltoall":
            grads = grads[:1]
        prepare = _a.fresh_copy if collective in _WRITES_GRADIENTS else _a.contiguous_input
        bufs = [prepare(g, f"{collective} gradient") for g in grads]
        if collective == "allreduce":
            out = gradients.allreduce_grad(bufs, args["op"], args["prescale"], args["postscale"],
                                           ps)()
        elif collective == "allgather":
            out = gradients.allgather_grad(bufs, ctx.dims, ps)()
        elif collective == "broadcast":
            out = gradients.broadcast_grad(bufs, args["root_rank"], ps)()
        elif collective == "alltoall":
            back = gradients.alltoall_grad(bufs[0], ctx.received, ctx.dim0, ps)()
            out = [_a.from_engine(back, bufs[0].dtype, list(bufs[0].shape))]
        else:
            out = gradients.reducescatter_grad(
                bufs, args["op"], args["prescale"], args["postscale"], ps,
                wrap=lambda array, g: _a.from_engine(array, g.dtype, list(g.shape)),
                scale=lambda t, factor: t * factor)()
        return (None, None, None, *out)


def needs_graph(tensors: list[torch.Tensor]) -> bool:
    """Whether a gradient can flow through a call on ``tensors`` (one of them requires one and
    grad mode is on). When none can, a call skips autograd's bookkeeping, which costs more than
    the collective's own call on a small tensor."""
    if len(tensors) == 1:  # the attribute first: most calls stop at it, and it is cheaper
        return tensors[0].requires_grad and torch.is_grad_enabled()
    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


def run(collective: str, tensors: list[torch.Tensor], grouped: bool, **args: Any) -> tuple:
    """Run a differentiable collective; returns its outputs as a tuple (through autograd only
    when a gradient can flow: needs_graph)."""
    if needs_graph(tensors):
        return CollectiveFunction.apply(collective, grouped, args, *tensors)
    return call_now(collective, tensors, grouped, args)


def call_now(collective: str, tensors: Sequence[torch.Tensor], grouped: bool, args: dict) -> tuple:
    """The collective's outputs, waited for, as a tuple (alltoall's: output, received splits)."""
    result = _a.call(collective, tensors, grouped, collective, waits=True, **args).wait()
    return tuple(result) if collective == "alltoall" or grouped else (result,)
