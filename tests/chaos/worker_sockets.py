"""The sockets a chaos worker holds: measured when this module is imported (before hora.init()), and
reported after hora.shutdown() as SOCKETS rank=R left=N listening=M."""

from __future__ import annotations

import os
import time


def sockets() -> set[str]:
    """The inodes of the sockets this process holds."""
    found = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            link = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            found.add(link[8:-1])
    return found


BASE = sockets()


def listening(inodes: set[str]) -> set[str]:
    """Those of ``inodes`` that are listening TCP sockets."""
    found = set()
    for table in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
        try:
            with open(table) as f:
                rows = [line.split() for line in f.read().splitlines()[1:]]
        except OSError:
            continue
        found |= {row[9] for row in rows if len(row) > 9 and row[3] == "0A" and row[9] in inodes}
    return found


def report(rank: int) -> None:
    """Prints the sockets opened since import: listeners apart (rank 0's rendezvous store outlives
    shutdown by design when no launcher serves it), the rest after at most 5 s (a server closes a
    connection whose peer died on its next poll)."""
    deadline = time.monotonic() + 5.0
    while True:
        extra = sockets() - BASE
        listeners = listening(extra)
        if not extra - listeners or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    print(f"SOCKETS rank={rank} left={len(extra - listeners)} listening={len(listeners)}",
          flush=True)
