"""What each rank of a ``KerasEstimator`` fit runs: read its share of the rows, train with
``model.fit`` and ``hora.tensorflow.keras``'s DistributedOptimizer, and on rank 0 write the
checkpoint after every epoch and return it with the history; and the prediction function of
``KerasModel.transform``."""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
import tempfile
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from hora.spark.common import data
from hora.spark.common.estimator import TrainSpec

MODEL_FILENAME = "model.keras"


@dataclasses.dataclass
class KerasSpec:
    """The framework half of a fit. The model travels as the bytes of a ``.keras`` file, the
    optimizer as its Keras config; the loss, metrics, callbacks and custom objects pickled with
    cloudpickle."""

    model: bytes
    optimizer: dict[str, Any]
    loss: bytes
    loss_weights: Any
    metrics: bytes
    callbacks: bytes
    custom_objects: bytes
    gradient_compression: Any


def model_to_bytes(model: Any) -> bytes:
    """The bytes of ``model.save(<file>.keras)``: architecture, weights and, when compiled,
    the optimizer with its state."""
    with tempfile.TemporaryDirectory(prefix="hora-keras-") as tmp:
        path = os.path.join(tmp, MODEL_FILENAME)
        model.save(path)
        with open(path, "rb") as f:
            return f.read()


@contextlib.contextmanager
def _as_file(blob: bytes) -> Iterator[str]:
    """The path of a temporary ``.keras`` file holding ``blob`` (Keras loads only files)."""
    with tempfile.TemporaryDirectory(prefix="hora-keras-") as tmp:
        path = os.path.join(tmp, MODEL_FILENAME)
        with open(path, "wb") as f:
            f.write(blob)
        yield path


def model_from_bytes(blob: bytes, custom_objects: dict[str, Any] | None,
                     compile: bool = True) -> Any:
    """The model :func:`model_to_bytes` saved."""
    from tensorflow import keras

    with _as_file(blob) as path:
        return keras.models.load_model(path, custom_objects=custom_objects or None,
                                       compile=compile)


def _load_state(model: Any, blob: bytes) -> None:
    """Load the weights and the optimizer state of the saved model ``blob`` into ``model``
    (same architecture, compiled and its optimizer built)."""
    with _as_file(blob) as path:
        model.load_weights(path)


def _known_shapes(tensors: Sequence[Any]) -> list[tuple[int, ...] | None]:
    """Each tensor's shape without the batch dimension, or None when a dimension is unknown
    (then the data is fed as it comes)."""
    shapes: list[tuple[int, ...] | None] = []
    for tensor in tensors:
        dims = tuple(tensor.shape)[1:]
        shapes.append(None if any(d is None for d in dims) else tuple(int(d) for d in dims))
    return shapes


def _shaped(arrays: Sequence[np.ndarray],
            shapes: Sequence[Sequence[int] | None]) -> list[np.ndarray]:
    """``arrays`` reshaped to ``(rows, *shape)`` where a shape is known and matches in size;
    a shape may start with -1 for the batch dimension (Horovod's ``label_shapes``)."""
    out = []
    for array, shape in zip(arrays, list(shapes) + [None] * (len(arrays) - len(shapes))):
        if shape is not None:
            dims = tuple(shape)[1:] if shape and shape[0] == -1 else tuple(shape)
            if int(np.prod(dims)) * len(array) == array.size:
                array = array.reshape((len(array), *dims))
        out.append(array)
    return out


def _single_or_tuple(arrays: list[Any]) -> Any:
    return arrays[0] if len(arrays) == 1 else tuple(arrays)


def _batch(rows: dict[str, np.ndarray], idx: np.ndarray, spec: TrainSpec,
           input_shapes: Sequence[tuple[int, ...] | None],
           label_shapes: Sequence[Sequence[int] | None]) -> tuple[Any, ...]:
    """``(x, y)`` or ``(x, y, sample_weight)`` of rows ``idx``, as ``model.fit`` takes them."""
    x = _shaped([rows[c][idx] for c in spec.feature_cols], input_shapes)
    y = _shaped([rows[c][idx] for c in spec.label_cols], label_shapes)
    batch: tuple[Any, ...] = (_single_or_tuple(x), _single_or_tuple(y))
    if spec.sample_weight_col:
        batch += (rows[spec.sample_weight_col][idx].astype(np.float32),)
    return batch


def _training_dataset(rows: dict[str, np.ndarray], spec: TrainSpec, seed: int,
                      input_shapes: Sequence[tuple[int, ...] | None],
                      label_shapes: Sequence[Sequence[int] | None]) -> Any:
    """An endless ``tf.data.Dataset`` of this rank's batches, in the order of
    ``data.batches`` (so a fit with ``shuffle=False`` is reproducible)."""
    import tensorflow as tf

    shard_rows = data.row_count(rows)

    def generate() -> Iterator[tuple[Any, ...]]:
        for idx in data.batches(shard_rows, spec.batch_size, spec.shuffle, seed):
            yield _batch(rows, idx, spec, input_shapes, label_shapes)

    first = _batch(rows, np.arange(min(shard_rows, spec.batch_size)), spec, input_shapes,
                   label_shapes)
    signature = tf.nest.map_structure(
        lambda a: tf.TensorSpec((None, *a.shape[1:]), tf.as_dtype(a.dtype)), first)
    return tf.data.Dataset.from_generator(generate, output_signature=signature)


def _checkpoint_callback(spec: TrainSpec, size: int) -> Any:
    """A rank-0 callback writing the model to the run's checkpoint after every epoch, with
    the learning rate it was given (not scaled by the number of ranks), so that a later fit
    scales it for its own number of ranks."""
    from tensorflow import keras

    class WriteCheckpoint(keras.callbacks.Callback):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.latest: bytes | None = None

        def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
            self.latest = unscaled_bytes(self.model, size)
            spec.store.write(spec.store.get_checkpoint_path(spec.run_id), self.latest)

    return WriteCheckpoint()


def unscaled_bytes(model: Any, size: int) -> bytes:
    """:func:`model_to_bytes` with the optimizer's learning rate divided by ``size`` (put back
    afterwards)."""
    optimizer = model.optimizer
    scaled = float(np.asarray(optimizer.learning_rate))
    optimizer.learning_rate = scaled / size
    try:
        return model_to_bytes(model)
    finally:
        optimizer.learning_rate = scaled


def _scaled_optimizer(config: dict[str, Any], custom_objects: dict[str, Any] | None,
                      size: int) -> Any:
    """The optimizer of ``config`` with its learning rate multiplied by ``size``, as Horovod's
    KerasEstimator does (a learning rate schedule is left as it is)."""
    from tensorflow import keras

    config = {**config, "config": dict(config["config"])}
    lr = config["config"].get("learning_rate")
    if isinstance(lr, (int, float)):
        config["config"]["learning_rate"] = float(lr) * size
    return keras.optimizers.deserialize(config, custom_objects=custom_objects or None)


def train(spec: TrainSpec, keras_spec: KerasSpec,
          checkpoint: bytes | None) -> tuple[dict[str, list[float]], bytes] | None:
    """Train on this rank; rank 0 returns ``(history, model bytes)``, the others None.

    ``checkpoint`` (a previous run's) gives the starting weights and optimizer state.
    """
    import importlib

    from pyspark import cloudpickle
    from tensorflow import keras

    hvd: Any = importlib.import_module("hora.tensorflow.keras")
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    if spec.random_seed is not None:
        keras.utils.set_random_seed(spec.random_seed)
    custom_objects = cloudpickle.loads(keras_spec.custom_objects) or {}
    model = model_from_bytes(keras_spec.model, custom_objects, compile=False)
    optimizer = hvd.DistributedOptimizer(
        _scaled_optimizer(keras_spec.optimizer, custom_objects, size),
        compression=keras_spec.gradient_compression or hvd.Compression.none,
        backward_passes_per_step=spec.backward_passes_per_step)
    scaled_lr = float(np.asarray(optimizer.learning_rate))
    model.compile(optimizer=optimizer, loss=cloudpickle.loads(keras_spec.loss),
                  loss_weights=keras_spec.loss_weights,
                  metrics=cloudpickle.loads(keras_spec.metrics) or None)
    if checkpoint is not None:
        optimizer.build(model.trainable_variables)
        _load_state(model, checkpoint)
        # The checkpoint holds the unscaled rate; this run's ranks scale it again.
        optimizer.learning_rate = scaled_lr

    input_shapes = _known_shapes(model.inputs)
    label_shapes = spec.label_shapes or _known_shapes(model.outputs)
    train_rows = spec.read(spec.data.train_path, rank, size)
    dataset = _training_dataset(train_rows, spec, spec.seed(rank), input_shapes, label_shapes)
    passes = spec.backward_passes_per_step
    steps = max(passes, spec.steps_per_epoch(size) // passes * passes)
    validation: dict[str, Any] = {}
    # Every rank validates or none does: MetricAverageCallback averages the same keys on all.
    if spec.data.val_path and spec.data.val_rows >= size:
        val_rows = spec.read(spec.data.val_path, rank, size)
        shard_rows = data.row_count(val_rows)
        validation = {"validation_data": _batch(val_rows, np.arange(shard_rows), spec,
                                                input_shapes, label_shapes),
                      "validation_batch_size": spec.val_batch_size,
                      "validation_steps": spec.validation_steps(shard_rows)}
    elif spec.data.val_path and rank == 0:
        warnings.warn(f"hora.spark.keras: {spec.data.val_rows} validation rows for {size} "
                      "ranks; training without validation", stacklevel=2)

    callbacks = [hvd.callbacks.BroadcastGlobalVariablesCallback(0),
                 hvd.callbacks.MetricAverageCallback(),
                 *(cloudpickle.loads(keras_spec.callbacks) or [])]
    writer = _checkpoint_callback(spec, size) if rank == 0 else None
    if writer is not None:
        callbacks.append(writer)
    history = model.fit(dataset, epochs=spec.epochs, steps_per_epoch=steps, shuffle=False,
                        callbacks=callbacks, verbose=min(spec.verbose, 2) if rank == 0 else 0,
                        **validation)
    if rank != 0:
        return None
    trained = writer.latest if writer is not None and writer.latest else unscaled_bytes(model, size)
    return ({name: [float(v) for v in values] for name, values in history.history.items()},
            trained)


_LOADED: dict[str, Any] = {}
"""Models :func:`predict` loaded in this process, by the digest of their bytes: transform
calls it once per batch of rows."""


def predict(model_bytes: bytes, custom_objects: dict[str, Any] | None,
            arrays: list[np.ndarray]) -> list[np.ndarray]:
    """The model's outputs for one batch of feature arrays, one array per output."""
    key = hashlib.sha256(model_bytes).hexdigest()
    model = _LOADED.get(key)
    if model is None:
        _LOADED.clear()
        model = _LOADED[key] = model_from_bytes(model_bytes, custom_objects, compile=False)
    inputs = _shaped(list(arrays), _known_shapes(model.inputs))
    outputs = model.predict_on_batch(_single_or_tuple(inputs))
    outputs = list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]
    return [np.asarray(o) for o in outputs]
