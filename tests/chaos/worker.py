"""One rank of a chaos scenario (run under horarun or mpirun; see scenarios.py).

Settings come from the environment:
  CHAOS_OP      allreduce | allgather | broadcast | alltoall | reducescatter
  CHAOS_POINT   where the victim misbehaves: rendezvous | negotiation | mid | fusion | shutdown |
                stop | launcher | none
  CHAOS_VICTIM  the rank that misbehaves (launcher: the rank that sleeps while the others wait in
                its step's op; -1: every rank sleeps after the last step)
  CHAOS_STEP    the step at which it does
  CHAOS_DELAY   seconds after that point before it does (a timer thread)
  CHAOS_ELEMS   elements per tensor
  CHAOS_STEPS   steps in the job
  CHAOS_HOLD    how long a launcher scenario sleeps (the test kills the launcher meanwhile)

Each step runs the op on every rank and checks the result against NumPy (exit 5 when wrong); at
the victim's "fusion" step it is eight small allreduces in flight at once instead. A rank whose op
fails prints FAILED with the error, calls hora.shutdown(), prints how many more sockets it holds
than before ``import hora`` (none may be left), and exits with 3.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

import numpy as np
import worker_sockets  # counts the sockets held before hora.init()
from report_line import say


def _env_rank() -> int:
    for name in ("HORA_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "RANK"):
        value = os.environ.get(name)
        if value:
            return int(value)
    return 0


OP = os.environ.get("CHAOS_OP", "allreduce")
POINT = os.environ.get("CHAOS_POINT", "none")
VICTIM = int(os.environ.get("CHAOS_VICTIM", "-1"))
STEP = int(os.environ.get("CHAOS_STEP", "0"))
DELAY = float(os.environ.get("CHAOS_DELAY", "0"))
ELEMS = int(os.environ.get("CHAOS_ELEMS", "1024"))
STEPS = int(os.environ.get("CHAOS_STEPS", "3"))
HOLD = float(os.environ.get("CHAOS_HOLD", "0"))
ME = _env_rank()
IS_VICTIM = ME == VICTIM


def _misbehave() -> None:
    say(f"VICTIM-ACTS rank={ME} point={POINT}")
    os.kill(os.getpid(), signal.SIGSTOP if POINT == "stop" else signal.SIGKILL)


_timer: threading.Timer | None = None


def _after(delay: float) -> None:
    global _timer
    _timer = threading.Timer(delay, _misbehave)
    _timer.daemon = True
    _timer.start()


def _let_timer_act() -> None:
    """A victim whose kill has not landed yet waits for it: every scenario's victim does die."""
    if _timer is not None:
        _timer.join(DELAY + 30.0)


if IS_VICTIM and POINT == "rendezvous":
    _after(DELAY)

import hora  # after the rendezvous timer, so that the kill can land inside init

try:
    hora.init()
except hora.HoraError as exc:  # a peer died during the rendezvous
    say(f"FAILED rank={ME} in init {type(exc).__name__}: {' '.join(str(exc).split())}")
    _let_timer_act()
    sys.exit(3)
rank, size = hora.rank(), hora.size()
say(f"READY rank={rank} size={size}")


def _one_step(step: int) -> np.ndarray:
    """Runs this step's op; returns the result after checking it against NumPy."""
    op = "fusion" if POINT == "fusion" and step == STEP else OP
    base = np.arange(ELEMS, dtype=np.float32) + step
    mine = base * (rank + 1)
    total = base * (size * (size + 1) / 2)
    if op == "allreduce":
        return _check(hora.allreduce(mine, op=hora.Sum, name=f"ar.{step}"), total)
    if op == "allgather":
        rows = np.full((rank + 1, 4), float(rank + step), dtype=np.float32)
        want = np.concatenate([np.full((r + 1, 4), float(r + step), np.float32)
                               for r in range(size)])
        return _check(hora.allgather(rows, name=f"ag.{step}"), want).ravel()
    if op == "broadcast":
        root = step % size
        return _check(hora.broadcast(base * (rank + 1), root_rank=root, name=f"bc.{step}"),
                      base * (root + 1))
    if op == "alltoall":
        block = 4
        send = np.concatenate([np.full(block, float(rank * 100 + dst + step), np.float32)
                               for dst in range(size)])
        want = np.concatenate([np.full(block, float(src * 100 + rank + step), np.float32)
                               for src in range(size)])
        return _check(hora.alltoall(send, name=f"a2a.{step}"), want)
    if op == "reducescatter":
        rows = np.tile((base[:8] * (rank + 1))[None, :], (size * 2, 1))
        want = np.tile((base[:8] * (size * (size + 1) / 2))[None, :], (2, 1))
        return _check(hora.reducescatter(rows, op=hora.Sum, name=f"rs.{step}"), want).ravel()
    if op == "fusion":
        handles = [hora.allreduce_async(mine[: 16 + i], op=hora.Sum, name=f"fu.{step}.{i}")
                   for i in range(8)]
        outs = [hora.synchronize(h) for h in handles]
        for i, out in enumerate(outs):
            _check(out, total[: 16 + i])
        return np.concatenate(outs)
    raise SystemExit(f"unknown CHAOS_OP {op}")


def _check(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    got = np.asarray(got)
    if got.shape != want.shape or not np.allclose(got, want):
        say(f"WRONG-RESULT rank={rank} op={OP}")
        sys.exit(5)
    return got


completed = 0
start = time.monotonic()
try:
    for step in range(STEPS):
        if IS_VICTIM and step == STEP:
            if POINT in ("negotiation", "stop"):
                time.sleep(DELAY)
                _misbehave()
            elif POINT in ("mid", "fusion"):
                _after(DELAY)
            elif POINT == "launcher":
                say(f"BLOCKING rank={rank}")  # the others wait in this step's op
                time.sleep(HOLD)
        _one_step(step)
        completed += 1
    if POINT == "launcher" and VICTIM < 0:
        say(f"HOLDING rank={rank}")  # not blocked: idle in Python
        time.sleep(HOLD)
    if IS_VICTIM and POINT == "shutdown":
        _after(DELAY)
    hora.shutdown()
    say(f"DONE rank={rank}")
    _let_timer_act()
    sys.exit(0)
except hora.HoraError as exc:
    elapsed = time.monotonic() - start
    text = " ".join(str(exc).split())
    say(f"FAILED rank={rank} after={elapsed:.1f}s {type(exc).__name__}: {text}")
    hora.shutdown()
    worker_sockets.report(rank)
    _let_timer_act()
    sys.exit(3)
