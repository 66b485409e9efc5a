"""Flat against hierarchical allreduce across hosts with shaped links (needs root).

    python bench/multihost.py [--hosts 2] [--slots 2] [--rate 1gbit] [--sizes 4,1M,64M]
        [--iters 10]

Makes a test bed of ``--hosts`` hosts on this machine (tests/multihost/testbed.py: network
namespaces with their own host names, addresses and sshd, each host's link shaped to ``--rate``
both ways with a token bucket), then runs itself as workers under ``horarun -H
hostA:S,hostB:S`` from the bed's launcher namespace, over ssh, three times: flat
(``--no-hierarchical-allreduce``), hierarchical (``--hierarchical-allreduce``: shared memory
within each host, TCP across) and with no flag (what the engine chooses by itself). Rank 0 of each
writes its timings as JSON; this process prints, per size (float32, in place, Sum), the median
time of each, hierarchical / flat, the default against the better of the two, and the link's
lower bound: each host must
send (H-1)/H of the tensor and receive as much while reducing, then the same again while
spreading the result, at the link's rate each way: 2 (H-1) / H x bytes / rate.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path
from typing import Any

from common.sizes import KIB, MIB, format_size, parse_sizes
from common.tables import markdown_table, ratio_cell, time_cell
from common.timing import median_time

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "multihost"))

# Below this the link's bandwidth bounds nothing (latency does): no ratio to the bound.
LATENCY_BOUND_S = 1e-5
MODES = {"flat": ["--no-hierarchical-allreduce"], "hierarchical": ["--hierarchical-allreduce"],
         "default": []}


def iterations(nbytes: int, iters: int) -> tuple[int, int]:
    """(warm-up, timed) iterations: more for small sizes, fewer (at least 3) for large ones."""
    if nbytes <= 64 * KIB:
        return 10, iters * 10
    if nbytes <= 4 * MIB:
        return 3, iters
    return 1, max(3, iters // 3)


def worker(sizes: list[int], iters: int, out: str) -> None:
    """Runs under horarun: the median time of an in-place Sum allreduce per size."""
    import hora
    import numpy as np

    hora.init()
    results = []
    for nbytes in sizes:
        buf = np.zeros(max(1, nbytes // 4), dtype=np.float32)
        hora.barrier()
        stats = median_time(lambda b=buf, n=nbytes: hora.allreduce_(b, op=hora.Sum,
                                                                   name=f"bench.{n}"),
                            *iterations(nbytes, iters))
        results.append({"bytes": nbytes, **stats})
    if hora.rank() == 0:
        with open(out, "w") as f:
            json.dump({"ranks": hora.size(), "hosts": hora.cross_size(), "results": results}, f)
    hora.shutdown()


def lower_bound(nbytes: int, hosts: int, rate_bits: int) -> float:
    """Seconds the hosts' links need at least: 2 (H-1)/H x bytes each way at ``rate_bits``."""
    return 2 * (hosts - 1) / hosts * nbytes * 8 / rate_bits


def run_mode(bed: Any, mode: str, args: argparse.Namespace) -> dict[str, Any]:
    """One horarun over the bed with ``mode``'s flags; rank 0's JSON."""
    from launching import horarun

    out = os.path.join(bed.workdir, f"{mode}.json")
    sizes = ",".join(str(n) for n in args.sizes)
    command = [sys.executable, str(Path(__file__).resolve()), "--worker", "--sizes", sizes,
               "--iters", str(args.iters), "--out", out]
    job = horarun(bed, bed.host_list(args.slots, names=True), command, flags=MODES[mode],
                  timeout=900)
    if job.returncode != 0:
        raise SystemExit(f"{mode} run failed:\n{job.output[-4000:]}")
    with open(out) as f:
        return json.load(f)


def merge_rounds(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """One mode's results over several rounds: per size, the median of the rounds' medians."""
    merged = dict(rounds[0])
    merged["results"] = [
        {"bytes": first["bytes"],
         "median_s": statistics.median(r["results"][i]["median_s"] for r in rounds)}
        for i, first in enumerate(rounds[0]["results"])]
    return merged


def table(runs: dict[str, dict[str, Any]], hosts: int, rate: str) -> list[str]:
    from testbed import rate_bits

    bits = rate_bits(rate)
    flat, hier, default = ({r["bytes"]: r["median_s"] for r in runs[mode]["results"]}
                           for mode in MODES)
    rows = []
    for nbytes, flat_s in flat.items():
        bound = lower_bound(nbytes, hosts, bits)
        best = min(flat_s, hier[nbytes])
        rows.append([format_size(nbytes), time_cell(flat_s), time_cell(hier[nbytes]),
                     ratio_cell(hier[nbytes], flat_s), time_cell(default[nbytes]),
                     ratio_cell(default[nbytes], best), time_cell(bound),
                     ratio_cell(default[nbytes], bound) if bound >= LATENCY_BOUND_S else "-"])
    header = ["size", "flat", "hierarchical", "hier / flat", "default (no flag)",
              "default / best", f"link bound ({rate})", "default / bound"]
    return markdown_table(header, rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=2)
    parser.add_argument("--slots", type=int, default=2, help="ranks per host")
    parser.add_argument("--rate", default="1gbit", help="each host's link, both ways (tc tbf)")
    parser.add_argument("--sizes", type=parse_sizes, default=[4, 1 * MIB, 64 * MIB])
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=1,
                        help="run the modes this many times in turn; report each size's median "
                        "over the rounds (evens out a busy moment of the machine)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.sizes, args.iters, args.out)
        return
    import testbed

    reason = testbed.unavailable()
    if reason is not None:
        raise SystemExit(f"bench/multihost.py: {reason}")
    with testbed.testbed(args.hosts, rate=args.rate) as bed:
        rounds = [{mode: run_mode(bed, mode, args) for mode in MODES}
                  for _ in range(args.rounds)]
    runs = {mode: merge_rounds([r[mode] for r in rounds]) for mode in MODES}
    print(f"allreduce, float32 Sum in place, {args.hosts} hosts x {args.slots} ranks over ssh, "
          f"each host's link shaped to {args.rate} both ways (median of each size's iterations)")
    print("\n".join(table(runs, args.hosts, args.rate)))


if __name__ == "__main__":
    main()
