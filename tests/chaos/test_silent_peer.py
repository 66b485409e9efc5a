"""A stopped rank (SIGSTOP) keeps its connections open and its kernel answers TCP keepalive; with
no launcher and no stall shutdown, the others must still notice its silence on the control
channel and fail within about HORA_TIMEOUT_SECONDS, naming it as unresponsive: a stopped
coordinator (rank 0) as well as a stopped worker."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run_chaos  # the chaos driver: scenarios and their checks


@pytest.mark.parametrize(("np_", "victim", "op"), [(2, 0, "allreduce"), (3, 0, "allgather"),
                                                   (2, 1, "allreduce"), (3, 2, "broadcast")])
def test_stopped_rank_is_named_unresponsive(np_: int, victim: int, op: str) -> None:
    scenario = run_chaos.Scenario(seed=0, kind="stop", mode="direct", np=np_, op=op, point="stop",
                                  victim=victim, step=1, delay=0.0, elems=64, steps=3)
    result = run_chaos.run_one(scenario, None)
    problems, output = result[:-1], result[-1]
    assert not problems, "\n".join(problems) + "\n" + output
    failed = [line for line in output.splitlines() if "FAILED rank=" in line]
    assert len(failed) == np_ - 1, output
    for line in failed:
        assert re.search(rf"\brank {victim}\b.*is unresponsive", line), line
