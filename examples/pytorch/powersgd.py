"""Train an MLP with PowerSGD gradient compression through a communication hook.

    horarun -np 2 python examples/pytorch/powersgd.py
    horarun -np 2 python examples/pytorch/powersgd.py --hook none      # plain allreduce

The data is generated from a fixed seed (every rank builds it and keeps its own shard). The
optimizer is ``hvd.DistributedOptimizer(..., comm_hook=hvd.hooks.PowerSGD(...))``: the first
``--start-iter`` steps average gradients as they are, then every weight matrix travels as two
thin factors of rank ``--rank``; biases are averaged uncompressed. Rank 0 prints the loss of every
epoch, the final accuracy and how many gradient elements were allreduced before and after
compression.
"""

from __future__ import annotations

import argparse

import hora.torch as hvd
import torch
import torch.nn.functional as F
from torch import nn


def make_dataset(samples: int, features: int, classes: int, seed: int
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """Points and labels (each class a Gaussian cluster), identical on every rank."""
    gen = torch.Generator().manual_seed(seed)
    centers = 0.1 * torch.randn(classes, features, generator=gen)
    labels = torch.randint(0, classes, (samples,), generator=gen)
    return centers[labels] + torch.randn(samples, features, generator=gen), labels


def parse_args() -> argparse.Namespace:
    """Command-line flags."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hook", choices=["powersgd", "fp16", "bf16", "allreduce", "none"],
                        default="powersgd")
    parser.add_argument("--rank", type=int, default=2, help="PowerSGD matrix approximation rank")
    parser.add_argument("--start-iter", type=int, default=20, help="uncompressed steps first")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32, help="per rank")
    parser.add_argument("--lr", type=float, default=0.05)
    return parser.parse_args()


def make_hook(args: argparse.Namespace) -> object:
    """The communication hook the flags ask for (None: the optimizer's own allreduce)."""
    if args.hook == "powersgd":
        return hvd.hooks.PowerSGD(matrix_approximation_rank=args.rank,
                                  start_powerSGD_iter=args.start_iter)
    return {"fp16": hvd.hooks.fp16_compress, "bf16": hvd.hooks.bf16_compress,
            "allreduce": hvd.hooks.allreduce, "none": None}[args.hook]


def main() -> None:
    """Train and report."""
    args = parse_args()
    hvd.init()
    torch.manual_seed(0)
    x, y = make_dataset(2048, 256, 10, seed=1)
    shard = slice(hvd.rank(), None, hvd.size())
    x_local, y_local = x[shard], y[shard]
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                          nn.Linear(512, 10))
    hook = make_hook(args)
    optimizer = hvd.DistributedOptimizer(
        torch.optim.SGD(model.parameters(), lr=args.lr * hvd.size(), momentum=0.9),
        named_parameters=model.named_parameters(), comm_hook=hook)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    steps = x_local.shape[0] // args.batch_size
    for epoch in range(args.epochs):
        total = torch.zeros(())
        for i in range(steps):
            batch = slice(i * args.batch_size, (i + 1) * args.batch_size)
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x_local[batch]), y_local[batch])
            loss.backward()
            optimizer.step()
            total += loss.detach()
        mean_loss = hvd.allreduce(total / steps, name="epoch_loss").item()
        if hvd.rank() == 0:
            print(f"epoch {epoch}: loss {mean_loss:.4f}", flush=True)
    with torch.no_grad():
        correct = (model(x).argmax(dim=1) == y).float().mean().item()
    if hvd.rank() == 0:
        print(f"accuracy {correct:.3f}")
        if isinstance(hook, hvd.hooks.PowerSGD):
            rate, before, after = hook.compression_stats()
            print(f"PowerSGD rank {args.rank}: {before} gradient elements compressed to {after} "
                  f"({rate:.1f}x) over the compressed steps")


if __name__ == "__main__":
    main()
