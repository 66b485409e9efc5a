"""Allreduce benchmark: Hora on its MPI transport against a plain mpi4py Allreduce, in one job.

    mpirun -np 2 python bench/mpi_allreduce.py [--sizes 1K,1M] [--max-size 256M] [--iters N]
    python bench/mpi_allreduce.py --np 2 [...]      (starts mpirun itself)

Rank 0 prints the tables and writes the figures to the results file (``--json``, by default
bench/results/mpi_allreduce-np<N>.json).

Both run in the same processes on the same NumPy float32 buffers (in place, Sum): mpi4py's
``COMM_WORLD.Allreduce(IN_PLACE, buf)`` and Hora's allreduce, which goes through Hora's
negotiation and then MPI_Allreduce on Hora's private communicator. Two tables:

- **one call at a time**: one buffer, ``hora.allreduce_(buf)`` against one ``Allreduce``; every
  iteration starts after a barrier. This is latency-bound: Hora pays a fixed cost per call (the
  hand-off to its background thread and one negotiation round trip with rank 0, tens of us).
- **stream**: K buffers of the size (K = 64 MiB / size, between 4 and 32) reduced back to back,
  as a training step does with its gradients: mpi4py makes K blocking ``Allreduce`` calls; Hora
  gets all K in one ``grouped_allreduce_async_`` call (as hora.tensorflow submits a step) and
  waits. Fusion is off for the whole run (``HORA_FUSION_THRESHOLD=0``), so Hora too runs exactly K
  MPI_Allreduce calls of the same size; its negotiation overlaps the transfers. This is the
  bandwidth figure.
- **stream, one call per buffer**: the same with K separate ``allreduce_async_`` calls (as
  hora.torch's gradient hooks submit). With one core per rank, Python submitting the next buffers
  shares that core with the background thread, whose MPI_Allreduce busy-polls: the two take
  turns in scheduler time slices, and the peer rank waits meanwhile.

Per size, the two alternate iteration by iteration (so that load from other processes hits both
alike); the figure is the median over iterations of the slowest rank's time (per buffer, for the
stream). Printed: time, algorithm bandwidth (bytes / time), bus bandwidth (algbw * 2(n-1)/n) and
hora_busbw / mpi4py_busbw (1.0 = the same speed). The target is a stream ratio of at least 0.9
from 1 MiB up.

Read large sizes only on an otherwise idle machine: MPI's collectives busy-poll, and when each
rank shares its core with CPU-bound processes the result depends on how the scheduler happens to
interleave the ranks, not on the code under test. When starting mpirun itself with no more ranks
than cores, the script keeps mpirun's default binding of one rank per core (what a plain
``mpirun -np N`` gives); with more ranks it oversubscribes unbound.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from common.launch import find_mpirun, mpirun_version
from common.results import Recorder, json_help
from common.sizes import KIB, MIB, format_size, parse_size, parse_sizes, powers_of_four
from common.timing import bus_factor, format_time

TARGET_RATIO = 0.9
TARGET_FROM = 1 * MIB
STREAM_BYTES = 64 * MIB
WHO = ("mpi4py", "hora")
# The three tables: (case in the results file, title as printed).
TABLES = (
    ("one call", "one call at a time (latency-bound):"),
    ("stream", "stream of back-to-back allreduces, one grouped call (time per buffer):"),
    ("stream calls", "stream, one allreduce_async_ call per buffer (time per buffer):"),
)


def iterations(nbytes: int, iters: int | None) -> int:
    """Timed iterations of each: many for small sizes, at least 15 for the largest."""
    if iters is not None:
        return iters
    return max(15, min(200, (256 * MIB) // max(nbytes, 1)))


def stream_length(nbytes: int) -> int:
    """Buffers in one stream: 64 MiB worth, between 4 and 32."""
    return max(4, min(32, STREAM_BYTES // max(nbytes, 1)))


def under_mpirun() -> bool:
    return "OMPI_COMM_WORLD_SIZE" in os.environ or "PMI_SIZE" in os.environ


def relaunch(args: argparse.Namespace, argv: list[str]) -> int:
    """Start this script under mpirun with --np ranks (this process only waits)."""
    mpirun = find_mpirun()
    if mpirun is None:
        print("mpi_allreduce: no mpirun on PATH; install an MPI (e.g. openmpi-bin)",
              file=sys.stderr)
        return 2
    cmd = [mpirun, "-np", str(args.np)]
    version = mpirun_version(mpirun) or ""
    if "Open MPI" in version or "OpenRTE" in version:
        if args.np > (os.cpu_count() or 1):
            cmd += ["--oversubscribe", "--bind-to", "none"]
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            cmd.append("--allow-run-as-root")
    cmd += [sys.executable, os.path.abspath(__file__), *argv]
    return subprocess.call(cmd)


def summarize(case: str, nbytes: int, samples: dict[str, list[float]], world: int,
              buffers: int) -> list[dict[str, Any]]:
    """Rows of the results file for one size: median time, algbw and busbw of each."""
    rows = []
    for who, values in samples.items():
        t = statistics.median(values)
        algbw = nbytes / t / 1e9
        rows.append({"implementation": who, "case": case, "bytes": nbytes, "median_s": t,
                     "algbw_gbs": algbw, "busbw_gbs": algbw * bus_factor(world),
                     "iters": len(values), "buffers": buffers})
    return rows


def paired(rows: list[dict[str, Any]], case: str) -> list[dict[str, Any]]:
    """Per size of ``case``: {"bytes", "<who>_time", "<who>_algbw", "<who>_busbw", "ratio"}, the
    ratio being hora's busbw over mpi4py's."""
    found: dict[int, dict[str, Any]] = {}
    for r in rows:
        if r["case"] != case:
            continue
        row = found.setdefault(r["bytes"], {"bytes": r["bytes"]})
        who = r["implementation"]
        row.update({f"{who}_time": r["median_s"], f"{who}_algbw": r["algbw_gbs"],
                    f"{who}_busbw": r["busbw_gbs"]})
    complete = [r for r in found.values() if all(f"{w}_busbw" in r for w in WHO)]
    for r in complete:
        r["ratio"] = r["hora_busbw"] / r["mpi4py_busbw"]
    return complete


def print_table(title: str, rows: list[dict]) -> float | None:
    """Prints one table; returns the lowest ratio from TARGET_FROM up (None: no such size)."""
    print(title)
    header = (f"{'size':>9} | {'mpi4py time':>11} {'algbw':>6} {'busbw':>6} | "
              f"{'hora time':>11} {'algbw':>6} {'busbw':>6} | {'hora/mpi4py':>11}")
    print(header)
    print("-" * len(header))
    for r in rows:
        print(f"{format_size(r['bytes']):>9} | {format_time(r['mpi4py_time']):>11} "
              f"{r['mpi4py_algbw']:6.2f} {r['mpi4py_busbw']:6.2f} | "
              f"{format_time(r['hora_time']):>11} {r['hora_algbw']:6.2f} "
              f"{r['hora_busbw']:6.2f} | {r['ratio']:10.2f}x")
    big = [r["ratio"] for r in rows if r["bytes"] >= TARGET_FROM]
    return min(big) if big else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", help="comma-separated sizes (e.g. 1K,1M,64M)")
    parser.add_argument("--max-size", default="256M", help="largest default size (256M)")
    parser.add_argument("--iters", type=int, default=None, help="timed iterations of each")
    parser.add_argument("--np", type=int, default=2, help="ranks when starting mpirun itself")
    parser.add_argument("--json", type=Path, help=json_help("mpi_allreduce"))
    args, _ = parser.parse_known_args()
    if not under_mpirun():
        return relaunch(args, sys.argv[1:])
    # Under a plain mpirun (no --np), the command line to record is mpirun's.
    ranks = os.environ.get("OMPI_COMM_WORLD_SIZE") or os.environ.get("PMI_SIZE", "")
    launcher = [] if "--np" in sys.argv else ["mpirun", "-np", ranks]
    recorder = Recorder("mpi_allreduce", packages=("numpy", "mpi4py", "open_mpi"),
                        launcher=launcher)

    os.environ.setdefault("HORA_CONTROLLER", "mpi")
    os.environ.setdefault("HORA_CPU_OPERATIONS", "mpi")
    os.environ["HORA_FUSION_THRESHOLD"] = "0"  # the stream compares call for call
    import hora
    import numpy as np
    from mpi4py import MPI

    hora.init()
    comm = MPI.COMM_WORLD
    n, me = comm.Get_size(), comm.Get_rank()
    if hora._core.transport_name() != "mpi" or hora.size() != n:
        raise SystemExit("mpi_allreduce: Hora is not running on MPI over the same ranks")
    sizes = (parse_sizes(args.sizes) if args.sizes
             else powers_of_four(KIB, parse_size(args.max_size)))

    def timed(run, bufs: list) -> float:
        """Slowest rank's time of run(bufs), per buffer."""
        comm.Barrier()
        t0 = time.perf_counter()
        run(bufs)
        return comm.allreduce(time.perf_counter() - t0, op=MPI.MAX) / len(bufs)

    def mpi4py_run(bufs: list) -> None:
        for b in bufs:
            comm.Allreduce(MPI.IN_PLACE, b, op=MPI.SUM)

    def hora_one(bufs: list) -> None:
        hora.allreduce_(bufs[0], op=hora.Sum, name="bench.mpi.one")

    def hora_stream(bufs: list) -> None:
        hora.grouped_allreduce_async_(bufs, op=hora.Sum, name="bench.mpi.stream").wait()

    def hora_stream_calls(bufs: list) -> None:
        pending = [hora.allreduce_async_(b, op=hora.Sum, name=f"bench.mpi.calls.{i}")
                   for i, b in enumerate(bufs)]
        for p in pending:
            p.wait()

    def measure(bufs: list, hora_run, iters: int) -> dict[str, list[float]]:
        runs = {"mpi4py": mpi4py_run, "hora": hora_run}
        for who, run in runs.items():  # check the result, warm up (and fill Hora's cache)
            for b in bufs:
                b.fill(1.0)
            run(bufs)
            if not all(np.all(b == float(n)) for b in bufs):
                raise SystemExit(f"mpi_allreduce: {who}: wrong result at "
                                 f"{format_size(bufs[0].nbytes)}")
        for b in bufs:  # zeros stay zeros: no refill (and no cache churn) between timed runs
            b.fill(0.0)
        for _ in range(2):
            for run in runs.values():
                timed(run, bufs)
        samples: dict[str, list[float]] = {"mpi4py": [], "hora": []}
        for i in range(iters):
            for who in ("mpi4py", "hora") if i % 2 == 0 else ("hora", "mpi4py"):
                samples[who].append(timed(runs[who], bufs))
        return samples

    rows: list[dict[str, Any]] = []
    for nbytes in sizes:
        count = max(nbytes // 4, 1)
        bufs = [np.ones(count, dtype=np.float32)]
        rows += summarize("one call", count * 4,
                          measure(bufs, hora_one, iterations(nbytes, args.iters)), n, 1)
        bufs += [np.ones(count, dtype=np.float32) for _ in range(stream_length(nbytes) - 1)]
        stream_iters = max(9, iterations(nbytes, args.iters) // len(bufs))
        rows += summarize("stream", count * 4, measure(bufs, hora_stream, stream_iters), n,
                          len(bufs))
        rows += summarize("stream calls", count * 4,
                          measure(bufs, hora_stream_calls, stream_iters), n, len(bufs))
        del bufs

    if me == 0:
        print(f"Allreduce float32 Sum in place, {n} ranks on {os.cpu_count()} cores, Hora on MPI "
              f"vs mpi4py (median of the slowest rank; GB/s = 1e9 B/s)\n")
        for case, title in TABLES:
            worst = print_table(title, paired(rows, case))
            if case == "stream" and worst is not None:
                verdict = "met" if worst >= TARGET_RATIO else "NOT met"
                print(f"target: stream hora/mpi4py >= {TARGET_RATIO}x from "
                      f"{format_size(TARGET_FROM)} up: {verdict} (lowest {worst:.2f}x)")
            if case != TABLES[-1][0]:
                print()
        settings = {"ranks": n, "dtype": "float32", "op": "Sum", "in_place": True,
                    "sizes": sizes, "iters": args.iters, "stream_bytes": STREAM_BYTES,
                    "fusion_threshold": 0, "figure": "median over iterations of the slowest rank"}
        recorder.write(args.json, settings, rows, ranks=n)
    hora.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
