"""Allreduce benchmark: Hora against torch.distributed (gloo) and mpi4py, side by side, on this host.

    python bench/allreduce.py [--sizes 4,1K,1M] [--iters 20] [--max-size 256M] [--np 2]

The script runs itself as workers: twice under ``horarun -np N`` (Hora over shared memory, its
default when every rank is on one host, and Hora over TCP with ``HORA_SHM_DISABLE=1``; with
``--rings`` again over shared memory without windows, ``HORA_SHM_WINDOW_BYTES=0``, and with
``--via-rank0`` with every tensor negotiated by rank 0, ``HORA_SHM_LOCAL_AGREEMENT=0``; with
``--arena`` again with every tensor in the shared arena, where the other ranks read it in place), once
through torch.multiprocessing with an env-based ``init_process_group("gloo")`` on 127.0.0.1, and
once under ``mpirun -np N`` with mpi4py's ``Allreduce`` (Open MPI) when mpi4py and mpirun are
installed. With ``--hierarchical``, three more with the ranks on two host names of this machine
(``-H localhost:N/2,127.0.0.1:N/2``) that, with ``HORA_SHM_HOST_BY_NAME=1``, do not share one
segment, as on two machines: flat (TCP), with ``HORA_HIERARCHICAL_ALLREDUCE=1`` (shared memory
within each host, TCP across), and the same with ``HORA_SHM_DISABLE=1`` (TCP only). Rank 0 of each writes its timings as JSON to a temporary file; this process prints the
tables. Every implementation's ranks run with the same CPU binding: by default horarun's
``--bind-to core``, which the gloo and mpi4py ranks apply to themselves (mpirun ``--bind-to
none``); ``--bind-to none`` runs them all unbound.

Per size (float32, in place, Sum): the median time of several iterations after warm-up, the
algorithm bandwidth (bytes / time) and the bus bandwidth (algbw * 2(n-1)/n), as nccl-tests define
them, and peer_time / hora_time (above 1: Hora is faster). A second measurement submits 200
tensors of 16 KiB asynchronously and then waits for all of them, as a training step with many
small gradients does. A last table puts every implementation side by side, with each one's time
over Hora's shared-memory time.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

STEP_TENSORS = 200
STEP_TENSOR_BYTES = 16 * 1024
KIB = 1024
MIB = 1024 * 1024

# Targets the README states; printed with whether this run met them.
TARGET_BUSBW_FROM = 1 * MIB
TARGET_STEP_RATIO = 3.0
TARGET_TINY_LATENCY_S = 200e-6


# ------------------------------------------------------------------------------------------------
# Sizes and iteration counts


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
    """4 B, 16 B, 64 B, ... (powers of 4) up to max_size, in float32 multiples."""
    sizes = []
    n = 4
    while n <= max_size:
        sizes.append(n)
        n *= 4
    return sizes


def iterations(nbytes: int, iters: int) -> tuple[int, int]:
    """(warm-up, timed) iterations: more for small sizes, fewer (at least 3) for large ones."""
    if nbytes <= 64 * KIB:
        return 5, iters * 5
    if nbytes <= 4 * MIB:
        return 3, iters
    return 1, max(3, iters * 4 * MIB // nbytes)


def median_time(fn: Callable[[], None], warmup: int, timed: int) -> dict[str, float]:
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(timed):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return {"median_s": statistics.median(samples), "min_s": min(samples), "iters": timed}


# ------------------------------------------------------------------------------------------------
# Workers


def float_buffer(count: int) -> np.ndarray:
    """count zeroed float32s: in the shared arena under ``--arena`` (BENCH_IN_ARENA=1, where
    the other ranks read them in place), else in private memory."""
    import numpy as np
    from hora import _core

    if os.environ.get("BENCH_IN_ARENA") != "1":
        return np.zeros(count, dtype=np.float32)
    block = _core.shared_block(count * 4)
    if block is None:
        raise RuntimeError("no shared arena on this job (HORA_SHM_ARENA_BYTES, windows?)")
    return np.frombuffer(block, dtype=np.float32)


def hora_step() -> Callable[[], None]:
    """Hora's 200-tensor step: every tensor submitted asynchronously, then every one waited for
    (the shape of a backward pass). bench/wait_cpu.py runs the same step."""
    import hora

    count = STEP_TENSOR_BYTES // 4
    # One run of memory in submission order, as DistributedOptimizer lays out shared gradients.
    flat = float_buffer(count * STEP_TENSORS)
    bufs = [flat[i * count:(i + 1) * count] for i in range(STEP_TENSORS)]

    def step() -> None:
        handles = [
            hora.allreduce_async_(b, op=hora.Sum, name=f"step.{i}") for i, b in enumerate(bufs)
        ]
        for h in handles:
            hora.synchronize(h)

    return step


def hora_worker(sizes: list[int], iters: int, out: str) -> None:
    """Runs under horarun: in-place Sum allreduce per size, then the 200-tensor step."""
    import hora

    hora.init()
    results = []
    for nbytes in sizes:
        buf = float_buffer(nbytes // 4)
        name = f"bench.{nbytes}"
        hora.barrier()
        stats = median_time(
            lambda buf=buf, name=name: hora.allreduce_(buf, op=hora.Sum, name=name),
            *iterations(nbytes, iters),
        )
        results.append({"bytes": nbytes, **stats})
        del buf
    step = hora_step()
    hora.barrier()
    step_stats = median_time(step, 3, iters)
    if hora.rank() == 0:
        write_results(out, "hora", hora.size(), results, step_stats)
    hora.shutdown()


def torch_worker(rank: int, world: int, port: int, sizes: list[int], iters: int, out: str,
                 bind: bool) -> None:
    """One torch.distributed (gloo) process, started by torch.multiprocessing.spawn."""
    if bind:
        from hora.runner.env import bind_like_horarun

        bind_like_horarun(rank, world)
    import torch
    import torch.distributed as dist

    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    results = []
    for nbytes in sizes:
        t = torch.zeros(nbytes // 4, dtype=torch.float32)
        dist.barrier()
        stats = median_time(lambda t=t: dist.all_reduce(t), *iterations(nbytes, iters))
        results.append({"bytes": nbytes, **stats})
        del t
    ts = [torch.zeros(STEP_TENSOR_BYTES // 4, dtype=torch.float32) for _ in range(STEP_TENSORS)]

    def step() -> None:
        works = [dist.all_reduce(t, async_op=True) for t in ts]
        for w in works:
            w.wait()

    dist.barrier()
    step_stats = median_time(step, 3, iters)
    if rank == 0:
        write_results(out, "torch.distributed (gloo)", world, results, step_stats)
    dist.destroy_process_group()


def mpi4py_worker(sizes: list[int], iters: int, out: str, bind: bool) -> None:
    """Runs under mpirun: mpi4py's in-place Allreduce per size, then 200 Iallreduce + Waitall."""
    import numpy as np
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    if bind:
        from hora.runner.env import bind_like_horarun

        bind_like_horarun(comm.Get_rank(), comm.Get_size())
    results = []
    for nbytes in sizes:
        buf = np.zeros(nbytes // 4, dtype=np.float32)
        comm.Barrier()
        stats = median_time(
            lambda buf=buf: comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM),
            *iterations(nbytes, iters),
        )
        results.append({"bytes": nbytes, **stats})
        del buf
    bufs = [np.zeros(STEP_TENSOR_BYTES // 4, dtype=np.float32) for _ in range(STEP_TENSORS)]

    def step() -> None:
        reqs = [comm.Iallreduce(MPI.IN_PLACE, b, op=MPI.SUM) for b in bufs]
        MPI.Request.Waitall(reqs)

    comm.Barrier()
    step_stats = median_time(step, 3, iters)
    if comm.Get_rank() == 0:
        write_results(out, "mpi4py (Open MPI)", comm.Get_size(), results, step_stats)


def write_results(
    out: str, impl: str, world: int, results: list[dict], step: dict[str, float]
) -> None:
    payload = {
        "impl": impl,
        "world": world,
        "results": results,
        "step": {"tensors": STEP_TENSORS, "bytes_each": STEP_TENSOR_BYTES, **step},
    }
    Path(out).write_text(json.dumps(payload))


# ------------------------------------------------------------------------------------------------
# Driver


def horarun_command() -> list[str]:
    beside = Path(sys.executable).parent / "horarun"
    if beside.exists():
        return [str(beside)]
    return [
        sys.executable,
        "-c",
        "import sys; from hora.runner.launch import main; sys.exit(main())",
    ]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker_args(args: argparse.Namespace, sizes: list[int], worker: str, out: str) -> list[str]:
    return [
        sys.executable,
        str(Path(__file__).resolve()),
        "--worker",
        worker,
        "--out",
        out,
        "--iters",
        str(args.iters),
        "--sizes",
        ",".join(str(s) for s in sizes),
        "--bind-to",
        args.bind_to,
    ]


def run_mpi4py(args: argparse.Namespace, sizes: list[int], out: str) -> dict | None:
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        print("mpi4py is not installed: no Open MPI figures (pip install mpi4py)")
        return None
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        print("mpirun is not on PATH: no Open MPI figures")
        return None
    # The workers bind themselves as horarun binds its ranks (--bind-to).
    cmd = [mpirun, "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np",
           str(args.np)]
    cmd += worker_args(args, sizes, "mpi4py", out)
    print(f"running mpi4py: {' '.join(cmd)}", flush=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HORA_", "HOROVOD_"))}
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    proc = subprocess.run(cmd, check=False, env=env)
    if proc.returncode != 0:
        print(f"mpi4py run failed with exit {proc.returncode}", file=sys.stderr)
        return None
    return json.loads(Path(out).read_text())


def run_hora(
    args: argparse.Namespace,
    sizes: list[int],
    out: str,
    env_extra: dict[str, str],
    label: str,
    hosts: str | None = None,
) -> dict | None:
    cmd = [
        *horarun_command(),
        "-np",
        str(args.np),
        "--bind-to",
        args.bind_to,
        *(["-H", hosts] if hosts else []),
        *worker_args(args, sizes, "hora", out),
    ]
    print(f"running {label}: {' '.join(cmd)}", flush=True)
    proc = subprocess.run(cmd, check=False, env={**os.environ, **env_extra})
    if proc.returncode != 0:
        print(f"{label} run failed with exit {proc.returncode}", file=sys.stderr)
        return None
    result = json.loads(Path(out).read_text())
    result["impl"] = label
    return result


def run_torch(args: argparse.Namespace, sizes: list[int], out: str) -> dict | None:
    try:
        import torch.multiprocessing as mp
    except ImportError:
        print("torch is not installed: no peer figures (pip install torch==2.13.0)")
        return None
    print("running torch.distributed (gloo) through torch.multiprocessing", flush=True)
    mp.spawn(
        torch_worker,
        args=(args.np, free_port(), sizes, args.iters, out, args.bind_to == "core"),
        nprocs=args.np,
        join=True,
    )
    return json.loads(Path(out).read_text())


def bandwidths(nbytes: int, seconds: float, world: int) -> tuple[float, float]:
    """(algbw, busbw) in GB/s, nccl-tests definitions for allreduce."""
    algbw = nbytes / seconds / 1e9
    return algbw, algbw * 2 * (world - 1) / world


def print_report(hora_res: dict | None, peer_res: dict | None, world: int) -> None:
    print()
    print(f"allreduce, float32, Sum, in place, {world} ranks on this host; time = median")
    print(
        "bandwidths in GB/s: algbw = size/time, busbw = algbw * 2(n-1)/n; "
        "ratio = peer time / hora time (> 1: Hora faster)"
    )
    header = (
        f"{'size':>9} | {'hora time':>10} {'algbw':>8} {'busbw':>8} | "
        f"{'gloo time':>10} {'algbw':>8} {'busbw':>8} | {'ratio':>6}"
    )
    print(header)
    print("-" * len(header))
    rows_h = {r["bytes"]: r for r in (hora_res or {}).get("results", [])}
    rows_p = {r["bytes"]: r for r in (peer_res or {}).get("results", [])}

    def cells(row: dict | None, nbytes: int) -> str:
        if row is None:
            return f"{'-':>10} {'-':>8} {'-':>8}"
        alg, bus = bandwidths(nbytes, row["median_s"], world)
        return f"{format_time(row['median_s']):>10} {alg:>8.3f} {bus:>8.3f}"

    for nbytes in sorted(set(rows_h) | set(rows_p)):
        h, p = rows_h.get(nbytes), rows_p.get(nbytes)
        ratio = f"{p['median_s'] / h['median_s']:>6.2f}" if h and p else f"{'-':>6}"
        print(f"{format_size(nbytes):>9} | {cells(h, nbytes)} | {cells(p, nbytes)} | {ratio}")

    step_h = (hora_res or {}).get("step")
    step_p = (peer_res or {}).get("step")
    print()
    print(
        f"step of {STEP_TENSORS} tensors x {format_size(STEP_TENSOR_BYTES)}, submitted "
        "asynchronously, then all waited for (median):"
    )
    if step_h:
        print(f"  hora: {format_time(step_h['median_s'])}")
    if step_p:
        print(f"  gloo: {format_time(step_p['median_s'])}")
    if step_h and step_p:
        print(f"  ratio (gloo / hora): {step_p['median_s'] / step_h['median_s']:.2f}")

    print()
    print("targets:")
    if rows_h and rows_p:
        big = [n for n in sorted(rows_h) if n >= TARGET_BUSBW_FROM and n in rows_p]
        behind = [format_size(n) for n in big if rows_h[n]["median_s"] > rows_p[n]["median_s"]]
        verdict = (
            "met"
            if big and not behind
            else ("not measured" if not big else "NOT met at " + ", ".join(behind))
        )
        print(f"  busbw >= peer from {format_size(TARGET_BUSBW_FROM)} up: {verdict}")
    if step_h and step_p:
        ratio = step_p["median_s"] / step_h["median_s"]
        verdict = "met" if ratio >= TARGET_STEP_RATIO else "NOT met"
        print(
            f"  {STEP_TENSORS}-tensor step >= {TARGET_STEP_RATIO:g}x peer: {ratio:.2f}x, {verdict}"
        )
    if 4 in rows_h:
        t = rows_h[4]["median_s"]
        verdict = "met" if t < TARGET_TINY_LATENCY_S else "NOT met"
        print(
            f"  4 B allreduce < {TARGET_TINY_LATENCY_S * 1e6:.0f} us: {format_time(t)}, {verdict}"
        )


def print_side_by_side(runs: list[dict], world: int) -> None:
    """One row per size and the step, one column per implementation, then each one's time over
    the first (Hora over shared memory)."""
    runs = [r for r in runs if r]
    if not runs:
        return
    names = [r["impl"] for r in runs]
    rows: list[tuple[str, list[float | None]]] = []
    sizes = sorted({x["bytes"] for r in runs for x in r["results"]})
    for nbytes in sizes:
        times = []
        for r in runs:
            match = [x["median_s"] for x in r["results"] if x["bytes"] == nbytes]
            times.append(match[0] if match else None)
        rows.append((format_size(nbytes), times))
    step_label = f"{STEP_TENSORS} x {format_size(STEP_TENSOR_BYTES)} step"
    rows.append((step_label, [r.get("step", {}).get("median_s") for r in runs]))
    print()
    print(f"side by side, {world} ranks on this host, median time; ratio = time / {names[0]} time")
    header = f"| case | {' | '.join(names)} | {' | '.join(f'{n} / {names[0]}' for n in names[1:])} |"
    print(header)
    print("|" + "---|" * (1 + 2 * len(names) - 1))
    for label, times in rows:
        cells = [format_time(t) if t is not None else "-" for t in times]
        base = times[0]
        ratios = [
            f"{t / base:.2f}" if t is not None and base else "-" for t in times[1:]
        ]
        print(f"| {label} | {' | '.join(cells)} | {' | '.join(ratios)} |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", help="comma-separated sizes in bytes (4, 16K, 1M, ...)")
    parser.add_argument("--max-size", default="256M", help="largest default size (256M)")
    parser.add_argument("--iters", type=int, default=20, help="timed iterations at 1 MiB (20)")
    parser.add_argument("--np", type=int, default=2, help="ranks (2)")
    parser.add_argument("--no-peer", action="store_true", help="skip torch.distributed")
    parser.add_argument("--no-mpi", action="store_true", help="skip mpi4py")
    parser.add_argument("--no-tcp", action="store_true", help="skip Hora over TCP")
    parser.add_argument(
        "--rings",
        action="store_true",
        help="also run Hora over shared memory without windows (HORA_SHM_WINDOW_BYTES=0): every "
        "allreduce through the rank-pair rings, as before windows existed",
    )
    parser.add_argument(
        "--via-rank0",
        action="store_true",
        help="also run Hora over shared memory with every tensor negotiated by rank 0, cached "
        "ones included (HORA_SHM_LOCAL_AGREEMENT=0), as before local agreement existed",
    )
    parser.add_argument(
        "--arena",
        action="store_true",
        help="also run Hora over shared memory with every tensor in the shared arena, where the "
        "other ranks read it in place (as DistributedOptimizer's shared gradients)",
    )
    parser.add_argument(
        "--hierarchical",
        action="store_true",
        help="also run Hora with the ranks on two host names (localhost, 127.0.0.1) that do not "
        "share one segment (HORA_SHM_HOST_BY_NAME=1): flat, hierarchical, hierarchical on TCP "
        "alone (even --np)",
    )
    parser.add_argument(
        "--bind-to",
        choices=("core", "none"),
        default="core",
        help="CPU binding of every implementation's ranks: core (default) as horarun --bind-to "
        "core, which the gloo and mpi4py ranks apply to themselves too, or none for all",
    )
    parser.add_argument("--worker", choices=["hora", "mpi4py"], help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.sizes:
        sizes = [parse_size(s) for s in args.sizes.split(",") if s.strip()]
    else:
        sizes = default_sizes(parse_size(args.max_size))
    sizes = [max(4, s - s % 4) for s in sizes]

    if args.worker == "hora":
        hora_worker(sizes, args.iters, args.out)
        return 0
    if args.worker == "mpi4py":
        mpi4py_worker(sizes, args.iters, args.out, args.bind_to == "core")
        return 0

    with tempfile.TemporaryDirectory(prefix="hora-bench-") as tmp:
        hora_res = run_hora(args, sizes, os.path.join(tmp, "hora.json"), {}, "hora shm")
        rings_res = None
        if args.rings:
            rings_res = run_hora(
                args, sizes, os.path.join(tmp, "rings.json"), {"HORA_SHM_WINDOW_BYTES": "0"},
                "hora shm rings",
            )
        via_rank0_res = None
        if args.via_rank0:
            via_rank0_res = run_hora(
                args, sizes, os.path.join(tmp, "via_rank0.json"),
                {"HORA_SHM_LOCAL_AGREEMENT": "0"}, "hora shm via rank 0",
            )
        arena_res = None
        if args.arena:
            arena_res = run_hora(
                args, sizes, os.path.join(tmp, "arena.json"), {"BENCH_IN_ARENA": "1"},
                "hora shm arena",
            )
        tcp_res = None
        if not args.no_tcp:
            tcp_res = run_hora(
                args, sizes, os.path.join(tmp, "tcp.json"), {"HORA_SHM_DISABLE": "1"}, "hora tcp"
            )
        hier_res: list[dict | None] = []
        if args.hierarchical:
            if args.np % 2:
                parser.error("--hierarchical needs an even --np")
            hosts = f"localhost:{args.np // 2},127.0.0.1:{args.np // 2}"
            hier = {"HORA_HIERARCHICAL_ALLREDUCE": "1"}
            for label, extra in (
                ("2 hosts flat", {}),
                ("2 hosts hier", hier),
                ("2 hosts hier tcp", {**hier, "HORA_SHM_DISABLE": "1"}),
            ):
                path = os.path.join(tmp, label.replace(" ", "_") + ".json")
                env_extra = {"HORA_SHM_HOST_BY_NAME": "1", **extra}
                hier_res.append(run_hora(args, sizes, path, env_extra, label, hosts))
        peer_res = None
        if not args.no_peer:
            peer_res = run_torch(args, sizes, os.path.join(tmp, "torch.json"))
            if peer_res:
                peer_res["impl"] = "gloo"
        mpi_res = None
        if not args.no_mpi:
            mpi_res = run_mpi4py(args, sizes, os.path.join(tmp, "mpi4py.json"))
            if mpi_res:
                mpi_res["impl"] = "mpi4py"
    print_report(hora_res, peer_res, args.np)
    runs = (hora_res, rings_res, via_rank0_res, arena_res, tcp_res, *hier_res, peer_res, mpi_res)
    print_side_by_side([r for r in runs if r], args.np)
    return 0 if hora_res is not None else 1


if __name__ == "__main__":
    sys.exit(main())
