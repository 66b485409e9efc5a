"""``horarun --mpi`` across the bed's hosts, under each MPI of mpi_flavours.py (the mpirun on PATH,
Open MPI 5, MPICH): that MPI's mpirun starts its daemons on hostA and hostB over the bed's ssh
(horarun hands it the port and key, in that MPI's own spelling), every rank runs on the host it
was placed on with that MPI's libmpi, negotiation and collectives run over MPI, and the op checks
of tests/parallel pass."""

from __future__ import annotations

import pytest
from launching import horarun, pytest_command, python_command
from mpi_flavours import NAMES, Flavour, find
from test_multihost_collectives import ENGINE, passed_on_every_rank
from test_multihost_transport import reports
from testbed import TestBed

MPI_OPS = ["test_core_allreduce.py", "test_core_allgather.py", "test_core_broadcast.py",
           "test_core_alltoall.py", "test_core_reducescatter.py"]

REPORT = """
    import json, socket
    import numpy as np
    import hora
    hora.init()
    total = hora.allreduce(np.full(1000, hora.rank() + 1, np.float32), op=hora.Sum)
    with open("/proc/self/maps") as maps:
        libmpi = sorted({line.split()[-1] for line in maps if "/libmpi.so" in line})
    print("report", json.dumps({"rank": hora.rank(), "host": socket.gethostname(),
        "transport": hora._core.transport_name(), "mpi": hora.mpi_enabled(),
        "sum": float(total[0]), "libmpi": libmpi, "hora": hora.__file__}), flush=True)
    hora.shutdown()
"""


@pytest.fixture(params=NAMES)
def flavour(request: pytest.FixtureRequest) -> Flavour:
    found = find(request.param)
    if isinstance(found, str):
        pytest.skip(found)
    return found


def test_horarun_mpi_places_ranks_on_their_hosts_over_the_beds_ssh(bed2: TestBed,
                                                                   flavour: Flavour):
    job = horarun(bed2, bed2.host_list(2, names=True), python_command(REPORT), flags=["--mpi"],
                  env=flavour.env(), timeout=90)
    assert job.returncode == 0, job.output[-4000:]
    got = reports(job, 4)
    assert [g["host"] for g in got] == ["hostA", "hostA", "hostB", "hostB"], got
    assert all(g["transport"] == "mpi" and g["mpi"] and g["sum"] == 10.0 for g in got), got
    # Each rank runs the hora built against this MPI, with one libmpi: for a built flavour, that
    # MPI's own (Open MPI 5's mpirun would also have Open MPI 4's build load its libmpi.so.40).
    assert all(g["hora"].startswith(flavour.hora_parent + "/") for g in got), got
    assert all(len(g["libmpi"]) == 1 for g in got), got
    if flavour.lib_dir is not None:
        assert all(g["libmpi"][0].startswith(flavour.lib_dir + "/") for g in got), got


def test_every_collective_matches_numpy_over_mpi_across_hosts(bed2: TestBed, flavour: Flavour):
    job = horarun(bed2, bed2.host_list(2), pytest_command(*MPI_OPS), flags=["--mpi"],
                  env={**ENGINE, **flavour.env()}, timeout=150)
    assert job.returncode == 0, job.output[-6000:]
    assert passed_on_every_rank(job, 4) >= 500
