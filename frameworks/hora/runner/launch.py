"""``horarun``: the command line of the launcher (horovodrun's flags).

    horarun -np N [-H host1:4,host2:4 | --hostfile FILE] [options] command [args...]

Every rank gets HORA_RANK, HORA_SIZE, HORA_LOCAL_RANK, HORA_LOCAL_SIZE, HORA_CROSS_RANK,
HORA_CROSS_SIZE, HORA_HOSTNAME (also under horovodrun's HOROVOD_* names),
HORA_RENDEZVOUS_ADDR/PORT and a fresh HORA_SECRET, plus the engine settings of the tuning flags;
local ranks get OMP_NUM_THREADS = cores // local ranks unless it is set. Output lines are prefixed ``[rank]<stdout>:`` /
``[rank]<stderr>:`` (or written to ``--output-filename`` DIR/rank.<n>/{stdout,stderr}). The
launcher exits with 0 when every rank succeeded, or with the exit code of the first rank that
failed (after stopping the others). Ctrl-C or SIGTERM stops every rank.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from hora.runner import check_build, config, elastic, hosts, job, mpirun, slots, ssh_exec
from hora.runner.env import SETTINGS, SWITCHES

COMPAT_FLAGS = (
    ("--torus-allreduce", None), ("--no-torus-allreduce", None),
    ("--mpi-threads-disable", None), ("--prefix-output-with-timestamp", None),
    ("--num-nccl-streams", int), ("--thread-affinity", str),
    ("--autotune-bayes-opt-max-samples", int), ("--autotune-gaussian-process-noise", float),
)
"""horovodrun flags that Hora accepts so job scripts keep working, with a warning: no effect."""


def _compat_dest(flag: str) -> str:
    return "compat_" + flag.lstrip("-").replace("-", "_")


def _version() -> str:
    from hora import _core

    return str(_core.version)


EXAMPLES = """examples:
  horarun -np 4 python train.py                       4 ranks on this machine
  horarun -np 8 -H host1:4,host2:4 python train.py    two hosts, started over ssh
  horarun -np 8 --hostfile hosts.txt python train.py  lines "host slots=N"
  horarun --mpi -np 4 python train.py                 the same job started by mpirun
  horarun -np 2 --timeline-filename t.json python train.py
                                                      a timeline (chrome://tracing, Perfetto)
  horarun --min-np 2 --max-np 4 --host-discovery-script ./hosts.sh python train.py
                                                      elastic: workers come and go
  horarun -cb                                         what this installation can do

Each rank gets Horovod's HOROVOD_RANK, HOROVOD_SIZE, HOROVOD_LOCAL_RANK, ... and torchrun's
RANK, WORLD_SIZE, LOCAL_RANK, ...; each engine setting below is also a HORA_* variable.
"""


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``horarun``."""
    parser = argparse.ArgumentParser(
        prog="horarun", allow_abbrev=False,
        description="Run a Hora (Horovod-API) job: N copies of a command, connected.",
        formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EXAMPLES,
    )
    add = parser.add_argument
    add("-v", "--version", action="version", version=f"Hora {_version()}")
    add("-cb", "--check-build", dest="check_build", action="store_true",
        help="show the frameworks, transports, versions and GPU support found, and exit")
    where = parser.add_argument_group("processes and hosts")
    where.add_argument("-np", "--num-proc", dest="num_proc", type=int,
                       help="number of processes (default: the number of slots)")
    where.add_argument("-H", "--hosts", dest="hosts", help="hosts and slots, e.g. "
                       "host1:4,host2:4 (default localhost:NP)")
    where.add_argument("--hostfile", "-hostfile", dest="hostfile",
                       help="file with one 'host slots=N' line per host")
    where.add_argument("-x", "--env", dest="env", action="append", metavar="NAME[=VALUE]",
                       help="export this variable to every rank (repeatable)")
    where.add_argument(
        "--bind-to", dest="bind_to", choices=("auto", "core", "none"), default="auto",
        help="auto (default): as core when no CPU would carry two ranks and no other process is "
        "pinned to the CPUs horarun may use, else unbound; core: each rank started on this "
        "machine runs on its own share of those CPUs when there are at least as many as ranks, "
        "or on one CPU, round robin, when the ranks are a whole multiple of the CPUs (steadier, "
        "lower latency; whatever a rank starts shares its CPUs); none: ranks are not bound. "
        "Elastic mode leaves ranks unbound; with --mpi, --binding-args applies")
    remote = parser.add_argument_group("remote hosts (ssh)")
    remote.add_argument("-p", "--ssh-port", dest="ssh_port", type=int,
                        help="ssh port of the remote hosts")
    remote.add_argument("-i", "--ssh-identity-file", dest="ssh_identity_file",
                        help="ssh private key")
    remote.add_argument(
        "--ssh-host-key-checking", dest="ssh_host_key_checking", default="accept-new",
        choices=ssh_exec.HOST_KEY_CHECKING,
        help="ssh StrictHostKeyChecking for remote hosts: accept-new (default: learn a new "
        "host's key, refuse a changed one), yes (known hosts only) or no (trust any key)")
    remote.add_argument(
        "--network-interface", "--network-interfaces", dest="network_interface",
        help="interface(s) the ranks communicate over, e.g. eth0 (the first is used)")
    transport = parser.add_argument_group("transport")
    mode = transport.add_mutually_exclusive_group()
    mode.add_argument("--gloo", action="store_true",
                      help="use Hora's built-in TCP transport (the default)")
    mode.add_argument("--mpi", action="store_true", help="start the ranks with mpirun")
    mode.add_argument("--jsrun", action="store_true", help=argparse.SUPPRESS)
    transport.add_argument("--tcp", action="store_true",
                           help="TCP only: the built-in transport, and no InfiniBand for NCCL")
    transport.add_argument("--mpi-args", dest="mpi_args",
                           help="extra arguments for mpirun (with --mpi)")
    transport.add_argument("--binding-args", dest="binding_args",
                           help="mpirun process binding arguments (with --mpi; default "
                           "'-bind-to none -map-by slot')")
    output = parser.add_argument_group("output and configuration")
    output.add_argument("--output-filename", dest="output_filename",
                        help="write rank n's output to DIR/rank.<n>/stdout and stderr instead of "
                        "the terminal")
    output.add_argument("--verbose", action="store_true", help="print the launch plan")
    output.add_argument("--config-file", dest="config_file",
                        help="YAML file of flag values (keys: long flag names); the command line "
                        "overrides it")
    tuning = parser.add_argument_group("engine settings (each sets a HORA_* variable)")
    for setting in SETTINGS:
        if setting.kind is None:
            tuning.add_argument(setting.flag, dest=setting.dest, action="store_true",
                                help=f"{setting.help} (HORA_{setting.var})")
        else:
            tuning.add_argument(setting.flag, dest=setting.dest, type=setting.kind,
                                help=f"{setting.help} (HORA_{setting.var})")
    for switch in SWITCHES:
        pair = tuning.add_mutually_exclusive_group()
        pair.add_argument("--" + switch.name, dest=switch.dest, action="store_true", default=None,
                          help=f"{switch.help} (HOROVOD_{switch.var}=1)")
        pair.add_argument("--no-" + switch.name, dest=switch.dest, action="store_false",
                          default=None, help=f"(HOROVOD_{switch.var}=0)")
    for flag, kind in COMPAT_FLAGS:
        if kind is None:
            add(flag, dest=_compat_dest(flag), action="store_true", help=argparse.SUPPRESS)
        else:
            add(flag, dest=_compat_dest(flag), type=kind, help=argparse.SUPPRESS)
    elastic = parser.add_argument_group("elastic mode (any of --min-np, --max-np, "
                                        "--host-discovery-script turns it on)")
    elastic.add_argument("--min-np", "--min-num-proc", dest="min_np", type=int,
                         help="fewest workers the job runs with (default: -np)")
    elastic.add_argument("--max-np", "--max-num-proc", dest="max_np", type=int,
                         help="most workers the job grows to (default: unbounded)")
    elastic.add_argument("--host-discovery-script", dest="host_discovery_script",
                         help="executable printing one host[:slots] line per usable host; "
                         "polled every second")
    elastic.add_argument("--slots", "--slots-per-host", dest="slots", type=int,
                         help="slots of a discovered host printed without :slots")
    elastic.add_argument("--elastic-timeout", dest="elastic_timeout", type=float,
                         help="seconds the job may stay below --min-np before it fails "
                         "(default: HORA_ELASTIC_TIMEOUT or 600)")
    elastic.add_argument("--reset-limit", dest="reset_limit", type=int,
                         help="most re-formations of the job before it fails (default: none)")
    elastic.add_argument("--blacklist-cooldown-range", dest="cooldown_range", type=float,
                         nargs=2, metavar=("LO", "HI"),
                         help="seconds a host where a worker failed takes no new workers: "
                         "random in [LO, HI], doubling with each failure (default: for good)")
    add("--force-ssh", dest="force_ssh", type=lambda s: [h for h in s.split(",") if h],
        help=argparse.SUPPRESS)
    add("command", nargs=argparse.REMAINDER, help="the command every rank runs")
    return parser


def parse_args(argv: Sequence[str] | None = None,
               parser: argparse.ArgumentParser | None = None) -> argparse.Namespace:
    """Parse ``argv`` (with ``--config-file`` values as defaults); ``args.command`` is the
    command without a leading ``--``. Exits with status 2 on a usage error."""
    parser = parser or build_parser()
    args = parser.parse_args(argv)
    if args.config_file:
        try:
            config.apply(parser, args.config_file)
        except config.ConfigError as exc:
            parser.error(str(exc))
        args = parser.parse_args(argv)
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    args.command = command
    if args.force_ssh is None:
        forced = os.environ.get("HORARUN_FORCE_SSH", "")
        args.force_ssh = [h for h in forced.split(",") if h]
    return args


def host_list(num_proc: int | None, hosts_spec: str | None,
              hostfile: str | None = None) -> list[slots.HostSlots]:
    """The hosts of ``-H`` or ``--hostfile``; ``localhost:NP`` when neither is given.

    Raises:
        ValueError: both or neither given (without -np), or a malformed list.
    """
    if hosts_spec and hostfile:
        raise ValueError("give -H or --hostfile, not both")
    if hostfile:
        return hosts.parse_hostfile(hostfile)
    if hosts_spec:
        return slots.parse_hosts(hosts_spec)
    if num_proc is None:
        raise ValueError("-np is required (or -H / --hostfile with slots)")
    return [slots.HostSlots("localhost", num_proc)]


def plan(num_proc: int | None, hosts_spec: str | None,
         hostfile: str | None = None) -> list[slots.SlotInfo]:
    """Per-rank coordinates for the command line's -np, -H and --hostfile.

    Raises:
        ValueError: bad host list or too few slots.
    """
    host_slots = host_list(num_proc, hosts_spec, hostfile)
    if num_proc is None:
        num_proc = sum(h.slots for h in host_slots)
    return slots.assign_slots(host_slots, num_proc)


def warn_compat(args: argparse.Namespace) -> None:
    """Tell the user about horovodrun flags that do nothing in Hora."""
    for flag, _kind in COMPAT_FLAGS:
        value = getattr(args, _compat_dest(flag))
        if value not in (None, False):
            print(f"horarun: warning: {flag} has no effect in Hora (accepted for compatibility)",
                  file=sys.stderr, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``horarun``; returns the job's exit code."""
    parser = build_parser()
    args = parse_args(argv, parser)
    if args.check_build:
        sys.stdout.write(check_build.report())
        return 0
    if args.jsrun:
        parser.error("--jsrun is not supported by Hora; use the built-in launcher or --mpi")
    if not args.command:
        parser.error("no command given")
    if elastic.is_elastic(args):
        if args.mpi:
            parser.error("elastic mode runs on the built-in transport; drop --mpi")
        warn_compat(args)
        try:
            return elastic.run_elastic(args, args.command)
        except ValueError as exc:
            parser.error(str(exc))
    try:
        placement = plan(args.num_proc, args.hosts, args.hostfile)
    except ValueError as exc:
        parser.error(str(exc))
    warn_compat(args)
    if args.mpi:
        return mpirun.run(args, args.command, host_list(args.num_proc, args.hosts, args.hostfile),
                          len(placement))
    try:
        return job.run_job(args, args.command, placement).code
    except ValueError as exc:
        parser.error(str(exc))


run_commandline = main
"""``horovod.runner.launch.run_commandline``'s name for ``main``."""


if __name__ == "__main__":
    sys.exit(main())
