"""``DistributedOptimizer(..., step_in_backward=True)``: each parameter is updated inside backward.

The gradient hooks start the allreduces as usual. Whenever a hook fires, every reduction that has
finished meanwhile is applied at once: the reduced gradient goes through the functional form of
the wrapped optimizer (``hora.torch.functional_optim``) and is then freed (``p.grad = None``).
A callback queued on the autograd engine waits for the reductions still in flight when backward
ends and applies them, so ``optimizer.step()`` only has to deal with parameters that received no
gradient (reduced as zeros, as the standard path does). State lives in the wrapped optimizer's
``state``, in torch.optim's own format, so ``state_dict()`` / ``load_state_dict()`` keep working.

Defined interactions:
- ``backward_passes_per_step=k``: gradients accumulate locally; the update runs inside the k-th
  backward pass.
- ``groups``: a group's parameters are updated when the group's grouped allreduce finishes.
- ``synchronize()`` finishes every pending reduction and update (it is the whole step);
  ``step()`` inside ``skip_synchronize()`` then does nothing. Without any backward pass since the
  last step, ``synchronize()`` and ``step()`` do nothing.
- ``zero_grad()`` after backward is allowed and has nothing to clear.
- Hyper-parameters (``lr``...) are read when the update runs, i.e. during backward.
"""

from __future__ import annotations

import warnings
from typing import Any, Callable

import torch

from hora.torch._async_ops import Adasum, poll, synchronize
from hora.torch._optimizer_utils import STEP_AFTER_SYNC
from hora.torch.functional_optim import check_group, functional_step
from hora.torch.optimizer import _DistributedMixin

_ERRORS = (RuntimeError, ValueError, TypeError)


class _StepInBackwardMixin(_DistributedMixin):
    """Gradient allreduce whose completion applies the optimizer update to that parameter."""

    def __init__(self, optimizer: torch.optim.Optimizer, *args: Any) -> None:
        self._update = functional_step(type(optimizer))
        for group in optimizer.param_groups:
            check_group(type(optimizer), group)
        self._done: set[torch.Tensor] = set()
        self._done_groups: set[int] = set()
        self._callback_queued = False
        self._param_group_of: dict[torch.Tensor, dict] = {}
        super().__init__(optimizer, *args)

    # ------------------------------------------------------------------ inside backward

    def _grad_ready(self, p: torch.Tensor) -> None:
        super()._grad_ready(p)
        if not self._process_set.included():
            return
        if not self._callback_queued:
            torch.autograd.Variable._execution_engine.queue_callback(self._finish_backward)
            self._callback_queued = True
        self._apply_finished(block=False)

    def _finish_backward(self) -> None:
        self._callback_queued = False
        self._apply_finished(block=True)

    def _apply_finished(self, block: bool) -> None:
        """Apply every reduction that has finished (``block``: wait for all that started)."""
        first_error: BaseException | None = None
        for p, (handle, ctx) in list(self._handles.items()):
            if handle is None or not (block or poll(handle)):
                continue
            del self._handles[p]
            try:
                output = synchronize(handle)
            except _ERRORS as exc:
                first_error = first_error or exc
                continue
            if not output.is_sparse:
                output = self._compression.decompress(output, ctx)
            self._update_param(p, output)
        for index, (handle, ctxs) in list(self._group_handles.items()):
            if not (block or poll(handle)):
                continue
            del self._group_handles[index]
            self._done_groups.add(index)
            try:
                outputs = synchronize(handle)
            except _ERRORS as exc:
                first_error = first_error or exc
                continue
            for p, out, c in zip(self._groups[index], outputs, ctxs):
                self._update_param(p, self._compression.decompress(out, c))
        if first_error is not None:
            raise first_error

    def _group_of_param(self, p: torch.Tensor) -> dict:
        group = self._param_group_of.get(p)
        if group is None:  # first use, or a group added by add_param_group
            self._param_group_of = {q: g for g in self.param_groups for q in g["params"]}
            group = self._param_group_of[p]
        return group

    def _update_param(self, p: torch.Tensor, reduced: torch.Tensor) -> None:
        self._store_grad(p, reduced)
        grad = p.grad
        if grad is None:
            raise AssertionError(f"no gradient stored for {self._parameter_names.get(p)}")
        if grad.is_sparse:
            p.grad = None
            raise RuntimeError(
                f"step_in_backward=True does not support sparse gradients (parameter "
                f"{self._parameter_names.get(p)}); use the standard DistributedOptimizer"
            )
        known = self.state.get(p)
        state: dict = {} if known is None else known
        with torch.no_grad():
            self._update(p, grad, state, self._group_of_param(p))
        if known is None and state:  # torch.optim keeps no entry for a stateless update (SGD)
            self.state[p] = state
        p.grad = None
        self._done.add(p)

    # ------------------------------------------------------------------ public API

    def synchronize(self) -> None:
        """Finish every pending reduction and update; parameters that received no gradient in
        this step are reduced as zeros and updated, as the standard path does."""
        if not self._process_set.included():
            self._synchronized = True
            return
        if any(d < self.backward_passes_per_step for d in self._delay.values()):
            self._launch_unsubmitted(self._done, self._done_groups)
        try:
            self._apply_finished(block=True)
        finally:
            self._reset_pending()
        self._synchronized = True

    def _reset_pending(self) -> None:
        super()._reset_pending()
        self._done.clear()
        self._done_groups.clear()

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """Run ``closure`` (whose backward updates the parameters) and wait for the updates."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        if self._should_synchronize:
            if self._synchronized:
                warnings.warn(STEP_AFTER_SYNC, stacklevel=2)
            self.synchronize()
        self._synchronized = False
        return loss


def check_step_in_backward(optimizer: torch.optim.Optimizer, op: int) -> None:
    """Refuse what step_in_backward cannot do, before anything is built.

    Raises:
        ValueError: op=Adasum (its delta optimizer already steps locally).
        NotImplementedError: the optimizer has no functional form.
    """
    if op == Adasum:
        raise ValueError("step_in_backward=True does not support op=Adasum")
    functional_step(type(optimizer))
    for group in optimizer.param_groups:
        check_group(type(optimizer), group)
