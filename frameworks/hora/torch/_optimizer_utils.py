"""Pieces shared by the two DistributedOptimizer flavours: messages, parameter naming and
validation, gradient hooks, and construction of the wrapped optimizer class."""

from __future__ import annotations

import weakref
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Callable

import torch

TOO_MANY_PASSES = (
    "Gradients were computed more than backward_passes_per_step times before call to step(). "
    "Increase backward_passes_per_step to accumulate gradients locally."
)
ZERO_GRAD_RACE = (
    "optimizer.zero_grad() was called after loss.backward() but before optimizer.step() or "
    "optimizer.synchronize(). This is prohibited as it can cause a race condition."
)
STEP_AFTER_SYNC = (
    "optimizer.step() called without optimizer.skip_synchronize() context after "
    "optimizer.synchronize(). This can cause training slowdown. You may want to consider using "
    "optimizer.skip_synchronize() context if you use optimizer.synchronize() in your code."
)


def all_params(param_groups: list[dict]) -> list[torch.Tensor]:
    """Every parameter of the optimizer, in parameter-group order."""
    return [p for group in param_groups for p in group["params"]]


def parameter_names_of(
    param_groups: list[dict], named_parameters: Iterable | None
) -> dict[torch.Tensor, str]:
    """Map each parameter to its allreduce name, validating ``named_parameters``."""
    if named_parameters is None:
        return {
            p: f"allreduce.noname.{g}.{i}"
            for g, group in enumerate(param_groups)
            for i, p in enumerate(group["params"])
        }
    named = list(named_parameters)
    if any(not isinstance(item, tuple) for item in named):
        raise ValueError(
            "named_parameters should be a sequence of tuples (name, parameter), usually produced "
            "by model.named_parameters()."
        )
    seen: set[str] = set()
    duplicates: list[str] = []
    for name, _ in named:
        if name in seen and name not in duplicates:
            duplicates.append(name)
        seen.add(name)
    if duplicates:
        raise ValueError(
            "Parameter names in named_parameters must be unique. Found duplicates: "
            + ", ".join(str(d) for d in duplicates)
        )
    named_ids = {id(p) for _, p in named}
    unnamed = [id(p) for p in all_params(param_groups) if id(p) not in named_ids]
    if unnamed:
        raise ValueError(
            "named_parameters was specified, but one or more model parameters were not named. "
            "Python object ids: " + ", ".join(str(i) for i in unnamed)
        )
    return {p: name for name, p in sorted(named, key=lambda item: item[0])}


def check_groups(groups: Any) -> None:
    """Validate DistributedOptimizer's ``groups`` argument (Horovod's messages).

    Raises:
        ValueError: not a positive int nor a list of lists of distinct tensors.
    """
    if isinstance(groups, list):
        seen: set[int] = set()
        for group in groups:
            for p in group:
                if not isinstance(p, torch.Tensor):
                    raise ValueError("groups must consist of torch.Tensor.")  # noqa: TRY004
                if id(p) in seen:
                    raise ValueError("A parameter can only appear once in groups.")
                seen.add(id(p))
    elif isinstance(groups, bool) or not isinstance(groups, int) or groups <= 0:
        raise ValueError(
            "groups should be a non-negative integer or a list of list of torch.Tensor."
        )


def make_hook(owner: Any) -> Callable[[torch.Tensor], None]:
    """A post-accumulate-grad hook calling ``owner._grad_ready(param)`` while ``owner`` lives.

    The hook holds only a weak reference, so a discarded optimizer stops reacting to gradients.
    """
    ref = weakref.ref(owner)

    def hook(param: torch.Tensor) -> None:
        opt = ref()
        if opt is not None:
            opt._grad_ready(param)

    return hook


def initialise_wrapped(self: Any, optimizer: torch.optim.Optimizer) -> None:
    """Run the wrapped class's constructor on ``optimizer``'s parameter groups (shared dicts)."""
    init: Any = type(optimizer).__init__
    try:
        init(self, optimizer.param_groups)
    except TypeError:
        init(self, optimizer.param_groups, **optimizer.defaults)
    self.defaults = dict(optimizer.defaults)
    for param, state in optimizer.state.items():
        self.state[param] = state


# The mixins are combined with a torch optimizer class at run time; type checkers see them as one.
if TYPE_CHECKING:
    _OptimizerBase = torch.optim.Optimizer
else:
    _OptimizerBase = object


class HookedOptimizer(_OptimizerBase):
    """What both distributed optimizers share: the wrapped optimizer's state, parameter names,
    and the count of backward passes each parameter waits for before its reduction."""

    def _init_hooked(self, optimizer: torch.optim.Optimizer, named_parameters: Iterable | None,
                     compression: Any, backward_passes_per_step: int) -> None:
        initialise_wrapped(self, optimizer)
        self._compression = compression
        self._parameter_names = parameter_names_of(self.param_groups, named_parameters)
        self.backward_passes_per_step = backward_passes_per_step
        self._ordered = all_params(self.param_groups)
        self._delay = {p: backward_passes_per_step for p in self._ordered}
        self._handles: dict[torch.Tensor, tuple[Any, Any]] = {}

    def set_backward_passes_per_step(self, passes: int) -> None:
        """Change how many backward passes are accumulated locally before each reduction."""
        if isinstance(passes, bool) or not isinstance(passes, int) or passes < 1:
            raise ValueError(f"backward_passes_per_step must be a positive int, got {passes!r}")
        self.backward_passes_per_step = passes
        for p in self._delay:
            self._delay[p] = passes
