"""``horarun --mpi``: build an ``mpirun`` command line carrying the job's environment, and exec it.

Open MPI::

    mpirun --allow-run-as-root --tag-output -np N -H h1:2,h2:2 --bind-to none --map-by slot
           [--mca plm_rsh_args "-p PORT -i KEY"] -x NAME ... [--mpi-args] command...

MPICH / Intel MPI (Hydra)::

    [HYDRA_LAUNCHER_EXTRA_ARGS="-p PORT -i KEY"] mpirun -l -np N -hosts h1:2,h2:2 [-ppn SLOTS]
           [-launcher ssh] -genv NAME VALUE ... [--mpi-args] command...

The binding flags are spelled with two dashes: Open MPI 4 takes both spellings, Open MPI 5's
``prterun`` only this one (it reads ``-bind-to none`` as a program named ``none``).

horarun's ssh options (``-p``, ``-i``, ``--ssh-host-key-checking``) reach the ssh that mpirun
starts its daemons (Open MPI 4's orted, Open MPI 5's prted) or proxies (Hydra's
hydra_pmi_proxy) with on the other hosts: Open MPI 4 and 5 both read them from the MCA parameter
``plm_rsh_args``, Hydra from the variable ``HYDRA_LAUNCHER_EXTRA_ARGS``, which it splits at
spaces (so an option holding a space cannot be passed that way).

Open MPI's ``-x NAME`` takes the value from mpirun's own environment, so no value shows on the
command line. Hydra forwards mpirun's whole environment by default, so the job secret is left to
that and is never written as a ``-genv`` value.
"""

from __future__ import annotations

import argparse
import os
import secrets
import shlex
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence

from hora.runner import env as envs
from hora.runner import hosts as hostlib
from hora.runner.env import SECRET_NAMES
from hora.runner.slots import HostSlots, format_hosts
from hora.runner.ssh_exec import ssh_base

OPENMPI = "openmpi"
MPICH = "mpich"


class MpiError(RuntimeError):
    """mpirun is missing or of an unknown kind."""


def find_mpirun() -> str:
    """Path of ``mpirun``.

    Raises:
        MpiError: not on PATH.
    """
    path = shutil.which("mpirun")
    if path is None:
        raise MpiError("--mpi needs mpirun, which is not on PATH; install Open MPI or MPICH, "
                       "or run without --mpi to use Hora's built-in TCP transport")
    return path


def flavour_of(version_text: str) -> str:
    """``openmpi`` or ``mpich`` from the output of ``mpirun --version``.

    Raises:
        MpiError: neither.
    """
    if "Open MPI" in version_text or "OpenRTE" in version_text or "open-mpi" in version_text:
        return OPENMPI
    if any(key in version_text for key in ("HYDRA", "MPICH", "Intel(R) MPI", "Intel MPI")):
        return MPICH
    first = version_text.strip().splitlines()[0] if version_text.strip() else "(no output)"
    raise MpiError(f"unknown MPI implementation ({first}); Hora supports Open MPI and MPICH")


def detect_flavour(mpirun: str) -> str:
    """Run ``mpirun --version`` and classify it (see :func:`flavour_of`)."""
    try:
        done = subprocess.run([mpirun, "--version"], capture_output=True, text=True, timeout=30,
                              check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        raise MpiError(f"cannot run {mpirun} --version: {exc}") from None
    return flavour_of(done.stdout + done.stderr)


def mpirun_command(flavour: str, num_proc: int, hosts: Sequence[HostSlots],
                   env: Mapping[str, str], command: Sequence[str],
                   mpi_args: str | None = None, binding_args: str | None = None,
                   mpirun: str = "mpirun", ssh_options: Sequence[str] = ()) -> list[str]:
    """The mpirun argv for ``flavour``; ``env`` lists the variables every rank must get (their
    values must also be in mpirun's own environment); ``ssh_options`` are the options of the ssh
    that reaches the other hosts (``-p 2222 -i KEY``).

    Raises:
        MpiError: ssh options that MPICH cannot take (see :func:`mpirun_env`).
    """
    extra = shlex.split(mpi_args) if mpi_args else []
    if flavour == OPENMPI:
        binding = shlex.split(binding_args) if binding_args else ["--bind-to", "none",
                                                                  "--map-by", "slot"]
        argv = [mpirun, "--allow-run-as-root", "--tag-output", "-np", str(num_proc),
                "-H", format_hosts(list(hosts)), *binding]
        if ssh_options:
            argv += ["--mca", "plm_rsh_args", shlex.join(ssh_options)]
        for name in env:
            argv += ["-x", name]
    elif flavour == MPICH:
        argv = [mpirun, "-l", "-np", str(num_proc), "-hosts", format_hosts(list(hosts))]
        counts = {h.slots for h in hosts}
        if len(counts) == 1:
            argv += ["-ppn", str(counts.pop())]
        if ssh_options:
            _hydra_ssh_args(ssh_options)
            # Under a resource manager Hydra would launch with it instead of the ssh configured.
            argv += ["-launcher", "ssh"]
        if binding_args:
            argv += shlex.split(binding_args)
        for name, value in env.items():
            if name not in SECRET_NAMES:
                argv += ["-genv", name, value]
    else:
        raise MpiError(f"unknown MPI flavour {flavour!r}")
    return argv + extra + list(command)


def mpirun_env(flavour: str, ssh_options: Sequence[str] = ()) -> dict[str, str]:
    """Variables for mpirun itself: with MPICH, the ssh options (Hydra reads them from
    ``HYDRA_LAUNCHER_EXTRA_ARGS``; Open MPI takes them on its command line).

    Raises:
        MpiError: an ssh option holding whitespace, which Hydra would split.
    """
    if flavour == MPICH and ssh_options:
        return {"HYDRA_LAUNCHER_EXTRA_ARGS": _hydra_ssh_args(ssh_options)}
    return {}


def _hydra_ssh_args(ssh_options: Sequence[str]) -> str:
    """The ssh options as Hydra's one space-separated string."""
    spaced = [o for o in ssh_options if not o or any(c.isspace() for c in o)]
    if spaced:
        raise MpiError(f"MPICH's mpirun splits the ssh options at spaces, so it cannot take "
                       f"{shlex.join(spaced)}; set them for these hosts in ~/.ssh/config instead")
    return " ".join(ssh_options)


def exec_mpirun(argv: Sequence[str], env: Mapping[str, str]) -> None:
    """Replace this process with mpirun (does not return).

    Raises:
        MpiError: it cannot be started.
    """
    try:
        os.execve(argv[0], list(argv), dict(env))
    except OSError as exc:
        raise MpiError(f"cannot start {argv[0]}: {exc.strerror}") from None


def rank_env(args: argparse.Namespace, hosts: Sequence[HostSlots],
             environ: Mapping[str, str]) -> dict[str, str]:
    """The variables an mpirun job carries to every rank: what horarun carries to remote ranks
    (the launcher's PATH, PYTHONPATH, ... and HORA_/HOROVOD_/NCCL_ variables), ``-x`` exports,
    the engine settings, the MPI transport choice, a fresh secret, and where rank 0 serves the
    rendezvous store (the first host; a free port when it is this one, else the engine's default
    port)."""
    env = envs.exported_env(environ)
    env.update(envs.parse_exports(args.env or [], environ))
    env.update(envs.settings_env(args))
    first = hosts[0].hostname
    if hostlib.is_local_host(first):
        env.update(envs.rendezvous_env("127.0.0.1", hostlib.free_port()))
    else:
        env["HORA_RENDEZVOUS_ADDR"] = hostlib.address_part(first)
    env.update(envs.private_env(secrets.token_hex(32)))
    if args.network_interface:
        env.update(envs.interface_env(args.network_interface.split(",")[0].strip()))
        env["NCCL_SOCKET_IFNAME"] = args.network_interface
    return env


def ssh_options(args: argparse.Namespace) -> list[str]:
    """The options horarun's ssh would take beyond its defaults (port, key, host key checking),
    for the ssh that mpirun starts on the other hosts."""
    options = ssh_base(args.ssh_port, args.ssh_identity_file, args.ssh_host_key_checking)[1:]
    return [] if options == ssh_base()[1:] else options


def run(args: argparse.Namespace, command: Sequence[str], hosts: Sequence[HostSlots],
        num_proc: int) -> int:
    """``horarun --mpi``: exec mpirun (returns only when that fails: exit code 127)."""
    try:
        path = find_mpirun()
        flavour = detect_flavour(path)
        env = rank_env(args, hosts, os.environ)
        ssh = ssh_options(args)
        argv = mpirun_command(flavour, num_proc, hosts, env, command, args.mpi_args,
                              args.binding_args, mpirun=path, ssh_options=ssh)
        own = mpirun_env(flavour, ssh)
        if args.verbose:
            shown = [f"{name}={shlex.quote(value)}" for name, value in own.items()]
            print(f"horarun: {' '.join([*shown, shlex.join(argv)])}", file=sys.stderr, flush=True)
        exec_mpirun(argv, {**os.environ, **env, **own})
    except MpiError as exc:
        print(f"horarun: error: {exc}", file=sys.stderr, flush=True)
    return 127
