"""Ray Train ``TorchTrainer(..., ScalingConfig(num_workers=2), TorchConfig(backend=B))``, local.

    python ray_train.py --backend gloo,hora --out DIR       # results in DIR/gloo, DIR/hora

One local Ray instance (``ray.init``, no dashboard, its files in a fresh folder under /tmp)
serves one training per backend, in the order given; it is shut down at the end, also when a
training fails. The workers find this folder's modules through PYTHONPATH.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import ray
import ray.train
import ray.train.torch
import torch
import torch.distributed as dist
from client_run import StepClock, parse_args, write_result
from ray.train import RunConfig, ScalingConfig
from ray.train.torch import TorchConfig, TorchTrainer
from torch.utils.data import DataLoader
from training_task import build_model, flat_parameters, loss_of, make_dataset, samples_for

HERE = Path(__file__).resolve().parent


def train_loop(config: dict[str, Any]) -> None:
    """One Ray Train worker: DDP through ``prepare_model``, sharding through
    ``prepare_data_loader``, then its result file."""
    context = ray.train.get_context()
    seen = {"world_size": context.get_world_size(), "backend": dist.get_backend()}
    model = ray.train.torch.prepare_model(build_model(config["model"]))
    data = make_dataset(config["model"], samples_for(config["steps"], config["batch_size"]))
    loader = ray.train.torch.prepare_data_loader(DataLoader(data, batch_size=config["batch_size"]))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    clock = StepClock()
    steps = 0
    while steps < config["steps"]:
        for inputs, labels in loader:
            optimizer.zero_grad()
            loss_of(model(inputs), labels).backward()
            optimizer.step()
            clock.tick()
            steps += 1
            if steps == config["steps"]:
                break
    trained = model.module if hasattr(model, "module") else model
    write_result(Path(config["out"]), context.get_world_rank(), world_size=seen["world_size"],
                 backend=seen["backend"],
                 params=None if config["time"] else flat_parameters(trained),
                 step_ends=clock.ends if config["time"] else None)


def train(backend: str, args: Any, storage: Path) -> None:
    """One TorchTrainer over ``backend``; raises if the training failed."""
    config = {"model": args.model, "steps": args.steps, "batch_size": args.batch_size,
              "time": args.time, "out": str(args.out / backend)}
    trainer = TorchTrainer(train_loop, train_loop_config=config,
                           scaling_config=ScalingConfig(num_workers=2, use_gpu=False),
                           torch_config=TorchConfig(backend=backend, timeout_s=60),
                           run_config=RunConfig(storage_path=str(storage), name=backend))
    result = trainer.fit()
    if result.error is not None:
        raise RuntimeError(f"Ray Train over {backend} failed: {result.error}")


def main() -> None:
    """Start Ray once, train over each backend, shut Ray down."""
    args = parse_args(__doc__.splitlines()[0])
    ray_dir = Path(tempfile.mkdtemp(prefix="ray_", dir="/tmp"))
    path = os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))
    try:
        ray.init(num_cpus=2, include_dashboard=False, _temp_dir=str(ray_dir),
                 runtime_env={"env_vars": {"PYTHONPATH": path}})
        for backend in args.backend.split(","):
            train(backend, args, ray_dir / "results")
    finally:
        ray.shutdown()
        shutil.rmtree(ray_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
