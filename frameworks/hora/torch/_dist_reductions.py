"""The ``hora`` backend's reductions that Hora's engine does not run itself: the bitwise ones
(BAND, BOR, BXOR) and the sum of sparse tensors.

Both gather what every rank has and reduce it locally, as gloo does for sparse tensors: a bitwise
allreduce allgathers the tensors (each rank holds all of them for a moment: the group size times
the memory) and a bitwise reduce-scatter exchanges rows with an all-to-all; a sparse allreduce
allgathers every rank's indices and values and sums the duplicates. Bitwise reductions take
integer and bool tensors only; sparse allreduce takes SUM only.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, Callable

import torch
import torch.distributed as dist

from hora.torch._dist_checks import bitwise_function, flat, flat_rows
from hora.torch._dist_work import HoraWork

if TYPE_CHECKING:
    from hora.torch._dist_group import HoraProcessGroup


def _check_bitwise(tensors: list[torch.Tensor], reduce_op: Any, what: str) -> None:
    for t in tensors:
        if t.is_floating_point() or t.is_complex():
            raise ValueError(f"hora backend: {what} with {reduce_op} needs integer or bool "
                             f"tensors, got {t.dtype}")


def bitwise_allreduce(group: HoraProcessGroup, tensors: list[torch.Tensor], reduce_op: Any,
                      what: str, then: Callable[[Any], list[torch.Tensor]] | None = None
                      ) -> HoraWork:
    """In-place BAND, BOR or BXOR of ``tensors`` over the group; ``then`` (default: return the
    tensors) builds the work's outputs once they hold the result."""
    _check_bitwise(tensors, reduce_op, what)
    fn = bitwise_function(reduce_op)
    if not tensors:
        return group.done([], what)

    def finish(gathered: Any) -> list[torch.Tensor]:
        rows_each = gathered if len(tensors) > 1 else [gathered]
        for t, rows in zip(tensors, rows_each):
            t.copy_(functools.reduce(fn, rows.unbind(0)).reshape(t.shape))
        return then(None) if then is not None else list(tensors)

    return group.run("allgather", [flat_rows(t) for t in tensors], what, finish)


def bitwise_reduce_scatter(group: HoraProcessGroup, stacked: torch.Tensor, reduce_op: Any,
                           what: str, deliver: Callable[[torch.Tensor], list[torch.Tensor]]
                           ) -> HoraWork:
    """Row i of ``stacked`` (one row per group rank) goes to rank i, which reduces the rows it
    receives and gives the result to ``deliver``."""
    _check_bitwise([stacked], reduce_op, what)
    fn = bitwise_function(reduce_op)
    n = group.size()
    row = stacked.shape[1] if stacked.dim() > 1 else 0

    def finish(received: tuple[torch.Tensor, torch.Tensor]) -> list[torch.Tensor]:
        rows = received[0].reshape(n, row)
        return deliver(functools.reduce(fn, rows.unbind(0)))

    sent = flat(stacked)
    return group.run("alltoall", [sent], what, finish, signature=[sent.new_empty(0)],
                     splits=[row] * n)


def sparse_allreduce(group: HoraProcessGroup, tensor: torch.Tensor, reduce_op: Any) -> HoraWork:
    """In-place SUM of a sparse COO tensor over the group: every rank ends with the coalesced
    sum (its indices sorted, duplicates added)."""
    if reduce_op != dist.ReduceOp.SUM:
        raise ValueError(f"hora backend: allreduce of a sparse tensor supports SUM only, got "
                         f"{reduce_op}")
    if tensor.layout != torch.sparse_coo:
        raise ValueError(f"hora backend: allreduce supports sparse tensors of layout "
                         f"torch.sparse_coo only, got {tensor.layout}")
    mine = tensor.detach().coalesce()
    indices = mine.indices().t().contiguous()  # one row per non-zero
    values = mine.values().contiguous()
    # Ranks hold different numbers of non-zeros: only the rows' shapes name the operation.
    signature = [indices.new_empty((0, *indices.shape[1:])),
                 values.new_empty((0, *values.shape[1:]))]

    def finish(gathered: list[torch.Tensor]) -> list[torch.Tensor]:
        all_indices, all_values = gathered
        total = torch.sparse_coo_tensor(all_indices.t(), all_values, tensor.shape)
        tensor.copy_(total.coalesce())
        return [tensor]

    return group.run("allgather", [indices, values], "sparse_allreduce", finish,
                     signature=signature)
