"""Hora as a ``torch.distributed`` backend: ``init_process_group(backend="hora")``.

``import hora.torch`` registers the backend (CPU tensors). Its process group is a Python
``torch.distributed.ProcessGroup`` whose collectives are Hora engine operations on a Hora process
set: the whole job for the default group, a dynamically added set for ``new_group(ranks)``. Every
collective returns at once with a ``HoraWork`` (see ``_dist_work``); DDP, its communication hooks
and ``ZeroRedundancyOptimizer`` use these works and their futures.

Not provided (a clear error instead): point-to-point (send/recv), gather, scatter, reduce,
monitored_barrier, bitwise reductions (BAND/BOR/BXOR), GPU tensors.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from typing import Any, Callable

import torch
import torch.distributed as dist

import hora
from hora.common import ops as _ops
from hora.common.process_sets import ProcessSet, global_process_set
from hora.errors import NotSupportedError
from hora.torch import _async_ops
from hora.torch._dist_work import HoraWork, NameSequence, completed, submit

BACKEND_NAME = "hora"

_REDUCE_OPS: list[tuple[Any, int]] = [
    (dist.ReduceOp.SUM, _ops.Sum),
    (dist.ReduceOp.AVG, _ops.Average),
    (dist.ReduceOp.MIN, _ops.Min),
    (dist.ReduceOp.MAX, _ops.Max),
    (dist.ReduceOp.PRODUCT, _ops.Product),
]


def _hora_op(reduce_op: Any) -> tuple[int, float]:
    """Hora's reduce op and prescale factor for a torch ``ReduceOp``."""
    for torch_op, hora_op in _REDUCE_OPS:
        if reduce_op == torch_op:
            return hora_op, 1.0
    if reduce_op == dist.ReduceOp.PREMUL_SUM:
        return _ops.Sum, float(reduce_op.factor)
    raise NotSupportedError(
        f"hora backend does not support ReduceOp {reduce_op.op}; "
        "supported: SUM, AVG, MIN, MAX, PRODUCT, PREMUL_SUM"
    )


def _one(tensors: Sequence[torch.Tensor], what: str) -> torch.Tensor:
    if len(tensors) != 1:
        raise ValueError(f"hora backend: {what} takes one tensor per process, got {len(tensors)}")
    return _cpu(tensors[0], what)


def _cpu(tensor: torch.Tensor, what: str) -> torch.Tensor:
    if tensor.device.type != "cpu":
        raise NotSupportedError(
            f"hora backend: {what} got a tensor on {tensor.device}; this backend runs CPU "
            "tensors only (use hora.torch's own API or NCCL for GPU tensors)"
        )
    return tensor


def _flat_rows(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` as one contiguous row (a private copy when it is not contiguous)."""
    return tensor.detach().contiguous().reshape(1, -1)


class HoraProcessGroup(dist.ProcessGroup):
    """A torch.distributed process group whose collectives run on Hora's engine.

    The collectives override the forms torch's C++ dispatch calls (tensor lists and an options
    object); torch's stub declares them as overloads with the Python conveniences too, hence the
    ``type: ignore[override]`` on them.

    ``ranks`` are the global ranks of the group in group-rank order; ``process_set`` is the Hora
    process set with those ranks.
    """

    def __init__(self, rank: int, size: int, ranks: Sequence[int], process_set: ProcessSet,
                 group_name: str, timeout: datetime.timedelta) -> None:
        # torch's stub lists only the C++ constructors, not the (rank, size) one of Python groups.
        super().__init__(rank, size)  # type: ignore[call-arg]
        self._ranks = list(ranks)
        self._set = process_set
        self._timeout = timeout
        self._names = NameSequence(f"torchdist.{group_name}")

    # -------------------------------------------------------------------------------- helpers

    def name(self) -> str:
        """The backend's name, as ``torch.distributed.get_backend`` reports it."""
        return BACKEND_NAME

    def _global(self, group_rank: int) -> int:
        if not 0 <= group_rank < len(self._ranks):
            raise ValueError(f"hora backend: rank {group_rank} is not in this group of "
                             f"{len(self._ranks)}")
        return self._ranks[group_rank]

    def _start(self, collective: str, tensors: list[torch.Tensor], what: str,
               finish: Callable[[Any], list[torch.Tensor]], **kwargs: Any) -> HoraWork:
        name = self._names.next(what, *tensors)
        grouped = len(tensors) > 1
        names = ([f"{name}.{i}" for i in range(len(tensors))] if grouped else [name])
        result = _async_ops.call(collective, tensors, grouped, f"hora backend {what}",
                                 prepare=_async_ops.inplace_view, in_place=True, names=names,
                                 process_set=self._set, **kwargs)

        def done() -> list[torch.Tensor]:
            return finish(result.wait())

        return submit(name, result, done, self._timeout)

    # ---------------------------------------------------------------------- reductions

    def allreduce(  # type: ignore[override]
            self, tensors: list[torch.Tensor], opts: Any = None) -> HoraWork:
        """In-place allreduce of one tensor (SUM, AVG, MIN, MAX, PRODUCT, PREMUL_SUM)."""
        opts = dist.AllreduceOptions() if opts is None else opts
        return self._allreduce(tensors, opts.reduceOp, "allreduce", one=True)

    def allreduce_coalesced(self, tensors: list[torch.Tensor], opts: Any = None) -> HoraWork:
        """In-place allreduce of several tensors, submitted together so that they fuse."""
        opts = dist.AllreduceCoalescedOptions() if opts is None else opts
        return self._allreduce(tensors, opts.reduceOp, "allreduce_coalesced", one=False)

    def _allreduce(self, tensors: list[torch.Tensor], reduce_op: Any, what: str,
                   one: bool) -> HoraWork:
        targets = [_one(tensors, what)] if one else [_cpu(t, what) for t in tensors]
        op, prescale = _hora_op(reduce_op)
        bufs = [t.detach() if t.is_contiguous() else t.detach().contiguous() for t in targets]

        def finish(_: Any) -> list[torch.Tensor]:
            for target, buf in zip(targets, bufs):
                if buf.data_ptr() != target.data_ptr():
                    target.copy_(buf)
            return list(tensors)

        if not bufs:
            # Named like any operation: callbacks on its future name theirs after it.
            return completed(list(tensors), self._names.next(what))
        return self._start("allreduce", bufs, what, finish, op=op, prescale=prescale)

    def _reduce_scatter_rows(self, stacked: torch.Tensor, reduce_op: Any, what: str,
                             output: torch.Tensor, result: list[torch.Tensor]) -> HoraWork:
        """Reduce ``stacked`` (one row per group rank) and keep this rank's row in ``output``."""
        op, prescale = _hora_op(reduce_op)
        mine = self.rank()
        if op in (_ops.Sum, _ops.Average):
            def finish(out: torch.Tensor) -> list[torch.Tensor]:
                output.copy_(out.reshape(output.shape))
                return result

            name = self._names.next(what, stacked)
            call = _async_ops.call("reducescatter", [stacked], False, f"hora backend {what}",
                                   names=[name], op=op, prescale=prescale,
                                   process_set=self._set)
            return submit(name, call, lambda: finish(call.wait()), self._timeout)

        # MIN, MAX and PRODUCT: Hora's reducescatter takes Sum and Average only.
        def keep_row(_: Any) -> list[torch.Tensor]:
            output.copy_(stacked[mine].reshape(output.shape))
            return result

        return self._start("allreduce", [stacked], what, keep_row, op=op, prescale=prescale)

    def _group_list(self, lists: list[list[torch.Tensor]], what: str, role: str,
                    like: torch.Tensor, like_role: str) -> list[torch.Tensor]:
        """The one list of group-size CPU tensors that ``lists`` must hold, each with the size and
        dtype of ``like`` (``role`` and ``like_role`` name both in errors)."""
        if len(lists) != 1 or len(lists[0]) != self.size():
            raise ValueError(f"hora backend: {what} takes one list of {self.size()} {role} "
                             f"(the group size)")
        for t in lists[0]:
            _cpu(t, what)
            if t.numel() != like.numel() or t.dtype != like.dtype:
                raise ValueError(f"hora backend: {what} {role} must match the {like_role}'s size "
                                 f"and dtype ({like.numel()} {like.dtype}), got {t.numel()} "
                                 f"{t.dtype}")
        return lists[0]

    def reduce_scatter(  # type: ignore[override]
            self, output_tensors: list[torch.Tensor], input_lists: list[list[torch.Tensor]],
            opts: Any = None) -> HoraWork:
        """Rank i receives the reduction of every rank's ``input_list[i]``."""
        opts = dist.ReduceScatterOptions() if opts is None else opts
        output = _one(output_tensors, "reduce_scatter")
        inputs = self._group_list(input_lists, "reduce_scatter", "inputs", output, "output")
        stacked = torch.stack([t.detach().reshape(-1) for t in inputs])
        return self._reduce_scatter_rows(stacked, opts.reduceOp, "reduce_scatter", output,
                                         list(output_tensors))

    def _reduce_scatter_base(self, output: torch.Tensor, input: torch.Tensor,
                             opts: Any = None) -> HoraWork:
        """``reduce_scatter_tensor``: the input is the group size times the output."""
        opts = dist.ReduceScatterOptions() if opts is None else opts
        _cpu(output, "reduce_scatter_tensor")
        _cpu(input, "reduce_scatter_tensor")
        if input.numel() != output.numel() * self.size() or input.dtype != output.dtype:
            raise ValueError(
                f"hora backend: reduce_scatter_tensor needs an input of {self.size()} x the "
                f"output's {output.numel()} elements of {output.dtype}, got {input.numel()} of "
                f"{input.dtype}"
            )
        stacked = input.detach().contiguous().reshape(self.size(), -1).clone()
        return self._reduce_scatter_rows(stacked, opts.reduceOp, "reduce_scatter_tensor",
                                         output, [output])

    # ---------------------------------------------------------------- copies between ranks

    def broadcast(  # type: ignore[override]
            self, tensors: list[torch.Tensor], opts: Any = None) -> HoraWork:
        """In-place broadcast from group rank ``opts.rootRank``."""
        opts = dist.BroadcastOptions() if opts is None else opts
        target = _one(tensors, "broadcast")
        buf = target.detach() if target.is_contiguous() else target.detach().contiguous()
        root = self._global(opts.rootRank)

        def finish(_: Any) -> list[torch.Tensor]:
            if buf.data_ptr() != target.data_ptr():
                target.copy_(buf)
            return list(tensors)

        return self._start("broadcast", [buf], "broadcast", finish, root_rank=root)

    def _gather_rows(self, input: torch.Tensor, what: str,
                     finish: Callable[[torch.Tensor], list[torch.Tensor]]) -> HoraWork:
        rows = _flat_rows(input)
        name = self._names.next(what, rows)
        call = _async_ops.call("allgather", [rows], False, f"hora backend {what}",
                               names=[name], process_set=self._set)
        return submit(name, call, lambda: finish(call.wait()), self._timeout)

    def allgather(  # type: ignore[override]
            self, output_lists: list[list[torch.Tensor]], input_list: list[torch.Tensor],
            opts: Any = None) -> HoraWork:
        """``all_gather``: every rank's tensor into ``output_lists[0]`` (same shapes)."""
        input = _one(input_list, "all_gather")
        outputs = self._group_list(output_lists, "all_gather", "outputs", input, "input")

        def finish(rows: torch.Tensor) -> list[torch.Tensor]:
            for out, row in zip(outputs, rows):
                out.copy_(row.reshape(out.shape))
            return list(outputs)

        return self._gather_rows(input, "all_gather", finish)

    def _allgather_base(self, output: torch.Tensor, input: torch.Tensor,
                        opts: Any = None) -> HoraWork:
        """``all_gather_into_tensor``: the output is the group size times the input."""
        _cpu(output, "all_gather_into_tensor")
        _cpu(input, "all_gather_into_tensor")
        if output.numel() != input.numel() * self.size() or output.dtype != input.dtype:
            raise ValueError(
                f"hora backend: all_gather_into_tensor needs an output of {self.size()} x the "
                f"input's {input.numel()} elements of {input.dtype}, got {output.numel()} of "
                f"{output.dtype}"
            )

        def finish(rows: torch.Tensor) -> list[torch.Tensor]:
            output.copy_(rows.reshape(output.shape))
            return [output]

        return self._gather_rows(input, "all_gather_into_tensor", finish)

    def alltoall_base(self, output: torch.Tensor, input: torch.Tensor,
                      output_split_sizes: list[int], input_split_sizes: list[int],
                      opts: Any = None) -> HoraWork:
        """``all_to_all_single``: rows of dimension 0, split equally or by the given sizes."""
        _cpu(output, "all_to_all_single")
        _cpu(input, "all_to_all_single")
        n = self.size()
        if input.dim() == 0 or output.dim() == 0:
            raise ValueError("hora backend: all_to_all_single needs tensors of at least one "
                             "dimension")
        if input.dtype != output.dtype:
            raise ValueError(f"hora backend: all_to_all_single input is {input.dtype}, output "
                             f"{output.dtype}")
        if input_split_sizes:
            splits = [int(s) for s in input_split_sizes]
        elif input.shape[0] % n:
            raise ValueError(f"hora backend: all_to_all_single without input_split_sizes needs "
                             f"dimension 0 ({input.shape[0]}) divisible by the group size {n}")
        else:
            splits = [input.shape[0] // n] * n
        expected = [int(s) for s in output_split_sizes] if output_split_sizes else None
        # Ranks send different row counts: only the row shape is common to every rank's name.
        name = self._names.next("all_to_all_single", input.new_empty(input.shape[1:]))
        call = _async_ops.call("alltoall", [input.detach().contiguous()], False,
                               "hora backend all_to_all_single", names=[name], splits=splits,
                               process_set=self._set)

        def finish() -> list[torch.Tensor]:
            received, received_splits = call.wait()
            got = [int(x) for x in received_splits.tolist()]
            want = expected if expected is not None else [output.shape[0] // n] * n
            if got != want or received.shape[1:] != output.shape[1:]:
                raise ValueError(
                    f"hora backend: all_to_all_single received rows {got} of shape "
                    f"{list(received.shape[1:])}, but the output expects rows {want} of shape "
                    f"{list(output.shape[1:])}"
                )
            output.copy_(received.reshape(output.shape))
            return [output]

        return submit(name, call, finish, self._timeout)

    def barrier(self, opts: Any = None) -> HoraWork:
        """Completes when every rank of the group has reached it."""
        name = self._names.next("barrier")
        handles = _ops.enqueue("barrier", [], names=[name], process_set=self._set)
        return submit(name, _ops.AsyncResult(handles, lambda _: None), list,
                      self._timeout)

    # torch 2.13's Python front end calls these names; C++ callers use the underscored ones.
    all_gather_single = _allgather_base
    reduce_scatter_single = _reduce_scatter_base  # type: ignore[assignment]
    all_to_all_single = alltoall_base  # type: ignore[assignment]

    # ------------------------------------------------------------------------ not provided

    def _unsupported(self, what: str) -> NotSupportedError:
        return NotSupportedError(
            f"hora backend does not support {what}; use a gloo group for it "
            "(torch.distributed.new_group(backend='gloo') while gloo is the default backend)"
        )

    def send(self, tensors: Any, dst: int, tag: int = 0) -> HoraWork:
        """Not provided by this backend."""
        raise self._unsupported("send (point-to-point)")

    def recv(self, tensors: Any, src: int, tag: int = 0) -> HoraWork:
        """Not provided by this backend."""
        raise self._unsupported("recv (point-to-point)")

    def recv_anysource(self, tensors: Any, tag: int = 0) -> HoraWork:
        """Not provided by this backend."""
        raise self._unsupported("recv from any source (point-to-point)")

    def gather(self, *args: Any) -> HoraWork:
        """Not provided by this backend (all_gather is)."""
        raise self._unsupported("gather (all_gather is supported)")

    def scatter(self, *args: Any) -> HoraWork:
        """Not provided by this backend (broadcast is)."""
        raise self._unsupported("scatter (broadcast is supported)")

    def reduce(self, *args: Any) -> HoraWork:
        """Not provided by this backend (all_reduce is)."""
        raise self._unsupported("reduce (all_reduce is supported)")

    def alltoall(self, *args: Any) -> HoraWork:
        """Not provided by this backend (all_to_all_single is)."""
        raise self._unsupported("all_to_all with tensor lists (all_to_all_single is supported)")

    # ------------------------------------------------------------------------ subgroups

    def new_group(self, ranks: Sequence[int], timeout: datetime.timedelta | None = None,
                  pg_options: Any = None, group_name: str = "", group_desc: str = "",
                  **_: Any) -> HoraProcessGroup | None:
        """``torch.distributed.new_group(ranks)`` with this group as the default: every rank
        registers a Hora process set with ``ranks``; members get its group, others None."""
        ranks = sorted(int(r) for r in ranks)
        process_set = process_set_for(ranks, collective=True)
        if hora.rank() not in ranks:
            return None
        return HoraProcessGroup(ranks.index(hora.rank()), len(ranks), ranks, process_set,
                                group_name or f"set{process_set.process_set_id}",
                                timeout or self._timeout)


def process_set_for(ranks: Sequence[int], collective: bool) -> ProcessSet:
    """The Hora process set with exactly ``ranks`` (global ranks, sorted).

    The whole job is the global set. Otherwise an already registered set with these ranks is
    reused; if there is none and every rank of the job takes part (``collective``), one is added.

    Raises:
        NotSupportedError: no set with these ranks exists and only the members take part, or
            dynamic process sets are off.
    """
    if list(ranks) == list(range(hora.size())):
        return global_process_set
    from hora.common import process_sets as _ps

    for ps in _ps.process_sets():
        if ps.ranks is not None and sorted(ps.ranks) == list(ranks):
            return ps
    if not collective:
        raise NotSupportedError(
            f"hora backend: a group of ranks {list(ranks)} needs a Hora process set with these "
            "ranks; only the default group can create one on every rank. Make 'hora' the default "
            "backend (init_process_group(backend='hora')), or call "
            "hora.torch.add_process_set(ranks) on every rank before new_group"
        )
    try:
        return hora.add_process_set(list(ranks))
    except Exception as exc:
        raise NotSupportedError(
            f"hora backend: new_group({list(ranks)}) could not add a Hora process set ({exc}); "
            "start Hora with dynamic process sets (HORA_DYNAMIC_PROCESS_SETS=1, or let "
            "init_process_group start Hora)"
        ) from exc


def _create(opts: Any, pg_options: Any = None) -> HoraProcessGroup:
    """The creator torch calls (extended API) for every group whose backend is ``hora``."""
    if not hora.is_initialized():
        hora.init(process_sets="dynamic")
    ranks = sorted(opts.global_ranks_in_group) or list(range(hora.size()))
    if not opts.global_ranks_in_group and (opts.group_size != hora.size()
                                           or opts.group_rank != hora.rank()):
        raise ValueError(
            f"hora backend: torch.distributed says rank {opts.group_rank} of "
            f"{opts.group_size}, Hora says rank {hora.rank()} of {hora.size()}; start the job "
            "with one launcher so that both agree"
        )
    process_set = process_set_for(ranks, collective=False)
    return HoraProcessGroup(opts.group_rank, opts.group_size, ranks, process_set,
                            str(opts.group_id), opts.timeout)


def register() -> None:
    """Register the ``hora`` backend with torch.distributed (CPU tensors); idempotent."""
    if BACKEND_NAME.upper() in dist.Backend._plugins:
        return
    dist.Backend.register_backend(BACKEND_NAME, _create, extended_api=True, devices=["cpu"])
