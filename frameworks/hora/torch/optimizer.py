"""DistributedOptimizer: wraps a torch optimizer so that gradients are averaged across ranks.

A hook on every parameter starts the allreduce of its gradient as soon as autograd has finished
accumulating it, so communication overlaps the rest of the backward pass. ``step()`` (or an explicit
``synchronize()``) waits for the reductions and then runs the wrapped optimizer's update.

With ``op=Adasum`` on more than one rank the optimizer works on deltas instead: each parameter
takes a local step as soon as its gradient is ready, and the change is combined across ranks with
the Adasum operator.
"""

from __future__ import annotations

import warnings
from collections.abc import Container, Iterable, Iterator
from contextlib import contextmanager
from typing import Any, Callable

import torch

from hora.common import shared_arrays
from hora.common.basics import size
from hora.common.ops import split_evenly
from hora.common.process_sets import ProcessSet, global_process_set
from hora.torch._adasum_optimizer import _DistributedAdasumMixin
from hora.torch._async_ops import (
    Adasum,
    Average,
    allreduce_async_,
    grouped_allreduce_async_,
    sparse_allreduce_async,
    synchronize,
)
from hora.torch._hook_runner import HookRunner, check_comm_hook
from hora.torch._optimizer_utils import (
    STEP_AFTER_SYNC,
    TOO_MANY_PASSES,
    ZERO_GRAD_RACE,
    HookedOptimizer,
    check_groups,
    make_hook,
)
from hora.torch._shared_grads import SharedGradients
from hora.torch.compression import Compression, Compressor


class _DistributedMixin(HookedOptimizer):
    """Gradient allreduce on top of a torch optimizer class (combined with it dynamically)."""

    # Set by DistributedOptimizer(comm_hook=...): buckets then go through the hook.
    _comm_runner: HookRunner | None = None
    # Set by DistributedOptimizer(shared_gradients=True) where the shared arena exists.
    _shared: SharedGradients | None = None

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        named_parameters: Iterable | None,
        compression: type[Compressor],
        backward_passes_per_step: int,
        op: int,
        gradient_predivide_factor: float,
        groups: Any,
        sparse_as_dense: bool,
        process_set: ProcessSet,
    ) -> None:
        self._init_hooked(optimizer, named_parameters, compression, backward_passes_per_step)
        self._op = op
        self._predivide = float(gradient_predivide_factor)
        self._sparse_as_dense = sparse_as_dense
        self._process_set = process_set
        self._group_handles: dict[int, tuple[Any, Any]] = {}
        self._synchronized = False
        self._should_synchronize = True
        self._hook_handles: list = []
        self._groups: list[tuple[torch.Tensor, ...]] = []
        self._group_of: dict[torch.Tensor, int] = {}
        self._arrived: dict[int, set[int]] = {}
        self._launch_order: list[torch.Tensor] = []  # this step's, for shared gradients
        if groups is not None:
            self._build_groups(groups)
        self._register_hooks()

    # ------------------------------------------------------------------ setup

    def _build_groups(self, groups: Any) -> None:
        trainable = [p for p in self._ordered if p.requires_grad]
        if isinstance(groups, list):
            chunks = [[p for p in group if p.requires_grad] for group in groups]
        else:
            chunks = split_evenly(trainable, int(groups))
        for chunk in chunks:
            if not chunk:
                continue
            index = len(self._groups)
            self._groups.append(tuple(chunk))
            self._arrived[index] = set()
            for p in chunk:
                self._group_of[p] = index

    def _register_hooks(self) -> None:
        hook = make_hook(self)
        for p in self._ordered:
            if p.requires_grad:
                self._hook_handles.append(p.register_post_accumulate_grad_hook(hook))

    def _remove_hooks(self) -> None:
        for h in self._hook_handles:
            h.remove()
        self._hook_handles = []

    # ------------------------------------------------------------------ hooks

    def _grad_ready(self, p: torch.Tensor) -> None:
        if p not in self._delay or not self._process_set.included():
            return
        if self._delay[p] <= 0:
            raise AssertionError(TOO_MANY_PASSES)
        if p.grad is not None and p.grad.requires_grad:
            raise AssertionError(
                "gradients that require grad (create_graph=True) cannot be "
                "allreduced by DistributedOptimizer"
            )
        self._delay[p] -= 1
        if self._delay[p] > 0:
            self._handles.setdefault(p, (None, None))
            return
        index = self._group_of.get(p)
        if index is None:
            self._handles[p] = self._launch(p)
            return
        self._handles.setdefault(p, (None, None))
        arrived = self._arrived[index]
        arrived.add(id(p))
        if len(arrived) == len(self._groups[index]):
            self._launch_group_now(index)

    def _scales(self) -> tuple[float, float]:
        if self._op == Average:
            return 1.0 / self._predivide, self._predivide
        return 1.0, 1.0

    def _prepare(self, p: torch.Tensor, force_dense: bool) -> torch.Tensor:
        if p.grad is None:
            p.grad = torch.zeros_like(p, memory_format=torch.preserve_format)
        grad = p.grad
        if grad.is_sparse and (force_dense or self._sparse_as_dense):
            grad = grad.to_dense()
        return grad

    def _note_launch(self, p: torch.Tensor) -> None:
        if self._shared is not None:
            self._launch_order.append(p)

    def _launch(self, p: torch.Tensor) -> tuple[Any, Any]:
        self._note_launch(p)
        if self._comm_runner is not None:
            return self._comm_runner.start([p], [self._prepare(p, True)], single=True), None
        grad = self._prepare(p, force_dense=False)
        name = self._parameter_names.get(p)
        if grad.is_sparse:
            return sparse_allreduce_async(
                grad, name=name, op=self._op, process_set=self._process_set
            ), None
        tensor, ctx = self._compression.compress(grad)
        if not tensor.is_contiguous():
            tensor = tensor.contiguous()
        pre, post = self._scales()
        handle = allreduce_async_(
            tensor,
            name=name,
            op=self._op,
            prescale_factor=pre,
            postscale_factor=post,
            process_set=self._process_set,
        )
        return handle, ctx

    def _launch_group_now(self, index: int) -> None:
        group = self._groups[index]
        tensors, ctxs = [], []
        for p in group:
            self._note_launch(p)
            tensor, ctx = self._compression.compress(self._prepare(p, force_dense=True))
            tensors.append(tensor if tensor.is_contiguous() else tensor.contiguous())
            ctxs.append(ctx)
        pre, post = self._scales()
        if self._comm_runner is not None:
            handle = self._comm_runner.start(group, tensors, single=False)
        else:
            handle = grouped_allreduce_async_(
                tensors,
                name=self._parameter_names.get(group[0]),
                op=self._op,
                prescale_factor=pre,
                postscale_factor=post,
                process_set=self._process_set,
            )
        for p in group:
            self._handles.pop(p, None)
        self._group_handles[index] = (handle, ctxs)
        self._arrived[index] = set()

    def _launch_unsubmitted(self, done: Container[torch.Tensor] = frozenset(),
                            done_groups: Container[int] = frozenset()) -> None:
        """Start every reduction that backward did not start, except those of ``done``
        parameters and ``done_groups`` groups. A parameter that requires a gradient but got none
        this step is reduced as zeros, so that every rank submits the same tensors."""
        for p in self._ordered:
            if p in self._group_of or p in done:
                continue
            entry = self._handles.get(p)
            if entry is None and not p.requires_grad:
                continue
            if entry is None or entry[0] is None:
                self._handles[p] = self._launch(p)
        for index, group in enumerate(self._groups):
            if index in self._group_handles or index in done_groups:
                continue
            if any(p.requires_grad or p in self._handles for p in group):
                self._launch_group_now(index)

    # ------------------------------------------------------------------ public API

    def synchronize(self) -> None:
        """Finish the allreduce of every gradient, starting those whose hooks did not fire.

        Parameters that received no gradient this step (unused layers) are reduced as zeros so
        that every rank submits the same tensors. Afterwards ``p.grad`` holds the reduced values.
        """
        if not self._process_set.included():
            self._synchronized = True
            return
        self._launch_unsubmitted()
        if self._comm_runner is not None:
            self._comm_runner.drive()
        first_error: BaseException | None = None
        for p, (handle, ctx) in list(self._handles.items()):
            try:
                output = synchronize(handle)
            except (RuntimeError, ValueError, TypeError) as exc:
                if first_error is None:
                    first_error = exc
                continue
            if not output.is_sparse:
                output = self._compression.decompress(output, ctx)
            self._store_grad(p, output)
        for index, (handle, ctxs) in list(self._group_handles.items()):
            try:
                outputs = synchronize(handle)
            except (RuntimeError, ValueError, TypeError) as exc:
                if first_error is None:
                    first_error = exc
                continue
            for p, out, c in zip(self._groups[index], outputs, ctxs):
                self._store_grad(p, self._compression.decompress(out, c))
        launched = self._launch_order
        self._reset_pending()
        if first_error is not None:
            raise first_error
        if self._shared is not None:
            self._shared.after_step(launched)
        self._synchronized = True

    @staticmethod
    def _store_grad(p: torch.Tensor, value: torch.Tensor) -> None:
        grad = p.grad
        if grad is value:
            return
        if grad is not None and grad.is_sparse and not value.is_sparse:
            # sparse_as_dense: the optimizer (SparseAdam, say) expects a sparse gradient back.
            p.grad = value.to(p.dtype).to_sparse()
        elif grad is None or grad.is_sparse or value.is_sparse or grad.dtype != value.dtype:
            p.grad = value.to(p.dtype) if not value.is_sparse else value
        else:
            grad.set_(value.reshape(grad.shape))  # type: ignore[call-overload]

    def _reset_pending(self) -> None:
        self._launch_order = []
        self._handles.clear()
        self._group_handles.clear()
        for p in self._delay:
            self._delay[p] = self.backward_passes_per_step
        for index in self._arrived:
            self._arrived[index] = set()

    @contextmanager
    def skip_synchronize(self) -> Iterator[None]:
        """Within this context ``step()`` does not synchronize (call ``synchronize()`` first)."""
        self._should_synchronize = False
        try:
            yield
        finally:
            self._should_synchronize = True

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """Synchronize the gradients (unless inside ``skip_synchronize()``) and update."""
        if self._should_synchronize:
            if self._synchronized:
                warnings.warn(STEP_AFTER_SYNC, stacklevel=2)
            self.synchronize()
        self._synchronized = False
        return super().step(closure)

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Clear the gradients; forbidden while allreduces started by backward are pending."""
        if self._handles or self._group_handles:
            raise AssertionError(ZERO_GRAD_RACE)
        super().zero_grad(set_to_none)

    def _drain(self) -> None:
        """Wait for pending reductions without using their results, then forget them."""
        pending = [h for h, _ in self._handles.values() if h is not None]
        pending += [h for h, _ in self._group_handles.values()]
        if self._comm_runner is not None:
            self._comm_runner.drive()
        for handle in pending:
            try:
                synchronize(handle)
            except (RuntimeError, ValueError, TypeError):
                pass
        self._reset_pending()

    def load_state_dict(self, state_dict: dict) -> None:
        """Load optimizer state; pending gradient reductions are finished and discarded."""
        self._drain()
        self._synchronized = False
        self._should_synchronize = True
        super().load_state_dict(state_dict)

    def _local_step(self, closure: Callable[[], Any] | None = None) -> Any:
        """The wrapped optimizer's own update, without any communication."""
        return super().step(closure)


def _combine(mixin: type, optimizer: torch.optim.Optimizer) -> type:
    base = type(optimizer)
    return type(base.__name__, (mixin, base), {"__module__": __name__})


def DistributedOptimizer(
    optimizer: torch.optim.Optimizer,
    named_parameters: Iterable | None = None,
    compression: type[Compressor] = Compression.none,
    backward_passes_per_step: int = 1,
    op: int = Average,
    gradient_predivide_factor: float = 1.0,
    num_groups: int = 0,
    groups: int | list[list[torch.Tensor]] | None = None,
    sparse_as_dense: bool = False,
    process_set: ProcessSet = global_process_set,
    comm_hook: Callable[[Any], Any] | None = None,
    step_in_backward: bool = False,
    shared_gradients: bool = True,
) -> torch.optim.Optimizer:
    """Wrap ``optimizer`` so that ``step()`` applies gradients averaged over all ranks.

    The result is an instance of a subclass of ``optimizer``'s class built for it, sharing its
    parameter groups and state.

    Args:
        optimizer: the optimizer to wrap.
        named_parameters: ``model.named_parameters()``; names the allreduces (recommended).
        compression: ``Compression.none`` / ``.fp16`` / ``.bf16`` for the gradients on the wire.
        backward_passes_per_step: backward passes accumulated locally before each allreduce.
        op: Average (default), Sum or Adasum (delta optimizer on more than one rank).
        gradient_predivide_factor: divide gradients by this before the sum and multiply after
            (Average only); the result is still the average.
        num_groups: deprecated spelling of an integer ``groups``.
        groups: an int (split parameters into that many fused groups) or a list of lists of
            parameters reduced together.
        sparse_as_dense: reduce sparse gradients as dense tensors.
        process_set: ranks that take part.
        comm_hook: ``hook(bucket) -> future`` reducing each bucket (one parameter, or one of
            ``groups``) instead of the plain allreduce; see ``hora.torch.hooks``.
        step_in_backward: update each parameter inside backward as soon as its reduced gradient
            is ready, then free the gradient; ``step()`` only waits (SGD, Adam, AdamW, Adagrad;
            see ``hora.torch._step_in_backward``).
        shared_gradients: after the first step, keep the gradients in the shared arena, where
            the other ranks read them in place (``hora.torch._shared_grads``). Only where it
            applies:
            every rank on this host over shared memory, the global process set, no compression,
            no ``comm_hook``, not ``step_in_backward``. ``False`` or ``HORA_SHARED_GRADIENTS=0``
            turns it off.

    Raises:
        ValueError: invalid names (not tuples, duplicates, unnamed parameters), invalid groups,
            a predivide factor with an op other than Average, a ``comm_hook`` with
            compression, a predivide factor or an op other than Average, or a ``comm_hook``
            together with ``step_in_backward``.
        TypeError: a ``comm_hook`` that is not callable.
        NotImplementedError: ``step_in_backward`` with an optimizer that has no functional form.
    """
    if gradient_predivide_factor != 1.0 and op != Average:
        raise ValueError("gradient_predivide_factor not supported with op != Average")
    if gradient_predivide_factor <= 0:
        raise ValueError("gradient_predivide_factor must be positive")
    if (
        isinstance(backward_passes_per_step, bool)
        or not isinstance(backward_passes_per_step, int)
        or backward_passes_per_step < 1
    ):
        raise ValueError(
            f"backward_passes_per_step must be a positive int, got {backward_passes_per_step!r}"
        )
    if num_groups != 0:
        warnings.warn(
            "Parameter `num_groups` has been replaced by `groups` and will be removed in v0.23.0.",
            DeprecationWarning,
            stacklevel=2,
        )
        if groups is None:
            groups = num_groups
    if groups is not None:
        check_groups(groups)
    if comm_hook is not None:
        check_comm_hook(comm_hook, compression, op, gradient_predivide_factor)
        if step_in_backward:
            raise ValueError("comm_hook and step_in_backward=True cannot be combined: the "
                             "in-backward update reads the plain allreduce's result")
    if step_in_backward:
        return _step_in_backward_optimizer(
            optimizer, named_parameters, compression, backward_passes_per_step, op,
            gradient_predivide_factor, groups, sparse_as_dense, process_set,
        )
    if op != Adasum or size() == 1:
        cls = _combine(_DistributedMixin, optimizer)
        wrapped = cls(
            optimizer,
            named_parameters,
            compression,
            backward_passes_per_step,
            op,
            gradient_predivide_factor,
            groups,
            sparse_as_dense,
            process_set,
        )
        if comm_hook is not None:
            wrapped._comm_runner = HookRunner(comm_hook, wrapped._ordered,
                                              wrapped._parameter_names, process_set)
        elif shared_gradients and _shares_gradients(compression, process_set):
            wrapped._shared = SharedGradients()
        return wrapped
    if process_set is not global_process_set and process_set.process_set_id != 0:
        raise NotImplementedError("Adasum does not support non-global process sets yet.")
    cls = _combine(_DistributedAdasumMixin, optimizer)
    return cls(optimizer, named_parameters, compression, backward_passes_per_step)


def _shares_gradients(compression: type[Compressor], process_set: ProcessSet) -> bool:
    """Whether gradients can live in the shared arena: the engine reads them in place only in
    allreduces of the whole job, and only the uncompressed gradient itself is what it reduces."""
    return (compression is Compression.none and process_set.process_set_id == 0 and size() > 1
            and shared_arrays.enabled())


def _step_in_backward_optimizer(optimizer: torch.optim.Optimizer, *args: Any) -> Any:
    # Imported here: the step-in-backward mixin builds on _DistributedMixin of this module.
    from hora.torch._step_in_backward import _StepInBackwardMixin, check_step_in_backward

    check_step_in_backward(optimizer, args[3])
    return _combine(_StepInBackwardMixin, optimizer)(optimizer, *args)
