"""A job on Hora's built-in transport: rendezvous store, one child per rank, supervision.

Hosts that are this machine run their ranks as local children; other hosts are reached with ssh
(``ssh_exec``). The launcher serves the rendezvous store: on 127.0.0.1 when every host is local,
else on every interface, advertised to the ranks as this machine's address on the interface that
routes to the first remote host (or the address of ``--network-interface``).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import secrets
import shlex
import signal
import sys
import threading
from collections.abc import Iterable, Mapping, Sequence

from hora.runner import env as envs
from hora.runner import hosts as hostlib
from hora.runner import ssh_exec
from hora.runner.local_exec import GRACE_SECONDS, Job, RankSpec
from hora.runner.output import FileSink, PrefixSink, Sink
from hora.runner.slots import SlotInfo, used_hosts


@dataclasses.dataclass(frozen=True)
class Rendezvous:
    """Where the store listens, the address ranks use for it, and the local ranks' interface."""

    bind_host: str
    address: str
    local_interface: str | None


@dataclasses.dataclass(frozen=True)
class Outcome:
    """How a job ended: the launcher's exit code and the first rank that failed, if any."""

    code: int
    failed_rank: int | None = None


def remote_hosts(names: Iterable[str], force_ssh: Iterable[str] = ()) -> list[str]:
    """The hosts among ``names`` that are reached with ssh (not this machine, or forced)."""
    forced = set(force_ssh)
    return [n for n in names if n in forced or not hostlib.is_local_host(n)]


def first_interface(spec: str | None) -> str | None:
    """The first name of a ``--network-interface eth0,eth1`` value."""
    if not spec:
        return None
    return next((name.strip() for name in spec.split(",") if name.strip()), None)


def choose_rendezvous(remote: Sequence[str], interface: str | None) -> Rendezvous:
    """Store address for a job whose ssh hosts are ``remote`` (see the module docstring).

    Raises:
        ValueError: unknown interface, or no route to the first remote host.
    """
    if interface is not None:
        addresses = hostlib.interface_addresses()
        if interface not in addresses:
            known = ", ".join(sorted(addresses)) or "none"
            raise ValueError(f"network interface {interface!r} has no IPv4 address here "
                             f"(interfaces: {known})")
    if not remote:
        loopback = interface or hostlib.interface_of("127.0.0.1")
        return Rendezvous("127.0.0.1", "127.0.0.1", loopback)
    if interface is not None:
        return Rendezvous("0.0.0.0", hostlib.interface_addresses()[interface], interface)
    address, device = hostlib.route_to(remote[0])
    return Rendezvous("0.0.0.0", address, device)


def torch_master(plan: Sequence[SlotInfo], remote: Sequence[str], rendezvous: Rendezvous,
                 environ: Mapping[str, str]) -> tuple[str, int] | None:
    """MASTER_ADDR and MASTER_PORT for the ranks (where rank 0 may serve torch's store): the
    user's when both are set; else, when rank 0 runs on this machine, its address as the other
    ranks reach it and a port free here now; else None (a port free on a remote host cannot be
    known from here: the user sets them, ``-x MASTER_ADDR=... -x MASTER_PORT=...``)."""
    if environ.get("MASTER_ADDR") and environ.get("MASTER_PORT"):
        return environ["MASTER_ADDR"], int(environ["MASTER_PORT"])
    if plan[0].hostname in remote:
        return None
    address = rendezvous.address if remote else "127.0.0.1"
    return address, hostlib.free_port(rendezvous.bind_host)


def _rank_env(slot: SlotInfo, settings: Mapping[str, str], rendezvous: Rendezvous, port: int,
              interface: str | None, hosts: Sequence[str],
              master: tuple[str, int] | None) -> dict[str, str]:
    env = dict(settings)
    env.update(envs.topology_env(slot))
    env.update(envs.torch_env(slot, hosts.index(slot.hostname), len(hosts), master))
    env.update(envs.rendezvous_env(rendezvous.address, port))
    env.update(envs.interface_env(interface))
    return env


def build_specs(args: argparse.Namespace, command: Sequence[str], plan: Sequence[SlotInfo],
                remote: Sequence[str], rendezvous: Rendezvous, port: int, secret: str,
                base_env: Mapping[str, str], remote_private: Mapping[str, str] | None = None,
                cwd: str | None = None) -> list[RankSpec]:
    """One :class:`RankSpec` per rank: local children, or ssh clients for remote hosts."""
    settings = envs.settings_env(args)
    exports = envs.parse_exports(args.env or [], base_env)
    interface_flag = first_interface(args.network_interface)
    if args.network_interface:
        settings.setdefault("NCCL_SOCKET_IFNAME", args.network_interface)
    grace = max(1, int(GRACE_SECONDS) - 2)
    private = envs.private_env(secret)
    local_slots = [slot for slot in plan if slot.hostname not in remote]
    hosts = used_hosts(list(plan))
    master = torch_master(plan, remote, rendezvous, {**base_env, **exports})
    shares = _core_shares(args, len(local_slots))
    cpus_of = {slot.rank: share for slot, share in zip(local_slots, shares or [])}
    specs = []
    omp_defaults: set[str] = set()
    for slot in plan:
        if slot.hostname in remote:
            env = envs.exported_env(base_env)
            env.update(exports)
            env.update(_rank_env(slot, settings, rendezvous, port, interface_flag, hosts,
                                 master))
            env.setdefault("PYTHONUNBUFFERED", "1")
            argv = ssh_exec.ssh_command(slot.hostname, cwd or os.getcwd(), env, command, grace,
                                        args.ssh_port, args.ssh_identity_file,
                                        getattr(args, "ssh_host_key_checking", "accept-new"))
            payload = ssh_exec.stdin_payload({**private, **(remote_private or {})})
            specs.append(RankSpec(slot.rank, slot.hostname, argv,
                                  envs.without_secrets(base_env), payload, remote=True))
        else:
            env = envs.without_secrets(base_env)
            env.update(exports)
            cpus = cpus_of.get(slot.rank)
            # A bound rank gets one thread per CPU of its share.
            threads = envs.omp_threads_env(env, 1 if cpus else slot.local_size,
                                           len(cpus) if cpus else None)
            env.update(threads)
            if threads and (cpus or slot.local_size > 1):
                omp_defaults.add(threads["OMP_NUM_THREADS"])
            env.update(_rank_env(slot, settings, rendezvous, port,
                                 interface_flag or rendezvous.local_interface, hosts, master))
            env.update(private)
            env.setdefault("PYTHONUNBUFFERED", "1")  # rank output appears line by line
            specs.append(RankSpec(slot.rank, slot.hostname, list(command), env, cpus=cpus))
    if omp_defaults:
        value = " or ".join(sorted(omp_defaults, key=int))
        basis = "the CPUs it is bound to" if shares else "cores / local ranks"
        _say(f"setting OMP_NUM_THREADS={value} for each rank on this host ({basis}), so ranks "
             "do not fight for the cores; set OMP_NUM_THREADS to choose")
    return specs


def _core_shares(args: argparse.Namespace, ranks: int) -> list[list[int]] | None:
    """The CPUs of each of the ``ranks`` started on this machine (all host names of this machine
    count together; see ``env.core_shares``), or None to leave them unbound: ``--bind-to none``;
    ``auto`` (the default) unless it is safe to bind; ``core`` whenever ``core_shares`` can."""
    choice = getattr(args, "bind_to", "auto")
    if choice == "none" or ranks <= 1:
        return None
    try:
        cores = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None
    if choice == "auto":
        obstacle = envs.auto_binding_obstacle(cores, ranks, envs.pinned_processes(cores))
        if obstacle is not None:
            _say(f"not binding the ranks to CPUs: {obstacle}; --bind-to core or none chooses")
            return None
    shares = envs.core_shares(cores, ranks)
    if shares is None:
        return None
    if ranks <= len(cores):
        each = " or ".join(str(n) for n in sorted({len(share) for share in shares}))
        how = f"each of the {ranks} ranks on this machine to {each} CPU(s) of its own"
    else:
        how = f"the {ranks} ranks on this machine {ranks // len(cores)} to a CPU, round robin,"
    _say(f"binding {how} (of CPUs {envs.cpu_list(cores)}); --bind-to none leaves them unbound")
    return shares


def _describe(specs: Sequence[RankSpec], plan: Sequence[SlotInfo], rendezvous: Rendezvous,
              port: int, command: Sequence[str]) -> None:
    _say(f"rendezvous store on {rendezvous.bind_host}:{port}, ranks use "
         f"{rendezvous.address}:{port}; {len(plan)} ranks on {', '.join(used_hosts(list(plan)))}: "
         f"{shlex.join(command)}")
    for slot, spec in zip(plan, specs):
        how = "ssh" if spec.remote else "local"
        _say(f"rank {slot.rank} on {slot.hostname} ({how}; local {slot.local_rank}/"
             f"{slot.local_size}, cross {slot.cross_rank}/{slot.cross_size})")
        if spec.remote:
            _say(f"rank {slot.rank} command: {shlex.join(spec.argv)}")


def run_job(args: argparse.Namespace, command: Sequence[str], plan: Sequence[SlotInfo], *,
            base_env: Mapping[str, str] | None = None, sink: Sink | None = None,
            remote_private: Mapping[str, str] | None = None) -> Outcome:
    """Run ``command`` on every rank of ``plan`` and supervise the job until it ends.

    Raises:
        ValueError: a host or interface problem found before any rank started.
    """
    from hora import _core

    base = dict(os.environ if base_env is None else base_env)
    remote = remote_hosts(used_hosts(list(plan)), args.force_ssh or ())
    rendezvous = choose_rendezvous(remote, first_interface(args.network_interface))
    secret = secrets.token_hex(32)
    store = _core.StoreServer(rendezvous.bind_host, 0, secret)
    own_sink = sink is None
    try:
        if sink is None:
            sink = (FileSink(args.output_filename, len(plan)) if args.output_filename
                    else PrefixSink())
    except OSError as exc:
        store.stop()
        raise ValueError(f"cannot write output files under {args.output_filename!r}: "
                         f"{exc.strerror}") from None
    try:
        specs = build_specs(args, command, plan, remote, rendezvous, store.port, secret, base,
                            remote_private)
        if args.verbose:
            _describe(specs, plan, rendezvous, store.port, command)
        job = Job(specs, sink)
        with _signals_stop(job):
            try:
                job.start()
            except OSError as exc:
                _say(f"cannot start {exc.filename or command[0]!r}: {exc.strerror or exc}")
                return Outcome(127)
            code = job.wait()
        return Outcome(code, job.failed_rank)
    finally:
        store.stop()
        if own_sink:
            sink.close()


def _say(text: str) -> None:
    print(f"horarun: {text}", file=sys.stderr, flush=True)


class _signals_stop:
    """While active, SIGINT/SIGTERM/SIGHUP ask ``job`` to stop (main thread only; signals that
    are ignored stay ignored)."""

    def __init__(self, job: Job) -> None:
        self._job = job
        self._previous: dict[int, object] = {}

    def __enter__(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            if signal.getsignal(sig) is signal.SIG_IGN:
                continue  # e.g. SIGHUP under nohup stays ignored
            self._previous[sig] = signal.signal(
                sig, lambda signum, _frame: self._job.request_stop(signum))

    def __exit__(self, *_exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]
