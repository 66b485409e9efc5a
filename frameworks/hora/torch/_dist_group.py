"""``HoraProcessGroup``: a torch.distributed process group whose operations run on Hora.

Its collectives are Hora engine operations on a Hora process set: the whole job for the default
group, a dynamically added set for ``new_group(ranks)``. Every operation returns at once with a
``HoraWork`` (``_dist_work``); DDP, its communication hooks and ``ZeroRedundancyOptimizer`` use
these works and their futures. The collectives over the whole group are here; operations with a
root (reduce, gather, scatter) and the list forms are in ``_dist_rooted``, the bitwise and sparse
reductions in ``_dist_reductions``, point-to-point messages and ``monitored_barrier`` in
``_dist_p2p``.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from typing import Any, Callable

import torch
import torch.distributed as dist

from hora.common import ops as _ops
from hora.common.process_sets import ProcessSet
from hora.torch import _async_ops, _dist_p2p, _dist_reductions, _dist_rooted
from hora.torch._dist_checks import (
    cpu,
    deliver_into,
    flat_rows,
    group_list,
    hora_op,
    is_bitwise,
    one,
    writable_view,
    write_back,
)
from hora.torch._dist_work import HoraWork, NameSequence, completed, submit

BACKEND_NAME = "hora"


class HoraProcessGroup(dist.ProcessGroup):
    """A torch.distributed process group whose operations run on Hora's engine.

    The operations override the forms torch's C++ dispatch calls (tensor lists and an options
    object); torch's stub declares them as overloads with the Python conveniences too, hence the
    ``type: ignore[override]`` on them.

    ``ranks`` are the global ranks of the group in group-rank order; ``process_set`` is the Hora
    process set with those ranks. ``on_shutdown`` runs when torch destroys the group.
    """

    def __init__(self, rank: int, size: int, ranks: Sequence[int], process_set: ProcessSet,
                 group_name: str, timeout: datetime.timedelta,
                 on_shutdown: Callable[[], None] | None = None) -> None:
        # torch's stub lists only the C++ constructors, not the (rank, size) one of Python groups.
        super().__init__(rank, size)  # type: ignore[call-arg]
        self.global_ranks = list(ranks)
        self.process_set = process_set
        self.timeout = timeout
        self.names = NameSequence(f"torchdist.{group_name}")
        self._on_shutdown = on_shutdown
        self._group_name = group_name
        self._group_desc = ""

    # ------------------------------------------------------------- what torch asks of a group

    def name(self) -> str:
        """The backend's name, as ``torch.distributed.get_backend`` reports it."""
        return BACKEND_NAME

    def getBackendName(self) -> str:
        """The backend's name where C++ asks for it (DDP's logging data)."""
        return BACKEND_NAME

    def setGroupName(self, name: str) -> None:
        """Keep the name torch gives the group (``group_name`` reads it)."""
        self._group_name = name

    def getGroupName(self) -> str:
        """The name torch gave the group."""
        return self._group_name

    def setGroupDesc(self, desc: str) -> None:
        """Keep the description torch gives the group."""
        self._group_desc = desc

    def getGroupDesc(self) -> str:
        """The description torch gave the group."""
        return self._group_desc

    def global_rank(self, group_rank: int) -> int:
        """The job rank of ``group_rank``."""
        if not 0 <= group_rank < len(self.global_ranks):
            raise ValueError(f"hora backend: rank {group_rank} is not in this group of "
                             f"{len(self.global_ranks)}")
        return self.global_ranks[group_rank]

    def start(self, collective: str, tensors: list[torch.Tensor], what: str,
              finish: Callable[[Any], list[torch.Tensor]], **kwargs: Any) -> HoraWork:
        """An in-place engine operation on contiguous ``tensors`` (grouped when several);
        ``finish`` gets the engine's result once it is done and returns the work's outputs."""
        name = self.names.next(what, *tensors)
        grouped = len(tensors) > 1
        names = ([f"{name}.{i}" for i in range(len(tensors))] if grouped else [name])
        result = _async_ops.call(collective, tensors, grouped, f"hora backend {what}",
                                 prepare=_async_ops.inplace_view, in_place=True, names=names,
                                 process_set=self.process_set, **kwargs)
        return submit(name, result, lambda: finish(result.wait()), self.timeout)

    def run(self, collective: str, tensors: list[torch.Tensor], what: str,
            finish: Callable[[Any], list[torch.Tensor]],
            signature: Sequence[torch.Tensor] | None = None, **kwargs: Any) -> HoraWork:
        """An engine operation that returns new tensors (allgather, alltoall, reducescatter);
        ``finish`` gets them. ``signature``: the tensors whose dtype and shape name the operation
        alike on every rank (default ``tensors``; an alltoall's rows differ between ranks)."""
        name = self.names.next(what, *(tensors if signature is None else signature))
        grouped = len(tensors) > 1
        names = ([f"{name}.{i}" for i in range(len(tensors))] if grouped else [name])
        call = _async_ops.call(collective, tensors, grouped, f"hora backend {what}", names=names,
                               process_set=self.process_set, **kwargs)
        return submit(name, call, lambda: finish(call.wait()), self.timeout)

    def op_timeout(self, opts: Any) -> datetime.timedelta:
        """The options' own timeout when the caller set one, else the group's."""
        timeout = getattr(opts, "timeout", None)
        if isinstance(timeout, datetime.timedelta) and timeout >= datetime.timedelta(0):
            return timeout
        return self.timeout

    def done(self, outputs: list[torch.Tensor], what: str) -> HoraWork:
        """A work already complete (nothing to communicate), named like any operation so that
        callbacks on its future name theirs after it."""
        return completed(outputs, self.names.next(what))

    # ---------------------------------------------------------------------------- reductions

    def allreduce(  # type: ignore[override]
            self, tensors: list[torch.Tensor], opts: Any = None) -> HoraWork:
        """In-place allreduce of one tensor: SUM, AVG, MIN, MAX, PRODUCT, PREMUL_SUM, the bitwise
        BAND, BOR, BXOR, and SUM of a sparse tensor."""
        opts = dist.AllreduceOptions() if opts is None else opts
        tensor = one(tensors, "allreduce")
        if tensor.is_sparse:
            return _dist_reductions.sparse_allreduce(self, tensor, opts.reduceOp)
        if is_bitwise(opts.reduceOp):
            return _dist_reductions.bitwise_allreduce(self, [tensor], opts.reduceOp, "allreduce")
        return self._allreduce([tensor], opts.reduceOp, "allreduce")

    def allreduce_coalesced(self, tensors: list[torch.Tensor], opts: Any = None) -> HoraWork:
        """In-place allreduce of several tensors, submitted together so that they fuse."""
        opts = dist.AllreduceCoalescedOptions() if opts is None else opts
        targets = [cpu(t, "allreduce_coalesced") for t in tensors]
        if is_bitwise(opts.reduceOp):
            return _dist_reductions.bitwise_allreduce(self, targets, opts.reduceOp,
                                                      "allreduce_coalesced")
        return self._allreduce(targets, opts.reduceOp, "allreduce_coalesced")

    def _allreduce(self, targets: list[torch.Tensor], reduce_op: Any, what: str) -> HoraWork:
        op, prescale = hora_op(reduce_op)
        bufs = [writable_view(t) for t in targets]

        def finish(_: Any) -> list[torch.Tensor]:
            write_back(targets, bufs)
            return list(targets)

        if not bufs:
            return self.done(list(targets), what)
        return self.start("allreduce", bufs, what, finish, op=op, prescale=prescale)

    def reduce_scatter_rows(self, stacked: torch.Tensor, reduce_op: Any, what: str,
                            deliver: Callable[[torch.Tensor], list[torch.Tensor]]) -> HoraWork:
        """Reduce ``stacked`` (one row per group rank); ``deliver`` gets this rank's row of the
        result and returns the work's outputs."""
        if is_bitwise(reduce_op):
            return _dist_reductions.bitwise_reduce_scatter(self, stacked, reduce_op, what,
                                                           deliver)
        op, prescale = hora_op(reduce_op)
        mine = self.rank()
        if op in (_ops.Sum, _ops.Average):
            return self.run("reducescatter", [stacked], what, lambda out: deliver(out[0]),
                            op=op, prescale=prescale)
        # MIN, MAX and PRODUCT: Hora's reducescatter takes Sum and Average only.
        return self.start("allreduce", [stacked], what, lambda _: deliver(stacked[mine]), op=op,
                          prescale=prescale)

    def reduce_scatter(  # type: ignore[override]
            self, output_tensors: list[torch.Tensor], input_lists: list[list[torch.Tensor]],
            opts: Any = None) -> HoraWork:
        """Rank i receives the reduction of every rank's ``input_list[i]``."""
        opts = dist.ReduceScatterOptions() if opts is None else opts
        output = one(output_tensors, "reduce_scatter")
        inputs = group_list(input_lists, self.size(), "reduce_scatter", "inputs", output,
                            "output")
        stacked = torch.stack([t.detach().reshape(-1) for t in inputs])
        return self.reduce_scatter_rows(stacked, opts.reduceOp, "reduce_scatter",
                                        deliver_into([output]))

    def _reduce_scatter_base(self, output: torch.Tensor, input: torch.Tensor,
                             opts: Any = None) -> HoraWork:
        """``reduce_scatter_tensor``: the input is the group size times the output."""
        opts = dist.ReduceScatterOptions() if opts is None else opts
        cpu(output, "reduce_scatter_tensor")
        cpu(input, "reduce_scatter_tensor")
        if input.numel() != output.numel() * self.size() or input.dtype != output.dtype:
            raise ValueError(
                f"hora backend: reduce_scatter_tensor needs an input of {self.size()} x the "
                f"output's {output.numel()} elements of {output.dtype}, got {input.numel()} of "
                f"{input.dtype}"
            )
        stacked = input.detach().contiguous().reshape(self.size(), -1).clone()
        return self.reduce_scatter_rows(stacked, opts.reduceOp, "reduce_scatter_tensor",
                                        deliver_into([output]))

    def reduce_scatter_single_coalesced(  # type: ignore[override]
            self, outputs: list[torch.Tensor], inputs: list[torch.Tensor],
            opts: Any = None) -> HoraWork:
        """Several ``reduce_scatter_tensor`` calls as one (torch's coalescing manager)."""
        opts = dist.ReduceScatterOptions() if opts is None else opts
        return _dist_rooted.reduce_scatter_coalesced(self, outputs, inputs, opts.reduceOp)

    def reduce(  # type: ignore[override]
            self, tensors: list[torch.Tensor], opts: Any = None) -> HoraWork:
        """The reduction of every rank's tensor into the root's (others keep theirs)."""
        opts = dist.ReduceOptions() if opts is None else opts
        return _dist_rooted.reduce(self, one(tensors, "reduce"), opts.reduceOp, opts.rootRank)

    # ------------------------------------------------------------------ copies between ranks

    def broadcast(  # type: ignore[override]
            self, tensors: list[torch.Tensor], opts: Any = None) -> HoraWork:
        """In-place broadcast from group rank ``opts.rootRank``."""
        opts = dist.BroadcastOptions() if opts is None else opts
        target = one(tensors, "broadcast")
        buf = writable_view(target)
        root = self.global_rank(opts.rootRank)

        def finish(_: Any) -> list[torch.Tensor]:
            write_back([target], [buf])
            return list(tensors)

        return self.start("broadcast", [buf], "broadcast", finish, root_rank=root)

    def gather_rows(self, input: torch.Tensor, what: str,
                    finish: Callable[[torch.Tensor], list[torch.Tensor]]) -> HoraWork:
        """Allgather ``input`` as one row per rank; ``finish`` gets the rows."""
        return self.run("allgather", [flat_rows(input)], what, finish)

    def allgather(  # type: ignore[override]
            self, output_lists: list[list[torch.Tensor]], input_list: list[torch.Tensor],
            opts: Any = None) -> HoraWork:
        """``all_gather``: every rank's tensor into ``output_lists[0]`` (same shapes)."""
        input = one(input_list, "all_gather")
        outputs = group_list(output_lists, self.size(), "all_gather", "outputs", input, "input")

        def finish(rows: torch.Tensor) -> list[torch.Tensor]:
            for out, row in zip(outputs, rows):
                out.copy_(row.reshape(out.shape))
            return list(outputs)

        return self.gather_rows(input, "all_gather", finish)

    def _allgather_base(self, output: torch.Tensor, input: torch.Tensor,
                        opts: Any = None) -> HoraWork:
        """``all_gather_into_tensor``: the output is the group size times the input."""
        cpu(output, "all_gather_into_tensor")
        cpu(input, "all_gather_into_tensor")
        if output.numel() != input.numel() * self.size() or output.dtype != input.dtype:
            raise ValueError(
                f"hora backend: all_gather_into_tensor needs an output of {self.size()} x the "
                f"input's {input.numel()} elements of {input.dtype}, got {output.numel()} of "
                f"{output.dtype}"
            )

        def finish(rows: torch.Tensor) -> list[torch.Tensor]:
            output.copy_(rows.reshape(output.shape))
            return [output]

        return self.gather_rows(input, "all_gather_into_tensor", finish)

    def all_gather_single_coalesced(  # type: ignore[override]
            self, outputs: list[torch.Tensor], inputs: list[torch.Tensor],
            opts: Any = None) -> HoraWork:
        """Several ``all_gather_into_tensor`` calls as one (torch's coalescing manager)."""
        return _dist_rooted.allgather_into_tensors(self, outputs, inputs)

    def allgather_coalesced(  # type: ignore[override]
            self, output_lists: list[list[torch.Tensor]], input_list: list[torch.Tensor],
            opts: Any = None) -> HoraWork:
        """``all_gather_coalesced``: several tensors gathered together (they fuse)."""
        return _dist_rooted.allgather_coalesced(self, output_lists, input_list)

    def alltoall_base(self, output: torch.Tensor, input: torch.Tensor,
                      output_split_sizes: list[int], input_split_sizes: list[int],
                      opts: Any = None) -> HoraWork:
        """``all_to_all_single``: rows of dimension 0, split equally or by the given sizes."""
        cpu(output, "all_to_all_single")
        cpu(input, "all_to_all_single")
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

        def finish(result: tuple[torch.Tensor, torch.Tensor]) -> list[torch.Tensor]:
            received, received_splits = result
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

        # Ranks send different row counts: only the row shape is common to every rank's name.
        return self.run("alltoall", [input.detach().contiguous()], "all_to_all_single", finish,
                        signature=[input.new_empty(input.shape[1:])], splits=splits)

    def alltoall(  # type: ignore[override]
            self, output_tensors: list[torch.Tensor], input_tensors: list[torch.Tensor],
            opts: Any = None) -> HoraWork:
        """``all_to_all`` with tensor lists: input i goes to rank i, output i comes from it."""
        return _dist_rooted.alltoall_lists(self, output_tensors, input_tensors)

    def gather(  # type: ignore[override]
            self, output_lists: list[list[torch.Tensor]], input_list: list[torch.Tensor],
            opts: Any = None) -> HoraWork:
        """Every rank's tensor into the root's ``output_lists[0]``."""
        opts = dist.GatherOptions() if opts is None else opts
        return _dist_rooted.gather(self, output_lists, one(input_list, "gather"), opts.rootRank)

    def scatter(  # type: ignore[override]
            self, output_tensors: list[torch.Tensor], input_lists: list[list[torch.Tensor]],
            opts: Any = None) -> HoraWork:
        """The root's ``input_lists[0][i]`` into rank i's output."""
        opts = dist.ScatterOptions() if opts is None else opts
        return _dist_rooted.scatter(self, one(output_tensors, "scatter"), input_lists,
                                    opts.rootRank)

    def barrier(self, opts: Any = None) -> HoraWork:
        """Completes when every rank of the group has reached it."""
        name = self.names.next("barrier")
        handles = _ops.enqueue("barrier", [], names=[name], process_set=self.process_set)
        return submit(name, _ops.AsyncResult(handles, lambda _: None), list,
                      self.op_timeout(opts))

    # torch 2.13's Python front end calls these names; C++ callers use the underscored ones.
    all_gather_single = _allgather_base
    reduce_scatter_single = _reduce_scatter_base  # type: ignore[assignment]
    all_to_all_single = alltoall_base  # type: ignore[assignment]

    # -------------------------------------------------------------------- point to point

    def send(self, tensors: list[torch.Tensor], dst: int,  # type: ignore[override]
             tag: int = 0) -> HoraWork:
        """Send one tensor to group rank ``dst`` with ``tag``."""
        return _dist_p2p.send(self, one(tensors, "send"), dst, tag)

    def recv(self, tensors: list[torch.Tensor], src: int,  # type: ignore[override]
             tag: int = 0) -> HoraWork:
        """Receive one tensor from group rank ``src`` with ``tag`` into ``tensors[0]``."""
        return _dist_p2p.recv(self, one(tensors, "recv"), src, tag)

    def recv_anysource(self, tensors: list[torch.Tensor],  # type: ignore[override]
                       tag: int = 0) -> HoraWork:
        """Receive one tensor with ``tag`` from whichever rank sends first."""
        return _dist_p2p.recv(self, one(tensors, "recv"), None, tag)

    def monitored_barrier(self, timeout: datetime.timedelta | None = None,
                          wait_all_ranks: bool = False) -> None:
        """A barrier that names the ranks that did not reach it in time (gloo's semantics)."""
        _dist_p2p.monitored_barrier(self, self.timeout if timeout is None else timeout,
                                    wait_all_ranks)

    # ----------------------------------------------------------------------- lifetime

    def new_group(self, ranks: Sequence[int], timeout: datetime.timedelta | None = None,
                  pg_options: Any = None, group_name: str = "", group_desc: str = "",
                  **_: Any) -> HoraProcessGroup | None:
        """``torch.distributed.new_group(ranks)`` with this group as the default: every rank
        registers a Hora process set with ``ranks``; members get its group, others None."""
        from hora.torch.distributed_backend import process_set_for

        ranks = sorted(int(r) for r in ranks)
        process_set = process_set_for(ranks, collective=True)
        me = self.global_ranks[self.rank()]
        if me not in ranks:
            return None
        return HoraProcessGroup(ranks.index(me), len(ranks), ranks, process_set,
                                group_name or f"set{process_set.process_set_id}",
                                timeout or self.timeout)

    def shutdown(self) -> None:
        """``destroy_process_group``: runs the group's ``on_shutdown`` (the default group stops
        Hora when its creation started it, so that a later ``init_process_group`` forms its
        world anew)."""
        on_shutdown, self._on_shutdown = self._on_shutdown, None
        if on_shutdown is not None:
            on_shutdown()

