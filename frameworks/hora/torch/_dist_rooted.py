"""The ``hora`` backend's operations with a root, and the list forms of all-to-all and allgather.

Hora's engine has no gather, scatter or reduce: they are built from the engine's own collectives.
gather and scatter are all-to-alls in which only the root sends (scatter) or receives (gather),
so each element crosses the network once; reduce is an allreduce of a private copy that only the
root keeps (the other ranks' tensors are left as they were). Every rank must take part, as in
torch: the engine matches the operation by name across the group.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from hora.torch import _dist_reductions
from hora.torch._dist_checks import (
    cpu,
    deliver_into,
    flat,
    flat_rows,
    group_list,
    hora_op,
    is_bitwise,
)
from hora.torch._dist_work import HoraWork

if TYPE_CHECKING:
    from hora.torch._dist_group import HoraProcessGroup


def _root(group: HoraProcessGroup, root: int, what: str) -> int:
    if not 0 <= root < group.size():
        raise ValueError(f"hora backend: {what} root {root} is not a rank of this group of "
                         f"{group.size()}")
    return root


def reduce(group: HoraProcessGroup, tensor: torch.Tensor, reduce_op: Any,
           root: int) -> HoraWork:
    """``reduce``: the reduction of every rank's ``tensor`` into the root's."""
    root = _root(group, root, "reduce")
    copy = tensor.detach().clone(memory_format=torch.contiguous_format)
    is_root = group.rank() == root

    def keep(_: Any) -> list[torch.Tensor]:
        if is_root:
            tensor.copy_(copy)
        return [tensor]

    if is_bitwise(reduce_op):
        return _dist_reductions.bitwise_allreduce(group, [copy], reduce_op, "reduce",
                                                  then=keep)
    op, prescale = hora_op(reduce_op)
    return group.start("allreduce", [copy], "reduce", keep, op=op, prescale=prescale)


def _received(result: tuple[torch.Tensor, torch.Tensor], want: list[int],
              what: str) -> torch.Tensor:
    """An all-to-all's received elements, after checking how many came from each rank."""
    received, splits = result
    got = [int(x) for x in splits.tolist()]
    if got != want:
        raise ValueError(f"hora backend: {what} received {got} elements from the ranks, "
                         f"expected {want}: the ranks' tensors differ in size")
    return received


def gather(group: HoraProcessGroup, output_lists: list[list[torch.Tensor]],
           input: torch.Tensor, root: int) -> HoraWork:
    """``gather``: every rank's ``input`` into the root's ``output_lists[0]``, in rank order."""
    root = _root(group, root, "gather")
    n, is_root = group.size(), group.rank() == root
    outputs = (group_list(output_lists, n, "gather", "outputs", input, "input") if is_root
               else [])
    sent = flat(input)
    splits = [0] * n
    splits[root] = sent.numel()

    def finish(result: tuple[torch.Tensor, torch.Tensor]) -> list[torch.Tensor]:
        if not is_root:
            return []
        received = _received(result, [input.numel()] * n, "gather")
        for out, part in zip(outputs, received.split(input.numel())):
            out.copy_(part.reshape(out.shape))
        return outputs

    return group.run("alltoall", [sent], "gather", finish, signature=[sent.new_empty(0)],
                     splits=splits)


def scatter(group: HoraProcessGroup, output: torch.Tensor,
            input_lists: list[list[torch.Tensor]], root: int) -> HoraWork:
    """``scatter``: the root's ``input_lists[0][i]`` into rank i's ``output``."""
    root = _root(group, root, "scatter")
    n, is_root = group.size(), group.rank() == root
    if is_root:
        inputs = group_list(input_lists, n, "scatter", "inputs", output, "output")
        sent = torch.cat([flat(t) for t in inputs])
        splits = [output.numel()] * n
    else:
        sent = output.new_empty(0)
        splits = [0] * n

    def finish(result: tuple[torch.Tensor, torch.Tensor]) -> list[torch.Tensor]:
        want = [0] * n
        want[root] = output.numel()
        output.copy_(_received(result, want, "scatter").reshape(output.shape))
        return [output]

    return group.run("alltoall", [sent], "scatter", finish, signature=[sent.new_empty(0)],
                     splits=splits)


def alltoall_lists(group: HoraProcessGroup, outputs: list[torch.Tensor],
                   inputs: list[torch.Tensor]) -> HoraWork:
    """``all_to_all``: ``inputs[i]`` goes to rank i; ``outputs[j]`` receives rank j's."""
    n = group.size()
    if len(inputs) != n or len(outputs) != n:
        raise ValueError(f"hora backend: all_to_all takes {n} input and {n} output tensors (the "
                         f"group size), got {len(inputs)} and {len(outputs)}")
    dtypes = {cpu(t, "all_to_all").dtype for t in [*inputs, *outputs]}
    if len(dtypes) != 1:
        raise ValueError(f"hora backend: all_to_all tensors must share one dtype, got "
                         f"{sorted(str(d) for d in dtypes)}")
    sent = torch.cat([flat(t) for t in inputs])

    def finish(result: tuple[torch.Tensor, torch.Tensor]) -> list[torch.Tensor]:
        received = _received(result, [t.numel() for t in outputs], "all_to_all")
        for out, part in zip(outputs, received.split([t.numel() for t in outputs])):
            out.copy_(part.reshape(out.shape))
        return list(outputs)

    return group.run("alltoall", [sent], "all_to_all", finish, signature=[sent.new_empty(0)],
                     splits=[t.numel() for t in inputs])


def allgather_coalesced(group: HoraProcessGroup, output_lists: list[list[torch.Tensor]],
                        inputs: list[torch.Tensor]) -> HoraWork:
    """``all_gather_coalesced``: ``output_lists[r][i]`` receives rank r's ``inputs[i]``; the
    tensors are gathered as one group, so they fuse."""
    n = group.size()
    if len(output_lists) != n or any(len(outs) != len(inputs) for outs in output_lists):
        raise ValueError(f"hora backend: all_gather_coalesced takes {n} output lists (the group "
                         f"size) of {len(inputs)} tensors each (one per input)")
    for outs in output_lists:
        for out, input in zip(outs, inputs):
            if cpu(out, "all_gather_coalesced").numel() != input.numel() or \
                    out.dtype != input.dtype:
                raise ValueError(f"hora backend: all_gather_coalesced output of {out.numel()} "
                                 f"{out.dtype} for an input of {input.numel()} {input.dtype}")
    if not inputs:
        return group.done([], "all_gather_coalesced")

    def finish(gathered: Any) -> list[torch.Tensor]:
        rows_each = gathered if len(inputs) > 1 else [gathered]
        for i, rows in enumerate(rows_each):
            for r in range(n):
                output_lists[r][i].copy_(rows[r].reshape(output_lists[r][i].shape))
        return [t for outs in output_lists for t in outs]

    return group.run("allgather", [flat_rows(cpu(t, "all_gather_coalesced")) for t in inputs],
                     "all_gather_coalesced", finish)


def allgather_into_tensors(group: HoraProcessGroup, outputs: list[torch.Tensor],
                           inputs: list[torch.Tensor]) -> HoraWork:
    """Several ``all_gather_into_tensor``: ``outputs[i]`` (the group size times ``inputs[i]``)
    receives every rank's ``inputs[i]``; gathered as one group, so they fuse."""
    if len(outputs) != len(inputs):
        raise ValueError(f"hora backend: all_gather_into_tensor coalesced {len(inputs)} inputs "
                         f"into {len(outputs)} outputs")
    for out, input in zip(outputs, inputs):
        if cpu(out, "all_gather_into_tensor").numel() != input.numel() * group.size() or \
                out.dtype != input.dtype:
            raise ValueError(f"hora backend: all_gather_into_tensor needs an output of "
                             f"{group.size()} x the input's {input.numel()} elements of "
                             f"{input.dtype}, got {out.numel()} of {out.dtype}")
    if not inputs:
        return group.done([], "all_gather_into_tensor_coalesced")

    def finish(gathered: Any) -> list[torch.Tensor]:
        rows_each = gathered if len(inputs) > 1 else [gathered]
        for out, rows in zip(outputs, rows_each):
            out.copy_(rows.reshape(out.shape))
        return list(outputs)

    return group.run("allgather", [flat_rows(cpu(t, "all_gather_into_tensor")) for t in inputs],
                     "all_gather_into_tensor_coalesced", finish)


def reduce_scatter_coalesced(group: HoraProcessGroup, outputs: list[torch.Tensor],
                             inputs: list[torch.Tensor], reduce_op: Any) -> HoraWork:
    """Several ``reduce_scatter_tensor`` as one: the inputs' rows (one per rank) side by side,
    reduced and scattered once, this rank's row split into ``outputs``."""
    n = group.size()
    if len(outputs) != len(inputs):
        raise ValueError(f"hora backend: reduce_scatter_tensor coalesced {len(inputs)} inputs "
                         f"into {len(outputs)} outputs")
    if not inputs:
        return group.done([], "reduce_scatter_tensor_coalesced")
    dtypes = {cpu(t, "reduce_scatter_tensor").dtype for t in [*inputs, *outputs]}
    if len(dtypes) != 1:
        raise ValueError(f"hora backend: coalesced reduce_scatter_tensor needs one dtype, got "
                         f"{sorted(str(d) for d in dtypes)}")
    for out, input in zip(outputs, inputs):
        if input.numel() != out.numel() * n:
            raise ValueError(f"hora backend: reduce_scatter_tensor needs an input of {n} x the "
                             f"output's {out.numel()} elements, got {input.numel()}")
    stacked = torch.cat([t.detach().reshape(n, -1) for t in inputs], dim=1).contiguous()
    return group.reduce_scatter_rows(stacked, reduce_op, "reduce_scatter_tensor_coalesced",
                                     deliver_into(list(outputs)))
