"""Optimizer-state bytes per rank with and without ZeRO, and step time with and without
updates inside backward (hora.torch), side by side with ratios.

    python bench/torch_zero.py                  # 2 and 4 ranks
    python bench/torch_zero.py --np 2 --iters 20 --layers 8 --width 512 [--json PATH]

For each rank count it starts one horarun job that trains the same MLP (``--layers`` square
matrices of ``--width``, float32, Adam) three ways on synthetic data and times the whole step
(zero_grad, forward, backward, step):
- ``DistributedOptimizer`` (gradients allreduced in backward, the update in ``step()``),
- ``DistributedOptimizer(step_in_backward=True)`` (each update right after its allreduce),
- ``ZeroRedundancyOptimizer`` (each rank updates and keeps state for its shard only).
It reports the optimizer-state bytes each rank holds (the largest over ranks) and the median
step time; ratios are relative to the standard DistributedOptimizer. The figures go to the
results file (``--json``, by default bench/results/torch_zero.json, or torch_zero-np<N>.json for
one rank count).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

from common.launch import horarun_command
from common.results import Recorder, json_help

_MARK = "TORCH_ZERO_RESULT "
WAYS = ("standard", "step_in_backward", "zero")


def parse_args() -> argparse.Namespace:
    """Command-line flags."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--np", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=900)
    parser.add_argument("--json", type=Path, help=json_help("torch_zero"))
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    return parser.parse_args()


def _state_bytes(optimizer: Any) -> int:
    import torch

    return sum(v.numel() * v.element_size() for s in optimizer.state.values()
               for v in s.values() if torch.is_tensor(v))


def worker(args: argparse.Namespace) -> None:
    """One rank: train three ways, report state bytes and step times (rank 0 prints)."""
    import hora.torch as hvd
    import torch
    import torch.nn.functional as F
    from torch import nn

    hvd.init()
    torch.set_num_threads(1)

    def build() -> nn.Module:
        torch.manual_seed(0)
        layers: list[nn.Module] = []
        for _ in range(args.layers):
            layers += [nn.Linear(args.width, args.width), nn.Tanh()]
        return nn.Sequential(*layers)

    x = torch.randn(args.batch_size, args.width)
    y = torch.randn(args.batch_size, args.width)

    def time_steps(model: nn.Module, opt: Any) -> float:
        times = []
        for i in range(args.warmup + args.iters):
            hvd.barrier()
            start = time.perf_counter()
            opt.zero_grad()
            F.mse_loss(model(x), y).backward()
            opt.step()
            if i >= args.warmup:
                times.append(time.perf_counter() - start)
        return statistics.median(times)

    makers: dict[str, Callable[[nn.Module], Any]] = {
        "standard": lambda m: hvd.DistributedOptimizer(
            torch.optim.Adam(m.parameters(), lr=1e-4), named_parameters=m.named_parameters()),
        "step_in_backward": lambda m: hvd.DistributedOptimizer(
            torch.optim.Adam(m.parameters(), lr=1e-4), named_parameters=m.named_parameters(),
            step_in_backward=True),
        "zero": lambda m: hvd.ZeroRedundancyOptimizer(m.parameters(), torch.optim.Adam, lr=1e-4),
    }
    result: dict[str, dict[str, float]] = {}
    for name, make in makers.items():
        model = build()
        opt = make(model)
        seconds = time_steps(model, opt)
        mine = opt.state_bytes() if name == "zero" else _state_bytes(opt)
        per_rank = hvd.allgather_object(mine, name=f"bench_zero_bytes_{name}")
        seconds = max(hvd.allgather_object(seconds, name=f"bench_zero_time_{name}"))
        result[name] = {"max_bytes": max(per_rank), "min_bytes": min(per_rank),
                        "seconds": seconds}
    if hvd.rank() == 0:
        print(_MARK + json.dumps(result), flush=True)


def _mib(n: float) -> str:
    return f"{n / 2**20:.2f}"


def main() -> None:
    """Run one job per rank count, print the two tables, write the results."""
    args = parse_args()
    if args.worker:
        worker(args)
        return
    recorder = Recorder("torch_zero", packages=("torch",))
    flags = ["--layers", str(args.layers), "--width", str(args.width), "--batch-size",
             str(args.batch_size), "--iters", str(args.iters), "--warmup", str(args.warmup)]
    rows: dict[int, dict] = {}
    for np_ in args.np:
        cmd = horarun_command(np_) + [sys.executable, __file__, "--worker", *flags]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout,
                              check=False)
        lines = [ln for ln in done.stdout.splitlines() if _MARK in ln]
        if done.returncode != 0 or not lines:
            sys.exit(f"np={np_} failed (exit {done.returncode}):\n{done.stdout}\n{done.stderr}")
        rows[np_] = json.loads(lines[-1].split(_MARK, 1)[1])
    params = args.layers * (args.width * args.width + args.width)
    print(f"MLP {args.layers} x Linear({args.width}, {args.width}), {params} float32 "
          f"parameters, Adam, batch {args.batch_size} per rank\n")
    print("Optimizer state per rank (MiB, largest rank)")
    print(f"{'ranks':>5} | {'DistributedOptimizer':>20} | {'ZeroRedundancyOptimizer':>23} | "
          f"{'ratio':>5}")
    for np_, r in rows.items():
        full, zero = r["standard"]["max_bytes"], r["zero"]["max_bytes"]
        print(f"{np_:>5} | {_mib(full):>20} | {_mib(zero):>23} | {zero / full:>5.2f}")
    print("\nStep time (ms, median, slowest rank)")
    print(f"{'ranks':>5} | {'standard':>8} | {'step_in_backward':>16} | {'ratio':>5} | "
          f"{'ZeRO':>6} | {'ratio':>5}")
    for np_, r in rows.items():
        std = r["standard"]["seconds"]
        sib = r["step_in_backward"]["seconds"]
        zero = r["zero"]["seconds"]
        print(f"{np_:>5} | {std * 1e3:>8.1f} | {sib * 1e3:>16.1f} | {sib / std:>5.2f} | "
              f"{zero * 1e3:>6.1f} | {zero / std:>5.2f}")
    results = [{"implementation": way, "case": f"{np_} ranks", "ranks": np_,
                "max_state_bytes": r[way]["max_bytes"], "min_state_bytes": r[way]["min_bytes"],
                "median_s": r[way]["seconds"]} for np_, r in rows.items() for way in WAYS]
    settings = {"ranks": args.np, "layers": args.layers, "width": args.width,
                "batch_size": args.batch_size, "iters": args.iters, "warmup": args.warmup,
                "parameters": params, "optimizer": "Adam",
                "figure": "median step time of the slowest rank; state bytes of each rank"}
    recorder.write(args.json, settings, results,
                   ranks=args.np[0] if len(args.np) == 1 else None)


if __name__ == "__main__":
    main()
