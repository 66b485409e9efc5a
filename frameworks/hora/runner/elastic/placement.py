"""Ranks of one generation: who is rank 0, and the local and cross coordinates.

Rank 0 syncs its state to everybody after a re-formation, so it must be a worker that holds the
committed state: the oldest surviving worker. Hosts are ordered by their oldest worker, the
workers of a host by age, and ranks are numbered host by host (so each host's ranks are
contiguous, as the engine's local/cross communicators expect).
"""

from __future__ import annotations

import dataclasses

from hora.runner.slots import local_and_cross


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
    # Rank order: hosts by their oldest worker (insertion order), each host's workers by age.
    ranked = [(age, host) for host, ages in by_host.items() for age in ages]
    coordinates = local_and_cross([host for _, host in ranked])
    return {age: Coordinates(rank, len(ranked), *c)
            for rank, ((age, _), c) in enumerate(zip(ranked, coordinates))}
