"""Elastic workers as processes: how one is started, and the set of running ones.

A worker is started once and keeps its id (its age: lower is older) for life; its rank may change
with every generation. Output lines are prefixed with the worker id, which does not change.
"""

from __future__ import annotations

import dataclasses
import os
import queue
import signal
import time
from collections.abc import Mapping

from hora.runner import env as envs
from hora.runner import hosts as hostlib
from hora.runner import ssh_exec
from hora.runner.local_exec import GRACE_SECONDS, RankSpec, _Child, _Reaper, _start
from hora.runner.output import Sink
from hora.runner.rank_discovery import is_loopback

_POLL_SECONDS = 0.05
SSH_ALIVE_INTERVAL_SECONDS = 5
"""A remote worker's ssh client asks its host for an answer after this long a silence and ends
after ``ssh_exec.SERVER_ALIVE_COUNT`` unanswered asks (about 15 s): a host whose network is cut
then counts as a failed host (blacklisted, its workers out of the next generation), as one whose
workers crashed, even while the discovery script still lists it."""


@dataclasses.dataclass
class LaunchInfo:
    """What every worker's environment needs besides its id and host."""

    command: list[str]
    base_env: dict[str, str]  # launcher environment, secrets removed, exports and settings added
    secret: str
    address: str  # where workers reach the driver's stores
    control_port: int
    interface: str | None  # --network-interface: every worker listens there
    remote_hosts: frozenset[str]  # reached with ssh: --force-ssh, and remote hosts seen at start
    cwd: str
    ssh_port: int | None = None
    ssh_identity_file: str | None = None
    ssh_host_key_checking: str = "accept-new"
    # -x exports and settings: a remote worker gets these besides the exported part of base_env.
    forwarded: dict[str, str] = dataclasses.field(default_factory=dict)
    # Without --network-interface, the driver's interface to the store: for workers on its own
    # machine only (a remote host's interfaces have their own names).
    local_interface: str | None = None
    # horarun's workers: this machine's as children, any other host's with ssh (Spark and Ray
    # place their workers themselves, on hosts of their own naming).
    uses_ssh: bool = False
    # Host name -> started with ssh, for hosts discovered after the start (see is_remote).
    _remote_seen: dict[str, bool] = dataclasses.field(default_factory=dict, repr=False)


def is_remote(info: LaunchInfo, host: str) -> bool:
    """True when workers on ``host`` are started with ssh: a host of ``info.remote_hosts``, or any
    host name that is not this machine (``hosts.is_local_host``). A discovery script may name a
    host only after the job started, so the answer is found at the first worker on each host,
    not fixed by the hosts of the first discovery."""
    if host in info.remote_hosts:
        return True
    if host not in info._remote_seen:
        info._remote_seen[host] = not hostlib.is_local_host(host)
    return info._remote_seen[host]


def unreachable(info: LaunchInfo, host: str) -> str | None:
    """Why horarun's workers on ``host`` cannot take part, or None: another machine, when the
    driver's stores listen on the loopback only (no host of the first discovery was remote). A
    name of this machine that ssh reaches (--force-ssh 127.0.0.1) reaches the loopback too."""
    if info.uses_ssh and is_loopback(info.address) and not hostlib.is_local_host(host):
        return (f"it is not this machine, but the job's rendezvous listens on {info.address} "
                "only (no host of the first discovery was remote); list a remote host from the "
                "start, or pass --network-interface")
    return None


def worker_env(info: LaunchInfo, worker_id: int, host: str, local_slots: int) -> dict[str, str]:
    """The non-secret variables of one worker (no rank: it learns that from the driver)."""
    env = dict(info.base_env)
    env.update(envs.omp_threads_env(env, local_slots))
    env.update({
        "HORA_ELASTIC": "1", "HORA_ELASTIC_WORKER_ID": str(worker_id),
        "HORA_RENDEZVOUS_ADDR": info.address, "HORA_ELASTIC_PORT": str(info.control_port),
        "HORA_HOSTNAME": host, "HOROVOD_HOSTNAME": host,
        "HORA_CONTROLLER": "tcp", "HORA_CPU_OPERATIONS": "tcp",
    })
    # A remote worker finds its own route to the rendezvous (as a rank of a static job over ssh
    # does): the driver's interface name means nothing on another host. An explicit
    # --network-interface goes to every worker.
    if info.interface is not None:
        env.update(envs.interface_env(info.interface))
    elif info.local_interface is not None and not is_remote(info, host):
        env.update(envs.interface_env(info.local_interface))
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def worker_spec(info: LaunchInfo, worker_id: int, host: str, local_slots: int) -> RankSpec:
    """How to start worker ``worker_id`` on ``host`` (locally, or with ssh)."""
    env = worker_env(info, worker_id, host, local_slots)
    private = envs.private_env(info.secret)
    if is_remote(info, host):
        remote_env = envs.exported_env(env)
        remote_env.update(info.forwarded)
        remote_env.update({k: v for k, v in env.items() if k not in info.base_env})
        argv = ssh_exec.ssh_command(host, info.cwd, remote_env, info.command,
                                    max(1, int(GRACE_SECONDS) - 2), info.ssh_port,
                                    info.ssh_identity_file, info.ssh_host_key_checking,
                                    SSH_ALIVE_INTERVAL_SECONDS)
        return RankSpec(worker_id, host, argv, envs.without_secrets(info.base_env),
                        ssh_exec.stdin_payload(private), remote=True)
    env.update(private)
    return RankSpec(worker_id, host, list(info.command), env)


@dataclasses.dataclass
class Worker:
    """One started worker process."""

    id: int
    host: str
    child: _Child
    stopping: bool = False  # the driver asked it to end (not a failure)
    reaped: bool = False  # the driver has handled its exit
    # Stopping: when enforce() SIGKILLs what is left of it (None: done, or not stopping).
    kill_at: float | None = None


class WorkerPool:
    """The started workers; exits arrive on a queue in the order they happen."""

    def __init__(self, sink: Sink) -> None:
        self._sink = sink
        self._reaper: _Reaper | None = None
        self._next_id = 0
        self.workers: dict[int, Worker] = {}
        self.exits: queue.Queue[tuple[int, int]] = queue.Queue()

    def alive(self) -> list[Worker]:
        """Workers not being stopped whose exit the driver has not handled yet, oldest first
        (a worker that just exited still counts until then, so that its slot is not refilled
        before the driver knows how it ended)."""
        return [w for w in self.workers.values() if not w.stopping and not w.reaped]

    def count_on(self, host: str) -> int:
        """Running workers on ``host`` (including ones being stopped: they hold the slot)."""
        return sum(1 for w in self.workers.values()
                   if w.host == host and not w.reaped)

    def start(self, info: LaunchInfo, host: str, local_slots: int) -> Worker:
        """Start a new worker on ``host``.

        Raises:
            OSError: the command cannot be started.
        """
        worker_id = self._next_id
        self._next_id += 1
        spec = worker_spec(info, worker_id, host, local_slots)
        if self._reaper is None and not spec.remote:
            self._reaper = _Reaper(max(1.0, GRACE_SECONDS - 2.0))
        child = _Child(spec, self._sink)
        if self._reaper is not None and not spec.remote:
            self._reaper.add(child.process.pid)
        worker = Worker(worker_id, host, child)
        self.workers[worker_id] = worker
        _start(self._watch, worker, name=f"horarun-worker{worker_id}-wait")
        return worker

    def _watch(self, worker: Worker) -> None:
        code = worker.child.process.wait()
        worker.child.release()
        if code == 0 and self._reaper is not None and not worker.child.spec.remote:
            self._reaper.remove(worker.child.process.pid)
        self.exits.put((worker.id, code))

    def stop(self, workers: list[Worker], grace: float = GRACE_SECONDS) -> None:
        """Ask ``workers`` to end, without waiting for them: the driver goes on (forms the next
        generation) while they wind down, and ``enforce()`` SIGKILLs what is left of each once
        it ended or ``grace`` seconds passed. A stopping worker keeps its slot until its exit."""
        deadline = time.monotonic() + grace
        for worker in workers:
            if worker.stopping:
                continue
            worker.stopping = True
            worker.kill_at = deadline
            if worker.child.process.poll() is None:
                worker.child.request_stop()

    def enforce(self, now: float | None = None) -> None:
        """SIGKILL the process group of every stopping worker that ended (what it left behind)
        or whose grace ran out (the worker itself: its exit then arrives as any other)."""
        now = time.monotonic() if now is None else now
        for worker in self.workers.values():
            if worker.kill_at is None:
                continue
            if worker.child.process.returncode is not None or now >= worker.kill_at:
                worker.child.signal(signal.SIGKILL)
                worker.child.release()
                worker.kill_at = None

    def stop_and_wait(self, workers: list[Worker], grace: float = GRACE_SECONDS) -> None:
        """``stop()``, then wait for every one of ``workers`` to end (SIGKILL after ``grace``)."""
        self.stop(workers, grace)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            if all(w.child.process.poll() is not None for w in workers):
                break
            time.sleep(_POLL_SECONDS)
        for worker in workers:
            worker.kill_at = 0.0  # also the ones stopped, or ended, before this call
        self.enforce()
        for worker in workers:
            worker.child.process.wait()

    def close(self) -> None:
        """Stop every worker and the reaper; let the output readers finish (bounded)."""
        self.stop_and_wait(list(self.workers.values()))
        if self._reaper is not None:
            for worker in self.workers.values():
                if not worker.child.spec.remote:
                    self._reaper.remove(worker.child.process.pid)
            self._reaper.close()
            self._reaper = None
        deadline = time.monotonic() + 2.0
        for worker in self.workers.values():
            for thread in worker.child.threads:
                thread.join(max(0.0, deadline - time.monotonic()))


def launch_info(args: object, command: list[str], base_env: Mapping[str, str], secret: str,
                address: str, control_port: int, interface: str | None,
                local_interface: str | None,
                remote_hosts: frozenset[str]) -> LaunchInfo:
    """:class:`LaunchInfo` from the parsed command line."""
    env = envs.without_secrets(base_env)
    forwarded = envs.parse_exports(getattr(args, "env", None) or [], base_env)
    forwarded.update(envs.settings_env(args))  # type: ignore[arg-type]
    env.update(forwarded)
    return LaunchInfo(
        command=list(command), base_env=env, secret=secret, address=address,
        control_port=control_port, interface=interface, local_interface=local_interface,
        remote_hosts=remote_hosts, uses_ssh=True,
        cwd=os.getcwd(), ssh_port=getattr(args, "ssh_port", None),
        ssh_identity_file=getattr(args, "ssh_identity_file", None),
        ssh_host_key_checking=getattr(args, "ssh_host_key_checking", "accept-new"),
        forwarded=forwarded)
