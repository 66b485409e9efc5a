"""Hosts, slots, and the coordinates of every rank (Horovod's slot plan).

Hosts are filled in the order given: a host's ranks get local ranks 0, 1, ...; the cross rank of
a rank is the index of its host among the hosts that have a rank with the same local rank.
"""

from __future__ import annotations

import dataclasses
import socket


@dataclasses.dataclass(frozen=True)
class HostSlots:
    """A host and how many ranks it may run."""

    hostname: str
    slots: int


@dataclasses.dataclass(frozen=True)
class SlotInfo:
    """Where one rank runs and its coordinates in the job."""

    hostname: str
    rank: int
    size: int
    local_rank: int
    local_size: int
    cross_rank: int
    cross_size: int


def parse_hosts(spec: str) -> list[HostSlots]:
    """Parse ``"host1:2,host2:4"`` (a host without ``:slots`` has one slot).

    Raises:
        ValueError: malformed entry, non-positive slot count, or a host listed twice.
    """
    hosts: list[HostSlots] = []
    for entry in spec.split(","):
        entry = entry.strip()
        if not entry:
            continue
        name, sep, count = entry.rpartition(":")
        if not sep:
            name, count = entry, "1"
        if not name or not count.isdigit() or int(count) < 1:
            raise ValueError(f"cannot parse host entry {entry!r}; expected host:slots")
        if any(h.hostname == name for h in hosts):
            raise ValueError(f"host {name!r} is listed twice")
        hosts.append(HostSlots(name, int(count)))
    if not hosts:
        raise ValueError(f"no hosts in {spec!r}")
    return hosts


def assign_slots(hosts: list[HostSlots], num_proc: int) -> list[SlotInfo]:
    """Coordinates of ranks 0 .. num_proc - 1 on ``hosts``.

    Raises:
        ValueError: the hosts have fewer slots than ``num_proc``.
    """
    total = sum(h.slots for h in hosts)
    if num_proc < 1 or num_proc > total:
        raise ValueError(f"cannot place {num_proc} processes on {total} slots")
    placed: list[tuple[str, int]] = []  # (host, local rank) per rank
    for host in hosts:
        for local in range(host.slots):
            if len(placed) < num_proc:
                placed.append((host.hostname, local))
    local_sizes = {h.hostname: sum(1 for name, _ in placed if name == h.hostname) for h in hosts}
    result = []
    for rank, (hostname, local) in enumerate(placed):
        peers = [name for name, lr in placed if lr == local]  # one per host, in host order
        result.append(SlotInfo(hostname, rank, num_proc, local, local_sizes[hostname],
                               peers.index(hostname), len(peers)))
    return result


def is_local_host(hostname: str) -> bool:
    """True for names of this machine (localhost, 127.x, its hostname or FQDN)."""
    return (hostname in ("localhost", socket.gethostname(), socket.getfqdn())
            or hostname.startswith("127."))
