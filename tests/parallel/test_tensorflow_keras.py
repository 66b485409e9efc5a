"""Keras 3 training with hora.tensorflow.keras / hora.keras on N ranks.

Run as ``horarun -np N python -m pytest -q tests/parallel/test_tensorflow_keras.py`` (N = 2..4).
The central check: ``model.fit`` with ``DistributedOptimizer`` on N ranks, each with its shard
of every global batch, ends with the same weights as one process training on the global
batches (plain SGD, a small dense model), to about 1e-5.
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")

from typing import Any

import hora
import hora.keras
import hora.tensorflow.keras as hvd
import keras
import numpy as np
import pytest
import tensorflow as tf
from conftest import assert_close, hora_mappings, make_input, rank, size
from hora.tensorflow import keras_optimizer

FEATURES = 5
OUTPUTS = 2
LOCAL_BATCH = 4


def build_model(seed_rank: int = 0, tag: str = "model") -> keras.Model:
    """A small dense model whose initial weights come from a seed (``seed_rank``)."""
    model = keras.Sequential([
        keras.Input((FEATURES,)),
        keras.layers.Dense(8, activation="tanh"),
        keras.layers.Dense(OUTPUTS),
    ])
    weights = [make_input(seed_rank, w.shape, "float32", tag, i, kind="normal") * 0.5
               for i, w in enumerate(model.get_weights())]
    model.set_weights(weights)
    return model


def global_data(steps: int, global_batch: int, tag: str) -> tuple[np.ndarray, np.ndarray]:
    """Inputs and targets of ``steps`` global batches (the same on every rank)."""
    x = make_input(0, [steps * global_batch, FEATURES], "float32", tag, "x", kind="normal")
    y = make_input(0, [steps * global_batch, OUTPUTS], "float32", tag, "y", kind="normal")
    return x, y


def shard(array: np.ndarray, parts_per_batch: int, part: int) -> np.ndarray:
    """Rows of ``part`` out of every global batch made of ``parts_per_batch`` equal parts of
    ``LOCAL_BATCH`` rows, in batch order."""
    per_batch = array.reshape(-1, parts_per_batch, LOCAL_BATCH, array.shape[-1])
    return per_batch[:, part].reshape(-1, array.shape[-1])


def gathered(array: np.ndarray, name: str) -> np.ndarray:
    """Every rank's copy of ``array``, stacked (shape [size, ...])."""
    flat = hora.allgather(np.ascontiguousarray(array, dtype=np.float64).reshape(1, -1),
                          name=name)
    return flat.reshape((size(),) + array.shape)


def assert_weights_close(actual: list, expected: list, tol: float = 1e-5) -> None:
    """Every weight array matches to ``tol``."""
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        assert_close(np.asarray(a), np.asarray(e), "float32", rtol=tol, atol=tol)


def train_one_process(model: keras.Model, optimizer: keras.optimizers.Optimizer,
                      x: np.ndarray, y: np.ndarray, batch_size: int, epochs: int = 1) -> list:
    """The reference: one process training on the global batches in order with mean squared
    error (what ``model.fit`` computes), in a plain eager loop; returns the final weights."""
    loss_fn = keras.losses.MeanSquaredError()
    for _ in range(epochs):
        for start in range(0, len(x), batch_size):
            with tf.GradientTape() as tape:
                prediction = model(x[start:start + batch_size], training=True)
                loss = loss_fn(y[start:start + batch_size], prediction)
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return model.get_weights()


class Recorder(keras.callbacks.Callback):
    """Records logs and learning rates as the callbacks around it see them."""

    def __init__(self) -> None:
        super().__init__()
        self.epoch_logs: list[dict] = []
        self.batch_lrs: list[float] = []

    def on_train_batch_begin(self, batch: int, logs: dict | None = None) -> None:
        self.batch_lrs.append(float(np.asarray(self.model.optimizer.learning_rate)))

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        self.epoch_logs.append(dict(logs or {}))


# --------------------------------------------------------------------------------- model.fit


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_fit_equals_single_process_training(momentum: float) -> None:
    """N ranks with one shard each == one process on the global batches (SGD)."""
    steps, epochs = 3, 2
    x, y = global_data(steps, size() * LOCAL_BATCH, f"fit.{momentum}")

    expected = train_one_process(build_model(tag=f"fit.{momentum}"),
                                 keras.optimizers.SGD(0.05, momentum=momentum), x, y,
                                 size() * LOCAL_BATCH, epochs)

    model = build_model(tag=f"fit.{momentum}")
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.05, momentum=momentum))
    model.compile(optimizer=opt, loss="mse")
    model.fit(shard(x, size(), rank()), shard(y, size(), rank()), batch_size=LOCAL_BATCH,
              epochs=epochs, shuffle=False, verbose=0)

    assert_weights_close(model.get_weights(), expected)
    assert int(opt.iterations) == steps * epochs


def test_fit_backward_passes_per_step() -> None:
    """Two local passes aggregated (and averaged) per reduction == one process on batches twice
    as large; the iteration counter still advances on every batch."""
    steps = 2
    x, y = global_data(steps, 2 * size() * LOCAL_BATCH, "bpps")

    expected = train_one_process(build_model(tag="bpps"), keras.optimizers.SGD(0.05), x, y,
                                 2 * size() * LOCAL_BATCH)

    model = build_model(tag="bpps")
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.05), backward_passes_per_step=2,
                                   average_aggregated_gradients=True)
    model.compile(optimizer=opt, loss="mse")
    # Each big batch has 2 * size parts; rank r's pass p of a step uses part p * size + r.
    xs = np.concatenate([shard(x, 2 * size(), p * size() + rank())
                         .reshape(steps, LOCAL_BATCH, FEATURES) for p in range(2)], axis=1)
    ys = np.concatenate([shard(y, 2 * size(), p * size() + rank())
                         .reshape(steps, LOCAL_BATCH, OUTPUTS) for p in range(2)], axis=1)
    model.fit(xs.reshape(-1, FEATURES), ys.reshape(-1, OUTPUTS), batch_size=LOCAL_BATCH,
              shuffle=False, verbose=0)

    assert_weights_close(model.get_weights(), expected)
    assert int(opt.iterations) == 2 * steps


@pytest.mark.parametrize("sparse_as_dense", [False, True])
def test_fit_embedding_sparse_gradients(sparse_as_dense: bool) -> None:
    """Embedding gradients (IndexedSlices) gathered or reduced densely give the same training
    as one process."""
    steps, vocab = 2, 11
    global_batch = size() * LOCAL_BATCH
    ids = (np.arange(steps * global_batch) * 7 % vocab).astype(np.int32).reshape(-1, 1)
    y = make_input(0, [steps * global_batch, 3], "float32", "emb_y", kind="normal")

    def build() -> keras.Model:
        model = keras.Sequential([keras.Input((1,), dtype="int32"),
                                  keras.layers.Embedding(vocab, 3), keras.layers.Flatten()])
        model.set_weights([make_input(0, [vocab, 3], "float32", "emb_w", kind="normal")])
        return model

    expected = train_one_process(build(), keras.optimizers.SGD(0.1), ids, y, global_batch)

    model = build()
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.1),
                                                     sparse_as_dense=sparse_as_dense),
                  loss="mse")
    part_ids = ids.reshape(steps, size(), LOCAL_BATCH, 1)[:, rank()].reshape(-1, 1)
    part_y = y.reshape(steps, size(), LOCAL_BATCH, 3)[:, rank()].reshape(-1, 3)
    model.fit(part_ids, part_y, batch_size=LOCAL_BATCH, shuffle=False, verbose=0)
    assert_weights_close(model.get_weights(), expected)


# -------------------------------------------------------------------------------- callbacks


def test_broadcast_global_variables_callback() -> None:
    """Ranks start from different weights; after fit with the callback (learning rate 0) every
    rank holds rank 0's weights, and optimizer variables agree."""
    model = build_model(seed_rank=rank(), tag="bcast")
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.0, momentum=0.5))
    model.compile(optimizer=opt, loss="mse", run_eagerly=True)
    root_weights = build_model(seed_rank=0, tag="bcast").get_weights()
    x, y = global_data(1, LOCAL_BATCH, "bcast")
    model.fit(x, y, batch_size=LOCAL_BATCH, verbose=0,
              callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)])
    assert_weights_close(model.get_weights(), root_weights, tol=0.0)
    for i, w in enumerate(model.get_weights() + [v.numpy() for v in opt.variables]):
        everyone = gathered(np.asarray(w, dtype=np.float64), f"bcast.check.{i}")
        assert (everyone == everyone[0]).all()


def test_metric_average_callback() -> None:
    """Epoch metrics are replaced by their average over the ranks."""
    model = build_model(tag="metric")
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.01)), loss="mse",
                  metrics=["mae"], run_eagerly=True)
    x = make_input(rank(), [2 * LOCAL_BATCH, FEATURES], "float32", "metric_x", kind="normal")
    y = make_input(rank(), [2 * LOCAL_BATCH, OUTPUTS], "float32", "metric_y", kind="normal")
    before, after = Recorder(), Recorder()
    model.fit(x, y, batch_size=LOCAL_BATCH, epochs=2, verbose=0,
              callbacks=[before, hvd.callbacks.MetricAverageCallback(), after])
    for epoch in range(2):
        for key in ("loss", "mae"):
            local = np.array([before.epoch_logs[epoch][key]])
            expected = gathered(local, f"metric.{epoch}.{key}").mean()
            assert after.epoch_logs[epoch][key] == pytest.approx(expected, rel=1e-9)


def test_learning_rate_warmup_callback() -> None:
    """The rate ramps from initial_lr / size to initial_lr over the warmup, batch by batch."""
    steps, warmup, initial = 2, 2, 0.4
    model = build_model(tag="warmup")
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.1, momentum=0.9)),
                  loss="mse", run_eagerly=True)
    x, y = global_data(steps, LOCAL_BATCH, "warmup")
    recorder = Recorder()
    history = model.fit(x, y, batch_size=LOCAL_BATCH, epochs=warmup + 1, verbose=0, callbacks=[
        hvd.callbacks.LearningRateWarmupCallback(initial, warmup_epochs=warmup), recorder])
    n = size()
    expected = [initial / n * ((e + b / steps) * (n - 1) / warmup + 1)
                for e in range(warmup) for b in range(steps)] + [initial] * steps
    assert recorder.batch_lrs == pytest.approx(expected, rel=1e-6)
    assert history.history["lr"][-1] == pytest.approx(initial, rel=1e-6)


def test_learning_rate_schedule_callback_and_momentum_correction() -> None:
    """Staircase schedule in an epoch range; momentum buffers follow the rate."""
    model = build_model(tag="schedule")
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.2, momentum=0.9))
    model.compile(optimizer=opt, loss="mse", run_eagerly=True)
    x, y = global_data(1, LOCAL_BATCH, "schedule")
    recorder = Recorder()
    schedule = hvd.callbacks.LearningRateScheduleCallback(
        initial_lr=0.2, multiplier=lambda epoch: 0.5 ** epoch, start_epoch=1, end_epoch=3)
    model.fit(x, y, batch_size=LOCAL_BATCH, epochs=4, verbose=0, callbacks=[schedule, recorder])
    assert recorder.batch_lrs == pytest.approx([0.2, 0.1, 0.05, 0.05])

    for m in opt.momentums:
        m.assign(tf.ones(m.shape, m.dtype))
    schedule.set_model(model)
    schedule._adjust(0.0)
    assert float(np.asarray(opt.learning_rate)) == pytest.approx(0.2)
    for m in opt.momentums:
        np.testing.assert_allclose(np.asarray(m), np.full(m.shape, 0.2 / 0.05), rtol=1e-6)


# -------------------------------------------------------------------------------- optimizers


def test_distributed_optimizer_class_and_custom_loop() -> None:
    """The wrapper is a subclass of the optimizer's class with the same config; in a custom
    loop apply_gradients averages the gradients across ranks."""
    base = keras.optimizers.SGD(0.5, momentum=0.0)
    opt = hvd.DistributedOptimizer(base)
    assert isinstance(opt, keras.optimizers.SGD) and type(opt).__name__ == "SGD"
    assert opt.get_config() == base.get_config()
    assert keras_optimizer.is_distributed(opt) and not keras_optimizer.is_distributed(base)
    variables = [keras.Variable(np.zeros(3, np.float32)), keras.Variable(np.zeros(2, np.float32)),
                 keras.Variable(np.zeros([2, 2], np.float32))]

    @tf.function(autograph=False)
    def step(g: tf.Tensor) -> None:
        opt.apply_gradients([(tf.fill(v.shape, g), v) for v in variables])

    g = tf.constant(float(rank() + 1))
    step(g)
    mean = np.mean([r + 1.0 for r in range(size())])
    for v in variables:
        np.testing.assert_allclose(np.asarray(v), np.full(v.shape, -0.5 * mean), rtol=1e-6)
    graph = step.get_concrete_function(g).graph
    calls = [op.name for op in graph.get_operations() if op.type == "PyFunc"]
    submits = [c for c in calls if "Submit" in c]
    assert (len(submits), len(calls) - len(submits)) == ((3, 1) if size() > 1 else (0, 0)), (
        "one submit per gradient and one wait for all")
    with pytest.raises(ValueError):
        hvd.DistributedOptimizer(object())
    import hora.tensorflow as htf

    assert keras_optimizer.is_distributed(htf.DistributedOptimizer(keras.optimizers.Adam()))


@pytest.mark.parametrize("scale", [True, False])
@pytest.mark.parametrize("passes", [1, 2])
def test_partial_distributed_optimizer_keeps_local_gradients(scale: bool, passes: int) -> None:
    """The weights of local_layers take this rank's own gradient (divided by the set's size
    unless scale_local_gradients=False); every other weight takes the average, in a
    tf.function step and with backward_passes_per_step > 1 too (hora.keras spelling)."""
    local = keras.layers.Dense(2)
    shared = keras.layers.Dense(2)
    for layer in (local, shared):
        layer.build((None, 3))
        layer.set_weights([np.zeros(w.shape, np.float32) for w in layer.get_weights()])
    opt = hora.keras.PartialDistributedOptimizer(
        keras.optimizers.SGD(1.0), local_layers=local, scale_local_gradients=scale,
        backward_passes_per_step=passes)
    variables = local.trainable_weights + shared.trainable_weights

    @tf.function(autograph=False)
    def step(g: tf.Tensor) -> None:
        opt.apply_gradients([(tf.fill(v.shape, g), v) for v in variables])

    mine = float(rank() + 1)
    for _ in range(passes):
        step(tf.constant(mine))
    mean = np.mean([r + 1.0 for r in range(size())])
    own = mine / size() if scale else mine
    for v in local.trainable_weights:
        np.testing.assert_allclose(np.asarray(v), np.full(v.shape, -passes * own), rtol=1e-6)
    for v in shared.trainable_weights:
        np.testing.assert_allclose(np.asarray(v), np.full(v.shape, -passes * mean), rtol=1e-6)


def test_partial_distributed_optimizer_checks() -> None:
    """Horovod's argument checks: local layers must be layers, op Average or Sum."""
    with pytest.raises(ValueError, match="tf.keras.layers.Layer"):
        hvd.PartialDistributedOptimizer(keras.optimizers.SGD(0.1), local_layers=[object()])
    with pytest.raises(ValueError, match="Average and Sum"):
        hvd.PartialDistributedOptimizer(keras.optimizers.SGD(0.1), op=hvd.Adasum)
    plain = hvd.PartialDistributedOptimizer(keras.optimizers.SGD(0.1))
    assert keras_optimizer.is_distributed(plain)


def test_broadcast_callback_leaves_local_variables() -> None:
    """With local_variables, those keep each rank's values while every other variable takes
    the root's (the last rank here)."""
    root = size() - 1
    model = build_model(seed_rank=rank(), tag="bcast_local")
    for layer in model.layers:
        layer.trainable = False
    model.compile(optimizer=keras.optimizers.SGD(0.0), loss="mse", run_eagerly=True)
    mine = [np.copy(w) for w in model.get_weights()]
    root_weights = build_model(seed_rank=root, tag="bcast_local").get_weights()
    local = list(model.layers[0].variables)
    x, y = global_data(1, LOCAL_BATCH, "bcast_local")
    callback = hvd.callbacks.BroadcastGlobalVariablesCallback(root_rank=root,
                                                              local_variables=local)
    model.fit(x, y, batch_size=LOCAL_BATCH, verbose=0, callbacks=[callback])
    local_ids = {id(v) for v in local}
    for i, v in enumerate(model.variables):
        expected = mine[i] if id(v) in local_ids else root_weights[i]
        np.testing.assert_array_equal(np.asarray(v), expected)
    with pytest.raises(ValueError, match="tf.Variable"):
        hvd.callbacks.BroadcastGlobalVariablesCallback(0, local_variables=[np.zeros(2)])


def test_tf1_optimizer() -> None:
    """A tf.compat.v1 optimizer through hora.tensorflow.DistributedOptimizer."""
    import hora.tensorflow as htf

    var = tf.Variable(np.zeros(2, np.float32))
    local = tf.Variable(np.zeros(2, np.float32))
    opt = htf.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(1.0))
    opt.register_local_var(local)
    opt.minimize(lambda: tf.reduce_sum((var + local) * float(rank() + 1)), var_list=[var, local])
    mean = np.mean([r + 1.0 for r in range(size())])
    np.testing.assert_allclose(var.numpy(), np.full(2, -mean), rtol=1e-6)
    # A registered local variable keeps its own gradient, divided by the set's size.
    np.testing.assert_allclose(local.numpy(), np.full(2, -(rank() + 1.0) / size()), rtol=1e-6)


def test_save_and_load_model(tmp_path: Any) -> None:
    """A saved model loads with a distributed optimizer that keeps its state and trains on."""
    model = build_model(tag="save")
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.05, momentum=0.9)),
                  loss="mse", run_eagerly=True)
    x, y = global_data(2, LOCAL_BATCH, "save")
    model.fit(x, y, batch_size=LOCAL_BATCH, verbose=0)
    path = str(tmp_path / f"model_rank{rank()}.keras")
    model.save(path)

    loaded = hora.keras.load_model(path)
    assert keras_optimizer.is_distributed(loaded.optimizer)
    assert isinstance(loaded.optimizer, keras.optimizers.SGD)
    assert int(loaded.optimizer.iterations) == 2
    assert_weights_close(loaded.get_weights(), model.get_weights(), tol=0.0)
    xr = make_input(rank(), [LOCAL_BATCH, FEATURES], "float32", "save_more", kind="normal")
    loaded.fit(xr, y[:LOCAL_BATCH], batch_size=LOCAL_BATCH, verbose=0)
    for i, w in enumerate(loaded.get_weights()):
        everyone = gathered(np.asarray(w, dtype=np.float64), f"save.check.{i}")
        np.testing.assert_allclose(everyone, np.broadcast_to(everyone[0], everyone.shape),
                                   rtol=1e-6, atol=1e-7)


# --------------------------------------------------------------------------------- module API


def test_keras_module_api() -> None:
    """hora.keras is hora.tensorflow.keras; its value collectives return tensors."""
    assert hora.keras.DistributedOptimizer is hvd.DistributedOptimizer
    assert hora.keras.callbacks.MetricAverageCallback is hvd.callbacks.MetricAverageCallback
    assert hvd.size() == size() and hvd.rank() == rank()
    out = hvd.allreduce(float(rank()), name="keras.value", op=hvd.Sum)
    assert float(out) == sum(range(size()))
    gathered_values = hvd.allgather(np.array([rank()], np.int32), name="keras.gather")
    assert gathered_values.numpy().tolist() == list(range(size()))
    assert float(hvd.broadcast(float(rank()), 0, name="keras.bcast")) == 0.0
    scattered = hvd.reducescatter(np.ones([size(), 2], np.float32), op=hvd.Sum)
    np.testing.assert_allclose(scattered.numpy(), np.full([1, 2], float(size())))
    with pytest.raises(RuntimeError):
        hvd.broadcast_global_variables(0)


def test_keras3_breaks_horovod_examples() -> None:
    """What Horovod's own Keras examples trip over on Keras 3 whatever the library
    (docs/frameworks/keras.md says so): an optimizer's variables are a list property, not a
    method, and ``compile`` takes no ``experimental_run_tf_function``."""
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.1))
    assert isinstance(opt.variables, list)
    with pytest.raises(TypeError):
        opt.variables()
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    with pytest.raises(TypeError, match="experimental_run_tf_function"):
        model.compile(optimizer=opt, loss="mse", experimental_run_tf_function=False)


def test_horovod_version_helper() -> None:
    """hora.common.util.is_version_greater_equal_than compares release numbers, as the helper of
    the same name in horovod.common.util that Horovod's Keras test files import."""
    from hora.common.util import is_version_greater_equal_than

    assert is_version_greater_equal_than(tf.__version__, "2.6.0")
    assert is_version_greater_equal_than("2.6", "2.6.0")
    assert not is_version_greater_equal_than("2.5.9", "2.6.0")
    with pytest.raises(ValueError):
        is_version_greater_equal_than(2.6, "2.6.0")  # type: ignore[arg-type]


@pytest.mark.parametrize("optimizer_built", [False, True], ids=["fit", "fit_after_build"])
def test_shutdown_unmaps_the_shared_arena_while_the_model_lives(optimizer_built: bool) -> None:
    """A fitted model's graph nodes keep private copies of their tensors in the job's shared
    arena, and a broadcast can give an optimizer variable a buffer there: shutdown must let go
    of both, or the ended job's arena stays mapped for as long as the model lives (Spark and
    Ray reuse their processes for job after job)."""
    from hora.common import shared_arrays

    if not shared_arrays.enabled():
        pytest.skip("this job has no shared arena (ranks on several hosts, or it is disabled)")
    model = build_model(tag="arena")
    optimizer = hvd.DistributedOptimizer(keras.optimizers.SGD(0.1))
    model.compile(optimizer=optimizer, loss="mse")
    if optimizer_built:  # as when a checkpoint's optimizer state is loaded before fit
        optimizer.build(model.trainable_variables)
    x = make_input(rank(), (4 * LOCAL_BATCH, FEATURES), "float32", "arena.x")
    y = make_input(rank(), (4 * LOCAL_BATCH, OUTPUTS), "float32", "arena.y")
    model.fit(x, y, batch_size=LOCAL_BATCH, epochs=1, verbose=0,
              callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0),
                         hvd.callbacks.MetricAverageCallback()])
    hora.shutdown()
    try:
        assert not hora_mappings()
    finally:
        hora.init()
    assert model.layers  # the model outlived the check
