"""DDP throughput over the ``hora`` torch.distributed backend vs over ``gloo``, same job.

    horarun -np 2 python bench/torch_ddp_backends.py
    horarun -np 2 python bench/torch_ddp_backends.py --models mlp --steps 30 --repeats 3

One job holds both groups: gloo is the default group (its TCPStore's address goes from rank 0 to
the others through Hora), and ``new_group(backend="hora")`` is the Hora group. For each model
(the ``mlp`` and ``cnn`` of examples/pytorch/synthetic_benchmark.py, synthetic data) the same
DDP training step (zero_grad, forward, cross-entropy, backward, SGD step) is timed over each
group in turn, ``--repeats`` times alternating, keeping each backend's best run. Rank 0 prints a
table of images per second (all ranks together) and the hora/gloo ratio.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import hora.torch as hvd
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

BENCHMARK = Path(__file__).resolve().parent.parent / "examples" / "pytorch" / \
    "synthetic_benchmark.py"


def _models() -> ModuleType:
    spec = importlib.util.spec_from_file_location("hora_synthetic_benchmark", BENCHMARK)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def parse_args() -> argparse.Namespace:
    """Command-line flags."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="mlp,cnn", help="comma-separated: mlp, cnn")
    parser.add_argument("--batch-size", type=int, default=32, help="images per rank and step")
    parser.add_argument("--warmup", type=int, default=5, help="untimed steps per run")
    parser.add_argument("--steps", type=int, default=20, help="timed steps per run")
    parser.add_argument("--repeats", type=int, default=2, help="alternating runs per backend")
    return parser.parse_args()


def gloo_default_group() -> None:
    """Make gloo the default group with a TCPStore whose port rank 0 shares through Hora."""
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
    """Time both backends per model and print the table on rank 0."""
    args = parse_args()
    hvd.init()
    gloo_default_group()
    groups = {"gloo": dist.group.WORLD, "hora": dist.new_group(backend="hora")}
    bench = _models()
    torch.set_num_threads(1)
    rows = []
    for model_name in args.models.split(","):
        best = {"gloo": 0.0, "hora": 0.0}
        for _ in range(args.repeats):
            for backend, group in groups.items():
                best[backend] = max(best[backend],
                                    images_per_second(group, model_name, args, bench))
        rows.append((model_name, best["hora"], best["gloo"]))
    if hvd.rank() == 0:
        print(f"DDP over hora vs gloo, {hvd.size()} ranks, batch {args.batch_size} per rank, "
              f"{args.steps} timed steps, best of {args.repeats}")
        print(f"{'model':<8}{'hora img/s':>12}{'gloo img/s':>12}{'hora/gloo':>11}")
        for model_name, hora_rate, gloo_rate in rows:
            print(f"{model_name:<8}{hora_rate:>12.1f}{gloo_rate:>12.1f}"
                  f"{hora_rate / gloo_rate:>11.2f}")
    dist.destroy_process_group()
    hvd.shutdown()


if __name__ == "__main__":
    main()
