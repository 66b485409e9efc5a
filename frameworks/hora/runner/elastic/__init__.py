"""``horarun`` in elastic mode (``--min-np``, ``--max-np`` or ``--host-discovery-script``)."""

from __future__ import annotations

import argparse
import os
import secrets
from collections.abc import Mapping, Sequence

from hora.runner import hosts as hostlib
from hora.runner import slots
from hora.runner.elastic.blacklist import Blacklist
from hora.runner.elastic.discovery import FixedHosts, ScriptHosts
from hora.runner.elastic.driver import ElasticDriver, ElasticLimits, say
from hora.runner.elastic.workers import WorkerPool, launch_info
from hora.runner.output import PrefixSink

DEFAULT_ELASTIC_TIMEOUT = 600.0


def is_elastic(args: argparse.Namespace) -> bool:
    """True when the command line asks for elastic mode."""
    return bool(args.host_discovery_script or args.min_np is not None
                or args.max_np is not None)


def limits_of(args: argparse.Namespace, environ: Mapping[str, str]) -> ElasticLimits:
    """The elastic limits of the command line (``--elastic-timeout`` defaults to
    ``HORA_ELASTIC_TIMEOUT``, else 600 s).

    Raises:
        ValueError: inconsistent values.
    """
    min_np = args.min_np if args.min_np is not None else args.num_proc
    if min_np is None:
        min_np = 1
    if min_np < 1:
        raise ValueError(f"--min-np must be >= 1, got {min_np}")
    if args.max_np is not None and args.max_np < min_np:
        raise ValueError(f"--max-np {args.max_np} is less than --min-np {min_np}")
    if args.num_proc is not None and args.num_proc < min_np:
        raise ValueError(f"-np {args.num_proc} is less than --min-np {min_np}")
    timeout = args.elastic_timeout
    if timeout is None:
        text = environ.get("HORA_ELASTIC_TIMEOUT", environ.get("HOROVOD_ELASTIC_TIMEOUT", ""))
        try:
            timeout = float(text) if text else DEFAULT_ELASTIC_TIMEOUT
        except ValueError:
            raise ValueError(f"HORA_ELASTIC_TIMEOUT must be seconds, got {text!r}") from None
    if timeout <= 0:
        raise ValueError(f"--elastic-timeout must be > 0, got {timeout:g}")
    if args.reset_limit is not None and args.reset_limit < 0:
        raise ValueError(f"--reset-limit must be >= 0, got {args.reset_limit}")
    return ElasticLimits(min_np, args.max_np, args.num_proc, float(timeout), args.reset_limit)


def cooldown_of(args: argparse.Namespace) -> tuple[float, float] | None:
    """The ``--blacklist-cooldown-range LO HI`` pair, checked.

    Raises:
        ValueError: negative, or LO > HI.
    """
    if args.cooldown_range is None:
        return None
    low, high = args.cooldown_range
    if low < 0 or high < low:
        raise ValueError(f"--blacklist-cooldown-range needs 0 <= LO <= HI, got {low:g} {high:g}")
    return (float(low), float(high))


def run_elastic(args: argparse.Namespace, command: Sequence[str],
                base_env: Mapping[str, str] | None = None) -> int:
    """Run ``command`` as an elastic job; the launcher's exit code.

    Raises:
        ValueError: bad flags, hosts or interface (before any worker started).
    """
    from hora import _core
    from hora.runner.job import (
        Rendezvous,
        _signals_stop,
        choose_rendezvous,
        first_interface,
        remote_hosts,
    )

    base = dict(os.environ if base_env is None else base_env)
    limits = limits_of(args, base)
    cooldown = cooldown_of(args)
    if args.output_filename:
        raise ValueError("--output-filename is not supported in elastic mode")
    if args.host_discovery_script:
        if args.hosts or args.hostfile:
            raise ValueError("give --host-discovery-script or -H/--hostfile, not both")
        discover = ScriptHosts(args.host_discovery_script, args.slots, say).find
        first = discover()
    else:
        if args.hosts and args.hostfile:
            raise ValueError("give -H or --hostfile, not both")
        fixed = (hostlib.parse_hostfile(args.hostfile) if args.hostfile
                 else slots.parse_hosts(args.hosts) if args.hosts
                 else [slots.HostSlots("localhost", args.num_proc or limits.min_np)])
        discover = FixedHosts(fixed).find
        first = discover()
    remote = remote_hosts(list(first), args.force_ssh or ())
    interface = first_interface(args.network_interface)
    rendezvous = choose_rendezvous(remote, interface)
    if not remote and interface is not None and args.host_discovery_script:
        # Remote hosts may be discovered later: listen where they can reach the stores.
        rendezvous = Rendezvous("0.0.0.0", hostlib.interface_addresses()[interface], interface)
    secret = secrets.token_hex(32)
    control_server = _core.StoreServer(rendezvous.bind_host, 0, secret)
    sink = PrefixSink()
    try:
        control = _core.StoreClient("127.0.0.1", control_server.port, secret, 10.0)
        info = launch_info(args, list(command), base, secret, rendezvous.address,
                           control_server.port, interface, rendezvous.local_interface,
                           frozenset(remote) | frozenset(args.force_ssh or ()))
        driver = ElasticDriver(info, discover, limits, Blacklist(cooldown), WorkerPool(sink),
                               rendezvous.bind_host, control)
        with _signals_stop(driver):  # type: ignore[arg-type]
            return driver.run()
    finally:
        control_server.stop()
        sink.close()
