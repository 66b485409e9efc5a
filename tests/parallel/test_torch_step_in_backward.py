"""DistributedOptimizer(step_in_backward=True): updates inside backward equal the standard path.

Run as ``horarun -np N python -m pytest -q tests/parallel/test_torch_step_in_backward.py``.
Both paths reduce the same gradients with the same allreduces and apply torch.optim's maths, so
the parameters and the optimizer state are compared for exact equality.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable

import hora.torch as hvd
import pytest
import torch
import torch.nn.functional as F
from conftest import rank
from torch import nn
from torch_helpers import float_input

MakeOpt = Callable[[list], torch.optim.Optimizer]

OPTIMIZERS: dict[str, MakeOpt] = {
    "sgd": lambda ps: torch.optim.SGD(ps, lr=0.1),
    "sgd_momentum_wd": lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, dampening=0.1,
                                                  weight_decay=0.01),
    "sgd_nesterov_max": lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True,
                                                   maximize=True),
    "adam": lambda ps: torch.optim.Adam(ps, lr=0.01, weight_decay=0.01),
    "adamw_amsgrad": lambda ps: torch.optim.AdamW(ps, lr=0.01, amsgrad=True),
    "adagrad": lambda ps: torch.optim.Adagrad(ps, lr=0.1, lr_decay=0.01,
                                              initial_accumulator_value=0.1),
}


class _Net(nn.Module):
    """An MLP plus an optional layer that takes no part in the loss (its gradient stays None)."""

    def __init__(self, unused: bool = False) -> None:
        super().__init__()
        torch.manual_seed(11)
        self.body = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3))
        self.spare = nn.Linear(3, 3) if unused else None
        self.double()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


def _loss(model: nn.Module, step: int, micro: int) -> torch.Tensor:
    x = float_input(rank(), [4, 6], "sib_x", step, micro)
    y = float_input(rank(), [4, 3], "sib_y", step, micro)
    return F.mse_loss(model(x), y)


def _train(make_opt: MakeOpt, in_backward: bool, steps: int = 3, passes: int = 1,
           unused: bool = False, sync_first: bool = False, broadcast: bool = False,
           **kwargs: object) -> tuple[nn.Module, torch.optim.Optimizer]:
    model = _Net(unused)
    if kwargs.pop("groups_of_two", False):
        kwargs["groups"] = 2
    opt = hvd.DistributedOptimizer(make_opt(model.parameters()),
                                   named_parameters=model.named_parameters(),
                                   backward_passes_per_step=passes,
                                   step_in_backward=in_backward, **kwargs)
    if broadcast:  # creates the state with the wrapped class's own step, then sends rank 0's
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        hvd.broadcast_optimizer_state(opt, root_rank=0)
    for step in range(steps):
        opt.zero_grad()
        for micro in range(passes):
            _loss(model, step, micro).backward()
        if sync_first:
            opt.synchronize()
            with opt.skip_synchronize():
                opt.step()
        else:
            opt.step()
    return model, opt


def _assert_same(a: tuple[nn.Module, torch.optim.Optimizer],
                 b: tuple[nn.Module, torch.optim.Optimizer]) -> None:
    for (name, p), q in zip(a[0].named_parameters(), b[0].parameters()):
        assert torch.equal(p, q), name
    sa, sb = a[1].state_dict(), b[1].state_dict()
    assert sa["param_groups"] == sb["param_groups"]
    assert sa["state"].keys() == sb["state"].keys()
    for index, state in sa["state"].items():
        assert state.keys() == sb["state"][index].keys()
        for key, value in state.items():
            assert torch.equal(value, sb["state"][index][key]), (index, key)


@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
def test_equals_standard_path(optimizer: str) -> None:
    make_opt = OPTIMIZERS[optimizer]
    _assert_same(_train(make_opt, False), _train(make_opt, True))


VARIANTS: dict[str, dict[str, object]] = {
    "two_passes": {"passes": 2},
    "groups": {"groups_of_two": True},
    "unused_layer": {"unused": True},
    "synchronize_then_step": {"sync_first": True},
    "fp16": {"compression": hvd.Compression.fp16},
    "sum": {"op": hvd.Sum},
    "broadcast_state": {"broadcast": True},
}


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_variants_equal_standard_path(variant: str) -> None:
    make_opt = OPTIMIZERS["adam"]
    _assert_same(_train(make_opt, False, **dict(VARIANTS[variant])),
                 _train(make_opt, True, **dict(VARIANTS[variant])))


def test_update_happens_inside_backward_and_frees_gradients() -> None:
    model = _Net()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.5),
                                   named_parameters=model.named_parameters(),
                                   step_in_backward=True)
    before = [p.detach().clone() for p in model.parameters()]
    _loss(model, 0, 0).backward()
    after_backward = [p.detach().clone() for p in model.parameters()]
    assert all(p.grad is None for p in model.parameters())
    assert all(not torch.equal(a, b) for a, b in zip(before, after_backward))
    assert len(opt.state) == len(before)
    opt.zero_grad()  # nothing left to clear, and no race with the finished reductions
    opt.step()  # only waits: nothing changes
    assert all(torch.equal(a, p) for a, p in zip(after_backward, model.parameters()))
    opt.step()  # no backward since the last step: nothing to do
    assert all(torch.equal(a, p) for a, p in zip(after_backward, model.parameters()))


def test_step_with_closure() -> None:
    model = _Net()
    opt = hvd.DistributedOptimizer(torch.optim.Adam(model.parameters(), lr=0.01),
                                   named_parameters=model.named_parameters(),
                                   step_in_backward=True)
    reference = _train(lambda ps: torch.optim.Adam(ps, lr=0.01), False, steps=2)
    for step in range(2):
        def closure(step: int = step) -> torch.Tensor:
            loss = _loss(model, step, 0)
            loss.backward()
            return loss
        assert opt.step(closure) is not None
    for p, q in zip(model.parameters(), reference[0].parameters()):
        assert torch.equal(p, q)


def test_state_dict_round_trip() -> None:
    make_opt = OPTIMIZERS["adamw_amsgrad"]
    model, opt = _train(make_opt, True, steps=2)
    saved_params = copy.deepcopy(model.state_dict())
    saved_state = copy.deepcopy(opt.state_dict())
    for step in range(2, 4):
        _loss(model, step, 0).backward()
        opt.step()
    fresh = _Net()
    fresh.load_state_dict(saved_params)
    fresh_opt = hvd.DistributedOptimizer(make_opt(fresh.parameters()),
                                         named_parameters=fresh.named_parameters(),
                                         step_in_backward=True)
    fresh_opt.load_state_dict(saved_state)
    for step in range(2, 4):
        _loss(fresh, step, 0).backward()
        fresh_opt.step()
    _assert_same((model, opt), (fresh, fresh_opt))


def test_too_many_backward_passes_is_an_error() -> None:
    model = _Net()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters(),
                                   step_in_backward=True)
    _loss(model, 0, 0).backward()
    with pytest.raises(AssertionError, match="backward_passes_per_step"):
        _loss(model, 1, 0).backward()
    opt.step()


def test_synchronize_then_step_warns_and_does_not_update_twice() -> None:
    model = _Net()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters(),
                                   step_in_backward=True)
    _loss(model, 0, 0).backward()
    opt.synchronize()
    after = [p.detach().clone() for p in model.parameters()]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        opt.step()
    assert any("skip_synchronize" in str(w.message) for w in caught)
    assert all(torch.equal(a, p) for a, p in zip(after, model.parameters()))


def test_unsupported_optimizers_are_refused() -> None:
    model = _Net()
    with pytest.raises(NotImplementedError, match="RMSprop"):
        hvd.DistributedOptimizer(torch.optim.RMSprop(model.parameters(), lr=0.1),
                                 step_in_backward=True)
    with pytest.raises(NotImplementedError, match="foreach"):
        hvd.DistributedOptimizer(torch.optim.Adam(model.parameters(), foreach=True),
                                 step_in_backward=True)
    with pytest.raises(ValueError, match="Adasum"):
        hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), op=hvd.Adasum,
                                 step_in_backward=True)


def test_sparse_gradients_are_refused() -> None:
    torch.manual_seed(3)
    embedding = nn.Embedding(10, 4, sparse=True)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(embedding.parameters(), lr=0.1),
                                   named_parameters=embedding.named_parameters(),
                                   step_in_backward=True)
    with pytest.raises(RuntimeError, match="sparse gradients"):
        embedding(torch.tensor([1, 2, 2])).sum().backward()
    opt.step()
