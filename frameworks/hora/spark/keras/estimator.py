"""``KerasEstimator`` and ``KerasModel``: train a ``tf.keras`` (Keras 3) model on a Spark
DataFrame with Hora and predict with it (Horovod's ``horovod.spark.keras``)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from hora.spark.common.estimator import HoraEstimator, HoraModel, TrainSpec
from hora.spark.common.params import declare
from hora.spark.keras import remote

_SUPPORTED = {"custom_objects": "Keras custom objects for (de)serializing the model"}


class KerasEstimator(HoraEstimator):
    """Trains a Keras model on a Spark DataFrame on ``num_proc`` Hora ranks.

    ``fit(df)`` writes the feature, label and sample weight columns to ``store`` as Parquet,
    and each rank trains with ``model.fit``, the optimizer wrapped in
    ``hora.tensorflow.keras.DistributedOptimizer`` with its learning rate scaled by the number
    of ranks (as Horovod does), Horovod's broadcast and metric-averaging callbacks and the
    user's callbacks. Rank 0 writes the model (``.keras``, learning rate unscaled) to
    ``store.get_checkpoint_path(run_id)`` after every epoch. A fit whose ``run_id`` already
    has a checkpoint starts from its weights and optimizer state. Returns a
    :class:`KerasModel` with the trained model and the history.

    Args (keywords; each is also a Spark ML parameter with ``getX``/``setX``):
        num_proc: ranks (default: Spark's default parallelism); or give ``backend``.
        model: the ``keras.Model`` to train (it travels as a ``.keras`` file; the estimator
            does not change it).
        backend: a ``hora.spark.common.backend.Backend`` to run the ranks (default:
            ``SparkBackend(num_proc)``).
        store: a ``hora.spark.common.store.Store`` for the data, checkpoints and logs.
        custom_objects: names of custom layers, losses, ... for loading the model.
        optimizer: a Keras optimizer (or its name); default: the compiled model's.
        loss, loss_weights, metrics: as ``model.compile``.
        sample_weight_col: column given to ``model.fit`` as each row's ``sample_weight``.
        gradient_compression: ``hvd.Compression.none`` (default), ``fp16`` or ``bf16``.
        feature_cols: columns fed to the model, one per input.
        label_cols: columns of the targets, one per output.
        validation: fraction of rows, or name of a column true on the validation rows.
        callbacks: Keras callbacks run on every rank.
        batch_size, val_batch_size, epochs, train_steps_per_epoch,
        validation_steps_per_epoch, verbose, random_seed, shuffle, partitions_per_process,
        run_id, backward_passes_per_step, label_shapes: see ``explainParams()``.
    """

    run_id_prefix = "keras"
    supported_extras = ("custom_objects",)

    def _optimizer(self) -> Any:
        """The optimizer parameter (a name is looked up), else the compiled model's."""
        from tensorflow import keras

        optimizer = self.getOptimizer()  # type: ignore[attr-defined]
        if optimizer is None:
            optimizer = getattr(self.getModel(), "optimizer", None)  # type: ignore[attr-defined]
        return None if optimizer is None else keras.optimizers.get(optimizer)

    def _check_params(self, df: Any) -> None:
        """Raises:
            ValueError: as the base class; a model that is not a ``keras.Model``; no loss; no
                optimizer (neither the parameter nor a compiled model's).
        """
        from tensorflow import keras

        super()._check_params(df)
        if not isinstance(self.getModel(), keras.Model):  # type: ignore[attr-defined]
            # ValueError, as Horovod's KerasEstimator raises.
            raise ValueError(f"KerasEstimator: model must be a keras.Model, got "  # noqa: TRY004
                             f"{type(self.getModel()).__name__}")  # type: ignore[attr-defined]
        if not self.getLoss():  # type: ignore[attr-defined]
            raise ValueError("KerasEstimator: the loss parameter is required")
        if self._optimizer() is None:
            raise ValueError("KerasEstimator: the optimizer parameter is required (or a model "
                             "compiled with one)")

    def _trainer(self, spec: TrainSpec, checkpoint: bytes | None) -> Callable[[], Any]:
        from pyspark import cloudpickle
        from tensorflow import keras

        keras_spec = remote.KerasSpec(
            model=remote.model_to_bytes(self.getModel()),  # type: ignore[attr-defined]
            optimizer=keras.optimizers.serialize(self._optimizer()),
            loss=cloudpickle.dumps(self.getLoss()),  # type: ignore[attr-defined]
            loss_weights=self.getLossWeights(),  # type: ignore[attr-defined]
            metrics=cloudpickle.dumps(self.getMetrics()),  # type: ignore[attr-defined]
            callbacks=cloudpickle.dumps(list(self.getCallbacks() or [])),  # type: ignore[attr-defined]
            custom_objects=cloudpickle.dumps(self.getCustomObjects()),  # type: ignore[attr-defined]
            gradient_compression=self.getGradientCompression())  # type: ignore[attr-defined]
        return functools.partial(remote.train, spec, keras_spec, checkpoint)

    def _create_model(self, result: Any, run_id: str, metadata: dict[str, Any]) -> KerasModel:
        history, model_bytes = result
        model = remote.model_from_bytes(model_bytes, self.getCustomObjects())  # type: ignore[attr-defined]
        return KerasModel(history=history, model=model,
                          feature_columns=self.getFeatureCols(),  # type: ignore[attr-defined]
                          label_columns=self.getLabelCols(),  # type: ignore[attr-defined]
                          custom_objects=self.getCustomObjects(),  # type: ignore[attr-defined]
                          run_id=run_id, _metadata=metadata)


declare(KerasEstimator, [("custom_objects", _SUPPORTED["custom_objects"], None)])


class KerasModel(HoraModel):
    """The result of ``KerasEstimator.fit``: ``getModel()`` is the trained, compiled Keras
    model, ``getHistory()`` the metrics of each epoch (``keras.callbacks.History.history``:
    name -> one value per epoch, averaged over the ranks), ``transform(df)`` adds the
    predictions."""

    def _predictor(self) -> Callable[[list[np.ndarray]], list[np.ndarray]]:
        return functools.partial(remote.predict,
                                 remote.model_to_bytes(self.getModel()),  # type: ignore[attr-defined]
                                 self.getCustomObjects())  # type: ignore[attr-defined]


declare(KerasModel, [("custom_objects", _SUPPORTED["custom_objects"], None)])
