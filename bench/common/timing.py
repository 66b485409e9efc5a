"""Timing loops and how their figures print."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any


def format_time(seconds: float) -> str:
    """Seconds in the unit that keeps 3-4 significant digits: '7.6 us', '1.28 ms', '1.234 s'."""
    if abs(seconds) < 1e-3:
        return f"{seconds * 1e6:.1f} us"
    if abs(seconds) < 1.0:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds:.3f} s"


def median_time(fn: Callable[[], None], warmup: int, timed: int) -> dict[str, float]:
    """fn run ``warmup`` times untimed, then ``timed`` times: median and least seconds a call."""
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(timed):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return {"median_s": statistics.median(samples), "min_s": min(samples), "iters": timed}


def merge_rounds(rounds: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One case measured in several rounds (whole runs of a benchmark, one after another, which
    even out a busy moment of the machine) as one: the median of the rounds' medians, the least
    of their least times, their iterations added up; other keys as the first round has them."""
    merged = dict(rounds[0])
    merged["median_s"] = statistics.median(r["median_s"] for r in rounds)
    if "min_s" in merged:
        merged["min_s"] = min(r["min_s"] for r in rounds)
    if "iters" in merged:
        merged["iters"] = sum(r["iters"] for r in rounds)
    return merged


def merge_run(rounds: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One run of a benchmark (``results``, one entry per size, and an optional ``step``) over
    several rounds: ``merge_rounds`` per size and for the step; other keys as the first round
    has them."""
    first = rounds[0]
    merged = dict(first)
    merged["results"] = [merge_rounds([r["results"][i] for r in rounds])
                         for i in range(len(first["results"]))]
    if first.get("step"):
        merged["step"] = merge_rounds([r["step"] for r in rounds])
    return merged


def bus_factor(world: int) -> float:
    """busbw / algbw of a ring allreduce over ``world`` ranks, as nccl-tests define it."""
    return 2.0 * (world - 1) / world if world > 1 else 1.0


def bandwidths(nbytes: int, seconds: float, world: int) -> tuple[float, float]:
    """(algbw, busbw) of an allreduce in GB/s (1e9 B/s), nccl-tests definitions."""
    algbw = nbytes / seconds / 1e9
    return algbw, algbw * bus_factor(world)
