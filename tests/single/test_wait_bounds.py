"""Every wait has a bound and can be interrupted.

Each test starts its own small job torchrun-style on loopback and bounds it as a whole, so a hang
shows up as a failure with the collected output:

- a Python thread blocked in a collective that cannot complete yet runs its signal handlers: an
  alarm's exception and Ctrl-C (KeyboardInterrupt) end the wait;
- ``add_process_set`` raises HoraTimeoutError when the other ranks do not make the same call
  within HORA_TIMEOUT_SECONDS, and the change still applies when they make it later.
"""

from __future__ import annotations

from pathlib import Path

from torchrun_jobs import clean_env, run_job, transcript

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
    # Ctrl-C raises KeyboardInterrupt, even where the job was started with SIGINT ignored.
    signal.signal(signal.SIGINT, signal.default_int_handler)
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


def test_blocked_wait_runs_signal_handlers(tmp_path: Path) -> None:
    procs, outputs, hung = run_job(tmp_path, SIGNALS_WORKER, 2, clean_env(), [0], HANG_SECONDS)
    log = transcript(procs, outputs)
    assert not hung, f"rank 0 hung for {HANG_SECONDS:.0f} s:\n{log}"
    assert "ALARM-INTERRUPTED" in outputs[0], log
    assert "SIGINT-INTERRUPTED" in outputs[0], log
    assert procs[0].returncode == 0, log


def test_add_process_set_times_out_and_applies_later(tmp_path: Path) -> None:
    env = clean_env(timeout_seconds="2")
    procs, outputs, hung = run_job(tmp_path, PROCESS_SET_WORKER, 3, env, [0, 1, 2], HANG_SECONDS)
    log = transcript(procs, outputs)
    assert not hung, f"ranks {hung} hung for {HANG_SECONDS:.0f} s:\n{log}"
    assert "ADD-TIMED-OUT" in outputs[0], log
    assert "HORA_TIMEOUT_SECONDS" in outputs[0], log
    assert "ADD-LATE id=1" in outputs[1], log
    for r in range(3):
        assert f"DONE rank={r}" in outputs[r], log
        assert procs[r].returncode == 0, log
