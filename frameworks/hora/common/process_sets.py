"""Process sets: subsets of ranks that run collectives among themselves.

Set 0 is the world (``global_process_set``). Other sets are registered statically with
``hora.init(process_sets=[...])`` (ids 1, 2, ... in that order) or, with dynamic process sets
enabled (``HORA_DYNAMIC_PROCESS_SETS=1`` or ``init(process_sets="dynamic")``), by the collective
``add_process_set`` / ``remove_process_set``. Operations take global ranks; ``ProcessSet.rank()``
is the rank inside the set.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from hora import _core
from hora.common.call_sites import call_site


class ProcessSet:
    """A set of global ranks; pass it to ``hora.init()`` or ``hora.add_process_set()``.

    ``ranks_or_comm`` is a sequence of global ranks (kept sorted) or an mpi4py communicator,
    whose ranks are resolved at ``hora.init()``.
    """

    def __init__(self, ranks_or_comm: Iterable[int] | Any) -> None:
        self.process_set_id: int | None = None
        self.ranks: list[int] | None = None
        self.mpi_comm: Any = None
        if hasattr(ranks_or_comm, "allgather") and hasattr(ranks_or_comm, "Get_size"):
            self.mpi_comm = ranks_or_comm
            return
        try:
            ranks = list(ranks_or_comm)
        except TypeError:
            raise ValueError(
                "ProcessSet should be initialized with a list of process ranks or an mpi4py Comm "
                "object"
            ) from None
        if any(isinstance(r, bool) or not isinstance(r, int) for r in ranks):
            raise ValueError("ProcessSet ranks must be integers, got " + repr(ranks))
        self.ranks = sorted(int(r) for r in ranks)

    def size(self) -> int | None:
        """Number of ranks in the set; None while it is not registered."""
        if self.process_set_id is None or self.ranks is None:
            return None
        return len(self.ranks)

    def rank(self) -> int | None:
        """This process's rank within the set; None while the set is not registered.

        Raises:
            ValueError: this process is not a member of the set.
        """
        if self.process_set_id is None or self.ranks is None:
            return None
        me = _global_rank()
        if me not in self.ranks:
            raise ValueError("Process is not part of provided process set.")
        return self.ranks.index(me)

    def included(self) -> bool | None:
        """Whether this process is a member; None while the set is not registered."""
        if self.process_set_id is None or self.ranks is None:
            return None
        return _global_rank() in self.ranks

    def invalidate(self) -> None:
        """Forget the registration (after removal); the ranks stay, as in Horovod, so the same
        object can be added again."""
        self.process_set_id = None

    def __str__(self) -> str:
        # Horovod's text exactly, which scripts and Horovod's own tests compare.
        return (f"ProcessSet(process_set_id={self.process_set_id}, ranks={self.ranks}, "
                f"mpi_comm={self.mpi_comm})")

    __repr__ = __str__


global_process_set = ProcessSet([])
global_process_set.process_set_id = 0

_registry: dict[int, list[ProcessSet]] = {0: [global_process_set]}


def _global_rank() -> int:
    return int(_core.topology()["rank"])


def _as_process_set(ranks_or_set: ProcessSet | Sequence[int]) -> ProcessSet:
    return ranks_or_set if isinstance(ranks_or_set, ProcessSet) else ProcessSet(ranks_or_set)


def static_sets_for_init(
    process_sets: Sequence[ProcessSet | Sequence[int]], rank: int, size: int
) -> tuple[list[ProcessSet], list[list[int]]]:
    """Validate the process sets given to ``hora.init`` (before the engine starts).

    Returns the ProcessSet objects (lists converted) and the rank lists to register, leaving out
    the global set and sets equal to the world (those are set 0).

    Raises:
        ValueError: a rank outside the job, an empty set, or the same set twice.
    """
    objects = [_as_process_set(ps) for ps in process_sets]
    # Every communicator's allgather first, in list order, before any check can raise: a rank
    # that raised half way would leave the others' allgathers unmatched.
    for ps in objects:
        if ps is not global_process_set and ps.ranks is None and ps.mpi_comm is not None:
            ps.ranks = sorted(int(r) for r in ps.mpi_comm.allgather(rank))
    to_register: list[list[int]] = []
    seen: set[tuple[int, ...]] = set()
    for ps in objects:
        if ps is global_process_set:
            continue
        ranks = ps.ranks or []
        if not ranks:
            raise ValueError("a process set needs at least one rank")
        if len(set(ranks)) != len(ranks):
            raise ValueError(f"process set {ranks} lists a rank twice")
        if ranks[0] < 0 or ranks[-1] >= size:
            raise ValueError(f"process set {ranks} has ranks outside 0..{size - 1}")
        key = tuple(ranks)
        if key in seen:
            raise ValueError(f"process set {ranks} was given twice; process sets must be unique")
        seen.add(key)
        if ranks != list(range(size)):
            to_register.append(list(ranks))
    return objects, to_register


def update_after_init(process_sets: Sequence[ProcessSet]) -> None:
    """Give the registered ids to the ProcessSet objects (after the engine started)."""
    ids_to_ranks = {i: list(_core.process_set_ranks(i)) for i in _core.process_set_ids()}
    ranks_to_id = {tuple(ranks): i for i, ranks in ids_to_ranks.items()}
    global_process_set.ranks = ids_to_ranks[0]
    for ps in process_sets:
        if ps is global_process_set or ps.ranks is None:
            continue
        ps.process_set_id = ranks_to_id[tuple(ps.ranks)]
    _registry.clear()
    _registry[0] = [global_process_set]
    for ps in process_sets:
        if ps.process_set_id is not None and ps is not global_process_set:
            _registry.setdefault(ps.process_set_id, []).append(ps)
    for i, ranks in ids_to_ranks.items():
        if i not in _registry:
            ps = ProcessSet(ranks)
            ps.process_set_id = i
            _registry[i] = [ps]


def reset_after_shutdown() -> None:
    """Unregister every set but the global one (its ranks are refreshed by the next init)."""
    for i, sets in list(_registry.items()):
        if i == 0:
            continue
        for ps in sets:
            ps.process_set_id = None
    _registry.clear()
    _registry[0] = [global_process_set]


def add_process_set(process_set: ProcessSet | Sequence[int]) -> ProcessSet:
    """Register a process set on every rank (collective; needs dynamic process sets).

    Every rank must call it with the same ranks. Returns the registered ProcessSet (the given
    object, or a new one for a list of ranks).
    """
    ps = _as_process_set(process_set)
    if ps.ranks is None:
        raise NotImplementedError(
            "Dynamically adding process sets defined by an MPI communicator is not implemented. "
            "Please build the process set via a list of ranks."
        )
    ps.process_set_id = int(_core.add_process_set(ps.ranks, call_site=call_site()))
    _registry.setdefault(ps.process_set_id, []).append(ps)
    return ps


def remove_process_set(process_set: ProcessSet) -> bool:
    """Remove a process set on every rank (collective; needs dynamic process sets).

    Returns False for the global set or a set that is not registered; True once removed, after
    which this object and every equivalent one are invalidated.
    """
    set_id = process_set.process_set_id
    if set_id is None or set_id == 0 or set_id not in _core.process_set_ids():
        return False
    _core.remove_process_set(set_id, call_site=call_site())
    for ps in _registry.pop(set_id, []):
        ps.invalidate()
    process_set.invalidate()
    return True


def process_set_by_id(process_set_id: int) -> ProcessSet:
    """The registered ProcessSet with this id.

    Raises:
        ValueError: no such set is registered.
    """
    if process_set_id not in _registry:
        raise ValueError(f"No known process set with id {process_set_id}")
    return _registry[process_set_id][0]


def process_sets() -> list[ProcessSet]:
    """One registered ProcessSet per id, in id order."""
    return [_registry[i][0] for i in sorted(_registry)]
