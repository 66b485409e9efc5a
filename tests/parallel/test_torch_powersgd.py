"""PowerSGD as a communication hook of hora.torch's DistributedOptimizer.

Run as ``horarun -np N python -m pytest -q tests/parallel/test_torch_powersgd.py`` (N = 2, 3, 4).
Checks: vanilla allreduce for the first ``start_powerSGD_iter`` steps; at full rank the result is
the plain average (to 1e-9, float64); one compressed step against a NumPy reference; the same
random initial Q on every rank; the min_compression_rate rule; error feedback and warm start
through their observable effects; rank 1 trains a small model to within 1.5x the loss of plain
allreduce.
"""

from __future__ import annotations

from typing import Any

import hora.torch as hvd
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import rank, size
from hora.common.numpy_powersgd import PowerSGD as NumpyPowerSGD
from hora.common.process_sets import global_process_set
from hora.torch.hooks import GradBucket, PowerSGD
from torch import nn
from torch_helpers import float_input

# Matrices (two of the same shape for batching), a 3-d tensor, a vector and a scalar.
SHAPES: list[tuple[int, ...]] = [(6, 4), (5, 7), (5, 7), (3, 2, 4), (4,), ()]
FULL_RANK_TOL = 1e-9


def _grad(r: int, i: int, step: int, tag: str) -> torch.Tensor:
    shape = list(SHAPES[i]) or [1]
    return float_input(r, shape, "psgd", tag, i, step).reshape(SHAPES[i])


def _named() -> list[tuple[str, nn.Parameter]]:
    return [(f"psgd.p{i}", nn.Parameter(torch.zeros(s, dtype=torch.float64)))
            for i, s in enumerate(SHAPES)]


@pytest.mark.parametrize("batch", [False, True])
@pytest.mark.parametrize("layout", ["single", "one_group"])
def test_full_rank_equals_allreduce(layout: str, batch: bool) -> None:
    """Two vanilla steps (exact average), then compressed steps at rank >= min(rows, cols) with
    min_compression_rate=0: every gradient equals the plain average to 1e-9 (error feedback and
    warm start on; the vector and the scalar are averaged uncompressed in one batch)."""
    named = _named()
    params = [p for _, p in named]
    hook = PowerSGD(matrix_approximation_rank=8, start_powerSGD_iter=2, min_compression_rate=0,
                    batch_tensors_with_same_shape=batch)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(params, lr=1.0), named_parameters=named,
                                   comm_hook=hook,
                                   groups=[params] if layout == "one_group" else None)
    for step in range(5):
        for i, p in enumerate(params):
            p.grad = _grad(rank(), i, step, layout).clone()
        opt.synchronize()
        for i, p in enumerate(params):
            expected = sum(_grad(r, i, step, layout) for r in range(size())) / size()
            tol = 0.0 if step < 2 else FULL_RANK_TOL
            torch.testing.assert_close(p.grad, expected, rtol=tol, atol=tol)
    assert set(hook.iterations.values()) == {5}
    assert hook.error_dict and hook.q_memory_dict


def _bucket(index: int, tensors: list[Any]) -> GradBucket:
    return GradBucket(index, [f"psgd.direct.{index}.{i}" for i in range(len(tensors))],
                      tensors, global_process_set)


def _matrix(r: int, shape: tuple[int, int], tag: str) -> torch.Tensor:
    return float_input(r, list(shape), "psgd_m", tag)


# Relative tolerance (Frobenius norm) of one compressed step against the float64 reference.
STEP_TOL = {torch.float64: 1e-10, torch.float32: 1e-5, torch.float16: 2e-2, torch.bfloat16: 1e-1}


@pytest.mark.parametrize("dtype", list(STEP_TOL), ids=str)
def test_one_step_matches_numpy_reference_and_q_is_shared(dtype: torch.dtype) -> None:
    """The first compressed step of rank 2: P = sum_r M_r Q0, orthonormalised, Q = sum_r M_r^T P
    / n, result P Q^T, with Q0 the hook's random initial Q, identical on every rank; for every
    floating-point dtype (the reference in float64 from the same rounded inputs)."""
    shape = (12, 10)  # (12 + 10) * 2 * 2 < 120: compressed
    hook = PowerSGD(matrix_approximation_rank=2, start_powerSGD_iter=0,
                    use_error_feedback=False, warm_start=False, random_seed=11)
    local = _matrix(rank(), shape, "ref").to(dtype)
    out = hook(_bucket(7, [local.clone()])).wait()[0]
    assert out.dtype == dtype
    q0 = hook.initial_qs(7, [(1, shape[1], 2)], dtype, draw=0)[0][0]
    gathered = hvd.allgather(q0.reshape(1, -1), name=f"psgd.q0.{dtype}")
    for r in range(size()):
        assert torch.equal(gathered[r], gathered[0]), f"rank {r} drew another Q"
    ms = [_matrix(r, shape, "ref").to(dtype).double().numpy() for r in range(size())]
    p, _ = np.linalg.qr(sum(m @ q0.double().numpy() for m in ms))
    q = sum(m.T @ p for m in ms) / size()
    expected = p @ q.T
    error = np.linalg.norm(out.double().numpy() - expected) / np.linalg.norm(expected)
    assert error < STEP_TOL[dtype], error
    assert not hook.p_memory_dict and not hook.q_memory_dict  # no warm start: nothing kept


def test_min_compression_rate() -> None:
    """(rows + cols) * rank * min_compression_rate < rows * cols decides: a 4x4 matrix at rank 1
    (16 vs 16) is averaged exactly, an 8x8 one (32 vs 64) is compressed; the statistics count
    elements as PyTorch's compression_stats does."""
    hook = PowerSGD(matrix_approximation_rank=1, start_powerSGD_iter=0,
                    use_error_feedback=False, warm_start=False)
    small, big = _matrix(rank(), (4, 4), "small"), _matrix(rank(), (8, 8), "big")
    out = hook(_bucket(3, [small.clone(), big.clone()])).wait()
    average = [sum(_matrix(r, s, t) for r in range(size())) / size()
               for s, t in (((4, 4), "small"), ((8, 8), "big"))]
    torch.testing.assert_close(out[0], average[0], rtol=0, atol=0)
    assert (out[1] - average[1]).abs().max() > 1e-3
    assert torch.linalg.matrix_rank(out[1]) == 1
    assert hook.compression_stats() == ((16 + 64) / (16 + 16), 16 + 64, 16 + 16)


@pytest.mark.parametrize("arrays", ["torch", "numpy"])
def test_error_feedback_is_observable(arrays: str) -> None:
    """With error feedback the residual closes the books on each rank: after T steps of the same
    gradient G, sum of outputs + residual == T * G (to 1e-10), so the mean output tends to the
    true average; without it the rank-1 approximation's bias stays. For torch tensors and for
    the NumPy arrays of the TensorFlow and MXNet hooks."""
    hook_class = PowerSGD if arrays == "torch" else NumpyPowerSGD
    shape, steps = (10, 8), 20
    local = _matrix(rank(), shape, "ef").numpy()
    average = sum(_matrix(r, shape, "ef").numpy() for r in range(size())) / size()

    def gradient() -> Any:
        return torch.from_numpy(local.copy()) if arrays == "torch" else local.copy()

    misses = {}
    for feedback in (True, False):
        hook = hook_class(matrix_approximation_rank=1, start_powerSGD_iter=2,
                          use_error_feedback=feedback, warm_start=True)
        total = np.zeros(shape)
        for _ in range(steps):
            total += np.asarray(hook(_bucket(1, [gradient()])).wait()[0])
        misses[feedback] = float(np.linalg.norm(total / steps - average) / np.linalg.norm(average))
        if feedback:
            compressed = steps - 2
            vanilla = 2 * average
            np.testing.assert_allclose(total - vanilla + np.asarray(hook.error_dict[1][0]),
                                       compressed * local, rtol=1e-10, atol=1e-10)
        else:
            assert hook.error_dict == {}
    assert misses[True] < 0.5 * misses[False], misses


def test_warm_start_is_observable() -> None:
    """The same matrix on every rank, no error feedback: with warm start Q carries over and the
    power iteration converges to the best rank-1 approximation (from the SVD); without it every
    step starts from a new random Q and stays one power step away."""
    n, m = 8, 6
    u, _ = np.linalg.qr(np.random.default_rng(3).standard_normal((n, n)))
    v, _ = np.linalg.qr(np.random.default_rng(4).standard_normal((m, m)))
    sigma = np.array([4.0, 2.0, 1.0, 0.5, 0.25, 0.1])
    matrix = torch.from_numpy((u[:, :m] * sigma) @ v.T)
    best = torch.from_numpy(sigma[0] * np.outer(u[:, 0], v[:, 0]))
    errors = {}
    for warm in (True, False):
        hook = PowerSGD(matrix_approximation_rank=1, start_powerSGD_iter=2,
                        use_error_feedback=False, warm_start=warm)
        for _ in range(30):
            out = hook(_bucket(2, [matrix.clone()])).wait()[0]
        errors[warm] = float((out - best).norm())
        assert (2 in hook.q_memory_dict) == warm
    assert errors[True] < 1e-8, errors
    assert errors[False] > 1e-3, errors


def test_options_are_checked() -> None:
    """PyTorch's rules: start_powerSGD_iter > 1 with error feedback or warm start; rank >= 1."""
    with pytest.raises(ValueError, match="start_powerSGD_iter"):
        PowerSGD(start_powerSGD_iter=1)
    with pytest.raises(ValueError, match="matrix_approximation_rank"):
        PowerSGD(matrix_approximation_rank=0)
    PowerSGD(start_powerSGD_iter=0, use_error_feedback=False, warm_start=False)


# ------------------------------------------------------------------------------- training


def _mlp() -> nn.Module:
    torch.manual_seed(3)
    return nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3)).double()


def _train(steps: int, passes: int, **kwargs: object) -> torch.Tensor:
    model = _mlp()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
                                   named_parameters=model.named_parameters(),
                                   backward_passes_per_step=passes, **kwargs)
    for step in range(steps):
        opt.zero_grad()
        for micro in range(passes):
            x = float_input(rank(), [4, 6], "psgd_x", step, micro)
            y = float_input(rank(), [4, 3], "psgd_y", step, micro)
            F.mse_loss(model(x), y).backward()
        opt.step()
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


@pytest.mark.parametrize("groups", [None, 2])
@pytest.mark.parametrize("passes", [1, 2])
def test_full_rank_training_equals_plain(passes: int, groups: object) -> None:
    """Hooks fired by backward, with gradient accumulation and groups: full-rank PowerSGD
    trains to the parameters of plain allreduce (to 1e-9)."""
    plain = _train(5, passes, groups=groups)
    hook = PowerSGD(matrix_approximation_rank=8, start_powerSGD_iter=2, min_compression_rate=0)
    compressed = _train(5, passes, groups=groups, comm_hook=hook)
    torch.testing.assert_close(compressed, plain, rtol=FULL_RANK_TOL, atol=FULL_RANK_TOL)


def _regression_loss(hook: PowerSGD | None, steps: int) -> tuple[float, float]:
    """Train a 32-64-16 ReLU network on a linear target; returns (initial, final) loss on a
    fixed evaluation set."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 16)).double()
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9),
                                   named_parameters=model.named_parameters(), comm_hook=hook)
    target = torch.randn(32, 16, generator=torch.Generator().manual_seed(5)).double() / 4
    x_eval = torch.randn(256, 32, generator=torch.Generator().manual_seed(9)).double()
    with torch.no_grad():
        initial = F.mse_loss(model(x_eval), x_eval @ target).item()
    gen = torch.Generator().manual_seed(100 + rank())
    for _ in range(steps):
        x = torch.randn(32, 32, generator=gen).double()
        opt.zero_grad()
        F.mse_loss(model(x), x @ target).backward()
        opt.step()
    with torch.no_grad():
        return initial, F.mse_loss(model(x_eval), x_eval @ target).item()


def test_rank_one_trains_like_plain_allreduce() -> None:
    """Rank 1 from step 10 on (the 64x32 and 16x64 weights compressed 21x and 13x) reaches a
    loss within 1.5x that of plain allreduce after 200 steps, both below 5% of the start."""
    initial, plain = _regression_loss(None, 200)
    _, compressed = _regression_loss(PowerSGD(1, start_powerSGD_iter=10), 200)
    assert plain < 0.05 * initial and compressed < 0.05 * initial, (initial, plain, compressed)
    assert compressed < 1.5 * plain, (plain, compressed)


def test_buckets_ready_in_a_different_order_on_each_rank() -> None:
    """Two branches whose backward order differs between ranks (each rank runs them forward in
    another order): PowerSGD's second round, started in wait(), still meets on every rank, and
    the parameters stay equal on every rank."""
    torch.manual_seed(5)
    branches = nn.ModuleList([nn.Linear(16, 12, bias=False).double() for _ in range(3)])
    hook = PowerSGD(matrix_approximation_rank=1, start_powerSGD_iter=2)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(branches.parameters(), lr=0.1),
                                   named_parameters=branches.named_parameters(), comm_hook=hook)
    order = [(i + rank()) % 3 for i in range(3)]
    for step in range(4):
        x = float_input(rank(), [4, 16], "psgd_order", step)
        opt.zero_grad()
        outputs = {i: branches[i](x) for i in order}
        sum(outputs[i].square().mean() for i in range(3)).backward()
        opt.step()
    flat = torch.cat([p.detach().reshape(-1) for p in branches.parameters()])
    gathered = hvd.allgather(flat.reshape(1, -1), name="psgd.order.params")
    for r in range(size()):
        assert torch.equal(gathered[r], gathered[0]), f"rank {r} differs from rank 0"
    assert set(hook.iterations.values()) == {4}
