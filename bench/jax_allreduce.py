"""JAX allreduce benchmark: hora.jax (eager and inside jax.jit) against mpi4jax and JAX's own CPU
collectives (gloo), side by side in one run on this host.

    PYTHONPATH=frameworks build/venv-jax/bin/python bench/jax_allreduce.py [--np 2]
        [--sizes 4,4K,1M,64M] [--iters 20] [--repeats 3] [--mlp-steps 50] [--bind-to core]
        [--json PATH]

Run it with the interpreter of an environment where JAX, optax and hora.jax import (mpi4jax and
mpi4py too for that column). The script runs itself as workers, one job per implementation:

- **hora jit**, under ``horarun -np N``: ``jax.jit(lambda x: hvd.allreduce(x, op=hvd.Sum))`` per
  size, and the step as ``jax.jit(lambda xs: hvd.grouped_allreduce(xs, op=hvd.Sum))``. A build
  of hora.jax without collectives inside jit raises ``NotSupportedError`` at the first call:
  the column then reads "n/a (not supported by this build)" and the ratios are to hora eager.
- **hora eager**, under ``horarun -np N``: ``hvd.allreduce(x, op=hvd.Sum)`` on concrete arrays;
  the step as one eager ``hvd.grouped_allreduce``.
- **mpi4jax**, under ``mpirun -np N`` (Open MPI): ``mpi4jax.allreduce(x, op=MPI.SUM, comm=...)``
  inside ``jax.jit``; the step as the 200 calls in one jitted function.
- **jax gloo**, N processes started here, each ``jax.distributed.initialize`` with the gloo CPU
  collectives (0.10's default, set explicitly): ``jax.jit(jax.shard_map(lambda x:
  jax.lax.psum(x, "i"), mesh=Mesh(jax.devices(), ("i",)), ...))`` over a global array made of
  every process's local shard; the step as one ``psum`` of the 200-leaf list in one program.

Every worker first checks the result (every element the sum of the ranks' values, rank r
contributing r + 1), then times. Per size (float32, Sum): the median time of several calls
after warm-up (which also compiles), each call waited for with ``block_until_ready``, the
algorithm bandwidth (bytes / time) and the bus bandwidth (algbw * 2(n-1)/n) as nccl-tests define
them; then the median time of a step of 200 tensors of 16 KiB reduced in one call. Last, a
small MLP (examples/jax/train_mlp.py's model and data) trained with optax through
``hvd.DistributedOptimizer``, eagerly and, where the build has it, as one jitted step: steps/s.
The jobs run ``--repeats`` times in turn, so that load from other processes hits them alike;
each figure is the best of the repeats' medians (the results file keeps every median).

The side-by-side table divides every implementation's time by hora jit's (hora eager's while
jit is n/a): above 1, Hora is faster. Every implementation's ranks are bound alike: by default
one core each as ``horarun --bind-to core`` binds (the mpi4jax and gloo ranks bind themselves);
``--bind-to none`` leaves them all unbound. The figures go to the results file (``--json``, by
default bench/results/jax_allreduce-np<N>.json).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from allreduce import STEP_CASE, STEP_TENSOR_BYTES, STEP_TENSORS, iterations
from common.launch import REPO, find_mpirun, free_port, horarun_command, load_script, mpi_env
from common.results import Recorder, json_help
from common.sizes import MIB, format_size, parse_sizes
from common.tables import markdown_table, ratio_cell, time_cell
from common.timing import bandwidths, format_time, median_time

DEFAULT_SIZES = "4,4K,1M,64M"
MLP_EXAMPLE = REPO / "examples" / "jax" / "train_mlp.py"
MLP_CASE = "mlp"
MLP_WIDTHS = [16, 64, 64, 1]
MLP_BATCH = 32  # per rank
MLP_WARMUP = 5

HORA_JIT = "hora jit"
HORA_EAGER = "hora eager"
MPI4JAX = "mpi4jax"
GLOO = "jax gloo"
IMPLEMENTATIONS = (HORA_JIT, HORA_EAGER, MPI4JAX, GLOO)  # the table's column order
NOT_SUPPORTED = "n/a (not supported by this build)"

# The targets for hora jit: ahead of both peers at these sizes and on the step, and
# within this factor of mpi4jax at 4 B.
TARGET_AHEAD_AT = (1 * MIB, 64 * MIB)
TARGET_TINY_FACTOR = 2.0
WORKER_TIMEOUT_S = 900


# ------------------------------------------------------------------------------------------------
# Worker helpers (these import JAX; the driver does not)


def jax_on_cpu() -> Any:
    """jax, restricted to the CPU platform (set before the first import of jax)."""
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import jax

    return jax


def filled(count: int, value: float) -> Any:
    """``count`` float32s of ``value`` as a concrete jax.Array."""
    import jax.numpy as jnp

    return jnp.full((count,), value, dtype=jnp.float32)


def check_sum(impl: str, what: str, outputs: Sequence[Any], world: int) -> None:
    """Every element of every output is 1 + 2 + ... + world (rank r contributed r + 1)."""
    import numpy as np

    want = world * (world + 1) / 2
    for i, out in enumerate(outputs):
        got = np.asarray(out)
        if got.size and not np.all(got == want):
            raise RuntimeError(f"{impl}: wrong result for {what} (tensor {i}): expected every "
                               f"element {want}, got {got.ravel()[:4]}...")


def sweep(impl: str, sizes: Sequence[int], iters: int, world: int, rank: int,
          make: Callable[[int, float], Any], reduce: Callable[[Any], Any],
          local: Callable[[Any], Any], barrier: Callable[[], object]) -> list[dict[str, Any]]:
    """Per size: an input of that many bytes (``make(count, rank + 1)``), its result checked
    (``local`` gives this rank's part of ``reduce``'s output), the ranks lined up, then the
    median time of ``reduce`` with every call waited for, and the result checked again (the
    calls left their input as it was)."""
    import jax

    results = []
    for nbytes in sizes:
        x = make(nbytes // 4, rank + 1.0)
        check_sum(impl, format_size(nbytes), [local(reduce(x))], world)
        barrier()
        stats = median_time(lambda x=x: jax.block_until_ready(reduce(x)),
                            *iterations(nbytes, iters))
        check_sum(impl, f"{format_size(nbytes)} after timing", [local(reduce(x))], world)
        results.append({"bytes": nbytes, **stats})
        del x
    return results


def time_step(impl: str, iters: int, world: int, rank: int, make: Callable[[int, float], Any],
              reduce: Callable[[list[Any]], Any], local: Callable[[Any], Any],
              barrier: Callable[[], object]) -> dict[str, Any]:
    """The 200-tensor step: 200 inputs of 16 KiB reduced in one call, checked, timed, checked."""
    import jax

    xs = [make(STEP_TENSOR_BYTES // 4, rank + 1.0) for _ in range(STEP_TENSORS)]
    check_sum(impl, "the step", [local(y) for y in reduce(xs)], world)
    barrier()
    stats = median_time(lambda: jax.block_until_ready(reduce(xs)), 3, iters)
    check_sum(impl, "the step after timing", [local(y) for y in reduce(xs)], world)
    return {"tensors": STEP_TENSORS, "bytes_each": STEP_TENSOR_BYTES, **stats}


def load_mlp_example() -> Any:
    """examples/jax/train_mlp.py as a module: its data, model and loss."""
    return load_script(MLP_EXAMPLE, "hora_jax_train_mlp")


def mlp_steps_per_s(steps: int, jitted: bool) -> dict[str, Any]:
    """examples/jax/train_mlp.py's MLP trained with optax.adam through hvd.DistributedOptimizer
    for ``steps`` timed steps after warm-up, every step waited for: steps/s and the median step.
    ``jitted``: the whole step (gradients, the optimizer's allreduce, the update) in one
    jax.jit; else the gradients jitted and the update eager, as the example does."""
    import hora.jax as hvd
    import jax
    import optax

    example = load_mlp_example()
    x, y = example.make_dataset(2048, MLP_WIDTHS[0], seed=0)
    x, y = x[hvd.rank()::hvd.size()], y[hvd.rank()::hvd.size()]
    params = example.init_params(jax.random.PRNGKey(hvd.rank()), MLP_WIDTHS)
    params = hvd.broadcast_parameters(params, root_rank=0)
    opt = hvd.DistributedOptimizer(optax.adam(0.003))
    opt_state = opt.init(params)
    grad_fn = jax.value_and_grad(example.loss_fn)

    def eager_step(params: Any, opt_state: Any, xb: Any, yb: Any) -> tuple[Any, Any, Any]:
        loss, grads = jitted_grads(params, xb, yb)
        updates, opt_state = opt.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    def whole_step(params: Any, opt_state: Any, xb: Any, yb: Any) -> tuple[Any, Any, Any]:
        loss, grads = grad_fn(params, xb, yb)
        updates, opt_state = opt.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    jitted_grads = jax.jit(grad_fn)
    step = jax.jit(whole_step) if jitted else eager_step
    batches = [(x[i:i + MLP_BATCH], y[i:i + MLP_BATCH])
               for i in range(0, len(x) - MLP_BATCH + 1, MLP_BATCH)]
    samples = []
    losses = []
    for i in range(MLP_WARMUP + steps):
        xb, yb = batches[i % len(batches)]
        start = time.perf_counter()
        params, opt_state, loss = jax.block_until_ready(step(params, opt_state, xb, yb))
        if i >= MLP_WARMUP:
            samples.append(time.perf_counter() - start)
        losses.append(float(loss))
    return {"steps": steps, "steps_per_s": len(samples) / sum(samples),
            "median_s": statistics.median(samples), "min_s": min(samples),
            "batch_per_rank": MLP_BATCH, "widths": MLP_WIDTHS,
            "first_loss": losses[0], "last_loss": losses[-1]}


def write_worker(out: str, payload: dict[str, Any]) -> None:
    Path(out).write_text(json.dumps(payload))


def bind(rank: int, world: int, how: str) -> None:
    """Binds this process as ``horarun --bind-to core`` binds rank ``rank`` (one host)."""
    if how == "core":
        from hora.runner.env import bind_like_horarun

        bind_like_horarun(rank, world)


# ------------------------------------------------------------------------------------------------
# Workers


def hora_worker(args: argparse.Namespace, sizes: list[int], jitted: bool) -> None:
    """Runs under horarun: hora.jax's allreduce per size, the grouped step and the MLP, all
    eager or all inside jax.jit. A build without jit support records why and stops."""
    jax = jax_on_cpu()
    import hora.jax as hvd
    from hora.errors import NotSupportedError

    hvd.init()
    world, rank = hvd.size(), hvd.rank()
    impl = HORA_JIT if jitted else HORA_EAGER
    payload: dict[str, Any] = {"impl": impl, "world": world, "version": None}
    try:
        if jitted:
            one = jax.jit(lambda x: hvd.allreduce(x, op=hvd.Sum))
            group = jax.jit(lambda xs: hvd.grouped_allreduce(xs, op=hvd.Sum))

            def reduce(x: Any) -> Any:
                return one(x)
        else:
            def reduce(x: Any) -> Any:
                return hvd.allreduce(x, op=hvd.Sum, name=f"bench.{x.size}")

            def group(xs: list[Any]) -> Any:
                return hvd.grouped_allreduce(xs, op=hvd.Sum, name="step")

        payload["results"] = sweep(impl, sizes, args.iters, world, rank, filled, reduce,
                                   lambda y: y, hvd.barrier)
        payload["step"] = time_step(impl, args.iters, world, rank, filled, group, lambda y: y,
                                    hvd.barrier)
    except NotSupportedError as e:
        payload["unsupported"] = f"{type(e).__name__}: {e}"
    if "unsupported" not in payload and args.mlp_steps:
        hvd.barrier()
        try:
            payload["mlp"] = mlp_steps_per_s(args.mlp_steps, jitted)
        except NotSupportedError as e:
            payload["mlp_unsupported"] = f"{type(e).__name__}: {e}"
    if rank == 0:
        write_worker(args.out, payload)
    hvd.shutdown()


def mpi4jax_worker(args: argparse.Namespace, sizes: list[int]) -> None:
    """Runs under mpirun: mpi4jax's allreduce inside jax.jit per size, then the 200 calls in one
    jitted function."""
    world = int(os.environ.get("OMPI_COMM_WORLD_SIZE", "1"))
    bind(int(os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK", "0")), world, args.bind_to)
    jax = jax_on_cpu()
    from importlib import metadata

    import mpi4jax
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank, world = comm.Get_rank(), comm.Get_size()
    one = jax.jit(lambda x: mpi4jax.allreduce(x, op=MPI.SUM, comm=comm))
    group = jax.jit(lambda xs: [mpi4jax.allreduce(x, op=MPI.SUM, comm=comm) for x in xs])
    payload: dict[str, Any] = {"impl": MPI4JAX, "world": world,
                               "version": metadata.version("mpi4jax")}
    payload["results"] = sweep(MPI4JAX, sizes, args.iters, world, rank, filled, one,
                               lambda y: y, comm.Barrier)
    payload["step"] = time_step(MPI4JAX, args.iters, world, rank, filled, group, lambda y: y,
                                comm.Barrier)
    if rank == 0:
        write_worker(args.out, payload)


def gloo_worker(args: argparse.Namespace, sizes: list[int]) -> None:
    """One of N processes started by the driver: jax.distributed with the gloo CPU collectives,
    psum inside shard_map over a global array of one shard per process."""
    bind(args.rank, args.np, args.bind_to)
    jax = jax_on_cpu()
    from jax.experimental import multihost_utils
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator_address=f"127.0.0.1:{args.port}",
                               num_processes=args.np, process_id=args.rank)
    world, rank = jax.process_count(), jax.process_index()
    mesh = Mesh(jax.devices(), ("i",))
    sharding = NamedSharding(mesh, P("i"))
    device = jax.local_devices()[0]

    def make(count: int, value: float) -> Any:
        shard = jax.device_put(filled(count, value), device)
        return jax.make_array_from_single_device_arrays((count * world,), sharding, [shard])

    def local(y: Any) -> Any:
        return y.addressable_data(0)

    psum = jax.jit(jax.shard_map(lambda x: jax.lax.psum(x, "i"), mesh=mesh, in_specs=P("i"),
                                 out_specs=P("i")))
    lines_up = 0

    def barrier() -> None:
        nonlocal lines_up
        lines_up += 1
        multihost_utils.sync_global_devices(f"bench.{lines_up}")

    payload: dict[str, Any] = {"impl": GLOO, "world": world, "version": jax.__version__}
    payload["results"] = sweep(GLOO, sizes, args.iters, world, rank, make, psum, local, barrier)
    payload["step"] = time_step(GLOO, args.iters, world, rank, make, psum, local, barrier)
    if rank == 0:
        write_worker(args.out, payload)
    jax.distributed.shutdown()


# ------------------------------------------------------------------------------------------------
# Driver


def worker_args(args: argparse.Namespace, sizes: list[int], worker: str, out: str) -> list[str]:
    return [sys.executable, str(Path(__file__).resolve()), "--worker", worker, "--out", out,
            "--np", str(args.np), "--iters", str(args.iters),
            "--sizes", ",".join(str(s) for s in sizes), "--mlp-steps", str(args.mlp_steps),
            "--bind-to", args.bind_to]


def read_run(out: str, label: str, returncode: int) -> dict[str, Any] | None:
    if returncode != 0 or not Path(out).exists():
        print(f"{label} run failed with exit {returncode}", file=sys.stderr)
        return None
    return json.loads(Path(out).read_text())


def run_hora(args: argparse.Namespace, sizes: list[int], tmp: str, jitted: bool
             ) -> dict[str, Any] | None:
    label = HORA_JIT if jitted else HORA_EAGER
    out = os.path.join(tmp, label.replace(" ", "_") + ".json")
    cmd = [*horarun_command(args.np, "--bind-to", args.bind_to),
           *worker_args(args, sizes, "hora-jit" if jitted else "hora-eager", out)]
    print(f"running {label}: {' '.join(cmd)}", flush=True)
    done = subprocess.run(cmd, check=False, timeout=WORKER_TIMEOUT_S)
    return read_run(out, label, done.returncode)


def run_mpi4jax(args: argparse.Namespace, sizes: list[int], tmp: str) -> dict[str, Any] | None:
    try:
        import mpi4jax  # noqa: F401
    except ImportError as e:
        print(f"mpi4jax does not import here ({e}): no mpi4jax figures")
        return None
    mpirun = find_mpirun()
    if mpirun is None:
        print("mpirun is not on PATH: no mpi4jax figures")
        return None
    out = os.path.join(tmp, "mpi4jax.json")
    cmd = [mpirun, "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np",
           str(args.np), *worker_args(args, sizes, "mpi4jax", out)]
    print(f"running {MPI4JAX}: {' '.join(cmd)}", flush=True)
    done = subprocess.run(cmd, check=False, env=mpi_env(), timeout=WORKER_TIMEOUT_S)
    return read_run(out, MPI4JAX, done.returncode)


def run_gloo(args: argparse.Namespace, sizes: list[int], tmp: str) -> dict[str, Any] | None:
    out = os.path.join(tmp, "gloo.json")
    port = free_port()
    base = worker_args(args, sizes, "gloo", out)
    print(f"running {GLOO}: {args.np} x {' '.join(base)} --rank R --port {port}", flush=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HORA_", "HOROVOD_"))}
    procs = [subprocess.Popen([*base, "--rank", str(r), "--port", str(port)], env=env)
             for r in range(args.np)]
    deadline = time.monotonic() + WORKER_TIMEOUT_S
    codes = []
    for p in procs:
        try:
            codes.append(p.wait(timeout=max(1.0, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            p.kill()
            codes.append(p.wait())
    if any(codes):  # one failed rank leaves the others waiting in the coordinator
        for p in procs:
            if p.poll() is None:
                p.kill()
    return read_run(out, GLOO, next((c for c in codes if c), 0))


def least_median(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """The sample with the least median, with every sample's median beside it."""
    best = dict(min(samples, key=lambda r: r["median_s"]))
    best["repeat_medians_s"] = [r["median_s"] for r in samples]
    return best


def best_of(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One implementation's repeated runs as one: per size and for the step the least median,
    for the MLP the most steps/s."""
    best = dict(runs[0])
    per_size: dict[int, list[dict[str, Any]]] = {}
    for run in runs:
        for r in run.get("results", []):
            per_size.setdefault(r["bytes"], []).append(r)
    if per_size:
        best["results"] = [least_median(samples) for samples in per_size.values()]
    steps = [run["step"] for run in runs if run.get("step")]
    if steps:
        best["step"] = least_median(steps)
    mlps = [run["mlp"] for run in runs if run.get("mlp")]
    if mlps:
        best["mlp"] = {**max(mlps, key=lambda m: m["steps_per_s"]),
                       "repeat_steps_per_s": [m["steps_per_s"] for m in mlps]}
    return best


def run_all(args: argparse.Namespace, sizes: list[int], tmp: str) -> list[dict[str, Any]]:
    """Every implementation's job, ``--repeats`` times in turn; per implementation the best of
    its runs. A run that failed is left out; a Hora run that found jit unsupported is not
    repeated."""
    jobs: list[tuple[str, Callable[[], dict[str, Any] | None]]] = [
        (HORA_JIT, lambda: run_hora(args, sizes, tmp, jitted=True)),
        (HORA_EAGER, lambda: run_hora(args, sizes, tmp, jitted=False))]
    if not args.no_mpi4jax:
        jobs.append((MPI4JAX, lambda: run_mpi4jax(args, sizes, tmp)))
    if not args.no_gloo:
        jobs.append((GLOO, lambda: run_gloo(args, sizes, tmp)))
    found: dict[str, list[dict[str, Any]]] = {}
    for repeat in range(args.repeats):
        for label, job in jobs:
            if any(r.get("unsupported") for r in found.get(label, [])):
                continue
            print(f"[repeat {repeat + 1} of {args.repeats}]", end=" ")
            run = job()
            if run:
                found.setdefault(label, []).append(run)
    return [best_of(runs) for runs in found.values()]


def result_rows(run: dict[str, Any]) -> list[dict[str, Any]]:
    """One run's figures as rows of the results file: per size, the step, the MLP."""
    impl, world = run["impl"], run["world"]
    rows: list[dict[str, Any]] = []
    for r in run.get("results", []):
        algbw, busbw = bandwidths(r["bytes"], r["median_s"], world)
        rows.append({"implementation": impl, "case": "allreduce", "bytes": r["bytes"],
                     "median_s": r["median_s"], "min_s": r["min_s"], "iters": r["iters"],
                     "algbw_gbs": algbw, "busbw_gbs": busbw,
                     "repeat_medians_s": r.get("repeat_medians_s", [r["median_s"]])})
    step = run.get("step")
    if step:
        rows.append({"implementation": impl, "case": STEP_CASE, "tensors": step["tensors"],
                     "bytes": step["bytes_each"], "median_s": step["median_s"],
                     "min_s": step["min_s"], "iters": step["iters"],
                     "repeat_medians_s": step.get("repeat_medians_s", [step["median_s"]])})
    mlp = run.get("mlp")
    if mlp:
        rows.append({"implementation": impl, "case": MLP_CASE, **mlp})
    return rows


def by_implementation(rows: list[dict[str, Any]]) -> dict[str, dict[Any, dict[str, Any]]]:
    """implementation -> {bytes, STEP_CASE or MLP_CASE: row}."""
    found: dict[str, dict[Any, dict[str, Any]]] = {}
    for row in rows:
        key = row["bytes"] if row["case"] == "allreduce" else row["case"]
        found.setdefault(row["implementation"], {})[key] = row
    return found


def baseline(runs: dict[str, dict[Any, dict[str, Any]]]) -> str | None:
    """The implementation the ratios divide by: hora jit where it ran, else hora eager."""
    for impl in (HORA_JIT, HORA_EAGER):
        if any(k != MLP_CASE for k in runs.get(impl, {})):
            return impl
    return None


def table(rows: list[dict[str, Any]], unsupported: Sequence[str] = ()) -> list[str]:
    """Side by side: one row per size and the step, a time column per implementation (those in
    ``unsupported`` read n/a), then each one's time over the baseline's (above 1: Hora is
    faster). The lines of a Markdown table."""
    runs = by_implementation(rows)
    base = baseline(runs)
    names = [n for n in IMPLEMENTATIONS if n in runs or n in unsupported]
    names += [n for n in runs if n not in names]
    if base is None or not names:
        return []
    others = [n for n in names if n != base and n not in unsupported]
    sizes = sorted({k for r in runs.values() for k in r if isinstance(k, int)})
    cases: list[tuple[str, Any]] = [(format_size(n), n) for n in sizes]
    cases.append((f"{STEP_TENSORS} x {format_size(STEP_TENSOR_BYTES)} step", STEP_CASE))
    body = []
    for label, key in cases:
        def t(name: str, key: Any = key) -> float | None:
            return runs.get(name, {}).get(key, {}).get("median_s")

        cells = [NOT_SUPPORTED if n in unsupported else time_cell(t(n)) for n in names]
        body.append([label, *cells, *(ratio_cell(t(n), t(base)) for n in others)])
    return markdown_table(["case", *names, *(f"{n} / {base}" for n in others)], body)


def mlp_table(rows: list[dict[str, Any]], unsupported: dict[str, str]) -> list[str]:
    """The MLP's steps/s per way of running the optimizer."""
    body = []
    for impl in (HORA_EAGER, HORA_JIT):
        row = by_implementation(rows).get(impl, {}).get(MLP_CASE)
        if row:
            body.append([impl, f"{row['steps_per_s']:.1f}", time_cell(row["median_s"]),
                         f"{row['first_loss']:.4f} -> {row['last_loss']:.4f}"])
        elif impl in unsupported:
            body.append([impl, NOT_SUPPORTED, "-", "-"])
    return markdown_table(["optimizer step", "steps/s", "median step", "loss"], body)


def size_table(rows: list[dict[str, Any]]) -> list[str]:
    """Every implementation's time and bandwidths per size."""
    body = []
    for impl, found in by_implementation(rows).items():
        for key, row in found.items():
            if isinstance(key, int):
                body.append([impl, format_size(key), format_time(row["median_s"]),
                             f"{row['algbw_gbs']:.3f}", f"{row['busbw_gbs']:.3f}"])
    return markdown_table(["implementation", "size", "time", "algbw GB/s", "busbw GB/s"], body)


def targets(rows: list[dict[str, Any]]) -> list[str]:
    """The issue's targets for hora jit, met or not, as lines."""
    runs = by_implementation(rows)
    if HORA_JIT not in runs:
        return ["hora jit did not run: targets not measured"]
    mine = runs[HORA_JIT]
    lines = []
    for peer in (MPI4JAX, GLOO):
        theirs = runs.get(peer, {})
        keys = [k for k in (*TARGET_AHEAD_AT, STEP_CASE) if k in mine and k in theirs]
        if not keys:
            continue
        behind = [format_size(k) if isinstance(k, int) else k for k in keys
                  if mine[k]["median_s"] > theirs[k]["median_s"]]
        lines.append(f"hora jit ahead of {peer} at " + ", ".join(
            format_size(k) if isinstance(k, int) else k for k in keys) + ": "
            + ("met" if not behind else "NOT met at " + ", ".join(behind)))
    if 4 in mine and 4 in runs.get(MPI4JAX, {}):
        factor = mine[4]["median_s"] / runs[MPI4JAX][4]["median_s"]
        lines.append(f"hora jit within {TARGET_TINY_FACTOR:g}x of mpi4jax at 4 B: {factor:.2f}x, "
                     + ("met" if factor <= TARGET_TINY_FACTOR else "NOT met"))
    return lines


def uncommitted_engine_files() -> list[str]:
    """The files of the engine, bindings and Python package that differ from the commit the
    results name (a run of work in progress says so)."""
    done = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--", "core",
                           "bindings", "frameworks", "third_party"], check=False,
                          capture_output=True, text=True)
    return sorted(line[3:] for line in done.stdout.splitlines()) if done.returncode == 0 else []


def report_table(doc: dict[str, Any]) -> tuple[str, list[str]]:
    """(caption, Markdown table lines) of a results file, for bench/report.py."""
    s = doc["settings"]
    runs = by_implementation(doc["results"])
    mlp = ", ".join(f"{impl} {runs[impl][MLP_CASE]['steps_per_s']:.0f} steps/s"
                    for impl in (HORA_EAGER, HORA_JIT) if MLP_CASE in runs.get(impl, {}))
    caption = (f"Allreduce from JAX, {s['ranks']} ranks on one host, {s['dtype']} {s['op']}, "
               f"ranks bound `--bind-to {s['bind_to']}`: best of {s.get('repeats', 1)} medians per "
               f"call, every call waited for, and of one call reducing {s['step_tensors']} "
               f"tensors of {format_size(s['step_tensor_bytes'])}; ratio = time / "
               f"{baseline(runs)} time (above 1: Hora is faster)."
               + (f" The MLP {s['mlp_widths']} trained with optax through "
                  f"hvd.DistributedOptimizer: {mlp}." if mlp else ""))
    return caption, table(doc["results"], list(s["unsupported"]))


def settings_of(args: argparse.Namespace, sizes: list[int],
                unsupported: dict[str, str]) -> dict[str, Any]:
    return {"ranks": args.np, "dtype": "float32", "op": "Sum", "in_place": False,
            "sizes": sizes, "iters": args.iters, "repeats": args.repeats,
            "figure": "best of the repeats' medians", "bind_to": args.bind_to,
            "step_tensors": STEP_TENSORS, "step_tensor_bytes": STEP_TENSOR_BYTES,
            "mlp_steps": args.mlp_steps, "mlp_widths": MLP_WIDTHS,
            "mlp_batch_per_rank": MLP_BATCH, "mpi4jax": not args.no_mpi4jax,
            "gloo": not args.no_gloo, "unsupported": unsupported,
            "hora_uncommitted": uncommitted_engine_files()}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default=DEFAULT_SIZES,
                        help=f"comma-separated sizes in bytes ({DEFAULT_SIZES})")
    parser.add_argument("--iters", type=int, default=20, help="timed iterations at 1 MiB (20)")
    parser.add_argument("--np", type=int, default=2, help="ranks (2)")
    parser.add_argument("--repeats", type=int, default=3,
                        help="runs of every implementation in turn; the best median counts (3)")
    parser.add_argument("--mlp-steps", type=int, default=50,
                        help="timed MLP training steps per way of running it (50; 0 skips)")
    parser.add_argument("--no-mpi4jax", action="store_true", help="skip mpi4jax")
    parser.add_argument("--no-gloo", action="store_true", help="skip JAX's gloo collectives")
    parser.add_argument("--bind-to", choices=("core", "none"), default="core",
                        help="CPU binding of every implementation's ranks: core (default) as "
                        "horarun --bind-to core, or none")
    parser.add_argument("--json", type=Path, help=json_help("jax_allreduce"))
    parser.add_argument("--worker", choices=["hora-jit", "hora-eager", "mpi4jax", "gloo"],
                        help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument("--rank", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    sizes = [max(4, s - s % 4) for s in parse_sizes(args.sizes)]
    if args.worker in ("hora-jit", "hora-eager"):
        hora_worker(args, sizes, jitted=args.worker == "hora-jit")
        return 0
    if args.worker == "mpi4jax":
        mpi4jax_worker(args, sizes)
        return 0
    if args.worker == "gloo":
        gloo_worker(args, sizes)
        return 0
    try:
        import hora.jax  # noqa: F401
        import jax  # noqa: F401
        import optax  # noqa: F401
    except ImportError as e:
        print(f"jax_allreduce needs JAX, optax and hora.jax in this interpreter ({e}): run it "
              "with build/venv-jax/bin/python and PYTHONPATH=frameworks", file=sys.stderr)
        return 1

    recorder = Recorder("jax_allreduce",
                        packages=("jax", "jaxlib", "optax", "numpy", "mpi4py", "mpi4jax",
                                  "open_mpi"))
    with tempfile.TemporaryDirectory(prefix="hora-bench-jax-") as tmp:
        done = run_all(args, sizes, tmp)
    unsupported = {r["impl"]: r["unsupported"] for r in done if r.get("unsupported")}
    unsupported.update({f"{r['impl']} mlp": r["mlp_unsupported"] for r in done
                        if r.get("mlp_unsupported")})
    rows = [row for run in done for row in result_rows(run)]
    if baseline(by_implementation(rows)) is None:
        print("neither Hora run produced figures", file=sys.stderr)
        return 1
    for impl, why in unsupported.items():
        print(f"{impl}: {NOT_SUPPORTED}: {why}")
    print(f"\nallreduce, float32, Sum, {args.np} ranks on this host, bound --bind-to "
          f"{args.bind_to}; time = best of {args.repeats} medians, every call waited for; "
          "busbw = algbw * 2(n-1)/n")
    print("\n".join(size_table(rows)))
    print(f"\nside by side; ratio = time / {baseline(by_implementation(rows))} time "
          "(above 1: Hora is faster)")
    print("\n".join(table(rows, [u for u in unsupported if u in IMPLEMENTATIONS])))
    if args.mlp_steps:
        print(f"\nMLP {MLP_WIDTHS}, optax.adam through hvd.DistributedOptimizer, batch "
              f"{MLP_BATCH} per rank, {args.np} ranks, {args.mlp_steps} timed steps, best of "
              f"{args.repeats}")
        print("\n".join(mlp_table(rows, {u.removesuffix(' mlp'): w
                                         for u, w in unsupported.items()})))
    print("\ntargets (issue 38):")
    for line in targets(rows):
        print(f"  {line}")
    versions = {r["impl"]: r["version"] for r in done if r.get("version")}
    extra = {"mpi4jax": versions[MPI4JAX]} if MPI4JAX in versions else None
    recorder.write(args.json, settings_of(args, sizes, unsupported), rows, ranks=args.np,
                   extra_versions=extra)
    return 0


if __name__ == "__main__":
    sys.exit(main())
