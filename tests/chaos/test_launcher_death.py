"""horarun killed with SIGKILL: its ranks, blocked in a collective or not, end within seconds.

The launcher cannot stop anything once it is SIGKILLed; its reaper (hora.runner.reaper) must.
Every process of the job carries a unique environment marker, so the test finds any that is left
by scanning /proc, with a bounded poll. And mpirun killed under the chaos runner: Open MPI's
shared-memory files of the job go with the scenario.
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import sys
import uuid
from pathlib import Path

import hora
import pytest
from hora.runner.mpirun import OPENMPI, MpiError, detect_flavour

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run_chaos  # the chaos driver: its process helpers

NP = 3
READY_BOUND_SECONDS = 60.0  # the job must get going this soon (a loaded machine included)


@pytest.mark.parametrize("blocked", [True, False], ids=["blocked_in_allreduce", "idle"])
def test_ranks_end_when_horarun_is_killed(blocked: bool) -> None:
    marker = uuid.uuid4().hex
    scenario = run_chaos.Scenario(seed=0, kind="launcher", mode="horarun", np=NP,
                                  op="allreduce", point="launcher", victim=1 if blocked else -1,
                                  step=1, delay=0.0, elems=16, steps=3)
    env = run_chaos.base_env(scenario, marker)
    proc, reader = run_chaos.spawn([*run_chaos.horarun_argv(), "-np", str(NP), sys.executable,
                                     str(run_chaos.WORKER)], env)
    try:
        waiting = "BLOCKING" if blocked else "HOLDING"
        assert reader.wait_for(waiting, 1 if blocked else NP, READY_BOUND_SECONDS), reader.text(1)
        if blocked:  # the others are in the op once they printed READY and the sleeper blocks
            assert reader.wait_for("READY", NP, READY_BOUND_SECONDS), reader.text(1)
        assert len(run_chaos.marked_pids(marker)) >= NP + 1  # launcher, reaper and ranks
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        left = run_chaos.wait_gone(marker, run_chaos.LAUNCHER_DEATH_BOUND_SECONDS)
        assert not left, (f"{len(left)} processes outlived horarun by "
                          f"{run_chaos.LAUNCHER_DEATH_BOUND_SECONDS:.0f} s:\n{reader.text(1)}")
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        run_chaos.wait_gone(marker, 0)
        if proc.poll() is None:
            proc.wait()


def _open_mpi() -> bool:
    mpirun = shutil.which("mpirun")
    if mpirun is None or not hora.mpi_built():
        return False
    try:
        return detect_flavour(mpirun) == OPENMPI
    except MpiError:
        return False


def _files_in_dev_shm() -> set[str]:
    return set(glob.glob("/dev/shm/vader_segment.*"))  # Open MPI 4's: <host>.<job>.<rank>


@pytest.mark.skipif(not _open_mpi(), reason="needs Open MPI's mpirun and a Hora built with MPI")
def test_a_killed_mpirun_leaves_no_shared_memory_files(monkeypatch: pytest.MonkeyPatch) -> None:
    """Open MPI removes its ranks' shared-memory files when its job ends, but not when mpirun is
    killed; the chaos runner gives each mpirun scenario a directory for them and removes it."""
    removed: list[str] = []
    remove = shutil.rmtree

    def listing_rmtree(path: str, ignore_errors: bool = False) -> None:
        removed.extend(os.listdir(path))
        remove(path, ignore_errors=ignore_errors)

    monkeypatch.setattr(run_chaos.shutil, "rmtree", listing_rmtree)
    before = _files_in_dev_shm()
    scenario = run_chaos.Scenario(seed=0, kind="launcher", mode="mpirun", np=NP,
                                  op="allreduce", point="launcher", victim=1, step=1, delay=0.0,
                                  elems=16, steps=3)
    *problems, output = run_chaos.run_one(scenario, shutil.which("mpirun"))
    assert problems == [], output
    assert any(name.startswith("vader_segment.") for name in removed), (removed, output)
    assert _files_in_dev_shm() - before == set()
