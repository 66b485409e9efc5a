"""What one collective call costs the thread that makes it: Hora's torch and NumPy frontends
against torch.distributed (gloo), in one process.

    python bench/call_overhead.py [--calls 5000] [--repeats 5] [--json PATH]

One rank (a world of 1, so no peer and no network is involved): the cost measured is the
frontend's, the engine's hand-off and the completion, which every call pays at any rank count.
For each implementation it submits a 4-byte in-place Sum allreduce ``--calls`` times and reports,
best of ``--repeats``:

- submit CPU: CPU time of the calling thread inside the asynchronous call (``thread_time``, so
  other load on the machine inflates it little), the part of a training step's gradient
  submission that runs in Python;
- call: wall time of one blocking call (submit and wait), as the README's latency tables use.

A last row times ``hvd.allreduce`` (out of place, blocking, as a training script calls it) on a
tensor that needs no gradient, against the in-place call.

Prints a table with each one's times over Hora torch's and writes the figures to the results
file (``--json``, by default bench/results/call_overhead.json).
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from common.launch import free_port
from common.results import Recorder, json_help
from common.tables import markdown_table, ratio_cell

Submit = Callable[[], Any]
OUT_OF_PLACE = "hora torch, out of place"
Wait = Callable[[Any], None]


def best_submit_cpu(submit: Submit, wait: Wait, calls: int, repeats: int) -> float:
    """Least mean CPU time of the calling thread per asynchronous submit, over ``repeats``."""
    best = float("inf")
    for _ in range(repeats):
        spent = 0.0
        for _ in range(calls):
            start = time.thread_time()
            handle = submit()
            spent += time.thread_time() - start
            wait(handle)
        best = min(best, spent / calls)
    return best


def best_call(submit: Submit, wait: Wait, calls: int, repeats: int) -> float:
    """Least mean wall time per blocking call (submit, then wait), over ``repeats``."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            wait(submit())
        best = min(best, (time.perf_counter() - start) / calls)
    return best


def measure(submit: Submit, wait: Wait, calls: int, repeats: int,
            asynchronous: bool = True) -> tuple[float | None, float]:
    for _ in range(200):  # warm-up: names cached, code paths hot
        wait(submit())
    cpu = best_submit_cpu(submit, wait, calls, repeats) if asynchronous else None
    return cpu, best_call(submit, wait, calls, repeats)


def hora_cases() -> dict[str, tuple[Submit, Wait]]:
    import hora
    import hora.torch as hvd
    import numpy as np
    import torch

    hvd.init()
    tensor = torch.ones(1)
    array = np.ones(1, dtype=np.float32)
    return {
        "hora torch": (lambda: hvd.allreduce_async_(tensor, op=hvd.Sum, name="t"),
                       hvd.synchronize),
        "hora numpy": (lambda: hora.allreduce_async_(array, op=hora.Sum, name="n"),
                       hora.synchronize),
        # Out of place, as a training script calls it: blocking only (no submit CPU column).
        OUT_OF_PLACE: (lambda: hvd.allreduce(tensor, op=hvd.Sum, name="o"), lambda _r: None),
    }


def gloo_case() -> dict[str, tuple[Submit, Wait]]:
    import torch
    import torch.distributed as dist

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(free_port()))
    dist.init_process_group("gloo", rank=0, world_size=1)
    tensor = torch.ones(1)
    return {"torch.distributed gloo": (lambda: dist.all_reduce(tensor, async_op=True),
                                       lambda work: work.wait())}


def table(rows: list[dict[str, Any]]) -> list[str]:
    """Each implementation's submit CPU and blocking call, and their ratios to the first's."""
    base = rows[0]
    return markdown_table(
        ["implementation", "submit CPU", "ratio", "blocking call", "ratio"],
        [[r["implementation"],
          "-" if r["submit_cpu_s"] is None else f"{r['submit_cpu_s'] * 1e6:.1f} us",
          "-" if r["submit_cpu_s"] is None else ratio_cell(r["submit_cpu_s"],
                                                           base["submit_cpu_s"]),
          f"{r['call_s'] * 1e6:.1f} us", ratio_cell(r["call_s"], base["call_s"])]
         for r in rows])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=5000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", type=Path, help=json_help("call_overhead", False))
    args = parser.parse_args()
    recorder = Recorder("call_overhead", packages=("torch", "numpy"))
    # A world of one, whatever launched this.
    for name in ("HOROVOD_RANK", "HOROVOD_SIZE", "HOROVOD_LOCAL_RANK", "HOROVOD_LOCAL_SIZE"):
        os.environ.pop(name, None)
    rows = []
    for label, (submit, wait) in {**hora_cases(), **gloo_case()}.items():
        cpu, call = measure(submit, wait, args.calls, args.repeats, label != OUT_OF_PLACE)
        rows.append({"implementation": label, "case": "4 B allreduce", "bytes": 4,
                     "submit_cpu_s": cpu, "call_s": call})
    print("4-byte in-place Sum allreduce, 1 rank; best of "
          f"{args.repeats} x {args.calls} calls; ratio = time / hora torch's")
    print("\n".join(table(rows)))
    settings = {"ranks": 1, "calls": args.calls, "repeats": args.repeats, "bytes": 4,
                "figure": "least mean over the repeats"}
    recorder.write(args.json, settings, rows)


if __name__ == "__main__":
    main()
