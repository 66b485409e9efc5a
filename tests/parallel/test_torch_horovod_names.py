"""Names a Horovod script or test reads besides the API: the launcher's HOROVOD_* variables and
the frontends' ``mpi_ops._basics`` module.

Run as ``horarun -np N python -m pytest -q tests/parallel/test_torch_horovod_names.py``
(N = 1 to 4): the variables are the launcher's, checked against what ``init`` found.
"""

from __future__ import annotations

import os

import hora.torch as hvd
from conftest import rank, size


def test_launcher_exports_horovod_topology() -> None:
    hvd.init()
    expected = {
        "HOROVOD_RANK": hvd.rank(), "HOROVOD_SIZE": hvd.size(),
        "HOROVOD_LOCAL_RANK": hvd.local_rank(), "HOROVOD_LOCAL_SIZE": hvd.local_size(),
        "HOROVOD_CROSS_RANK": hvd.cross_rank(), "HOROVOD_CROSS_SIZE": hvd.cross_size(),
    }
    assert {name: int(os.environ[name]) for name in expected} == expected
    assert os.environ["HOROVOD_HOSTNAME"] == os.environ["HORA_HOSTNAME"]
    assert int(os.environ["OMP_NUM_THREADS"]) >= 1


def test_mpi_ops_basics_lists_process_sets() -> None:
    hvd.init()
    assert hvd.mpi_ops._basics._get_process_set_ids_and_ranks() == {0: list(range(size()))}
    assert hvd.mpi_ops._basics.rank() == rank()
