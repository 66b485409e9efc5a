"""The Spark ML parameters of Hora's estimators and models, with Horovod's names: each
parameter ``foo_bar`` is a ``pyspark.ml.param.Param`` with ``getFooBar()`` and ``setFooBar()``
(as ``horovod.spark.common.params``), so estimators copy, ``explainParams()`` and fit like any
Spark ML estimator."""

from __future__ import annotations

from typing import Any, ClassVar

from pyspark.ml.param import Param, Params


def _accessor_name(name: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in name.split("_") if part)


def declare(cls: type, table: list[tuple[str, str, Any]]) -> type:
    """Give ``cls`` one ``Param`` per ``(name, doc, default)`` row, its default, and the
    ``get<Name>``/``set<Name>`` pair."""
    for name, doc, _ in table:
        setattr(cls, name, Param(Params._dummy(), name, doc))
        suffix = _accessor_name(name)

        def getter(self: Params, _name: str = name) -> Any:
            return self.getOrDefault(getattr(self, _name))

        def setter(self: Params, value: Any, _name: str = name) -> Params:
            return self._set(**{_name: value})

        getter.__doc__ = f"The ``{name}`` parameter: {doc}."
        setter.__doc__ = f"Set the ``{name}`` parameter: {doc}. Returns ``self``."
        setattr(cls, f"get{suffix}", getter)
        setattr(cls, f"set{suffix}", setter)
    cls._defaults_table = getattr(cls, "_defaults_table", []) + table  # type: ignore[attr-defined]
    return cls


class _Declared(Params):
    _defaults_table: ClassVar[list[tuple[str, str, Any]]] = []

    def __init__(self) -> None:
        super().__init__()
        self._setDefault(**{name: default for name, _, default in self._defaults_table})

    def _set_from(self, values: dict[str, Any]) -> None:
        """Set every parameter named in ``values`` whose value is not None.

        Raises:
            TypeError: a name that is not a parameter.
        """
        unknown = sorted(name for name in values if not self.hasParam(name))
        if unknown:
            raise TypeError(f"{type(self).__name__} got unexpected parameters {unknown}")
        self._set(**{name: value for name, value in values.items() if value is not None})


ESTIMATOR_PARAMS: list[tuple[str, str, Any]] = [
    ("num_proc", "number of ranks (default: Spark's default parallelism)", None),
    ("model", "the model to train", None),
    ("backend", "runs the training function on the ranks (default: a SparkBackend)", None),
    ("store", "where the training data, checkpoints and logs go (a Store)", None),
    ("optimizer", "the optimizer, wrapped in hvd.DistributedOptimizer on each rank", None),
    ("loss", "the loss function (or one per label column)", None),
    ("loss_weights", "weights of the losses when there are several", None),
    ("metrics", "metrics recorded each epoch", None),
    ("sample_weight_col", "column of each row's weight in the loss", None),
    ("gradient_compression", "hvd.Compression used by the DistributedOptimizer", None),
    ("feature_cols", "columns fed to the model, one per input", None),
    ("label_cols", "columns of the targets, one per output", None),
    ("validation", "fraction of rows, or name of a boolean column, held out for validation",
     None),
    ("callbacks", "framework callbacks run during training", []),
    ("batch_size", "rows per batch on each rank", 32),
    ("val_batch_size", "rows per validation batch on each rank (default: batch_size)", None),
    ("epochs", "passes over the training data", 1),
    ("train_steps_per_epoch", ("batches per epoch on each rank (default: the training rows "
                               "divided by batch_size and the number of ranks)"), None),
    ("validation_steps_per_epoch", "validation batches per epoch (default: all of them)", None),
    ("verbose", "0 is silent; 1 or more prints each epoch's metrics from rank 0", 1),
    ("random_seed", "seed of the model's random state and of the shuffling", None),
    ("shuffle", "shuffle each rank's rows every epoch", True),
    ("partitions_per_process", "Parquet files written per rank", 10),
    ("run_id", ("name of the run in the store (its checkpoint and logs); a fit whose run_id "
                "has a checkpoint starts from it"), None),
    ("backward_passes_per_step", "backward passes accumulated before each allreduce", 1),
    ("label_shapes", "shapes the label columns are given before the loss", None),
    ("use_gpu", "train on the GPU of each rank's local rank when there is one", True),
]

MODEL_PARAMS: list[tuple[str, str, Any]] = [
    ("history", "the metrics of each epoch of training", None),
    ("model", "the trained model", None),
    ("feature_columns", "columns fed to the model", None),
    ("label_columns", "columns of the targets", None),
    ("output_cols", "columns transform() adds (default: each label column + '__output')", None),
    ("run_id", "name of the run in the store", None),
    ("_metadata", "shapes and types of the training columns", None),
]


class EstimatorParams(_Declared):
    """The parameters every Hora estimator takes."""


declare(EstimatorParams, ESTIMATOR_PARAMS)


class _ModelParamTable(_Declared):
    pass


declare(_ModelParamTable, MODEL_PARAMS)


class ModelParams(_ModelParamTable):
    """The parameters every model an estimator returns carries."""

    def getOutputCols(self) -> list[str]:
        """The columns transform() adds: ``output_cols``, else each label column with
        ``__output`` appended."""
        cols = self.getOrDefault(self.output_cols)  # type: ignore[attr-defined]
        labels = self.getOrDefault(self.label_columns) or []  # type: ignore[attr-defined]
        return list(cols) if cols else [f"{label}__output" for label in labels]
