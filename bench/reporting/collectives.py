"""Tables of the collective benchmarks (allreduce, mpi_allreduce, gather, call_overhead,
wait_cpu, tcp_links): (caption, Markdown table lines) from a results file. Where a script prints a
Markdown table, its own function makes the table here too, so the two cannot differ."""

from __future__ import annotations

from typing import Any

import allreduce as allreduce_script
import call_overhead as call_overhead_script
import gather as gather_script
import jax_allreduce as jax_allreduce_script
import mpi_allreduce as mpi_allreduce_script
import multihost as multihost_script
import tcp_links as tcp_links_script
from common.sizes import format_size
from common.tables import markdown_table, time_cell

Table = tuple[str, list[str]]


def _of_rounds(settings: dict[str, Any]) -> str:
    rounds = settings.get("rounds", 1)
    return f" (the median of {rounds} rounds' medians)" if rounds > 1 else ""


def allreduce(doc: dict[str, Any]) -> Table:
    s = doc["settings"]
    caption = (f"Allreduce, {s['ranks']} ranks on one host, {s['dtype']} {s['op']} in place, "
               f"ranks bound `--bind-to {s['bind_to']}`: median time per call{_of_rounds(s)}, "
               "and of a step of "
               f"{s['step_tensors']} asynchronous {format_size(s['step_tensor_bytes'])} "
               "allreduces; ratio = time / hora shm time (above 1: Hora over shared memory is "
               "faster).")
    return caption, allreduce_script.side_by_side(doc["results"])


def mpi_allreduce(doc: dict[str, Any]) -> Table:
    rows = doc["results"]
    cases = [{r["bytes"]: r for r in mpi_allreduce_script.paired(rows, case)}
             for case, _ in mpi_allreduce_script.TABLES]
    header = ["size", "one call: mpi4py", "hora", "busbw hora / mpi4py",
              "stream: mpi4py", "hora grouped", "busbw hora / mpi4py",
              "stream: mpi4py", "hora, call per buffer", "busbw hora / mpi4py"]
    table = []
    for nbytes in sorted(cases[0]):
        cells = [format_size(nbytes)]
        for by_size in cases:
            r = by_size.get(nbytes)
            cells += ([time_cell(r["mpi4py_time"]), time_cell(r["hora_time"]), f"{r['ratio']:.2f}"]
                      if r else ["-", "-", "-"])
        table.append(cells)
    caption = (f"Allreduce over MPI, {doc['settings']['ranks']} ranks in one mpirun job: Hora "
               "on its MPI transport against mpi4py's Allreduce on the same buffers, median "
               "over iterations of the slowest rank (per buffer in the streams of back-to-back "
               "allreduces); ratio = Hora's bus bandwidth / mpi4py's (1.00: the same speed).")
    return caption, markdown_table(header, table)


def gather(doc: dict[str, Any]) -> Table:
    s = doc["settings"]
    caption = (f"Allgather and broadcast, {s['ranks']} ranks on one host, total bytes per case: "
               f"best of {s['repeats']} medians of {s['iters']} calls; ratio = time / hora "
               "windows time (above 1: the windows are faster).")
    return caption, gather_script.table(doc["results"])


def jax_allreduce(doc: dict[str, Any]) -> Table:
    return jax_allreduce_script.report_table(doc)


def multihost(doc: dict[str, Any]) -> Table:
    return multihost_script.caption(doc["settings"]), multihost_script.table(
        doc["results"], doc["settings"]["rate"])


def call_overhead(doc: dict[str, Any]) -> Table:
    s = doc["settings"]
    caption = ("What one 4-byte in-place Sum allreduce costs the calling thread, 1 rank: CPU "
               "time inside the asynchronous submit and wall time of a blocking call, least "
               f"mean of {s['repeats']} x {s['calls']} calls; ratio = time / hora torch's.")
    return caption, call_overhead_script.table(doc["results"])


def wait_cpu(doc: dict[str, Any]) -> Table:
    s = doc["settings"]
    header = ["rank", "case", "wall per call", "calling thread CPU", "background CPU",
              "total CPU", "slices (calling / background)", "sleeps (calling / background)"]
    table = [[str(r["rank"]), r["case"], time_cell(r["wall_s"]), time_cell(r["main_cpu_s"]),
              time_cell(r["bg_cpu_s"]), time_cell(r["main_cpu_s"] + r["bg_cpu_s"]),
              f"{r['main_slices']:.2f} / {r['bg_slices']:.2f}",
              f"{r['main_sleeps']:.2f} / {r['bg_sleeps']:.2f}"]
             for r in doc["results"] if "counters" not in r]
    caption = (f"Where a rank's CPU goes while collective calls wait, {s['ranks']} ranks bound "
               f"`--bind-to {s['bind_to']}`: per call of each case ({s['calls']} blocking calls "
               f"per size, {s['steps']} steps of 200 x 16 KiB), the wall time and each thread's "
               "CPU time, time slices and sleeps (voluntary context switches).")
    return caption, markdown_table(header, table)


def tcp_links(doc: dict[str, Any]) -> Table:
    s = doc["settings"]
    caption = (f"TCP data connections per rank and start-up time against N, {s['transport']}, "
               "on one host over loopback: links opened on first use (lazy, the default) against "
               "every pair connected at start (eager, `HORA_TCP_EAGER_MESH=1`). Connections: the "
               "largest count over the ranks after each step (the store's and the control "
               f"star's left out); init: the median over {s['repeats']} runs of the slowest "
               "rank's `hora.init()`, and of the time from the last rank's call of it to the "
               "last rank done (the set-up without the ranks' start skew). Times are noisy: "
               "up to 16 ranks share 2 cores.")
    return caption, tcp_links_script.table(doc["results"])
