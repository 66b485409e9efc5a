"""The shared-memory transport when a rank is killed with SIGKILL in the middle of a collective:
the others fail within the job's bound, nothing is left behind (no file in /dev/shm, no open
descriptor, no mapping once the survivors shut down), and HORA_SHM_DISABLE=1 keeps a one-host job
on TCP with one log line saying why.

Each job is started torchrun-style (no launcher that would kill the survivors for us) and every
wait is bounded, so a hang shows up as a failure with the collected output."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from torchrun_jobs import clean_env, run_job, transcript

# Ranks loop over 64 MiB allreduces, which spend most of their time moving data through the
# shared rings; the victim kills itself with SIGKILL from a timer, often inside one of them (the
# survivors then fail in the shared-memory wait, seeing its process gone), otherwise between two
# (they fail through the closed control connection). Either way the bounds below hold.
WORKER = r"""
import os
import signal
import sys
import threading
import time

import numpy as np

import hora


def segment_mappings():
    with open("/proc/self/maps") as f:
        return sum("memfd:hora-shm" in line for line in f)


def segment_descriptors():
    found = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            found += "memfd:hora-shm" in os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            pass
    return found


hora.init()
rank = hora.rank()
victim = int(os.environ["FAULT_VICTIM"])
x = np.ones(16 << 20, dtype=np.float32)
out = hora.allreduce(x, op=hora.Sum, name="warmup")
assert float(out[0]) == hora.size(), out[0]
print(f"READY rank={rank} transport={hora._core.transport_name()} "
      f"mappings={segment_mappings()} fds={segment_descriptors()}", flush=True)
if rank == victim:
    threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGKILL)).start()
step = 0
start = time.monotonic()
try:
    while True:
        start = time.monotonic()
        hora.allreduce(x, op=hora.Sum, name=f"step.{step}")
        step += 1
except Exception as exc:
    elapsed = time.monotonic() - start
    ok = isinstance(exc, hora.HoraError)
    print(f"PENDING-FAILED rank={rank} after={elapsed:.1f}s horaerror={ok} "
          f"{type(exc).__name__}: {exc}", flush=True)
    hora.shutdown()
    print(f"RELEASED rank={rank} mappings={segment_mappings()} fds={segment_descriptors()}",
          flush=True)
    sys.exit(3)
"""

NP = 3
JOB_TIMEOUT_SECONDS = "5"
HANG_SECONDS = 60.0
# A survivor's pending allreduce must fail this soon after it was submitted (the job's bound of
# 5 s plus slack for a busy machine; the peer's exit is seen within tens of milliseconds).
SURVIVOR_DEADLINE_SECONDS = 10.0


def hora_entries_in_dev_shm() -> list[str]:
    return sorted(n for n in os.listdir("/dev/shm") if "hora" in n) if os.path.isdir(
        "/dev/shm") else []


@pytest.mark.parametrize("victim", [1, 0], ids=["worker_killed", "rank0_killed"])
def test_kill_9_mid_collective_leaves_nothing(tmp_path: Path, victim: int) -> None:
    before = hora_entries_in_dev_shm()
    env = clean_env(JOB_TIMEOUT_SECONDS)
    env["FAULT_VICTIM"] = str(victim)
    procs, outputs, hung = run_job(tmp_path, WORKER, NP, env, list(range(NP)), HANG_SECONDS)
    log = transcript(procs, outputs)
    assert not hung, f"ranks {hung} hung for {HANG_SECONDS:.0f} s:\n{log}"
    for r in range(NP):
        # The segment is mapped once, its arena once beside it (arena.h), and neither has a
        # descriptor or a name while the job runs.
        assert f"READY rank={r} transport=tcp+shm mappings=2 fds=0" in outputs[r], log
    assert procs[victim].returncode == -9, log
    for r in range(NP):
        if r == victim:
            continue
        assert procs[r].returncode == 3, f"rank {r} did not report a failed op:\n{log}"
        match = re.search(r"PENDING-FAILED rank=\d+ after=([\d.]+)s horaerror=(\w+)", outputs[r])
        assert match and match.group(2) == "True", log
        assert float(match.group(1)) < SURVIVOR_DEADLINE_SECONDS, log
        assert f"RELEASED rank={r} mappings=0 fds=0" in outputs[r], log
    assert hora_entries_in_dev_shm() == before


DISABLED_WORKER = r"""
import numpy as np

import hora

hora.init()
out = hora.allreduce(np.arange(5, dtype=np.float64), op=hora.Sum, name="x")
assert out.tolist() == [float(v * hora.size()) for v in range(5)], out
print(f"DONE rank={hora.rank()} transport={hora._core.transport_name()}", flush=True)
hora.shutdown()
"""


@pytest.mark.parametrize("disabled", [True, False], ids=["disabled", "default"])
def test_shm_disable_keeps_tcp_and_says_why(tmp_path: Path, disabled: bool) -> None:
    env = clean_env("20")
    env["HORA_LOG_LEVEL"] = "info"
    if disabled:
        env["HORA_SHM_DISABLE"] = "1"
    procs, outputs, hung = run_job(tmp_path, DISABLED_WORKER, 2, env, [0, 1], HANG_SECONDS)
    log = transcript(procs, outputs)
    assert not hung and all(p.returncode == 0 for p in procs), log
    want = "tcp" if disabled else "tcp+shm"
    for r in range(2):
        assert f"DONE rank={r} transport={want}\n" in outputs[r], log
    why = "not shared memory: HORA_SHM_DISABLE is set"
    assert outputs[0].count(why) == (1 if disabled else 0), log
    assert why not in outputs[1], log
