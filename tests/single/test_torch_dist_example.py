"""examples/pytorch/ddp_hora_backend.py runs as documented: under horarun -np 2, and under
torchrun and mpirun, ``init_process_group(backend="hora")`` needs no other argument."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys

import hora
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(hora.__file__)))
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLE = os.path.join(REPO, "examples", "pytorch", "ddp_hora_backend.py")
DONE = "backend hora, 2 ranks, parameters identical: True"


def child_env() -> dict[str, str]:
    """This environment without launcher or rank variables, with this Hora on the path."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([ROOT] + [p for p in [env.get("PYTHONPATH")] if p])
    drop = ("HORA_", "HOROVOD_", "OMPI_", "PMI_", "SLURM_")
    names = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"}
    return {k: v for k, v in env.items() if not k.startswith(drop) and k not in names}


def run(command: list[str], env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(command, env=env or child_env(), capture_output=True, text=True,
                          timeout=240, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def test_example_under_horarun() -> None:
    out = run([sys.executable, "-m", "hora.runner", "-np", "2", sys.executable, EXAMPLE,
               "--epochs", "2"])
    assert DONE in out
    assert "epoch 1: mean loss" in out


def free_port_pair() -> int:
    """A port that is free with the next one free too (torchrun's store, then Hora's)."""
    for _ in range(100):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s, \
                socket.socket(socket.AF_INET, socket.SOCK_STREAM) as t:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
            try:
                t.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
            return port
    raise RuntimeError("no two consecutive free ports on 127.0.0.1")


def test_example_under_torchrun() -> None:
    # Hora's own store listens on MASTER_PORT + 1 under torchrun.
    out = run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
               "--master-addr", "127.0.0.1", "--master-port", str(free_port_pair()), EXAMPLE,
               "--epochs", "1"])
    assert DONE in out


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="no mpirun on this machine")
def test_example_under_mpirun() -> None:
    env = child_env()
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    out = run(["mpirun", "--oversubscribe", "--bind-to", "none", "-np", "2", "-x",
               "PYTHONPATH", sys.executable, EXAMPLE, "--epochs", "1"], env)
    assert DONE in out
