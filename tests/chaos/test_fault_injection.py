"""HORA_FAULT_INJECT, the transport's test hook: it cuts the named rank's connection, and a value
it cannot read is ignored (with a warning) rather than half-applied."""

from __future__ import annotations

import re
import sys
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run_chaos  # the chaos driver: its process helpers

NP = 2
JOB_BOUND_SECONDS = 90.0


def _run(inject: str) -> tuple[int, str]:
    marker = uuid.uuid4().hex
    scenario = run_chaos.Scenario(seed=0, kind="cut", mode="horarun", np=NP, op="allreduce",
                                  point="none", victim=1, step=0, delay=0.0, elems=64, steps=3)
    env = run_chaos.base_env(scenario, marker)
    env["HORA_FAULT_INJECT"] = inject
    proc, reader = run_chaos.spawn([*run_chaos.horarun_argv(), "-np", str(NP), sys.executable,
                                    str(run_chaos.WORKER)], env)
    finished = run_chaos.wait_process(proc, JOB_BOUND_SECONDS)
    if not finished:
        proc.kill()
        proc.wait()
    run_chaos.wait_gone(marker, run_chaos.ORPHAN_BOUND_SECONDS)
    output = reader.text()
    assert finished, f"the job hung:\n{output}"
    return proc.returncode, output


def test_cut_fails_the_job_and_names_the_rank() -> None:
    code, output = _run("close_after_bytes=0,rank=1")
    assert code != 0, output
    assert re.search(r"\[1\]<stderr>:.*HORA_FAULT_INJECT: a connection will be cut", output), output
    assert not re.search(r"\[0\]<stderr>:.*HORA_FAULT_INJECT", output), output  # rank 1 only
    assert "job failed: rank 1 was the first" in output, output


def test_unreadable_value_is_ignored() -> None:
    code, output = _run("close_after_bytes=soon,rank=1")
    assert code == 0, output
    assert "HORA_FAULT_INJECT: ignoring it" in output, output
    assert output.count("DONE rank=") == NP, output
