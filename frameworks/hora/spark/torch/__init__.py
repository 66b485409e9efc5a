"""Hora's PyTorch estimator for Spark (Horovod's ``horovod.spark.torch``):
``TorchEstimator(num_proc=2, store=Store.create(path), model=..., optimizer=..., loss=...,
feature_cols=[...], label_cols=[...]).fit(df)`` trains on a DataFrame and returns a
``TorchModel`` whose ``transform(df)`` adds the predictions."""

from __future__ import annotations

from hora.spark.torch.estimator import TorchEstimator, TorchModel

__all__ = ["TorchEstimator", "TorchModel"]
