"""An elastic job across the bed's hosts that loses one of them, at 2 and 3 hosts.

``horarun --min-np 2 --max-np <2 per host> --host-discovery-script`` starts two workers on each
host (over ssh, from a launcher whose interface is ``hrbr0``, a name the hosts do not have: each
remote worker must find its own route to the rendezvous). They train the model of
``tests/elastic/elastic_train.py`` and, at a known step, wait committing for the job to have the
workers of every host but the last. Then the last host's link is cut and the host leaves the
discovery output: the job must finish on the other hosts' workers, with the parameters one
process reaches after the same number of steps, within a bounded time, and horarun must say that
the host went away and which workers it stopped. The test owns its bed (``fresh_bed2_hrbr0``,
``fresh_bed3_hrbr0``): whatever the lost host's workers do behind the cut goes with it, and the
fixture checks that nothing of the bed is left.
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


def _job_flags(discovery: Path, max_np: int) -> list[str]:
    exports = ["ELASTIC_OUT", "ELASTIC_STEPS", "ELASTIC_COMMIT", "ELASTIC_HOLD",
               "ELASTIC_STEP_SECONDS"]
    return ["--min-np", "2", "--max-np", str(max_np), "--host-discovery-script", str(discovery),
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


def _workers(names: list[str]) -> str:
    """How horarun lists a generation of two workers on each of ``names``."""
    return ", ".join(f"rank {r}: worker {r} on {names[r // 2]}" for r in range(2 * len(names)))


@pytest.mark.parametrize("count", [2, 3])
def test_an_elastic_job_that_loses_a_host_finishes_on_the_others(
        count: int, request: pytest.FixtureRequest):
    torch = pytest.importorskip("torch")  # the workers train with hora.torch
    sys.path.insert(0, ELASTIC)
    from elastic_train import reference_params

    bed: TestBed = request.getfixturevalue(f"fresh_bed{count}_hrbr0")
    names = [h.hostname for h in bed.hosts]
    kept, lost = names[:-1], names[-1]
    full, after_cut = 2 * count, 2 * (count - 1)
    work = Path(bed.workdir)
    out = work / "out"
    out.mkdir()
    hosts = work / "hosts"
    hosts.write_text("".join(f"{name}:2\n" for name in names))
    discovery = work / "discover.sh"
    discovery.write_text(f"#!/bin/sh\ncat {hosts}\n")
    discovery.chmod(0o755)
    env = {"ELASTIC_OUT": str(out), "ELASTIC_STEPS": str(STEPS), "ELASTIC_COMMIT": "2",
           "ELASTIC_HOLD": f"{HOLD_STEP}:{after_cut}", "ELASTIC_STEP_SECONDS": "0.02"}
    started = time.monotonic()
    proc = start_horarun(bed, None, [sys.executable, os.path.join(ELASTIC, "elastic_train.py")],
                         flags=_job_flags(discovery, full), env=env)
    lines: list[tuple[float, str]] = []  # (seconds since the cut, horarun's stderr line)
    cut_at = [float("inf")]
    reader = threading.Thread(target=_timestamp, args=(proc.stderr, lines, cut_at), daemon=True)
    reader.start()
    stdout = threading.Thread(target=proc.stdout.read, daemon=True)  # keep the pipe drained
    stdout.start()
    try:
        deadline = time.monotonic() + 60
        while not any(size == full and step == HOLD_STEP for _w, size, step in _progress(out)):
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the job of {full} workers did not reach step "
                            f"{HOLD_STEP}:\n" + "\n".join(line for _t, line in lines[-40:]))
            time.sleep(0.1)
        reached = time.monotonic() - started
        bed.set_link(count - 1, up=False)
        hosts.write_text("".join(f"{name}:2\n" for name in kept))
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

    dropped = when(f"hosts ['{lost}'] are no longer discovered; stopping their workers "
                   f"[{after_cut}, {after_cut + 1}]")
    reformed = when("generation 1 at ")
    def seconds(t: float | None) -> str:
        return "never" if t is None else f"{t:.1f} s"

    print(f"{full} workers at step {HOLD_STEP} {reached:.1f} s after the start; after the cut: "
          f"{lost} dropped at {seconds(dropped)}, generation 1 at {seconds(reformed)}, the job "
          f"ended at {ended:.1f} s")
    assert proc.returncode == 0, stderr[-4000:]
    # Every remote worker found its own route: none was handed the launcher's hrbr0.
    assert "HORA_IFACE" not in stderr, stderr[-4000:]
    assert re.search(r"generation 0 at [\d.]+ s: " +
                     re.escape(f"{full} workers ({_workers(names)})"), stderr), stderr[-4000:]
    assert dropped is not None, stderr[-4000:]
    assert re.search(r"generation 1 at [\d.]+ s: " +
                     re.escape(f"{after_cut} workers ({_workers(kept)})"), stderr), stderr[-4000:]
    assert "horarun: job finished" in stderr, stderr[-4000:]

    finals = {p.name: json.loads(p.read_text()) for p in out.glob("final.*.json")}
    assert sorted(finals) == sorted(f"final.{w}.json" for w in range(after_cut)), sorted(finals)
    expected = reference_params(STEPS)
    for final in finals.values():
        assert (final["size"], final["step"]) == (after_cut, STEPS), final
        assert torch.allclose(torch.tensor(final["params"]), torch.tensor(expected),
                              atol=1e-6), (final["params"], expected)
    # The kept hosts' workers did every step after the hold as a smaller job, none twice.
    after = sorted(step for worker, size, step in _progress(out)
                   if worker == 0 and step > HOLD_STEP)
    assert after == list(range(HOLD_STEP + 1, STEPS + 1)), after


def _timestamp(stream, lines: list[tuple[float, str]], cut_at: list[float]) -> None:
    for line in stream:
        lines.append((time.monotonic() - cut_at[0], line.rstrip("\n")))
