"""Communication hooks of hora.mxnet (``comm_hook=`` of DistributedTrainer and
DistributedOptimizer).

Run under ``horarun -np N`` (N = 2, 3) with a Python that has MXNet 1.9.1. Gradients are set by
hand before ``allreduce_grads()`` so that results can be compared bit for bit with a NumPy
reference; training runs compare with the path without a hook.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MXNET_CPU_WORKER_NTHREADS", "1")

import numpy as np
import pytest
from conftest import make_input, rank, reduce_ref, seed_of, size
from hook_refs import SHAPES, WIRE, compressed_ref, hook_input

hvd = pytest.importorskip("hora.mxnet", exc_type=ImportError)
mx = pytest.importorskip("mxnet")

HOOKS = {"allreduce": hvd.hooks.allreduce, "fp16": hvd.hooks.fp16_compress,
         "bf16": hvd.hooks.bf16_compress}


def _plain_tol() -> float:
    """Without a hook MXNet averages through rescale_grad, a float32 parameter: 1/size is
    exact only for a power of two, else that path is off by float32 rounding (about 1e-7)."""
    return 1e-12 if size() & (size() - 1) == 0 else 1e-6


# MXNet has no 0-d or empty parameters: the hand-set gradients use the other shapes.
MX_SHAPES = [s for s in SHAPES if s and 0 not in s]


def _params(tag: str, shapes: list[tuple[int, ...]], dtype: str = "float32") -> list:
    params = []
    for i, s in enumerate(shapes):
        p = mx.gluon.Parameter(f"{tag}{i}", shape=s, dtype=dtype)
        p.initialize(mx.init.Zero(), ctx=mx.cpu())
        params.append(p)
    return params


@pytest.mark.parametrize("num_groups", [0, 2])
@pytest.mark.parametrize("hook", list(HOOKS))
def test_trainer_hook_matches_numpy_reference(hook: str, num_groups: int) -> None:
    """allreduce gives the exact average; fp16/bf16 give PyTorch's rounding bit for bit; one
    bucket per gradient and two fused buckets."""
    params = _params(f"hk{hook}{num_groups}_", MX_SHAPES)
    trainer = hvd.DistributedTrainer(params, "sgd", {"learning_rate": 1.0},
                                     num_groups=num_groups, comm_hook=HOOKS[hook])
    key = f"{hook}.mx{num_groups}"
    for i, p in enumerate(params):
        p.list_grad()[0][:] = mx.nd.array(hook_input(rank(), i, key, MX_SHAPES))
    trainer.allreduce_grads()
    for i, p in enumerate(params):
        arrays = [hook_input(r, i, key, MX_SHAPES) for r in range(size())]
        expected = (reduce_ref(arrays, "average", "float32") if hook == "allreduce"
                    else compressed_ref(arrays, WIRE[hook]))
        np.testing.assert_array_equal(p.grad().asnumpy(), expected, err_msg=f"{MX_SHAPES[i]}")


def _net() -> mx.gluon.HybridBlock:
    net = mx.gluon.nn.HybridSequential(prefix="hk_")
    with net.name_scope():
        net.add(mx.gluon.nn.Dense(8, in_units=6, activation="tanh", dtype="float64"))
        net.add(mx.gluon.nn.Dense(3, in_units=8, dtype="float64"))
    net.initialize(mx.init.Zero(), ctx=mx.cpu())
    for name, param in sorted(net.collect_params().items()):
        rng = np.random.default_rng(seed_of("mxhk", name))
        param.set_data(mx.nd.array(rng.standard_normal(param.shape) * 0.5, dtype="float64"))
    return net


def _train(steps: int, wrap: str, **kwargs: object) -> np.ndarray:
    """Weights after ``steps`` steps with DistributedTrainer or DistributedOptimizer."""
    net = _net()
    params = net.collect_params()
    if wrap == "trainer":
        trainer = hvd.DistributedTrainer(params, "sgd", {"learning_rate": 0.1, "momentum": 0.9},
                                         **kwargs)
    else:
        opt = hvd.DistributedOptimizer(mx.optimizer.SGD(learning_rate=0.1, momentum=0.9),
                                       **kwargs)
        trainer = mx.gluon.Trainer(params, opt, kvstore=None)
    loss_fn = mx.gluon.loss.L2Loss()
    for step in range(steps):
        x = mx.nd.array(make_input(rank(), [4, 6], "float64", "mxhk_x", step, kind="normal"),
                        dtype="float64")
        y = mx.nd.array(make_input(rank(), [4, 3], "float64", "mxhk_y", step, kind="normal"),
                        dtype="float64")
        with mx.autograd.record():
            loss = loss_fn(net(x), y)
        loss.backward()
        trainer.step(4)
    return np.concatenate([p.data().asnumpy().reshape(-1)
                           for _, p in sorted(params.items())])


@pytest.mark.parametrize(("wrap", "num_groups"), [("trainer", 0), ("trainer", 2),
                                                  ("optimizer", 0)])
def test_allreduce_hook_trains_like_no_hook(wrap: str, num_groups: int) -> None:
    """Training through the allreduce hook ends with the weights of no hook (to 1e-12, or
    1e-6 when the rank count is no power of two: _plain_tol())."""
    plain = _train(3, wrap, num_groups=num_groups)
    hooked = _train(3, wrap, num_groups=num_groups, comm_hook=hvd.hooks.allreduce)
    np.testing.assert_allclose(hooked, plain, rtol=_plain_tol(), atol=_plain_tol())


@pytest.mark.parametrize("wrap", ["trainer", "optimizer"])
def test_powersgd_full_rank_trains_like_no_hook(wrap: str) -> None:
    """PowerSGD at full rank (compressing every weight matrix after 2 plain steps) trains to
    the weights of plain allreduce (to 1e-9, or _plain_tol())."""
    plain = _train(5, wrap)
    hook = hvd.hooks.PowerSGD(matrix_approximation_rank=8, start_powerSGD_iter=2,
                              min_compression_rate=0)
    compressed = _train(5, wrap, comm_hook=hook)
    tol = max(_plain_tol(), 1e-9)
    np.testing.assert_allclose(compressed, plain, rtol=tol, atol=tol)
    assert hook.compression_stats()[2] > 0  # the compressed path ran


def _regression_loss(hook: object, steps: int) -> tuple[float, float]:
    """Train a 32-64-16 ReLU network (float64) on a linear target (one bucket); returns
    (initial, final) loss on a fixed evaluation set."""
    net = mx.gluon.nn.HybridSequential(prefix="reg_")
    with net.name_scope():
        net.add(mx.gluon.nn.Dense(64, in_units=32, activation="relu", dtype="float64"))
        net.add(mx.gluon.nn.Dense(16, in_units=64, dtype="float64"))
    net.initialize(mx.init.Zero(), ctx=mx.cpu())
    for name, param in sorted(net.collect_params().items()):
        rng = np.random.default_rng(seed_of("mxreg", name))
        scale = 0.0 if name.endswith("bias") else 1 / np.sqrt(param.shape[1])
        param.set_data(mx.nd.array(rng.standard_normal(param.shape) * scale, dtype="float64"))
    trainer = hvd.DistributedTrainer(net.collect_params(), "sgd",
                                     {"learning_rate": 0.05, "momentum": 0.9},
                                     comm_hook=hook or hvd.hooks.allreduce, num_groups=1)
    target = mx.nd.array(np.random.default_rng(5).standard_normal((32, 16)) / 4, dtype="float64")
    x_eval = mx.nd.array(np.random.default_rng(9).standard_normal((256, 32)), dtype="float64")

    def loss_of(x: mx.nd.NDArray) -> mx.nd.NDArray:
        return ((net(x) - mx.nd.dot(x, target)) ** 2).mean()

    initial = float(loss_of(x_eval).asscalar())
    data = np.random.default_rng(100 + rank())
    for _ in range(steps):
        x = mx.nd.array(data.standard_normal((32, 32)), dtype="float64")
        with mx.autograd.record():
            loss = loss_of(x)
        loss.backward()
        trainer.step(1)
    return initial, float(loss_of(x_eval).asscalar())


def test_powersgd_rank_one_trains_like_allreduce() -> None:
    """Rank 1 from step 10 on reaches a loss within 1.5x that of plain allreduce after 300
    steps, both below 5% of the start."""
    initial, plain = _regression_loss(None, 300)
    _, compressed = _regression_loss(hvd.hooks.PowerSGD(1, start_powerSGD_iter=10), 300)
    assert plain < 0.05 * initial and compressed < 0.05 * initial, (initial, plain, compressed)
    assert compressed < 1.5 * plain, (plain, compressed)


def test_bad_options_are_refused() -> None:
    """A hook that is no callable, or a hook with compression or a predivide factor."""
    params = _params("bad_", [(3,)])
    with pytest.raises(TypeError, match="comm_hook must be callable"):
        hvd.DistributedTrainer(params, "sgd", comm_hook=3)
    with pytest.raises(ValueError, match="cannot be combined"):
        hvd.DistributedTrainer(params, "sgd", comm_hook=hvd.hooks.allreduce,
                               compression=hvd.Compression.fp16)
    with pytest.raises(ValueError, match="cannot be combined"):
        hvd.DistributedOptimizer(mx.optimizer.SGD(), comm_hook=hvd.hooks.allreduce,
                                 gradient_predivide_factor=2.0)
