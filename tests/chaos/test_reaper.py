"""hora.runner.reaper: on end-of-file it stops the process groups still listed, and only those."""

from __future__ import annotations

import io
import subprocess
import sys
import time

from hora.runner import reaper

BOUND_SECONDS = 30.0


def _group() -> subprocess.Popen:
    """A process in a group of its own that ignores SIGTERM (so only SIGKILL ends it)."""
    code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(120)"
    return subprocess.Popen([sys.executable, "-c", code], start_new_session=True)


def _ended(proc: subprocess.Popen) -> bool:
    try:
        proc.wait(BOUND_SECONDS)
        return True
    except subprocess.TimeoutExpired:
        return False


def test_listed_groups_are_killed_and_withdrawn_ones_spared() -> None:
    listed, withdrawn = _group(), _group()
    try:
        time.sleep(0.5)  # both have installed their SIGTERM handler
        lines = io.StringIO(f"+{listed.pid}\n+{withdrawn.pid}\n-{withdrawn.pid}\n+0\n+1\nbad\n")
        signalled = reaper.reap(lines, grace_seconds=0.5)
        assert signalled == {listed.pid}
        assert _ended(listed), "a listed group that ignores SIGTERM survived the grace period"
        assert listed.returncode == -9
        assert withdrawn.poll() is None, "a withdrawn group was signalled"
    finally:
        for proc in (listed, withdrawn):
            proc.kill()
            proc.wait()


def test_nothing_listed_nothing_signalled() -> None:
    assert reaper.reap(io.StringIO(""), grace_seconds=0.1) == set()
