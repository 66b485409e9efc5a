"""What Hora's torch.distributed registration adds to ``import torch``.

    python bench/torch_import_cost.py [--runs 21]

torch calls every ``torch.backends`` entry point while ``import torch`` runs
(``TORCH_DEVICE_BACKEND_AUTOLOAD=0`` turns that off). Two measurements:

1. Inside one process, after ``import torch``: the time to import Hora's entry-point module
   (``hora_torch_autoload``, in a fresh interpreter so that nothing is cached) and to call its
   ``register()``. This is exactly what Hora adds; it is small, so it is timed directly.
2. Whole ``python -c "import torch"`` processes, alternately with autoloading on and off, the
   median wall time of each and their difference. That difference also holds torch's own scan of
   the installed packages' entry points, which autoloading costs with or without Hora, and the
   noise of a machine that runs other work: read it as an upper bound.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=21)
    args = parser.parse_args()

    parts: dict[str, list[float]] = {"scan": [], "load": [], "register": []}
    for _ in range(args.runs):
        out = subprocess.run([sys.executable, "-c", IN_PROCESS], capture_output=True, text=True,
                             check=True).stdout
        for key, value in json.loads(out.strip().splitlines()[-1]).items():
            parts[key].append(value)
    on, off = [], []
    for _ in range(args.runs):
        on.append(whole_import(True))
        off.append(whole_import(False))

    import torch

    print(f"torch {torch.__version__}, Python {sys.version.split()[0]}, {os.cpu_count()} CPUs, "
          f"{time.strftime('%Y-%m-%d')}; medians of {args.runs} runs")
    print()
    print("inside one process (ms)                            median     min")
    names = {"scan": "torch's entry-point scan (with or without Hora)",
             "load": "import hora_torch_autoload",
             "register": "register() (backend + monitored_barrier)"}
    for key, label in names.items():
        values = [v * 1000 for v in parts[key]]
        print(f"  {label:<50} {statistics.median(values):7.3f} {min(values):7.3f}")
    added = [(parts["load"][i] + parts["register"][i]) * 1000 for i in range(args.runs)]
    print(f"  {'Hora adds (load + register)':<50} {statistics.median(added):7.3f} {min(added):7.3f}")
    print()
    med_on, med_off = statistics.median(on), statistics.median(off)
    print("whole `python -c 'import torch'` (s)               median     min")
    print(f"  {'autoload on':<50} {med_on:7.3f} {min(on):7.3f}")
    print(f"  {'autoload off':<50} {med_off:7.3f} {min(off):7.3f}")
    print(f"  {'difference (upper bound, see above)':<50} {med_on - med_off:7.3f}")


if __name__ == "__main__":
    main()
