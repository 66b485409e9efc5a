"""Communication hooks of hora.torch's DistributedOptimizer (``comm_hook=``).

Run as ``horarun -np N python -m pytest -q tests/parallel/test_torch_hooks.py`` (N = 2, 3, 4).
Gradients are set by hand before ``synchronize()`` so that the results can be compared exactly
with a NumPy reference (values whose sums need no rounding); training runs compare with the
optimizer without a hook.
"""

from __future__ import annotations

from collections.abc import Callable

import hora.torch as hvd
import ml_dtypes
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import check_next_op_works, make_input, rank, reduce_ref, seed_of, size
from hora.torch.hooks import GradBucket, HookFuture
from torch import nn
from torch_helpers import float_input, to_numpy

# Shapes of the hand-set gradients: empty, one element, odd, a matrix, a 3-d tensor, a scalar,
# and one larger than 64 KiB.
SHAPES: list[tuple[int, ...]] = [(0,), (1,), (17,), (5, 7), (3, 4, 5), (), (70001,)]
HOOKS: dict[str, Callable] = {
    "allreduce": hvd.hooks.allreduce,
    "fp16": hvd.hooks.fp16_compress,
    "bf16": hvd.hooks.bf16_compress,
}
WIRE = {"fp16": np.float16, "bf16": ml_dtypes.bfloat16}


def _params(dtype: torch.dtype = torch.float32) -> list[tuple[str, nn.Parameter]]:
    return [(f"hk.p{i}", nn.Parameter(torch.zeros(s, dtype=dtype))) for i, s in enumerate(SHAPES)]


def _input(r: int, i: int, key: str) -> np.ndarray:
    """Rank r's gradient for shape i. For the allreduce hook multiples of 0.5 in [-8, 8], whose
    average is exact; for the compressing hooks float32 values of magnitude in [1, 8) that the
    cast to the half type rounds, and whose halves divided by the rank count sum exactly in
    float32 (their exponents span less than 8 binades)."""
    if key.startswith("allreduce"):
        return np.asarray(make_input(r, SHAPES[i], "float32", "hooks", key, i))
    rng = np.random.default_rng(seed_of("hooks", key, r, i))
    magnitude = rng.uniform(1.0, 8.0, size=SHAPES[i])
    return np.asarray(magnitude * rng.choice([-1.0, 1.0], size=SHAPES[i]), dtype=np.float32)


def _grads(key: str) -> list[np.ndarray]:
    return [_input(rank(), i, key) for i in range(len(SHAPES))]


def _all_grads(key: str, i: int) -> list[np.ndarray]:
    return [_input(r, i, key) for r in range(size())]


def _compressed_ref(arrays: list[np.ndarray], wire: type) -> np.ndarray:
    """PyTorch's fp16/bf16 hook in NumPy: cast, divide by the rank count in the half type
    (computed in float32, rounded once), sum (exact here), round once, cast back."""
    n = len(arrays)
    parts = [(a.astype(wire).astype(np.float32) / np.float32(n)).astype(wire) for a in arrays]
    total = np.sum([p.astype(np.float64) for p in parts], axis=0)
    return total.astype(wire).astype(np.float32)


def _groups_of(layout: str, params: list[nn.Parameter]) -> object:
    if layout == "groups_int":
        return 2
    if layout == "groups_list":
        return [[params[0], params[3], params[6]], [params[1], params[4]]]
    return None


@pytest.mark.parametrize("layout", ["single", "groups_int", "groups_list"])
@pytest.mark.parametrize("hook", list(HOOKS))
def test_hook_matches_numpy_reference(hook: str, layout: str) -> None:
    """allreduce gives the exact average; fp16/bf16 give PyTorch's rounding bit for bit; for
    every shape, with one bucket per parameter and with fused groups."""
    named = _params()
    params = [p for _, p in named]
    opt = hvd.DistributedOptimizer(torch.optim.SGD(params, lr=1.0), named_parameters=named,
                                   comm_hook=HOOKS[hook], groups=_groups_of(layout, params))
    key = f"{hook}.{layout}"
    for p, g in zip(params, _grads(key)):
        p.grad = torch.from_numpy(np.array(g))
    opt.synchronize()
    for i, p in enumerate(params):
        arrays = _all_grads(key, i)
        if hook == "allreduce":
            expected = reduce_ref(arrays, "average", "float32")
        else:
            expected = _compressed_ref(arrays, WIRE[hook])
        assert p.grad.dtype == torch.float32 and tuple(p.grad.shape) == SHAPES[i]
        np.testing.assert_array_equal(to_numpy(p.grad), expected, err_msg=f"{SHAPES[i]}")


def _mlp(seed: int = 3) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3)).double()


def _train(steps: int, passes: int, **kwargs: object) -> torch.Tensor:
    model = _mlp()
    groups = kwargs.pop("groups", None)
    if groups == "list":
        ps = list(model.parameters())
        groups = [[ps[0], ps[3]], [ps[1], ps[2]]]
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
                                   named_parameters=model.named_parameters(),
                                   backward_passes_per_step=passes, groups=groups, **kwargs)
    for step in range(steps):
        opt.zero_grad()
        for micro in range(passes):
            x = float_input(rank(), [4, 6], "hk_x", step, micro)
            y = float_input(rank(), [4, 3], "hk_y", step, micro)
            F.mse_loss(model(x), y).backward()
        opt.step()
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


@pytest.mark.parametrize("groups", [None, 2, "list"])
@pytest.mark.parametrize("passes", [1, 2])
def test_allreduce_hook_trains_like_the_standard_path(passes: int, groups: object) -> None:
    """Training through the allreduce hook (hooks fired by backward, gradient accumulation over
    backward_passes_per_step, groups) ends with the parameters of the optimizer without a hook
    (to 1e-12: only the order of a fused sum may differ)."""
    plain = _train(3, passes, groups=groups)
    hooked = _train(3, passes, groups=groups, comm_hook=hvd.hooks.allreduce)
    torch.testing.assert_close(hooked, plain, rtol=1e-12, atol=1e-12)


def test_hook_sees_buckets() -> None:
    """A bucket is one parameter, or one group (with its names in order); its index is the
    position of its first parameter, the same on every rank; every bucket is reduced once."""
    model = _mlp()
    ps = list(model.parameters())
    seen: list[tuple[int, list[str], list[tuple[int, ...]]]] = []

    def spy(bucket: GradBucket) -> HookFuture:
        seen.append((bucket.index, list(bucket.names), [tuple(t.shape) for t in bucket.tensors]))
        assert bucket.size() == size()
        return hvd.hooks.allreduce(bucket)

    opt = hvd.DistributedOptimizer(torch.optim.SGD(ps, lr=0.1),
                                   named_parameters=model.named_parameters(), comm_hook=spy,
                                   groups=[[ps[0], ps[2]]])
    F.mse_loss(model(float_input(rank(), [4, 6], "spy")), torch.zeros(4, 3).double()).backward()
    assert len(seen) == 3  # called from backward, before step()
    opt.step()
    assert sorted(seen) == [(0, ["0.weight", "2.weight"], [(8, 6), (3, 8)]),
                            (1, ["0.bias"], [(8,)]), (3, ["2.bias"], [(3,)])]


def test_hook_on_a_process_set() -> None:
    """The bucket carries the optimizer's process set; ranks outside it do not call the hook."""
    members = list(range(size() - 1))
    ps = hvd.add_process_set(members)
    try:
        named = _params()
        params = [p for _, p in named]
        sets: list[object] = []

        def spy(bucket: GradBucket) -> HookFuture:
            sets.append(bucket.process_set)
            return hvd.hooks.allreduce(bucket)

        opt = hvd.DistributedOptimizer(torch.optim.SGD(params, lr=1.0), named_parameters=named,
                                       comm_hook=spy, process_set=ps)
        for p, g in zip(params, _grads("allreduce.pset")):
            p.grad = torch.from_numpy(np.array(g))
        opt.synchronize()
        if rank() in members:
            assert sets and all(s is ps for s in sets)
            for i, p in enumerate(params):
                arrays = [a for r, a in enumerate(_all_grads("allreduce.pset", i)) if r in members]
                np.testing.assert_array_equal(to_numpy(p.grad),
                                              reduce_ref(arrays, "average", "float32"))
        else:
            assert sets == []
    finally:
        hvd.remove_process_set(ps)


# ------------------------------------------------------------------------------- bad hooks


def _one_step(hook: Callable) -> None:
    model = _mlp()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters(), comm_hook=hook)
    F.mse_loss(model(float_input(rank(), [4, 6], "bad")), torch.zeros(4, 3).double()).backward()
    opt.step()


def test_hook_returning_no_future_is_refused() -> None:
    """A hook that returns something without wait() fails backward at once, naming the bucket."""
    model = _mlp()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters(),
                                   comm_hook=lambda bucket: None)
    loss = F.mse_loss(model(float_input(rank(), [4, 6], "none")), torch.zeros(4, 3).double())
    with pytest.raises(TypeError, match=r"comm_hook must return a future.*bias.*returned NoneType"):
        loss.backward()
    assert opt.param_groups  # the optimizer (and so its gradient hooks) lived through backward
    check_next_op_works("hooks_no_future")


BAD_RESULTS: dict[str, tuple[Callable[[GradBucket], object], type, str]] = {
    "not_a_list": (lambda b: b.tensors[0], TypeError, "wait\\(\\) returned Tensor"),
    "too_many": (lambda b: b.tensors + b.tensors, ValueError, "returned 2 tensors"),
    "wrong_shape": (lambda b: [t.reshape(-1)[:1] for t in b.tensors], ValueError,
                    "returned shape \\[1\\]"),
}


@pytest.mark.parametrize("case", list(BAD_RESULTS))
def test_hook_returning_bad_gradients_is_refused(case: str) -> None:
    """A future whose wait() gives something other than one tensor per gradient of the bucket,
    of the same shape, fails step() with a clear error; the job goes on."""
    make, error, message = BAD_RESULTS[case]
    with pytest.raises(error, match=message):
        _one_step(lambda bucket: HookFuture.completed(make(bucket)))
    check_next_op_works(f"hooks_bad_{case}")


def test_hook_options_are_checked() -> None:
    """A hook that is not callable, or combined with compression, Sum, a predivide factor or
    step_in_backward."""
    model = _mlp()

    def wrap(**kwargs: object) -> None:
        hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                 named_parameters=model.named_parameters(), **kwargs)

    with pytest.raises(TypeError, match="comm_hook must be callable"):
        wrap(comm_hook=3)
    with pytest.raises(ValueError, match="compression cannot be combined"):
        wrap(comm_hook=hvd.hooks.allreduce, compression=hvd.Compression.fp16)
    with pytest.raises(ValueError, match="op must be Average"):
        wrap(comm_hook=hvd.hooks.allreduce, op=hvd.Sum)
    with pytest.raises(ValueError, match="gradient_predivide_factor"):
        wrap(comm_hook=hvd.hooks.allreduce, gradient_predivide_factor=2.0)
    with pytest.raises(ValueError, match="step_in_backward=True cannot be combined"):
        wrap(comm_hook=hvd.hooks.allreduce, step_in_backward=True)


def test_hook_future_error_reaches_step() -> None:
    """An exception raised by a future's wait() reaches step() unchanged."""

    def failing(bucket: GradBucket) -> HookFuture:
        def boom() -> list:
            raise RuntimeError(f"no network for {bucket.name}")

        return HookFuture(boom)

    with pytest.raises(RuntimeError, match="no network for"):
        _one_step(failing)
    check_next_op_works("hooks_future_error")
