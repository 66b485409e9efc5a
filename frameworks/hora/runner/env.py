"""The environment of every rank: engine settings from the command line, topology, rendezvous.

Local ranks inherit the launcher's whole environment. Remote ranks get only what is exported:
the names in :data:`EXPORTED_NAMES`, every variable whose name starts with one of
:data:`EXPORTED_PREFIXES`, and what the user names with ``-x NAME`` / ``-x NAME=VALUE``. The job
secret is never part of either: it is handed over separately (see :func:`private_env`).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from hora.runner.slots import SlotInfo

EXPORTED_NAMES = (
    "PATH", "PYTHONPATH", "LD_LIBRARY_PATH", "VIRTUAL_ENV", "CONDA_PREFIX", "CONDA_DEFAULT_ENV",
    "PYTHONUNBUFFERED", "OMP_NUM_THREADS", "LANG", "LC_ALL",
)
"""Variables carried to remote ranks when the launcher has them."""

EXPORTED_PREFIXES = ("HORA_", "HOROVOD_", "NCCL_")
"""Prefixes of variables carried to remote ranks."""

SECRET_NAMES = ("HORA_SECRET", "HOROVOD_SECRET", "_HOROVOD_SECRET_KEY")
"""Never exported from the launcher's environment: every job gets a fresh secret."""

LOG_LEVELS = ("trace", "debug", "info", "warning", "error", "fatal")

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _non_negative(kind: Callable[[str], float]) -> Callable[[str], float]:
    def parse(text: str) -> float:
        value = kind(text)
        if value < 0:
            raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
        return value
    parse.__name__ = kind.__name__
    return parse


def _log_level(text: str) -> str:
    level = text.strip().lower()
    if level not in LOG_LEVELS:
        raise argparse.ArgumentTypeError(f"must be one of {', '.join(LOG_LEVELS)}")
    return level


@dataclasses.dataclass(frozen=True)
class Setting:
    """A command-line flag that sets one engine variable (``HORA_<var>``).

    ``kind`` None is a flag without a value that sets ``value_when_set``.
    """

    flag: str
    var: str
    help: str
    kind: Callable[[str], object] | None = None
    to_env: Callable[[Any], str] = str
    value_when_set: str = "1"

    @property
    def dest(self) -> str:
        return self.flag.lstrip("-").replace("-", "_")


SETTINGS: tuple[Setting, ...] = (
    Setting("--fusion-threshold-mb", "FUSION_THRESHOLD", "fusion buffer size in MB (0 = off)",
            _non_negative(float), lambda mb: str(round(float(mb) * 1048576))),
    Setting("--cycle-time-ms", "CYCLE_TIME", "background loop batching time in ms",
            _non_negative(float), _number),
    Setting("--cache-capacity", "CACHE_CAPACITY", "response cache entries (0 = off)",
            _non_negative(int), str),
    Setting("--disable-cache", "CACHE_CAPACITY", "turn the response cache off",
            value_when_set="0"),
    Setting("--timeline-filename", "TIMELINE", "write a Chrome-trace timeline here (rank 0)",
            str),
    Setting("--timeline-mark-cycles", "TIMELINE_MARK_CYCLES",
            "mark background-loop cycles in the timeline"),
    Setting("--autotune", "AUTOTUNE", "tune fusion threshold and cycle time online"),
    Setting("--autotune-log-file", "AUTOTUNE_LOG", "CSV log of the autotuner's samples", str),
    Setting("--autotune-warmup-samples", "AUTOTUNE_WARMUP_SAMPLES",
            "autotune samples discarded before scoring", _non_negative(int), str),
    Setting("--autotune-steps-per-sample", "AUTOTUNE_STEPS_PER_SAMPLE",
            "training steps in one autotune sample", _non_negative(int), str),
    Setting("--no-stall-check", "STALL_CHECK_DISABLE", "turn the stall inspector off"),
    Setting("--stall-check-warning-time-seconds", "STALL_CHECK_TIME_SECONDS",
            "seconds before ranks missing a tensor are reported", _non_negative(float),
            _number),
    Setting("--stall-check-shutdown-time-seconds", "STALL_SHUTDOWN_TIME_SECONDS",
            "seconds before a stall shuts the job down (0 = never)", _non_negative(float),
            _number),
    Setting("--log-level", "LOG_LEVEL", f"engine log level: {', '.join(LOG_LEVELS)}",
            _log_level, str),
    Setting("--log-without-timestamp", "LOG_HIDE_TIME", "drop timestamps from log lines"),
    Setting("--start-timeout", "START_TIMEOUT",
            "seconds the ranks wait for each other at start (default 30)", _non_negative(float),
            _number),
    Setting("--gloo-timeout-seconds", "TIMEOUT_SECONDS",
            "seconds a silent peer may stall a collective before the job fails",
            _non_negative(float), _number),
)
"""Every flag that sets an engine variable; ``launch`` builds its options from this table."""


@dataclasses.dataclass(frozen=True)
class Switch:
    """A ``--NAME`` / ``--no-NAME`` pair that sets ``HOROVOD_<var>`` (and ``HORA_<var>``, which
    the engine reads first) to 1 or 0, as horovodrun does; neither flag leaves it unset."""

    name: str
    var: str
    help: str

    @property
    def dest(self) -> str:
        return self.name.replace("-", "_")


SWITCHES: tuple[Switch, ...] = (
    Switch("hierarchical-allreduce", "HIERARCHICAL_ALLREDUCE",
           "allreduce within each host, then across hosts, then within each host again "
           "(global set; hosts with equal ranks; default: CPU tensors when hosts run 2+ ranks)"),
    Switch("hierarchical-allgather", "HIERARCHICAL_ALLGATHER",
           "allgather within each host, then across hosts, then within each host again"),
)
"""The on/off flags that set an engine variable either way."""


def settings_env(args: argparse.Namespace) -> dict[str, str]:
    """``HORA_*`` engine settings (and transport choice) from the parsed command line."""
    env: dict[str, str] = {}
    for setting in SETTINGS:
        value = getattr(args, setting.dest, None)
        if setting.kind is None:
            if value:
                env["HORA_" + setting.var] = setting.value_when_set
        elif value is not None:
            env["HORA_" + setting.var] = setting.to_env(value)
    for switch in SWITCHES:
        value = getattr(args, switch.dest, None)
        if value is not None:
            env["HORA_" + switch.var] = env["HOROVOD_" + switch.var] = "1" if value else "0"
    if getattr(args, "mpi", False):
        env["HORA_CONTROLLER"] = env["HORA_CPU_OPERATIONS"] = "mpi"
    elif getattr(args, "gloo", False) or getattr(args, "tcp", False):
        env["HORA_CONTROLLER"] = env["HORA_CPU_OPERATIONS"] = "tcp"
    if getattr(args, "tcp", False):
        env["NCCL_IB_DISABLE"] = "1"  # Horovod's meaning of --tcp: no InfiniBand for NCCL
    return env


TOPOLOGY_NAMES = ("RANK", "SIZE", "LOCAL_RANK", "LOCAL_SIZE", "CROSS_RANK", "CROSS_SIZE",
                  "HOSTNAME")
"""Coordinates of a rank, exported as ``HORA_<name>`` and, as horovodrun does, ``HOROVOD_<name>``."""


def topology_env(slot: SlotInfo) -> dict[str, str]:
    """Rank, size, local and cross coordinates and host name of one rank.

    Each is set under both prefixes: scripts and tests written for Horovod read the
    ``HOROVOD_`` names that horovodrun exports.
    """
    values = (slot.rank, slot.size, slot.local_rank, slot.local_size, slot.cross_rank,
              slot.cross_size, slot.hostname)
    env: dict[str, str] = {}
    for prefix in ("HORA_", "HOROVOD_"):
        env.update({prefix + name: str(value) for name, value in zip(TOPOLOGY_NAMES, values)})
    return env


TORCH_NAMES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
               "GROUP_WORLD_SIZE", "ROLE_RANK", "ROLE_WORLD_SIZE")
"""torchrun's coordinates of a rank, which horarun exports too (see :func:`torch_env`)."""


def torch_env(slot: SlotInfo, host_index: int, hosts: int,
              master: tuple[str, int] | None) -> dict[str, str]:
    """The variables torchrun gives a rank, so that libraries reading them (torch's ``env://``
    rendezvous, Lightning, Accelerate, DeepSpeed, Hugging Face) see the job horarun started:
    RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK / GROUP_WORLD_SIZE (the host's
    index and the number of hosts), ROLE_RANK / ROLE_WORLD_SIZE, and MASTER_ADDR / MASTER_PORT
    when ``master`` gives them (where rank 0 may serve torch's store)."""
    values = (slot.rank, slot.size, slot.local_rank, slot.local_size, host_index, hosts,
              slot.rank, slot.size)
    env = {name: str(value) for name, value in zip(TORCH_NAMES, values)}
    if master is not None:
        env["MASTER_ADDR"], env["MASTER_PORT"] = master[0], str(master[1])
    return env


def usable_cores() -> int:
    """CPUs this process may run on (its affinity mask), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def core_shares(cores: Sequence[int], ranks: int) -> list[list[int]] | None:
    """The CPUs each of ``ranks`` processes on this machine is bound to, from ``cores`` (the
    CPUs the launcher may use): with at least as many CPUs as ranks, each rank its own
    contiguous share, as even as can be; with a whole multiple of ranks per CPU, one CPU each,
    round robin (rank i on CPU i mod n). None otherwise (some CPU would carry more ranks than
    another, and the slowest rank sets the pace) and for a single rank.

    A rank's threads then stay on its CPUs: its background thread hands work to the calling
    thread within one core's caches, and ranks never trade cores between steps.
    """
    ordered = sorted(cores)
    n = len(ordered)
    if ranks <= 1 or n == 0:
        return None
    if n >= ranks:
        return [ordered[i * n // ranks:(i + 1) * n // ranks] for i in range(ranks)]
    if ranks % n == 0:
        return [[ordered[i % n]] for i in range(ranks)]
    return None


def parse_cpu_list(text: str) -> list[int]:
    """``0-3,6`` (as /proc/<pid>/status and ``taskset -c`` write CPUs) -> [0, 1, 2, 3, 6]."""
    cpus: list[int] = []
    for part in text.strip().split(","):
        if not part:
            continue
        first, _, last = part.partition("-")
        cpus.extend(range(int(first), int(last or first) + 1))
    return cpus


def pinned_processes(cores: Sequence[int], proc: str = "/proc") -> list[tuple[int, str, list[int]]]:
    """Other processes pinned to some of ``cores`` but not to all of them, as (pid, name, CPUs):
    another job's bound ranks, a service given its own CPUs. Binding this job's ranks too would
    stack them on the same CPUs. Kernel threads (no command line), which the kernel pins to
    each CPU, do not count; nor does this process."""
    wanted = set(cores)
    found = []
    for entry in os.listdir(proc):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(os.path.join(proc, entry, "cmdline"), "rb") as f:
                if not f.read(1):
                    continue
            with open(os.path.join(proc, entry, "status"), encoding="utf-8") as f:
                fields = dict(line.split(":", 1) for line in f if ":" in line)
        except OSError:  # gone meanwhile, or not ours to read
            continue
        allowed = parse_cpu_list(fields.get("Cpus_allowed_list", ""))
        if allowed and wanted & set(allowed) and not wanted <= set(allowed):
            found.append((int(entry), fields.get("Name", "?").strip(), allowed))
    return sorted(found)


def auto_binding_obstacle(cores: Sequence[int], ranks: int,
                          pinned: Sequence[tuple[int, str, list[int]]]) -> str | None:
    """Why ``--bind-to auto`` leaves ``ranks`` ranks on this machine unbound, or None when it
    binds them (see ``core_shares``): it binds only where no CPU carries two ranks and no other
    process is pinned to the CPUs."""
    if ranks > len(cores):
        return f"{ranks} ranks on {len(cores)} CPUs"
    if pinned:
        pid, name, cpus = pinned[0]
        more = f" and {len(pinned) - 1} other(s)" if len(pinned) > 1 else ""
        return f"process {pid} ({name}){more} is bound to CPUs {cpu_list(cpus)}"
    return None


def bind_like_horarun(local_rank: int, local_size: int) -> list[int] | None:
    """Binds every thread of this process to the CPUs ``horarun --bind-to core`` gives local
    rank ``local_rank`` of ``local_size`` (threads started later inherit them), for processes
    another launcher started (the peers in the benchmarks). Returns the CPUs, or None when
    horarun would leave the rank unbound."""
    shares = core_shares(sorted(os.sched_getaffinity(0)), local_size)
    if shares is None:
        return None
    for thread in os.listdir("/proc/self/task"):
        os.sched_setaffinity(int(thread), shares[local_rank])
    return shares[local_rank]


def cpu_list(cpus: Sequence[int]) -> str:
    """``0-3,6``: CPUs as ``taskset -c`` writes them."""
    runs: list[list[int]] = []
    for cpu in sorted(cpus):
        if runs and cpu == runs[-1][1] + 1:
            runs[-1][1] = cpu
        else:
            runs.append([cpu, cpu])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def omp_threads_env(environ: Mapping[str, str], local_size: int,
                    cores: int | None = None) -> dict[str, str]:
    """``OMP_NUM_THREADS`` = cores // local ranks (at least 1), unless the user has set it.

    Each rank's framework otherwise starts one thread per core, and ranks sharing a host
    fight for the cores (as torchrun, the launcher sets a default).
    """
    if "OMP_NUM_THREADS" in environ:
        return {}
    cores = usable_cores() if cores is None else cores
    return {"OMP_NUM_THREADS": str(max(1, cores // max(1, local_size)))}


def rendezvous_env(address: str, port: int) -> dict[str, str]:
    """Where the ranks find the launcher's rendezvous store."""
    return {"HORA_RENDEZVOUS_ADDR": address, "HORA_RENDEZVOUS_PORT": str(port)}


def interface_env(interface: str | None) -> dict[str, str]:
    """HORA_IFACE (the interface whose address ranks listen on), when known."""
    return {"HORA_IFACE": interface} if interface else {}


def private_env(secret: str) -> dict[str, str]:
    """Variables that must not appear on any command line: the job secret."""
    return {"HORA_SECRET": secret}


def parse_exports(specs: Iterable[str], environ: Mapping[str, str]) -> dict[str, str]:
    """``-x NAME`` (the launcher's value, skipped when unset) and ``-x NAME=VALUE`` items.

    Raises:
        ValueError: not a valid variable name.
    """
    result: dict[str, str] = {}
    for spec in specs:
        name, sep, value = spec.partition("=")
        if not _NAME.match(name):
            raise ValueError(f"-x {spec!r}: {name!r} is not a valid variable name")
        if sep:
            result[name] = value
        elif name in environ:
            result[name] = environ[name]
    return result


def exported_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The part of the launcher's environment carried to remote ranks (see the module doc)."""
    return {
        name: value for name, value in environ.items()
        if (name in EXPORTED_NAMES or name.startswith(EXPORTED_PREFIXES))
        and name not in SECRET_NAMES and _NAME.match(name)
    }


def without_secrets(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` less any secret the launcher itself was given."""
    return {k: v for k, v in environ.items() if k not in SECRET_NAMES}


def undeclared(env: Mapping[str, str], declared: Iterable[str]) -> list[str]:
    """``HORA_*`` names in ``env`` that the engine does not declare (should be none)."""
    known = {"HORA_" + name for name in declared}
    return sorted(k for k in env if k.startswith("HORA_") and k not in known)
