"""Communication hooks of hora.tensorflow (``comm_hook=`` of DistributedGradientTape and of the
Keras DistributedOptimizer), eager mode.

Run as ``horarun -np N python -m pytest -q tests/parallel/test_tensorflow_hooks.py`` (N = 2, 3).
Gradients are made exact by the loss ``sum(v * g)`` (its gradient is ``g``), so that results can
be compared bit for bit with a NumPy reference; training runs compare with the path without a
hook.
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")

import hora.keras
import hora.tensorflow as hvd
import keras
import numpy as np
import pytest
import tensorflow as tf
from conftest import make_input, rank, reduce_ref, size
from hook_refs import SHAPES, WIRE, compressed_ref, hook_input
from hora.tensorflow.hooks import PowerSGD

HOOKS = {"allreduce": hvd.hooks.allreduce, "fp16": hvd.hooks.fp16_compress,
         "bf16": hvd.hooks.bf16_compress}


def _exact_grads(variables: list[tf.Variable], grads: list[np.ndarray], **kwargs: object
                 ) -> list[np.ndarray]:
    """The tape's reduced gradients for the loss ``sum_i sum(v_i * g_i)``."""
    with tf.GradientTape() as tape:
        loss = tf.add_n([tf.reduce_sum(v * tf.constant(g)) for v, g in zip(variables, grads)])
    tape = hvd.DistributedGradientTape(tape, **kwargs)
    return [g.numpy() for g in tape.gradient(loss, variables)]


@pytest.mark.parametrize("groups", [None, 2])
@pytest.mark.parametrize("hook", list(HOOKS))
def test_tape_hook_matches_numpy_reference(hook: str, groups: object) -> None:
    """allreduce gives the exact average; fp16/bf16 give PyTorch's rounding bit for bit; for
    every shape, one bucket per gradient and two fused buckets."""
    variables = [tf.Variable(tf.zeros(s, tf.float32)) for s in SHAPES]
    key = f"{hook}.{groups}"
    grads = [hook_input(rank(), i, key) for i in range(len(SHAPES))]
    out = _exact_grads(variables, grads, comm_hook=HOOKS[hook], groups=groups)
    for i, got in enumerate(out):
        arrays = [hook_input(r, i, key) for r in range(size())]
        expected = (reduce_ref(arrays, "average", "float32") if hook == "allreduce"
                    else compressed_ref(arrays, WIRE[hook]))
        assert got.dtype == np.float32 and got.shape == SHAPES[i]
        np.testing.assert_array_equal(got, expected, err_msg=f"{SHAPES[i]}")


def _model() -> keras.Model:
    model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(8, activation="tanh"),
                              keras.layers.Dense(3)])
    model.set_weights([make_input(0, w.shape, "float32", "tfhk", i, kind="normal") * 0.5
                       for i, w in enumerate(model.get_weights())])
    return model


def _train_keras(steps: int, **kwargs: object) -> np.ndarray:
    """Weights after ``steps`` eager steps of the Keras DistributedOptimizer (SGD, momentum)."""
    model = _model()
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.1, momentum=0.9), **kwargs)
    for step in range(steps):
        x = make_input(rank(), [4, 6], "float32", "tfhk_x", step, kind="normal")
        y = make_input(rank(), [4, 3], "float32", "tfhk_y", step, kind="normal")
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((model(x) - y) ** 2)
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
    return np.concatenate([w.reshape(-1) for w in model.get_weights()])


@pytest.mark.parametrize("groups", [None, 2])
def test_keras_allreduce_hook_trains_like_no_hook(groups: object) -> None:
    """The Keras optimizer with the allreduce hook ends with the weights of no hook (to 1e-6:
    only the order of a fused sum may differ)."""
    plain = _train_keras(3, groups=groups)
    hooked = _train_keras(3, groups=groups, comm_hook=hvd.hooks.allreduce)
    np.testing.assert_allclose(hooked, plain, rtol=1e-6, atol=1e-6)


def test_powersgd_full_rank_equals_allreduce() -> None:
    """PowerSGD at full rank (compressing every matrix, batched by shape, after 2 plain steps)
    gives the average of the gradients to 1e-9 at every step (float64)."""
    shapes = [(6, 4), (6, 4), (3, 5, 2), (7,)]
    variables = [tf.Variable(tf.zeros(s, tf.float64)) for s in shapes]
    hook = PowerSGD(matrix_approximation_rank=10, start_powerSGD_iter=2, min_compression_rate=0,
                    batch_tensors_with_same_shape=True)
    for step in range(5):
        grads = [make_input(rank(), s, "float64", "tfpsgd", step, i, kind="normal")
                 for i, s in enumerate(shapes)]
        out = _exact_grads(variables, grads, comm_hook=hook, groups=1)
        for i, s in enumerate(shapes):
            arrays = [make_input(r, s, "float64", "tfpsgd", step, i, kind="normal")
                      for r in range(size())]
            np.testing.assert_allclose(out[i], np.mean(arrays, axis=0), rtol=1e-9, atol=1e-9)
    assert hook.compression_stats()[2] > 0  # the compressed path ran


def _regression_loss(hook: PowerSGD | None, steps: int) -> tuple[float, float]:
    """Train a 32-64-16 ReLU network (float64) on a linear target with the Keras optimizer (one
    bucket); returns (initial, final) loss on a fixed evaluation set."""
    rng = np.random.default_rng(0)
    w1 = tf.Variable(rng.standard_normal((32, 64)) / 6)
    w2 = tf.Variable(rng.standard_normal((64, 16)) / 8)
    b1, b2 = tf.Variable(np.zeros(64)), tf.Variable(np.zeros(16))
    variables = [w1, b1, w2, b2]
    target = np.random.default_rng(5).standard_normal((32, 16)) / 4
    x_eval = np.random.default_rng(9).standard_normal((256, 32))

    def loss_of(x: np.ndarray) -> tf.Tensor:
        return tf.reduce_mean((tf.nn.relu(x @ w1 + b1) @ w2 + b2 - x @ target) ** 2)

    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.05, momentum=0.9),
                                   comm_hook=hook or hvd.hooks.allreduce, groups=1)
    initial = float(loss_of(x_eval))
    data = np.random.default_rng(100 + rank())
    for _ in range(steps):
        x = data.standard_normal((32, 32))
        with tf.GradientTape() as tape:
            loss = loss_of(x)
        opt.apply_gradients(zip(tape.gradient(loss, variables), variables))
    return initial, float(loss_of(x_eval))


def test_powersgd_rank_one_trains_like_allreduce() -> None:
    """Rank 1 from step 10 on reaches a loss within 1.5x that of plain allreduce after 150
    steps, both below 5% of the start."""
    initial, plain = _regression_loss(None, 150)
    _, compressed = _regression_loss(PowerSGD(1, start_powerSGD_iter=10), 150)
    assert plain < 0.05 * initial and compressed < 0.05 * initial, (initial, plain, compressed)
    assert compressed < 1.5 * plain, (plain, compressed)


def test_tf_function_is_refused() -> None:
    """A hook needs eager mode: inside tf.function the tape says so."""
    v = tf.Variable(tf.ones(3))

    @tf.function
    def step() -> tf.Tensor:
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(v * v)
        tape = hvd.DistributedGradientTape(tape, comm_hook=hvd.hooks.allreduce)
        return tape.gradient(loss, [v])[0]

    with pytest.raises(RuntimeError, match="eager mode only"):
        step()


def test_bad_options_are_refused() -> None:
    """A hook that is no callable, or a hook with compression or another op, is refused."""
    with tf.GradientTape() as tape:
        pass
    with pytest.raises(TypeError, match="comm_hook must be callable"):
        hvd.DistributedGradientTape(tape, comm_hook=3)
    with pytest.raises(ValueError, match="cannot be combined"):
        hvd.DistributedOptimizer(keras.optimizers.SGD(0.1), comm_hook=hvd.hooks.allreduce,
                                 compression=hvd.Compression.fp16)
    with pytest.raises(ValueError, match="op must be Average"):
        hvd.DistributedGradientTape(tape, comm_hook=hvd.hooks.allreduce, op=hvd.Sum)
    with pytest.raises(ValueError, match="cannot be combined"):
        hvd.DistributedGradientTape(tape, comm_hook=hvd.hooks.allreduce,
                                    gradient_predivide_factor=2.0)


def test_hook_returning_no_future_is_refused() -> None:
    """A hook that returns no future gets a clear TypeError."""
    v = tf.Variable(tf.ones(2))
    with pytest.raises(TypeError, match="must return a future"):
        _exact_grads([v], [np.ones(2, np.float32)], comm_hook=lambda bucket: bucket.tensors)


def _fit(**kwargs: object) -> np.ndarray:
    """Weights after one epoch of ``model.fit`` (eager) on this rank's 12 rows, with
    ``hora.keras.DistributedOptimizer``."""
    model = _model()
    opt = hora.keras.DistributedOptimizer(keras.optimizers.SGD(0.1), **kwargs)
    model.compile(optimizer=opt, loss="mse", run_eagerly=True)
    x = make_input(rank(), [12, 6], "float32", "tffit_x", kind="normal")
    y = make_input(rank(), [12, 3], "float32", "tffit_y", kind="normal")
    model.fit(x, y, batch_size=4, epochs=1, shuffle=False, verbose=0)
    return np.concatenate([w.reshape(-1) for w in model.get_weights()])


def test_model_fit_with_run_eagerly() -> None:
    """model.fit with run_eagerly=True runs the hook: full-rank PowerSGD (after 2 plain steps)
    ends with the weights of no hook (to 1e-5, float32)."""
    plain = _fit()
    assert hora.keras.hooks.PowerSGD is PowerSGD
    hook = hora.keras.hooks.PowerSGD(matrix_approximation_rank=8, start_powerSGD_iter=2, min_compression_rate=0)
    np.testing.assert_allclose(_fit(comm_hook=hook), plain, rtol=1e-5, atol=1e-5)
    assert hook.compression_stats()[2] > 0


def test_model_fit_in_a_graph_is_refused() -> None:
    """model.fit compiled into a graph (the default) raises RuntimeError naming eager mode."""
    model = _model()
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.1),
                                                     comm_hook=hvd.hooks.allreduce), loss="mse")
    x = np.zeros((4, 6), np.float32)
    with pytest.raises(RuntimeError, match="eager mode only"):
        model.fit(x, np.zeros((4, 3), np.float32), batch_size=4, epochs=1, verbose=0)


def test_hook_sees_numpy_buckets_in_order() -> None:
    """A bucket holds NumPy copies of the gradients; its index is the position of its first
    gradient; every bucket's hook is called before any future is waited for, and the futures
    are waited for in index order."""
    events: list[tuple[str, int]] = []
    seen: list[tuple[int, list[type]]] = []

    def hook(bucket: hvd.hooks.GradBucket) -> hvd.hooks.HookFuture:
        events.append(("call", bucket.index))
        seen.append((bucket.index, [type(t) for t in bucket.tensors]))
        inner = hvd.hooks.allreduce(bucket)

        def finish() -> list[np.ndarray]:
            events.append(("wait", bucket.index))
            return inner.wait()

        return hvd.hooks.HookFuture(finish)

    shapes = [(2,), (3, 2), (4,), (1,), (5,)]
    variables = [tf.Variable(tf.zeros(s)) for s in shapes]
    grads = [np.full(s, float(rank() + i), np.float32) for i, s in enumerate(shapes)]
    out = _exact_grads(variables, grads, comm_hook=hook, groups=[[variables[3], variables[1]]])
    for i, s in enumerate(shapes):
        np.testing.assert_array_equal(out[i], np.full(s, (size() - 1) / 2 + i, np.float32))
    assert sorted(index for index, _ in seen) == [0, 1, 2, 4]
    assert all(t is np.ndarray for _, types in seen for t in types)
    assert [e for e, _ in events] == ["call"] * 4 + ["wait"] * 4
    assert [i for e, i in events if e == "wait"] == [0, 1, 2, 4]
