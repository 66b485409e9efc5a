"""The shared arena of a one-host job (HORA_SHM_ARENA_BYTES): its budget, and a block that
outlives a failed job. Each job is started torchrun-style, every wait bounded."""

from __future__ import annotations

import os
import re
from pathlib import Path

from torchrun_jobs import clean_env, run_job, transcript

HANG_SECONDS = 60.0
PAGE = os.sysconf("SC_PAGESIZE")

BUDGET_WORKER = r"""
import os

import numpy as np

import hora
from hora import _core

hora.init()
info = _core.shared_pool_info()
if info is None:
    print(f"NO-ARENA rank={hora.rank()}", flush=True)
else:
    page = os.sysconf("SC_PAGESIZE")
    refused = _core.shared_block(info["bytes_free"] + 1) is None
    block = _core.shared_block(page)
    x = np.frombuffer(block, dtype=np.float32)
    x[:] = hora.rank() + 1
    hora.allreduce_(x, op=hora.Sum, name="x")
    print(f"ARENA rank={hora.rank()} free={info['bytes_free']} refused={refused} "
          f"sum={x[0]:g} in_pool={_core.in_shared_pool(x.ctypes.data, x.nbytes)}", flush=True)
hora.shutdown()
"""


def test_arena_bytes_sets_each_ranks_budget(tmp_path: Path) -> None:
    for budget in ("0", str(2 * PAGE)):
        env = clean_env("20")
        env["HORA_SHM_ARENA_BYTES"] = budget
        procs, outputs, hung = run_job(tmp_path, BUDGET_WORKER, 2, env, [0, 1], HANG_SECONDS)
        log = transcript(procs, outputs)
        assert not hung and all(p.returncode == 0 for p in procs), log
        for r in range(2):
            if budget == "0":
                assert f"NO-ARENA rank={r}\n" in outputs[r], log
            else:
                want = f"ARENA rank={r} free={2 * PAGE} refused=True sum=3 in_pool=True\n"
                assert want in outputs[r], log


# Rank 0 reduces 16 MiB that lie in its arena while rank 1 kills itself: rank 0 fails within the
# job's bound, and after its shutdown the block is still its memory (the arena's mapping stays
# while the block lives) and goes once it is dropped.
KILL_WORKER = r"""
import gc
import os
import signal
import sys
import threading

import numpy as np

import hora
from hora import _core


def mappings():
    with open("/proc/self/maps") as f:
        return sum("memfd:hora-shm" in line for line in f)


hora.init()
block = _core.shared_block(64 << 20)
x = np.frombuffer(block, dtype=np.float32)
del block
x[:] = 1
if hora.rank() == 1:
    threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGKILL)).start()
try:
    while True:
        hora.allreduce_(x, op=hora.Max, name="x")
except Exception as exc:
    print(f"FAILED horaerror={isinstance(exc, hora.HoraError)}", flush=True)
hora.shutdown()
x[-1] = 7
print(f"AFTER mappings={mappings()} first={x[0]:g} last={x[-1]:g}", flush=True)
del x
gc.collect()
print(f"DROPPED mappings={mappings()}", flush=True)
sys.exit(3)
"""


def test_a_block_outlives_a_failed_job_and_goes_with_its_last_user(tmp_path: Path) -> None:
    procs, outputs, hung = run_job(tmp_path, KILL_WORKER, 2, clean_env("5"), [0, 1],
                                   HANG_SECONDS)
    log = transcript(procs, outputs)
    assert not hung, log
    assert procs[1].returncode == -9 and procs[0].returncode == 3, log
    assert "FAILED horaerror=True" in outputs[0], log
    assert re.search(r"AFTER mappings=1 first=1 last=7\n", outputs[0]), log
    assert "DROPPED mappings=0\n" in outputs[0], log
