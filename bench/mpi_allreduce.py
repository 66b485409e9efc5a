"""Allreduce benchmark: Hora on its MPI transport against a plain mpi4py Allreduce, in one job.

    mpirun -np 2 python bench/mpi_allreduce.py [--sizes 1K,1M] [--max-size 256M] [--iters N]
    python bench/mpi_allreduce.py --np 2 [...]      (starts mpirun itself)

Both run in the same processes on the same NumPy float32 buffer (in place, Sum): mpi4py's
``COMM_WORLD.Allreduce(IN_PLACE, buf)`` and ``hora.allreduce_(buf)``, which goes through Hora's
negotiation and then MPI_Allreduce on Hora's private communicator. Per size, the two alternate
iteration by iteration (so that load from other processes hits both alike); every iteration
starts after a barrier, and the figure is the median over iterations of the slowest rank's time.
Printed per size: time, algorithm bandwidth (bytes / time), bus bandwidth (algbw * 2(n-1)/n) for
both, and hora_busbw / mpi4py_busbw (1.0 = the same speed). The target is a ratio of at least
0.9 from 1 MiB up.

Hora adds a fixed cost per operation (the hand-off to its background thread and one negotiation
round trip with rank 0), which dominates small sizes. Read large sizes only on an otherwise idle
machine: MPI's collectives busy-poll, and when each rank shares its core with CPU-bound processes
the result depends on how the scheduler happens to interleave the two ranks (a thread that merely
wakes up often changes it), not on the code under test.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

KIB = 1024
MIB = 1024 * 1024
TARGET_RATIO = 0.9
TARGET_FROM = 1 * MIB


def parse_size(text: str) -> int:
    """'4', '16K', '1M', '256M', '1G' -> bytes (binary units)."""
    text = text.strip().upper().removesuffix("B").removesuffix("I")
    units = {"K": KIB, "M": MIB, "G": 1024 * MIB}
    if text and text[-1] in units:
        return int(float(text[:-1]) * units[text[-1]])
    return int(text)


def format_size(n: int) -> str:
    for unit, scale in (("GiB", 1024 * MIB), ("MiB", MIB), ("KiB", KIB)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} B"


def format_time(seconds: float) -> str:
    if seconds < 1e-3:
        return f"{seconds * 1e6:.1f} us"
    if seconds < 1.0:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds:.3f} s"


def default_sizes(max_size: int) -> list[int]:
    """1 KiB, 4 KiB, 16 KiB, ... (powers of 4) up to max_size."""
    sizes = []
    n = KIB
    while n <= max_size:
        sizes.append(n)
        n *= 4
    return sizes


def iterations(nbytes: int, iters: int | None) -> int:
    """Timed iterations of each: many for small sizes, at least 9 for the largest."""
    if iters is not None:
        return iters
    return max(9, min(200, (256 * MIB) // max(nbytes, 1)))


def under_mpirun() -> bool:
    return "OMPI_COMM_WORLD_SIZE" in os.environ or "PMI_SIZE" in os.environ


def relaunch(args: argparse.Namespace, argv: list[str]) -> int:
    """Start this script under mpirun with --np ranks (this process only waits)."""
    mpirun = shutil.which("mpirun") or shutil.which("mpiexec")
    if mpirun is None:
        print("mpi_allreduce: no mpirun on PATH; install an MPI (e.g. openmpi-bin)", file=sys.stderr)
        return 2
    cmd = [mpirun, "-np", str(args.np)]
    version = subprocess.run([mpirun, "--version"], check=False, capture_output=True, text=True).stdout
    if "Open MPI" in version or "OpenRTE" in version:
        cmd += ["--oversubscribe", "--bind-to", "none"]
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            cmd.append("--allow-run-as-root")
    cmd += [sys.executable, os.path.abspath(__file__), *argv]
    return subprocess.call(cmd)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", help="comma-separated sizes (e.g. 1K,1M,64M)")
    parser.add_argument("--max-size", default="256M", help="largest default size (256M)")
    parser.add_argument("--iters", type=int, default=None, help="timed iterations of each")
    parser.add_argument("--np", type=int, default=2, help="ranks when starting mpirun itself")
    parser.add_argument("--json", help="also write the results to this file (rank 0)")
    args, _ = parser.parse_known_args()
    if not under_mpirun():
        return relaunch(args, sys.argv[1:])

    os.environ.setdefault("HORA_CONTROLLER", "mpi")
    os.environ.setdefault("HORA_CPU_OPERATIONS", "mpi")
    import hora
    import numpy as np
    from mpi4py import MPI

    hora.init()
    comm = MPI.COMM_WORLD
    n, me = comm.Get_size(), comm.Get_rank()
    if hora._core.transport_name() != "mpi" or hora.size() != n:
        raise SystemExit("mpi_allreduce: Hora is not running on MPI over the same ranks")
    sizes = (
        [parse_size(s) for s in args.sizes.split(",")] if args.sizes
        else default_sizes(parse_size(args.max_size))
    )
    bus_factor = 2.0 * (n - 1) / n if n > 1 else 1.0

    def timed(run, buf: np.ndarray) -> float:
        buf.fill(1.0)
        comm.Barrier()
        t0 = time.perf_counter()
        run(buf)
        return comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)

    def mpi4py_run(buf: np.ndarray) -> None:
        comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)

    results = []
    for nbytes in sizes:
        buf = np.ones(max(nbytes // 4, 1), dtype=np.float32)
        name = f"bench.mpi.{nbytes}"

        def hora_run(b: np.ndarray, name: str = name) -> None:
            hora.allreduce_(b, op=hora.Sum, name=name)

        runs = {"mpi4py": mpi4py_run, "hora": hora_run}
        for _ in range(2):  # warm-up (and Hora's response cache)
            for run in runs.values():
                timed(run, buf)
        samples: dict[str, list[float]] = {"mpi4py": [], "hora": []}
        for i in range(iterations(nbytes, args.iters)):
            for who in ("mpi4py", "hora") if i % 2 == 0 else ("hora", "mpi4py"):
                samples[who].append(timed(runs[who], buf))
        expected = float(n)
        if not np.all(buf == expected):
            raise SystemExit(f"mpi_allreduce: wrong result at {format_size(nbytes)}")
        row = {"bytes": buf.nbytes}
        for who, values in samples.items():
            t = statistics.median(values)
            row[f"{who}_time"] = t
            row[f"{who}_algbw"] = buf.nbytes / t / 1e9
            row[f"{who}_busbw"] = row[f"{who}_algbw"] * bus_factor
        row["ratio"] = row["hora_busbw"] / row["mpi4py_busbw"]
        results.append(row)
        del buf

    if me == 0:
        print(f"Allreduce float32 Sum in place, {n} ranks, Hora on MPI vs mpi4py "
              f"(median of the slowest rank; GB/s = 1e9 B/s)")
        header = (f"{'size':>9} | {'mpi4py time':>11} {'algbw':>6} {'busbw':>6} | "
                  f"{'hora time':>11} {'algbw':>6} {'busbw':>6} | {'hora/mpi4py':>11}")
        print(header)
        print("-" * len(header))
        for r in results:
            print(f"{format_size(r['bytes']):>9} | {format_time(r['mpi4py_time']):>11} "
                  f"{r['mpi4py_algbw']:6.2f} {r['mpi4py_busbw']:6.2f} | "
                  f"{format_time(r['hora_time']):>11} {r['hora_algbw']:6.2f} "
                  f"{r['hora_busbw']:6.2f} | {r['ratio']:10.2f}x")
        big = [r for r in results if r["bytes"] >= TARGET_FROM]
        if big:
            worst = min(r["ratio"] for r in big)
            verdict = "met" if worst >= TARGET_RATIO else "NOT met"
            print(f"target: hora/mpi4py >= {TARGET_RATIO}x from {format_size(TARGET_FROM)} up: "
                  f"{verdict} (lowest {worst:.2f}x)")
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"ranks": n, "results": results}, f, indent=1)
    hora.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
