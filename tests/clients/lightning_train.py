"""Lightning ``Trainer(devices=2, accelerator="cpu", strategy=DDPStrategy(...))`` on CPU.

    python lightning_train.py --backend hora --out DIR                 # Lightning starts rank 1
    python -m torch.distributed.run --nproc-per-node 2 lightning_train.py --backend hora --out DIR
    python -m hora.runner -np 2 python lightning_train.py --backend hora --out DIR

The strategy is ``DDPStrategy(process_group_backend=B)``. Run alone, Lightning's own launcher
starts the second process (it re-runs this script); under torchrun or horarun it finds the
launcher's variables and starts none.
"""

from __future__ import annotations

import lightning as L
import torch
import torch.distributed as dist
from client_run import StepClock, parse_args, write_result
from lightning.pytorch.strategies import DDPStrategy
from torch.utils.data import DataLoader
from training_task import build_model, flat_parameters, loss_of, make_dataset, samples_for


class Classifier(L.LightningModule):
    """The task's model, trained with SGD; notes what the run looked like from inside."""

    def __init__(self, model_name: str) -> None:
        super().__init__()
        self.net = build_model(model_name)
        self.clock = StepClock()
        self.seen: dict[str, object] = {}

    def training_step(self, batch: list[torch.Tensor], _index: int) -> torch.Tensor:
        inputs, labels = batch
        return loss_of(self.net(inputs), labels)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def on_train_start(self) -> None:
        self.seen = {"world_size": self.trainer.world_size, "backend": dist.get_backend()}

    def on_train_batch_end(self, *_args: object) -> None:
        self.clock.tick()


def main() -> None:
    """Train, write each rank's result, destroy the group."""
    args = parse_args(__doc__.splitlines()[0])
    data = make_dataset(args.model, samples_for(args.steps, args.batch_size))
    module = Classifier(args.model)
    trainer = L.Trainer(devices=2, accelerator="cpu",
                        strategy=DDPStrategy(process_group_backend=args.backend),
                        max_steps=args.steps, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(module, DataLoader(data, batch_size=args.batch_size))
    write_result(args.out, trainer.global_rank, world_size=module.seen["world_size"],
                 backend=module.seen["backend"],
                 params=None if args.time else flat_parameters(module.net),
                 step_ends=module.clock.ends if args.time else None)
    dist.destroy_process_group()  # Lightning leaves the group to the interpreter's exit


if __name__ == "__main__":
    main()
