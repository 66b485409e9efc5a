"""The README's headline table: 2 ranks, float32 Sum allreduce at a few sizes and the 200 x 16 KiB
step, Hora against its peers, from bench/results/allreduce-np2.json. bench/report.py writes it
between the README's two marker lines, when they are there."""

from __future__ import annotations

from typing import Any

from allreduce import STEP_CASE, by_implementation
from common.sizes import KIB, MIB, format_size
from common.tables import markdown_table, ratio_cell, time_cell

from reporting.inputs import command_of, date_of

SOURCE = "allreduce-np2"
START = "<!-- bench:headline:start -->"
END = "<!-- bench:headline:end -->"
SIZES = (4, 4 * KIB, 1 * MIB, 64 * MIB)
HORA = "hora shm"
# Implementation in the results -> column title; the Horovod column only when it was measured.
PEERS = (("mpi4py", "Open MPI (mpi4py)"), ("gloo", "torch gloo"), ("horovod", "Horovod"))


def headline(doc: dict[str, Any] | None) -> str:
    """The lines between the markers: the table and one line naming the machine and date."""
    if doc is None:
        return (f"No results yet: `python bench/allreduce.py --np 2`, then "
                f"`python bench/report.py`, write this table from bench/results/{SOURCE}.json.")
    runs = by_implementation(doc["results"])

    def time_of(impl: str, key: Any) -> float | None:
        return runs.get(impl, {}).get(key, {}).get("median_s")

    peers = [(impl, title) for impl, title in PEERS if impl in runs]
    if "horovod" in doc["versions"]:
        peers = [(i, f"{t} {doc['versions']['horovod']}" if i == "horovod" else t)
                 for i, t in peers]
    step = runs.get(HORA, {}).get(STEP_CASE)
    cases: list[tuple[str, Any]] = [(format_size(n), n) for n in SIZES]
    if step:
        cases.append((f"{step['tensors']} x {format_size(step['bytes'])} step", STEP_CASE))
    rows = []
    for label, key in cases:
        base = time_of(HORA, key)
        peer_times = [time_of(impl, key) for impl, _ in peers]
        rows.append([label, time_cell(base), *(time_cell(t) for t in peer_times),
                     *(ratio_cell(t, base) for t in peer_times)])
    header = ["2 ranks, float32 Sum allreduce", "Hora", *(t for _, t in peers),
              *(f"{t.split(' (')[0]} / Hora" for _, t in peers)]
    m = doc["machine"]
    note = (f"Median times on one machine ({m['cpu']}, {m['cores']} cores, load average "
            f"{m['load_average_before'][0]:.2f} at the start), {date_of(doc)}, from "
            f"`{command_of(doc)}`; ratio = time / Hora's (above 1: Hora is faster). "
            "More in docs/benchmarks.")
    return "\n".join([*markdown_table(header, rows), "", note])


def splice(readme: str, block: str) -> str | None:
    """``readme`` with ``block`` between the markers (None: the markers are not there)."""
    start, end = readme.find(START), readme.find(END)
    if start < 0 or end < start:
        return None
    return readme[:start + len(START)] + "\n" + block + "\n" + readme[end:]
