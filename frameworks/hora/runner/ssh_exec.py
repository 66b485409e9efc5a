"""Run a rank on another host through ssh.

The ssh command line is::

    ssh -o BatchMode=yes -o StrictHostKeyChecking=accept-new [-p PORT] [-i KEY] HOST \\
        'cd CWD >/dev/null 2>&1; exec sh -c WRAPPER horarun-rank GRACE WATCHER env VAR=VALUE...
        COMMAND...'

with every word quoted by ``shlex.quote`` (an elastic worker's adds ``-o ServerAliveInterval=5 -o
ServerAliveCountMax=3``, see ``ssh_base``). The job secret is not on it (it would show in ``ps``
on both hosts): the launcher writes ``NAME=VALUE`` lines for such private variables, then an
empty line, to the ssh client's stdin, and the wrapper exports them before it starts the rank.

The launcher then keeps that stdin open for the life of the rank. The wrapper starts the rank in
a session of its own and a watcher that waits for end-of-file on stdin: when the launcher closes
the pipe or dies (or the ssh connection breaks), the watcher sends SIGTERM to the rank's process
group, and SIGKILL after GRACE seconds. When the rank ends by itself, the wrapper stops the
watcher and whatever the rank left behind in its process group, and exits with the rank's code.
Remote hosts need a POSIX ``sh`` and ``setsid`` (util-linux), as every Linux distribution has.

Host keys: ``StrictHostKeyChecking=accept-new`` by default, so a host seen for the first time is
added to ``known_hosts`` and a host whose key later changes is refused (a machine in the middle
cannot pose as it). ``horarun --ssh-host-key-checking`` sets ``yes`` (only known hosts) or ``no``.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")

WATCHER = ('cat >/dev/null; kill -s TERM -- -"$1" || kill -s TERM "$1"; sleep "$2"; '
           'kill -s KILL -- -"$1" || kill -s KILL "$1"')
"""Runs in its own session: on end-of-file on stdin, TERM then (after $2 s) KILL group $1."""

_WRAPPER_STEPS = (
    'g=$1; k=$2; shift 2',
    'while :; do IFS= read -r l || exit 255; [ -z "$l" ] && break; export "$l"; done',
    'exec 3<&0',
    'setsid "$@" </dev/null 3<&- & p=$!',
    'setsid sh -c "$k" horarun-watch "$p" "$g" <&3 >/dev/null 2>&1 & w=$!',
    'exec 3<&- </dev/null',
    'wait "$p" 2>/dev/null; c=$?',
    'kill -s TERM -- -"$p" 2>/dev/null',
    'kill -s TERM -- -"$w" 2>/dev/null || kill -s TERM "$w" 2>/dev/null',
    'exit "$c"',
)
WRAPPER = "; ".join(_WRAPPER_STEPS)
"""The remote shell program: reads private variables, runs the rank, stops it on stdin EOF."""


SERVER_ALIVE_COUNT = 3
"""Unanswered ServerAlive asks after which an ssh client started with an alive interval ends."""

HOST_KEY_CHECKING = ("accept-new", "yes", "no")
"""Values of ``horarun --ssh-host-key-checking`` (ssh's StrictHostKeyChecking); the first is the
default."""


def ssh_base(port: int | None = None, identity_file: str | None = None,
             host_key_checking: str = "accept-new",
             alive_interval: int | None = None) -> list[str]:
    """``ssh`` and its options, up to (not including) the host. With ``alive_interval`` the
    client asks the server for an answer after that many seconds of silence and gives up (exit
    code 255) after ``SERVER_ALIVE_COUNT`` unanswered asks: a host whose network is cut then ends
    the ssh client in bounded time instead of leaving it waiting for TCP.

    Raises:
        ValueError: ``host_key_checking`` is not one of ``HOST_KEY_CHECKING``.
    """
    if host_key_checking not in HOST_KEY_CHECKING:
        raise ValueError(f"ssh host key checking must be one of {', '.join(HOST_KEY_CHECKING)}, "
                         f"got {host_key_checking!r}")
    argv = ["ssh", "-o", "BatchMode=yes", "-o", f"StrictHostKeyChecking={host_key_checking}"]
    if alive_interval is not None:
        argv += ["-o", f"ServerAliveInterval={alive_interval}",
                 "-o", f"ServerAliveCountMax={SERVER_ALIVE_COUNT}"]
    if port is not None:
        argv += ["-p", str(port)]
    if identity_file:
        argv += ["-i", identity_file]
    return argv


def remote_command(cwd: str, env: Mapping[str, str], command: Sequence[str],
                   grace_seconds: int) -> str:
    """The command string ssh runs on the remote host (see the module docstring).

    Raises:
        ValueError: an environment variable name that a shell cannot carry.
    """
    for name in env:
        if not _NAME.match(name):
            raise ValueError(f"cannot export {name!r} to a remote host: not a variable name")
    words = ["exec", "sh", "-c", WRAPPER, "horarun-rank", str(max(1, grace_seconds)), WATCHER,
             "env"]
    words += [f"{name}={value}" for name, value in env.items()]
    words += list(command)
    return f"cd {shlex.quote(cwd)} >/dev/null 2>&1; " + " ".join(shlex.quote(w) for w in words)


def ssh_command(host: str, cwd: str, env: Mapping[str, str], command: Sequence[str],
                grace_seconds: int, port: int | None = None,
                identity_file: str | None = None,
                host_key_checking: str = "accept-new",
                alive_interval: int | None = None) -> list[str]:
    """The full ssh argv that runs ``command`` on ``host`` in ``cwd`` with ``env`` (see
    :func:`ssh_base` for ``alive_interval``)."""
    return ssh_base(port, identity_file, host_key_checking, alive_interval) + [
        host, remote_command(cwd, env, command, grace_seconds)]


def stdin_payload(private: Mapping[str, str]) -> bytes:
    """What the launcher writes to the ssh client's stdin: ``NAME=VALUE`` lines, then a blank.

    Raises:
        ValueError: a name that is not a variable name, or a value with a newline.
    """
    lines = []
    for name, value in private.items():
        if not _NAME.match(name) or "\n" in value or "\r" in value:
            raise ValueError(f"cannot pass {name!r} through ssh stdin")
        lines.append(f"{name}={value}\n")
    return ("".join(lines) + "\n").encode()
