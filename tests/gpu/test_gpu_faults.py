"""Failures on the GPU path end in bounded time with errors naming the rank, never a hang.

Ranks are started directly (torchrun-style variables, rank 0 serves the store), with the CPU
emulation loaded as NCCL and the CUDA runtime; HORA_EMU_NCCL_FAULT injects the fault.
"""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

WORKER = Path(__file__).resolve().parent / "fault_worker.py"
BOUND = 60.0  # seconds for a whole scenario: far above what a correct run takes


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def job_env(extra: dict[str, str]) -> dict[str, str]:
    """This environment without any rank's own variables, plus `extra`."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("HORA_RANK", "HORA_SIZE", "HORA_LOCAL", "HORA_CROSS",
                                "HORA_RENDEZVOUS", "HORA_SECRET", "HORA_HOSTNAME"))}
    env.update(extra)
    return env


def collect(procs: list[subprocess.Popen], start: float,
            bound: float = BOUND) -> tuple[list[int], list[str]]:
    """Every rank's exit code and output; a rank still running `bound` seconds after `start` is
    killed, and its output says so."""
    outputs, codes = [], []
    for p in procs:
        try:
            out, _ = p.communicate(timeout=max(1.0, bound - (time.monotonic() - start)))
        except subprocess.TimeoutExpired:
            p.kill()
            out, _ = p.communicate()
            out += "\n<killed: scenario bound reached>"
        outputs.append(out)
        codes.append(p.returncode)
    return codes, outputs


def start_ranks(np_: int, env: dict[str, str], secret: str, hosts: int = 1,
                faults: dict[int, str] | None = None) -> list[subprocess.Popen]:
    """`np_` workers on one port, each with its rank's variables; with `hosts` > 1 they claim
    that many hosts of equal size (GROUP_RANK), and `faults` gives a rank its
    HORA_EMU_NCCL_FAULT."""
    port = free_port()
    local = np_ // hosts
    procs = []
    for r in range(np_):
        renv = dict(env, RANK=str(r), WORLD_SIZE=str(np_), LOCAL_RANK=str(r % local),
                    LOCAL_WORLD_SIZE=str(local), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                    HORA_RENDEZVOUS_PORT=str(port), HORA_SECRET=secret)
        if hosts > 1:
            renv.update(GROUP_RANK=str(r // local), GROUP_WORLD_SIZE=str(hosts))
        if faults and r in faults:
            renv["HORA_EMU_NCCL_FAULT"] = faults[r]
        procs.append(subprocess.Popen([sys.executable, str(WORKER)], env=renv,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True))
    return procs


def run_job(np_: int, extra: dict[str, str]) -> tuple[list[int], list[str], float]:
    start = time.monotonic()
    codes, outputs = collect(start_ranks(np_, job_env(extra), "gpu-fault-test"), start)
    return codes, outputs, time.monotonic() - start


def failed_line(output: str) -> str:
    lines = [ln for ln in output.splitlines() if ln.startswith("FAILED rank=")]
    assert lines, output
    return lines[0]


@pytest.mark.parametrize("np_", [2, 3])
def test_async_error_aborts_and_fails_every_rank(np_: int) -> None:
    # Comm rank 1's second operation group fails on the device.
    codes, outputs, _ = run_job(np_, {"HORA_EMU_NCCL_FAULT": "error:1:2",
                                      "HORA_TIMEOUT_SECONDS": "30"})
    everything = "\n".join(outputs)
    assert all(c == 3 for c in codes), (codes, everything)
    line = failed_line(outputs[1])
    assert "rank 1: NCCL reported" in line and "emulated fault" in line, line
    assert "ALLREDUCE of 'allreduce.step1' on GPU 1" in line and "aborted" in line, line
    for r in range(np_):
        assert f"OK rank={r} step=0" in outputs[r], outputs[r]
        failed_line(outputs[r])  # every rank's pending handle failed, none hung


def test_stalled_peer_times_out_and_aborts() -> None:
    # Rank 1 never arrives at its second operation: both ranks' work passes the timeout.
    codes, outputs, elapsed = run_job(2, {"HORA_EMU_NCCL_FAULT": "stall:1:2",
                                          "HORA_TIMEOUT_SECONDS": "2"})
    everything = "\n".join(outputs)
    assert all(c == 3 for c in codes), (codes, everything)
    assert "did not complete within HORA_TIMEOUT_SECONDS (2 s)" in everything, everything
    for r in range(2):
        # Each rank's error names a rank: its own timeout, or the one whose timeout ended the job.
        line = failed_line(outputs[r])
        assert "rank 0:" in line or "rank 1:" in line or "rank 1" in line, line
    assert elapsed < BOUND


def test_dead_peer_fails_pending_gpu_work_naming_it() -> None:
    # Rank 1 is killed while its allreduce sits on the device; rank 0's pending handle must fail
    # through the control plane long before the 30 s collective timeout.
    codes, outputs, elapsed = run_job(2, {"GPU_FAULT_DIE": "1", "HORA_EMU_NCCL_FAULT": "stall:1:2",
                                          "HORA_TIMEOUT_SECONDS": "30"})
    assert codes[1] == -9, outputs[1]
    line = failed_line(outputs[0])
    assert "rank 1" in line, line
    assert elapsed < 25, (elapsed, outputs[0])
