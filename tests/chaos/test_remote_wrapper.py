"""A remote rank ends when its ssh connection dies (the launcher's host killed, the network cut).

Runs the exact shell program horarun hands to ssh (hora.runner.ssh_exec.remote_command) on this
host, with its stdin on a pipe whose only writer is a stand-in for the ssh session. SIGKILLing
that stand-in is what the remote side sees when ssh dies: end-of-file on stdin. The rank, its
wrapper and the watcher must all be gone within a bound.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run_chaos  # the chaos driver: its process helpers
from hora.runner import ssh_exec

GRACE_SECONDS = 1
START_BOUND_SECONDS = 30.0


def test_rank_ends_when_its_ssh_session_dies() -> None:
    marker = uuid.uuid4().hex
    env = dict(os.environ, CHAOS_MARK=marker)
    # The ssh session: sends the end of the private variables (a blank line), then holds on.
    hold = "import sys, time; sys.stdout.write('\\n'); sys.stdout.flush(); time.sleep(300)"
    session = subprocess.Popen([sys.executable, "-c", hold], stdout=subprocess.PIPE, env=env,
                               start_new_session=True)
    rank = [sys.executable, "-c", "import time; print('RANK-UP', flush=True); time.sleep(300)"]
    command = ssh_exec.remote_command(os.getcwd(), {"CHAOS_MARK": marker}, rank, GRACE_SECONDS)
    wrapper = subprocess.Popen(["sh", "-c", command], stdin=session.stdout,
                               stdout=subprocess.PIPE, text=True, env=env,
                               start_new_session=True)
    assert session.stdout is not None
    session.stdout.close()  # the wrapper's stdin now has one writer: the session
    reader = run_chaos.Reader(wrapper.stdout)
    try:
        assert reader.wait_for("RANK-UP", 1, START_BOUND_SECONDS), reader.text(1)
        assert len(run_chaos.marked_pids(marker)) >= 3  # session, wrapper, watcher, rank
        session.kill()
        session.wait()
        assert run_chaos.wait_process(wrapper, run_chaos.LAUNCHER_DEATH_BOUND_SECONDS), \
            "the remote wrapper outlived its ssh session"
        left = run_chaos.wait_gone(marker, run_chaos.LAUNCHER_DEATH_BOUND_SECONDS)
        assert not left, f"{len(left)} processes outlived the ssh session"
    finally:
        for proc in (session, wrapper):
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
        run_chaos.wait_gone(marker, 0)
