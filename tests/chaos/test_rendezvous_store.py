"""A job without a launcher loses its rendezvous store when rank 0, which serves it, exits; a rank
still waiting in the rendezvous then says who served the store and for which rank it was waiting.

Rank 1 of a 3-rank job (torchrun-style variables, no launcher) never starts. Rank 0 gives up at
its short HORA_START_TIMEOUT and exits, closing the store; rank 2, whose own start timeout is far
longer, is waiting for rank 1's address at that moment and must fail at once with an error that
names rank 1 and rank 0 (the store's owner) and keeps the store's own text."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run_chaos  # the chaos driver: its process helpers and its check of survivors' errors

RANK0_START_TIMEOUT = 4  # seconds: rank 0 gives up (and its store goes) after this
RANK2_START_TIMEOUT = 300  # far beyond the test's bound: only the store's end can end its wait
JOB_BOUND_SECONDS = 90.0

WORKER = """
import sys
import hora
print("STARTING", flush=True)
try:
    hora.init()
except hora.HoraError as exc:
    print(f"FAILED {type(exc).__name__}: {' '.join(str(exc).split())}", flush=True)
    sys.exit(3)
print("INIT-RETURNED", flush=True)
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start(rank: int, port: int, marker: str, start_timeout: int) -> tuple[subprocess.Popen,
                                                                          run_chaos.Reader]:
    scenario = run_chaos.Scenario(seed=0, kind="kill", mode="direct", np=3, op="allreduce",
                                  point="rendezvous", victim=1, step=0, delay=0.0, elems=1,
                                  steps=1)
    env = run_chaos.base_env(scenario, marker)
    env.update(RANK=str(rank), WORLD_SIZE="3", LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE="3",
               MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), HORA_RENDEZVOUS_PORT=str(port),
               HORA_SECRET=marker, HORA_START_TIMEOUT=str(start_timeout))
    return run_chaos.spawn([sys.executable, "-c", WORKER], env)


def test_rank_waiting_when_rank0_exits_names_the_missing_rank_and_the_store_owner() -> None:
    marker = uuid.uuid4().hex
    port = _free_port()
    # Rank 2 first: it is in hora.init() (retrying the store) before rank 0 starts serving it.
    rank2, out2 = _start(2, port, marker, RANK2_START_TIMEOUT)
    try:
        assert out2.wait_for("STARTING", 1, JOB_BOUND_SECONDS), out2.text(0)
        rank0, out0 = _start(0, port, marker, RANK0_START_TIMEOUT)
        ended = [run_chaos.wait_process(p, JOB_BOUND_SECONDS) for p in (rank0, rank2)]
    finally:
        left = run_chaos.wait_gone(marker, 0.0)  # kills what still runs
    text0, text2 = out0.text(), out2.text()
    assert all(ended) and not left, f"a rank hung:\n{text0}\n---\n{text2}"
    assert rank0.returncode == 3 and "FAILED HoraTimeoutError" in text0, text0
    assert rank2.returncode == 3, text2
    error2 = text2.split("FAILED", 1)[-1]
    assert error2.startswith(" TransportError: "), text2  # still the store's error class
    assert ("rank 2: the rendezvous store, served by rank 0, failed while this rank was waiting "
            "for rank(s) 1 to publish their address: store at 127.0.0.1:") in error2, text2
    assert re.search(r"store at 127\.0\.0\.1:\d+: (connection closed by peer|.*reset)", error2), \
        text2
    # The chaos scenarios' check of a survivor's error accepts both (rank 1 is the one missing),
    # and would not take rank 2's error as naming rank 0 as missing.
    for error in (text0.split("FAILED", 1)[-1], error2):
        assert run_chaos._names(error, 1), error
    assert "rank(s) 0" not in error2, error2
