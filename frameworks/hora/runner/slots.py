"""Hosts, slots, and the coordinates of every rank (Horovod's slot plan).

Hosts are filled in the order given: a host's ranks get local ranks 0, 1, ...; the cross rank of
a rank is the index of its host among the hosts that have a rank with the same local rank, and
its cross size is the number of those hosts. With ``-H a:2,b:1,c:3 -np 6``::

    rank  host  local_rank  local_size  cross_rank  cross_size
    0     a     0           2           0           3
    1     a     1           2           0           2
    2     b     0           1           1           3
    3     c     0           3           2           3
    4     c     1           3           1           2
    5     c     2           3           0           1
"""

from __future__ import annotations

import dataclasses


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


def parse_host_entry(entry: str) -> HostSlots:
    """Parse one ``host[:slots]`` entry (a host without ``:slots`` has one slot).

    Raises:
        ValueError: malformed entry or non-positive slot count.
    """
    name, sep, count = entry.rpartition(":")
    if not sep or name.endswith(":"):  # no colon, or a bare IPv6 address
        name, count = entry, "1"
    if not name or not count.isdigit() or int(count) < 1:
        raise ValueError(f"cannot parse host entry {entry!r}; expected host:slots")
    return HostSlots(name, int(count))


def check_unique(hosts: list[HostSlots]) -> list[HostSlots]:
    """Return ``hosts`` unchanged.

    Raises:
        ValueError: no hosts, or a host listed twice.
    """
    if not hosts:
        raise ValueError("no hosts given")
    seen: set[str] = set()
    for host in hosts:
        if host.hostname in seen:
            raise ValueError(f"host {host.hostname!r} is listed twice")
        seen.add(host.hostname)
    return hosts


def parse_hosts(spec: str) -> list[HostSlots]:
    """Parse ``"host1:2,host2:4"`` (a host without ``:slots`` has one slot).

    Raises:
        ValueError: malformed entry, non-positive slot count, or a host listed twice.
    """
    entries = [e.strip() for e in spec.split(",") if e.strip()]
    if not entries:
        raise ValueError(f"no hosts in {spec!r}")
    return check_unique([parse_host_entry(e) for e in entries])


def format_hosts(hosts: list[HostSlots]) -> str:
    """The ``-H`` spelling of ``hosts``: ``"a:2,b:1"``."""
    return ",".join(f"{h.hostname}:{h.slots}" for h in hosts)


def assign_slots(hosts: list[HostSlots], num_proc: int) -> list[SlotInfo]:
    """Coordinates of ranks 0 .. num_proc - 1 on ``hosts``.

    Raises:
        ValueError: the hosts have fewer slots than ``num_proc`` (or ``num_proc`` < 1).
    """
    total = sum(h.slots for h in hosts)
    if num_proc < 1 or num_proc > total:
        raise ValueError(f"cannot place {num_proc} processes on {total} slots "
                         f"({format_hosts(hosts)})")
    placed = [h.hostname for h in hosts for _ in range(h.slots)][:num_proc]  # host per rank
    return [SlotInfo(hostname, rank, num_proc, *coordinates)
            for rank, (hostname, coordinates) in enumerate(zip(placed, local_and_cross(placed)))]


def local_and_cross(hosts: list[str]) -> list[tuple[int, int, int, int]]:
    """Each rank's ``(local_rank, local_size, cross_rank, cross_size)``, given each rank's host
    in rank order (a host's ranks together). The cross group of local rank k holds the k-th rank
    of every host that has one, in host order."""
    count: dict[str, int] = {}
    local_ranks = []
    for host in hosts:
        local_ranks.append(count.get(host, 0))
        count[host] = local_ranks[-1] + 1
    result = []
    for host, local in zip(hosts, local_ranks):
        peers = [h for h, k in zip(hosts, local_ranks) if k == local]
        result.append((local, count[host], peers.index(host), len(peers)))
    return result


def used_hosts(plan: list[SlotInfo]) -> list[str]:
    """The hosts that run at least one rank, in rank order."""
    names: list[str] = []
    for slot in plan:
        if slot.hostname not in names:
            names.append(slot.hostname)
    return names
