"""Plain PyTorch DistributedDataParallel training with Hora as the torch.distributed backend.

    horarun -np 2 python examples/pytorch/ddp_hora_backend.py

``import hora.torch`` registers the ``hora`` backend; ``init_process_group(backend="hora")``
needs no MASTER_ADDR, RANK or WORLD_SIZE under horarun (or mpirun, torchrun). The rest is an
unchanged DDP script: every gradient allreduce DDP issues runs on Hora's engine. Data are generated
from a fixed seed; each rank trains on its own shard. Rank 0 prints the loss of every epoch and,
at the end, whether every rank holds the same parameters.
"""

from __future__ import annotations

import argparse

import hora.torch  # noqa: F401  (registers the "hora" backend)
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def make_data(samples: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The same points and labels on every rank: 3 classes of noisy Gaussian clusters."""
    gen = torch.Generator().manual_seed(seed)
    centers = torch.randn(3, 10, generator=gen) * 2
    labels = torch.randint(0, 3, (samples,), generator=gen)
    return centers[labels] + torch.randn(samples, 10, generator=gen), labels


def main() -> None:
    """Train, print the loss per epoch on rank 0, check that the ranks agree."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()

    dist.init_process_group(backend="hora")
    rank, size = dist.get_rank(), dist.get_world_size()
    x, y = make_data(2048, seed=0)
    x, y = x[rank::size], y[rank::size]

    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(10, 64), nn.ReLU(), nn.Linear(64, 3)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for epoch in range(args.epochs):
        total = torch.zeros(2)
        for start in range(0, len(x), args.batch_size):
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x[start:start + args.batch_size]),
                                   y[start:start + args.batch_size])
            loss.backward()
            optimizer.step()
            total += torch.tensor([loss.item(), 1.0])
        dist.all_reduce(total)
        if rank == 0:
            print(f"epoch {epoch}: mean loss {total[0] / total[1]:.4f}", flush=True)

    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    gathered = [torch.empty_like(flat) for _ in range(size)]
    dist.all_gather(gathered, flat)
    same = all(torch.equal(g, gathered[0]) for g in gathered)
    if rank == 0:
        print(f"backend {dist.get_backend()}, {size} ranks, parameters identical: {same}",
              flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
