"""DistributedOptimizer, state broadcasts, object collectives and SyncBatchNorm of hora.torch.

Run as ``horarun -np N python -m pytest -q tests/parallel/test_torch_optimizer.py`` (N = 2, 3, 4).
The central check: training on N ranks, each with its shard of the global batch, gives the same
parameters as one process training on the whole batch.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable

import hora.torch as hvd
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import adasum_ref, check_next_op_works, is_power_of_two, rank, size
from torch import nn
from torch_helpers import float_input, to_numpy

LOCAL_BATCH = 4
TOL = 1e-5


def _mlp(seed: int = 7) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3)).double()


def _batch(step: int, micro: int, r: int) -> tuple[torch.Tensor, torch.Tensor]:
    x = float_input(r, [LOCAL_BATCH, 6], "opt_x", step, micro)
    y = float_input(r, [LOCAL_BATCH, 3], "opt_y", step, micro)
    return x, y


def _global_batch(step: int, micro: int) -> tuple[torch.Tensor, torch.Tensor]:
    parts = [_batch(step, micro, r) for r in range(size())]
    return torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])


def _flat_params(model: nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def _assert_same_on_every_rank(values: torch.Tensor, name: str) -> None:
    gathered = hvd.allgather(values.reshape(1, -1), name=name)
    for r in range(size()):
        assert torch.equal(gathered[r], gathered[0]), f"rank {r} differs from rank 0"


OPTIMIZERS: dict[str, Callable[[list], torch.optim.Optimizer]] = {
    "sgd_momentum": lambda params: torch.optim.SGD(params, lr=0.1, momentum=0.9),
    "adam": lambda params: torch.optim.Adam(params, lr=0.01),
}


def _train_distributed(
    make_opt: Callable,
    passes: int,
    steps: int,
    groups_of: Callable[[nn.Module], list] | None = None,
    **kwargs: object,
) -> nn.Module:
    model = _mlp()
    if groups_of is not None:
        kwargs["groups"] = groups_of(model)
    opt = hvd.DistributedOptimizer(
        make_opt(model.parameters()),
        named_parameters=model.named_parameters(),
        backward_passes_per_step=passes,
        **kwargs,
    )
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    for step in range(steps):
        opt.zero_grad()
        for micro in range(passes):
            x, y = _batch(step, micro, rank())
            F.mse_loss(model(x), y).backward()
        opt.step()
    return model


def _train_reference(
    make_opt: Callable, passes: int, steps: int, grad_scale: float = 1.0
) -> nn.Module:
    model = _mlp()
    opt = make_opt(model.parameters())
    for step in range(steps):
        opt.zero_grad()
        for micro in range(passes):
            x, y = _global_batch(step, micro)
            (F.mse_loss(model(x), y) * grad_scale).backward()
        opt.step()
    return model


# ------------------------------------------------------------------- equivalence with one process


@pytest.mark.parametrize("passes", [1, 2])
@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
def test_matches_single_process_training(optimizer: str, passes: int) -> None:
    """N ranks with shards == one process on the global batch; parameters equal on all ranks."""
    make_opt = OPTIMIZERS[optimizer]
    model = _train_distributed(make_opt, passes, steps=3)
    reference = _train_reference(make_opt, passes, steps=3)
    params = _flat_params(model)
    torch.testing.assert_close(params, _flat_params(reference), rtol=TOL, atol=TOL)
    _assert_same_on_every_rank(params, f"opt_equiv.{optimizer}.{passes}")


def _two_groups(model: nn.Module) -> list[list[torch.Tensor]]:
    params = list(model.parameters())
    return [[params[0], params[3]], [params[1]]]


VARIANTS: dict[str, tuple[dict[str, object], float]] = {
    "predivide": ({"gradient_predivide_factor": 2.0}, TOL),
    "num_groups": ({"groups": 2}, TOL),
    "groups_list": ({"groups_of": _two_groups}, TOL),
    "sum": ({"op": hvd.Sum}, TOL),
    "fp16": ({"compression": hvd.Compression.fp16}, 2e-3),
    "bf16": ({"compression": hvd.Compression.bf16}, 3e-2),
}


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_optimizer_variants(variant: str) -> None:
    """Predivide factor, fused groups, Sum and compression keep the training equivalent."""
    make_opt = OPTIMIZERS["sgd_momentum"]
    kwargs, tol = VARIANTS[variant]
    grad_scale = float(size()) if variant == "sum" else 1.0
    model = _train_distributed(make_opt, 1, 3, **kwargs)
    reference = _train_reference(make_opt, 1, 3, grad_scale=grad_scale)
    torch.testing.assert_close(_flat_params(model), _flat_params(reference), rtol=tol, atol=tol)
    _assert_same_on_every_rank(_flat_params(model), f"opt_variant.{variant}")


def test_num_groups_is_deprecated() -> None:
    """num_groups still works, with a DeprecationWarning."""
    model = _mlp()
    with pytest.warns(DeprecationWarning):
        opt = hvd.DistributedOptimizer(
            torch.optim.SGD(model.parameters(), lr=0.1),
            named_parameters=model.named_parameters(),
            num_groups=2,
        )
    x, y = _batch(0, 0, rank())
    F.mse_loss(model(x), y).backward()
    opt.step()


def test_adasum_optimizer() -> None:
    """op=Adasum combines each rank's parameter change with Adasum (power-of-two sizes)."""
    model = _mlp()
    start = copy.deepcopy(model)
    opt = hvd.DistributedOptimizer(
        torch.optim.SGD(model.parameters(), lr=0.1),
        named_parameters=model.named_parameters(),
        op=hvd.Adasum,
    )
    x, y = _batch(0, 0, rank())
    F.mse_loss(model(x), y).backward()
    if not is_power_of_two(size()):
        with pytest.raises((ValueError, RuntimeError), match="power of 2"):
            opt.step()
        check_next_op_works("torch_opt_adasum")
        return
    opt.step()
    deltas: dict[str, list[np.ndarray]] = {}
    for r in range(size()):
        local = copy.deepcopy(start)
        xr, yr = _batch(0, 0, r)
        F.mse_loss(local(xr), yr).backward()
        for name, p in local.named_parameters():
            deltas.setdefault(name, []).append(to_numpy(-0.1 * p.grad))
    for name, p in model.named_parameters():
        expected = to_numpy(dict(start.named_parameters())[name]) + adasum_ref(deltas[name])
        np.testing.assert_allclose(to_numpy(p), expected, rtol=1e-9, atol=1e-9)
    _assert_same_on_every_rank(_flat_params(model), "opt_adasum")


# -------------------------------------------------------------------------------- semantics


def test_is_instance_of_wrapped_class() -> None:
    """The wrapper subclasses the optimizer's class and shares its parameter groups."""
    model = _mlp()
    base = torch.optim.Adam(model.parameters(), lr=0.003, betas=(0.8, 0.9))
    opt = hvd.DistributedOptimizer(base, named_parameters=model.named_parameters())
    assert isinstance(opt, torch.optim.Adam) and type(opt).__name__ == "Adam"
    assert opt.param_groups[0]["lr"] == 0.003 and opt.param_groups[0]["betas"] == (0.8, 0.9)
    assert opt.defaults["betas"] == (0.8, 0.9)
    opt.param_groups[0]["lr"] = 0.5
    assert base.param_groups[0]["lr"] == 0.5
    scheduler = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    x, y = _batch(0, 0, rank())
    F.mse_loss(model(x), y).backward()
    opt.step()
    scheduler.step()
    assert opt.param_groups[0]["lr"] == 0.25


def test_named_parameters_validation() -> None:
    """Non-tuples, duplicate names and unnamed parameters raise ValueError (no communication)."""
    model = _mlp()
    params = list(model.named_parameters())
    sgd = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(ValueError, match="should be a sequence of tuples"):
        hvd.DistributedOptimizer(sgd, named_parameters=[list(p) for p in params])
    dup = [("same", p) for _, p in params]
    with pytest.raises(ValueError, match="must be unique. Found duplicates: same"):
        hvd.DistributedOptimizer(sgd, named_parameters=dup)
    with pytest.raises(ValueError, match="were not named"):
        hvd.DistributedOptimizer(sgd, named_parameters=params[:1])
    with pytest.raises(ValueError, match="op != Average"):
        hvd.DistributedOptimizer(sgd, op=hvd.Sum, gradient_predivide_factor=2.0)
    with pytest.raises(ValueError, match="groups"):
        hvd.DistributedOptimizer(sgd, groups=[[params[0][1]], [params[0][1]]])
    with pytest.raises(ValueError, match="groups"):
        hvd.DistributedOptimizer(sgd, groups=-1)
    with pytest.raises(ValueError):
        hvd.DistributedOptimizer(sgd, backward_passes_per_step=0)


def test_no_named_parameters() -> None:
    """Without named_parameters the tensors get automatic names and training works."""
    model = _mlp()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1))
    for step in range(2):
        opt.zero_grad()
        x, y = _batch(step, 0, rank())
        F.mse_loss(model(x), y).backward()
        opt.step()
    _assert_same_on_every_rank(_flat_params(model), "opt_noname")


class _TwoBranches(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(3)
        self.a = nn.Linear(4, 2).double()
        self.b = nn.Linear(4, 2).double()
        self.never = nn.Linear(4, 2).double()

    def forward(self, x: torch.Tensor, use_b: bool) -> torch.Tensor:
        out = self.a(x)
        return out + self.b(x) if use_b else out


@pytest.mark.parametrize("grouped", [False, True], ids=["single", "grouped"])
def test_unused_parameters_do_not_hang(grouped: bool) -> None:
    """Parameters without a gradient on some (or all) ranks are reduced as zeros.

    Grouped: the first group holds a parameter used everywhere and one used on odd ranks only,
    so it completes in the hooks on some ranks and only at synchronize() on others; the second
    holds a never-used parameter, so it never completes in the hooks.
    """
    model = _TwoBranches()
    groups = [[model.a.weight, model.b.weight], [model.never.weight, model.a.bias]]
    groups = groups if grouped else None
    opt = hvd.DistributedOptimizer(
        torch.optim.SGD(model.parameters(), lr=0.1),
        named_parameters=model.named_parameters(),
        groups=groups,
    )
    use_b = [r % 2 == 1 for r in range(size())]
    x = float_input(rank(), [3, 4], "unused_x")
    model(x, use_b[rank()]).sum().backward()
    opt.synchronize()
    expected_b = torch.zeros(2, 4, dtype=torch.float64)
    for r in range(size()):
        if use_b[r]:
            expected_b += torch.ones(2, 1, dtype=torch.float64) * float_input(
                r, [3, 4], "unused_x"
            ).sum(0)
    torch.testing.assert_close(model.b.weight.grad, expected_b / size())
    assert model.never.weight.grad is not None and not model.never.weight.grad.any()
    with opt.skip_synchronize():
        opt.step()
    _assert_same_on_every_rank(_flat_params(model), f"opt_unused.{grouped}")


def test_zero_grad_between_backward_and_step_is_an_error() -> None:
    """zero_grad() while reductions are pending raises AssertionError with Horovod's message."""
    model = _mlp()
    opt = hvd.DistributedOptimizer(
        torch.optim.SGD(model.parameters(), lr=0.1), named_parameters=model.named_parameters()
    )
    x, y = _batch(0, 0, rank())
    F.mse_loss(model(x), y).backward()
    with pytest.raises(AssertionError, match=r"zero_grad\(\) was called after loss.backward"):
        opt.zero_grad()
    opt.step()
    opt.zero_grad()
    assert all(p.grad is None for p in model.parameters())


def test_too_many_backward_passes() -> None:
    """More backward passes than backward_passes_per_step before step() is an AssertionError."""
    model = _mlp()
    opt = hvd.DistributedOptimizer(
        torch.optim.SGD(model.parameters(), lr=0.1), named_parameters=model.named_parameters()
    )
    x, y = _batch(0, 0, rank())
    F.mse_loss(model(x), y).backward()
    with pytest.raises(AssertionError, match="more than backward_passes_per_step"):
        F.mse_loss(model(x), y).backward()
    opt.synchronize()
    opt.zero_grad()
    opt.set_backward_passes_per_step(2)
    for _ in range(2):
        F.mse_loss(model(x), y).backward()
    with opt.skip_synchronize():
        opt.synchronize()
        opt.step()
    _assert_same_on_every_rank(_flat_params(model), "opt_passes")


def test_step_before_all_passes_still_reduces() -> None:
    """step() after fewer backward passes than configured reduces what was accumulated."""
    model = _mlp()
    opt = hvd.DistributedOptimizer(
        torch.optim.SGD(model.parameters(), lr=0.1),
        named_parameters=model.named_parameters(),
        backward_passes_per_step=3,
    )
    x, y = _batch(1, 0, rank())
    F.mse_loss(model(x), y).backward()
    opt.step()
    reference = _mlp()
    xg, yg = _global_batch(1, 0)
    F.mse_loss(reference(xg), yg).backward()
    torch.optim.SGD(reference.parameters(), lr=0.1).step()
    torch.testing.assert_close(_flat_params(model), _flat_params(reference), rtol=TOL, atol=TOL)


def test_synchronize_then_step_warns() -> None:
    """step() right after synchronize() warns; inside skip_synchronize() it does not."""
    model = _mlp()
    opt = hvd.DistributedOptimizer(
        torch.optim.SGD(model.parameters(), lr=0.1), named_parameters=model.named_parameters()
    )
    x, y = _batch(0, 0, rank())
    F.mse_loss(model(x), y).backward()
    opt.synchronize()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        opt.step()
    messages = [str(w.message) for w in caught]
    assert any(
        "optimizer.step() called without optimizer.skip_synchronize()" in m for m in messages
    ), messages
    opt.zero_grad()
    F.mse_loss(model(x), y).backward()
    opt.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with opt.skip_synchronize():
            opt.step()
    assert not [w for w in caught if "skip_synchronize" in str(w.message)]


def test_gradient_clipping_between_synchronize_and_step() -> None:
    """Clipping the reduced gradients (Horovod's example) changes them before the update."""
    x = torch.ones(1, 1)
    y = torch.ones(1, 1)
    model = nn.Linear(1, 1)
    model.weight = nn.Parameter(torch.zeros(1, 1) + 0.5)
    model.bias = nn.Parameter(torch.zeros(1))
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    opt = hvd.DistributedOptimizer(
        torch.optim.SGD(model.parameters(), lr=0.1), named_parameters=model.named_parameters()
    )
    F.mse_loss(model(x), y).backward()
    opt.synchronize()
    prior = model.weight.grad.item()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.1)
    assert abs(prior) > abs(model.weight.grad.item())
    with opt.skip_synchronize():
        opt.step()


def test_dynamic_requires_grad() -> None:
    """Freezing and unfreezing parts of a model between steps (two optimizers, same names)."""
    torch.manual_seed(5)
    gen = nn.Conv2d(1, 4, 1)
    disc = nn.Conv2d(4, 1, 1)
    hvd.broadcast_parameters(gen.state_dict(), root_rank=0)
    hvd.broadcast_parameters(disc.state_dict(), root_rank=0)
    inp = torch.rand([1, 1, 6, 6], generator=torch.Generator().manual_seed(rank()))
    gen_opt = hvd.DistributedOptimizer(
        torch.optim.SGD(gen.parameters(), lr=0.1),
        named_parameters=[("gen." + n, p) for n, p in gen.named_parameters()],
    )
    disc_opt = hvd.DistributedOptimizer(
        torch.optim.SGD(disc.parameters(), lr=0.1),
        named_parameters=[("disc." + n, p) for n, p in disc.named_parameters()],
    )
    for train_gen in (True, False, True, False):
        for p in gen.parameters():
            p.requires_grad_(train_gen)
        for p in disc.parameters():
            p.requires_grad_(not train_gen)
        gen_opt.zero_grad()
        disc_opt.zero_grad()
        disc(gen(inp)).sum().backward()
        (gen_opt if train_gen else disc_opt).step()
        for p in gen.parameters():
            assert (p.grad is not None) == train_gen
        for p in disc.parameters():
            assert (p.grad is not None) != train_gen
    _assert_same_on_every_rank(torch.cat([_flat_params(gen), _flat_params(disc)]), "opt_dyn")


def test_load_state_dict_resets_pending_state() -> None:
    """load_state_dict() after backward() finishes pending work; training continues normally."""
    model = _mlp()
    opt = hvd.DistributedOptimizer(
        torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
        named_parameters=model.named_parameters(),
    )
    x, y = _batch(0, 0, rank())
    F.mse_loss(model(x), y).backward()
    opt.load_state_dict(opt.state_dict())
    opt.zero_grad()
    F.mse_loss(model(x), y).backward()
    opt.step()
    _assert_same_on_every_rank(_flat_params(model), "opt_load_state")


def test_join_with_uneven_number_of_steps() -> None:
    """Rank r trains r + 1 steps then joins; the others' steps go on while it contributes zeros."""
    model = _mlp()
    opt = hvd.DistributedOptimizer(
        torch.optim.SGD(model.parameters(), lr=0.1), named_parameters=model.named_parameters()
    )
    for step in range(rank() + 1):
        opt.zero_grad()
        x, y = _batch(step, 0, rank())
        F.mse_loss(model(x), y).backward()
        opt.step()
    last = hvd.join()
    assert last == size() - 1
    assert hvd.allgather_object(last) == [last] * size()


@pytest.mark.parametrize("sparse_as_dense", [False, True])
def test_sparse_gradients(sparse_as_dense: bool) -> None:
    """Embeddings with sparse gradients: sparse allreduce or dense, same averaged result."""
    torch.manual_seed(11)
    emb = nn.Embedding(10, 3, sparse=True).double()
    reference = copy.deepcopy(emb)
    opt = hvd.DistributedOptimizer(
        torch.optim.SGD(emb.parameters(), lr=0.5),
        named_parameters=emb.named_parameters(),
        sparse_as_dense=sparse_as_dense,
    )
    ids = [torch.tensor([r % 10, (3 * r + 1) % 10, 7]) for r in range(size())]
    emb(ids[rank()]).sum().backward()
    opt.step()
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.5)
    (sum(reference(i).sum() for i in ids) / size()).backward()
    ref_opt.step()
    torch.testing.assert_close(emb.weight.detach(), reference.weight.detach())


@pytest.mark.parametrize("sparse_as_dense", [False, True])
def test_sparse_adam(sparse_as_dense: bool) -> None:
    """SparseAdam on a sparse embedding: the gradient stays sparse (reduced as a sparse tensor,
    or as a dense one and made sparse again) and holds the average of every rank's gradient;
    the step matches SparseAdam on that average, equally on every rank."""
    torch.manual_seed(5)
    emb = nn.Embedding(10, 3, sparse=True)
    reference = copy.deepcopy(emb)
    opt = hvd.DistributedOptimizer(torch.optim.SparseAdam(list(emb.parameters()), lr=0.1),
                                   named_parameters=emb.named_parameters(),
                                   sparse_as_dense=sparse_as_dense)
    ids = [torch.tensor([[1, 2, 4, 5], [4, 3, 2, 9]]) if r % 2 == 0
           else torch.tensor([[1, 3, 4], [4, 7, 9]]) for r in range(size())]
    opt.zero_grad()
    emb(ids[rank()]).sum().backward()
    opt.step()
    grad = emb.weight.grad
    assert grad is not None and grad.is_sparse
    ref_opt = torch.optim.SparseAdam(list(reference.parameters()), lr=0.1)
    (sum(reference(i).sum() for i in ids) / size()).backward()
    torch.testing.assert_close(grad.coalesce().to_dense(), reference.weight.grad.to_dense())
    ref_opt.step()
    torch.testing.assert_close(emb.weight.detach(), reference.weight.detach())
    gathered = hvd.allgather(emb.weight.detach().unsqueeze(0), name=f"t_sparse_adam.{sparse_as_dense}")
    assert all(torch.equal(g, gathered[0]) for g in gathered)


# ----------------------------------------------------------------- parameter and state broadcast


def test_broadcast_parameters() -> None:
    """state_dict and named-parameter lists are overwritten in place with the root's values."""
    root = size() - 1
    model = _mlp(seed=100 + rank())
    weight = model[0].weight
    hvd.broadcast_parameters(model.state_dict(), root_rank=root)
    assert model[0].weight is weight
    expected = _flat_params(_mlp(seed=100 + root))
    torch.testing.assert_close(_flat_params(model), expected, rtol=0, atol=0)
    other = _mlp(seed=200 + rank())
    hvd.broadcast_parameters(other.named_parameters(), root_rank=0)
    torch.testing.assert_close(_flat_params(other), _flat_params(_mlp(seed=200)), rtol=0, atol=0)
    plain = [torch.full((2, 3), float(rank())).t(), torch.tensor(rank())]
    hvd.broadcast_parameters(list(plain), root_rank=root)
    assert plain[0].eq(float(root)).all() and int(plain[1]) == root
    with pytest.raises(ValueError, match="invalid params"):
        hvd.broadcast_parameters(42, root_rank=0)


def _trained_optimizer(kind: str, seed: int, steps: int) -> tuple[nn.Module, torch.optim.Optimizer]:
    model = _mlp(seed=1)
    if kind == "adam":
        opt: torch.optim.Optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for step in range(steps):
        opt.zero_grad()
        x, y = _batch(step, seed, seed)
        F.mse_loss(model(x), y).backward()
        opt.step()
    return model, opt


def _state_vector(opt: torch.optim.Optimizer) -> torch.Tensor:
    values = []
    for group in opt.param_groups:
        for p in group["params"]:
            for key in sorted(opt.state[p]):
                value = opt.state[p][key]
                if isinstance(value, torch.Tensor):
                    values.append(value.detach().double().reshape(-1))
    return torch.cat(values) if values else torch.zeros(0, dtype=torch.float64)


@pytest.mark.parametrize("kind", ["sgd", "adam"])
def test_broadcast_optimizer_state(kind: str) -> None:
    """State tensors and hyperparameters (lr) become the root's on every rank."""
    model, opt = _trained_optimizer(kind, seed=rank(), steps=1 + rank())
    opt.param_groups[0]["lr"] = 0.1 * (rank() + 1)
    wrapped = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    hvd.broadcast_optimizer_state(wrapped, root_rank=0)
    _, root_opt = _trained_optimizer(kind, seed=0, steps=1)
    torch.testing.assert_close(_state_vector(wrapped), _state_vector(root_opt), rtol=0, atol=0)
    assert wrapped.param_groups[0]["lr"] == pytest.approx(0.1)


def test_broadcast_optimizer_state_to_fresh_ranks() -> None:
    """A root restored from a checkpoint gives its state to ranks that have none yet."""
    if rank() == 0:
        model, opt = _trained_optimizer("adam", seed=0, steps=2)
    else:
        model = _mlp(seed=1)
        opt = torch.optim.Adam(model.parameters(), lr=0.01)
    before = _flat_params(model)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    _, root_opt = _trained_optimizer("adam", seed=0, steps=2)
    torch.testing.assert_close(_state_vector(opt), _state_vector(root_opt), rtol=0, atol=0)
    torch.testing.assert_close(_flat_params(model), before, rtol=0, atol=0)


def test_broadcast_optimizer_state_all_fresh() -> None:
    """With no state anywhere the optimizers stay fresh and the parameters unchanged; every
    parameter has a zero gradient, as Horovod leaves it."""
    model = _mlp(seed=1)
    opt = hvd.DistributedOptimizer(
        torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=0.1),
        named_parameters=model.named_parameters(),
    )
    before = _flat_params(model)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    assert len(opt.state) == 0
    assert all(p.grad is not None and not p.grad.any() for p in model.parameters())
    torch.testing.assert_close(_flat_params(model), before, rtol=0, atol=0)


class _FrozenIndex(torch.nn.Module):
    """A model with an integer parameter that is frozen and a trainable one."""

    def __init__(self) -> None:
        super().__init__()
        self.index = torch.nn.Parameter(torch.tensor([1, 3], dtype=torch.int32),
                                        requires_grad=False)
        self.weight = torch.nn.Parameter(torch.arange(4.0) + rank())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.index_select(self.weight, 0, self.index.long()) * x


def test_broadcast_optimizer_state_gives_zero_gradients() -> None:
    """A fresh optimizer: the trainable parameter gets a zero gradient, equal on every rank;
    the frozen one keeps None; the parameters are left as they were."""
    model = _FrozenIndex()
    opt = hvd.DistributedOptimizer(
        torch.optim.SGD(model.parameters(), lr=0.1, weight_decay=0.1, momentum=0.9,
                        nesterov=True),
        named_parameters=model.named_parameters(),
    )
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    before = model.weight.detach().clone()
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    assert model.index.grad is None
    grad = model.weight.grad
    assert grad is not None and grad.shape == model.weight.shape and not grad.any()
    assert torch.equal(hvd.broadcast(grad, root_rank=0, name="t_zero_grad"), grad)
    assert torch.equal(model.weight.detach(), before)


def test_broadcast_optimizer_state_sparse_adam() -> None:
    """SparseAdam (and SGD given the model) start from sparse zero gradients."""
    for make in (lambda ps: torch.optim.SparseAdam(ps, lr=0.01),
                 lambda ps: torch.optim.SGD(ps, lr=0.01)):
        torch.manual_seed(0)
        model = torch.nn.Embedding(10, 3, sparse=True)
        opt = make(list(model.parameters()))
        hvd.broadcast_optimizer_state(opt, root_rank=0, model=model)
        assert model.weight.grad is not None and model.weight.grad.is_sparse


def test_broadcast_optimizer_state_lbfgs_is_refused() -> None:
    """LBFGS state cannot be broadcast."""
    model = _mlp()
    with pytest.raises(ValueError, match="LBFGS"):
        hvd.broadcast_optimizer_state(torch.optim.LBFGS(model.parameters()), root_rank=0)


def test_broadcast_and_allgather_object() -> None:
    """Picklable objects from the root, and one from every rank."""
    obj = {"rank": rank(), "payload": list(range(rank() + 1)), "t": torch.tensor([rank()])}
    received = hvd.broadcast_object(obj, root_rank=size() - 1, name="t_obj")
    assert received["rank"] == size() - 1 and received["payload"] == list(range(size()))
    assert int(received["t"]) == size() - 1
    everyone = hvd.allgather_object(("r", rank()))
    assert everyone == [("r", r) for r in range(size())]


# ------------------------------------------------------------------------------ SyncBatchNorm


@pytest.mark.parametrize("shape", [(3, 4), (2, 4, 5), (2, 4, 3, 3)], ids=str)
@pytest.mark.parametrize("momentum", [0.1, None])
def test_sync_batch_norm_matches_global_batch_norm(
    shape: tuple[int, ...], momentum: float | None
) -> None:
    """SyncBatchNorm on shards == BatchNorm on the whole batch: output, stats and gradients."""
    shard_rows = [shape[0] + r % 2 for r in range(size())]
    shards = [
        float_input(r, [shard_rows[r], *shape[1:]], "sbn_x", shape) * 3 + r for r in range(size())
    ]
    weights = [float_input(r, [shard_rows[r], *shape[1:]], "sbn_w", shape) for r in range(size())]
    sync = hvd.SyncBatchNorm(4, momentum=momentum).double()
    local = (
        nn.BatchNorm1d(4, momentum=momentum)
        if len(shape) < 4
        else nn.BatchNorm2d(4, momentum=momentum)
    )
    local = local.double()
    with torch.no_grad():
        for bn in (sync, local):
            bn.weight.copy_(torch.tensor([1.0, 2.0, 0.5, -1.0]))
            bn.bias.copy_(torch.tensor([0.0, 1.0, -1.0, 2.0]))
    start = sum(shard_rows[: rank()])
    for it in range(2):
        x = shards[rank()].clone().requires_grad_()
        out = sync(x)
        (out * weights[rank()]).sum().backward()
        full = torch.cat(shards).clone().requires_grad_()
        ref = local(full)
        (ref * torch.cat(weights)).sum().backward()
        torch.testing.assert_close(out, ref[start : start + shard_rows[rank()]])
        torch.testing.assert_close(x.grad, full.grad[start : start + shard_rows[rank()]])
        torch.testing.assert_close(sync.running_mean, local.running_mean)
        torch.testing.assert_close(sync.running_var, local.running_var)
        for name in ("weight", "bias"):
            grad = getattr(sync, name).grad
            total = hvd.allreduce(grad, op=hvd.Sum, name=f"sbn.{name}.{shape}.{momentum}.{it}")
            torch.testing.assert_close(total, getattr(local, name).grad)
    sync.eval()
    local.eval()
    torch.testing.assert_close(sync(shards[rank()]), local(shards[rank()]))


def test_sync_batch_norm_input_checks() -> None:
    """Inputs need at least two dimensions."""
    with pytest.raises(ValueError, match="expected at least 2D input"):
        hvd.SyncBatchNorm(3)(torch.zeros(3))
