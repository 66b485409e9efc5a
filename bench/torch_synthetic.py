"""Synthetic training throughput: hora.torch DistributedOptimizer vs torch DDP (gloo), same model.

    python bench/torch_synthetic.py                 # 2 ranks, the benchmark's default MLP
    python bench/torch_synthetic.py --model cnn --np 2 --num-iters 5

Runs examples/pytorch/synthetic_benchmark.py under horarun, then the same model, batch and timed
step (zero_grad, forward, cross-entropy, backward, SGD step) under torch DistributedDataParallel
with the gloo backend, started here with torch.multiprocessing, and a third time with every rank
training alone, with no communication at all: no data-parallel run on this host can beat that
throughput, so it bounds what any runtime can reach. All use the same number of torch threads per
rank, and the same CPU binding: by default horarun binds its ranks (``--bind-to core``) and the
DDP and solo workers bind themselves to the same shares of the CPUs; ``--bind-to none`` runs all
three unbound. With ``--repeats N`` the three jobs alternate N times and each keeps its best run,
which damps the effect of other load on the machine. Prints a table with the throughputs and their
ratios to DDP, and writes them to the results file (``--json``, by default
bench/results/torch_synthetic-np<N>.json).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from common.launch import SYNTHETIC_BENCHMARK, free_port, horarun_command, load_synthetic_benchmark
from common.results import Recorder, json_help

_RATE = re.compile(r"Img/sec per \w+: ([0-9.]+) \+-([0-9.]+)")
LABELS = {"hora": "hora.torch", "ddp": "torch DDP (gloo)", "alone": "no communication"}


def parse_args() -> argparse.Namespace:
    """Command-line flags; the benchmark flags are passed on unchanged."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--np", type=int, default=2, help="number of ranks")
    parser.add_argument("--model", default="mlp")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--num-warmup-batches", type=int, default=5)
    parser.add_argument("--num-batches-per-iter", type=int, default=10)
    parser.add_argument("--num-iters", type=int, default=5)
    parser.add_argument("--image-size", type=int, default=None)
    parser.add_argument("--fp16-allreduce", action="store_true")
    parser.add_argument("--repeats", type=int, default=2, help="alternating runs of each job")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per run")
    parser.add_argument("--bind-to", choices=("core", "none"), default="core",
                        help="CPU binding of every job's ranks, as horarun's flag")
    parser.add_argument("--json", type=Path, help=json_help("torch_synthetic"))
    return parser.parse_args()


def benchmark_flags(args: argparse.Namespace) -> list[str]:
    """The flags shared by both runs, in synthetic_benchmark.py's syntax."""
    flags = [
        "--model",
        args.model,
        "--batch-size",
        str(args.batch_size),
        "--num-warmup-batches",
        str(args.num_warmup_batches),
        "--num-batches-per-iter",
        str(args.num_batches_per_iter),
        "--num-iters",
        str(args.num_iters),
    ]
    if args.image_size is not None:
        flags += ["--image-size", str(args.image_size)]
    return flags


def run_hora(args: argparse.Namespace) -> tuple[float, float]:
    """Run the benchmark with hora.torch; returns (img/sec per rank, 1.96 sigma)."""
    cmd = [*horarun_command(args.np, "--bind-to", args.bind_to), sys.executable,
           str(SYNTHETIC_BENCHMARK), *benchmark_flags(args)]
    if args.fp16_allreduce:
        cmd.append("--fp16-allreduce")
    print("hora:", " ".join(cmd), flush=True)
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, check=False)
    match = _RATE.search(done.stdout)
    if done.returncode != 0 or match is None:
        sys.stderr.write(done.stdout[-4000:] + done.stderr[-4000:])
        raise SystemExit(f"hora run failed (exit code {done.returncode})")
    for line in done.stdout.splitlines():
        if "img/sec" in line.lower():
            print("  hora " + line.split(":", 1)[-1].strip(), flush=True)
    return float(match.group(1)), float(match.group(2))


def _ddp_worker(
    rank: int, world: int, port: int, flags: list[str], fp16: bool, results: Any,
    communicate: bool = True, bind: bool = True,
) -> None:
    """One rank of the DDP job; with ``communicate=False``, the same model trained alone."""
    if bind:
        from hora.runner.env import bind_like_horarun

        bind_like_horarun(rank, world)
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel

    bench = load_synthetic_benchmark()
    args = bench.parse_args(flags)
    if communicate:
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.set_num_threads(bench.threads_per_rank(args.threads, world))
    torch.manual_seed(1234)
    model = bench.build_model(args.model, args.image_size, args.num_classes)
    if communicate:
        model = DistributedDataParallel(model)
    if fp16 and communicate:
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        model.register_comm_hook(None, default_hooks.fp16_compress_hook)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01 * world)
    data = torch.randn(args.batch_size, 3, args.image_size, args.image_size)
    target = torch.randint(0, args.num_classes, (args.batch_size,))

    def step() -> None:
        optimizer.zero_grad()
        F.cross_entropy(model(data), target).backward()
        optimizer.step()

    def log(line: str) -> None:
        if rank == 0:
            print(("  ddp " if communicate else "  alone ") + line, flush=True)

    rates = bench.time_steps(
        step,
        args.num_warmup_batches,
        args.num_batches_per_iter,
        args.num_iters,
        args.batch_size,
        log,
        "CPU",
    )
    if rank == 0:
        for line in bench.summary_lines(rates, world, "CPU"):
            log(line)
        results.put(rates)
    if communicate:
        dist.barrier()
        dist.destroy_process_group()


def run_ddp(args: argparse.Namespace, communicate: bool = True) -> tuple[float, float]:
    """Run the same benchmark under torch DDP (gloo), or with every rank training alone
    (``communicate=False``); returns (img/sec per rank, 1.96 sigma)."""
    import numpy as np
    import torch.multiprocessing as mp

    how = "gloo" if communicate else "each training alone"
    print(f"{'ddp' if communicate else 'alone'}: torch.multiprocessing, {args.np} ranks, {how}",
          flush=True)
    ctx = mp.get_context("spawn")
    results = ctx.SimpleQueue()
    mp.start_processes(
        _ddp_worker,
        nprocs=args.np,
        start_method="spawn",
        args=(args.np, free_port(), benchmark_flags(args), args.fp16_allreduce, results,
              communicate, args.bind_to == "core"),
    )
    rates = results.get()
    return float(np.mean(rates)), 1.96 * float(np.std(rates))


def main() -> None:
    """Run the three jobs (alternating, best of --repeats), print the comparison table and write
    the results."""
    args = parse_args()
    recorder = Recorder("torch_synthetic", packages=("torch", "numpy"))
    bench = load_synthetic_benchmark()
    image = args.image_size or bench.default_image_size(args.model)
    runs: dict[str, list[tuple[float, float]]] = {kind: [] for kind in LABELS}
    for _ in range(max(1, args.repeats)):
        runs["hora"].append(run_hora(args))
        runs["ddp"].append(run_ddp(args))
        runs["alone"].append(run_ddp(args, communicate=False))
    best = {kind: max(found) for kind, found in runs.items()}
    ddp_rate = best["ddp"][0]
    n = args.np
    bound = "bound" if args.bind_to == "core" else "unbound"
    print()
    print(
        f"model {args.model}, {image}x{image} images, batch {args.batch_size} per rank, "
        f"{n} ranks on {os.cpu_count()} cores ({bound}), "
        f"best of {len(runs['hora'])} alternating runs"
        + (", fp16 gradients" if args.fp16_allreduce else "")
    )
    print(f"| {'runtime':<18} | {'img/sec per rank':>18} | {'total img/sec':>13} | {'vs DDP':>6} |")
    print(f"|{'-' * 20}|{'-' * 20}|{'-' * 15}|{'-' * 8}|")
    for kind, label in LABELS.items():
        rate, conf = best[kind]
        print(
            f"| {label:<18} | {rate:>10.1f} +-{conf:>5.1f} | {n * rate:>13.1f} | "
            f"{rate / ddp_rate:>5.2f}x |"
        )
    print("no communication: every rank trains alone, the bound for any data-parallel run here")
    rows = [{"implementation": label, "case": args.model, "images_per_s_per_rank": best[kind][0],
             "images_per_s_conf95": best[kind][1], "images_per_s": n * best[kind][0],
             "runs_images_per_s_per_rank": [rate for rate, _ in runs[kind]]}
            for kind, label in LABELS.items()]
    settings = {"ranks": n, "model": args.model, "image_size": image,
                "batch_size": args.batch_size, "num_warmup_batches": args.num_warmup_batches,
                "num_batches_per_iter": args.num_batches_per_iter, "num_iters": args.num_iters,
                "fp16_allreduce": args.fp16_allreduce, "repeats": args.repeats,
                "bind_to": args.bind_to, "figure": "images per second, best run of the repeats"}
    recorder.write(args.json, settings, rows, ranks=n)


if __name__ == "__main__":
    main()
