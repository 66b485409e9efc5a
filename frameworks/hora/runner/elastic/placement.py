"""Ranks of one generation: who is rank 0, and the local and cross coordinates.

Rank 0 syncs its state to everybody after a re-formation, so it must be a worker that holds the
committed state: the oldest surviving worker. Hosts are ordered by their oldest worker, the
workers of a host by age, and ranks are numbered host by host (so each host's ranks are
contiguous, as the engine's local/cross communicators expect).
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Coordinates:
    """One worker's place in a generation (without the store port)."""

    rank: int
    size: int
    local_rank: int
    local_size: int
    cross_rank: int
    cross_size: int


def place(workers: list[tuple[int, str]]) -> dict[int, Coordinates]:
    """Coordinates of ``workers``, given as ``(age, host)`` pairs where a smaller age is an
    older worker; keyed by age.

    Raises:
        ValueError: no workers, or two with the same age.
    """
    if not workers:
        raise ValueError("a generation needs at least one worker")
    if len({age for age, _ in workers}) != len(workers):
        raise ValueError("worker ages must be unique")
    by_host: dict[str, list[int]] = {}
    for age, host in sorted(workers):
        by_host.setdefault(host, []).append(age)
    hosts = list(by_host)  # insertion order = order of each host's oldest worker
    size = len(workers)
    result: dict[int, Coordinates] = {}
    rank = 0
    for host in hosts:
        ages = by_host[host]
        for local_rank, age in enumerate(ages):
            cross = [h for h in hosts if len(by_host[h]) > local_rank]
            result[age] = Coordinates(rank, size, local_rank, len(ages), cross.index(host),
                                      len(cross))
            rank += 1
    return result
