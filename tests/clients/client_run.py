"""What every client script shares: its command line and the JSON result each rank writes.

A result is ``<out>/rank<R>.json``::

    {"rank": R,
     "world_size": processes the client says it runs (its own API),
     "backend": torch.distributed.get_backend() inside the training,
     "client_backend": the backend the client reports, when it has such an API (else null),
     "params": final parameters, flattened (null with --time),
     "step_ends": perf_counter() seconds at the end of every optimizer step (with --time)}
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from training_task import MODELS


def parse_args(description: str, extra: list[tuple[str, dict[str, Any]]] | None = None
               ) -> argparse.Namespace:
    """The common flags (--backend, --out, --model, --steps, --batch-size, --time) plus
    ``extra`` ones, given as (flag, add_argument keywords)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--backend", required=True, help="torch.distributed backend: gloo, hora")
    parser.add_argument("--out", required=True, type=Path, help="folder for rank<R>.json")
    parser.add_argument("--model", default="tiny", choices=MODELS)
    parser.add_argument("--steps", type=int, default=4, help="optimizer steps")
    parser.add_argument("--batch-size", type=int, default=8, help="samples per rank and step")
    parser.add_argument("--time", action="store_true",
                        help="record when each step ends instead of the final parameters")
    for flag, keywords in extra or []:
        parser.add_argument(flag, **keywords)
    return parser.parse_args()


class StepClock:
    """Collects the time at which each optimizer step ends."""

    def __init__(self) -> None:
        self.ends: list[float] = []

    def tick(self) -> None:
        """Mark the end of one step."""
        self.ends.append(time.perf_counter())


def write_result(out: Path, rank: int, *, world_size: int, backend: str,
                 params: list[float] | None, step_ends: list[float] | None = None,
                 client_backend: str | None = None) -> None:
    """Write this rank's result file under ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    result = {"rank": rank, "world_size": world_size, "backend": backend,
              "client_backend": client_backend, "params": params, "step_ends": step_ends}
    path = out / f"rank{rank}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(result))
    tmp.replace(path)
