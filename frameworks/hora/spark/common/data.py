"""The data path of the Spark estimators: Spark writes the DataFrame's training columns to the
store as Parquet, and each rank reads its own contiguous share of the rows with pyarrow.

Parquet is what Spark writes fastest and pyarrow reads without a JVM, and a rank opens only
the row groups that hold its rows. Vector columns (``pyspark.ml.linalg``, dense or sparse)
become float32 arrays on the way in, so the ranks get dense NumPy arrays of a fixed shape.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from hora.spark.common.store import Store

_SCALAR_DTYPES = {
    "BooleanType": "bool", "ByteType": "int8", "ShortType": "int16", "IntegerType": "int32",
    "LongType": "int64", "FloatType": "float32", "DoubleType": "float64",
}


@dataclasses.dataclass(frozen=True)
class ColumnInfo:
    """What a rank needs to turn a Parquet column into a NumPy array.

    ``shape`` is one row's shape: ``()`` for a scalar, ``(n,)`` for a vector or array column.
    ``kind`` is ``"scalar"``, ``"vector"`` (``pyspark.ml.linalg`` vectors) or ``"array"``.
    """

    name: str
    dtype: str
    shape: tuple[int, ...]
    kind: str


@dataclasses.dataclass(frozen=True)
class PreparedData:
    """Where :func:`prepare_data` put the rows, and how many went to each part."""

    train_path: str
    val_path: str | None
    train_rows: int
    val_rows: int
    metadata: dict[str, ColumnInfo]


def column_info(df: Any, name: str) -> ColumnInfo:
    """The :class:`ColumnInfo` of column ``name`` of ``df``; a vector or array column's length
    comes from its first row, and every row must have it (checked when the data is read).

    Raises:
        ValueError: no such column, a type the estimators cannot feed (strings, maps,
            nested arrays), or a vector or array column whose first row is null.
    """
    from pyspark.ml.linalg import VectorUDT
    from pyspark.sql import functions as F
    from pyspark.sql.types import ArrayType

    if name not in df.columns:
        raise ValueError(f"column {name!r} is not in the DataFrame (its columns: {df.columns})")
    data_type = df.schema[name].dataType
    kind_name = type(data_type).__name__
    if kind_name in _SCALAR_DTYPES:
        return ColumnInfo(name, _SCALAR_DTYPES[kind_name], (), "scalar")
    if isinstance(data_type, (VectorUDT, ArrayType)):
        if isinstance(data_type, ArrayType):
            element = type(data_type.elementType).__name__
            if element not in _SCALAR_DTYPES:
                raise ValueError(f"column {name!r}: arrays of {element} cannot be fed to a "
                                 "model; use arrays of numbers")
            dtype, kind, length = _SCALAR_DTYPES[element], "array", F.size(F.col(name))
        else:
            from pyspark.ml.functions import vector_to_array

            dtype, kind = "float32", "vector"
            length = F.size(vector_to_array(F.col(name)))
        first = df.select(length.alias("n")).where(F.col(name).isNotNull()).first()
        if first is None:
            raise ValueError(f"column {name!r} has no non-null row to take its length from")
        return ColumnInfo(name, dtype, (int(first["n"]),), kind)
    raise ValueError(f"column {name!r} has type {data_type.simpleString()}, which cannot be fed "
                     "to a model: use numbers, arrays of numbers or pyspark.ml vectors")


def get_metadata(df: Any, columns: Sequence[str]) -> dict[str, ColumnInfo]:
    """:func:`column_info` of each of ``columns``."""
    return {name: column_info(df, name) for name in columns}


def _for_parquet(df: Any, metadata: dict[str, ColumnInfo]) -> Any:
    """``df``'s training columns with vectors as float32 arrays."""
    from pyspark.ml.functions import vector_to_array
    from pyspark.sql import functions as F

    cols = []
    for info in metadata.values():
        col = F.col(info.name)
        if info.kind == "vector":
            col = vector_to_array(col, dtype="float32")
        cols.append(col.alias(info.name))
    return df.select(*cols)


def split_validation(df: Any, validation: float | str | None,
                     seed: int | None) -> tuple[Any, Any | None]:
    """``(train_df, val_df)``: ``validation`` is a fraction of rows drawn at random (with
    ``seed``), or the name of a column whose true (or nonzero) rows are the validation set, or
    None for no validation set.

    Raises:
        ValueError: a fraction outside (0, 1), or a column that is not there.
    """
    from pyspark.sql import functions as F

    if validation is None or validation == 0:
        return df, None
    if isinstance(validation, str):
        if validation not in df.columns:
            raise ValueError(f"validation column {validation!r} is not in the DataFrame "
                             f"(its columns: {df.columns})")
        is_val = F.coalesce(F.col(validation).cast("boolean"), F.lit(False))
        return df.where(~is_val), df.where(is_val)
    fraction = float(validation)
    if not 0.0 < fraction < 1.0:
        raise ValueError(f"validation must be a fraction in (0, 1) or a column name, "
                         f"got {validation!r}")
    train_df, val_df = df.randomSplit([1.0 - fraction, fraction], seed=seed)
    return train_df, val_df


def prepare_data(store: Store, df: Any, columns: Sequence[str], *,
                 validation: float | str | None = None, num_partitions: int = 1,
                 seed: int | None = None, dataset_idx: int | str | None = None) -> PreparedData:
    """Write ``columns`` of ``df`` to the store's train (and validation) path as Parquet, in
    ``num_partitions`` files each, replacing what an earlier fit left there.

    Raises:
        ValueError: as :func:`column_info` and :func:`split_validation`; no training rows.
    """
    metadata = get_metadata(df, columns)
    train_df, val_df = split_validation(df, validation, seed)
    train_path = store.get_train_data_path(dataset_idx)
    train_rows = _write(store, _for_parquet(train_df, metadata), train_path, num_partitions)
    if train_rows == 0:
        raise ValueError("the DataFrame has no training rows"
                         + (" after the validation split" if val_df is not None else ""))
    val_path, val_rows = None, 0
    if val_df is not None:
        val_path = store.get_val_data_path(dataset_idx)
        val_rows = _write(store, _for_parquet(val_df, metadata), val_path, num_partitions)
        if val_rows == 0:
            val_path = None
    return PreparedData(train_path, val_path, train_rows, val_rows, metadata)


def _write(store: Store, df: Any, path: str, num_partitions: int) -> int:
    df.repartition(max(1, num_partitions)).write.mode("overwrite").parquet(store.spark_path(path))
    return dataset_rows(store, path)


def dataset_rows(store: Store, path: str) -> int:
    """Rows of the Parquet dataset at ``path``, from its files' footers."""
    import pyarrow.parquet as pq

    fs = store.filesystem
    total = 0
    for name in store.parquet_files(path):
        with fs.open(name, "rb") as f:
            total += pq.ParquetFile(f).metadata.num_rows
    return total


def shard_bounds(rows: int, rank: int, size: int) -> tuple[int, int]:
    """Rank ``rank``'s rows ``[begin, end)`` of ``rows``: contiguous, sizes differing by at
    most one, the larger ones first."""
    base, extra = divmod(rows, size)
    begin = rank * base + min(rank, extra)
    return begin, begin + base + (1 if rank < extra else 0)


def read_shard(store: Store, path: str, metadata: dict[str, ColumnInfo], rank: int,
               size: int) -> dict[str, np.ndarray]:
    """Rank ``rank`` of ``size``'s rows of the dataset at ``path``: one array per column of
    ``metadata``, of shape ``(rows,) + info.shape``. Only the row groups that hold the rank's
    rows are read.

    Raises:
        ValueError: a vector or array column with a row of another length, or a null.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    fs = store.filesystem
    names = list(metadata)
    files = [pq.ParquetFile(fs.open(name, "rb")) for name in store.parquet_files(path)]
    groups = [(f, g, f.metadata.row_group(g).num_rows)
              for f in files for g in range(f.metadata.num_row_groups)]
    begin, end = shard_bounds(sum(rows for _, _, rows in groups), rank, size)
    tables, offset = [], 0
    for f, g, rows in groups:
        lo, hi = max(begin, offset), min(end, offset + rows)
        if lo < hi:
            tables.append(f.read_row_group(g, columns=names).slice(lo - offset, hi - lo))
        offset += rows
    for f in files:
        f.close()
    if not tables:
        return {name: np.zeros((0,) + info.shape, info.dtype) for name, info in metadata.items()}
    table = pa.concat_tables(tables)
    return {name: _to_numpy(table.column(name), info) for name, info in metadata.items()}


def row_count(arrays: dict[str, np.ndarray]) -> int:
    """Rows of a shard :func:`read_shard` returned (every column has as many)."""
    return len(next(iter(arrays.values())))


def _to_numpy(column: Any, info: ColumnInfo) -> np.ndarray:
    if column.null_count:
        raise ValueError(f"column {info.name!r} has null values; fill or drop them before fit")
    if info.kind == "scalar":
        return column.to_numpy().astype(info.dtype, copy=False)
    column = column.combine_chunks()
    lengths = column.value_lengths().to_numpy(zero_copy_only=False)
    if lengths.size and (lengths != info.shape[0]).any():
        bad = int(lengths[lengths != info.shape[0]][0])
        raise ValueError(f"column {info.name!r}: a row has {bad} values, the first row had "
                         f"{info.shape[0]}; every row must have the same length")
    values = column.flatten().to_numpy(zero_copy_only=False).astype(info.dtype, copy=False)
    return values.reshape((len(column),) + info.shape)


def batches(rows: int, batch_size: int, shuffle: bool, seed: int) -> Iterator[np.ndarray]:
    """Row indices of ``[0, rows)`` in batches of ``batch_size``, forever: pass after pass,
    each in a new order when ``shuffle`` (drawn from ``seed``), a batch running on into the
    next pass rather than coming up short.

    Raises:
        ValueError: ``rows`` or ``batch_size`` below 1.
    """
    if rows < 1 or batch_size < 1:
        raise ValueError(f"batches need rows and a batch size of at least 1, got rows={rows}, "
                         f"batch_size={batch_size}")
    rng = np.random.default_rng(seed)
    pending = np.zeros(0, dtype=np.int64)
    while True:
        while pending.size < batch_size:
            order = rng.permutation(rows) if shuffle else np.arange(rows)
            pending = np.concatenate([pending, order])
        yield pending[:batch_size]
        pending = pending[batch_size:]
