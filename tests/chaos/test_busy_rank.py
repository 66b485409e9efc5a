"""A rank busy in Python (holding the GIL, submitting nothing) for twice HORA_TIMEOUT_SECONDS
while the others wait for it is not silent: its background thread answers the others' pings, so
the job goes on and every result is right. Only a stopped or hung process is reported
unresponsive (tests/chaos/test_silent_peer.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run_chaos  # horarun's command line

TIMEOUT_SECONDS = 2.0
BUSY_SECONDS = 2 * TIMEOUT_SECONDS

# The busy rank spins in pure Python before each allreduce; the others already wait in it.
WORKER = """
import sys, time
import numpy as np
import hora

busy_rank, busy_seconds = int(sys.argv[1]), float(sys.argv[2])
hora.init()
n = hora.size()
for step in range(2):
    if hora.rank() == busy_rank:
        end = time.monotonic() + busy_seconds
        while time.monotonic() < end:
            pass
    x = np.full(5, hora.rank() + step, dtype=np.float64)
    y = hora.allreduce(x, op=hora.Sum, name="busy.x")
    want = sum(r + step for r in range(n))
    assert (y == want).all(), (y, want)
print(f"DONE rank={hora.rank()}", flush=True)
hora.shutdown()
"""


@pytest.mark.parametrize(("np_", "busy"), [(2, 0), (3, 2)])
def test_busy_rank_is_not_taken_for_silent(np_: int, busy: int) -> None:
    env = dict(os.environ, HORA_TIMEOUT_SECONDS=str(TIMEOUT_SECONDS))
    cmd = [*run_chaos.horarun_argv(), "-np", str(np_), sys.executable, "-c", WORKER, str(busy),
           str(BUSY_SECONDS)]
    proc = subprocess.run(cmd, check=False, env=env, capture_output=True, text=True, timeout=90)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output
    assert "unresponsive" not in output, output
    for rank in range(np_):
        assert f"DONE rank={rank}" in output, output
