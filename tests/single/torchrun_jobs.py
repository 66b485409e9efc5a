"""Small jobs started torchrun-style (RANK, WORLD_SIZE, MASTER_ADDR, ... per process, no
launcher) on loopback, for tests that need ranks nobody will stop for them: every wait is
bounded, and every rank's process group is killed before the test looks at the outputs."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path


def clean_env(timeout_seconds: str | None = None) -> dict[str, str]:
    """This process's environment without any launcher or rank variables; with
    ``timeout_seconds``, the job's HORA_TIMEOUT_SECONDS."""
    drop = ("HORA_", "HOROVOD_", "OMPI_", "PMI_", "SLURM_")
    names = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"}
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop) and k not in names}
    if timeout_seconds is not None:
        env["HORA_TIMEOUT_SECONDS"] = timeout_seconds
    env["PYTHONUNBUFFERED"] = "1"
    return env


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def run_job(
    tmp_path: Path,
    worker: str,
    np_: int,
    env: dict[str, str],
    wait_for: list[int],
    hang_seconds: float,
) -> tuple[list[subprocess.Popen], list[str], list[int]]:
    """Start ``np_`` ranks of the script ``worker`` with ``env`` (plus each rank's variables);
    wait, ``hang_seconds`` in all, for the ranks in ``wait_for`` to exit, then kill every rank.
    Returns the processes, their outputs and the ranks of ``wait_for`` that were still running."""
    script = tmp_path / "worker.py"
    script.write_text(worker)
    port = free_port()
    procs = []
    for r in range(np_):
        rank_env = dict(env)
        rank_env.update(
            RANK=str(r),
            WORLD_SIZE=str(np_),
            LOCAL_RANK=str(r),
            LOCAL_WORLD_SIZE=str(np_),
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
            HORA_RENDEZVOUS_PORT=str(port),
        )
        procs.append(
            subprocess.Popen(
                [sys.executable, str(script)],
                env=rank_env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                start_new_session=True,
                cwd=tmp_path,
            )
        )
    deadline = time.monotonic() + hang_seconds
    outputs: dict[int, str] = {}
    hung: list[int] = []
    for r in wait_for:
        # communicate() reads while it waits, so a rank that prints a lot cannot block on its pipe.
        try:
            outputs[r] = procs[r].communicate(timeout=max(0.1, deadline - time.monotonic()))[0]
        except subprocess.TimeoutExpired:
            hung.append(r)
    for proc in procs:
        kill_group(proc)
    for r, proc in enumerate(procs):
        if r not in outputs:
            outputs[r] = proc.communicate()[0]
    return procs, [outputs[r] for r in range(np_)], hung


def transcript(procs: list[subprocess.Popen], outputs: list[str]) -> str:
    """Every rank's exit status and output, for assertion messages."""
    return "\n".join(
        f"--- rank {r} (exit {p.returncode}) ---\n{o}"
        for r, (p, o) in enumerate(zip(procs, outputs))
    )
