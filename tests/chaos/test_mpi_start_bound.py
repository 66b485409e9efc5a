"""Under mpirun, a rank that never calls hora.init() does not leave the others blocked in MPI's
start-up collectives: past HORA_START_TIMEOUT they abort the MPI job (exit code 124, as a timed-out
collective does), saying which wait passed its bound, and mpirun ends every process."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import hora
import pytest

START_TIMEOUT_SECONDS = 3

# Rank 1 never starts Hora: it only sleeps (far longer than the test's own bound).
WORKER = """
import os, time
if os.environ["OMPI_COMM_WORLD_RANK"] == "1":
    time.sleep(300)
import hora
hora.init()
print("INIT-RETURNED", flush=True)
"""


@pytest.mark.skipif(shutil.which("mpirun") is None or not hora.mpi_built(),
                    reason="needs mpirun and a Hora built with MPI")
def test_rank_missing_at_start_aborts_the_mpi_job() -> None:
    env = dict(os.environ, HORA_START_TIMEOUT=str(START_TIMEOUT_SECONDS),
               OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1")
    env.pop("HORA_CONTROLLER", None)
    env.pop("HORA_CPU_OPERATIONS", None)
    cmd = ["mpirun", "--bind-to", "none", "-np", "2", sys.executable, "-c", WORKER]
    proc = subprocess.run(cmd, check=False, env=env, capture_output=True, text=True, timeout=120)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 124, output
    assert "INIT-RETURNED" not in output, output
    assert "within HORA_START_TIMEOUT" in output, output
    assert "not every rank of the MPI job called hora.init()" in output, \
        output
