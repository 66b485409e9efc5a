"""Starting a benchmark's ranks: horarun, mpirun, free ports, the example models."""

from __future__ import annotations

import importlib.util
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[2]
SYNTHETIC_BENCHMARK = REPO / "examples" / "pytorch" / "synthetic_benchmark.py"


def horarun_command(np_: int, *flags: str) -> list[str]:
    """horarun of this interpreter's hora (``python -m hora.runner``), so that the launcher and
    the ranks run the same Hora whatever horarun is first on PATH."""
    return [sys.executable, "-m", "hora.runner", "-np", str(np_), *flags]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    return free_ports(1)[0]


def free_ports(count: int) -> list[int]:
    """``count`` distinct free TCP ports on 127.0.0.1 (all held open until all are found)."""
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [int(s.getsockname()[1]) for s in sockets]
    finally:
        for s in sockets:
            s.close()


def find_mpirun() -> str | None:
    """mpirun (or mpiexec) on PATH."""
    return shutil.which("mpirun") or shutil.which("mpiexec")


def mpirun_version(mpirun: str | None = None) -> str | None:
    """The first line of ``mpirun --version`` ('mpirun (Open MPI) 4.1.4'), None without MPI."""
    mpirun = mpirun or find_mpirun()
    if mpirun is None:
        return None
    out = subprocess.run([mpirun, "--version"], check=False, capture_output=True, text=True)
    lines = out.stdout.strip().splitlines()
    return lines[0] if lines else None


def mpi_env() -> dict[str, str]:
    """This environment for an mpirun job of peers: without Hora's and Horovod's settings, and
    with Open MPI's consent to run as root (containers)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HORA_", "HOROVOD_"))}
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    return env


def load_script(path: Path, name: str) -> ModuleType:
    """The script at ``path`` (an example) imported as the module ``name``."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_synthetic_benchmark() -> ModuleType:
    """examples/pytorch/synthetic_benchmark.py as a module: its models, flags and timing loop."""
    return load_script(SYNTHETIC_BENCHMARK, "hora_synthetic_benchmark")
