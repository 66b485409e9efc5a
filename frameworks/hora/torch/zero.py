"""ZeroRedundancyOptimizer: optimizer state sharded across ranks (ZeRO stage 1), with
PyTorch's API and parameter partitioning, driven by Hora's gradient hooks.

Every rank owns a shard of the parameters (PyTorch's greedy partition: per parameter group,
largest parameter first, to the rank holding the fewest elements so far) and keeps optimizer
state only for it, in a local ``optimizer_class`` instance (``self.optim``). Gradients are grouped
into buckets in the order backward produces them (reverse parameter order, up to
``bucket_cap_mb``). When the last gradient of a bucket is ready its grouped allreduce (average)
starts; as soon as it has finished, the owner of each parameter of the bucket applies the update
(the functional form of SGD, Adam, AdamW, Adagrad: ``hora.torch.functional_optim``) while
backward goes on, the gradients are freed, and the bucket's updated parameters are allgathered
(one allgather per bucket: each rank sends the parameters it owns, flattened).
``step()`` waits for those allgathers. Other optimizer classes work too, without the overlap:
``step()`` runs the local optimizer on the shard after backward, then allgathers every bucket.

Unlike PyTorch's class, which expects gradients already averaged by DistributedDataParallel,
this one averages them itself (do not wrap it in ``DistributedOptimizer``).
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable
from typing import Any, Callable

import torch

from hora.common.basics import rank as global_rank
from hora.common.ops import auto_name
from hora.common.process_sets import ProcessSet, global_process_set
from hora.torch._async_ops import (
    Average,
    allgather_async,
    grouped_allreduce_async_,
    poll,
    synchronize,
)
from hora.torch.functional_optim import check_group, functional_step
from hora.torch.functions import broadcast_object

_ERRORS = (RuntimeError, ValueError, TypeError)

GRAD_TWICE = (
    "ZeroRedundancyOptimizer: a gradient was computed twice before step(); call step() after "
    "each backward pass (gradient accumulation is not supported)"
)
ZERO_GRAD_PENDING = (
    "ZeroRedundancyOptimizer.zero_grad() was called while gradient reductions started by "
    "backward are pending; call step() first"
)


def _state_bytes(state: dict) -> int:
    return sum(v.numel() * v.element_size() for v in state.values() if torch.is_tensor(v))


class ZeroRedundancyOptimizer(torch.optim.Optimizer):
    """Wrap ``optimizer_class`` so that each rank keeps state for its shard of the parameters.

    Args:
        params: parameters or parameter groups (all of the same dense type).
        optimizer_class: the torch.optim class to shard.
        process_set: ranks that share the work (Hora's counterpart of ``process_group``).
        parameters_as_bucket_view: must be False (not supported).
        overlap_with_ddp: must be False; the overlap with backward is always on.
        bucket_cap_mb: size of the gradient buckets reduced together.
        **defaults: ``optimizer_class``'s hyper-parameters.

    Raises:
        TypeError / ValueError: invalid ``params`` (PyTorch's checks).
        NotImplementedError: an option of PyTorch's class that Hora does not support.
    """

    def __init__(
        self,
        params: Iterable,
        optimizer_class: type[torch.optim.Optimizer],
        process_group: Any = None,
        parameters_as_bucket_view: bool = False,
        overlap_with_ddp: bool = False,
        *,
        process_set: ProcessSet = global_process_set,
        bucket_cap_mb: float = 25.0,
        **defaults: Any,
    ) -> None:
        if process_group is not None:
            raise NotImplementedError(
                "ZeroRedundancyOptimizer of hora.torch takes process_set=, not process_group="
            )
        if parameters_as_bucket_view:
            raise NotImplementedError("parameters_as_bucket_view=True is not supported")
        if overlap_with_ddp:
            raise NotImplementedError(
                "overlap_with_ddp=True is not needed: hora.torch.ZeroRedundancyOptimizer always "
                "overlaps its updates with backward through its own gradient hooks"
            )
        included = process_set.included()
        if included is None or process_set.ranks is None:
            raise ValueError("ZeroRedundancyOptimizer: the process set is not registered "
                             "(call hora.init() or hora.add_process_set() first)")
        if not included:
            raise ValueError("ZeroRedundancyOptimizer: this rank is not in the process set")
        params = self._verify_params(params)
        self._initialized = False
        super().__init__(params, defaults)
        self.process_set = process_set
        self._set_ranks: list[int] = list(process_set.ranks)
        self.world_size: int = len(self._set_ranks)
        self.rank: int = self._set_ranks.index(global_rank())
        # Named like unnamed ops: a counter per process set, so names agree across its ranks.
        self._prefix = auto_name("ZeroRedundancyOptimizer", process_set.process_set_id or 0)
        self._optim_class = optimizer_class
        self._bucket_bytes = max(1, int(bucket_cap_mb * 1024 * 1024))
        self._partition: list[list[dict]] = []
        self.optim: torch.optim.Optimizer = optimizer_class(
            self._partition_parameters()[self.rank], **defaults
        )
        self._sync_param_groups(self.optim.param_groups, self.param_groups)
        self._update = self._functional_form()
        self._all_state_dicts: list[dict] = []
        self._buckets: list[list[torch.Tensor]] = []
        self._bucket_of: dict[torch.Tensor, int] = {}
        self._hooks: list = []
        self._build_buckets(self._all_params())
        self._arrived: dict[int, set[int]] = {}
        self._reducing: dict[int, tuple[Any, list[torch.Tensor]]] = {}
        self._reduced: set[int] = set()
        self._shares: list[tuple[Any, Callable[[torch.Tensor], None]]] = []
        self._callback_queued = False
        self._initialized = True

    # ------------------------------------------------------------------ setup

    @staticmethod
    def _verify_params(params: Any) -> list:
        if isinstance(params, torch.Tensor):
            raise TypeError(
                "`params` argument should be an iterable of Tensors, but got "
                f"{torch.typename(params)}"
            )
        all_params = list(params)
        if not all_params:
            raise ValueError("ZeroRedundancyOptimizer got an empty parameter list")
        tensors: list = []
        for item in all_params:
            if not isinstance(item, dict):
                tensors.append(item)
            elif "params" not in item:
                raise ValueError("Each parameter group passed-in via `params` must have a "
                                 "'params' key mapping to the parameters in the group")
            else:
                group = item["params"]
                group = [group] if isinstance(group, torch.Tensor) else list(group)
                item["params"] = group
                tensors.extend(group)
        first = torch.typename(tensors[0])
        if tensors[0].is_sparse or any(torch.typename(p) != first for p in tensors[1:]):
            raise ValueError(
                "ZeroRedundancyOptimizer only supports using the same dense type for all "
                f"parameters but got {sorted({torch.typename(p) for p in tensors})}"
            )
        return all_params

    def _all_params(self) -> list[torch.Tensor]:
        return [p for group in self.param_groups for p in group["params"]]

    def _functional_form(self) -> Callable | None:
        try:
            update = functional_step(self._optim_class)
            for group in self.optim.param_groups:
                check_group(self._optim_class, group)
        except NotImplementedError:
            return None  # no per-parameter form: step() runs the local optimizer instead
        return update

    def _partition_parameters(self) -> list[list[dict]]:
        """Per rank, its parameter groups: PyTorch's greedy partition by element count."""
        if not self._partition:
            self._partition = [[] for _ in range(self.world_size)]
            sizes = [0] * self.world_size
            for group in self.param_groups:
                per_rank: list[list[torch.Tensor]] = [[] for _ in range(self.world_size)]
                for p in sorted(group["params"], key=lambda t: t.numel(), reverse=True):
                    rank = sizes.index(min(sizes))
                    per_rank[rank].append(p)
                    sizes[rank] += p.numel()
                for rank, shard in enumerate(per_rank):
                    rank_group = dict(group)
                    rank_group["params"] = shard
                    self._partition[rank].append(rank_group)
        return self._partition

    def _owner(self) -> dict[torch.Tensor, int]:
        return {p: r for r, groups in enumerate(self._partition_parameters())
                for g in groups for p in g["params"]}

    def _build_buckets(self, params: list[torch.Tensor]) -> None:
        """Bucket the trainable ``params`` in the order backward produces their gradients."""
        owner_ref = weakref.ref(self)

        def hook(param: torch.Tensor) -> None:
            opt = owner_ref()
            if opt is not None:
                opt._grad_ready(param)

        bucket: list[torch.Tensor] = []
        filled = 0
        for p in reversed([p for p in params if p.requires_grad]):
            nbytes = p.numel() * p.element_size()
            if bucket and filled + nbytes > self._bucket_bytes:
                self._add_bucket(bucket)
                bucket, filled = [], 0
            bucket.append(p)
            filled += nbytes
            self._hooks.append(p.register_post_accumulate_grad_hook(hook))
        if bucket:
            self._add_bucket(bucket)
        self._owner_of = self._owner()
        self._index_of = {p: i for i, p in enumerate(self._all_params())}
        self._local_group_of = {p: g for g in self.optim.param_groups for p in g["params"]}

    def _add_bucket(self, bucket: list[torch.Tensor]) -> None:
        for p in bucket:
            self._bucket_of[p] = len(self._buckets)
        self._buckets.append(bucket)

    # ------------------------------------------------------------------ inside backward

    def _grad_ready(self, p: torch.Tensor) -> None:
        index = self._bucket_of[p]
        arrived = self._arrived.setdefault(index, set())
        if id(p) in arrived or index in self._reducing or index in self._reduced:
            raise AssertionError(GRAD_TWICE)
        if p.grad is not None and p.grad.requires_grad:
            raise AssertionError("gradients that require grad (create_graph=True) cannot be "
                                 "reduced by ZeroRedundancyOptimizer")
        if not self._callback_queued:
            self._sync_param_groups(self.param_groups, self.optim.param_groups)
            torch.autograd.Variable._execution_engine.queue_callback(self._finish_backward)
            self._callback_queued = True
        arrived.add(id(p))
        if len(arrived) == len(self._buckets[index]):
            self._launch(index)
        self._apply_finished(block=False)

    def _finish_backward(self) -> None:
        self._callback_queued = False
        self._apply_finished(block=True)

    def _launch(self, index: int) -> None:
        grads = []
        for p in self._buckets[index]:
            if p.grad is None:  # no gradient this step: reduced as zeros, as DistributedOptimizer
                p.grad = torch.zeros_like(p, memory_format=torch.contiguous_format)
            elif not p.grad.is_contiguous():
                p.grad = p.grad.contiguous()
            grads.append(p.grad)
        handle = grouped_allreduce_async_(
            grads, name=f"{self._prefix}.bucket.{index}", op=Average,
            process_set=self.process_set,
        )
        self._reducing[index] = (handle, grads)

    def _apply_finished(self, block: bool) -> None:
        """Update (or keep, without a functional form) the parameters of every reduced bucket."""
        first_error: BaseException | None = None
        for index, (handle, grads) in list(self._reducing.items()):
            if not (block or poll(handle)):
                continue
            del self._reducing[index]
            self._reduced.add(index)
            try:
                synchronize(handle)
            except _ERRORS as exc:
                first_error = first_error or exc
                continue
            for p in self._buckets[index]:
                if self._owner_of[p] != self.rank:
                    p.grad = None
                elif self._update is not None:
                    self._step_param(p)
            if self._update is not None:
                self._share(index)
        if first_error is not None:
            raise first_error

    def _step_param(self, p: torch.Tensor) -> None:
        update, grad = self._update, p.grad
        if update is None or grad is None:
            raise AssertionError("a reduced gradient stepped without a functional form")
        known = self.optim.state.get(p)
        state: dict = {} if known is None else known
        with torch.no_grad():
            update(p, grad, state, self._local_group_of[p])
        if known is None and state:  # torch.optim keeps no entry for a stateless update
            self.optim.state[p] = state
        p.grad = None

    def _share(self, index: int) -> None:
        """Start the allgather that gives every rank the updated parameters of bucket ``index``:
        each rank sends the parameters it owns, flattened in bucket order, and copies the
        others' segments (set-rank order) into their parameters when it finishes. (Every
        parameter has one dtype: the constructor checks it, as PyTorch's class does.)"""
        owned: list[list[torch.Tensor]] = [[] for _ in range(self.world_size)]
        for p in self._buckets[index]:
            owned[self._owner_of[p]].append(p)
        mine = owned[self.rank]
        sent = (torch.cat([p.detach().reshape(-1) for p in mine]) if mine
                else self._buckets[index][0].detach().new_empty(0))
        handle = allgather_async(sent, name=f"{self._prefix}.share.{index}",
                                 process_set=self.process_set)

        def finish(flat: torch.Tensor) -> None:
            offset = 0
            with torch.no_grad():
                for rank, params in enumerate(owned):
                    for p in params:
                        if rank != self.rank:
                            p.copy_(flat[offset:offset + p.numel()].view_as(p))
                        offset += p.numel()

        self._shares.append((handle, finish))

    # ------------------------------------------------------------------ public API

    def step(self, closure: Callable[[], Any] | None = None, **kwargs: Any) -> Any:
        """Finish the reductions, updates and broadcasts started by backward.

        Buckets some of whose parameters got no gradient are reduced now (zeros in their place).
        Without a backward pass since the last step nothing happens.
        """
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        if not any(self._arrived.values()) and not self._reducing and not self._reduced:
            return loss
        first_error: BaseException | None = None
        try:
            for index in range(len(self._buckets)):
                if index not in self._reducing and index not in self._reduced:
                    self._launch(index)
            self._sync_param_groups(self.param_groups, self.optim.param_groups)
            self._apply_finished(block=True)
            if self._update is None:
                self.optim.step(**kwargs)
                for p in self._local_group_of:
                    p.grad = None
                for index in range(len(self._buckets)):
                    self._share(index)
        except _ERRORS as exc:
            first_error = exc
        for handle, finish in self._shares:
            try:
                finish(synchronize(handle))
            except _ERRORS as exc:
                first_error = first_error or exc
        self._shares = []
        self._arrived.clear()
        self._reduced.clear()
        self._sync_param_groups(self.optim.param_groups, self.param_groups)
        if first_error is not None:
            raise first_error
        return loss

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Clear the gradients; forbidden while reductions started by backward are pending."""
        if self._reducing:
            raise AssertionError(ZERO_GRAD_PENDING)
        super().zero_grad(set_to_none)

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """Add a parameter group on every rank (call it on all ranks); its parameters are
        partitioned after the existing ones, which keep their owners."""
        if self._initialized and (self._reducing or any(self._arrived.values())):
            raise RuntimeError("add_param_group() called between backward and step()")
        super().add_param_group(param_group)
        if not self._initialized:
            return
        self._partition = []
        shard = self._partition_parameters()[self.rank]
        self.optim.add_param_group(shard[-1])
        self._sync_param_groups(self.optim.param_groups, self.param_groups)
        if self._update is not None:
            check_group(self._optim_class, self.optim.param_groups[-1])
        self._build_buckets(list(self.param_groups[-1]["params"]))

    def state_bytes(self) -> int:
        """Bytes of optimizer-state tensors held by this rank (its shard only)."""
        return sum(_state_bytes(s) for s in self.optim.state.values())

    def consolidate_state_dict(self, to: int = 0) -> None:
        """Collect every rank's shard of the state on rank ``to`` (call it on all ranks)."""
        self._sync_param_groups(self.param_groups, self.optim.param_groups)
        local = self.optim.state_dict()
        self._all_state_dicts = []
        for rank in range(self.world_size):
            root = self._set_ranks[rank]
            sent = local if rank == self.rank else None
            received = broadcast_object(sent, root_rank=root,
                                        name=f"{self._prefix}.consolidate.{rank}",
                                        process_set=self.process_set)
            if self.rank == to:
                self._all_state_dicts.append(received)

    def state_dict(self) -> dict[str, Any]:
        """The whole optimizer state as a plain ``optimizer_class`` would give it, as last
        consolidated on this rank.

        Raises:
            RuntimeError: ``consolidate_state_dict(to=<this rank>)`` was not called.
        """
        if not self._all_state_dicts:
            raise RuntimeError(
                "Optimizer state has not been consolidated on this rank. Please call "
                f"`consolidate_state_dict(to={self.rank})` on all ranks beforehand if you meant "
                "to save the global state."
            )
        state_dict = super().state_dict()
        global_index = {p: i for i, p in enumerate(self._all_params())}
        for rank, local in enumerate(self._all_state_dicts):
            for local_group, global_group in zip(local["param_groups"],
                                                 self._partition_parameters()[rank]):
                for local_i, p in zip(local_group["params"], global_group["params"]):
                    if local_i in local["state"]:
                        state_dict["state"][global_index[p]] = local["state"][local_i]
        state_dict["state"] = dict(sorted(state_dict["state"].items()))
        return state_dict

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load a whole state (from ``state_dict()`` or a plain optimizer); each rank keeps the
        state of its own shard."""
        params = self._all_params()
        super().load_state_dict({"state": {}, "param_groups": state_dict["param_groups"]})
        self._sync_param_groups(state_dict["param_groups"], self.param_groups)
        local_index = {p: i for i, p in enumerate(
            p for g in self.optim.param_groups for p in g["params"])}
        local_state = {local_index[params[i]]: value for i, value in state_dict["state"].items()
                       if params[i] in local_index}
        local_groups = []
        for global_group, local_group in zip(self.param_groups, self.optim.param_groups):
            group = {k: v for k, v in global_group.items() if k != "params"}
            group["params"] = [local_index[p] for p in local_group["params"]]
            local_groups.append(group)
        self.optim.load_state_dict({"state": local_state, "param_groups": local_groups})
        self._local_group_of = {p: g for g in self.optim.param_groups for p in g["params"]}

    @staticmethod
    def _sync_param_groups(src: list[dict], dst: list[dict]) -> None:
        for s, d in zip(src, dst):
            for key, value in s.items():
                if key != "params":
                    d[key] = value
