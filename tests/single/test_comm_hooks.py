"""The rank-free parts of communication hooks: PowerSGD's compression rule and orthogonalisation
against PyTorch's own, the future's caching, the check of a hook's result, the Q seed."""

from __future__ import annotations

import pytest
import torch
from hora.common.comm_hooks import (
    GradBucket,
    HookFuture,
    check_future,
    check_result,
    initial_q_seed,
    should_compress,
)
from hora.common.process_sets import global_process_set
from hora.torch.powersgd import orthogonalize
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as torch_powersgd


@pytest.mark.parametrize("rows", [1, 4, 8, 33])
@pytest.mark.parametrize("cols", [1, 4, 8, 64])
@pytest.mark.parametrize("rank", [1, 2, 4])
@pytest.mark.parametrize("rate", [0, 1, 2, 3.5])
def test_should_compress_is_pytorchs(rows: int, cols: int, rank: int, rate: float) -> None:
    """The decision and both element counts equal PyTorch's ``_should_compress``."""
    r = min(rows, cols, rank)
    assert should_compress(rows, cols, r, rate) == torch_powersgd._should_compress(
        rows, cols, r, rate)


@pytest.mark.parametrize("shape", [(1, 7, 1), (2, 9, 2), (3, 12, 4), (1, 5, 5)])
@pytest.mark.parametrize("epsilon", [0.0, 1e-8])
def test_orthogonalize_spans_what_pytorchs_does(shape: tuple[int, int, int],
                                                epsilon: float) -> None:
    """Orthonormal columns spanning the same space as PyTorch's ``_orthogonalize`` gives (the
    projections P P^T agree; column signs may differ between QR implementations)."""
    gen = torch.Generator().manual_seed(sum(shape))
    ours = torch.randn(shape, generator=gen, dtype=torch.float64)
    theirs = ours.clone()
    orthogonalize(ours, epsilon)
    torch_powersgd._orthogonalize(theirs, epsilon)
    tol = 1e-6 if epsilon else 1e-12  # epsilon shortens each column by about epsilon
    eye = torch.eye(shape[2], dtype=torch.float64).expand(shape[0], -1, -1)
    torch.testing.assert_close(ours.transpose(1, 2) @ ours, eye, rtol=tol, atol=tol)
    torch.testing.assert_close(ours @ ours.transpose(1, 2), theirs @ theirs.transpose(1, 2),
                               rtol=tol, atol=tol)


def test_future_computes_once_and_keeps_errors() -> None:
    """wait() runs the function once and returns its value (or raises its error) every time."""
    calls = []
    future = HookFuture(lambda: calls.append(1) or [torch.ones(2)])
    assert not future.done()
    assert future.wait() is future.wait() and calls == [1] and future.done()

    def fail() -> list:
        calls.append(2)
        raise RuntimeError("lost")

    failing = HookFuture(fail)
    for _ in range(2):
        with pytest.raises(RuntimeError, match="lost"):
            failing.wait()
    assert calls == [1, 2]
    assert HookFuture.completed([1]).wait() == [1]


def test_result_checks() -> None:
    """A hook's result is a future, and its value one tensor per gradient of the same shape."""
    bucket = GradBucket(4, ["w", "b"], [torch.zeros(2, 3), torch.zeros(3)], global_process_set)
    assert bucket.name == "w"
    with pytest.raises(TypeError, match="for the bucket of \\['w', 'b'\\] it returned int"):
        check_future(3, bucket)

    def check(value: object) -> list:
        return check_result(value, bucket, lambda v: isinstance(v, torch.Tensor),
                            lambda v: tuple(v.shape))

    good = [torch.ones(2, 3), torch.ones(3)]
    assert check(tuple(good)) == good
    with pytest.raises(TypeError, match="wait\\(\\) returned Tensor"):
        check(good[0])
    with pytest.raises(ValueError, match="returned 1 tensors"):
        check(good[:1])
    with pytest.raises(ValueError, match="shape \\[3\\] for the gradient of w"):
        check([good[1], good[1]])


def test_initial_q_seed() -> None:
    """A pure function of (random_seed, bucket, draw), different when any of them changes."""
    seeds = {initial_q_seed(s, b, d) for s in (0, 1) for b in (0, 5) for d in (0, 1)}
    assert len(seeds) == 8
    assert initial_q_seed(0, 5, 1) == initial_q_seed(0, 5, 1)
