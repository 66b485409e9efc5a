"""Allreduce benchmark: Hora against torch.distributed (gloo) and mpi4py side by side, this host.

    python bench/allreduce.py [--sizes 4,1K,1M] [--iters 20] [--max-size 256M] [--np 2]
        [--no-hora-torch] [--rounds K] [--json PATH] [--horovod PYTHON]

The script runs itself as workers: three times under ``horarun -np N`` (Hora over shared memory,
its default when every rank is on one host, through its NumPy API; the same through
``hora.torch`` on torch tensors, as a training script calls it, unless ``--no-hora-torch``; and
Hora over TCP with ``HORA_SHM_DISABLE=1``; with
``--rings`` again over shared memory without windows, ``HORA_SHM_WINDOW_BYTES=0``, and with
``--via-rank0`` with every tensor negotiated by rank 0, ``HORA_SHM_LOCAL_AGREEMENT=0``; with
``--arena`` again with every tensor in the shared arena, where the other ranks read it in place),
once through torch.multiprocessing with an env-based ``init_process_group("gloo")`` on 127.0.0.1,
and once under ``mpirun -np N`` with mpi4py's ``Allreduce`` (Open MPI) when mpi4py and mpirun are
installed. With ``--hierarchical``, three more with the ranks on two host names of this machine
(``-H localhost:N/2,127.0.0.1:N/2``) that, with ``HORA_SHM_HOST_BY_NAME=1``, do not share one
segment, as on two machines: flat (TCP, ``HORA_HIERARCHICAL_ALLREDUCE=0``), hierarchical
(``HORA_HIERARCHICAL_ALLREDUCE=1``: shared memory within each host, TCP across), and the same
with ``HORA_SHM_DISABLE=1`` (TCP only). With
``--horovod PYTHON`` (the interpreter of an environment with Horovod), once more under ``mpirun``
with Horovod's torch allreduce. Rank 0 of each writes its timings as JSON to a temporary file;
this process prints the tables and writes every figure to the results file (``--json``, by
default bench/results/allreduce-np<N>.json; bench/report.py makes the documentation's tables from
it). Every implementation's ranks run with the same CPU binding: by default horarun's
``--bind-to core``, which the gloo and mpi4py ranks apply to themselves (mpirun ``--bind-to
none``); ``--bind-to none`` runs them all unbound. Horovod's ranks stay unbound either way, as
horovodrun starts them (bound, Horovod is slower: see horovod_worker).

Per size (float32, in place, Sum): the median time of several iterations after warm-up, the
algorithm bandwidth (bytes / time) and the bus bandwidth (algbw * 2(n-1)/n), as nccl-tests define
them, and peer_time / hora_time (above 1: Hora is faster). A second measurement submits 200
tensors of 16 KiB asynchronously and then waits for all of them, as a training step with many
small gradients does. A last table puts every implementation side by side, with each one's time
over Hora's shared-memory time (bench/report.py prints the same table into the documentation).
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
from typing import TYPE_CHECKING, Any

from common.launch import find_mpirun, free_port, horarun_command, mpi_env
from common.results import Recorder, json_help
from common.sizes import KIB, MIB, format_size, parse_size, parse_sizes, powers_of_four
from common.tables import markdown_table, ratio_cell, time_cell
from common.timing import bandwidths, format_time, median_time, merge_run

if TYPE_CHECKING:
    import numpy as np

STEP_TENSORS = 200
STEP_TENSOR_BYTES = 16 * KIB
STEP_CASE = "step"

# Targets the README states; printed with whether this run met them.
TARGET_BUSBW_FROM = 1 * MIB
TARGET_STEP_RATIO = 3.0
TARGET_TINY_LATENCY_S = 200e-6


# ------------------------------------------------------------------------------------------------
# Iteration counts


def iterations(nbytes: int, iters: int) -> tuple[int, int]:
    """(warm-up, timed) iterations: more for small sizes, fewer (at least 3) for large ones."""
    if nbytes <= 64 * KIB:
        return 5, iters * 5
    if nbytes <= 4 * MIB:
        return 3, iters
    return 1, max(3, iters * 4 * MIB // nbytes)


# ------------------------------------------------------------------------------------------------
# Workers


def float_buffer(count: int) -> np.ndarray:
    """count zeroed float32s: in the shared arena under ``--arena`` (BENCH_IN_ARENA=1, where
    the other ranks read them in place), else in private memory."""
    import numpy as np
    from hora import _core

    if os.environ.get("BENCH_IN_ARENA") != "1":
        return numpy_floats(count)
    block = _core.shared_block(count * 4)
    if block is None:
        raise RuntimeError("no shared arena on this job (HORA_SHM_ARENA_BYTES, windows?)")
    return np.frombuffer(block, dtype=np.float32)


def numpy_floats(count: int) -> np.ndarray:
    """count zeroed float32s in private memory."""
    import numpy as np

    return np.zeros(count, dtype=np.float32)


def torch_floats(count: int) -> Any:
    """count zeroed float32s as a torch tensor."""
    import torch

    return torch.zeros(count, dtype=torch.float32)


def size_sweep(sizes: list[int], iters: int, new_buffer: Callable[[int], Any],
               allreduce: Callable[[Any, int], object], barrier: Callable[[], object]
               ) -> list[dict[str, Any]]:
    """Every worker's loop: per size, a float32 buffer of that many bytes, the ranks lined up,
    then the median time of an in-place Sum allreduce of it (``allreduce(buffer, nbytes)``)."""
    results = []
    for nbytes in sizes:
        buf = new_buffer(nbytes // 4)
        barrier()
        stats = median_time(lambda buf=buf, n=nbytes: allreduce(buf, n),
                            *iterations(nbytes, iters))
        results.append({"bytes": nbytes, **stats})
        del buf
    return results


def async_step(buffers: list[Any], submit: Callable[[int, Any], Any],
               wait_all: Callable[[list[Any]], object]) -> Callable[[], None]:
    """Every worker's step of STEP_TENSORS tensors, the shape of a backward pass: each buffer
    submitted asynchronously (``submit(i, buffer)`` returns its handle), then every handle
    waited for (``wait_all(handles)``)."""

    def step() -> None:
        wait_all([submit(i, b) for i, b in enumerate(buffers)])

    return step


def waiting_each(wait: Callable[[Any], object]) -> Callable[[list[Any]], None]:
    """``wait_all`` of an API that waits for one handle at a time."""

    def wait_all(handles: list[Any]) -> None:
        for h in handles:
            wait(h)

    return wait_all


def horovod_api_step(api: Any, buffers: list[Any]) -> Callable[[], None]:
    """The step through Horovod's API (``hora``, ``hora.torch``, ``horovod.torch``): an
    ``allreduce_async_`` per buffer, then a ``synchronize`` per handle."""
    return async_step(buffers,
                      lambda i, b: api.allreduce_async_(b, op=api.Sum, name=f"step.{i}"),
                      waiting_each(api.synchronize))


def step_buffers(new_buffer: Callable[[int], Any]) -> list[Any]:
    """The step's tensors, each of its own memory."""
    return [new_buffer(STEP_TENSOR_BYTES // 4) for _ in range(STEP_TENSORS)]


def hora_step() -> Callable[[], None]:
    """Hora's step through its NumPy API. bench/wait_cpu.py runs the same step."""
    import hora

    count = STEP_TENSOR_BYTES // 4
    # One run of memory in submission order, as DistributedOptimizer lays out shared gradients.
    flat = float_buffer(count * STEP_TENSORS)
    return horovod_api_step(hora, [flat[i * count:(i + 1) * count] for i in range(STEP_TENSORS)])


def hora_worker(sizes: list[int], iters: int, out: str) -> None:
    """Runs under horarun: in-place Sum allreduce per size, then the 200-tensor step."""
    import hora

    hora.init()
    results = size_sweep(
        sizes, iters, float_buffer,
        lambda buf, n: hora.allreduce_(buf, op=hora.Sum, name=f"bench.{n}"), hora.barrier)
    step = hora_step()
    hora.barrier()
    step_stats = median_time(step, 3, iters)
    if hora.rank() == 0:
        write_results(out, "hora", hora.size(), results, step_stats)
    hora.shutdown()


def hora_torch_worker(sizes: list[int], iters: int, out: str) -> None:
    """Runs under horarun: the hora worker's sweep and step through hora.torch, on torch
    tensors, as a training script calls it (allreduce_, allreduce_async_ and synchronize)."""
    import hora.torch as hvd
    import torch

    hvd.init()
    results = size_sweep(
        sizes, iters, torch_floats,
        lambda t, n: hvd.allreduce_(t, op=hvd.Sum, name=f"bench.{n}"), hvd.barrier)
    count = STEP_TENSOR_BYTES // 4
    # Views of one run of memory, as hora_step's buffers.
    step = horovod_api_step(
        hvd, list(torch.zeros(count * STEP_TENSORS, dtype=torch.float32).split(count)))
    hvd.barrier()
    step_stats = median_time(step, 3, iters)
    if hvd.rank() == 0:
        write_results(out, "hora torch", hvd.size(), results, step_stats)
    hvd.shutdown()


def torch_worker(rank: int, world: int, port: int, sizes: list[int], iters: int, out: str,
                 bind: bool) -> None:
    """One torch.distributed (gloo) process, started by torch.multiprocessing.spawn."""
    if bind:
        from hora.runner.env import bind_like_horarun

        bind_like_horarun(rank, world)
    import torch.distributed as dist

    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    results = size_sweep(sizes, iters, torch_floats,
                         lambda t, _: dist.all_reduce(t), dist.barrier)
    step = async_step(step_buffers(torch_floats),
                      lambda _, t: dist.all_reduce(t, async_op=True),
                      waiting_each(lambda work: work.wait()))
    dist.barrier()
    step_stats = median_time(step, 3, iters)
    if rank == 0:
        write_results(out, "torch.distributed (gloo)", world, results, step_stats)
    dist.destroy_process_group()


def mpi4py_worker(sizes: list[int], iters: int, out: str, bind: bool) -> None:
    """Runs under mpirun: mpi4py's in-place Allreduce per size, then 200 Iallreduce + Waitall."""
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    if bind:
        from hora.runner.env import bind_like_horarun

        bind_like_horarun(comm.Get_rank(), comm.Get_size())
    results = size_sweep(sizes, iters, numpy_floats,
                         lambda buf, _: comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM),
                         comm.Barrier)
    step = async_step(step_buffers(numpy_floats),
                      lambda _, b: comm.Iallreduce(MPI.IN_PLACE, b, op=MPI.SUM),
                      MPI.Request.Waitall)
    comm.Barrier()
    step_stats = median_time(step, 3, iters)
    if comm.Get_rank() == 0:
        write_results(out, "mpi4py (Open MPI)", comm.Get_size(), results, step_stats)


def horovod_worker(sizes: list[int], iters: int, out: str) -> None:
    """Runs under mpirun with Horovod's interpreter: horovod.torch's in-place Sum allreduce per
    size, then 200 allreduce_async_ + synchronize. Its ranks stay unbound whatever --bind-to
    says, as horovodrun starts them: bound like the others, each rank's threads share one CPU
    and every small allreduce takes 3-4 ms, where unbound most take one 1 ms cycle."""
    import horovod.torch as hvd

    hvd.init()
    results = size_sweep(sizes, iters, torch_floats,
                         lambda t, n: hvd.allreduce_(t, op=hvd.Sum, name=f"bench.{n}"),
                         hvd.barrier)
    step = horovod_api_step(hvd, step_buffers(torch_floats))
    step_stats = median_time(step, 3, iters)
    if hvd.rank() == 0:
        write_results(out, "horovod", hvd.size(), results, step_stats,
                      version=__import__("horovod").__version__)
    hvd.shutdown()


def write_results(out: str, impl: str, world: int, results: list[dict], step: dict[str, float],
                  version: str | None = None) -> None:
    """Rank 0's figures, for the driver to read."""
    payload = {
        "impl": impl,
        "world": world,
        "version": version,
        "results": results,
        "step": {"tensors": STEP_TENSORS, "bytes_each": STEP_TENSOR_BYTES, **step},
    }
    Path(out).write_text(json.dumps(payload))



# ------------------------------------------------------------------------------------------------
# Driver


def worker_args(args: argparse.Namespace, sizes: list[int], worker: str, out: str,
                python: str = sys.executable) -> list[str]:
    return [
        python,
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


def run_under_mpirun(args: argparse.Namespace, sizes: list[int], out: str, worker: str,
                     python: str, label: str) -> dict | None:
    """One worker job under ``mpirun -np N`` (unbound: the workers bind themselves as horarun
    binds its ranks, --bind-to)."""
    mpirun = find_mpirun()
    if mpirun is None:
        print(f"mpirun is not on PATH: no {label} figures")
        return None
    cmd = [mpirun, "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np",
           str(args.np)]
    cmd += worker_args(args, sizes, worker, out, python)
    print(f"running {label}: {' '.join(cmd)}", flush=True)
    proc = subprocess.run(cmd, check=False, env=mpi_env())
    if proc.returncode != 0:
        print(f"{label} run failed with exit {proc.returncode}", file=sys.stderr)
        return None
    return json.loads(Path(out).read_text())


def run_mpi4py(args: argparse.Namespace, sizes: list[int], out: str) -> dict | None:
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        print("mpi4py is not installed: no Open MPI figures (pip install mpi4py)")
        return None
    return run_under_mpirun(args, sizes, out, "mpi4py", sys.executable, "mpi4py")


def run_hora(
    args: argparse.Namespace,
    sizes: list[int],
    out: str,
    env_extra: dict[str, str],
    label: str,
    hosts: str | None = None,
    worker: str = "hora",
) -> dict | None:
    cmd = [
        *horarun_command(args.np, "--bind-to", args.bind_to),
        *(["-H", hosts] if hosts else []),
        *worker_args(args, sizes, worker, out),
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


def run_all(args: argparse.Namespace, sizes: list[int], tmp: str) -> list[dict]:
    """Every implementation the flags ask for, in the order of the side-by-side table; Hora over
    shared memory first (the others' ratios are to it). A run that failed is left out."""
    def path(label: str) -> str:
        return os.path.join(tmp, label.replace(" ", "_") + ".json")

    hora_runs: list[tuple[str, dict[str, str], str | None]] = [("hora shm", {}, None)]
    if args.rings:
        hora_runs.append(("hora shm rings", {"HORA_SHM_WINDOW_BYTES": "0"}, None))
    if args.via_rank0:
        hora_runs.append(("hora shm via rank 0", {"HORA_SHM_LOCAL_AGREEMENT": "0"}, None))
    if args.arena:
        hora_runs.append(("hora shm arena", {"BENCH_IN_ARENA": "1"}, None))
    if not args.no_tcp:
        hora_runs.append(("hora tcp", {"HORA_SHM_DISABLE": "1"}, None))
    if args.hierarchical:
        hosts = f"localhost:{args.np // 2},127.0.0.1:{args.np // 2}"
        hier = {"HORA_SHM_HOST_BY_NAME": "1", "HORA_HIERARCHICAL_ALLREDUCE": "1"}
        flat = {"HORA_SHM_HOST_BY_NAME": "1", "HORA_HIERARCHICAL_ALLREDUCE": "0"}
        hora_runs += [("2 hosts flat", flat, hosts),
                      ("2 hosts hier", hier, hosts),
                      ("2 hosts hier tcp", {**hier, "HORA_SHM_DISABLE": "1"}, hosts)]
    runs = [run_hora(args, sizes, path(label), extra, label, hosts)
            for label, extra, hosts in hora_runs]
    if not args.no_hora_torch:
        runs.append(run_hora(args, sizes, path("hora torch"), {}, "hora torch",
                             worker="hora_torch"))
    if not args.no_peer:
        runs.append(run_torch(args, sizes, path("torch")))
        if runs[-1]:
            runs[-1]["impl"] = "gloo"
    if not args.no_mpi:
        runs.append(run_mpi4py(args, sizes, path("mpi4py")))
        if runs[-1]:
            runs[-1]["impl"] = "mpi4py"
    if args.horovod:
        runs.append(run_under_mpirun(args, sizes, path("horovod"), "horovod", args.horovod,
                                     "horovod"))
    return [r for r in runs if r]


def merge_runs(rounds: list[list[dict]]) -> list[dict]:
    """Every implementation's runs of several rounds as one run each (``merge_run``), in the
    order they ran; a run that failed in one round is merged from the rounds where it did
    not."""
    labels = dict.fromkeys(run["impl"] for runs in rounds for run in runs)
    return [merge_run([run for runs in rounds for run in runs if run["impl"] == label])
            for label in labels]


def result_rows(run: dict, world: int) -> list[dict[str, Any]]:
    """One run's figures as rows of the results file: one per size, then the step."""
    rows: list[dict[str, Any]] = []
    for r in run["results"]:
        algbw, busbw = bandwidths(r["bytes"], r["median_s"], world)
        rows.append({"implementation": run["impl"], "case": "allreduce", "bytes": r["bytes"],
                     "median_s": r["median_s"], "min_s": r["min_s"], "iters": r["iters"],
                     "algbw_gbs": algbw, "busbw_gbs": busbw})
    step = run.get("step")
    if step:
        rows.append({"implementation": run["impl"], "case": STEP_CASE,
                     "tensors": step["tensors"], "bytes": step["bytes_each"],
                     "median_s": step["median_s"], "min_s": step["min_s"],
                     "iters": step["iters"]})
    return rows


def by_implementation(rows: list[dict]) -> dict[str, dict[Any, dict]]:
    """implementation -> {bytes or STEP_CASE: row}, in the rows' order."""
    found: dict[str, dict[Any, dict]] = {}
    for row in rows:
        key = STEP_CASE if row["case"] == STEP_CASE else row["bytes"]
        found.setdefault(row["implementation"], {})[key] = row
    return found


def print_report(hora_rows: dict[Any, dict], peer_rows: dict[Any, dict], world: int) -> None:
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
    rows_h = {n: r for n, r in hora_rows.items() if n != STEP_CASE}
    rows_p = {n: r for n, r in peer_rows.items() if n != STEP_CASE}

    def cells(row: dict | None, nbytes: int) -> str:
        if row is None:
            return f"{'-':>10} {'-':>8} {'-':>8}"
        alg, bus = bandwidths(nbytes, row["median_s"], world)
        return f"{format_time(row['median_s']):>10} {alg:>8.3f} {bus:>8.3f}"

    for nbytes in sorted(set(rows_h) | set(rows_p)):
        h, p = rows_h.get(nbytes), rows_p.get(nbytes)
        ratio = f"{p['median_s'] / h['median_s']:>6.2f}" if h and p else f"{'-':>6}"
        print(f"{format_size(nbytes):>9} | {cells(h, nbytes)} | {cells(p, nbytes)} | {ratio}")

    step_h = hora_rows.get(STEP_CASE)
    step_p = peer_rows.get(STEP_CASE)
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


def side_by_side(rows: list[dict]) -> list[str]:
    """One row per size and the step, one column per implementation, then each one's time over
    the first's (Hora over shared memory): the lines of a Markdown table."""
    runs = by_implementation(rows)
    names = list(runs)
    if not names:
        return []
    sizes = sorted({n for r in runs.values() for n in r if n != STEP_CASE})
    cases: list[tuple[str, Any]] = [(format_size(n), n) for n in sizes]
    cases.append((f"{STEP_TENSORS} x {format_size(STEP_TENSOR_BYTES)} step", STEP_CASE))
    table = []
    for label, key in cases:
        times = [runs[name].get(key, {}).get("median_s") for name in names]
        table.append([label, *(time_cell(t) for t in times),
                      *(ratio_cell(t, times[0]) for t in times[1:])])
    header = ["case", *names, *(f"{n} / {names[0]}" for n in names[1:])]
    return markdown_table(header, table)


def settings_of(args: argparse.Namespace, sizes: list[int]) -> dict[str, Any]:
    """What the results file records of the run's flags."""
    return {"ranks": args.np, "dtype": "float32", "op": "Sum", "in_place": True,
            "sizes": sizes, "iters": args.iters, "bind_to": args.bind_to,
            "step_tensors": STEP_TENSORS, "step_tensor_bytes": STEP_TENSOR_BYTES,
            "rings": args.rings, "via_rank0": args.via_rank0, "arena": args.arena,
            "hierarchical": args.hierarchical, "tcp": not args.no_tcp,
            "hora_torch": not args.no_hora_torch,
            "gloo": not args.no_peer, "mpi4py": not args.no_mpi,
            "horovod": bool(args.horovod), "rounds": args.rounds}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", help="comma-separated sizes in bytes (4, 16K, 1M, ...)")
    parser.add_argument("--max-size", default="256M", help="largest default size (256M)")
    parser.add_argument("--iters", type=int, default=20, help="timed iterations at 1 MiB (20)")
    parser.add_argument("--np", type=int, default=2, help="ranks (2)")
    parser.add_argument("--no-peer", action="store_true", help="skip torch.distributed")
    parser.add_argument("--no-mpi", action="store_true", help="skip mpi4py")
    parser.add_argument("--no-tcp", action="store_true", help="skip Hora over TCP")
    parser.add_argument("--no-hora-torch", action="store_true",
                        help="skip Hora through hora.torch (torch tensors, shared memory)")
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
    parser.add_argument(
        "--horovod",
        metavar="PYTHON",
        help="also run Horovod's torch allreduce under mpirun with this interpreter (one of an "
        "environment where horovod.torch imports)",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="run every implementation this many times, one after another in each round, and "
        "take per size the median of the rounds' medians: evens out the moments when the "
        "machine runs slower (default: 1)",
    )
    parser.add_argument("--json", type=Path, help=json_help("allreduce"))
    parser.add_argument("--worker", choices=["hora", "hora_torch", "mpi4py", "horovod"],
                        help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    sizes = parse_sizes(args.sizes) if args.sizes else powers_of_four(4, parse_size(args.max_size))
    sizes = [max(4, s - s % 4) for s in sizes]

    if args.worker == "hora":
        hora_worker(sizes, args.iters, args.out)
        return 0
    if args.worker == "hora_torch":
        hora_torch_worker(sizes, args.iters, args.out)
        return 0
    if args.worker == "mpi4py":
        mpi4py_worker(sizes, args.iters, args.out, args.bind_to == "core")
        return 0
    if args.worker == "horovod":
        horovod_worker(sizes, args.iters, args.out)
        return 0
    if args.hierarchical and args.np % 2:
        parser.error("--hierarchical needs an even --np")

    recorder = Recorder("allreduce", packages=("torch", "numpy", "mpi4py", "open_mpi"))
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    with tempfile.TemporaryDirectory(prefix="hora-bench-") as tmp:
        rounds = [run_all(args, sizes, tmp) for _ in range(args.rounds)]
    runs = merge_runs(rounds)
    rows = [row for run in runs for row in result_rows(run, args.np)]
    found = by_implementation(rows)
    if "hora shm" not in found:
        return 1
    print_report(found["hora shm"], found.get("gloo", {}), args.np)
    print()
    print(f"side by side, {args.np} ranks on this host, median time; "
          "ratio = time / hora shm time")
    print("\n".join(side_by_side(rows)))
    horovod = [r["version"] for r in runs if r["impl"] == "horovod" and r.get("version")]
    recorder.write(args.json, settings_of(args, sizes), rows, ranks=args.np,
                   extra_versions={"horovod": horovod[0]} if horovod else None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
