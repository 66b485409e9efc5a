"""TCP connections per rank and start-up time against N, links opened on first use against the
full mesh at start, over loopback on this host.

    python bench/tcp_links.py [--ranks 2,3,4,6,8,12,16] [--repeats 3] [--json PATH]

For every N and both set-ups (the default, where each data link opens on first use, and
``HORA_TCP_EAGER_MESH=1``, every pair at start), runs ``horarun -np N`` with
``HORA_SHM_DISABLE=1`` (TCP only). Each rank times ``hora.init()``, then counts its established
TCP connections (from /proc/self/fd and /proc/net/tcp; the store's and the control tree's are
left out: a rank's parent and children, HORA_CONTROL_FANOUT of them at most) after init
and after each step of a workload: a ring-only step (an int32 allreduce of 1 MiB and an
allgather), a small float32 Sum allreduce (gather-fold: log2 N partners each way), a 1 MiB
float32 Sum allreduce (the chain-ordered allreduce: its two ring neighbours; at 4 ranks the
rank-ordered one, which sends to every other rank), and an alltoall (every other rank). The table has the largest count over the ranks; init's time as the
median over the repeats of the slowest rank's, and from the last rank's call of init to the last
rank done (the set-up's own cost, without the ranks' start skew). Timings on a shared 2-core
machine with up to 16 ranks are noisy: compare the connection counts, and the times only
roughly.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common.launch import horarun_command
from common.results import Recorder, json_help
from common.tables import markdown_table

SETUPS = (("lazy", {}), ("eager", {"HORA_TCP_EAGER_MESH": "1"}))
STEPS = ("after init", "ring", "small float sum", "1 MiB float sum", "alltoall")
ESTABLISHED = "01"


def established_connections() -> int:
    """Established TCP connections of this process that are not the rendezvous store's."""
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:["):-1])
    store_port = int(os.environ.get("HORA_RENDEZVOUS_PORT", "0") or 0)
    # By inode: the kernel's table is read in pieces while it changes, so a line may repeat.
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        if not os.path.exists(table):
            continue
        with open(table) as f:
            for line in f.read().splitlines()[1:]:
                fields = line.split()
                remote = int(fields[2].rsplit(":", 1)[1], 16)
                if fields[9] in inodes and fields[3] == ESTABLISHED and remote != store_port:
                    found.add(fields[9])
    return len(found)


def worker(out: str) -> None:
    """Runs under horarun: init's time and the data connections after each step, to out.<rank>."""
    import hora
    import numpy as np

    start = time.time()
    hora.init()
    end = time.time()
    n, rank = hora.size(), hora.rank()
    # The control tree's connections (core/transport/tcp/control_tree.h): the parent's and the
    # children's; up to fanout + 1 ranks, the star around rank 0.
    fanout = int(os.environ.get("HORA_CONTROL_FANOUT", "32") or 32)
    children = [c for c in range(rank * fanout + 1, rank * fanout + fanout + 1) if c < n]
    control = len(children) + (1 if rank > 0 else 0)

    def links() -> int:
        return established_connections() - control

    counts = {"after init": links()}
    hora.allreduce(np.ones(1 << 18, dtype=np.int32), op=hora.Sum, name="ring.allreduce")
    hora.allgather(np.ones(4, dtype=np.int32), name="ring.allgather")
    counts["ring"] = links()
    hora.allreduce(np.ones(4, dtype=np.float32), op=hora.Sum, name="small.sum")
    counts["small float sum"] = links()
    hora.allreduce(np.ones(1 << 18, dtype=np.float32), op=hora.Sum, name="large.sum")
    counts["1 MiB float sum"] = links()
    hora.alltoall(np.ones(4 * n, dtype=np.int32), name="alltoall")
    counts["alltoall"] = links()
    report = {"init_start": start, "init_end": end, "links": counts}
    Path(f"{out}.{rank}").write_text(json.dumps(report))
    hora.shutdown()


def run_once(n: int, env: dict[str, str]) -> list[dict[str, Any]]:
    """One horarun of N ranks; every rank's report."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "res")
        command = [*horarun_command(n, "--bind-to", "none"), sys.executable,
                   os.path.abspath(__file__), "--worker", out]
        subprocess.run(command, check=True, env={**os.environ, "HORA_SHM_DISABLE": "1", **env},
                       stdout=subprocess.DEVNULL)
        return [json.loads(Path(f"{out}.{r}").read_text()) for r in range(n)]


def measure(ranks: list[int], repeats: int) -> list[dict[str, Any]]:
    rows = []
    for n in ranks:
        for setup, env in SETUPS:
            inits, settles, links = [], [], {step: 0 for step in STEPS}
            for _ in range(repeats):
                reports = run_once(n, env)
                last_end = max(r["init_end"] for r in reports)
                inits.append(max(r["init_end"] - r["init_start"] for r in reports))
                # From the last rank's arrival: the set-up's own cost, without the ranks' start
                # skew (their imports on a shared machine).
                settles.append(last_end - max(r["init_start"] for r in reports))
                for step in STEPS:
                    links[step] = max(links[step], *(r["links"][step] for r in reports))
            row: dict[str, Any] = {"implementation": f"hora tcp {setup}", "case": "links",
                                   "ranks": n, "init_s": statistics.median(inits),
                                   "init_runs_s": inits,
                                   "init_after_last_s": statistics.median(settles),
                                   "init_after_last_runs_s": settles}
            row.update({f"links_{step.replace(' ', '_')}": links[step] for step in STEPS})
            rows.append(row)
            print(f"N={n} {setup}: init {row['init_s'] * 1e3:.0f} ms "
                  f"({row['init_after_last_s'] * 1e3:.0f} ms after the last rank), links "
                  + ", ".join(f"{s} {links[s]}" for s in STEPS), flush=True)
    return rows


def table(rows: list[dict[str, Any]]) -> list[str]:
    """N down; per set-up the data connections per rank after each step, and init's time."""
    header = ["ranks", "set-up", *STEPS, "init, slowest rank", "init after the last arrival"]
    body = [[str(r["ranks"]), r["implementation"].rsplit(" ", 1)[1],
             *[str(r[f"links_{s.replace(' ', '_')}"]) for s in STEPS],
             f"{r['init_s'] * 1e3:.0f} ms", f"{r['init_after_last_s'] * 1e3:.0f} ms"]
            for r in rows]
    return markdown_table(header, body)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", default="2,3,4,6,8,12,16", help="world sizes (%(default)s)")
    parser.add_argument("--repeats", type=int, default=3, help="runs per N and set-up (3)")
    parser.add_argument("--json", type=Path, help=json_help("tcp_links", per_rank_count=False))
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args.worker)
        return 0
    recorder = Recorder("tcp_links", packages=("numpy",))
    ranks = [int(n) for n in args.ranks.split(",")]
    rows = measure(ranks, args.repeats)
    print("\n".join(table(rows)))
    settings = {"ranks": ranks, "repeats": args.repeats, "transport": "tcp (HORA_SHM_DISABLE=1)",
                "figure": "links: the largest count over the ranks of established TCP "
                          "connections less the store's and the control tree's; init: median "
                          "over the repeats of the slowest rank's hora.init(); init after the "
                          "last arrival: median of (last rank done - last rank's init start)"}
    recorder.write(args.json, settings, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
