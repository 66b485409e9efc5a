"""Starting the client scripts of this folder on 2 ranks, and reading what they wrote.

Every job runs in its own session with a clean environment (no launcher or rank variables of
the calling shell, one OpenMP thread per rank, DeepSpeed on CPU, no Hugging Face downloads) and a
time limit, after which the whole session is killed: no rank outlives its test.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
LAUNCHERS = ("own", "torchrun", "horarun")
RANKS = 2
DROPPED_PREFIXES = ("HORA_", "HOROVOD_", "OMPI_", "PMI_", "SLURM_", "TORCHELASTIC_", "ACCELERATE_",
                    "RAY_ADDRESS")
DROPPED_NAMES = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                 "GROUP_WORLD_SIZE", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT"}


def clean_env() -> dict[str, str]:
    """This process's environment without launcher variables, set up for the client scripts."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(DROPPED_PREFIXES) and k not in DROPPED_NAMES}
    env.update(PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1", DS_ACCELERATOR="cpu",
               HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    return env


def free_port() -> int:
    """A TCP port free on loopback right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def command(launcher: str, script: str, args: list[str]) -> tuple[list[str], dict[str, str]]:
    """The command and environment that start ``script`` (a file of this folder) on 2 ranks.

    ``own``: the script alone (the client starts its other ranks and picks their port);
    ``torchrun``: ``python -m torch.distributed.run``; ``horarun``: ``python -m hora.runner``.
    """
    path = str(HERE / script)
    env = clean_env()
    if launcher == "own":
        return [sys.executable, path, *args], env
    if launcher == "torchrun":
        return [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(RANKS),
                "--master-addr", "127.0.0.1", "--master-port", str(free_port()), path, *args], env
    if launcher == "horarun":
        return [sys.executable, "-m", "hora.runner", "-np", str(RANKS), sys.executable, path,
                *args], env
    raise ValueError(f"unknown launcher {launcher!r}; choose one of {', '.join(LAUNCHERS)}")


def kill_session(pid: int) -> None:
    """Kill every process left in the session led by ``pid``."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def run_job(argv: list[str], env: dict[str, str], timeout: float) -> str:
    """Run ``argv`` in a session of its own; return its output (stdout and stderr).

    Raises AssertionError, with the output, when it exits non-zero or outlives ``timeout``
    seconds. Whatever is left of its session afterwards is killed.
    """
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_session(proc.pid)
        output, _ = proc.communicate()
        raise AssertionError(f"{' '.join(argv)} still ran after {timeout} s:\n{output}") from None
    finally:
        kill_session(proc.pid)
    assert proc.returncode == 0, f"{' '.join(argv)} exited {proc.returncode}:\n{output}"
    return output


def read_results(out: Path) -> dict[int, dict]:
    """Every rank's result under ``out``, by rank; asserts that each of the 2 ranks wrote one."""
    found = {int(p.stem[len("rank"):]): json.loads(p.read_text()) for p in out.glob("rank*.json")}
    assert sorted(found) == list(range(RANKS)), f"result files of ranks {sorted(found)} in {out}"
    return found
