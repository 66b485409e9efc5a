"""Communication hooks of hora.jax (``DistributedOptimizer(comm_hook=...)``), eagerly.

Run under ``horarun -np N`` (2 to 4 ranks) with a Python that has JAX and optax. The optimizer
is optax's SGD with learning rate 1 from zero parameters, so its update is minus the reduced
gradient and can be compared bit for bit with a NumPy reference; training runs compare with the
path without a hook.
"""

from __future__ import annotations

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import numpy as np
import pytest
from conftest import make_input, rank, reduce_ref, size
from hook_refs import SHAPES, WIRE, compressed_ref, hook_input

jax = pytest.importorskip("jax")
optax = pytest.importorskip("optax")
hvd = pytest.importorskip("hora.jax", exc_type=ImportError)
jnp = jax.numpy

jax.config.update("jax_enable_x64", True)

HOOKS = {"allreduce": "allreduce", "fp16": "fp16_compress", "bf16": "bf16_compress"}


def reduced(grads: list[np.ndarray], **kwargs: object) -> list[np.ndarray]:
    """The gradients the wrapped optax SGD(1) sees: minus its update."""
    opt = hvd.DistributedOptimizer(optax.sgd(1.0), **kwargs)
    params = [jnp.zeros(g.shape, g.dtype) for g in grads]
    updates, _ = opt.update([jnp.asarray(g) for g in grads], opt.init(params), params)
    return [-np.asarray(u) for u in updates]


@pytest.mark.parametrize("hook", list(HOOKS))
def test_hook_matches_numpy_reference(hook: str) -> None:
    """allreduce gives the exact average; fp16/bf16 give PyTorch's rounding bit for bit; every
    shape, all in one bucket."""
    grads = [hook_input(rank(), i, f"{hook}.jax") for i in range(len(SHAPES))]
    out = reduced(grads, comm_hook=getattr(hvd.hooks, HOOKS[hook]))
    for i, got in enumerate(out):
        arrays = [hook_input(r, i, f"{hook}.jax") for r in range(size())]
        expected = (reduce_ref(arrays, "average", "float32") if hook == "allreduce"
                    else compressed_ref(arrays, WIRE[hook]))
        assert got.dtype == np.float32 and got.shape == SHAPES[i]
        np.testing.assert_array_equal(got, expected, err_msg=f"{SHAPES[i]}")


def test_powersgd_full_rank_equals_allreduce() -> None:
    """PowerSGD at full rank (every matrix compressed, batched by shape, after 2 plain steps)
    gives the average of the gradients to 1e-9 at every step (float64)."""
    shapes = [(6, 4), (6, 4), (3, 5, 2), (7,)]
    hook = hvd.hooks.PowerSGD(matrix_approximation_rank=10, start_powerSGD_iter=2,
                              min_compression_rate=0, batch_tensors_with_same_shape=True)
    opt = hvd.DistributedOptimizer(optax.sgd(1.0), comm_hook=hook)
    params = [jnp.zeros(s, jnp.float64) for s in shapes]
    state = opt.init(params)
    for step in range(5):
        grads = [make_input(rank(), s, "float64", "jaxpsgd", step, i, kind="normal")
                 for i, s in enumerate(shapes)]
        updates, state = opt.update([jnp.asarray(g) for g in grads], state, params)
        for i, s in enumerate(shapes):
            arrays = [make_input(r, s, "float64", "jaxpsgd", step, i, kind="normal")
                      for r in range(size())]
            np.testing.assert_allclose(-np.asarray(updates[i]), np.mean(arrays, axis=0),
                                       rtol=1e-9, atol=1e-9)
    assert hook.compression_stats()[2] > 0  # the compressed path ran


def _regression_loss(hook: object, steps: int) -> tuple[float, float]:
    """Train a 32-64-16 ReLU network (float64) on a linear target; (initial, final) loss on a
    fixed evaluation set."""
    rng = np.random.default_rng(0)
    params = {"w1": jnp.asarray(rng.standard_normal((32, 64)) / 6), "b1": jnp.zeros(64),
              "w2": jnp.asarray(rng.standard_normal((64, 16)) / 8), "b2": jnp.zeros(16)}
    target = np.random.default_rng(5).standard_normal((32, 16)) / 4
    x_eval = jnp.asarray(np.random.default_rng(9).standard_normal((256, 32)))

    def loss(p: dict, x: jax.Array) -> jax.Array:
        hidden = jax.nn.relu(x @ p["w1"] + p["b1"])
        return jnp.mean((hidden @ p["w2"] + p["b2"] - x @ target) ** 2)

    opt = hvd.DistributedOptimizer(optax.sgd(0.05, momentum=0.9),
                                   comm_hook=hook or hvd.hooks.allreduce)
    state = opt.init(params)
    grad = jax.jit(jax.grad(loss))
    initial = float(loss(params, x_eval))
    data = np.random.default_rng(100 + rank())
    for _ in range(steps):
        updates, state = opt.update(grad(params, jnp.asarray(data.standard_normal((32, 32)))),
                                    state, params)
        params = optax.apply_updates(params, updates)
    return initial, float(loss(params, x_eval))


def test_powersgd_rank_one_trains_like_allreduce() -> None:
    """Rank 1 from step 10 on reaches a loss within 1.5x that of plain allreduce after 150
    steps, both below 5% of the start."""
    initial, plain = _regression_loss(None, 150)
    _, compressed = _regression_loss(hvd.hooks.PowerSGD(1, start_powerSGD_iter=10), 150)
    assert plain < 0.05 * initial and compressed < 0.05 * initial, (initial, plain, compressed)
    assert compressed < 1.5 * plain, (plain, compressed)


def test_a_hook_inside_jit_is_refused() -> None:
    opt = hvd.DistributedOptimizer(optax.sgd(0.1), comm_hook=hvd.hooks.allreduce)
    params = [jnp.ones(3)]
    with pytest.raises(hvd.NotSupportedError, match="runs the hook eagerly"):
        jax.jit(opt.update)(params, opt.init(params), params)


def test_bad_options_are_refused() -> None:
    with pytest.raises(TypeError, match="comm_hook must be callable"):
        hvd.DistributedOptimizer(optax.sgd(0.1), comm_hook=3)
    with pytest.raises(ValueError, match="cannot be combined"):
        hvd.DistributedOptimizer(optax.sgd(0.1), comm_hook=hvd.hooks.allreduce,
                                 compression=hvd.Compression.fp16)
    with pytest.raises(ValueError, match="op must be Average"):
        hvd.DistributedOptimizer(optax.sgd(0.1), comm_hook=hvd.hooks.allreduce, op=hvd.Sum)
    with pytest.raises(TypeError, match="must return a future"):
        reduced([np.ones(2, np.float32)], comm_hook=lambda bucket: bucket.tensors)
