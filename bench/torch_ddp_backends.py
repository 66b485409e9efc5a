"""DDP throughput over the ``hora`` torch.distributed backend vs over ``gloo``, same job.

    horarun -np 2 python bench/torch_ddp_backends.py
    horarun -np 2 python bench/torch_ddp_backends.py --models mlp --steps 30 --repeats 3

One job holds both groups: gloo is the default group (its TCPStore's address goes from rank 0 to
the others through Hora), and ``new_group(backend="hora")`` is the Hora group. For each model
(the ``mlp`` and ``cnn`` of examples/pytorch/synthetic_benchmark.py, synthetic data) the same
DDP training step (zero_grad, forward, cross-entropy, backward, SGD step) is timed over each
group in turn, ``--repeats`` times alternating, keeping each backend's best run. Rank 0 prints a
table of images per second (all ranks together) and the hora/gloo ratio, and writes the figures
to the results file (``--json``, by default bench/results/torch_ddp_backends-np<N>.json).
"""

from __future__ import annotations

import argparse
import datetime
import time
from pathlib import Path
from types import ModuleType
from typing import Any

from common.launch import load_synthetic_benchmark
from common.results import Recorder, json_help


def parse_args() -> argparse.Namespace:
    """Command-line flags."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="mlp,cnn", help="comma-separated: mlp, cnn")
    parser.add_argument("--batch-size", type=int, default=32, help="images per rank and step")
    parser.add_argument("--warmup", type=int, default=5, help="untimed steps per run")
    parser.add_argument("--steps", type=int, default=20, help="timed steps per run")
    parser.add_argument("--repeats", type=int, default=2, help="alternating runs per backend")
    parser.add_argument("--json", type=Path, help=json_help("torch_ddp_backends"))
    return parser.parse_args()


def gloo_default_group() -> None:
    """Make gloo the default group with a TCPStore whose port rank 0 shares through Hora."""
    import hora.torch as hvd
    import torch.distributed as dist

    timeout = datetime.timedelta(seconds=300)
    store = None
    address = None
    if hvd.rank() == 0:
        store = dist.TCPStore("127.0.0.1", 0, hvd.size(), True, timeout=timeout,
                              wait_for_workers=False)
        address = ("127.0.0.1", int(store.port))
    host, port = hvd.broadcast_object(address, root_rank=0, name="bench.store")
    if store is None:
        store = dist.TCPStore(host, port, hvd.size(), False, timeout=timeout)
    dist.init_process_group("gloo", store=store, rank=hvd.rank(), world_size=hvd.size(),
                            timeout=timeout)


def images_per_second(group: Any, model_name: str, args: argparse.Namespace,
                      bench: ModuleType) -> float:
    """Throughput of all ranks together for one run of DDP over ``group``."""
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP

    size = bench.default_image_size(model_name)
    torch.manual_seed(0)
    model = DDP(bench.build_model(model_name, size, 1000), process_group=group)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    data = torch.randn(args.batch_size, 3, size, size)
    target = torch.randint(0, 1000, (args.batch_size,))

    def step() -> None:
        optimizer.zero_grad()
        F.cross_entropy(model(data), target).backward()
        optimizer.step()

    for _ in range(args.warmup):
        step()
    dist.barrier(group=group)
    start = time.perf_counter()
    for _ in range(args.steps):
        step()
    dist.barrier(group=group)
    elapsed = time.perf_counter() - start
    return args.batch_size * args.steps * dist.get_world_size() / elapsed


def main() -> None:
    """Time both backends per model; rank 0 prints the table and writes the results."""
    args = parse_args()
    import hora.torch as hvd
    import torch
    import torch.distributed as dist

    hvd.init()
    recorder = Recorder("torch_ddp_backends", packages=("torch",),
                        launcher=("horarun", "-np", str(hvd.size())))
    gloo_default_group()
    groups = {"gloo": dist.group.WORLD, "hora": dist.new_group(backend="hora")}
    bench = load_synthetic_benchmark()
    torch.set_num_threads(1)
    rows = []
    for model_name in args.models.split(","):
        best = {"gloo": 0.0, "hora": 0.0}
        for _ in range(args.repeats):
            for backend, group in groups.items():
                best[backend] = max(best[backend],
                                    images_per_second(group, model_name, args, bench))
        rows += [{"implementation": backend, "case": model_name, "images_per_s": rate}
                 for backend, rate in (("hora", best["hora"]), ("gloo", best["gloo"]))]
    if hvd.rank() == 0:
        print(f"DDP over hora vs gloo, {hvd.size()} ranks, batch {args.batch_size} per rank, "
              f"{args.steps} timed steps, best of {args.repeats}")
        print(f"{'model':<8}{'hora img/s':>12}{'gloo img/s':>12}{'hora/gloo':>11}")
        for hora_row, gloo_row in zip(rows[::2], rows[1::2]):
            hora_rate, gloo_rate = hora_row["images_per_s"], gloo_row["images_per_s"]
            print(f"{hora_row['case']:<8}{hora_rate:>12.1f}{gloo_rate:>12.1f}"
                  f"{hora_rate / gloo_rate:>11.2f}")
        settings = {"ranks": hvd.size(), "models": args.models.split(","),
                    "batch_size": args.batch_size, "warmup": args.warmup, "steps": args.steps,
                    "repeats": args.repeats, "torch_threads": 1,
                    "figure": "images per second of all ranks, best run of the repeats"}
        recorder.write(args.json, settings, rows, ranks=hvd.size())
    dist.destroy_process_group()
    hvd.shutdown()


if __name__ == "__main__":
    main()
