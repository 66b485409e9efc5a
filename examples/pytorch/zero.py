"""Train an MLP with the optimizer state sharded across ranks (ZeRO stage 1).

    horarun -np 2 python examples/pytorch/zero.py
    horarun -np 2 python examples/pytorch/zero.py --checkpoint /tmp/zero_opt.pt

Each rank keeps Adam's state only for its shard of the parameters; the update of a bucket of
parameters runs on its owner as soon as the bucket's gradients have been averaged, inside
backward, and the updated parameters are broadcast from their owners. Rank 0 prints the loss per
epoch and how many bytes of optimizer state each rank holds. With ``--checkpoint`` the sharded
state is consolidated on rank 0 and saved, then loaded back on every rank.
"""

from __future__ import annotations

import argparse

import hora.torch as hvd
import torch
import torch.nn.functional as F
from torch import nn


def make_dataset(samples: int, features: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A regression target from a fixed random network; identical on every rank."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(samples, features, generator=gen)
    w = torch.randn(features, 1, generator=gen)
    return x, torch.tanh(x @ w) + 0.05 * torch.randn(samples, 1, generator=gen)


def parse_args() -> argparse.Namespace:
    """Command-line flags."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=64, help="samples per rank per step")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--samples", type=int, default=4096)
    parser.add_argument("--features", type=int, default=256)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--checkpoint", default=None, help="save and reload the optimizer state")
    return parser.parse_args()


def main() -> None:
    """Train, printing the loss per epoch and the optimizer-state bytes of every rank."""
    args = parse_args()
    hvd.init()
    torch.set_num_threads(1)
    torch.manual_seed(1234)
    x, y = make_dataset(args.samples, args.features, seed=7)
    x, y = x[hvd.rank() :: hvd.size()], y[hvd.rank() :: hvd.size()]
    model = nn.Sequential(
        nn.Linear(args.features, args.hidden), nn.ReLU(),
        nn.Linear(args.hidden, args.hidden), nn.ReLU(),
        nn.Linear(args.hidden, 1),
    )
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    optimizer = hvd.ZeroRedundancyOptimizer(model.parameters(), torch.optim.Adam, lr=args.lr)

    steps = len(x) // args.batch_size
    for epoch in range(args.epochs):
        total = 0.0
        for i in range(steps):
            batch = slice(i * args.batch_size, (i + 1) * args.batch_size)
            optimizer.zero_grad()
            loss = F.mse_loss(model(x[batch]), y[batch])
            loss.backward()  # each bucket's owner updates its parameters in here
            optimizer.step()  # waits for the updated parameters from their owners
            total += loss.item()
        mean = hvd.allreduce(torch.tensor(total / steps), name="epoch_loss")
        if hvd.rank() == 0:
            print(f"epoch {epoch + 1}: loss {mean.item():.4f}", flush=True)

    state_bytes = hvd.allgather_object(optimizer.state_bytes())
    if hvd.rank() == 0:
        print("optimizer state bytes per rank: " + ", ".join(str(b) for b in state_bytes))
        print(f"unsharded Adam state would be {sum(state_bytes)} bytes on every rank")

    if args.checkpoint:
        optimizer.consolidate_state_dict(to=0)
        if hvd.rank() == 0:
            torch.save(optimizer.state_dict(), args.checkpoint)
        hvd.barrier()
        optimizer.load_state_dict(torch.load(args.checkpoint))
        if hvd.rank() == 0:
            print(f"saved and reloaded the optimizer state: {args.checkpoint}")


if __name__ == "__main__":
    main()
