"""What the Torch and Keras estimators share: ``fit(df)`` writes the training columns to the
store, runs the framework's training function on the ranks through a backend and wraps rank
0's result in a model; ``model.transform(df)`` adds a prediction column per label.

The framework parts are :meth:`HoraEstimator._trainer` (the picklable function each rank runs)
and :meth:`HoraModel._predictor` (a picklable function from feature arrays to outputs)."""

from __future__ import annotations

import dataclasses
import math
import numbers
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
from pyspark.ml import Estimator, Model

from hora.spark.common import data
from hora.spark.common.backend import Backend, SparkBackend
from hora.spark.common.params import EstimatorParams, ModelParams
from hora.spark.common.store import Store
from hora.spark.common.unsupported import check_unsupported

PREDICT_BATCH_ROWS = 1024


@dataclasses.dataclass
class TrainSpec:
    """Everything a rank's training function needs, framework aside. It travels pickled to
    the ranks, so it holds no Spark object."""

    store: Store
    run_id: str
    data: data.PreparedData
    feature_cols: list[str]
    label_cols: list[str]
    sample_weight_col: str | None
    batch_size: int
    val_batch_size: int
    epochs: int
    train_steps_per_epoch: int | None
    validation_steps_per_epoch: int | None
    shuffle: bool
    random_seed: int | None
    verbose: int
    backward_passes_per_step: int
    label_shapes: list[list[int]] | None
    use_gpu: bool

    def steps_per_epoch(self, size: int) -> int:
        """Batches per epoch on each rank: ``train_steps_per_epoch``, else the training rows
        over ``batch_size * size`` (at least 1), as Horovod's estimators count."""
        if self.train_steps_per_epoch:
            return int(self.train_steps_per_epoch)
        return max(1, self.data.train_rows // (self.batch_size * size))

    def validation_steps(self, shard_rows: int) -> int:
        """Validation batches on a rank with ``shard_rows`` rows: all of them, or at most
        ``validation_steps_per_epoch``."""
        steps = math.ceil(shard_rows / self.val_batch_size)
        if self.validation_steps_per_epoch:
            steps = min(steps, int(self.validation_steps_per_epoch))
        return steps

    def seed(self, rank: int, epoch: int = 0) -> int:
        """The shuffling seed of ``rank``: fixed by ``random_seed`` when set."""
        base = self.random_seed if self.random_seed is not None else 0
        return (base * 1_000_003 + rank * 7919 + epoch) & 0xFFFFFFFF

    def read(self, path: str, rank: int, size: int) -> dict[str, np.ndarray]:
        """Rank ``rank``'s rows of the dataset at ``path``."""
        return data.read_shard(self.store, path, self.data.metadata, rank, size)


class HoraEstimator(Estimator, EstimatorParams):  # type: ignore[misc]
    """Trains a model on a Spark DataFrame with Hora; the Torch and Keras estimators fill in
    the framework."""

    run_id_prefix = "hora"
    supported_extras: tuple[str, ...] = ()
    """Horovod parameters of features Hora otherwise lacks that this estimator has."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__()
        self.setParams(**kwargs)

    def setParams(self, **kwargs: Any) -> HoraEstimator:
        """Set the parameters named in ``kwargs`` (None leaves one as it is); returns ``self``.

        Raises:
            TypeError: a name that is not a parameter, or one of a feature Hora lacks.
        """
        check_unsupported(type(self).__name__, kwargs, supported=self.supported_extras)
        self._set_from(kwargs)
        return self

    def _fit(self, df: Any) -> HoraModel:
        self._check_params(df)
        backend = self._get_or_create_backend()
        store: Store = self.getStore()  # type: ignore[attr-defined]
        run_id = self.getRunId() or f"{self.run_id_prefix}_{uuid.uuid4().hex[:12]}"  # type: ignore[attr-defined]
        num_proc = backend.num_processes()
        columns = [*self.getFeatureCols(), *self.getLabelCols()]  # type: ignore[attr-defined]
        weight = self.getSampleWeightCol()  # type: ignore[attr-defined]
        if weight:
            columns.append(weight)
        prepared = data.prepare_data(
            store, df, list(dict.fromkeys(columns)), validation=self.getValidation(),  # type: ignore[attr-defined]
            num_partitions=num_proc * int(self.getPartitionsPerProcess()),  # type: ignore[attr-defined]
            seed=self.getRandomSeed(), dataset_idx=run_id)  # type: ignore[attr-defined]
        try:
            if prepared.train_rows < num_proc:
                raise ValueError(f"{type(self).__name__}: {prepared.train_rows} training rows "
                                 f"for {num_proc} ranks; every rank needs at least one")
            checkpoint = self._load_checkpoint(run_id) if self._has_checkpoint(run_id) else None
            spec = self._train_spec(store, run_id, prepared)
            results = backend.run(self._trainer(spec, checkpoint))
        finally:
            store.delete(prepared.train_path)
            if prepared.val_path:
                store.delete(prepared.val_path)
        return self._create_model(results[0], run_id, prepared.metadata)

    def _check_params(self, df: Any) -> None:
        """Raise ValueError for a missing or contradictory parameter, before Spark runs."""
        name = type(self).__name__
        for param in ("model", "store", "feature_cols", "label_cols"):
            if not self.getOrDefault(param):
                raise ValueError(f"{name}: the {param} parameter is required")
        if not isinstance(self.getStore(), Store):  # type: ignore[attr-defined]
            raise TypeError(f"{name}: store must be a hora.spark.common.store.Store, got "
                             f"{type(self.getStore()).__name__}")  # type: ignore[attr-defined]
        if self.getBackend() is not None and self.getNumProc() is not None:  # type: ignore[attr-defined]
            raise ValueError(f"{name}: give at most one of backend and num_proc")
        for param in ("batch_size", "epochs", "backward_passes_per_step"):
            value = self.getOrDefault(param)
            if not isinstance(value, numbers.Integral) or value < 1:
                raise ValueError(f"{name}: {param} must be a positive integer, got {value!r}")

    def _get_or_create_backend(self) -> Backend:
        backend = self.getBackend()  # type: ignore[attr-defined]
        if backend is None:
            backend = SparkBackend(self.getNumProc(), verbose=self.getVerbose())  # type: ignore[attr-defined]
        return backend  # type: ignore[no-any-return]

    def _has_checkpoint(self, run_id: str) -> bool:
        store: Store = self.getStore()  # type: ignore[attr-defined]
        return store.exists(store.get_checkpoint_path(run_id))

    def _load_checkpoint(self, run_id: str) -> bytes:
        store: Store = self.getStore()  # type: ignore[attr-defined]
        return store.read(store.get_checkpoint_path(run_id))

    def _train_spec(self, store: Store, run_id: str, prepared: data.PreparedData) -> TrainSpec:
        batch_size = int(self.getBatchSize())  # type: ignore[attr-defined]
        return TrainSpec(
            store=store, run_id=run_id, data=prepared,
            feature_cols=list(self.getFeatureCols()),  # type: ignore[attr-defined]
            label_cols=list(self.getLabelCols()),  # type: ignore[attr-defined]
            sample_weight_col=self.getSampleWeightCol(),  # type: ignore[attr-defined]
            batch_size=batch_size,
            val_batch_size=int(self.getValBatchSize() or batch_size),  # type: ignore[attr-defined]
            epochs=int(self.getEpochs()),  # type: ignore[attr-defined]
            train_steps_per_epoch=self.getTrainStepsPerEpoch(),  # type: ignore[attr-defined]
            validation_steps_per_epoch=self.getValidationStepsPerEpoch(),  # type: ignore[attr-defined]
            shuffle=bool(self.getShuffle()),  # type: ignore[attr-defined]
            random_seed=self.getRandomSeed(),  # type: ignore[attr-defined]
            verbose=int(self.getVerbose()),  # type: ignore[attr-defined]
            backward_passes_per_step=int(self.getBackwardPassesPerStep()),  # type: ignore[attr-defined]
            label_shapes=self.getLabelShapes(),  # type: ignore[attr-defined]
            use_gpu=bool(self.getUseGpu()))  # type: ignore[attr-defined]

    # -- the framework's part -------------------------------------------------------------
    def _trainer(self, spec: TrainSpec, checkpoint: bytes | None) -> Callable[[], Any]:
        """The picklable function each rank runs; rank 0's result goes to
        :meth:`_create_model`."""
        raise NotImplementedError

    def _create_model(self, result: Any, run_id: str,
                      metadata: dict[str, data.ColumnInfo]) -> HoraModel:
        raise NotImplementedError


class HoraModel(Model, ModelParams):  # type: ignore[misc]
    """A trained model whose ``transform(df)`` appends one prediction column per label
    (``getOutputCols()``); the Torch and Keras models fill in the framework."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__()
        self.setParams(**kwargs)

    def setParams(self, **kwargs: Any) -> HoraModel:
        """Set the parameters named in ``kwargs``; returns ``self``.

        Raises:
            TypeError: a name that is not a parameter.
        """
        self._set_from(kwargs)
        return self

    def _predictor(self) -> Callable[[list[np.ndarray]], list[np.ndarray]]:
        """A picklable function from one array per feature column (a batch of rows) to one
        array per output."""
        raise NotImplementedError

    def _transform(self, df: Any) -> Any:
        from pyspark.sql.types import StructField, StructType

        predict = self._predictor()
        features = list(self.getFeatureColumns())  # type: ignore[attr-defined]
        labels = list(self.getOrDefault(self.label_columns) or [])  # type: ignore[attr-defined]
        outputs = self.getOutputCols()
        metadata = self.getOrDefault(self._metadata) or {}  # type: ignore[attr-defined]
        label_types = {name: df.schema[name].dataType if name in df.columns else None
                       for name in labels}
        first = df.select(*features).first()
        if first is None:
            return df.sparkSession.createDataFrame([], df.schema)
        sample = predict(_feature_arrays([first], features, metadata))
        out_types = [_output_type(pred[0], label_types.get(label))
                     for pred, label in zip(sample, labels)]
        schema = StructType(df.schema.fields + [StructField(name, out_type, True)
                                                for name, out_type in zip(outputs, out_types)])

        def predict_partition(rows: Iterator[Any]) -> Iterator[tuple[Any, ...]]:
            batch: list[Any] = []
            for row in rows:
                batch.append(row)
                if len(batch) == PREDICT_BATCH_ROWS:
                    yield from _predict_rows(predict, batch, features, metadata, out_types)
                    batch = []
            if batch:
                yield from _predict_rows(predict, batch, features, metadata, out_types)

        return df.sparkSession.createDataFrame(df.rdd.mapPartitions(predict_partition), schema)


def _feature_arrays(rows: list[Any], features: list[str],
                    metadata: dict[str, data.ColumnInfo]) -> list[np.ndarray]:
    arrays = []
    for name in features:
        info = metadata.get(name)
        dtype = info.dtype if info is not None else "float32"
        values = [row[name].toArray() if hasattr(row[name], "toArray") else row[name]
                  for row in rows]
        arrays.append(np.asarray(values, dtype=dtype))
    return arrays


def _output_type(pred: np.ndarray, label_type: Any) -> Any:
    """A vector when the label is one or the prediction has several values; else the label's
    own scalar type (double when the label column is absent)."""
    from pyspark.ml.linalg import VectorUDT
    from pyspark.sql.types import DoubleType

    if isinstance(label_type, VectorUDT) or np.size(pred) != 1:
        return VectorUDT()
    return label_type if label_type is not None and _is_number(label_type) else DoubleType()


def _is_number(data_type: Any) -> bool:
    return type(data_type).__name__ in data._SCALAR_DTYPES


def _spark_value(pred: np.ndarray, out_type: Any) -> Any:
    from pyspark.ml.linalg import DenseVector, VectorUDT
    from pyspark.sql.types import BooleanType, FractionalType

    if isinstance(out_type, VectorUDT):
        return DenseVector(np.asarray(pred, dtype=np.float64).reshape(-1))
    value = np.asarray(pred).reshape(-1)[0].item()
    if isinstance(out_type, BooleanType):
        return bool(round(value))
    if isinstance(out_type, FractionalType):
        return float(value)
    return round(value)


def _predict_rows(predict: Callable[[list[np.ndarray]], list[np.ndarray]], rows: list[Any],
                  features: list[str], metadata: dict[str, data.ColumnInfo],
                  out_types: list[Any]) -> Iterator[tuple[Any, ...]]:
    preds = predict(_feature_arrays(rows, features, metadata))
    for i, row in enumerate(rows):
        yield tuple(row) + tuple(_spark_value(pred[i], out_type)
                                 for pred, out_type in zip(preds, out_types))
