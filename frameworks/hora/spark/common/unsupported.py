"""Horovod estimator parameters Hora does not take: those of Petastorm's readers, which Hora's
data path does not use (accepted with a warning), and those whose feature Hora does not have
(refused)."""

from __future__ import annotations

import warnings
from collections.abc import Collection
from typing import Any

READER_PARAMS = ("train_reader_num_workers", "val_reader_num_workers", "reader_pool_type",
                 "shuffle_buffer_size", "inmemory_cache_all", "mp_start_method",
                 "tensorflow_dataset_prefetch_buffer_size")
"""Tuning of Petastorm's readers: the ranks read Parquet with pyarrow instead."""

MISSING_FEATURES = ("data_module", "loss_constructors", "train_minibatch_fn",
                    "transformation_fn", "transformation_edit_fields",
                    "transformation_removed_fields", "continuous_cols", "categorical_cols",
                    "compress_sparse_cols", "custom_objects")
"""Horovod parameters of features Hora's estimators do not have."""


def check_unsupported(owner: str, kwargs: dict[str, Any],
                      supported: Collection[str] = ()) -> None:
    """Drop the reader parameters from ``kwargs`` with a warning; refuse the others.

    Raises:
        TypeError: a parameter of :data:`MISSING_FEATURES` that is not None, unless the
            estimator lists it in ``supported``.
    """
    ignored = [name for name in READER_PARAMS if name in kwargs]
    for name in ignored:
        kwargs.pop(name)
    if ignored:
        warnings.warn(f"{owner}: {', '.join(ignored)} ignored: Hora's ranks read the "
                      "training data with pyarrow, not Petastorm", stacklevel=3)
    refused = [name for name in MISSING_FEATURES
               if kwargs.get(name) is not None and name not in supported]
    for name in MISSING_FEATURES:
        if name in kwargs and kwargs[name] is None:
            kwargs.pop(name)
    if refused:
        raise TypeError(f"{owner}: {', '.join(refused)} not supported by Hora's estimators")
