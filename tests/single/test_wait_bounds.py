"""Every wait has a bound and can be interrupted.

Each test starts its own small job torchrun-style on loopback and bounds it as a whole, so a hang
shows up as a failure with the collected output:

- a Python thread blocked in a collective that cannot complete yet runs its signal handlers: an
  alarm's exception and Ctrl-C (KeyboardInterrupt) end the wait;
- ``add_process_set`` raises HoraTimeoutError when the other ranks do not make the same call
  within HORA_TIMEOUT_SECONDS, and the change still applies when they make it later.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

HANG_SECONDS = 90.0

SIGNALS_WORKER = r"""
import os
import signal
import sys
import threading
import time

import numpy as np

import hora

hora.init()
rank = hora.rank()
x = np.ones(8, dtype=np.float32)
hora.allreduce(x, op=hora.Sum, name="warmup")
if rank == 0:
    class Alarm(Exception):
        pass

    def on_alarm(signum, frame):
        raise Alarm()

    signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(1)
    try:
        hora.allreduce(x, op=hora.Sum, name="never.alarm")
        print("ALARM-NOT-DELIVERED", flush=True)
    except Alarm:
        print("ALARM-INTERRUPTED", flush=True)
    threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT)).start()
    try:
        hora.synchronize(hora.allreduce_async(x, op=hora.Sum, name="never.sigint"))
        print("SIGINT-NOT-DELIVERED", flush=True)
    except KeyboardInterrupt:
        print("SIGINT-INTERRUPTED", flush=True)
    os._exit(0)  # the interrupted collectives stay pending; leave without shutting down
else:
    # Busy (not blocked in a wait) until rank 0 is gone: nothing is a deadlock meanwhile.
    while True:
        time.sleep(0.2)
"""

PROCESS_SET_WORKER = r"""
import sys
import time

import numpy as np

import hora

hora.init(process_sets="dynamic")
rank = hora.rank()
if rank == 0:
    try:
        hora.add_process_set([0, 1])
        print("ADD-SUCCEEDED-EARLY", flush=True)
    except hora.HoraTimeoutError as exc:
        print(f"ADD-TIMED-OUT: {exc}", flush=True)
else:
    # Computing for longer than HORA_TIMEOUT_SECONDS before making the (world-collective) call.
    time.sleep(6.0)
    ps = hora.add_process_set([0, 1])
    print(f"ADD-LATE id={ps.process_set_id}", flush=True)
# The change applies on rank 0 as well once rank 1 made the call: both reach the barrier.
hora.barrier()
print(f"DONE rank={rank}", flush=True)
hora.shutdown()
"""


def _clean_env() -> dict[str, str]:
    drop = ("HORA_", "HOROVOD_", "OMPI_", "PMI_", "SLURM_")
    names = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"}
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop) and k not in names}
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _run_job(
    tmp_path: Path, worker: str, np_: int, env_extra: dict[str, str], wait_for: list[int]
) -> tuple[list[subprocess.Popen], list[str], list[int]]:
    """Start ``np_`` ranks of ``worker``; wait (bounded) for the ranks in ``wait_for``, then kill
    every rank. Returns the processes, their outputs and the ranks that hung."""
    script = tmp_path / "worker.py"
    script.write_text(worker)
    port = _free_port()
    procs = []
    for r in range(np_):
        env = _clean_env()
        env.update(env_extra)
        env.update(
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
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                start_new_session=True,
                cwd=tmp_path,
            )
        )
    deadline = time.monotonic() + HANG_SECONDS
    hung: list[int] = []
    for r in wait_for:
        try:
            procs[r].wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            hung.append(r)
    for proc in procs:
        _kill_group(proc)
    outputs = [p.communicate()[0] for p in procs]
    return procs, outputs, hung


def _transcript(procs: list[subprocess.Popen], outputs: list[str]) -> str:
    return "\n".join(
        f"--- rank {r} (exit {p.returncode}) ---\n{o}"
        for r, (p, o) in enumerate(zip(procs, outputs))
    )


def test_blocked_wait_runs_signal_handlers(tmp_path: Path) -> None:
    procs, outputs, hung = _run_job(tmp_path, SIGNALS_WORKER, 2, {}, wait_for=[0])
    transcript = _transcript(procs, outputs)
    assert not hung, f"rank 0 hung for {HANG_SECONDS:.0f} s:\n{transcript}"
    assert "ALARM-INTERRUPTED" in outputs[0], transcript
    assert "SIGINT-INTERRUPTED" in outputs[0], transcript
    assert procs[0].returncode == 0, transcript


def test_add_process_set_times_out_and_applies_later(tmp_path: Path) -> None:
    env = {"HORA_TIMEOUT_SECONDS": "2"}
    procs, outputs, hung = _run_job(tmp_path, PROCESS_SET_WORKER, 3, env, wait_for=[0, 1, 2])
    transcript = _transcript(procs, outputs)
    assert not hung, f"ranks {hung} hung for {HANG_SECONDS:.0f} s:\n{transcript}"
    assert "ADD-TIMED-OUT" in outputs[0], transcript
    assert "HORA_TIMEOUT_SECONDS" in outputs[0], transcript
    assert "ADD-LATE id=1" in outputs[1], transcript
    for r in range(3):
        assert f"DONE rank={r}" in outputs[r], transcript
        assert procs[r].returncode == 0, transcript
