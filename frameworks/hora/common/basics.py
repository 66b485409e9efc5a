"""Lifecycle, topology and build queries (framework-neutral).

``init()`` finds this process's place in the job (``hora.common.discovery``) and starts the
engine; ``shutdown()`` stops it, after which ``init()`` works again. The topology getters raise
``ValueError`` before ``init()``.
"""

from __future__ import annotations

import atexit
import os
import threading
from collections.abc import Sequence
from typing import Any, Callable, Union

from hora import _core
from hora.common import discovery
from hora.common import process_sets as _ps
from hora.errors import NotSupportedError

NOT_INITIALIZED = "Hora has not been initialized; use hora.init()."

_lock = threading.RLock()
_topology: dict[str, int] | None = None
_atexit_registered = False
_shutdown_hooks: list[Callable[[], None]] = []

ProcessSetsArg = Union[None, str, Sequence[Union[_ps.ProcessSet, Sequence[int]]]]


def add_shutdown_hook(hook: Callable[[], None]) -> None:
    """Run ``hook()`` after every ``shutdown()`` (frontends reset their per-job state)."""
    _shutdown_hooks.append(hook)


def init(comm: Any = None, process_sets: ProcessSetsArg = None) -> None:
    """Start Hora on this process; collective over every rank of the job.

    Args:
        comm: accepted for Horovod compatibility; only ``None`` is supported (ranks come from
            horarun, torchrun, mpirun or Slurm variables).
        process_sets: static process sets (ProcessSet objects or lists of global ranks), which
            get ids 1, 2, ... in order; or ``"dynamic"`` to allow ``add_process_set`` later.

    Calling ``init()`` again while initialized does nothing.

    Raises:
        ValueError: inconsistent launcher variables or invalid process sets.
        HoraTimeoutError: not every rank arrived at the rendezvous in time.
    """
    global _topology, _atexit_registered
    if comm is not None:
        raise NotSupportedError(
            "hora.init(comm=...) is not supported; start the ranks with horarun (or torchrun, "
            "mpirun, srun) and call hora.init() without a communicator"
        )
    with _lock:
        if _core.is_initialized():
            return
        requested: Sequence[Any] = []
        if isinstance(process_sets, str):
            if process_sets != "dynamic":
                raise ValueError(f"process_sets must be a list or 'dynamic', got {process_sets!r}")
            os.environ["HORA_DYNAMIC_PROCESS_SETS"] = "1"
        elif process_sets is not None:
            requested = list(process_sets)
        info = discovery.discover()
        objects, to_register = _ps.static_sets_for_init(requested, info.rank, info.size)
        _core.init(
            info.rank, info.size, info.local_rank, info.local_size, info.cross_rank,
            info.cross_size, store_host=info.store_host, store_port=info.store_port,
            serve_store=info.serve_store, secret=info.secret, process_sets=to_register,
        )
        _topology = dict(_core.topology())
        _ps.update_after_init(objects)
        if not _atexit_registered:
            atexit.register(shutdown)
            _atexit_registered = True


def shutdown() -> None:
    """Stop Hora on this process; pending operations fail with ShutdownError. Idempotent."""
    global _topology
    with _lock:
        _core.shutdown()
        _topology = None
        _ps.reset_after_shutdown()
        for hook in _shutdown_hooks:
            hook()


def start_timeline(file_path: str, mark_cycles: bool = False) -> None:
    """Start recording a Chrome-trace timeline to ``file_path`` (written by rank 0).

    Works at any time after ``init()``, whether or not ``HORA_TIMELINE`` is set; a running
    timeline is closed first. The file is valid JSON after every write.
    """
    _get("rank")
    _core.start_timeline(str(file_path), bool(mark_cycles))


def stop_timeline() -> None:
    """Stop recording the timeline; the file stays valid and can be opened at once."""
    _get("rank")
    _core.stop_timeline()


def is_initialized() -> bool:
    """True between ``init()`` and ``shutdown()``."""
    return bool(_core.is_initialized())


def _get(key: str) -> int:
    topology = _topology
    if topology is None:
        raise ValueError(NOT_INITIALIZED)
    return topology[key]


def rank() -> int:
    """This process's rank in the job (0 .. size() - 1)."""
    return _get("rank")


def size() -> int:
    """Number of ranks in the job."""
    return _get("size")


def local_rank() -> int:
    """This process's rank among the ranks on its host."""
    return _get("local_rank")


def local_size() -> int:
    """Number of ranks on this host."""
    return _get("local_size")


def cross_rank() -> int:
    """Index of this host among the hosts that have a rank with this local rank."""
    return _get("cross_rank")


def cross_size() -> int:
    """Number of hosts that have a rank with this local rank."""
    return _get("cross_size")


def is_homogeneous() -> bool:
    """True when every host runs the same number of ranks."""
    return local_size() * cross_size() == size()


def mpi_built() -> bool:
    """True when this build contains the MPI transport."""
    return bool(_core.mpi_built())


def mpi_enabled() -> bool:
    """True when the running engine uses MPI."""
    return is_initialized() and _core.transport_name() == "mpi"


def gloo_built() -> bool:
    """True: Hora's built-in TCP transport takes Gloo's role and is always built."""
    return bool(_core.tcp_built())


def gloo_enabled() -> bool:
    """True when the running engine uses the built-in TCP transport (Gloo's role)."""
    return is_initialized() and _core.transport_name() == "tcp"


def nccl_built() -> int:
    """NCCL version code of this build; 0 when NCCL is not built."""
    return int(_core.nccl_built())


def ddl_built() -> bool:
    """False: Hora has no IBM DDL support."""
    return False


def ccl_built() -> bool:
    """False: Hora has no oneCCL support."""
    return False


def cuda_built() -> bool:
    """True when this build can reduce CUDA tensors (through NCCL)."""
    return nccl_built() > 0


def rocm_built() -> bool:
    """False: Hora has no ROCm support."""
    return False


def mpi_threads_supported() -> bool:
    """Whether MPI was initialized with multi-thread support (only meaningful with MPI).

    Raises:
        ValueError: before ``init()``, or when the engine does not use MPI.
    """
    if not is_initialized():
        raise ValueError(NOT_INITIALIZED)
    if not mpi_enabled():
        raise ValueError("Hora is not using MPI; start the job with HORA_CONTROLLER=mpi")
    return True


def _get_process_set_ids_and_ranks() -> dict[int, list[int]]:
    """Registered process sets: id -> global ranks (Horovod's internal helper, used by tests)."""
    return {i: list(_core.process_set_ranks(i)) for i in _core.process_set_ids()}
