"""Train a small MLP on generated data with Hora: the two-rank demo.

    horarun -np 2 python examples/pytorch/train_mlp.py

The dataset is generated from a fixed seed (classes are mixtures of Gaussian clusters), so
every rank builds the same data and keeps its own shard. The script shows the usual Horovod
steps: init, scale the learning rate, DistributedOptimizer, broadcast the initial state, and
average metrics with allreduce. Rank 0 prints the loss of every epoch and the final accuracy.
"""

from __future__ import annotations

import argparse
import time

import hora.torch as hvd
import torch
import torch.nn.functional as F
from torch import nn


def make_dataset(
    samples: int, features: int, classes: int, seed: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Points and labels, identical on every rank for the same arguments.

    Each class is a mixture of three overlapping Gaussian clusters, squashed by tanh: not
    linearly separable, and noisy enough that the accuracy stays below 100%.
    """
    gen = torch.Generator().manual_seed(seed)
    centers = torch.randn(3 * classes, features, generator=gen)
    cluster = torch.randint(0, 3 * classes, (samples,), generator=gen)
    x = 2.0 * torch.tanh(centers[cluster] + 1.4 * torch.randn(samples, features, generator=gen))
    return x, cluster % classes


def build_model(features: int, classes: int) -> nn.Module:
    """The network being trained."""
    return nn.Sequential(
        nn.Linear(features, 128),
        nn.ReLU(),
        nn.Linear(128, 128),
        nn.ReLU(),
        nn.Linear(128, classes),
    )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line flags (``argv``: the flags to parse instead of the command line's)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=64, help="samples per rank per step")
    parser.add_argument("--lr", type=float, default=0.02, help="learning rate of one rank")
    parser.add_argument("--samples", type=int, default=16384)
    parser.add_argument("--features", type=int, default=32)
    parser.add_argument("--classes", type=int, default=4)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--save-params", metavar="PATH",
                        help="rank 0 saves the trained parameters here (torch.save)")
    return parser.parse_args(argv)


def train(args: argparse.Namespace) -> dict[str, torch.Tensor]:
    """Train, printing the loss per epoch and the final test accuracy on rank 0; the trained
    parameters (equal on every rank). The launchers' examples (examples/ray, examples/spark) run
    this same function."""
    hvd.init()
    torch.set_num_threads(1)
    torch.manual_seed(args.seed + hvd.rank())  # different initial weights: broadcast fixes them

    x, y = make_dataset(args.samples, args.features, args.classes, args.seed)
    split = int(0.8 * args.samples)
    train_x, train_y = x[hvd.rank() : split : hvd.size()], y[hvd.rank() : split : hvd.size()]
    test_x, test_y = x[split + hvd.rank() :: hvd.size()], y[split + hvd.rank() :: hvd.size()]

    model = build_model(args.features, args.classes)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * hvd.size(), momentum=0.9)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)

    # Every rank must run the same number of steps: use the smallest shard's batch count.
    steps = int(
        hvd.allreduce(
            torch.tensor(len(train_x) // args.batch_size), op=hvd.Min, name="steps_per_epoch"
        )
    )
    shuffle = torch.Generator().manual_seed(args.seed + 1000 + hvd.rank())
    start = time.time()
    for epoch in range(args.epochs):
        model.train()
        order = torch.randperm(len(train_x), generator=shuffle)
        total = torch.zeros(())
        for step in range(steps):
            idx = order[step * args.batch_size : (step + 1) * args.batch_size]
            optimizer.zero_grad()
            loss = F.cross_entropy(model(train_x[idx]), train_y[idx])
            loss.backward()
            optimizer.step()
            total += loss.detach()
        epoch_loss = hvd.allreduce(total / steps, name="epoch_loss").item()
        if hvd.rank() == 0:
            print(f"epoch {epoch + 1:2d}/{args.epochs}  loss {epoch_loss:.4f}", flush=True)

    model.eval()
    with torch.no_grad():
        correct = (model(test_x).argmax(dim=1) == test_y).sum()
    counts = hvd.allreduce(
        torch.stack([correct, torch.tensor(len(test_y))]).double(), op=hvd.Sum, name="test_counts"
    )
    if hvd.rank() == 0:
        accuracy = 100.0 * counts[0].item() / counts[1].item()
        print(
            f"final test accuracy: {accuracy:.2f}% on {int(counts[1].item())} samples "
            f"({hvd.size()} ranks, {time.time() - start:.1f} s)",
            flush=True,
        )
    params = {name: value.detach().clone() for name, value in model.state_dict().items()}
    if args.save_params and hvd.rank() == 0:
        torch.save(params, args.save_params)
    hvd.shutdown()
    return params


def main() -> None:
    """Train with the command line's flags."""
    train(parse_args())


if __name__ == "__main__":
    main()
