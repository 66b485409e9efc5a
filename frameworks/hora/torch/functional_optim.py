"""Functional optimizer steps: the update of one parameter at a time, with explicit state.

``functional_step(optimizer_class)`` returns a function ``step(param, grad, state, group)`` that
applies one update of ``optimizer_class`` to ``param`` in place, reading and writing the
per-parameter ``state`` dict (the same keys and tensors ``torch.optim`` keeps in
``optimizer.state[param]``) and the hyper-parameters of ``group`` (a parameter-group dict). The
result is bit-for-bit the update that ``torch.optim``'s default single-tensor path computes, so the
same state can move between the two forms (``state_dict`` / ``load_state_dict`` keep working).

Supported: ``SGD`` (momentum, dampening, nesterov, weight_decay, maximize), ``Adam`` and
``AdamW`` (amsgrad, maximize, weight_decay, decoupled or not), ``Adagrad`` (lr_decay,
weight_decay, initial_accumulator_value, maximize), on dense real or complex parameters.
Other optimizer classes, and the foreach / fused / capturable / differentiable variants, raise
``NotImplementedError`` naming what is not supported.

``FunctionalOptimizer`` wraps one of these with its own ``state`` and ``defaults``.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

StepFn = Callable[[torch.Tensor, torch.Tensor, dict, dict], None]

_UNSUPPORTED_FLAGS = ("foreach", "fused", "capturable", "differentiable")


def _scalar(value: Any) -> Any:
    """A hyper-parameter as torch.optim uses it: a number, or a tensor hyper-parameter as a
    0-dimensional tensor (the arithmetic then runs in the tensor's dtype, as in torch.optim)."""
    if isinstance(value, torch.Tensor):
        if value.requires_grad:
            raise NotImplementedError("functional optimizers do not support differentiable "
                                      "hyper-parameters (tensors that require grad)")
        return value.squeeze() if value.dim() != 0 else value
    return value


def _real(t: torch.Tensor) -> torch.Tensor:
    """Complex tensors are updated through their real view, as torch.optim does."""
    return torch.view_as_real(t) if torch.is_complex(t) else t


def _check_dense(name: str, grad: torch.Tensor) -> None:
    if grad.is_sparse:
        raise RuntimeError(f"functional {name} does not support sparse gradients")


def sgd_step(param: torch.Tensor, grad: torch.Tensor, state: dict, group: dict) -> None:
    """One ``torch.optim.SGD`` update of ``param`` (state key ``momentum_buffer``)."""
    _check_dense("SGD", grad)
    lr = _scalar(group["lr"])
    weight_decay = group["weight_decay"]
    momentum = group["momentum"]
    d_p = -grad if group.get("maximize", False) else grad
    if weight_decay != 0:
        d_p = d_p.add(param, alpha=weight_decay)
    if momentum != 0:
        buf = state.get("momentum_buffer")
        if buf is None:
            buf = d_p.detach().clone()
            state["momentum_buffer"] = buf
        else:
            buf.mul_(momentum).add_(d_p, alpha=1 - group["dampening"])
        d_p = d_p.add(buf, alpha=momentum) if group["nesterov"] else buf
    param.add_(d_p, alpha=-lr)


def adam_step(param: torch.Tensor, grad: torch.Tensor, state: dict, group: dict) -> None:
    """One ``torch.optim.Adam`` / ``AdamW`` update (keys step, exp_avg, exp_avg_sq, and
    max_exp_avg_sq with amsgrad); ``group["decoupled_weight_decay"]`` selects AdamW's decay."""
    _check_dense("Adam", grad)
    amsgrad = group["amsgrad"]
    if not state:
        state["step"] = torch.tensor(0.0, dtype=torch.get_default_dtype())
        state["exp_avg"] = torch.zeros_like(param, memory_format=torch.preserve_format)
        state["exp_avg_sq"] = torch.zeros_like(param, memory_format=torch.preserve_format)
        if amsgrad:
            state["max_exp_avg_sq"] = torch.zeros_like(param, memory_format=torch.preserve_format)
    lr = _scalar(group["lr"])
    beta1, beta2 = (_scalar(b) for b in group["betas"])
    weight_decay = group["weight_decay"]
    eps = group["eps"]
    g = -grad if group.get("maximize", False) else grad
    step_t = state["step"]
    step_t += 1
    if weight_decay != 0:
        if group.get("decoupled_weight_decay", False):
            param.mul_(1 - lr * weight_decay)
        else:
            g = g.add(param, alpha=weight_decay)
    p, g = _real(param), _real(g)
    exp_avg, exp_avg_sq = _real(state["exp_avg"]), _real(state["exp_avg_sq"])
    exp_avg.lerp_(g, 1 - (beta1.to(p.dtype) if isinstance(beta1, torch.Tensor) else beta1))
    exp_avg_sq.mul_(beta2).addcmul_(g, g, value=1 - beta2)
    step = step_t.item()
    bias_correction1 = 1 - beta1**step
    bias_correction2_sqrt = (1 - beta2**step) ** 0.5
    step_size = lr / bias_correction1
    if amsgrad:
        max_sq = _real(state["max_exp_avg_sq"])
        torch.maximum(max_sq, exp_avg_sq, out=max_sq)
        denom = (max_sq.sqrt() / bias_correction2_sqrt).add_(eps)
    else:
        denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)
    p.addcdiv_(exp_avg, denom, value=-step_size)


def adagrad_step(param: torch.Tensor, grad: torch.Tensor, state: dict, group: dict) -> None:
    """One ``torch.optim.Adagrad`` update (keys step and sum)."""
    _check_dense("Adagrad", grad)
    if not state:
        state["step"] = torch.tensor(0.0, dtype=torch.get_default_dtype())
        init = group["initial_accumulator_value"]
        if torch.is_complex(param):
            init = complex(init, init)
        state["sum"] = torch.full_like(param, init, memory_format=torch.preserve_format)
    lr = _scalar(group["lr"])
    step_t = state["step"]
    step_t += 1
    step = step_t.item()
    g = -grad if group.get("maximize", False) else grad
    if group["weight_decay"] != 0:
        g = g.add(param, alpha=group["weight_decay"])
    clr = lr / (1 + (step - 1) * group["lr_decay"])
    p, g, state_sum = _real(param), _real(g), _real(state["sum"])
    state_sum.addcmul_(g, g, value=1)
    std = state_sum.sqrt().add_(group["eps"])
    p.addcdiv_(g, std, value=-clr)


_STEPS: dict[type, StepFn] = {
    torch.optim.SGD: sgd_step,
    torch.optim.Adam: adam_step,
    torch.optim.AdamW: adam_step,
    torch.optim.Adagrad: adagrad_step,
}

SUPPORTED = tuple(cls.__name__ for cls in _STEPS)


def functional_step(optimizer_class: type) -> StepFn:
    """The per-parameter step function of ``optimizer_class``.

    Raises:
        NotImplementedError: ``optimizer_class`` (a subclass included: it may change the maths)
            is not one of SGD, Adam, AdamW, Adagrad.
    """
    step = _STEPS.get(optimizer_class)
    if step is None:
        name = getattr(optimizer_class, "__name__", repr(optimizer_class))
        raise NotImplementedError(
            f"no functional form of optimizer {name}; supported: {', '.join(SUPPORTED)}"
        )
    return step


def check_group(optimizer_class: type, group: dict) -> None:
    """Refuse parameter-group options whose maths the functional form does not reproduce.

    Raises:
        NotImplementedError: foreach, fused, capturable or differentiable is set.
    """
    for flag in _UNSUPPORTED_FLAGS:
        if group.get(flag):
            raise NotImplementedError(
                f"functional {optimizer_class.__name__} supports only the default single-tensor "
                f"path; {flag}=True is not supported"
            )


class FunctionalOptimizer:
    """An optimizer with explicit state whose update applies to one parameter at a time.

    ``FunctionalOptimizer(torch.optim.Adam, lr=1e-3)`` validates the hyper-parameters with the
    class's own constructor; ``step_param(p, grad)`` then updates ``p`` exactly as
    ``torch.optim.Adam`` would, keeping the state in ``self.state[p]``.
    """

    def __init__(self, optimizer_class: type, **defaults: Any) -> None:
        self.optimizer_class = optimizer_class
        self._step = functional_step(optimizer_class)
        probe = optimizer_class([torch.zeros(1, requires_grad=True)], **defaults)
        self.defaults: dict[str, Any] = dict(probe.defaults)
        check_group(optimizer_class, self.defaults)
        self.state: dict[torch.Tensor, dict] = {}

    def step_param(self, param: torch.Tensor, grad: torch.Tensor,
                   group: dict | None = None) -> None:
        """Update ``param`` in place from ``grad`` (hyper-parameters from ``group`` or the
        defaults)."""
        group = self.defaults if group is None else group
        state = self.state.setdefault(param, {})
        with torch.no_grad():
            self._step(param, grad, state, group)
