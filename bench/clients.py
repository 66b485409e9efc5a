"""Time per training step of each training client over ``gloo`` and over ``hora``, 2 CPU ranks.

    python bench/clients.py                              # every client, the mlp model
    python bench/clients.py --clients lightning,deepspeed_zero2 --steps 30 --repeats 3 \\
        --json clients.json

Run it with the Python of the clients' environment (tests/clients/requirements.txt). Each client
runs its script of tests/clients with ``--time`` (Lightning, Accelerate, DeepSpeed and the
Hugging Face Trainer under torchrun; Ray Train in one local Ray for both backends), the same model
and data for both backends; by default the ``mlp`` of examples/pytorch/synthetic_benchmark.py
(12.5 M parameters, so every step reduces 50 MB of gradients). A step's time is the time between
the ends of two optimizer steps on rank 0; a run's figure is the median over the steps after the
warm-up, and each backend keeps its best run of ``--repeats`` (the backends alternate). The table
gives ms per step and gloo/hora (above 1: Hora is faster); the results file (``--json``, by default
bench/results/clients-np2.json) holds the same numbers in seconds.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from common.launch import REPO
from common.results import Recorder, cpu_model, json_help, load_average, utc_now, versions

sys.path.insert(0, str(REPO / "tests" / "clients"))

from client_jobs import command, read_results, run_job

BACKENDS = ("gloo", "hora")
JOB_TIMEOUT = 900
# name: (launcher, script of tests/clients, extra flags)
CLIENTS = {
    "lightning": ("torchrun", "lightning_train.py", ()),
    "ray_train": ("own", "ray_train.py", ()),
    "accelerate": ("torchrun", "accelerate_train.py", ()),
    "deepspeed_zero1": ("torchrun", "deepspeed_train.py", ("--stage", "1")),
    "deepspeed_zero2": ("torchrun", "deepspeed_train.py", ("--stage", "2")),
    "hf_trainer": ("torchrun", "hf_trainer_train.py", ()),
}
VERSIONED = ("torch", "lightning", "ray", "accelerate", "transformers", "deepspeed")
RANKS = 2


def parse_args() -> argparse.Namespace:
    """Command-line flags."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", default=",".join(CLIENTS),
                        help=f"comma-separated, of: {', '.join(CLIENTS)}")
    parser.add_argument("--model", default="mlp", choices=("mlp", "cnn", "tiny"))
    parser.add_argument("--batch-size", type=int, default=32, help="samples per rank and step")
    parser.add_argument("--warmup", type=int, default=5, help="untimed steps per run (>= 1)")
    parser.add_argument("--steps", type=int, default=20, help="timed steps per run")
    parser.add_argument("--repeats", type=int, default=1, help="runs per backend, alternating")
    parser.add_argument("--json", type=Path, help=json_help("clients"))
    args = parser.parse_args()
    unknown = set(args.clients.split(",")) - set(CLIENTS)
    if unknown or args.warmup < 1:
        parser.error(f"unknown clients {sorted(unknown)}" if unknown else "--warmup must be >= 1")
    return args


def median_step_ms(step_ends: list[float], warmup: int) -> float:
    """Median milliseconds between consecutive step ends, the first ``warmup`` steps left out."""
    times = [b - a for a, b in zip(step_ends[warmup - 1:], step_ends[warmup:])]
    return 1000 * statistics.median(times)


def time_client(name: str, order: tuple[str, ...], args: argparse.Namespace,
                scratch: Path) -> dict[str, float]:
    """One run of client ``name`` per backend, in ``order``: ms per step by backend."""
    launcher, script, extra = CLIENTS[name]
    flags = ["--time", "--model", args.model, "--batch-size", str(args.batch_size),
             "--steps", str(args.warmup + args.steps), *extra]
    out = Path(tempfile.mkdtemp(prefix=f"{name}_", dir=scratch))
    if launcher == "own":  # Ray Train: one Ray instance, a folder per backend
        argv, env = command(launcher, script, ["--backend", ",".join(order), "--out", str(out),
                                               *flags])
        run_job(argv, env, JOB_TIMEOUT)
    else:
        for backend in order:
            argv, env = command(launcher, script, ["--backend", backend,
                                                   "--out", str(out / backend), *flags])
            run_job(argv, env, JOB_TIMEOUT)
    return {backend: median_step_ms(read_results(out / backend)[0]["step_ends"], args.warmup)
            for backend in order}


def settings_of(args: argparse.Namespace) -> dict[str, Any]:
    """The run's settings, as the results file records them."""
    return {"model": args.model, "batch_size": args.batch_size, "warmup": args.warmup,
            "steps": args.steps, "repeats": args.repeats, "ranks": RANKS,
            "figure": "median ms per step, best run of the repeats"}


def header(args: argparse.Namespace) -> dict[str, object]:
    """The machine, the versions, the date and the run's settings, as the table's head."""
    found = versions(VERSIONED)
    return {"date": utc_now(), "host": platform.node(), "cpu": cpu_model(),
            "cores": os.cpu_count(), "load_average_at_start": load_average(),
            "python": found.pop("python"), "versions": found, **settings_of(args)}


def table(head: dict[str, object], rows: list[dict[str, object]]) -> str:
    """The printed report."""
    versions = ", ".join(f"{k} {v}" for k, v in head["versions"].items())
    lines = [(f"Training clients over gloo and hora: {head['ranks']} ranks on {head['host']} "
              f"({head['cpu']}, {head['cores']} cores, load {head['load_average_at_start']} at "
              f"start), {head['date']}"),
             f"Python {head['python']}, {versions}",
             (f"model {head['model']}, batch {head['batch_size']} per rank, median ms per step "
              f"of {head['steps']} after {head['warmup']} warm-up, best of {head['repeats']}"),
             f"{'client':<17}{'gloo ms/step':>14}{'hora ms/step':>14}{'gloo/hora':>11}"]
    for row in rows:
        lines.append(f"{row['client']:<17}{row['gloo_ms']:>14.1f}{row['hora_ms']:>14.1f}"
                     f"{row['ratio']:>11.2f}")
    return "\n".join(lines)


def result_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The table's rows as rows of the results file: one per client and backend, in seconds."""
    return [{"implementation": backend, "case": row["client"], "launcher": row["launcher"],
             "median_step_s": row[f"{backend}_ms"] / 1e3,
             "runs_s": [ms / 1e3 for ms in row[f"{backend}_runs_ms"]]}
            for row in rows for backend in BACKENDS]


def main() -> None:
    """Time every chosen client, print the table, write the JSON."""
    args = parse_args()
    recorder = Recorder("clients", packages=VERSIONED)
    head = header(args)
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench_clients_") as scratch:
        for name in args.clients.split(","):
            runs: dict[str, list[float]] = {backend: [] for backend in BACKENDS}
            for repeat in range(args.repeats):
                order = BACKENDS if repeat % 2 == 0 else BACKENDS[::-1]
                for backend, ms in time_client(name, order, args, Path(scratch)).items():
                    runs[backend].append(ms)
            best = {backend: min(values) for backend, values in runs.items()}
            rows.append({"client": name, "launcher": CLIENTS[name][0],
                         "gloo_ms": best["gloo"], "hora_ms": best["hora"],
                         "ratio": best["gloo"] / best["hora"],
                         "gloo_runs_ms": runs["gloo"], "hora_runs_ms": runs["hora"]})
            print(f"{name}: gloo {best['gloo']:.1f} ms, hora {best['hora']:.1f} ms", flush=True)
    print(table(head, rows))
    recorder.write(args.json, settings_of(args), result_rows(rows), ranks=RANKS)


if __name__ == "__main__":
    main()
