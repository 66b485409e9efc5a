"""Train the PyTorch demo's MLP on Spark with Hora: each rank is one Spark task.

    python examples/spark/spark_mlp.py --num-proc 2 --epochs 2 [--save-params PATH]

Starts a SparkSession (``--master``, default ``local[NUM_PROC]``), runs the demo's training on
``--num-proc`` ranks with ``hora.spark.run`` and prints what rank 0 returned: the trained
parameters, which the driver saves with ``--save-params`` (in cluster mode too, as the result
comes back to the driver). Every other flag (``--epochs``, ``--lr``, ``--seed`` ...) is the
demo's. Hora must be importable on the executors: in local mode the driver's ``PYTHONPATH`` is
theirs.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

import hora.spark
import torch
from pyspark.sql import SparkSession

# The same training as the two-rank demo (horarun -np 2 python examples/pytorch/train_mlp.py):
# its train() and parse_args() are used as they are.
DEMO = Path(__file__).resolve().parent.parent / "pytorch" / "train_mlp.py"
sys.path.insert(0, str(DEMO.parent))
import train_mlp


def parse_args(argv: list[str] | None = None) -> tuple[argparse.Namespace, list[str]]:
    """This script's flags, and the rest: the demo's flags."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--num-proc", type=int, default=2, help="ranks (Spark tasks)")
    parser.add_argument("--master", help="Spark master URL (default: local[NUM_PROC])")
    parser.add_argument("--save-params", metavar="PATH",
                        help="the driver saves rank 0's parameters here (torch.save)")
    return parser.parse_known_args(argv)


def train_on_spark(spark: SparkSession, num_proc: int,
                   demo_argv: list[str]) -> list[dict[str, torch.Tensor]]:
    """Every rank's trained parameters, in rank order, from the demo's training with
    ``demo_argv`` on ``num_proc`` ranks of ``spark``."""
    # train() travels as a reference to the module train_mlp, which the executors import from
    # the copy Spark ships them.
    spark.sparkContext.addPyFile(str(DEMO))
    demo_args = train_mlp.parse_args(demo_argv)
    demo_args.save_params = None  # the driver saves them: a rank may run on another host
    return hora.spark.run(train_mlp.train, args=(demo_args,), num_proc=num_proc)


def describe(params: dict[str, Any]) -> str:
    """One line per tensor: name, shape and norm."""
    return "\n".join(f"  {name:12s} {tuple(value.shape)!s:12s} norm {value.norm():.6f}"
                     for name, value in params.items())


def main() -> None:
    """Train with the command line's flags."""
    args, demo_argv = parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # the executors' Python is this one
    spark = (SparkSession.builder.master(args.master or f"local[{args.num_proc}]")
             .appName("hora-spark-train-mlp")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")  # it would cut through rank 0's lines
             .getOrCreate())
    spark.sparkContext.setLogLevel("WARN")
    try:
        results = train_on_spark(spark, args.num_proc, demo_argv)
    finally:
        spark.stop()
    print(f"rank 0 of {len(results)} returned {len(results[0])} tensors:\n{describe(results[0])}")
    if args.save_params:
        torch.save(results[0], args.save_params)
        print(f"saved to {args.save_params}")


if __name__ == "__main__":
    main()
