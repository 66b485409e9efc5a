"""Over TCP, a rank holds data connections only to the peers its collectives used: after a
workload of ring collectives, its two ring neighbours, not every other rank.

Counted from the kernel's socket tables (/proc/self/fd, /proc/net/tcp): every established TCP
connection of this process, less the rendezvous store's and the control tree's (one to the rank's
parent, one per child: HORA_CONTROL_FANOUT children at most; a star around rank 0 at these sizes
unless the fanout is set lower). Runs in a process of its own (one file per horarun
job), so no other test's collectives opened links first. Over shared memory it has nothing to
count and is skipped (the same decision on every rank).
"""

from __future__ import annotations

import os

import hora
import numpy as np
import pytest
from conftest import rank, size

ESTABLISHED = "01"


def established_connections() -> list[tuple[int, int]]:
    """(local port, remote port) of every established TCP connection this process holds."""
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # closed since it was listed
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:["):-1])
    # By inode: the kernel's table is read in pieces while it changes, so a line may repeat.
    found = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        if not os.path.exists(table):
            continue
        with open(table) as f:
            for line in f.read().splitlines()[1:]:
                fields = line.split()
                if fields[9] in inodes and fields[3] == ESTABLISHED:
                    local = int(fields[1].rsplit(":", 1)[1], 16)
                    remote = int(fields[2].rsplit(":", 1)[1], 16)
                    found[fields[9]] = (local, remote)
    return list(found.values())


def control_connections() -> int:
    """This rank's parent and children in the control tree (core/transport/tcp/control_tree.h)."""
    fanout = int(os.environ.get("HORA_CONTROL_FANOUT", "32") or 32)
    children = [c for c in range(rank() * fanout + 1, rank() * fanout + fanout + 1) if c < size()]
    return len(children) + (1 if rank() > 0 else 0)


def data_links(connections: list[tuple[int, int]]) -> int:
    """Of ``connections``, those that are neither the store's nor the control tree's."""
    store_port = int(os.environ.get("HORA_RENDEZVOUS_PORT", "0") or 0)
    connections = [c for c in connections if c[1] != store_port]
    return len(connections) - control_connections()


def test_a_ring_workload_opens_only_the_ring_neighbours_links() -> None:
    if hora._core.transport_name() != "tcp":
        pytest.skip("collectives run over TCP only with HORA_SHM_DISABLE=1 (or across hosts)")
    n = size()
    # Integer sums of at least 128 KiB and an allgather: both go round the ring.
    count = max(1 << 16, n)
    x = np.full(count, rank() + 1, dtype=np.int32)
    total = hora.allreduce(x, op=hora.Sum, name="ring.allreduce")
    assert int(np.asarray(total)[0]) == n * (n + 1) // 2
    gathered = hora.allgather(np.full(3, rank(), dtype=np.int32), name="ring.allgather")
    assert np.asarray(gathered).tolist() == [r for r in range(n) for _ in range(3)]
    neighbours = len({(rank() - 1) % n, (rank() + 1) % n} - {rank()})
    connections = established_connections()  # read once: the count and the message agree
    links = data_links(connections)
    # Counted, every rank waits for the others to have counted too: a rank that returned would
    # close its links, and a peer counting late would miss them (CLOSE_WAIT, not established).
    # An allgather goes round the ring, so it opens no link of its own.
    hora.allgather(np.zeros(1, dtype=np.int32), name="ring.counted")
    assert links == neighbours, (
        f"rank {rank()} of {n}: {links} data connections after ring collectives, "
        f"expected {neighbours} (its ring neighbours); connections: {connections}")
