"""What one collective call costs the thread that makes it: Hora's torch and NumPy frontends
against torch.distributed (gloo), in one process.

    python bench/call_overhead.py [--calls 5000] [--repeats 5]

One rank (a world of 1, so no peer and no network is involved): the cost measured is the
frontend's, the engine's hand-off and the completion, which every call pays at any rank count.
For each implementation it submits a 4-byte in-place Sum allreduce ``--calls`` times and reports,
best of ``--repeats``:

- submit CPU: CPU time of the calling thread inside the asynchronous call (``thread_time``, so
  other load on the machine inflates it little), the part of a training step's gradient
  submission that runs in Python;
- call: wall time of one blocking call (submit and wait), as the README's latency tables use.

Prints a table with each one's times over Hora torch's.
"""

from __future__ import annotations

import argparse
import os
import socket
import time
from collections.abc import Callable
from typing import Any

Submit = Callable[[], Any]
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


def measure(submit: Submit, wait: Wait, calls: int, repeats: int) -> tuple[float, float]:
    for _ in range(200):  # warm-up: names cached, code paths hot
        wait(submit())
    return best_submit_cpu(submit, wait, calls, repeats), best_call(submit, wait, calls, repeats)


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
    }


def gloo_case() -> dict[str, tuple[Submit, Wait]]:
    import torch
    import torch.distributed as dist

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(port))
    dist.init_process_group("gloo", rank=0, world_size=1)
    tensor = torch.ones(1)
    return {"torch.distributed gloo": (lambda: dist.all_reduce(tensor, async_op=True),
                                       lambda work: work.wait())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=5000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    # A world of one, whatever launched this.
    for name in ("HOROVOD_RANK", "HOROVOD_SIZE", "HOROVOD_LOCAL_RANK", "HOROVOD_LOCAL_SIZE"):
        os.environ.pop(name, None)
    results = {}
    for label, (submit, wait) in {**hora_cases(), **gloo_case()}.items():
        results[label] = measure(submit, wait, args.calls, args.repeats)
    base_cpu, base_call = results["hora torch"]
    print("4-byte in-place Sum allreduce, 1 rank; best of "
          f"{args.repeats} x {args.calls} calls; ratio = time / hora torch's")
    print("| implementation | submit CPU | ratio | blocking call | ratio |")
    print("|---|---|---|---|---|")
    for label, (cpu, call) in results.items():
        print(f"| {label} | {cpu * 1e6:.1f} us | {cpu / base_cpu:.2f} | {call * 1e6:.1f} us | "
              f"{call / base_call:.2f} |")


if __name__ == "__main__":
    main()
