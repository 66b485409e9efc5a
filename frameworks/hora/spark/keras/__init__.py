"""Hora's Keras estimator for Spark (Horovod's ``horovod.spark.keras``):
``KerasEstimator(num_proc=2, store=Store.create(path), model=..., optimizer=..., loss=...,
feature_cols=[...], label_cols=[...]).fit(df)`` trains a Keras model on a DataFrame and returns
a ``KerasModel`` whose ``transform(df)`` adds the predictions."""

from __future__ import annotations

from hora.spark.keras.estimator import KerasEstimator, KerasModel

__all__ = ["KerasEstimator", "KerasModel"]
