"""An elastic job across the bed's hosts that loses one of them.

``horarun --min-np 2 --max-np 4 --host-discovery-script`` starts two workers on each of hostA and
hostB (over ssh, from a launcher whose interface is ``hrbr0``, a name the hosts do not have: each
remote worker must find its own route to the rendezvous). They train the model of
``tests/elastic/elastic_train.py`` and, at a known step, wait committing for the job to have two
workers. Then hostB's link is cut and hostB leaves the discovery output: the job must finish on
hostA's two workers, with the parameters one process reaches after the same number of steps,
within a bounded time, and horarun must say that hostB went away and which workers it stopped.
The test owns its bed (``fresh_bed2_hrbr0``): whatever hostB's workers do behind the cut goes with
it, and the fixture checks that nothing of the bed is left.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from launching import ROOT, start_horarun
from testbed import TestBed

ELASTIC = os.path.join(ROOT, "tests", "elastic")
STEPS = 16
HOLD_STEP = 8  # at this step the workers commit, without training, until the job has 2 workers
BOUND_SECONDS = 45  # from the cut to the end of the job


def _job_flags(discovery: Path) -> list[str]:
    exports = ["ELASTIC_OUT", "ELASTIC_STEPS", "ELASTIC_COMMIT", "ELASTIC_HOLD",
               "ELASTIC_STEP_SECONDS"]
    return ["--min-np", "2", "--max-np", "4", "--host-discovery-script", str(discovery),
            "--elastic-timeout", "30", *[f for name in exports for f in ("-x", name)]]


def _progress(out: Path) -> list[tuple[int, int, int]]:
    """(worker, size, step) of every step a worker has done so far."""
    path = out / "progress"
    if not path.exists():
        return []
    found = []
    for line in path.read_text().splitlines():
        match = re.search(r"worker (\d+) rank \d+ size (\d+) step (\d+)", line)
        if match:
            found.append((int(match.group(1)), int(match.group(2)), int(match.group(3))))
    return found


def test_an_elastic_job_that_loses_a_host_finishes_on_the_other(fresh_bed2_hrbr0: TestBed):
    torch = pytest.importorskip("torch")  # the workers train with hora.torch
    sys.path.insert(0, ELASTIC)
    from elastic_train import reference_params

    bed = fresh_bed2_hrbr0
    work = Path(bed.workdir)
    out = work / "out"
    out.mkdir()
    hosts = work / "hosts"
    hosts.write_text("hostA:2\nhostB:2\n")
    discovery = work / "discover.sh"
    discovery.write_text(f"#!/bin/sh\ncat {hosts}\n")
    discovery.chmod(0o755)
    env = {"ELASTIC_OUT": str(out), "ELASTIC_STEPS": str(STEPS), "ELASTIC_COMMIT": "2",
           "ELASTIC_HOLD": f"{HOLD_STEP}:2", "ELASTIC_STEP_SECONDS": "0.02"}
    started = time.monotonic()
    proc = start_horarun(bed, None, [sys.executable, os.path.join(ELASTIC, "elastic_train.py")],
                         flags=_job_flags(discovery), env=env)
    lines: list[tuple[float, str]] = []  # (seconds since the cut, horarun's stderr line)
    cut_at = [float("inf")]
    reader = threading.Thread(target=_timestamp, args=(proc.stderr, lines, cut_at), daemon=True)
    reader.start()
    stdout = threading.Thread(target=proc.stdout.read, daemon=True)  # keep the pipe drained
    stdout.start()
    try:
        deadline = time.monotonic() + 60
        while not any(size == 4 and step == HOLD_STEP for _w, size, step in _progress(out)):
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail("the job of 4 workers did not reach step "
                            f"{HOLD_STEP}:\n" + "\n".join(line for _t, line in lines[-40:]))
            time.sleep(0.1)
        reached = time.monotonic() - started
        bed.set_link(1, up=False)
        hosts.write_text("hostA:2\n")
        cut_at[0] = time.monotonic()
        try:
            proc.wait(timeout=BOUND_SECONDS)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the job did not end within {BOUND_SECONDS} s of the cut:\n" +
                        "\n".join(line for _t, line in lines[-40:]))
        ended = time.monotonic() - cut_at[0]
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        reader.join(timeout=5)
        stdout.join(timeout=5)
    stderr = "\n".join(line for _t, line in lines)

    def when(text: str) -> float | None:
        return next((t for t, line in lines if text in line and t >= 0), None)

    dropped = when("hosts ['hostB'] are no longer discovered; stopping their workers [2, 3]")
    reformed = when("generation 1 at ")
    def seconds(t: float | None) -> str:
        return "never" if t is None else f"{t:.1f} s"

    print(f"4 workers at step {HOLD_STEP} {reached:.1f} s after the start; after the cut: "
          f"hostB dropped at {seconds(dropped)}, generation 1 at {seconds(reformed)}, the job "
          f"ended at {ended:.1f} s")
    assert proc.returncode == 0, stderr[-4000:]
    # Every remote worker found its own route: none was handed the launcher's hrbr0.
    assert "HORA_IFACE" not in stderr, stderr[-4000:]
    assert re.search(r"generation 0 at [\d.]+ s: 4 workers \(rank 0: worker 0 on hostA, rank 1: "
                     r"worker 1 on hostA, rank 2: worker 2 on hostB, rank 3: worker 3 on hostB\)",
                     stderr), stderr[-4000:]
    assert dropped is not None, stderr[-4000:]
    assert re.search(r"generation 1 at [\d.]+ s: 2 workers \(rank 0: worker 0 on hostA, rank 1: "
                     r"worker 1 on hostA\)", stderr), stderr[-4000:]
    assert "horarun: job finished" in stderr, stderr[-4000:]

    finals = {p.name: json.loads(p.read_text()) for p in out.glob("final.*.json")}
    assert sorted(finals) == ["final.0.json", "final.1.json"], sorted(finals)
    expected = reference_params(STEPS)
    for final in finals.values():
        assert (final["size"], final["step"]) == (2, STEPS), final
        assert torch.allclose(torch.tensor(final["params"]), torch.tensor(expected),
                              atol=1e-6), (final["params"], expected)
    # hostA's workers did every step after the hold as a job of 2, none of them twice.
    after = sorted(step for worker, size, step in _progress(out)
                   if worker == 0 and step > HOLD_STEP)
    assert after == list(range(HOLD_STEP + 1, STEPS + 1)), after


def _timestamp(stream, lines: list[tuple[float, str]], cut_at: list[float]) -> None:
    for line in stream:
        lines.append((time.monotonic() - cut_at[0], line.rstrip("\n")))
