"""Where a rank's CPU goes while collective calls wait: CPU time per call of each thread.

    python bench/wait_cpu.py [--np 2] [--calls 4000] [--steps 40] [--bind-to core|none]
        [--json PATH]

Runs itself under ``horarun -np N --bind-to core`` (Hora over shared memory; ``--bind-to none``
leaves the ranks unbound). Every rank times, one case after
the other: ``--calls`` blocking 4 B and 4 KiB in-place Sum allreduces, then ``--steps`` steps of
200 asynchronous 16 KiB allreduces. For each case it reads each of its threads' CPU time from
``/proc/self/task/<tid>/schedstat`` (nanoseconds on the CPU, so other load on the machine does not
count), the time slices it ran (the same file) and its voluntary context switches from
``/proc/self/task/<tid>/status`` before and after, and prints per rank and case: wall time per
call (median of 5 slices), CPU per call of the calling (Python) thread and of the other threads
together (the background thread), time slices per call (each a turn on a CPU: a yield or a sleep
ends one) and voluntary context switches (sleeps) per call. CPU time, unlike wall time, stays
meaningful on a busy machine. The figures, in seconds, go to the results file (``--json``, by
default bench/results/wait_cpu-np<N>.json).
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
from pathlib import Path
from typing import Any

from allreduce import hora_step  # this directory: run as python bench/wait_cpu.py
from common.launch import horarun_command
from common.results import Recorder, json_help

SLICES = 5


def thread_stats() -> dict[int, tuple[int, int, int]]:
    """tid -> (ns on the CPU, time slices, voluntary context switches) for every thread of this
    process."""
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                fields = f.read().split()
            with open(f"/proc/self/task/{tid}/status") as f:
                vol = next(int(line.split()[1]) for line in f if line.startswith("voluntary_ctxt"))
        except (OSError, StopIteration):
            continue
        out[int(tid)] = (int(fields[0]), int(fields[2]), vol)
    return out


def measure(fn, count: int) -> dict[str, float]:
    """Runs fn count times in SLICES slices; per-call wall (median slice), CPU and sleeps."""
    main = os.getpid()
    per = count // SLICES
    walls = []
    before = thread_stats()
    for _ in range(SLICES):
        start = time.perf_counter()
        for _ in range(per):
            fn()
        walls.append((time.perf_counter() - start) / per)
    after = thread_stats()
    calls = per * SLICES
    res = {"wall_us": statistics.median(walls) * 1e6, "main_cpu_us": 0.0, "bg_cpu_us": 0.0}
    res.update({"main_slices": 0.0, "bg_slices": 0.0, "main_sleeps": 0.0, "bg_sleeps": 0.0,
                "threads": len(after)})
    for tid, (ns, slices, vol) in after.items():
        ns0, slices0, vol0 = before.get(tid, (0, 0, 0))
        who = "main" if tid == main else "bg"
        res[f"{who}_cpu_us"] += (ns - ns0) / 1e3 / calls
        res[f"{who}_slices"] += (slices - slices0) / calls
        res[f"{who}_sleeps"] += (vol - vol0) / calls
    return res


def worker(calls: int, steps: int, out: str, cases: list[str]) -> None:
    """Runs under horarun: the three cases, then writes this rank's figures to out.<rank>."""
    import hora
    import numpy as np

    hora.init()
    results = {}
    for nbytes in [int(c) for c in cases if c != "step"]:
        buf = np.zeros(nbytes // 4, dtype=np.float32)
        name = f"cpu.{nbytes}"
        for _ in range(200):
            hora.allreduce_(buf, op=hora.Sum, name=name)
        hora.barrier()
        results[f"{nbytes} B call"] = measure(
            lambda b=buf, n=name: hora.allreduce_(b, op=hora.Sum, name=n), calls
        )
    step = hora_step()
    if "step" in cases:
        for _ in range(3):
            step()
        hora.barrier()
        results["200x16K step"] = measure(step, steps)
    results["counters"] = dict(hora._core.engine_counters())
    results["counters"]["pid"] = os.getpid()
    Path(f"{out}.{hora.rank()}").write_text(json.dumps(results))
    hora.barrier()  # a rank that shuts down ends the others' background threads
    hora.shutdown()


def result_rows(rank: int, res: dict[str, Any]) -> list[dict[str, Any]]:
    """One rank's figures as rows of the results file (seconds), its engine counters last."""
    rows = []
    for case, v in res.items():
        if case == "counters":
            continue
        rows.append({"implementation": "hora shm", "case": case, "rank": rank,
                     "wall_s": v["wall_us"] / 1e6, "main_cpu_s": v["main_cpu_us"] / 1e6,
                     "bg_cpu_s": v["bg_cpu_us"] / 1e6, "main_slices": v["main_slices"],
                     "bg_slices": v["bg_slices"], "main_sleeps": v["main_sleeps"],
                     "bg_sleeps": v["bg_sleeps"], "threads": v["threads"]})
    rows.append({"implementation": "hora shm", "case": "engine counters", "rank": rank,
                 "counters": res["counters"]})
    return rows


def print_rows(rows: list[dict[str, Any]]) -> None:
    """The table, one line per rank and case, each rank's engine counters after its cases."""
    for r in rows:
        if "counters" in r:
            print(f"| {r['rank']} | counters | {r['counters']} |")
            continue
        us = {k: r[k] * 1e6 for k in ("wall_s", "main_cpu_s", "bg_cpu_s")}
        print(f"| {r['rank']} | {r['case']} | {us['wall_s']:.1f} | {us['main_cpu_s']:.1f} | "
              f"{us['bg_cpu_s']:.1f} | {us['main_cpu_s'] + us['bg_cpu_s']:.1f} | "
              f"{r['main_slices']:.2f} | {r['bg_slices']:.2f} | {r['main_sleeps']:.2f} | "
              f"{r['bg_sleeps']:.2f} | {r['threads']} |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--np", type=int, default=2, help="ranks (2)")
    parser.add_argument("--calls", type=int, default=4000, help="blocking calls per size (4000)")
    parser.add_argument("--steps", type=int, default=40, help="200-tensor steps (40)")
    parser.add_argument("--cases", default="4,4096,step", help="blocking sizes and/or step")
    parser.add_argument("--bind-to", choices=("core", "none"), default="core",
                        help="horarun's CPU binding of the ranks (core)")
    parser.add_argument("--json", type=Path, help=json_help("wait_cpu"))
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args.calls, args.steps, args.worker, args.cases.split(","))
        return 0
    recorder = Recorder("wait_cpu", packages=("numpy",))
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "res")
        here = [sys.executable, os.path.abspath(__file__)]
        flags = ["--calls", str(args.calls), "--steps", str(args.steps), "--cases", args.cases]
        flags += ["--worker", out]
        subprocess.run([*horarun_command(args.np, "--bind-to", args.bind_to), *here, *flags],
                       check=True)
        rows = [row for r in range(args.np)
                for row in result_rows(r, json.loads(Path(f"{out}.{r}").read_text()))]
    print(f"| rank | case | wall/call us | py CPU us | bg CPU us | total CPU us | py slices "
          f"| bg slices | py sleeps | bg sleeps | threads |  (np {args.np}, "
          f"--bind-to {args.bind_to})")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    print_rows(rows)
    settings = {"ranks": args.np, "calls": args.calls, "steps": args.steps,
                "cases": args.cases.split(","), "bind_to": args.bind_to, "slices": SLICES,
                "figure": "wall: median of the slices; CPU, slices, sleeps: per call"}
    recorder.write(args.json, settings, rows, ranks=args.np)
    return 0


if __name__ == "__main__":
    sys.exit(main())
