"""A stopped rank (SIGSTOP, a debugger's pause, Ctrl-Z) is ended by the launcher's SIGTERM when
another rank fails: the launcher also sends SIGCONT, so the rank does not wait for the SIGKILL at
the end of the grace period."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

from hora.runner.local_exec import Job, RankSpec

GRACE_SECONDS = 30.0  # long: a rank still stopped would end by SIGKILL, after it

# Rank 0 writes its pid, then stops itself. Rank 1 waits (bounded) until rank 0 is stopped, fails.
STOPPER = """
import os, signal, sys, time
with open(sys.argv[1] + ".part", "w") as f:
    f.write(str(os.getpid()))
os.replace(sys.argv[1] + ".part", sys.argv[1])
os.kill(os.getpid(), signal.SIGSTOP)
time.sleep(120)
"""
FAILER = """
import os, sys, time
deadline = time.monotonic() + 60
while time.monotonic() < deadline:
    try:
        pid = open(sys.argv[1]).read()
        if open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] == "T":
            break
    except OSError:
        pass
    time.sleep(0.05)
sys.exit(4)
"""


class _Quiet:
    def line(self, rank: int, stream: str, data: bytes) -> None:
        pass

    def close(self) -> None:
        pass


def test_stopped_rank_ends_by_sigterm(tmp_path: Path) -> None:
    env = dict(os.environ)
    pid_file = str(tmp_path / "stopper.pid")
    specs = [RankSpec(0, "localhost", [sys.executable, "-c", STOPPER, pid_file], env),
             RankSpec(1, "localhost", [sys.executable, "-c", FAILER, pid_file], env)]
    job = Job(specs, _Quiet(), grace_seconds=GRACE_SECONDS)
    job.start()
    assert job.wait() == 4
    assert job.failed_rank == 1
    stopped = job._children[0].process  # the stopped rank's own exit
    assert stopped.returncode == -signal.SIGTERM, stopped.returncode
