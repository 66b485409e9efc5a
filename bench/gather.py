"""Allgather and broadcast over shared memory: Hora with its windows (the default, which large
broadcasts use) against Hora with every collective on its rank-pair rings, and torch.distributed
(gloo), side by side, on this host.

    python bench/gather.py [--np 2] [--sizes 4K,256K,4M,32M] [--iters 30] [--repeats 3]
        [--json PATH]

Runs itself as workers: under ``horarun -np N`` with the default windows and with
``HORA_SHM_WINDOW_BYTES=0`` (every collective through the rings), and through
torch.multiprocessing with ``init_process_group("gloo")`` on 127.0.0.1, alternating ``--repeats``
times so that a change of machine load does not favour one. Per size (total bytes, float32):
an allgather of each rank's 1/N share into a preallocated output and an in-place broadcast from
rank 0, the median of ``--iters`` timed calls after warm-up. Prints the best median of the
repeats per implementation, and each one's time over the windows' (above 1: windows faster),
and writes them to the results file (``--json``, by default bench/results/gather-np<N>.json).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from common.launch import free_port, horarun_command
from common.results import Recorder, json_help
from common.sizes import format_size, parse_sizes
from common.tables import markdown_table, ratio_cell, time_cell
from common.timing import median_time

CASES = ("allgather", "broadcast")


def timed(fn: Callable[[], None], iters: int) -> float:
    """Median seconds of ``iters`` calls after 5 warm-up calls."""
    return median_time(fn, 5, iters)["median_s"]


def hora_worker(sizes: list[int], iters: int, out: str) -> None:
    import hora
    import numpy as np

    hora.init()
    n = hora.size()
    results = {}
    for nbytes in sizes:
        share = np.ones(max(1, nbytes // 4 // n), np.float32)
        full = np.ones(share.size * n, np.float32)
        results[f"allgather {nbytes}"] = timed(
            lambda s=share, k=nbytes: hora.allgather(s, name=f"ag.{k}"), iters)
        results[f"broadcast {nbytes}"] = timed(
            lambda f=full, k=nbytes: hora.broadcast_(f, 0, name=f"bc.{k}"), iters)
    if hora.rank() == 0:
        Path(out).write_text(json.dumps(results))
    hora.shutdown()


def torch_worker(rank: int, world: int, port: int, sizes: list[int], iters: int,
                 out: str) -> None:
    import torch
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    results = {}
    for nbytes in sizes:
        share = torch.ones(max(1, nbytes // 4 // world))
        full = torch.ones(share.numel() * world)
        parts = list(full.chunk(world))
        results[f"allgather {nbytes}"] = timed(
            lambda p=parts, s=share: dist.all_gather(p, s), iters)
        results[f"broadcast {nbytes}"] = timed(lambda f=full: dist.broadcast(f, 0), iters)
    if rank == 0:
        Path(out).write_text(json.dumps(results))
    dist.destroy_process_group()


def run(args: argparse.Namespace, impl: str, out: str) -> dict | None:
    worker = ["--worker", "torch" if impl == "gloo" else "hora", "--out", out,
              "--sizes", ",".join(str(s) for s in args.size_list), "--iters", str(args.iters)]
    if impl == "gloo":
        import torch.multiprocessing as mp

        mp.spawn(torch_worker, args=(args.np, free_port(), args.size_list, args.iters, out),
                 nprocs=args.np, join=True)
    else:
        env = dict(os.environ)
        if impl == "hora rings":
            env["HORA_SHM_WINDOW_BYTES"] = "0"
        cmd = [*horarun_command(args.np), sys.executable, __file__, *worker]
        if subprocess.run(cmd, check=False, env=env).returncode != 0:
            print(f"{impl} run failed", file=sys.stderr)
            return None
    return json.loads(Path(out).read_text())


def result_rows(best: dict[str, dict[str, float]], sizes: list[int]) -> list[dict[str, Any]]:
    """The best medians as rows of the results file, by case, size and implementation."""
    return [{"implementation": impl, "case": case, "bytes": nbytes, "median_s": times[key]}
            for case in CASES for nbytes in sizes for impl, times in best.items()
            if (key := f"{case} {nbytes}") in times]


def table(rows: list[dict[str, Any]]) -> list[str]:
    """Case by implementation, then each one's time over the first's (hora windows)."""
    impls = list(dict.fromkeys(r["implementation"] for r in rows))
    times = {(r["case"], r["bytes"], r["implementation"]): r["median_s"] for r in rows}
    lines = []
    for case in CASES:
        for nbytes in sorted({r["bytes"] for r in rows if r["case"] == case}):
            found = [times.get((case, nbytes, i)) for i in impls]
            lines.append([f"{case} {format_size(nbytes)}", *(time_cell(t) for t in found),
                          *(ratio_cell(t, found[0]) for t in found[1:])])
    header = ["case", *impls, *(f"{i} / {impls[0]}" for i in impls[1:])]
    return markdown_table(header, lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--np", type=int, default=2, help="ranks (2)")
    parser.add_argument("--sizes", default="4K,256K,4M,32M", help="total bytes per case")
    parser.add_argument("--iters", type=int, default=30, help="timed calls per case (30)")
    parser.add_argument("--repeats", type=int, default=3, help="alternating runs of each (3)")
    parser.add_argument("--no-peer", action="store_true", help="skip torch.distributed")
    parser.add_argument("--json", type=Path, help=json_help("gather"))
    parser.add_argument("--worker", choices=["hora", "torch"], help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.size_list = parse_sizes(args.sizes)
    if args.worker == "hora":
        hora_worker(args.size_list, args.iters, args.out)
        return 0

    recorder = Recorder("gather", packages=("torch", "numpy"))
    impls = ["hora windows", "hora rings"] + ([] if args.no_peer else ["gloo"])
    best: dict[str, dict[str, float]] = {impl: {} for impl in impls}
    with tempfile.TemporaryDirectory(prefix="hora-gather-") as tmp:
        for repeat in range(args.repeats):
            for impl in impls:
                res = run(args, impl, os.path.join(tmp, f"{impl}.{repeat}.json".replace(" ", "_")))
                for key, t in (res or {}).items():
                    best[impl][key] = min(t, best[impl].get(key, t))
    rows = result_rows(best, args.size_list)
    if not rows:
        return 1
    print(f"\n{args.np} ranks on this host, best of {args.repeats} medians; "
          "ratio = time / hora windows time")
    print("\n".join(table(rows)))
    settings = {"ranks": args.np, "dtype": "float32", "sizes": args.size_list,
                "iters": args.iters, "repeats": args.repeats,
                "figure": "best of the repeats' medians"}
    recorder.write(args.json, settings, rows, ranks=args.np)
    return 0


if __name__ == "__main__":
    sys.exit(main())
