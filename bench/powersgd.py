"""Bytes sent per step and step time: PowerSGD rank 1 and rank 4 against plain allreduce.

    python bench/powersgd.py                  # 2 ranks
    python bench/powersgd.py --np 3 --width 1024 --steps 5

Starts itself under horarun. Each rank trains an MLP with large weight matrices (1024 inputs,
two hidden layers of ``--width``, 512 outputs; float32) through ``hvd.DistributedOptimizer``
three times: without a hook, then with ``hvd.hooks.PowerSGD`` at rank 1 and at rank 4
(``start_powerSGD_iter=2``, the uncompressed steps are not timed). Per configuration it reports the
median step time (zero_grad, forward, backward, step), averaged over the ranks; the gradient
bytes handed to allreduce per step (counted from the tensors: every gradient without a hook; P, Q
and the uncompressed vectors with PowerSGD, from its ``compression_stats()``); the bytes a rank
sends per step in a ring allreduce of that payload (2 (n - 1) / n times it); then the ratios to
plain allreduce.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def parse_args() -> argparse.Namespace:
    """Command-line flags."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--np", type=int, default=2, help="number of ranks")
    parser.add_argument("--width", type=int, default=2048, help="hidden layer width")
    parser.add_argument("--batch-size", type=int, default=32, help="per rank")
    parser.add_argument("--steps", type=int, default=10, help="timed steps per configuration")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    return parser.parse_args()


def _measure(args: argparse.Namespace, rank: int | None) -> tuple[float, float]:
    """(median step seconds, bytes allreduced per step) on this rank; ``rank`` None: no hook."""
    import hora.torch as hvd
    import torch
    import torch.nn.functional as F
    from torch import nn

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(1024, args.width), nn.ReLU(),
                          nn.Linear(args.width, args.width), nn.ReLU(),
                          nn.Linear(args.width, 512))
    hook = None if rank is None else hvd.hooks.PowerSGD(rank, start_powerSGD_iter=2)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01),
                                   named_parameters=model.named_parameters(), comm_hook=hook)
    gen = torch.Generator().manual_seed(hvd.rank())
    x = torch.randn(args.batch_size, 1024, generator=gen)
    y = torch.randn(args.batch_size, 512, generator=gen)

    def step() -> float:
        start = time.perf_counter()
        opt.zero_grad()
        F.mse_loss(model(x), y).backward()
        opt.step()
        return time.perf_counter() - start

    for _ in range(3):
        step()
    hvd.barrier()
    elements_before = hook.compression_stats()[2] if hook is not None else 0
    times = sorted(step() for _ in range(args.steps))
    if hook is None:
        elements = sum(p.numel() for p in model.parameters())
    else:
        elements = (hook.compression_stats()[2] - elements_before) / args.steps
    return times[len(times) // 2], 4.0 * elements


def worker(args: argparse.Namespace) -> None:
    """Run the three configurations on this rank; rank 0 prints the table."""
    import hora.torch as hvd
    import torch

    hvd.init()
    configs = [("allreduce", None), ("PowerSGD rank 1", 1), ("PowerSGD rank 4", 4)]
    rows = []
    for label, rank in configs:
        local = torch.tensor(_measure(args, rank), dtype=torch.float64)
        rows.append((label, hvd.allreduce(local, name=f"bench.{label}").tolist()))
    if hvd.rank() != 0:
        return
    base_time, base_payload = rows[0][1]
    ring = 2.0 * (hvd.size() - 1) / hvd.size()
    params = sum((1024 * args.width, args.width * args.width, args.width * 512))
    print(f"{hvd.size()} ranks, MLP 1024-{args.width}-{args.width}-512 ({params / 1e6:.1f} M "
          f"weights), batch {args.batch_size} per rank, median of {args.steps} steps, "
          "averaged over the ranks")
    print("| hook | step time | allreduced / step | ring: sent / rank / step | "
          "bytes vs allreduce | time vs allreduce |")
    print("|---|---|---|---|---|---|")
    for label, (seconds, payload) in rows:
        print(f"| {label} | {seconds * 1e3:.1f} ms | {payload / 1e6:.3f} MB "
              f"| {ring * payload / 1e6:.3f} MB | {payload / base_payload:.4f} "
              f"| {seconds / base_time:.2f} |")


def main() -> None:
    """Start the workers under horarun (or be one)."""
    args = parse_args()
    if args.worker:
        worker(args)
        return
    command = [sys.executable, "-m", "hora.runner.launch", "-np", str(args.np), sys.executable,
               str(Path(__file__).resolve()), "--worker", "--width", str(args.width),
               "--batch-size", str(args.batch_size), "--steps", str(args.steps)]
    env = dict(os.environ)
    sys.exit(subprocess.call(command, env=env, cwd=REPO))


if __name__ == "__main__":
    main()
