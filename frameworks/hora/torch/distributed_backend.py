"""Hora as a ``torch.distributed`` backend: ``init_process_group(backend="hora")``.

Any process that imports torch knows the backend: torch loads ``hora_torch_autoload`` at
``import torch`` (a ``torch.backends`` entry point), which registers ``create_group`` below and
imports nothing of Hora until a group is made. ``import hora.torch`` registers it too.

The process group is what torch says it is. For the default group torch gives a rank, a world
size and a store; Hora starts its engine as that rank of that world:

- under ``horarun`` (or ``mpirun`` with Hora on MPI), when its launcher placed this process at the
  same rank of the same size, from the launcher's world (its store, its secret, its hosts);
- otherwise (Lightning's and Ray Train's workers, DeepSpeed, Accelerate, ``mp.spawn``, torchrun,
  ``file://`` and ``tcp://`` rendezvous) through torch's store (``hora.common.store_world``).

Hora started this way stops when the default group is destroyed, so that a later
``init_process_group`` forms its world anew. A Hora already running (``hvd.init()`` first) is
used as it is when it agrees with torch, and refused with a clear error when it does not.

The operations of a group are in ``_dist_group``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import hora
from hora.common import basics
from hora.common.elastic import worker as elastic_worker
from hora.common.process_sets import ProcessSet, global_process_set
from hora.errors import NotSupportedError
from hora.runner import rank_discovery
from hora.torch import _dist_p2p
from hora.torch._dist_group import BACKEND_NAME, HoraProcessGroup

__all__ = ["BACKEND_NAME", "HoraProcessGroup", "create_group", "process_set_for", "register"]

_started_here = False  # Hora was started by the default group's creation (and stops with it)


def process_set_for(ranks: Sequence[int], collective: bool) -> ProcessSet:
    """The Hora process set with exactly ``ranks`` (global ranks, sorted).

    The whole job is the global set. Otherwise an already registered set with these ranks is
    reused; if there is none and every rank of the job takes part (``collective``), one is added.

    Raises:
        NotSupportedError: no set with these ranks exists and only the members take part, or
            dynamic process sets are off.
    """
    if list(ranks) == list(range(hora.size())):
        return global_process_set
    from hora.common import process_sets as _ps

    for ps in _ps.process_sets():
        if ps.ranks is not None and sorted(ps.ranks) == list(ranks):
            return ps
    if not collective:
        raise NotSupportedError(
            f"hora backend: a group of ranks {list(ranks)} needs a Hora process set with these "
            "ranks; only the default group can create one on every rank. Make 'hora' the default "
            "backend (init_process_group(backend='hora')), or call "
            "hora.torch.add_process_set(ranks) on every rank before new_group"
        )
    try:
        return hora.add_process_set(list(ranks))
    except Exception as exc:
        raise NotSupportedError(
            f"hora backend: new_group({list(ranks)}) could not add a Hora process set ({exc}); "
            "start Hora with dynamic process sets (HORA_DYNAMIC_PROCESS_SETS=1, or let "
            "init_process_group start Hora)"
        ) from exc


def _torch_store_host(store: Any) -> str:
    """The address of the TCPStore under torch's prefix stores, or "" (a FileStore, ...)."""
    import torch.distributed as dist

    while isinstance(store, dist.PrefixStore):
        store = store.underlying_store
    return str(store.host) if isinstance(store, dist.TCPStore) else ""


def _launcher_world(rank: int, size: int) -> bool:
    """True when Hora's own launcher placed this process at ``rank`` of ``size`` and should form
    the world: horarun (it serves the store and made the secret, or runs an elastic job), or
    mpirun with Hora on MPI."""
    if elastic_worker.active():
        return True
    try:
        launched = rank_discovery.discover()
    except ValueError:
        return False
    if (launched.rank, launched.size) != (rank, size):
        return False
    if launched.source == "horarun":
        return True
    mpi = rank_discovery.select_transport(mpi_built=hora.mpi_built()).uses_mpi
    return launched.source == "mpirun" and mpi


def _start_hora(rank: int, size: int, store: Any) -> None:
    """Start Hora for the default group, as rank ``rank`` of ``size`` (see the module doc)."""
    global _started_here
    if _launcher_world(rank, size):
        hora.init(process_sets="dynamic")
    else:
        basics.init_with_store(store, rank, size, store_host=_torch_store_host(store),
                               process_sets="dynamic")
    _started_here = True


def _stop_hora() -> None:
    """The default group's ``on_shutdown``: stop Hora if its creation started it."""
    global _started_here
    if _started_here:
        _started_here = False
        hora.shutdown()


def create_group(opts: Any, pg_options: Any = None) -> HoraProcessGroup:
    """The creator torch calls (extended API) for every group whose backend is ``hora``."""
    rank, size = int(opts.group_rank), int(opts.group_size)
    default_group = not opts.global_ranks_in_group
    if default_group and not hora.is_initialized():
        _start_hora(rank, size, opts.store)
    elif not hora.is_initialized():
        hora.init(process_sets="dynamic")
    if default_group and (size, rank) != (hora.size(), hora.rank()):
        raise ValueError(
            f"hora backend: torch.distributed says rank {rank} of {size}, but Hora is already "
            f"running as rank {hora.rank()} of {hora.size()} (hora.init() or hvd.init() ran "
            "first, where the program that started this job did not tell Hora its place); call "
            "init_process_group before hvd.init(), or shut Hora down first (hvd.shutdown())"
        )
    ranks = sorted(opts.global_ranks_in_group) or list(range(hora.size()))
    process_set = process_set_for(ranks, collective=False)
    if len(ranks) == hora.size():
        _dist_p2p.open_channel()  # collective: every rank creates a group over every rank
    on_shutdown = _stop_hora if default_group and _started_here else None
    return HoraProcessGroup(rank, size, ranks, process_set, str(opts.group_id), opts.timeout,
                            on_shutdown)


def _forget_start() -> None:
    global _started_here
    _started_here = False


basics.add_shutdown_hook(_forget_start)


def register() -> None:
    """Register the ``hora`` backend with torch.distributed (CPU tensors); idempotent. The same
    registration as at ``import torch`` (``hora_torch_autoload``), for processes where torch's
    autoloading is off (``TORCH_DEVICE_BACKEND_AUTOLOAD=0``)."""
    import hora_torch_autoload

    hora_torch_autoload.register()
