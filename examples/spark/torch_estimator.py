"""Train a PyTorch regression model on a Spark DataFrame with ``hora.spark.torch.TorchEstimator``.

    python examples/spark/torch_estimator.py --num-proc 2 --epochs 5 [--store DIR] [--master URL]

Makes a DataFrame of synthetic rows (``y = x . w + noise``, features as a ``pyspark.ml``
vector), fits the estimator on ``--num-proc`` ranks with a quarter of the rows held out for
validation, prints each epoch's losses, and adds the predictions to the DataFrame with
``transform``. The store (``--store``, default a temporary directory) keeps the run's
checkpoint. On a cluster the store must be a path every executor sees (a shared directory, or
an fsspec URL such as ``s3://bucket/prefix``).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

import numpy as np
import torch
from hora.spark.common.store import Store
from hora.spark.torch import TorchEstimator
from pyspark.ml.feature import VectorAssembler
from pyspark.sql import DataFrame, SparkSession
from torch import nn

WEIGHTS = np.array([1.5, -2.0, 0.5, 3.0], dtype=np.float64)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--num-proc", type=int, default=2, help="ranks (Spark tasks)")
    parser.add_argument("--master", help="Spark master URL (default: local[NUM_PROC])")
    parser.add_argument("--store", help="the store's directory or URL (default: a temporary one)")
    parser.add_argument("--rows", type=int, default=2048, help="rows of synthetic data")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=32, help="rows per batch per rank")
    parser.add_argument("--lr", type=float, default=0.05, help="learning rate of one rank")
    return parser.parse_args(argv)


def synthetic_data(spark: SparkSession, rows: int) -> DataFrame:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(rows, len(WEIGHTS)))
    y = x @ WEIGHTS + rng.normal(scale=0.1, size=rows)
    names = [f"x{i}" for i in range(len(WEIGHTS))]
    df = spark.createDataFrame([(*map(float, xs), float(t)) for xs, t in zip(x, y)],
                               [*names, "y"])
    return VectorAssembler(inputCols=names, outputCol="features").transform(df)


def fit(df: DataFrame, store: Store, args: argparse.Namespace) -> object:
    model = nn.Sequential(nn.Linear(len(WEIGHTS), 16), nn.ReLU(), nn.Linear(16, 1))
    estimator = TorchEstimator(
        num_proc=args.num_proc, store=store, model=model,
        optimizer=torch.optim.SGD(model.parameters(), lr=args.lr),
        loss=nn.MSELoss(), feature_cols=["features"], input_shapes=[[len(WEIGHTS)]],
        label_cols=["y"], validation=0.25, batch_size=args.batch_size, epochs=args.epochs,
        random_seed=1, verbose=0)
    return estimator.fit(df)


def main() -> None:
    args = parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # the executors' Python is this one
    spark = (SparkSession.builder.master(args.master or f"local[{args.num_proc}]")
             .appName("hora-spark-torch-estimator")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .getOrCreate())
    spark.sparkContext.setLogLevel("WARN")
    with tempfile.TemporaryDirectory() as scratch:
        try:
            df = synthetic_data(spark, args.rows)
            trained = fit(df, Store.create(args.store or scratch), args)
            for record in trained.getHistory():
                print(f"epoch {record['epoch']}: train loss {record['train']['loss']:.4f}, "
                      f"validation loss {record['validation']['loss']:.4f}")
            predictions = trained.transform(df).select("y", "y__output").limit(3).collect()
            for row in predictions:
                print(f"y {row.y:+.3f}  predicted {row.y__output:+.3f}")
        finally:
            spark.stop()


if __name__ == "__main__":
    main()
