"""``TorchEstimator`` and ``TorchModel``: train a ``torch.nn.Module`` on a Spark DataFrame with
Hora and predict with it (Horovod's ``horovod.spark.torch``)."""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from hora.spark.common.estimator import HoraEstimator, HoraModel, TrainSpec
from hora.spark.common.params import declare
from hora.spark.torch import remote


class TorchEstimator(HoraEstimator):
    """Trains a PyTorch model on a Spark DataFrame on ``num_proc`` Hora ranks.

    ``fit(df)`` writes the feature, label and sample weight columns to ``store`` as Parquet,
    trains on every rank with ``hora.torch.DistributedOptimizer`` (the optimizer's learning
    rate scaled by the number of ranks, as Horovod does), writes a checkpoint to
    ``store.get_checkpoint_path(run_id)`` after every epoch, and returns a :class:`TorchModel`
    holding the trained model and the history. A fit whose ``run_id`` already has a checkpoint
    starts from it.

    Args (keywords; each is also a Spark ML parameter with ``getX``/``setX``):
        num_proc: ranks (default: Spark's default parallelism); or give ``backend``.
        model: the ``torch.nn.Module`` to train (the estimator trains a copy).
        backend: a ``hora.spark.common.backend.Backend`` to run the ranks (default:
            ``SparkBackend(num_proc)``).
        store: a ``hora.spark.common.store.Store`` for the data, checkpoints and logs.
        optimizer: a ``torch.optim.Optimizer`` built on ``model``'s parameters.
        loss: a loss function or module, or one per label column.
        loss_weights: weights of the losses (default: 1 each).
        metrics: functions ``metric(output, label)`` of the first output, averaged per epoch.
        sample_weight_col: column of each row's weight: each sample's loss is multiplied by
            it before the batch mean.
        gradient_compression: ``hvd.Compression.none`` (default) or ``fp16``.
        feature_cols: columns fed to the model, one per ``forward`` argument.
        input_shapes: the shape of each input without the batch dimension (or starting
            with -1).
        label_cols: columns of the targets, one per output.
        validation: fraction of rows, or name of a column true on the validation rows.
        batch_size, val_batch_size, epochs, train_steps_per_epoch,
        validation_steps_per_epoch, verbose, random_seed, shuffle, partitions_per_process,
        run_id, backward_passes_per_step, label_shapes, use_gpu: see ``explainParams()``.
    """

    run_id_prefix = "pytorch"

    def _check_params(self, df: Any) -> None:
        super()._check_params(df)
        if self.getOptimizer() is None:  # type: ignore[attr-defined]
            raise ValueError("TorchEstimator: the optimizer parameter is required")
        if self.getLoss() is None:  # type: ignore[attr-defined]
            raise ValueError("TorchEstimator: the loss parameter is required")
        shapes = self.getInputShapes()  # type: ignore[attr-defined]
        if shapes is not None and len(shapes) != len(self.getFeatureCols()):  # type: ignore[attr-defined]
            raise ValueError(f"TorchEstimator: {len(shapes)} input_shapes for "
                             f"{len(self.getFeatureCols())} feature_cols")  # type: ignore[attr-defined]

    def _trainer(self, spec: TrainSpec, checkpoint: bytes | None) -> Callable[[], Any]:
        from pyspark import cloudpickle

        optimizer = self.getOptimizer()  # type: ignore[attr-defined]
        loss = self.getLoss()  # type: ignore[attr-defined]
        torch_spec = remote.TorchSpec(
            model=cloudpickle.dumps(self.getModel()),  # type: ignore[attr-defined]
            optimizer_cls=type(optimizer), optimizer_state=optimizer.state_dict(),
            loss=cloudpickle.dumps(loss),
            loss_weights=list(self.getLossWeights() or []),  # type: ignore[attr-defined]
            metrics=cloudpickle.dumps(list(self.getMetrics() or [])),  # type: ignore[attr-defined]
            input_shapes=self.getInputShapes(),  # type: ignore[attr-defined]
            gradient_compression=self.getGradientCompression())  # type: ignore[attr-defined]
        return functools.partial(remote.train, spec, torch_spec, checkpoint)

    def _create_model(self, result: Any, run_id: str, metadata: dict[str, Any]) -> TorchModel:
        history, checkpoint = result
        state = remote.from_bytes(checkpoint)
        model = copy.deepcopy(self.getModel())  # type: ignore[attr-defined]
        model.load_state_dict(state["model"])
        optimizer = self.getOptimizer()  # type: ignore[attr-defined]
        trained_optimizer = type(optimizer)(model.parameters(), lr=1)
        trained_optimizer.load_state_dict(state["optimizer"])
        return TorchModel(history=history, model=model, optimizer=trained_optimizer,
                          feature_columns=self.getFeatureCols(),  # type: ignore[attr-defined]
                          label_columns=self.getLabelCols(),  # type: ignore[attr-defined]
                          input_shapes=self.getInputShapes(),  # type: ignore[attr-defined]
                          run_id=run_id, _metadata=metadata,
                          loss=self.getLoss())  # type: ignore[attr-defined]


declare(TorchEstimator, [
    ("input_shapes", "the shape of each input, without the batch dimension", None),
])


class TorchModel(HoraModel):
    """The result of ``TorchEstimator.fit``: ``getModel()`` is the trained module,
    ``getHistory()`` the metrics of each epoch, ``transform(df)`` adds the predictions."""

    def _predictor(self) -> Callable[[list[np.ndarray]], list[np.ndarray]]:
        from pyspark import cloudpickle

        return functools.partial(remote.predict, cloudpickle.dumps(self.getModel()),  # type: ignore[attr-defined]
                                 self.getInputShapes())  # type: ignore[attr-defined]


declare(TorchModel, [
    ("input_shapes", "the shape of each input, without the batch dimension", None),
    ("optimizer", "the optimizer with its state after training", None),
    ("loss", "the loss the model was trained with", None),
])

