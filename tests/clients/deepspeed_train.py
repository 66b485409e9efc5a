"""DeepSpeed ZeRO stage 1 or 2 on CPU, after ``deepspeed.init_distributed(dist_backend=B)``.

    DS_ACCELERATOR=cpu python -m torch.distributed.run --nproc-per-node 2 deepspeed_train.py \\
        --backend hora --stage 2 --out DIR

``init_distributed`` makes the default group before ``deepspeed.initialize``, which would
otherwise make one of gloo. Each rank trains on its own shard of the data set.
"""

from __future__ import annotations

import argparse
import gc

import deepspeed
import deepspeed.comm
import torch
import torch.distributed as dist
from client_run import StepClock, parse_args, write_result
from torch.utils.data import DataLoader, DistributedSampler
from training_task import build_model, flat_parameters, loss_of, make_dataset, samples_for


def zero_config(stage: int, batch_size: int) -> dict:
    """DeepSpeed's configuration: ZeRO ``stage``, fp32, the client's optimizer."""
    return {"train_micro_batch_size_per_gpu": batch_size, "gradient_accumulation_steps": 1,
            "zero_optimization": {"stage": stage}, "zero_allow_untested_optimizer": True,
            "steps_per_print": 1_000_000, "wall_clock_breakdown": False}


def train(args: argparse.Namespace) -> None:
    """Train over the default group, then write this rank's result."""
    model = build_model(args.model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    engine, *_ = deepspeed.initialize(model=model, optimizer=optimizer,
                                      config=zero_config(args.stage, args.batch_size))
    rank, world_size = deepspeed.comm.get_rank(), deepspeed.comm.get_world_size()
    seen = {"world_size": world_size, "backend": dist.get_backend()}
    data = make_dataset(args.model, samples_for(args.steps, args.batch_size))
    sampler = DistributedSampler(data, num_replicas=world_size, rank=rank, shuffle=False)
    clock = StepClock()
    steps = 0
    while steps < args.steps:
        for inputs, labels in DataLoader(data, batch_size=args.batch_size, sampler=sampler):
            engine.backward(loss_of(engine(inputs), labels))
            engine.step()
            clock.tick()
            steps += 1
            if steps == args.steps:
                break
    write_result(args.out, rank, world_size=seen["world_size"], backend=seen["backend"],
                 params=None if args.time else flat_parameters(engine.module),
                 step_ends=clock.ends if args.time else None)
    engine.destroy()


def main() -> None:
    """Make the group, train, and release the engine before the group.

    The engine and its ZeRO optimizer hold the process groups; once they are gone, the groups
    are destroyed while the interpreter still runs (a gloo group left to the interpreter's exit
    can abort the process there: "terminate called without an active exception").
    """
    args = parse_args(__doc__.splitlines()[0],
                      [("--stage", {"type": int, "choices": (1, 2), "default": 1})])
    deepspeed.init_distributed(dist_backend=args.backend)
    train(args)
    gc.collect()
    deepspeed.comm.destroy_process_group()


if __name__ == "__main__":
    main()
