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
import sys
from pathlib import Path
from typing import Any

from common.results import Recorder, default_path
from common.sizes import KIB, MIB, format_size, parse_sizes
from common.tables import markdown_table, ratio_cell, time_cell
from common.timing import median_time, merge_run

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


def rows_of(runs: dict[str, dict[str, Any]], hosts: int, rate: str) -> list[dict[str, Any]]:
    """The results file's rows: per mode and size, the median time and the links' bound."""
    from testbed import rate_bits

    bits = rate_bits(rate)
    return [{"implementation": mode, "case": format_size(r["bytes"]), "bytes": r["bytes"],
             "median_s": r["median_s"], "bound_s": lower_bound(r["bytes"], hosts, bits)}
            for mode in MODES for r in runs[mode]["results"]]


def table(rows: list[dict[str, Any]], rate: str) -> list[str]:
    """Per size: flat, hierarchical, their ratio, the default against the better of the two, the
    links' bound and the default against it."""
    times = {(r["implementation"], r["bytes"]): r["median_s"] for r in rows}
    out = []
    for r in (r for r in rows if r["implementation"] == "flat"):
        nbytes, bound = r["bytes"], r["bound_s"]
        flat, hier, default = (times[(mode, nbytes)] for mode in MODES)
        out.append([format_size(nbytes), time_cell(flat), time_cell(hier),
                    ratio_cell(hier, flat), time_cell(default),
                    ratio_cell(default, min(flat, hier)), time_cell(bound),
                    ratio_cell(default, bound) if bound >= LATENCY_BOUND_S else "-"])
    header = ["size", "flat", "hierarchical", "hier / flat", "default (no flag)",
              "default / best", f"link bound ({rate})", "default / bound"]
    return markdown_table(header, out)


def caption(settings: dict[str, Any]) -> str:
    s = settings
    return (f"Allreduce, float32 Sum in place, {s['hosts']} hosts x {s['slots']} ranks over ssh "
            f"on the multi-host test bed, each host's link shaped to {s['rate']} both ways; median "
            f"of each size's iterations, then of {s['rounds']} rounds. Flat: "
            "`--no-hierarchical-allreduce`; hierarchical: `--hierarchical-allreduce`; default: no "
            "flag. The links' bound: 2 (H-1)/H x bytes / rate.")


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
    parser.add_argument("--json", type=Path,
                        help="write the results here (default bench/results/multihost-h<H>.json)")
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
    recorder = Recorder("multihost", packages=("numpy",))
    with testbed.testbed(args.hosts, rate=args.rate) as bed:
        rounds = [{mode: run_mode(bed, mode, args) for mode in MODES}
                  for _ in range(args.rounds)]
    runs = {mode: merge_run([r[mode] for r in rounds]) for mode in MODES}
    settings = {"hosts": args.hosts, "slots": args.slots, "rate": args.rate,
                "rounds": args.rounds, "iters": args.iters}
    rows = rows_of(runs, args.hosts, args.rate)
    print(caption(settings))
    print("\n".join(table(rows, args.rate)))
    path = args.json or default_path("multihost").with_name(f"multihost-h{args.hosts}.json")
    recorder.write(path, settings, rows)


if __name__ == "__main__":
    main()
