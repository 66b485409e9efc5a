"""Bytes sent per step and step time: PowerSGD rank 1 and rank 4 against plain allreduce.

    python bench/powersgd.py                  # 2 ranks
    python bench/powersgd.py --np 3 --width 1024 --steps 5 [--json PATH]

Starts itself under horarun. Each rank trains an MLP with large weight matrices (1024 inputs,
two hidden layers of ``--width``, 512 outputs; float32) through ``hvd.DistributedOptimizer``
three times: without a hook, then with ``hvd.hooks.PowerSGD`` at rank 1 and at rank 4
(``start_powerSGD_iter=2``, the uncompressed steps are not timed). Per configuration it reports the
median step time (zero_grad, forward, backward, step), averaged over the ranks; the gradient
bytes handed to allreduce per step (counted from the tensors: every gradient without a hook; P, Q
and the uncompressed vectors with PowerSGD, from its ``compression_stats()``); the bytes a rank
sends per step in a ring allreduce of that payload (2 (n - 1) / n times it); then the ratios to
plain allreduce. The figures go to the results file (``--json``, by default
bench/results/powersgd-np<N>.json).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common.launch import REPO, horarun_command
from common.results import Recorder, json_help
from common.tables import markdown_table

CONFIGS = (("allreduce", None), ("PowerSGD rank 1", 1), ("PowerSGD rank 4", 4))


def parse_args() -> argparse.Namespace:
    """Command-line flags."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--np", type=int, default=2, help="number of ranks")
    parser.add_argument("--width", type=int, default=2048, help="hidden layer width")
    parser.add_argument("--batch-size", type=int, default=32, help="per rank")
    parser.add_argument("--steps", type=int, default=10, help="timed steps per configuration")
    parser.add_argument("--json", type=Path, help=json_help("powersgd"))
    parser.add_argument("--worker", metavar="OUT", help=argparse.SUPPRESS)
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
    """Run the three configurations on this rank; rank 0 writes the rows to ``args.worker``."""
    import hora.torch as hvd
    import torch

    hvd.init()
    rows = []
    ring = 2.0 * (hvd.size() - 1) / hvd.size()
    for label, rank in CONFIGS:
        local = torch.tensor(_measure(args, rank), dtype=torch.float64)
        seconds, payload = hvd.allreduce(local, name=f"bench.{label}").tolist()
        rows.append({"implementation": label, "case": f"MLP 1024-{args.width}-{args.width}-512",
                     "median_s": seconds, "allreduced_bytes": payload,
                     "ring_sent_bytes": ring * payload})
    if hvd.rank() == 0:
        Path(args.worker).write_text(json.dumps(rows))


def table(rows: list[dict[str, Any]]) -> list[str]:
    """Per hook: step time, bytes allreduced and sent, and both over plain allreduce's."""
    base = rows[0]
    return markdown_table(
        ["hook", "step time", "allreduced / step", "ring: sent / rank / step",
         "bytes vs allreduce", "time vs allreduce"],
        [[r["implementation"], f"{r['median_s'] * 1e3:.1f} ms",
          f"{r['allreduced_bytes'] / 1e6:.3f} MB", f"{r['ring_sent_bytes'] / 1e6:.3f} MB",
          f"{r['allreduced_bytes'] / base['allreduced_bytes']:.4f}",
          f"{r['median_s'] / base['median_s']:.2f}"] for r in rows])


def main() -> None:
    """Start the workers under horarun (or be one), print the table, write the results."""
    args = parse_args()
    if args.worker:
        worker(args)
        return
    recorder = Recorder("powersgd", packages=("torch",))
    with tempfile.TemporaryDirectory(prefix="hora-powersgd-") as tmp:
        out = os.path.join(tmp, "rows.json")
        command = [*horarun_command(args.np), sys.executable, str(Path(__file__).resolve()),
                   "--worker", out, "--width", str(args.width),
                   "--batch-size", str(args.batch_size), "--steps", str(args.steps)]
        code = subprocess.call(command, env=dict(os.environ), cwd=REPO)
        if code != 0:
            sys.exit(code)
        rows = json.loads(Path(out).read_text())
    params = sum((1024 * args.width, args.width * args.width, args.width * 512))
    print(f"{args.np} ranks, MLP 1024-{args.width}-{args.width}-512 ({params / 1e6:.1f} M "
          f"weights), batch {args.batch_size} per rank, median of {args.steps} steps, "
          "averaged over the ranks")
    print("\n".join(table(rows)))
    settings = {"ranks": args.np, "width": args.width, "batch_size": args.batch_size,
                "steps": args.steps, "weights": params, "dtype": "float32",
                "figure": "median step time, averaged over the ranks"}
    recorder.write(args.json, settings, rows, ranks=args.np)


if __name__ == "__main__":
    main()
