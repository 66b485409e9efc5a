"""Elastic state for TensorFlow and Keras on N ranks (a fixed job: no worker comes or goes).

Run as ``horarun -np N python -m pytest -q tests/parallel/test_tensorflow_elastic.py``. Each rank
starts from its own weights; ``sync()`` must give every rank rank 0's, ``restore()`` the last
commit, and ``hvd.elastic.run`` must restore, re-initialise and retry after a failed collective
(raised directly, or wrapped in a TensorFlow error as inside ``tf.function``).
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")

import hora.keras
import hora.tensorflow as hvd_tf
import hora.tensorflow.keras as hvd
import keras
import numpy as np
import pytest
import tensorflow as tf
from conftest import make_input, rank, size
from hora.errors import HoraError, NotSupportedError, TransportError


def build_model(seed_rank: int) -> keras.Model:
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4), keras.layers.Dense(1)])
    model.set_weights([make_input(seed_rank, w.shape, "float32", "elastic", i, kind="normal")
                       for i, w in enumerate(model.get_weights())])
    return model


def weights(model: keras.Model) -> list[np.ndarray]:
    return [np.array(w) for w in model.get_weights()]


def gathered(values: list[np.ndarray]) -> list[list[np.ndarray]]:
    return hvd.allgather_object(values, name="elastic.check")


def test_keras_state_sync_gives_every_rank_rank_0s_model_and_optimizer():
    model = build_model(rank())
    optimizer = keras.optimizers.SGD(0.1, momentum=0.9)
    if rank() == 0:  # only rank 0 has optimizer slots, as when a fresh worker joins
        optimizer.build(model.trainable_variables)
        for v in hvd_tf.elastic.optimizer_variables(optimizer):
            v.assign(tf.fill(v.shape, tf.cast(3, v.dtype)))
    state = hvd.elastic.KerasState(model, optimizer, epoch=rank(), batch=0)
    state.sync()
    assert state.epoch == 0
    expected = weights(build_model(0))
    for got, want in zip(weights(model), expected):
        np.testing.assert_array_equal(got, want)
    slots = [v.numpy() for v in hvd_tf.elastic.optimizer_variables(optimizer)]
    everyone = gathered(slots)
    for other in everyone:
        for a, b in zip(other, everyone[0]):
            np.testing.assert_array_equal(a, b)


def test_keras_state_restore_goes_back_to_the_last_commit():
    model = build_model(0)
    optimizer = keras.optimizers.SGD(0.1)
    optimizer.build(model.trainable_variables)
    state = hvd.elastic.KerasState(model, optimizer, epoch=1)
    state.epoch = 2
    state.commit()
    committed = weights(model)
    model.set_weights([w + 1 for w in committed])
    state.epoch = 5
    state.restore()
    assert state.epoch == 2
    for got, want in zip(weights(model), committed):
        np.testing.assert_array_equal(got, want)


def test_tensorflow_state_tracks_variables():
    v = tf.Variable(np.full(3, float(rank()), np.float32))
    state = hvd_tf.elastic.TensorFlowState([v], step=rank())
    state.sync()
    np.testing.assert_array_equal(v.numpy(), np.zeros(3, np.float32))
    assert state.step == 0
    v.assign_add(np.ones(3, np.float32))
    state.commit()
    v.assign_add(np.ones(3, np.float32))
    state.restore()
    np.testing.assert_array_equal(v.numpy(), np.ones(3, np.float32))
    with pytest.raises(ValueError):
        hvd_tf.elastic.TensorFlowState([])
    with pytest.raises(NotSupportedError):
        hvd_tf.elastic.TensorFlowState([v], session=object())


@pytest.mark.parametrize("wrapped", [False, True])
def test_run_restores_reinitialises_and_retries_after_a_failed_collective(wrapped):
    v = tf.Variable(np.zeros(2, np.float32))
    state = hvd_tf.elastic.TensorFlowState([v], attempts=0)
    resets: list[int] = []
    state.register_reset_callbacks([lambda: resets.append(hvd.size())])

    @hvd_tf.elastic.run
    def train(st: hvd_tf.elastic.TensorFlowState) -> float:
        st.attempts += 1
        v.assign_add(np.ones(2, np.float32))
        st.commit()
        if st.attempts == 1:
            v.assign_add(np.full(2, 10.0, np.float32))  # uncommitted: lost by the failure
            error = TransportError("rank 1: connection closed")
            if wrapped:
                raise tf.errors.UnknownError(None, None, f"TransportError: {error}")
            raise error
        return float(hvd.allreduce(tf.constant(v.numpy()), op=hvd.Sum).numpy()[0])

    assert train(state) == 2.0 * size()
    assert resets == [size()]
    assert hvd.is_initialized()


def test_run_lets_other_tensorflow_errors_through():
    state = hvd_tf.elastic.TensorFlowState([tf.Variable(1.0)])

    @hvd_tf.elastic.run
    def train(st: hvd_tf.elastic.TensorFlowState) -> None:
        raise tf.errors.InvalidArgumentError(None, None, "a bad shape in the user's model")

    with pytest.raises(tf.errors.InvalidArgumentError):
        train(state)
    assert not issubclass(tf.errors.InvalidArgumentError, HoraError)


def test_keras_callbacks_track_epoch_and_batch_and_commit_during_fit():
    model = build_model(0)
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.01)), loss="mse")
    state = hvd.elastic.KerasState(model, epoch=0, batch=0)
    commits: list[tuple[int, int]] = []
    original_commit = state.commit

    def counting_commit() -> None:
        commits.append((state.epoch, state.batch))
        original_commit()

    state.commit = counting_commit  # type: ignore[method-assign]
    seen: list[int] = []
    callbacks = [hvd.elastic.CommitStateCallback(state, batches_per_commit=2),
                 hvd.elastic.UpdateBatchStateCallback(state),
                 hvd.elastic.UpdateEpochStateCallback(state),
                 keras.callbacks.LambdaCallback(on_batch_end=lambda b, logs: seen.append(b))]
    x = np.ones((24, 3), np.float32)
    y = np.zeros((24, 1), np.float32)

    @hvd.elastic.run
    def train(st: hvd.elastic.KerasState) -> None:
        model.fit(x, y, batch_size=4, epochs=2 - st.epoch, callbacks=callbacks, verbose=0,
                  shuffle=False)

    train(state)
    assert state.epoch == 2 and state.batch == 0
    assert len(seen) == 12
    assert len(commits) == 2 * (3 + 1)  # every 2 of 6 batches, and each epoch's end
    everyone = gathered(weights(model))
    for other in everyone:
        for a, b in zip(other, everyone[0]):
            np.testing.assert_array_equal(a, b)
    assert hora.keras.elastic.KerasState is hvd.elastic.KerasState
