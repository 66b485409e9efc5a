"""``horarun``: the command line of the launcher.

    horarun -np N [-H localhost:N] [--verbose] command [args...]

Starts the rendezvous store (on 127.0.0.1, random port, random secret), runs N copies of
``command`` on this host with HORA_RANK, HORA_SIZE, HORA_LOCAL_RANK, HORA_LOCAL_SIZE,
HORA_CROSS_RANK, HORA_CROSS_SIZE, HORA_HOSTNAME, HORA_RENDEZVOUS_ADDR, HORA_RENDEZVOUS_PORT and
HORA_SECRET set, prefixes their output with ``[rank]<stdout>:`` / ``[rank]<stderr>:``, and exits
with 0 when every rank succeeded, or with the exit code of the first rank that failed (after
stopping the others). Ctrl-C or SIGTERM stops every rank.
"""

from __future__ import annotations

import argparse
import os
import secrets
import signal
import sys
from collections.abc import Sequence

from hora.runner import slots
from hora.runner.local_exec import LocalJob

STORE_HOST = "127.0.0.1"


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``horarun``."""
    parser = argparse.ArgumentParser(
        prog="horarun",
        description="Run a Hora (Horovod-API) job: N copies of a command, connected.",
    )
    parser.add_argument("-np", "--num-proc", dest="num_proc", type=int,
                        help="number of processes (default: the number of slots in -H)")
    parser.add_argument("-H", "--hosts", dest="hosts",
                        help="hosts and slots, e.g. localhost:4 (only this host is supported)")
    parser.add_argument("--verbose", action="store_true", help="print the launch plan")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the command every rank runs")
    return parser


def plan(num_proc: int | None, hosts_spec: str | None) -> list[slots.SlotInfo]:
    """Per-rank coordinates for the command line's -np and -H.

    Raises:
        ValueError: bad host list, too few slots, or a remote host.
    """
    if hosts_spec is None:
        if num_proc is None:
            raise ValueError("-np is required (or -H with slots)")
        hosts_spec = f"localhost:{num_proc}"
    hosts = slots.parse_hosts(hosts_spec)
    remote = [h.hostname for h in hosts if not slots.is_local_host(h.hostname)]
    if remote:
        raise ValueError(f"remote hosts are not supported by this horarun yet: {', '.join(remote)}")
    if num_proc is None:
        num_proc = sum(h.slots for h in hosts)
    return slots.assign_slots(hosts, num_proc)


def rank_env(base: dict[str, str], slot: slots.SlotInfo, store_port: int,
             secret: str) -> dict[str, str]:
    """The environment of one rank: ``base`` plus the HORA_* topology and rendezvous."""
    env = dict(base)
    env.update({
        "HORA_RANK": str(slot.rank),
        "HORA_SIZE": str(slot.size),
        "HORA_LOCAL_RANK": str(slot.local_rank),
        "HORA_LOCAL_SIZE": str(slot.local_size),
        "HORA_CROSS_RANK": str(slot.cross_rank),
        "HORA_CROSS_SIZE": str(slot.cross_size),
        "HORA_HOSTNAME": slot.hostname,
        "HORA_RENDEZVOUS_ADDR": STORE_HOST,
        "HORA_RENDEZVOUS_PORT": str(store_port),
        "HORA_SECRET": secret,
    })
    env.setdefault("PYTHONUNBUFFERED", "1")  # rank output appears line by line, not at exit
    return env


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``horarun``; returns the job's exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        parser.error("no command given")
    try:
        placement = plan(args.num_proc, args.hosts)
    except ValueError as exc:
        parser.error(str(exc))

    from hora import _core

    secret = secrets.token_hex(32)
    store = _core.StoreServer(STORE_HOST, 0, secret)
    try:
        envs = [rank_env(dict(os.environ), s, store.port, secret) for s in placement]
        if args.verbose:
            print(f"horarun: store at {STORE_HOST}:{store.port}; {len(placement)} ranks: "
                  f"{command}", file=sys.stderr, flush=True)
            for s in placement:
                print(f"horarun: rank {s.rank} on {s.hostname} (local {s.local_rank}/"
                      f"{s.local_size}, cross {s.cross_rank}/{s.cross_size})",
                      file=sys.stderr, flush=True)
        job = LocalJob(command, envs)
        previous = {sig: signal.signal(sig, lambda signum, _frame: job.request_stop(signum))
                    for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            try:
                job.start()
            except OSError as exc:
                print(f"horarun: cannot start {command[0]!r}: {exc}", file=sys.stderr)
                return 127
            return job.wait()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
    finally:
        store.stop()


if __name__ == "__main__":
    sys.exit(main())
