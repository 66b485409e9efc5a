"""Ends a job's local ranks when their launcher dies without stopping them (``kill -9``, OOM).

The launcher starts this as its own small process, in a session of its own, with stdin on a pipe
whose only writer is the launcher. It reads lines from the launcher:

* ``+PGID``: a rank now runs in process group PGID;
* ``-PGID``: that rank has ended and the launcher has dealt with its group.

End-of-file means the launcher is gone: the kernel closes the pipe when the launcher dies, however
it dies. Every group still listed then gets SIGTERM (and SIGCONT, for stopped ranks), and SIGKILL
after the grace period (``argv[1]`` seconds). A launcher that ends normally has removed every group
first, so the reaper then just exits.

The file runs as a script (``python -I -S reaper.py GRACE``), so it imports nothing from Hora:
it starts in milliseconds and does not load the engine.
"""

from __future__ import annotations

import os
import signal
import sys
import time


def _signal_groups(groups: set[int], signum: int) -> set[int]:
    """Sends ``signum`` to each group; returns the groups that still exist."""
    alive = set()
    for pgid in groups:
        try:
            os.killpg(pgid, signum)
            alive.add(pgid)
        except ProcessLookupError:
            pass
        except PermissionError:
            alive.add(pgid)
    return alive


def _any_alive(groups: set[int]) -> bool:
    """Whether a process of ``groups`` still runs (zombies, which wait for whoever adopted them
    to reap them, do not count)."""
    try:
        pids = [name for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return bool(_signal_groups(groups, 0))  # no /proc: a zombie counts as alive
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 2 and fields[0] != b"Z" and int(fields[2]) in groups:
            return True
    return False


def reap(lines: object, grace_seconds: float) -> set[int]:
    """Follows the launcher's ``+PGID``/``-PGID`` lines until end-of-file, then stops the groups
    still listed (TERM, then KILL after ``grace_seconds``). Returns the groups it signalled."""
    groups: set[int] = set()
    for line in lines:  # type: ignore[attr-defined]
        text = line.strip()
        if len(text) < 2 or text[0] not in "+-" or not text[1:].isdigit():
            continue
        pgid = int(text[1:])
        if pgid <= 1:
            continue  # never group 0 (our own) or 1
        if text[0] == "+":
            groups.add(pgid)
        else:
            groups.discard(pgid)
    if not groups:
        return groups
    alive = _signal_groups(groups, signal.SIGTERM)
    _signal_groups(alive, signal.SIGCONT)  # a stopped rank acts on the SIGTERM now
    deadline = time.monotonic() + grace_seconds
    while alive and time.monotonic() < deadline and _any_alive(alive):
        time.sleep(0.05)
    _signal_groups(alive, signal.SIGKILL)
    return groups


def main() -> int:
    """``reaper.py GRACE``: see the module docstring."""
    grace = float(sys.argv[1]) if len(sys.argv) > 1 else 2.0
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C is the launcher's to handle
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    reap(sys.stdin, grace)
    return 0


if __name__ == "__main__":
    sys.exit(main())
