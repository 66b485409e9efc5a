"""hora.jax training: DistributedOptimizer(optax) on N ranks against one process on the global
batch, broadcast of parameters and optimizer state, and the elastic JaxState.

Run under ``horarun -np N`` (2 to 4 ranks) with a Python that has JAX and optax.
"""

from __future__ import annotations

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import numpy as np
import pytest
from conftest import rank, size

jax = pytest.importorskip("jax")
optax = pytest.importorskip("optax")
hvd = pytest.importorskip("hora.jax", exc_type=ImportError)
jnp = jax.numpy

PER_RANK = 4  # examples of the global batch on each rank


def init_mlp(seed: int, widths: tuple[int, ...] = (5, 8, 3)) -> dict:
    """An MLP's parameters: {"layer<i>": {"w", "b"}}."""
    rng = np.random.default_rng(seed)
    return {f"layer{i}": {"w": jnp.asarray(rng.standard_normal((a, b)), jnp.float32) * 0.5,
                          "b": jnp.asarray(rng.standard_normal(b), jnp.float32) * 0.1}
            for i, (a, b) in enumerate(zip(widths, widths[1:]))}


def forward(params: dict, x: jax.Array) -> jax.Array:
    layers = [params[k] for k in sorted(params)]
    for layer in layers[:-1]:
        x = jnp.tanh(x @ layer["w"] + layer["b"])
    return x @ layers[-1]["w"] + layers[-1]["b"]


def loss(params: dict, batch: tuple[jax.Array, jax.Array]) -> jax.Array:
    x, y = batch
    return jnp.mean((forward(params, x) - y) ** 2)


def global_batch(step: int, width: int = 5, out: int = 3) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1000 + step)
    n = PER_RANK * size()
    return (rng.standard_normal((n, width)).astype(np.float32),
            rng.standard_normal((n, out)).astype(np.float32))


def my_part(batch: tuple[np.ndarray, np.ndarray]) -> tuple[jax.Array, jax.Array]:
    rows = slice(rank() * PER_RANK, (rank() + 1) * PER_RANK)
    return jnp.asarray(batch[0][rows]), jnp.asarray(batch[1][rows])


def assert_trees_close(a: object, b: object, rtol: float = 1e-5, atol: float = 1e-6) -> None:
    la, ta = jax.tree_util.tree_flatten(a)
    lb, tb = jax.tree_util.tree_flatten(b)
    assert ta == tb
    for x, y in zip(la, lb):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=rtol, atol=atol)


def train(params: dict, opt: optax.GradientTransformation, steps: int, distributed: bool,
          loss_fn: object = loss, make_batch: object = global_batch) -> dict:
    """``steps`` SGD steps; distributed ones see this rank's part of each global batch."""
    grad = jax.jit(jax.grad(loss_fn))
    state = opt.init(params)
    for step in range(steps):
        batch = make_batch(step)
        grads = grad(params, my_part(batch) if distributed else tuple(map(jnp.asarray, batch)))
        updates, state = opt.update(grads, state, params)
        params = optax.apply_updates(params, updates)
    return params


def test_mlp_steps_equal_one_process_on_the_global_batch() -> None:
    start = init_mlp(0)
    local = train(start, hvd.DistributedOptimizer(optax.sgd(0.1)), 5, distributed=True)
    reference = train(start, optax.sgd(0.1), 5, distributed=False)
    assert_trees_close(local, reference)


def test_adam_chain_with_momentum_state_matches() -> None:
    start = init_mlp(1)
    inner = optax.chain(optax.clip_by_global_norm(1.0), optax.adam(1e-2))
    local = train(start, hvd.DistributedOptimizer(inner), 4, distributed=True)
    reference = train(start, inner, 4, distributed=False)
    assert_trees_close(local, reference, rtol=1e-4, atol=1e-5)


def test_a_200_leaf_pytree_is_reduced_in_one_grouped_call() -> None:
    params = {f"p{i:03d}": jnp.full((i % 5 + 1,), 0.01 * i, jnp.float32) for i in range(200)}
    assert len(jax.tree_util.tree_leaves(params)) == 200

    def wide_loss(p: dict, batch: tuple[jax.Array, jax.Array]) -> jax.Array:
        x, _ = batch
        return sum(jnp.sum(v ** 2) * jnp.mean(x[:, i % 5]) for i, v in enumerate(p.values()))

    calls = []
    real = hvd.optimizer.grouped_allreduce
    hvd.optimizer.grouped_allreduce = lambda ts, **kw: calls.append(len(ts)) or real(ts, **kw)
    try:
        local = train(params, hvd.DistributedOptimizer(optax.sgd(0.5)), 2, True, wide_loss)
    finally:
        hvd.optimizer.grouped_allreduce = real
    reference = train(params, optax.sgd(0.5), 2, False, wide_loss)
    assert calls == [200, 200]
    assert_trees_close(local, reference)


@pytest.mark.parametrize("passes", [2, 3])
def test_backward_passes_per_step_sums_locally_then_averages(passes: int) -> None:
    start = init_mlp(2)
    opt = hvd.DistributedOptimizer(optax.sgd(0.05), backward_passes_per_step=passes)
    state = opt.init(start)
    params = start
    grad = jax.jit(jax.grad(loss))
    summed = None
    for step in range(passes):
        batch = global_batch(step)
        g = grad(params, my_part(batch))
        updates, state = opt.update(g, state, params)
        if step < passes - 1:
            assert all(not np.any(np.asarray(u)) for u in jax.tree_util.tree_leaves(updates))
        params = optax.apply_updates(params, updates)
        full = grad(start, tuple(map(jnp.asarray, batch)))
        summed = full if summed is None else jax.tree_util.tree_map(jnp.add, summed, full)
    # The average over ranks of each rank's sum of k gradients is the sum of k global gradients.
    expected = jax.tree_util.tree_map(lambda p, g: p - 0.05 * g, start, summed)
    assert_trees_close(params, expected)
    assert int(state.passes) == 0


@pytest.mark.parametrize("compression", ["fp16", "bf16"])
def test_compression_sends_half_precision_and_gives_back_float32(compression: str) -> None:
    wire = {"fp16": jnp.float16, "bf16": jnp.bfloat16}[compression]
    opt = hvd.DistributedOptimizer(optax.sgd(0.1),
                                   compression=getattr(hvd.Compression, compression))
    start = init_mlp(3)
    sent = []
    real = hvd.optimizer.grouped_allreduce
    hvd.optimizer.grouped_allreduce = (
        lambda ts, **kw: sent.extend(t.dtype for t in ts) or real(ts, **kw))
    try:
        grads = jax.grad(loss)(start, my_part(global_batch(0)))
        updates, _ = opt.update(grads, opt.init(start), start)
    finally:
        hvd.optimizer.grouped_allreduce = real
    assert sent and all(d == wire for d in sent)
    assert all(u.dtype == jnp.float32 for u in jax.tree_util.tree_leaves(updates))
    local = train(start, opt, 3, True)
    reference = train(start, optax.sgd(0.1), 3, False)
    assert_trees_close(local, reference, rtol=2e-2, atol=2e-3)


def test_invalid_arguments_are_refused() -> None:
    with pytest.raises(ValueError):
        hvd.DistributedOptimizer(optax.sgd(0.1), backward_passes_per_step=0)
    with pytest.raises(ValueError):
        hvd.DistributedOptimizer(optax.sgd(0.1), op=hvd.Min)
    with pytest.raises(TypeError):
        hvd.DistributedOptimizer("sgd")


def jitted_train(params: dict, opt: optax.GradientTransformation, steps: int,
                 distributed: bool, loss_fn: object = loss) -> dict:
    """``train`` with the whole step (gradient, reduction, update) in one jitted function."""

    @jax.jit
    def step(p: dict, state: object, batch: tuple) -> tuple:
        grads = jax.grad(loss_fn)(p, batch)
        updates, state = opt.update(grads, state, p)
        return optax.apply_updates(p, updates), state

    state = opt.init(params)
    for i in range(steps):
        batch = global_batch(i)
        params, state = step(params, state,
                             my_part(batch) if distributed else tuple(map(jnp.asarray, batch)))
    return params


def test_a_jitted_step_of_200_leaves_is_one_custom_call_and_equals_one_process() -> None:
    params = {f"p{i:03d}": jnp.full((i % 5 + 1,), 0.01 * i, jnp.float32) for i in range(200)}

    def wide_loss(p: dict, batch: tuple[jax.Array, jax.Array]) -> jax.Array:
        x, _ = batch
        return sum(jnp.sum(v ** 2) * jnp.mean(x[:, i % 5]) for i, v in enumerate(p.values()))

    opt = hvd.DistributedOptimizer(optax.sgd(0.5))

    def step(p: dict, state: object, batch: tuple) -> tuple:
        updates, state = opt.update(jax.grad(wide_loss)(p, batch), state, p)
        return optax.apply_updates(p, updates), state

    text = jax.jit(step).lower(params, opt.init(params), my_part(global_batch(0))).as_text()
    assert text.count("custom_call @hora_collective") == 1
    local = jitted_train(params, opt, 2, True, wide_loss)
    reference = train(params, optax.sgd(0.5), 2, False, wide_loss)
    assert_trees_close(local, reference)


def test_a_jitted_adam_step_equals_the_eager_one() -> None:
    start = init_mlp(4)
    inner = optax.chain(optax.clip_by_global_norm(1.0), optax.adam(1e-2))
    jitted = jitted_train(start, hvd.DistributedOptimizer(inner), 4, distributed=True)
    eager = train(start, hvd.DistributedOptimizer(inner), 4, distributed=True)
    assert_trees_close(jitted, eager, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("compression", ["none", "bf16"])
def test_jitted_backward_passes_per_step_equal_the_eager_ones(compression: str) -> None:
    start = init_mlp(5)

    def make() -> optax.GradientTransformation:
        return hvd.DistributedOptimizer(optax.sgd(0.05), backward_passes_per_step=2,
                                        compression=getattr(hvd.Compression, compression))

    jitted = jitted_train(start, make(), 4, distributed=True)
    eager = train(start, make(), 4, distributed=True)
    assert_trees_close(jitted, eager, rtol=1e-6, atol=1e-7)
    assert not all(np.array_equal(np.asarray(a), np.asarray(b)) for a, b in
                   zip(jax.tree_util.tree_leaves(jitted), jax.tree_util.tree_leaves(start)))


def test_broadcast_parameters_and_optimizer_state_return_the_roots() -> None:
    root = size() - 1
    params = init_mlp(10 + rank())
    params["step"] = rank()  # a non-array leaf travels as an object
    got = hvd.broadcast_parameters(params, root_rank=root)
    expected = init_mlp(10 + root)
    expected["step"] = root
    assert_trees_close(got, expected, rtol=0, atol=0)
    opt = optax.adam(0.1)
    state = opt.init(init_mlp(10 + rank()))
    state = jax.tree_util.tree_map(lambda v: v + rank(), state)
    got_state = hvd.broadcast_optimizer_state(state, root_rank=root)
    assert_trees_close(got_state, jax.tree_util.tree_map(lambda v: v + root - rank(), state),
                       rtol=0, atol=0)


def test_elastic_state_syncs_from_rank_zero_and_restores_the_commit() -> None:
    params = init_mlp(20 + rank())
    state = hvd.elastic.JaxState(params=params, opt_state=None, epoch=rank())
    state.sync()
    assert state.epoch == 0
    assert_trees_close(state.params, init_mlp(20), rtol=0, atol=0)
    state.commit()
    state.params = jax.tree_util.tree_map(lambda v: v * 0, state.params)
    state.epoch = 7
    state.restore()
    assert state.epoch == 0
    assert_trees_close(state.params, init_mlp(20), rtol=0, atol=0)
