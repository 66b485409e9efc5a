"""Hosts on which a worker failed: left out for a cooldown, then tried again.

Horovod bans such a host for the rest of the job unless a cooldown range is given; here too,
without ``--blacklist-cooldown-range`` a failed host is not used for new workers again. With a
range ``lo hi``, the n-th failure of a host keeps it out for a random time in
``[lo, hi] * 2**(n-1)`` seconds (capped at ``hi * 16``), after which it counts as available.
Workers that are still running on a blacklisted host keep running.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable


class Blacklist:
    """Failure counts and cooldown ends per host."""

    def __init__(self, cooldown_range: tuple[float, float] | None,
                 clock: Callable[[], float] = time.monotonic,
                 rng: random.Random | None = None) -> None:
        self._range = cooldown_range
        self._clock = clock
        self._rng = rng or random.Random()
        self._failures: dict[str, int] = {}
        self._until: dict[str, float] = {}

    def record_failure(self, host: str) -> float | None:
        """Count a failure on ``host``; returns its cooldown in seconds (None: for good)."""
        count = self._failures.get(host, 0) + 1
        self._failures[host] = count
        if self._range is None:
            self._until[host] = float("inf")
            return None
        low, high = self._range
        seconds = min(self._rng.uniform(low, high) * 2 ** (count - 1), high * 16)
        self._until[host] = self._clock() + seconds
        return seconds

    def usable(self, host: str) -> bool:
        """True when ``host`` has no cooldown running."""
        return self._clock() >= self._until.get(host, 0.0)

    def failures(self, host: str) -> int:
        """How many workers failed on ``host`` so far."""
        return self._failures.get(host, 0)
