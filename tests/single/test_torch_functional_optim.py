"""Functional optimizer steps (hora.torch.functional_optim) against torch.optim itself: after
several steps with the same gradients, parameters and state are bit-for-bit equal."""

from __future__ import annotations

import pytest
import torch
from hora.torch.functional_optim import FunctionalOptimizer, functional_step

CASES = [
    (torch.optim.SGD, {"lr": 0.1}),
    (torch.optim.SGD, {"lr": 0.1, "momentum": 0.9}),
    (torch.optim.SGD, {"lr": 0.1, "momentum": 0.9, "dampening": 0.3, "weight_decay": 0.01}),
    (torch.optim.SGD, {"lr": 0.1, "momentum": 0.9, "nesterov": True, "weight_decay": 0.02}),
    (torch.optim.SGD, {"lr": 0.05, "momentum": 0.5, "maximize": True}),
    (torch.optim.Adam, {"lr": 0.01}),
    (torch.optim.Adam, {"lr": 0.01, "betas": (0.8, 0.9), "weight_decay": 0.1, "eps": 1e-6}),
    (torch.optim.Adam, {"lr": 0.01, "amsgrad": True, "maximize": True}),
    (torch.optim.Adam, {"lr": torch.tensor(0.01), "decoupled_weight_decay": True,
                        "weight_decay": 0.1}),
    (torch.optim.Adam, {"lr": 0.01, "betas": (torch.tensor(0.8), torch.tensor(0.9))}),
    (torch.optim.SGD, {"lr": torch.tensor([0.1]), "momentum": 0.9}),
    (torch.optim.Adagrad, {"lr": torch.tensor(0.1), "lr_decay": 0.1}),
    (torch.optim.AdamW, {"lr": 0.01}),
    (torch.optim.AdamW, {"lr": 0.01, "amsgrad": True, "weight_decay": 0.3}),
    (torch.optim.Adagrad, {"lr": 0.1}),
    (torch.optim.Adagrad, {"lr": 0.1, "lr_decay": 0.01, "weight_decay": 0.1,
                           "initial_accumulator_value": 0.5, "eps": 1e-8}),
    (torch.optim.Adagrad, {"lr": 0.1, "maximize": True}),
]


def _params(dtype: torch.dtype) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(3)
    shapes = [(5, 3), (7,), (1,), (0,), (2, 3, 4)]
    return [torch.randn(s, generator=gen, dtype=dtype).requires_grad_() for s in shapes]


def _grads(params: list[torch.Tensor], step: int) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(100 + step)
    return [torch.randn(p.shape, generator=gen, dtype=p.dtype) for p in params]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.complex64])
@pytest.mark.parametrize(("cls", "kwargs"), CASES, ids=lambda v: getattr(v, "__name__", str(v)))
def test_functional_step_equals_torch_optim(cls: type, kwargs: dict, dtype: torch.dtype) -> None:
    reference = _params(dtype)
    mine = [p.detach().clone().requires_grad_() for p in reference]
    opt = cls(reference, **kwargs)
    functional = functional_step(cls)
    group = opt.param_groups[0]
    states: list[dict] = [{} for _ in mine]
    if cls is torch.optim.Adagrad:  # Adagrad creates its state in the constructor
        states = [{k: v.clone() for k, v in opt.state[p].items()} for p in reference]
    for step in range(4):
        grads = _grads(reference, step)
        for p, g in zip(reference, grads):
            p.grad = g.clone()
        opt.step()
        with torch.no_grad():
            for p, g, st in zip(mine, grads, states):
                functional(p, g.clone(), st, group)
    for p, q, st in zip(reference, mine, states):
        assert torch.equal(p, q)
        assert opt.state[p].keys() == st.keys()
        for key, value in st.items():
            assert torch.equal(opt.state[p][key], value), key


def test_functional_optimizer_object_keeps_state() -> None:
    p = torch.ones(4, requires_grad=True)
    q = p.detach().clone()
    opt = torch.optim.AdamW([p], lr=0.1, amsgrad=True)
    fopt = FunctionalOptimizer(torch.optim.AdamW, lr=0.1, amsgrad=True)
    for step in range(3):
        g = torch.full((4,), float(step) - 0.5)
        p.grad = g.clone()
        opt.step()
        fopt.step_param(q, g)
    assert torch.equal(p.detach(), q)
    assert torch.equal(fopt.state[q]["max_exp_avg_sq"], opt.state[p]["max_exp_avg_sq"])
    assert fopt.defaults["decoupled_weight_decay"] is True


def test_other_optimizers_are_refused_by_name() -> None:
    with pytest.raises(NotImplementedError, match="RMSprop"):
        functional_step(torch.optim.RMSprop)

    class MySGD(torch.optim.SGD):
        pass

    with pytest.raises(NotImplementedError, match="MySGD"):
        FunctionalOptimizer(MySGD, lr=0.1)
    for flag in ("foreach", "fused", "capturable", "differentiable"):
        with pytest.raises(NotImplementedError, match=f"{flag}=True"):
            FunctionalOptimizer(torch.optim.Adam, lr=0.1, **{flag: True})
    with pytest.raises(ValueError, match="Invalid learning rate"):
        FunctionalOptimizer(torch.optim.SGD, lr=-1.0)


def test_sparse_gradients_are_refused() -> None:
    fopt = FunctionalOptimizer(torch.optim.SGD, lr=0.1)
    with pytest.raises(RuntimeError, match="sparse"):
        fopt.step_param(torch.zeros(3), torch.zeros(3).to_sparse())
