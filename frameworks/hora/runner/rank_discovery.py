"""Where this process sits in the job: rank, size, host-local and cross-host coordinates, and how
to reach the rendezvous store.

Sources, first match wins:

1. ``horarun`` (or a Horovod-style launcher): ``HORA_*`` variables, each also accepted as
   ``HOROVOD_*``: RANK, SIZE, LOCAL_RANK, LOCAL_SIZE, CROSS_RANK, CROSS_SIZE, HOSTNAME,
   RENDEZVOUS_ADDR/RENDEZVOUS_PORT (also ``HOROVOD_GLOO_RENDEZVOUS_ADDR/PORT``) and SECRET (also
   ``_HOROVOD_SECRET_KEY``). The launcher serves the store.
2. ``torchrun``: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR,
   MASTER_PORT. Rank 0 serves the store itself. torchrun's own c10d store already listens on
   MASTER_PORT, so Hora's store uses **MASTER_PORT + 1** unless ``HORA_RENDEZVOUS_PORT`` is set.
3. ``mpirun`` (Open MPI or a PMI launcher): OMPI_COMM_WORLD_* or PMI_RANK/PMI_SIZE. Rank 0 serves
   the store at HORA_RENDEZVOUS_ADDR or MASTER_ADDR (127.0.0.1 when every rank runs on this
   host), port HORA_RENDEZVOUS_PORT or MASTER_PORT or 29400. (Only the TCP transport needs it.)
4. Slurm (``srun``): SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NODEID and the tasks per
   node (SLURM_STEP_TASKS_PER_NODE, SLURM_TASKS_PER_NODE or SLURM_NTASKS_PER_NODE). Rank 0 serves
   the store at HORA_RENDEZVOUS_ADDR or MASTER_ADDR, else the first host of the step's node list;
   port HORA_RENDEZVOUS_PORT or MASTER_PORT or 29400. A plain ``python`` in a batch script with
   several tasks looks like rank 0 of N here and would wait for the others: start it with srun.
5. Alone: rank 0 of 1, no store.

When either role runs on MPI none of this is needed: MPI already connected the ranks, and
``hora.init()`` takes rank, size and host-local coordinates from the MPI communicator itself; a
TCP role beside MPI gets its store from rank 0 over MPI. ``select_transport`` decides which
transports run (see its docstring).

The job secret proves to every connection that the peer belongs to this job; no secret is ever
derived from public values. horarun generates a random one. Without horarun the secret comes from
``HORA_SECRET`` or from the file named by ``HORA_SECRET_FILE`` (the same value on every rank);
a TCP part beside MPI gets a fresh random one over MPI. Without any of these a job may only run on
the loopback (store at 127.0.0.1 or localhost, no ``HORA_IFACE``), where every listener binds
127.0.0.1; elsewhere ``checked_secret`` refuses to start unless ``HORA_INSECURE=1`` opts in
(trusted clusters only; rank 0 logs a warning).
"""

from __future__ import annotations

import dataclasses
import ipaddress
import logging
import os
import re
import socket
import sys
from collections.abc import Mapping
from typing import NamedTuple

from hora.common import netaddr
from hora.errors import NotSupportedError

_log = logging.getLogger("hora")

DEFAULT_RENDEZVOUS_PORT = 29400
"""Store port for mpirun/Slurm jobs when neither HORA_RENDEZVOUS_PORT nor MASTER_PORT is set."""

DEFAULT_MASTER_PORT = 29500
"""torchrun's default MASTER_PORT."""


@dataclasses.dataclass(frozen=True)
class RankInfo:
    """The result of discovery: everything ``hora._core.init`` needs besides the settings."""

    rank: int = 0
    size: int = 1
    local_rank: int = 0
    local_size: int = 1
    cross_rank: int = 0
    cross_size: int = 1
    store_host: str = ""
    store_port: int = 0
    serve_store: bool = False
    secret: str = ""
    hostname: str = ""
    source: str = "alone"
    store_served_by_rank0: bool = False
    """No launcher serves the store: rank 0 does (every rank knows it, to say so in its errors)."""


class _Env:
    """Reads HORA_<name>/HOROVOD_<name> (only names declared in the engine's table) and raw names.

    With the real environment the engine's own lookup (``_core.lookup_env``) is used, so that
    Python and C++ agree on precedence; with an explicit mapping (tests) the same rules are applied
    to the mapping.
    """

    def __init__(self, environ: Mapping[str, str] | None) -> None:
        self._mapping = environ

    def raw(self, name: str) -> str | None:
        env = os.environ if self._mapping is None else self._mapping
        value = env.get(name)
        return value if value else None

    def hora(self, name: str) -> str | None:
        from hora import _core

        if self._mapping is None:
            return _core.lookup_env(name)
        if name not in {entry[0] for entry in _core.env_vars()}:
            raise ValueError(f"'{name}' is not a declared Hora environment variable")
        for prefix in ("HORA_", "HOROVOD_"):
            value = self._mapping.get(prefix + name)
            if value:
                return value
        return None


def _int(value: str | None, what: str, default: int | None = None) -> int:
    if value is None:
        if default is None:
            raise ValueError(f"{what} is not set")
        return default
    try:
        return int(value.strip())
    except ValueError:
        raise ValueError(f"{what}={value!r} is not an integer") from None


def default_cross(rank: int, size: int, local_size: int) -> tuple[int, int]:
    """Cross rank and size when the source does not say: exact when every host runs
    ``local_size`` ranks in consecutive blocks, a best effort otherwise."""
    hosts = max(1, -(-size // local_size))
    cross_size = size // local_size if size % local_size == 0 else hosts
    return min(rank // local_size, cross_size - 1), cross_size


def _secret(env: _Env, from_launcher: bool) -> str:
    secret = env.hora("SECRET") or (env.raw("_HOROVOD_SECRET_KEY") if from_launcher else None)
    if secret:
        return secret
    path = env.hora("SECRET_FILE")
    if not path:
        return ""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read().strip()
    except OSError as e:
        raise ValueError(f"HORA_SECRET_FILE={path}: cannot read it ({e.strerror})") from None
    if not text:
        raise ValueError(f"HORA_SECRET_FILE={path} is empty; put the job secret in it")
    return text


def started_by(environ: Mapping[str, str] | None = None) -> str:
    """The program that most likely started this process with torchrun's variables or a
    torch.distributed store, for messages: a trainer whose module is loaded, else torchrun when
    its variables say so (``environ``: variables to read instead of the process's)."""
    modules = sys.modules
    if "ray.train" in modules:
        return "Ray Train"
    if "lightning" in modules or "pytorch_lightning" in modules:
        return "Lightning"
    if "deepspeed" in modules:
        return "DeepSpeed"
    if "accelerate" in modules:
        return "Accelerate"
    if _Env(environ).raw("TORCHELASTIC_RUN_ID"):
        return "torchrun"
    return "torch.distributed"


def secret_fix(launcher: str, store: bool) -> str:
    """The one line that gives a job started by ``launcher`` a secret; ``store``: the ranks
    share a torch.distributed store (``init_process_group``), so the secret may travel there.
    "" for the launchers Hora reads itself (horarun, mpirun, Slurm): ``checked_secret``'s own
    advice is theirs."""
    if launcher in ("horarun", "mpirun", "slurm"):
        return ""
    how = "'HORA_SECRET_THROUGH_STORE': '1'" if store else "'HORA_SECRET': '<random hex>'"
    if launcher == "Ray Train":
        return f"ray.init(runtime_env={{'env_vars': {{{how}}}}})"
    if store:
        return "export HORA_SECRET_THROUGH_STORE=1 on every host before starting the job"
    return ("export HORA_SECRET=<random hex> (the same on every host) before starting the job, "
            "for example from: python -c 'import secrets; print(secrets.token_hex(32))'")


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback addresses (``127.0.0.0/8``, ``::1``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _flag(value: str | None) -> bool:
    text = (value or "").strip().lower()
    if text in ("true", "yes"):
        return True
    try:
        return int(text) > 0
    except ValueError:
        return False


def env_secret(environ: Mapping[str, str] | None = None) -> str:
    """The secret ``HORA_SECRET`` or ``HORA_SECRET_FILE`` gives, or "" (no launcher's names).

    Raises:
        ValueError: ``HORA_SECRET_FILE`` cannot be read or is empty.
    """
    return _secret(_Env(environ), from_launcher=False)


def env_flag(name: str, environ: Mapping[str, str] | None = None) -> bool:
    """True when ``HORA_<name>`` (or ``HOROVOD_<name>``) is set to 1, true or yes."""
    return _flag(_Env(environ).hora(name))


def checked_secret(info: RankInfo, listen: str, environ: Mapping[str, str] | None = None,
                   fix: str = "") -> str:
    """The secret this rank's TCP connections prove, after checking that the job may run with it.

    A job with a secret, a job of one rank, and a job that gets its store over MPI pass as they
    are. Without a secret, a job whose store is on the loopback and whose ranks listen there
    (``listen`` from ``listen_host``) runs unauthenticated: only this host can reach it. Otherwise
    ``HORA_INSECURE=1`` lets it run (rank 0 logs a warning), and without that it may not start.

    ``fix`` is the one line that gives a secret in a job started as ``info.source`` says, when
    that is not ``horarun``'s way (it leads the message).

    Raises:
        ValueError: no secret, a non-loopback address, and no ``HORA_INSECURE``; the message
            names what to set.
    """
    if info.secret or info.size == 1 or not info.store_host:
        return info.secret
    if is_loopback(info.store_host) and (not listen or is_loopback(listen)):
        return ""
    where = listen or info.store_host
    if _flag(_Env(environ).hora("INSECURE")):
        if info.rank == 0:
            _log.warning(
                "hora: HORA_INSECURE is set: rank 0 serves the store at %s:%d and every rank "
                "listens without a job secret; anyone who can reach these ports can join the job",
                info.store_host, info.store_port,
            )
        return ""
    store = f"{info.store_host}:{info.store_port}" if info.store_port else info.store_host
    raise ValueError(
        f"{info.source}: rank {info.rank} would listen on the non-loopback address {where} "
        f"(store {store}) without a job secret, so anyone on the network could join the job. "
        + (f"To give it one: {fix}. Otherwise: " if fix else "")
        + "Set HORA_SECRET to the same random value on every rank "
        "(for example the output of: python -c 'import secrets; print(secrets.token_hex(32))'), "
        "or HORA_SECRET_FILE to a file holding it; or start the job with horarun, which makes "
        "one; or, on a trusted cluster only, set HORA_INSECURE=1"
    )


def _checked(info: RankInfo) -> RankInfo:
    if info.size < 1 or not 0 <= info.rank < info.size:
        raise ValueError(f"{info.source}: rank {info.rank} is outside a job of size {info.size}")
    if info.local_size < 1 or not 0 <= info.local_rank < info.local_size:
        raise ValueError(
            f"{info.source}: local rank {info.local_rank} is outside a host of {info.local_size}"
        )
    if info.cross_size < 1 or not 0 <= info.cross_rank < info.cross_size:
        raise ValueError(
            f"{info.source}: cross rank {info.cross_rank} is outside {info.cross_size} hosts"
        )
    if info.size > 1 and (not info.store_host or info.store_port <= 0):
        raise ValueError(
            f"{info.source}: a job of {info.size} ranks needs a rendezvous store; set "
            "HORA_RENDEZVOUS_ADDR and HORA_RENDEZVOUS_PORT (or MASTER_ADDR and MASTER_PORT)"
        )
    return info


def _from_launcher(env: _Env) -> RankInfo | None:
    rank_text = env.hora("RANK")
    if rank_text is None:
        return None
    rank = _int(rank_text, "HORA_RANK")
    size = _int(env.hora("SIZE"), "HORA_SIZE")
    local_rank = _int(env.hora("LOCAL_RANK"), "HORA_LOCAL_RANK", rank)
    local_size = _int(env.hora("LOCAL_SIZE"), "HORA_LOCAL_SIZE", size)
    cross = default_cross(rank, size, local_size)
    cross_rank = _int(env.hora("CROSS_RANK"), "HORA_CROSS_RANK", cross[0])
    cross_size = _int(env.hora("CROSS_SIZE"), "HORA_CROSS_SIZE", cross[1])
    host = env.hora("RENDEZVOUS_ADDR") or env.raw("HOROVOD_GLOO_RENDEZVOUS_ADDR") or ""
    port_text = env.hora("RENDEZVOUS_PORT") or env.raw("HOROVOD_GLOO_RENDEZVOUS_PORT")
    port = _int(port_text, "HORA_RENDEZVOUS_PORT", 0)
    return RankInfo(
        rank, size, local_rank, local_size, cross_rank, cross_size,
        store_host=host, store_port=port, serve_store=False,
        secret=_secret(env, from_launcher=True),
        hostname=env.hora("HOSTNAME") or socket.gethostname(), source="horarun",
    )


def _self_served(env: _Env, source: str, rank: int, size: int, local_rank: int, local_size: int,
                 cross: tuple[int, int], host: str, port: int) -> RankInfo:
    """A job without a launcher-run store: rank 0 serves it."""
    if size == 1:
        host, port = "", 0
    return RankInfo(
        rank, size, local_rank, local_size, cross[0], cross[1],
        store_host=host, store_port=port, serve_store=size > 1 and rank == 0,
        store_served_by_rank0=size > 1,
        secret=_secret(env, from_launcher=False),
        hostname=socket.gethostname(), source=source,
    )


def _from_torchrun(env: _Env) -> RankInfo | None:
    if env.raw("RANK") is None or env.raw("WORLD_SIZE") is None:
        return None
    rank = _int(env.raw("RANK"), "RANK")
    size = _int(env.raw("WORLD_SIZE"), "WORLD_SIZE")
    local_rank = _int(env.raw("LOCAL_RANK"), "LOCAL_RANK", 0)
    local_size = _int(env.raw("LOCAL_WORLD_SIZE"), "LOCAL_WORLD_SIZE", size)
    cross = default_cross(rank, size, local_size)
    if env.raw("GROUP_RANK") is not None:
        cross_size = _int(env.raw("GROUP_WORLD_SIZE"), "GROUP_WORLD_SIZE", cross[1])
        cross = (_int(env.raw("GROUP_RANK"), "GROUP_RANK"), cross_size)
    host = env.hora("RENDEZVOUS_ADDR") or env.raw("MASTER_ADDR") or "127.0.0.1"
    explicit_port = env.hora("RENDEZVOUS_PORT")
    if explicit_port is not None:
        port = _int(explicit_port, "HORA_RENDEZVOUS_PORT")
    else:
        port = _int(env.raw("MASTER_PORT"), "MASTER_PORT", DEFAULT_MASTER_PORT) + 1
    return _self_served(env, started_by(env._mapping), rank, size, local_rank, local_size,
                        cross, host, port)


def _store_address(env: _Env, fallback_host: str | None) -> tuple[str, int]:
    host = env.hora("RENDEZVOUS_ADDR") or env.raw("MASTER_ADDR") or fallback_host or ""
    port_text = env.hora("RENDEZVOUS_PORT") or env.raw("MASTER_PORT")
    return host, _int(port_text, "HORA_RENDEZVOUS_PORT", DEFAULT_RENDEZVOUS_PORT)


def _from_mpirun(env: _Env) -> RankInfo | None:
    if env.raw("OMPI_COMM_WORLD_RANK") is not None:
        rank = _int(env.raw("OMPI_COMM_WORLD_RANK"), "OMPI_COMM_WORLD_RANK")
        size = _int(env.raw("OMPI_COMM_WORLD_SIZE"), "OMPI_COMM_WORLD_SIZE")
        local_rank = _int(env.raw("OMPI_COMM_WORLD_LOCAL_RANK"), "OMPI_COMM_WORLD_LOCAL_RANK", 0)
        local_size = _int(env.raw("OMPI_COMM_WORLD_LOCAL_SIZE"), "OMPI_COMM_WORLD_LOCAL_SIZE", size)
    elif env.raw("PMI_RANK") is not None and env.raw("PMI_SIZE") is not None:
        rank = _int(env.raw("PMI_RANK"), "PMI_RANK")
        size = _int(env.raw("PMI_SIZE"), "PMI_SIZE")
        local_rank = _int(env.raw("MPI_LOCALRANKID"), "MPI_LOCALRANKID", 0)
        local_size = _int(env.raw("MPI_LOCALNRANKS"), "MPI_LOCALNRANKS", size)
    else:
        return None
    cross = default_cross(rank, size, local_size)
    # Every rank on this host (a single-host mpirun): the store can default to the loopback.
    host, port = _store_address(env, "127.0.0.1" if local_size == size else None)
    return _self_served(env, "mpirun", rank, size, local_rank, local_size, cross, host, port)


def parse_tasks_per_node(text: str) -> list[int]:
    """Expand Slurm's compressed tasks-per-node list: ``"2(x3),1"`` -> ``[2, 2, 2, 1]``."""
    counts: list[int] = []
    for item in text.split(","):
        match = re.fullmatch(r"\s*(\d+)(?:\(x(\d+)\))?\s*", item)
        if match is None:
            raise ValueError(f"cannot parse Slurm tasks per node {text!r}")
        counts.extend([int(match.group(1))] * int(match.group(2) or 1))
    return counts


def first_host(nodelist: str) -> str:
    """The first host of a Slurm node list: ``"gpu[07-09,12],cpu1"`` -> ``"gpu07"``."""
    depth = 0
    end = len(nodelist)
    for i, ch in enumerate(nodelist):
        depth += ch == "["
        depth -= ch == "]"
        if ch == "," and depth == 0:
            end = i
            break
    first = nodelist[:end].strip()
    match = re.fullmatch(r"([^\[]*)\[([^\]]*)\](.*)", first)
    if match is None:
        return first
    prefix, ranges, suffix = match.groups()
    return prefix + ranges.split(",")[0].split("-")[0].strip() + suffix


def _slurm_local(env: _Env, size: int, node_id: int, local_rank: int) -> tuple[int, int, int]:
    """(local_size, cross_rank, cross_size) from Slurm's tasks-per-node information."""
    per_node_text = env.raw("SLURM_STEP_TASKS_PER_NODE") or env.raw("SLURM_TASKS_PER_NODE")
    if per_node_text is not None:
        per_node = parse_tasks_per_node(per_node_text)
        if 0 <= node_id < len(per_node):
            with_slot = [n for n, count in enumerate(per_node) if count > local_rank]
            if node_id in with_slot:
                return per_node[node_id], with_slot.index(node_id), len(with_slot)
    per_node_fixed = env.raw("SLURM_NTASKS_PER_NODE")
    local_size = _int(per_node_fixed, "SLURM_NTASKS_PER_NODE", 0) if per_node_fixed else 0
    if local_size <= 0:
        nodes = _int(env.raw("SLURM_STEP_NUM_NODES") or env.raw("SLURM_NNODES"), "SLURM_NNODES", 1)
        local_size = max(1, -(-size // max(1, nodes)))
    local_size = max(local_size, local_rank + 1)
    cross_size = max(1, -(-size // local_size))
    return local_size, min(node_id, cross_size - 1), cross_size


def _from_slurm(env: _Env) -> RankInfo | None:
    if env.raw("SLURM_PROCID") is None or env.raw("SLURM_NTASKS") is None:
        return None
    rank = _int(env.raw("SLURM_PROCID"), "SLURM_PROCID")
    size = _int(env.raw("SLURM_NTASKS"), "SLURM_NTASKS")
    local_rank = _int(env.raw("SLURM_LOCALID"), "SLURM_LOCALID", 0)
    node_id = _int(env.raw("SLURM_NODEID"), "SLURM_NODEID", 0)
    local_size, cross_rank, cross_size = _slurm_local(env, size, node_id, local_rank)
    nodelist = (env.raw("SLURM_STEP_NODELIST") or env.raw("SLURM_JOB_NODELIST")
                or env.raw("SLURM_NODELIST"))
    host, port = _store_address(env, first_host(nodelist) if nodelist else None)
    return _self_served(env, "slurm", rank, size, local_rank, local_size,
                        (cross_rank, cross_size), host, port)


def under_mpirun(environ: Mapping[str, str] | None = None) -> bool:
    """True when an MPI launcher started this process (OMPI_COMM_WORLD_SIZE or PMI_SIZE set)."""
    env = _Env(environ)
    return env.raw("OMPI_COMM_WORLD_SIZE") is not None or env.raw("PMI_SIZE") is not None


def _transport_name(value: str, var: str) -> str:
    name = value.strip().lower()
    if name == "gloo":
        name = "tcp"
    if name not in ("tcp", "mpi"):
        raise ValueError(f"{var}={value!r} is not a transport; use mpi or tcp (alias gloo)")
    return name


class Transports(NamedTuple):
    """The transports of the two roles: ``controller`` negotiates, ``cpu_operations`` runs the
    collectives on CPU tensors. Each is ``"mpi"`` or ``"tcp"``."""

    controller: str
    cpu_operations: str

    @property
    def uses_mpi(self) -> bool:
        """True when either role runs on MPI (the job must then be started by mpirun)."""
        return "mpi" in self

    @property
    def uses_tcp(self) -> bool:
        """True when either role runs on TCP."""
        return "tcp" in self


def select_transport(
    environ: Mapping[str, str] | None = None, *, mpi_built: bool, comm_given: bool = False
) -> Transports:
    """The transports Hora runs on, one per role: ``Transports(controller, cpu_operations)``.

    ``HORA_CONTROLLER`` (negotiation) and ``HORA_CPU_OPERATIONS`` (CPU collectives) each take
    ``mpi`` or ``tcp`` (``gloo`` is accepted for ``tcp``); the ``HOROVOD_`` names work too. They
    may differ: ``HORA_CONTROLLER=mpi HORA_CPU_OPERATIONS=tcp`` negotiates over MPI and runs the
    collectives over TCP, and the reverse works too. When only one variable is set the other
    follows it. With neither set, both are MPI when this build has it and the process runs under
    an MPI launcher (``mpirun``/``mpiexec``) or a communicator was given to
    ``hora.init(comm=...)``; otherwise both are the built-in TCP transport.

    Any use of MPI needs the job started by an MPI launcher; with TCP beside MPI, the engine
    bootstraps the TCP rendezvous over MPI, so mpirun alone still suffices.

    Raises:
        ValueError: a variable names an unknown transport.
        NotSupportedError: MPI is asked for but not built, or a communicator is given while
            neither role runs on MPI.
    """
    env = _Env(environ)
    controller_text = env.hora("CONTROLLER")
    cpu_text = env.hora("CPU_OPERATIONS")
    controller = _transport_name(controller_text, "HORA_CONTROLLER") if controller_text else None
    cpu = _transport_name(cpu_text, "HORA_CPU_OPERATIONS") if cpu_text else None
    if controller is None and cpu is None:
        controller = "mpi" if comm_given or (mpi_built and under_mpirun(environ)) else "tcp"
    chosen = Transports(controller or cpu or "tcp", cpu or controller or "tcp")
    if comm_given and not chosen.uses_mpi:
        raise NotSupportedError(
            "hora.init(comm=...) runs Hora on an MPI communicator, but HORA_CONTROLLER / "
            "HORA_CPU_OPERATIONS select tcp; unset them or set one of them to mpi"
        )
    if chosen.uses_mpi and not mpi_built:
        raise NotSupportedError(
            "the MPI transport was asked for (HORA_CONTROLLER / HORA_CPU_OPERATIONS = mpi, or "
            "hora.init(comm=...)), but this build of Hora has no MPI: install an MPI (for "
            "example Debian's libopenmpi-dev) and reinstall Hora, or use tcp"
        )
    return chosen


def discover(environ: Mapping[str, str] | None = None) -> RankInfo:
    """Find this process's place in the job (see the module docstring for the sources).

    Args:
        environ: variables to read instead of the process environment (for tests).

    Raises:
        ValueError: a source was found but its variables are inconsistent or incomplete.
    """
    env = _Env(environ)
    for source in (_from_launcher, _from_torchrun, _from_mpirun, _from_slurm):
        info = source(env)
        if info is not None:
            return _checked(info)
    return RankInfo(hostname=socket.gethostname())


def listen_host(store_host: str) -> str:
    """The address this rank listens on and advertises to its peers.

    ``HORA_IFACE`` names an interface (``eth0``) or an address; otherwise, for a store on the
    loopback (a job on one host), ``127.0.0.1``; otherwise, the local address the routing table
    uses to reach the store (the peers reach this rank the same way); "" when there is no store or
    no route (the engine then uses this host's resolved name). Every listener of this rank (the
    mesh and, on rank 0, the store it serves) binds exactly this address.

    Raises:
        ValueError: ``HORA_IFACE`` names an interface without an IPv4 address.
    """
    from hora import _core

    iface = _core.lookup_env("IFACE")
    if iface:
        try:
            ipaddress.ip_address(iface)
            return iface
        except ValueError:
            pass
        addresses = netaddr.interface_addresses()
        if iface not in addresses:
            raise ValueError(
                f"HORA_IFACE={iface} is not an interface with an IPv4 address here "
                f"(interfaces: {', '.join(sorted(addresses)) or 'none'})"
            )
        return addresses[iface]
    if not store_host or store_host == "0.0.0.0":
        return ""
    if is_loopback(store_host):
        return "127.0.0.1"
    try:
        return netaddr.route_via_socket(socket.gethostbyname(store_host))
    except OSError:
        return ""
