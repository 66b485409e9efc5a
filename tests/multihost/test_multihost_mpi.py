"""``horarun --mpi`` across the bed's hosts: Open MPI's mpirun starts its daemons on hostA and
hostB over the bed's ssh (horarun hands it the port and key), every rank runs on the host it was
placed on, negotiation and collectives run over MPI, and the op checks of tests/parallel pass."""

from __future__ import annotations

import shutil

import pytest
from launching import horarun, pytest_command, python_command
from test_multihost_collectives import ENGINE, passed_on_every_rank
from test_multihost_transport import reports
from testbed import TestBed

pytestmark = pytest.mark.skipif(shutil.which("mpirun") is None, reason="no mpirun on PATH")

MPI_OPS = ["test_core_allreduce.py", "test_core_allgather.py", "test_core_broadcast.py",
           "test_core_alltoall.py", "test_core_reducescatter.py"]

REPORT = """
    import json, socket
    import numpy as np
    import hora
    hora.init()
    total = hora.allreduce(np.full(1000, hora.rank() + 1, np.float32), op=hora.Sum)
    print("report", json.dumps({"rank": hora.rank(), "host": socket.gethostname(),
        "transport": hora._core.transport_name(), "mpi": hora.mpi_enabled(),
        "sum": float(total[0])}), flush=True)
    hora.shutdown()
"""


def test_horarun_mpi_places_ranks_on_their_hosts_over_the_beds_ssh(bed2: TestBed):
    job = horarun(bed2, bed2.host_list(2, names=True), python_command(REPORT), flags=["--mpi"],
                  timeout=90)
    assert job.returncode == 0, job.output[-4000:]
    got = reports(job, 4)
    assert [g["host"] for g in got] == ["hostA", "hostA", "hostB", "hostB"], got
    assert all(g["transport"] == "mpi" and g["mpi"] and g["sum"] == 10.0 for g in got), got


def test_every_collective_matches_numpy_over_mpi_across_hosts(bed2: TestBed):
    job = horarun(bed2, bed2.host_list(2), pytest_command(*MPI_OPS), flags=["--mpi"],
                  env=ENGINE, timeout=150)
    assert job.returncode == 0, job.output[-6000:]
    assert passed_on_every_rank(job, 4) >= 500
