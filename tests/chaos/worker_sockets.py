"""The sockets a chaos worker holds: measured when this module is imported (before hora.init()), and
reported after hora.shutdown() as SOCKETS rank=R left=N listening=M."""

from __future__ import annotations

import os
import time

from report_line import say


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


def _tcp() -> dict[str, tuple[int, str]]:
    """inode -> (local port, state as /proc shows it: 0A = listening) of this process's TCP."""
    found = {}
    for table in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
        try:
            with open(table) as f:
                rows = [line.split() for line in f.read().splitlines()[1:]]
        except OSError:
            continue
        for row in rows:
            if len(row) > 9:
                found[row[9]] = (int(row[1].rsplit(":", 1)[1], 16), row[3])
    return found


def _store_port() -> int:
    return int(os.environ.get("HORA_RENDEZVOUS_PORT") or "-1")


def report(rank: int) -> None:
    """Prints the sockets opened since import. Rank 0's rendezvous store (listener and the
    connections it serves) outlives shutdown by design when no launcher serves the store, so
    sockets on the store's port count apart; the rest are counted after at most 5 s (a server
    closes a connection whose peer died on its next poll)."""
    deadline = time.monotonic() + 5.0
    while True:
        extra = sockets() - BASE
        tcp = _tcp()
        store = {i for i in extra if i in tcp and tcp[i][0] == _store_port()}
        listeners = {i for i in extra - store if i in tcp and tcp[i][1] == "0A"}
        left = extra - store - listeners
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    say(f"SOCKETS rank={rank} left={len(left)} listening={len(listeners)} store={len(store)}")
