"""Lifecycle, topology and build queries (framework-neutral).

``init()`` finds this process's place in the job (``hora.runner.rank_discovery``) and starts the
engine; ``shutdown()`` stops it, after which ``init()`` works again. The topology getters raise
``ValueError`` before ``init()``.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
from collections.abc import Sequence
from typing import Any, Callable, Union

from hora import _core
from hora.common import process_sets as _ps
from hora.common import store_world
from hora.common.elastic import worker as elastic_worker
from hora.errors import HoraError, NotSupportedError
from hora.runner import rank_discovery

_log = logging.getLogger("hora.elastic")

NOT_INITIALIZED = "Hora has not been initialized; use hora.init()."

_lock = threading.RLock()
_topology: dict[str, int] | None = None
_atexit_registered = False
_shutdown_hooks: list[Callable[[], None]] = []
_served_store: Any = None  # the rendezvous store this rank serves for init_with_store's job
_listen = ""  # the address this rank's engine listens on ("" = the engine's default)

ProcessSetsArg = Union[None, str, Sequence[Union[_ps.ProcessSet, Sequence[int]]]]


def add_shutdown_hook(hook: Callable[[], None]) -> None:
    """Run ``hook()`` after every ``shutdown()`` (frontends reset their per-job state)."""
    _shutdown_hooks.append(hook)


def _mpi_comm_argument(comm: Any) -> tuple[int, list[int]]:
    """(Fortran handle or -1, MPI_COMM_WORLD ranks or []) for ``init(comm=...)``."""
    if comm is None:
        return -1, []
    if hasattr(comm, "py2f"):
        return int(comm.py2f()), []
    if isinstance(comm, (str, bytes)) or not isinstance(comm, Sequence):
        raise TypeError(
            f"comm must be an mpi4py communicator or a list of MPI_COMM_WORLD ranks, got {comm!r}"
        )
    ranks = list(comm)
    if any(isinstance(r, bool) or not isinstance(r, int) for r in ranks):
        raise ValueError(f"comm must list MPI_COMM_WORLD ranks as integers, got {comm!r}")
    return -1, ranks


def _require_mpi_launch(transports: rank_discovery.Transports, mpi_size: int) -> None:
    """Refuse MPI in a job that another launcher started (horarun, torchrun, srun without MPI
    support): every process would initialise MPI alone and run as a job of one."""
    try:
        launched = rank_discovery.discover()
    except ValueError:
        return  # no consistent launcher view to compare with
    if launched.size > 1 and launched.size != mpi_size:
        raise NotSupportedError(
            f"HORA_CONTROLLER={transports.controller} HORA_CPU_OPERATIONS="
            f"{transports.cpu_operations} need MPI, but {launched.source} started this process as "
            f"rank {launched.rank} of {launched.size} while MPI sees {mpi_size} process(es): "
            "start the job with mpirun (or horarun --mpi), or set both to tcp"
        )


def init(comm: Any = None, process_sets: ProcessSetsArg = None) -> None:
    """Start Hora on this process; collective over every rank of the job.

    Args:
        comm: ``None`` (the whole job), an mpi4py communicator to run Hora on, or a list of
            MPI_COMM_WORLD ranks to run Hora on (only those ranks call ``init``; an empty list
            means all ranks). A communicator or a list implies the MPI transport. Hora ranks are
            the ranks in that communicator (for a list, the position in it). Open MPI requires
            every process of the job to initialise MPI, so ranks left out of the list must do it
            themselves (for example ``from mpi4py import MPI``); a left-out rank that calls
            ``init(comm=ranks)`` gets ValueError, with MPI initialised.
        process_sets: static process sets (ProcessSet objects or lists of global ranks), which
            get ids 1, 2, ... in order; or ``"dynamic"`` to allow ``add_process_set`` later.

    Negotiation runs on ``HORA_CONTROLLER`` and the CPU collectives on ``HORA_CPU_OPERATIONS``,
    each MPI or TCP, as ``hora.runner.rank_discovery.select_transport`` decides (default: MPI for both
    under mpirun when built, else TCP for both; the two may differ). When either is MPI,
    ``mpirun -np N python train.py`` needs no other launcher and no rendezvous store: a TCP role
    beside MPI gets its store from rank 0 over MPI, under a fresh random secret.

    Calling ``init()`` again while initialized does nothing.

    Raises:
        ValueError: inconsistent launcher variables, a ``comm`` list that is invalid or leaves
            this rank out, invalid process sets, or a job that would listen on a non-loopback
            address without a job secret (the message names ``HORA_SECRET``,
            ``HORA_SECRET_FILE`` and ``HORA_INSECURE``; see ``rank_discovery.checked_secret``).
        TypeError: ``comm`` is neither an mpi4py communicator nor a list of ranks.
        NotSupportedError: a transport asked for is not built, ``comm`` is given while
            neither role runs on MPI, or MPI is asked for in a job that mpirun did not start.
        HoraTimeoutError: not every rank arrived at the rendezvous in time.
    """
    with _lock:
        if _core.is_initialized():
            return
        requested = _requested_sets(process_sets)
        transports = rank_discovery.select_transport(
            mpi_built=bool(_core.mpi_built()), comm_given=comm is not None
        )
        comm_handle = -1
        if transports.uses_mpi:
            comm_handle, world_ranks = _mpi_comm_argument(comm)
            mpi = _core.mpi_comm_info(comm_handle, world_ranks)
            if comm is None:
                _require_mpi_launch(transports, int(mpi["size"]))
            comm_handle = int(mpi["comm"])
            info = rank_discovery.RankInfo(
                mpi["rank"], mpi["size"], mpi["local_rank"], mpi["local_size"],
                mpi["cross_rank"], mpi["cross_size"], source="mpi",
            )
        elif elastic_worker.active():
            _start_elastic(transports, requested)
            return
        else:
            info = rank_discovery.discover()
        _start_engine(info, transports, requested, comm_handle)


def _requested_sets(process_sets: ProcessSetsArg) -> Sequence[Any]:
    """The static sets ``init`` registers; ``"dynamic"`` allows adding sets later instead."""
    if isinstance(process_sets, str):
        if process_sets != "dynamic":
            raise ValueError(f"process_sets must be a list or 'dynamic', got {process_sets!r}")
        os.environ["HORA_DYNAMIC_PROCESS_SETS"] = "1"
        return []
    return [] if process_sets is None else list(process_sets)


def init_with_store(store: store_world.KeyValue, rank: int, size: int, *, store_host: str = "",
                    launcher: str | None = None, process_sets: ProcessSetsArg = None) -> None:
    """Start Hora in a job that another program started, with the rank and size it gave this
    process and the store it gave every rank (collective; see ``hora.common.store_world``).
    Hora's own launcher variables are not read: the job is what the caller says. The engine runs
    on the built-in TCP transport (shared memory among the ranks of one machine).

    Calling it while initialized does nothing.

    Raises:
        ValueError: the job may not start (no secret for ranks on several machines), on every
            rank alike; invalid process sets.
        NotSupportedError: HORA_CONTROLLER or HORA_CPU_OPERATIONS ask for MPI, which only a job
            that mpirun started can use.
        HoraTimeoutError: not every rank arrived in time (HORA_START_TIMEOUT).
    """
    global _served_store
    with _lock:
        if _core.is_initialized():
            return
        requested = _requested_sets(process_sets)
        asked = [_core.lookup_env(v) or "" for v in ("CONTROLLER", "CPU_OPERATIONS")]
        if "mpi" in [a.strip().lower() for a in asked]:
            raise NotSupportedError(
                f"HORA_CONTROLLER / HORA_CPU_OPERATIONS ask for MPI, but "
                f"{launcher or rank_discovery.started_by()} started this job, not mpirun; unset "
                "them (Hora then runs on TCP)")
        world = store_world.rendezvous(store, rank, size, store_host=store_host,
                                       launcher=launcher)
        try:
            _start_engine(world.info, rank_discovery.Transports("tcp", "tcp"), requested, -1)
        except BaseException:
            if world.server is not None:
                world.server.stop()
            raise
        _served_store = world.server


def _start_engine(info: rank_discovery.RankInfo, transports: rank_discovery.Transports,
                  requested: Sequence[Any], comm_handle: int, generation: int = -1) -> None:
    global _topology, _atexit_registered
    global _listen
    listen = rank_discovery.listen_host(info.store_host) if transports.uses_tcp else ""
    _listen = listen
    fix = rank_discovery.secret_fix(info.source, store=False)
    secret = rank_discovery.checked_secret(info, listen, fix=fix) if transports.uses_tcp else \
        info.secret
    objects, to_register = _ps.static_sets_for_init(requested, info.rank, info.size)
    _core.init(
        info.rank, info.size, info.local_rank, info.local_size, info.cross_rank,
        info.cross_size, transport=transports.cpu_operations,
        controller=transports.controller, store_host=info.store_host,
        store_port=info.store_port, serve_store=info.serve_store, secret=secret,
        listen_host=listen,
        process_sets=to_register, mpi_comm=comm_handle, generation=generation,
        store_served_by_rank0=info.store_served_by_rank0,
    )
    _topology = dict(_core.topology())
    _ps.update_after_init(objects)
    if not _atexit_registered:
        atexit.register(shutdown)
        _atexit_registered = True


def _start_elastic(transports: rank_discovery.Transports, requested: Sequence[Any]) -> None:
    """Join the elastic driver's next generation that includes this worker. A generation that
    does not form (a member died or a newer one superseded it during the rendezvous) is
    reported to the driver and the next one is joined; waiting for one is bounded by
    ``HORA_ELASTIC_TIMEOUT``, which raises HoraTimeoutError."""
    while True:
        info = elastic_worker.join_next_generation()
        try:
            _start_engine(info, transports, requested, -1,
                          generation=elastic_worker.current_generation())
            elastic_worker.report_formed()
            return
        except HoraError as exc:
            _core.shutdown()
            elastic_worker.request_reset()
            _log.warning("hora elastic: generation %d did not form (%s); waiting for the next",
                         elastic_worker.current_generation(), exc)


def shutdown() -> None:
    """Stop Hora on this process; pending operations fail with ShutdownError. Idempotent."""
    global _topology, _served_store
    with _lock:
        _core.shutdown()
        if _served_store is not None:
            _served_store.stop()
            _served_store = None
        _topology = None
        _ps.reset_after_shutdown()
        for hook in _shutdown_hooks:
            hook()


def listen_host() -> str:
    """The address this rank's engine listens on for its peers ("" when the engine chose: no
    store, or MPI alone); valid while Hora runs."""
    return _listen


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


def _transports_in_use() -> list[str]:
    """Transports of the running engine: ``transport_name()`` is ``"tcp"``, ``"mpi"``, or
    ``"<controller>+<data>"`` when the roles differ."""
    return _core.transport_name().split("+") if is_initialized() else []


def mpi_enabled() -> bool:
    """True when the running engine uses MPI (for negotiation, collectives, or both)."""
    return "mpi" in _transports_in_use()


def gloo_built() -> bool:
    """True: Hora's built-in TCP transport takes Gloo's role and is always built."""
    return bool(_core.tcp_built())


def gloo_enabled() -> bool:
    """True when the running engine uses the built-in TCP transport (Gloo's role) for
    negotiation, collectives, or both."""
    return "tcp" in _transports_in_use()


def nccl_built() -> int:
    """NCCL version code (2.23.3 = 22303) when GPU tensors can go through NCCL in this process:
    NCCL and the CUDA runtime load and a CUDA device is present. 0 otherwise, also when NCCL
    loads but no driver or device is there (``hora.common.gpu.info()`` says why)."""
    from hora.common import gpu

    gpu.ensure_loaded()
    return int(_core.nccl_built())


def ddl_built() -> bool:
    """False: Hora has no IBM DDL support."""
    return False


def ccl_built() -> bool:
    """False: Hora has no oneCCL support."""
    return False


def cuda_built() -> bool:
    """True when CUDA tensors can be reduced in this process (through NCCL, see ``nccl_built``)."""
    return nccl_built() > 0


def rocm_built() -> bool:
    """False: Hora has no ROCm support."""
    return False


def mpi_threads_supported() -> bool:
    """Whether MPI runs at MPI_THREAD_MULTIPLE, so the application may call MPI itself while Hora
    runs (Hora needs at least MPI_THREAD_SERIALIZED; only meaningful with MPI).

    Raises:
        ValueError: before ``init()``, or when the engine does not use MPI.
    """
    if not is_initialized():
        raise ValueError(NOT_INITIALIZED)
    if not mpi_enabled():
        raise ValueError("Hora is not using MPI; start the job with HORA_CONTROLLER=mpi")
    return bool(_core.mpi_threads_supported())


def _get_process_set_ids_and_ranks() -> dict[int, list[int]]:
    """Registered process sets: id -> global ranks (Horovod's internal helper, used by tests)."""
    return {i: list(_core.process_set_ranks(i)) for i in _core.process_set_ids()}
