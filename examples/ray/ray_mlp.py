"""Train the demo's MLP on a Ray cluster with Hora: the same training as
``horarun -np 2 python examples/pytorch/train_mlp.py``, its ranks Ray actors.

    python examples/ray/ray_mlp.py --num-workers 2                  # RayExecutor
    python examples/ray/ray_mlp.py --num-workers 2 --ray-train      # Ray Train (HoraTrainer)

Without ``--address`` it starts a local Ray instance with ``--num-workers`` CPUs; with
``--address auto`` (or ``ray://host:10001``) it joins a running cluster. The demo's own flags
(``--epochs``, ``--batch-size``, ``--save-params PATH``, ...) follow and are passed to it.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import ray

# The training itself is the demo's: examples/pytorch/train_mlp.py.
DEMO = Path(__file__).resolve().parent.parent / "pytorch"
sys.path.insert(0, str(DEMO))
import train_mlp


def with_executor(workers: int, demo_args: argparse.Namespace) -> None:
    """Horovod's ``RayExecutor`` API: start, run the training on every rank, shut down."""
    from hora.ray import RayExecutor

    executor = RayExecutor(RayExecutor.create_settings(timeout_s=60), num_workers=workers)
    executor.start()
    try:
        executor.run(train_mlp.train, args=[demo_args])
    finally:
        executor.shutdown()


def with_ray_train(workers: int, demo_args: argparse.Namespace, storage: str) -> None:
    """Ray Train: ``HoraTrainer`` (a ``DataParallelTrainer`` with ``HoraConfig``); rank 0
    reports the final accuracy-free metric ``done``."""
    from hora.ray import HoraTrainer
    from ray.train import RunConfig, ScalingConfig

    def loop(config: dict) -> None:
        train_mlp.train(config["args"])
        ray.train.report({"done": 1})

    result = HoraTrainer(loop, train_loop_config={"args": demo_args},
                         scaling_config=ScalingConfig(num_workers=workers),
                         run_config=RunConfig(storage_path=storage, name="hora_mlp")).fit()
    if result.error is not None:
        raise result.error


def main() -> None:
    """Parse the flags, connect to Ray, train."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-workers", type=int, default=2)
    parser.add_argument("--address", help="a running Ray cluster (default: start one here)")
    parser.add_argument("--ray-train", action="store_true", help="use Ray Train's trainer")
    parser.add_argument("--storage", default="/tmp/hora_ray_train",
                        help="Ray Train's storage path (with --ray-train)")
    ours, demo_argv = parser.parse_known_args()
    demo_args = train_mlp.parse_args(demo_argv)
    if ours.address:
        ray.init(address=ours.address)
    else:  # the workers import the demo module from its folder
        path = os.pathsep.join(filter(None, [str(DEMO), os.environ.get("PYTHONPATH")]))
        ray.init(num_cpus=ours.num_workers, include_dashboard=False,
                 runtime_env={"env_vars": {"PYTHONPATH": path}})
    try:
        if ours.ray_train:
            with_ray_train(ours.num_workers, demo_args, ours.storage)
        else:
            with_executor(ours.num_workers, demo_args)
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main()
