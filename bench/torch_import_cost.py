"""What Hora's torch.distributed registration adds to ``import torch``.

    python bench/torch_import_cost.py [--runs 21] [--json PATH]

torch calls every ``torch.backends`` entry point while ``import torch`` runs
(``TORCH_DEVICE_BACKEND_AUTOLOAD=0`` turns that off). Two measurements:

1. Inside one process, after ``import torch``: the time to import Hora's entry-point module
   (``hora_torch_autoload``, in a fresh interpreter so that nothing is cached) and to call its
   ``register()``. This is exactly what Hora adds; it is small, so it is timed directly.
2. Whole ``python -c "import torch"`` processes, alternately with autoloading on and off, the
   median wall time of each and their difference. That difference also holds torch's own scan of
   the installed packages' entry points, which autoloading costs with or without Hora, and the
   noise of a machine that runs other work: read it as an upper bound.

The figures go to the results file (``--json``, by default bench/results/torch_import_cost.json).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from common.results import Recorder, json_help

IN_PROCESS_CASES = {"scan": "torch's entry-point scan (with or without Hora)",
                    "load": "import hora_torch_autoload",
                    "register": "register() (backend + monitored_barrier)",
                    "added": "Hora adds (load + register)"}
IN_PROCESS = r"""
import json, os, time
os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
import torch, torch.distributed
from importlib import metadata
t0 = time.perf_counter()
entry = [e for e in metadata.entry_points(group="torch.backends") if e.name == "hora"]
t1 = time.perf_counter()
register = entry[0].load()
t2 = time.perf_counter()
register()
t3 = time.perf_counter()
print(json.dumps({"scan": t1 - t0, "load": t2 - t1, "register": t3 - t2}))
"""


def whole_import(autoload: bool) -> float:
    env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="1" if autoload else "0")
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import torch"], env=env, check=True)
    return time.perf_counter() - start


def result_rows(parts: dict[str, list[float]], on: list[float],
                off: list[float]) -> list[dict[str, Any]]:
    """The medians and minima as rows of the results file (seconds)."""
    rows = [{"implementation": "hora", "case": key, "scope": "in process",
             "median_s": statistics.median(values), "min_s": min(values)}
            for key, values in parts.items()]
    rows += [{"implementation": "torch", "case": f"import torch, autoload {label}",
              "scope": "whole process", "median_s": statistics.median(values),
              "min_s": min(values)} for label, values in (("on", on), ("off", off))]
    rows.append({"implementation": "torch", "case": "import torch, difference",
                 "scope": "whole process", "median_s": rows[-2]["median_s"] - rows[-1]["median_s"]})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=21)
    parser.add_argument("--json", type=Path, help=json_help("torch_import_cost", False))
    args = parser.parse_args()
    recorder = Recorder("torch_import_cost", packages=("torch",))

    parts: dict[str, list[float]] = {"scan": [], "load": [], "register": []}
    for _ in range(args.runs):
        out = subprocess.run([sys.executable, "-c", IN_PROCESS], capture_output=True, text=True,
                             check=True).stdout
        for key, value in json.loads(out.strip().splitlines()[-1]).items():
            parts[key].append(value)
    parts["added"] = [load + reg for load, reg in zip(parts["load"], parts["register"])]
    on, off = [], []
    for _ in range(args.runs):
        on.append(whole_import(True))
        off.append(whole_import(False))
    rows = result_rows(parts, on, off)

    import torch

    print(f"torch {torch.__version__}, Python {sys.version.split()[0]}, {os.cpu_count()} CPUs, "
          f"{time.strftime('%Y-%m-%d')}; medians of {args.runs} runs")
    print()
    print("inside one process (ms)                            median     min")
    for row in rows[:4]:
        label = IN_PROCESS_CASES[row["case"]]
        print(f"  {label:<50} {row['median_s'] * 1000:7.3f} {row['min_s'] * 1000:7.3f}")
    print()
    print("whole `python -c 'import torch'` (s)               median     min")
    print(f"  {'autoload on':<50} {rows[4]['median_s']:7.3f} {rows[4]['min_s']:7.3f}")
    print(f"  {'autoload off':<50} {rows[5]['median_s']:7.3f} {rows[5]['min_s']:7.3f}")
    print(f"  {'difference (upper bound, see above)':<50} {rows[6]['median_s']:7.3f}")
    recorder.write(args.json, {"runs": args.runs, "figure": "median and least of the runs"},
                   rows)


if __name__ == "__main__":
    main()
