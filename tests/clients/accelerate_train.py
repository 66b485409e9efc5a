"""Hugging Face Accelerate on CPU: ``Accelerator(cpu=True)`` preparing model, optimizer and data.

    python -m torch.distributed.run --nproc-per-node 2 accelerate_train.py --backend hora --out DIR
    python -m hora.runner -np 2 python accelerate_train.py --backend gloo --out DIR

Accelerate takes gloo by name (``InitProcessGroupKwargs(backend="gloo")``); it refuses other
names on CPU, so hora comes through ``hora.torch.accelerate.state()``, called before the
Accelerator is made.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from accelerate import Accelerator
from accelerate.utils import InitProcessGroupKwargs
from client_run import StepClock, parse_args, write_result
from torch.utils.data import DataLoader
from training_task import build_model, flat_parameters, loss_of, make_dataset, samples_for


def make_accelerator(backend: str) -> Accelerator:
    """A CPU Accelerator whose process group has ``backend``."""
    if backend == "hora":
        from hora.torch.accelerate import state

        state()
        return Accelerator(cpu=True)
    return Accelerator(cpu=True, kwargs_handlers=[InitProcessGroupKwargs(backend=backend)])


def main() -> None:
    """Train, then write each rank's result."""
    args = parse_args(__doc__.splitlines()[0])
    accelerator = make_accelerator(args.backend)
    data = make_dataset(args.model, samples_for(args.steps, args.batch_size))
    model = build_model(args.model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer, loader = accelerator.prepare(
        model, optimizer, DataLoader(data, batch_size=args.batch_size))
    seen = {"world_size": accelerator.num_processes, "backend": dist.get_backend(),
            "client_backend": accelerator.state.backend}
    clock = StepClock()
    steps = 0
    while steps < args.steps:
        for inputs, labels in loader:
            optimizer.zero_grad()
            accelerator.backward(loss_of(model(inputs), labels))
            optimizer.step()
            clock.tick()
            steps += 1
            if steps == args.steps:
                break
    write_result(args.out, accelerator.process_index, world_size=seen["world_size"],
                 backend=seen["backend"], client_backend=seen["client_backend"],
                 params=None if args.time else flat_parameters(accelerator.unwrap_model(model)),
                 step_ends=clock.ends if args.time else None)
    accelerator.end_training()


if __name__ == "__main__":
    main()
