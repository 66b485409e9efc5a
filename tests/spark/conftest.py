"""A local SparkSession for the tests of ``hora.spark`` (one per test module: it takes seconds
to start), and the check that no Spark task is left running Hora after a test.

Run from the repository root with the Python of the clients' environment (pyspark, torch)::

    PYTHONPATH=frameworks python -m pytest -q tests/spark
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import hora
import psutil
import pytest
from pyspark.sql import SparkSession

REPO = Path(__file__).resolve().parents[2]
SLOTS = 3
"""Task slots of the session (local[3]): jobs of 2 and 3 ranks fit, 4 do not."""

LEFTOVER_WAIT = 10.0
"""Seconds a rank's process may take to stop Hora (or be killed by Spark) after a job."""


def _session(master: str, name: str, **conf: str) -> SparkSession:
    """A quiet session at ``master`` whose Python workers run this interpreter and import the
    hora under test (this checkout's through PYTHONPATH, or the installed one in CI)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    paths = [str(Path(hora.__file__).resolve().parents[1]), os.environ.get("PYTHONPATH", "")]
    builder = (SparkSession.builder.master(master).appName(name)
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.log.level", "WARN")
               .config("spark.executorEnv.PYTHONPATH", os.pathsep.join(p for p in paths if p)))
    for key, value in conf.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    """A local[3] session whose failed tasks are not tried again."""
    session = _session(f"local[{SLOTS}]", "hora-spark-tests", **{"spark.task.maxFailures": "1"})
    yield session
    session.stop()


@pytest.fixture(scope="module")
def spark_retrying() -> Iterator[SparkSession]:
    """As ``spark``, but a failed task is tried again (up to 4 attempts; in local mode only the
    master URL sets this): what ``hora.spark.run_elastic`` meets on a cluster."""
    session = _session(f"local[{SLOTS},4]", "hora-spark-elastic-tests")
    yield session
    session.stop()


def ranks_running_hora() -> list[int]:
    """Processes under this one (Spark's Python workers) with Hora's engine running: every
    running engine of a job on one host maps the ranks' shared-memory region (a memfd named
    hora-shm); shutdown unmaps it."""
    found = []
    for proc in psutil.Process().children(recursive=True):
        try:
            with open(f"/proc/{proc.pid}/maps", encoding="utf-8", errors="replace") as f:
                if "hora-shm" in f.read():
                    found.append(proc.pid)
        except OSError:  # gone meanwhile
            continue
    return found


@pytest.fixture(autouse=True)
def no_rank_left_running_hora() -> Iterator[None]:
    """After every test: no Spark worker still runs Hora (a rank that never stopped, or a
    worker that Spark reuses with the engine still up)."""
    yield
    deadline = time.monotonic() + LEFTOVER_WAIT
    while (left := ranks_running_hora()) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not left, f"processes {left} still run Hora {LEFTOVER_WAIT:g} s after the test"
