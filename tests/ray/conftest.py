"""One local Ray instance (4 CPUs, no dashboard, its files under a fresh /tmp folder) for the
tests of a pytest session; the workers import this folder's modules through PYTHONPATH."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")
HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[None]:
    folder = tempfile.mkdtemp(prefix="ray_", dir="/tmp")
    path = os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))
    ray.init(num_cpus=4, include_dashboard=False, _temp_dir=folder,
             runtime_env={"env_vars": {"PYTHONPATH": path}})
    try:
        yield
    finally:
        ray.shutdown()
        shutil.rmtree(folder, ignore_errors=True)
