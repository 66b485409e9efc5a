"""DistributedOptimizer with ``op=Adasum``: a delta optimizer.

Each parameter takes a local step as soon as its gradient is ready (inside the gradient hook, so
work overlaps the backward pass); the change is combined across ranks with the Adasum operator and
applied in ``step()``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any, Callable

import torch

from hora.torch._async_ops import Adasum, allreduce_async_, synchronize
from hora.torch._optimizer_utils import (
    TOO_MANY_PASSES,
    ZERO_GRAD_RACE,
    HookedOptimizer,
    make_hook,
)
from hora.torch.compression import Compressor


class _DistributedAdasumMixin(HookedOptimizer):
    """Delta optimizer: a local step per parameter, then Adasum of the parameter changes."""

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        named_parameters: Iterable | None,
        compression: type[Compressor],
        backward_passes_per_step: int,
    ) -> None:
        self._init_hooked(optimizer, named_parameters, compression, backward_passes_per_step)
        self._start = {p: torch.zeros_like(p, requires_grad=False) for p in self._ordered}
        self._hook_handles = []
        hook = make_hook(self)
        for p in self._ordered:
            if p.requires_grad:
                self._hook_handles.append(p.register_post_accumulate_grad_hook(hook))

    def _grad_ready(self, p: torch.Tensor) -> None:
        if p not in self._delay:
            return
        if self._delay[p] <= 0:
            raise AssertionError(TOO_MANY_PASSES)
        self._delay[p] -= 1
        self._handles[p] = self._launch(p) if self._delay[p] == 0 else (None, None)

    def _launch(self, p: torch.Tensor) -> tuple[Any, Any]:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        stashed = [group["params"] for group in self.param_groups]
        for group in self.param_groups:
            group["params"] = [p] if any(p is q for q in group["params"]) else []
        try:
            start = self._start[p]
            start.copy_(p.detach())
            super().step()
        finally:
            for group, params in zip(self.param_groups, stashed):
                group["params"] = params
        with torch.no_grad():
            p.sub_(start)
        tensor, ctx = self._compression.compress(p.detach())
        if not tensor.is_contiguous():
            tensor = tensor.contiguous()
        return allreduce_async_(tensor, name=self._parameter_names.get(p), op=Adasum), ctx

    def synchronize(self) -> None:
        """No-op: with Adasum the reduction happens inside ``step()``."""

    @contextmanager
    def skip_synchronize(self) -> Iterator[None]:
        """Not available with Adasum."""
        raise AssertionError(
            "Skipping synchronization is not supported when using Adasum optimizer."
        )
        yield  # pragma: no cover

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """Finish the Adasum of every parameter's local change and apply it."""
        loss = closure() if closure is not None else None
        for p in self._ordered:
            entry = self._handles.get(p)
            if (entry is None and p.requires_grad) or (entry is not None and entry[0] is None):
                self._handles[p] = self._launch(p)
        first_error: BaseException | None = None
        for p, (handle, ctx) in list(self._handles.items()):
            try:
                delta = self._compression.decompress(synchronize(handle), ctx)
            except (RuntimeError, ValueError, TypeError) as exc:
                if first_error is None:
                    first_error = exc
                continue
            with torch.no_grad():
                start = self._start[p]
                start.add_(delta.to(start.dtype))
                p.copy_(start)
        self._handles.clear()
        for p in self._delay:
            self._delay[p] = self.backward_passes_per_step
        if first_error is not None:
            raise first_error
        return loss

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Clear the gradients; forbidden while reductions started by backward are pending."""
        if self._handles:
            raise AssertionError(ZERO_GRAD_RACE)
        super().zero_grad(set_to_none)

    def load_state_dict(self, state_dict: dict) -> None:
        """Load optimizer state; pending reductions are finished and their updates discarded."""
        for p, (handle, _) in list(self._handles.items()):
            if handle is None:
                continue
            try:
                synchronize(handle)
            except (RuntimeError, ValueError, TypeError):
                pass
            with torch.no_grad():
                p.copy_(self._start[p])
        self._handles.clear()
        for p in self._delay:
            self._delay[p] = self.backward_passes_per_step
        super().load_state_dict(state_dict)

    def _local_step(self, closure: Callable[[], Any] | None = None) -> Any:
        """The wrapped optimizer's own update, without any communication."""
        return super().step(closure)
