"""A rank that dies mid-job: the others must fail, not hang, and the launcher must say who died.

Each test starts its own small 3-rank job on this host (loopback only) and bounds every wait, so
a hang shows up as a failure with the collected output rather than a stuck test run.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from torchrun_jobs import clean_env, kill_group, run_job, transcript

# What a rank of the job runs. The victim leaves after the warm-up; the others wait on an allreduce
# the victim never submits, and report how that wait ended.
WORKER = r"""
import os
import sys
import time

import numpy as np

import hora

hora.init()
rank = hora.rank()
victim = int(os.environ["FAULT_VICTIM"])
x = np.ones(1024, dtype=np.float32)
for step in range(3):
    out = hora.allreduce(x, op=hora.Sum, name=f"warmup.{step}")
    assert float(out[0]) == hora.size(), out[0]
print(f"READY rank={rank}", flush=True)
if rank == victim:
    time.sleep(1.0)
    os._exit(1)
start = time.monotonic()
try:
    hora.allreduce(x, op=hora.Sum, name="pending")
except Exception as exc:
    elapsed = time.monotonic() - start
    print(
        f"PENDING-FAILED rank={rank} after={elapsed:.1f}s "
        f"horaerror={isinstance(exc, hora.HoraError)} {type(exc).__name__}: {exc}",
        flush=True,
    )
    sys.exit(3)
print(f"UNEXPECTED-SUCCESS rank={rank}", flush=True)
sys.exit(4)
"""

NP = 3
# The job's own bound on a silent peer; a dead peer should be noticed much sooner (closed socket).
JOB_TIMEOUT_SECONDS = "5"
# How long a whole job may take before the test calls it a hang.
HANG_SECONDS = 60.0
# The launcher must end the job this soon after the start (warm-up included).
LAUNCHER_DEADLINE_SECONDS = 25.0
# A survivor's pending allreduce must fail this soon after it was submitted.
SURVIVOR_DEADLINE_SECONDS = 20.0


def _horarun() -> list[str]:
    """The launcher next to this interpreter, or its entry point run through this interpreter."""
    beside = Path(sys.executable).parent / "horarun"
    if beside.exists():
        return [str(beside)]
    found = shutil.which("horarun")
    if found:
        return [found]
    return [
        sys.executable,
        "-c",
        "import sys; from hora.runner.launch import main; sys.exit(main())",
    ]


def test_launcher_names_the_dead_rank(tmp_path: Path) -> None:
    """horarun -np 3: rank 1 exits with status 1; the launcher exits non-zero naming rank 1."""
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    env = clean_env(JOB_TIMEOUT_SECONDS)
    env["FAULT_VICTIM"] = "1"
    cmd = [*_horarun(), "-np", str(NP), sys.executable, str(script)]
    start = time.monotonic()
    proc = subprocess.Popen(
        cmd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        cwd=tmp_path,
    )
    try:
        output, _ = proc.communicate(timeout=HANG_SECONDS)
    except subprocess.TimeoutExpired:
        kill_group(proc)
        output, _ = proc.communicate()
        pytest.fail(f"horarun still running after {HANG_SECONDS:.0f} s:\n{output}")
    finally:
        kill_group(proc)
    elapsed = time.monotonic() - start
    assert proc.returncode != 0, f"launcher exited 0 although rank 1 died:\n{output}"
    assert elapsed < LAUNCHER_DEADLINE_SECONDS, f"launcher took {elapsed:.1f} s:\n{output}"
    assert output.count("READY") == NP, f"the job did not get going:\n{output}"
    assert "UNEXPECTED-SUCCESS" not in output, output
    # The launcher's own report names the rank: lines that are not a rank's prefixed output.
    report = "\n".join(
        line
        for line in output.splitlines()
        if not re.match(r"\[\d+\]<(stdout|stderr)>", line)
        and "READY" not in line
        and "PENDING-FAILED" not in line
    )
    assert re.search(r"rank\s*[:=#]?\s*1\b", report, re.IGNORECASE), (
        f"the launcher's output does not name rank 1:\n{output}"
    )


@pytest.mark.parametrize("victim", [1, 0], ids=["worker_dies", "coordinator_dies"])
def test_survivors_fail_pending_op(tmp_path: Path, victim: int) -> None:
    """Three ranks started torchrun-style (no launcher to kill anybody): when one dies, the others'
    pending allreduce fails with a hora.HoraError within seconds and they exit."""
    env = clean_env(JOB_TIMEOUT_SECONDS)
    env["FAULT_VICTIM"] = str(victim)
    procs, outputs, hung = run_job(tmp_path, WORKER, NP, env, list(range(NP)), HANG_SECONDS)
    log = transcript(procs, outputs)
    assert not hung, f"ranks {hung} hung for {HANG_SECONDS:.0f} s:\n{log}"
    assert all(f"READY rank={r}" in outputs[r] for r in range(NP)), log
    assert procs[victim].returncode == 1, log
    for r in range(NP):
        if r == victim:
            continue
        assert procs[r].returncode == 3, f"rank {r} did not report a failed op:\n{log}"
        match = re.search(r"PENDING-FAILED rank=\d+ after=([\d.]+)s horaerror=(\w+)", outputs[r])
        assert match, log
        assert match.group(2) == "True", f"rank {r} got a non-Hora exception:\n{log}"
        assert float(match.group(1)) < SURVIVOR_DEADLINE_SECONDS, log
