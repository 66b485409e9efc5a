"""Under mpirun, a rank that never calls hora.init() does not leave the others blocked in MPI's
start-up collectives: past HORA_START_TIMEOUT they abort the MPI job (exit code 124, as a timed-out
collective does), saying which wait passed its bound, and mpirun ends every process. The same holds
for ``hora.init(comm=[ranks])`` when a listed rank never joins that list, and for the MPI
transport's set-up when one rank's init failed before it."""

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


# Rank 0 lists ranks 0 and 1; rank 1 starts a job of its own, so it never joins rank 0's list.
SUBSET_WORKER = """
import os
import hora
rank = int(os.environ["OMPI_COMM_WORLD_RANK"])
hora.init(comm=[0, 1] if rank == 0 else [1])
print("INIT-RETURNED", rank, flush=True)
hora.shutdown()
"""

# Rank 1 refuses its own process sets after MPI is up, then waits; rank 0 goes on starting.
REFUSED_WORKER = """
import os, time
import hora
rank = int(os.environ["OMPI_COMM_WORLD_RANK"])
try:
    hora.init(comm=[0, 1], process_sets=[[0]] if rank == 0 else [[7]])
    print("INIT-RETURNED", rank, flush=True)
except ValueError:
    print("INIT-REFUSED", rank, flush=True)
    time.sleep(300)
"""

needs_mpi = pytest.mark.skipif(shutil.which("mpirun") is None or not hora.mpi_built(),
                               reason="needs mpirun and a Hora built with MPI")


def run_mpi(worker: str) -> tuple[subprocess.CompletedProcess, str]:
    env = dict(os.environ, HORA_START_TIMEOUT=str(START_TIMEOUT_SECONDS),
               OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1")
    env.pop("HORA_CONTROLLER", None)
    env.pop("HORA_CPU_OPERATIONS", None)
    cmd = ["mpirun", "--bind-to", "none", "-np", "2", sys.executable, "-c", worker]
    proc = subprocess.run(cmd, check=False, env=env, capture_output=True, text=True, timeout=120)
    return proc, proc.stdout + proc.stderr


@needs_mpi
def test_rank_missing_at_start_aborts_the_mpi_job() -> None:
    proc, output = run_mpi(WORKER)
    assert proc.returncode == 124, output
    assert "INIT-RETURNED" not in output, output
    assert "within HORA_START_TIMEOUT" in output, output
    assert "not every rank of the MPI job called hora.init()" in output, \
        output


@needs_mpi
def test_listed_rank_missing_from_init_comm_ends_the_process() -> None:
    proc, output = run_mpi(SUBSET_WORKER)
    assert proc.returncode == 124, output
    assert "INIT-RETURNED 0" not in output, output
    assert "MPI_Comm_create_group over comm=[0, 1] did not return within HORA_START_TIMEOUT" \
        in output, output


@needs_mpi
def test_rank_that_failed_init_does_not_leave_the_others_in_the_set_up() -> None:
    proc, output = run_mpi(REFUSED_WORKER)
    assert proc.returncode == 124, output
    assert "INIT-REFUSED 1" in output and "INIT-RETURNED" not in output, output
    assert "not every rank reached the MPI transport's set-up within HORA_START_TIMEOUT" \
        in output, output
