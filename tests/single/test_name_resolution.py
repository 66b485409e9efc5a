"""A rendezvous name that does not resolve yet (a Kubernetes pod's, until its Service lists it)
is waited for until HORA_START_TIMEOUT, by rank 0 (which serves the store at that name's
address) as by the other ranks (which connect to it). ``.invalid`` never resolves (RFC 2606)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import hora
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(hora.__file__)))


@pytest.mark.parametrize("rank", [0, 1])
def test_an_unresolvable_master_addr_is_waited_for_until_the_start_timeout(rank: int) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HORA_", "HOROVOD_"))}
    env.update({"PYTHONPATH": os.pathsep.join(filter(None, [ROOT, env.get("PYTHONPATH")])),
                "RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "1",
                "MASTER_ADDR": "hora-pod-0.invalid", "MASTER_PORT": "29600",
                "HORA_SECRET": "s3cret", "HORA_START_TIMEOUT": "2"})
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", "import hora; hora.init()"], env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    took = time.monotonic() - started
    assert done.returncode != 0
    assert "cannot resolve host 'hora-pod-0.invalid'" in done.stderr, done.stderr[-2000:]
    assert took >= 1.0, f"rank {rank} gave up after {took:.2f} s, before its start timeout"
