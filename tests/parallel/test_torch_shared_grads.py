"""DistributedOptimizer's gradients in the shared arena (``shared_gradients``).

Run as ``horarun -np N python -m pytest -q tests/parallel/test_torch_shared_grads.py`` (N = 2, 3,
4), every rank on this host, so over shared memory with its arena. Gradients that stay from one
step to the next move into the arena, where the other ranks read them in place; training is bit
for bit the same as with private gradients; gradients that torch replaces every step (zero_grad()'s
default) stay private, with Horovod's semantics.
"""

from __future__ import annotations

import hora.torch as hvd
import torch
import torch.nn.functional as F
from conftest import rank
from hora import _core
from torch import nn

STEPS = 5


def _model() -> nn.Module:
    # About 1 MiB of float32 gradients: their fused allreduce runs in the shared-memory windows.
    torch.manual_seed(3)
    return nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(),
                         nn.Linear(256, 10))


def _train(model: nn.Module, opt: torch.optim.Optimizer, set_to_none: bool,
           steps: int = STEPS) -> None:
    data = torch.Generator().manual_seed(rank())
    for _ in range(steps):
        x = torch.randn(16, 256, generator=data)
        y = torch.randint(0, 10, (16,), generator=data)
        opt.zero_grad(set_to_none=set_to_none)
        F.cross_entropy(model(x), y).backward()
        opt.step()


def _in_arena(p: torch.Tensor) -> bool:
    grad = p.grad
    return grad is not None and _core.in_shared_pool(grad.data_ptr(),
                                                     grad.numel() * grad.element_size())


def _optimizer(model: nn.Module, **kwargs: object) -> torch.optim.Optimizer:
    return hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
                                    named_parameters=model.named_parameters(), **kwargs)


def test_kept_gradients_move_to_the_arena_and_are_read_in_place() -> None:
    assert _core.shared_pool_info() is not None, "every rank on one host: the arena exists"
    private, shared = _model(), _model()
    _train(private, _optimizer(private, shared_gradients=False), set_to_none=False)
    assert not any(_in_arena(p) for p in private.parameters())

    before = _core.shared_pool_info()
    _train(shared, _optimizer(shared), set_to_none=False)
    after = _core.shared_pool_info()
    assert all(_in_arena(p) for p in shared.parameters())
    # Steps 1 and 2 show the gradients stay; from step 3 on the peers read them in place.
    assert after["parts_read_in_place"] - before["parts_read_in_place"] >= STEPS - 2
    for a, b in zip(private.parameters(), shared.parameters()):
        assert torch.equal(a, b)


def test_a_kept_gradient_is_replaced_once_by_its_view() -> None:
    """The table of differences (docs/coming-from-horovod.md): after the second step, p.grad is a view holding the same
    values; with shared_gradients=False it stays the same tensor, as in Horovod."""
    for shared in (True, False):
        model = _model()
        opt = _optimizer(model, shared_gradients=shared)
        _train(model, opt, set_to_none=False, steps=1)
        first = [p.grad for p in model.parameters()]
        _train(model, opt, set_to_none=False, steps=1)
        second = [p.grad for p in model.parameters()]
        assert all((a is b) != shared for a, b in zip(first, second))
        assert all(torch.equal(a, b) for a, b in zip(first, second))
        _train(model, opt, set_to_none=False, steps=2)
        assert all(p.grad is g for p, g in zip(model.parameters(), second))


def test_gradients_that_zero_grad_drops_stay_private() -> None:
    model = _model()
    opt = _optimizer(model)
    _train(model, opt, set_to_none=True)
    assert not any(_in_arena(p) for p in model.parameters())
    opt.zero_grad()
    assert all(p.grad is None for p in model.parameters())  # Horovod's and torch's default


def test_views_are_let_go_once_replaced() -> None:
    free = _core.shared_pool_info()["bytes_free"]
    model = _model()
    opt = _optimizer(model)
    _train(model, opt, set_to_none=False)
    assert all(_in_arena(p) for p in model.parameters())
    assert _core.shared_pool_info()["bytes_free"] < free
    _train(model, opt, set_to_none=True, steps=1)
    assert not any(_in_arena(p) for p in model.parameters())
    assert _core.shared_pool_info()["bytes_free"] == free  # the block went back to the arena


def test_a_full_arena_keeps_them_private(monkeypatch) -> None:
    """No room in the arena (shared_block gives None): the gradients stay where they are."""
    monkeypatch.setattr(_core, "shared_block", lambda nbytes: None)
    private, model = _model(), _model()
    _train(private, _optimizer(private, shared_gradients=False), set_to_none=False)
    _train(model, _optimizer(model), set_to_none=False)
    assert not any(_in_arena(p) for p in model.parameters())
    for a, b in zip(private.parameters(), model.parameters()):
        assert torch.equal(a, b)


def test_flag_environment_and_compression_keep_them_private(monkeypatch) -> None:
    for kwargs in ({"shared_gradients": False}, {"compression": hvd.Compression.fp16}):
        model = _model()
        _train(model, _optimizer(model, **kwargs), set_to_none=False)
        assert not any(_in_arena(p) for p in model.parameters()), kwargs
    monkeypatch.setenv("HORA_SHARED_GRADIENTS", "0")
    model = _model()
    _train(model, _optimizer(model), set_to_none=False)
    assert not any(_in_arena(p) for p in model.parameters())
