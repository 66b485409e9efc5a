"""Hugging Face ``transformers.Trainer`` with ``use_cpu=True`` on the task's model.

    python -m torch.distributed.run --nproc-per-node 2 hf_trainer_train.py --backend hora --out DIR

gloo is asked for with ``TrainingArguments(ddp_backend="gloo")``; hora through
``hora.torch.accelerate.state()``, called before the TrainingArguments are made, which keep that
state with ``accelerator_config={"use_configured_state": True}`` (without it they reset
Accelerate's state: training still runs over the existing hora group, but
``args.distributed_state.backend`` then says gloo).
"""

from __future__ import annotations

import argparse
import tempfile

import torch
import torch.distributed as dist
from client_run import StepClock, parse_args, write_result
from torch import nn
from torch.utils.data import Dataset
from training_task import build_model, flat_parameters, loss_of, make_dataset, samples_for
from transformers import Trainer, TrainerCallback, TrainingArguments


class WithLoss(nn.Module):
    """The task's model in the Trainer's shape: keyword inputs, a dict holding the loss."""

    def __init__(self, model_name: str) -> None:
        super().__init__()
        self.net = build_model(model_name)

    def forward(self, inputs: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
        logits = self.net(inputs)
        return {"loss": loss_of(logits, labels), "logits": logits}


class Samples(Dataset):
    """The task's data set as the dicts the Trainer collates."""

    def __init__(self, model_name: str, samples: int) -> None:
        self.data = make_dataset(model_name, samples)

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        inputs, labels = self.data[index]
        return {"inputs": inputs, "labels": labels}


class Observer(TrainerCallback):
    """Notes the world and backend when training begins, and when each step ends."""

    def __init__(self) -> None:
        self.clock = StepClock()
        self.seen: dict[str, object] = {}

    def on_train_begin(self, args: TrainingArguments, *_args: object, **_kwargs: object) -> None:
        self.seen = {"world_size": args.world_size, "backend": dist.get_backend(),
                     "client_backend": args.distributed_state.backend}

    def on_step_end(self, *_args: object, **_kwargs: object) -> None:
        self.clock.tick()


def training_arguments(backend: str, args: argparse.Namespace,
                       output_dir: str) -> TrainingArguments:
    """CPU, SGD, ``args.steps`` steps, nothing saved, logged or reported."""
    if backend == "hora":
        from hora.torch.accelerate import state

        state()
        chosen = {"accelerator_config": {"use_configured_state": True}}
    else:
        chosen = {"ddp_backend": backend}
    return TrainingArguments(output_dir=output_dir, use_cpu=True, max_steps=args.steps,
                             per_device_train_batch_size=args.batch_size, optim="sgd",
                             learning_rate=0.1, lr_scheduler_type="constant", report_to=[],
                             save_strategy="no", logging_strategy="no", disable_tqdm=True,
                             remove_unused_columns=False, **chosen)


def main() -> None:
    """Train, write each rank's result, destroy the group."""
    args = parse_args(__doc__.splitlines()[0])
    observer = Observer()
    with tempfile.TemporaryDirectory(prefix="hf_trainer_") as output_dir:
        trainer = Trainer(model=WithLoss(args.model),
                          args=training_arguments(args.backend, args, output_dir),
                          train_dataset=Samples(args.model, samples_for(args.steps,
                                                                        args.batch_size)),
                          callbacks=[observer])
        trainer.train()
    write_result(args.out, trainer.args.process_index, world_size=observer.seen["world_size"],
                 backend=observer.seen["backend"], client_backend=observer.seen["client_backend"],
                 params=None if args.time else flat_parameters(trainer.model.net),
                 step_ends=observer.clock.ends if args.time else None)
    dist.destroy_process_group()  # the Trainer leaves the group to the interpreter's exit


if __name__ == "__main__":
    main()
