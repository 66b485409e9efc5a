"""Elastic jobs on this machine: workers killed during negotiation, a collective and commit(),
two failures in a row, a host back after its cooldown, growth from 2 to 4 workers through a
discovery script, and a job that stays below --min-np. Each job trains the model of
``elastic_train.py``: its final parameters must be the same on every worker and equal to what
the committed steps imply, and no worker process may outlive the launcher. One more job
(``elastic_sampler_train.py``) checks that an ``ElasticSampler`` goes on with exactly the
samples not yet processed after a worker dies mid-epoch."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from elastic_train import reference_params

JOB_BOUND_SECONDS = 150  # a job that has not ended by then hangs: the test fails


class Job:
    """One ``horarun`` elastic job of ``train_script`` with a discovery script."""

    def __init__(self, tmp: Path, hosts: str, flags: list[str], env: dict[str, str],
                 train_script: str = "elastic_train.py") -> None:
        self.out = tmp / "out"
        self.out.mkdir()
        self.hosts_file = tmp / "hosts"
        self.hosts_file.write_text(hosts)
        script = tmp / "discover.sh"
        script.write_text(f"#!/bin/sh\ncat {self.hosts_file}\n")
        script.chmod(0o755)
        self.stderr_path = tmp / "stderr"
        full_env = dict(os.environ, ELASTIC_OUT=str(self.out), **env)
        argv = [sys.executable, "-m", "hora.runner", "--host-discovery-script", str(script),
                *flags, sys.executable, str(HERE / train_script)]
        self.started = time.monotonic()
        with open(self.stderr_path, "wb") as err:
            self.process = subprocess.Popen(argv, env=full_env, stdout=subprocess.DEVNULL,
                                            stderr=err, cwd=tmp)

    def wait(self) -> int:
        try:
            return self.process.wait(timeout=JOB_BOUND_SECONDS)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            pytest.fail(f"the job did not end within {JOB_BOUND_SECONDS} s:\n{self.stderr()}")

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def wait_for_step(self, step: int) -> None:
        progress = self.out / "progress"
        while self.process.poll() is None:
            if progress.exists() and any(int(line.split()[-1]) >= step
                                         for line in progress.read_text().splitlines() if line):
                return
            time.sleep(0.1)
        pytest.fail(f"the job ended before step {step}:\n{self.stderr()}")

    def finals(self) -> list[dict]:
        return [json.loads(p.read_text()) for p in sorted(self.out.glob("final.*.json"))]

    def generations(self) -> list[int]:
        """Worker count of each generation formed, in order."""
        return [int(m.group(1)) for m in
                re.finditer(r"^horarun: generation \d+ at [\d.]+ s: (\d+) workers",
                            self.stderr(), re.MULTILINE)]

    def assert_no_worker_left(self) -> None:
        for pid_file in self.out.glob("pid.*"):
            pid = int(pid_file.read_text())
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                continue
            pytest.fail(f"worker {pid_file.suffix[1:]} (pid {pid}) outlived the launcher")


def assert_trained(job: Job, steps: int) -> list[dict]:
    finals = job.finals()
    assert finals, job.stderr()
    sizes = {f["size"] for f in finals}
    assert sizes == {len(finals)}, f"workers finished in different generations: {finals}"
    assert sorted(f["rank"] for f in finals) == list(range(len(finals)))
    expected = reference_params(steps)
    for f in finals:
        assert f["step"] == steps
        assert f["params"] == finals[0]["params"], "workers disagree on the parameters"
        assert f["params"] == pytest.approx(expected, rel=1e-5, abs=1e-6)
    return finals


def test_kills_during_negotiation_collective_and_commit_and_hosts_back_after_cooldown(tmp_path):
    """A 3-worker job: worker 1 dies in a negotiation, then at once worker 0 (rank 0) inside a
    large allreduce (two failures in a row). After the cooldown the host takes replacements
    (workers 3 and 4; the job holds at step 14 until it has 3 workers again), and worker 3 dies
    inside commit()."""
    job = Job(tmp_path, "localhost:3\n",
              ["-np", "3", "--min-np", "2", "--max-np", "3", "--blacklist-cooldown-range",
               "0.5", "1"],
              {"ELASTIC_STEPS": "24", "ELASTIC_HOLD": "14:3",
               "ELASTIC_KILLS": "1:5:negotiation,0:9:collective,3:15:commit"})
    code = job.wait()
    log = job.stderr()
    assert code == 0, log
    for worker in (0, 1, 3):
        assert f"worker {worker} on localhost signal SIGKILL" in log, log
    sizes = job.generations()
    assert sizes[0] == 3 and 2 in sizes and 3 in sizes[1:], log  # shrank, then grew back
    assert len(assert_trained(job, 24)) >= 2
    job.assert_no_worker_left()


def test_grows_from_2_to_4_and_shrinks_when_a_host_disappears(tmp_path):
    """Discovery adds a host with 2 slots (127.0.0.1 is this machine under another name); the job
    holds at step 10 until it has 4 workers. Then the host disappears: its workers are stopped
    and the job finishes with the 2 others. It holds at step 20 until it has 2 workers again, so
    that it cannot finish with 4 before the driver's next discovery sees the host gone."""
    job = Job(tmp_path, "localhost:2\n", ["--min-np", "2", "--max-np", "4"],
              {"ELASTIC_STEPS": "30", "ELASTIC_HOLD": "10:4,20:2"})
    job.wait_for_step(4)
    job.hosts_file.write_text("localhost:2\n127.0.0.1:2\n")
    job.wait_for_step(13)
    job.hosts_file.write_text("localhost:2\n")
    code = job.wait()
    log = job.stderr()
    assert code == 0, log
    assert job.generations()[0] == 2 and 4 in job.generations(), log
    assert "hosts ['127.0.0.1'] are no longer discovered" in log, log
    assert len(assert_trained(job, 30)) == 2
    job.assert_no_worker_left()


def test_reset_limit_ends_the_job(tmp_path):
    job = Job(tmp_path, "localhost:3\n", ["--min-np", "2", "--reset-limit", "0"],
              {"ELASTIC_STEPS": "1000", "ELASTIC_KILLS": "1:3:negotiation"})
    code = job.wait()
    log = job.stderr()
    assert code == 1, log
    assert "job failed: one more re-formation would exceed --reset-limit 0" in log, log
    job.assert_no_worker_left()


def test_below_min_np_for_the_elastic_timeout_fails_with_a_message(tmp_path):
    job = Job(tmp_path, "localhost:2\n", ["--min-np", "2", "--elastic-timeout", "2"],
              {"ELASTIC_STEPS": "1000", "ELASTIC_KILLS": "1:3:negotiation"})
    code = job.wait()
    log = job.stderr()
    assert code == 1, log
    assert "job failed: fewer than --min-np 2 workers (1 ready) for 2 s" in log, log
    assert not job.finals()
    job.assert_no_worker_left()


def test_a_worker_that_leaves_the_finished_generation_fails_the_job_at_once(tmp_path):
    """Worker 0 stops after 4 steps, worker 1 wants 24: worker 0 finishes, worker 1's next
    allreduce fails and it leaves to re-form, which can never happen without worker 0. The
    driver stops it and fails the job, naming it, instead of leaving it waiting."""
    job = Job(tmp_path, "localhost:2\n", ["-np", "2", "--min-np", "1"],
              {"ELASTIC_STEPS": "24", "ELASTIC_STEPS_0": "4"})
    code = job.wait()
    log = job.stderr()
    assert code == 1, log
    assert "worker 0 finished in generation 0" in log, log
    assert "job failed: worker(s) [1] left generation 0 after another worker had finished" in log
    assert time.monotonic() - job.started < 60, log
    job.assert_no_worker_left()


SSH_KEY = os.environ.get("HORA_TEST_SSH_KEY", os.path.expanduser("~/.ssh/hora_test_ed25519"))


def _ssh_unavailable() -> str | None:
    """Why a worker cannot be started over ssh to 127.0.0.1 here (tests/ssh_setup.sh, which CI
    runs, sets it up), or None."""
    if not os.path.exists(SSH_KEY):
        return f"no ssh key {SSH_KEY} (tests/ssh_setup.sh creates it)"
    probe = subprocess.run(["ssh", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no",
                            "-o", "ConnectTimeout=10", "-i", SSH_KEY, "127.0.0.1", "true"],
                           capture_output=True, text=True, timeout=60, check=False)
    return None if probe.returncode == 0 else f"ssh to 127.0.0.1 fails: {probe.stderr.strip()}"


@pytest.mark.skipif(_ssh_unavailable() is not None, reason=_ssh_unavailable() or "")
def test_worker_over_ssh_killed_and_the_job_goes_on(tmp_path):
    """Worker 1 runs through ssh (127.0.0.1 forced through ssh) and gets its -x exports; it dies
    at step 5, and worker 0 finishes alone from the last commit."""
    job = Job(tmp_path, "localhost:1\n127.0.0.1:1\n",
              ["-np", "2", "--min-np", "1", "--max-np", "2", "--force-ssh", "127.0.0.1",
               "-p", "22", "-i", SSH_KEY, "-x", "ELASTIC_OUT", "-x", "ELASTIC_STEPS",
               "-x", "ELASTIC_KILLS"],
              {"ELASTIC_STEPS": "16", "ELASTIC_KILLS": "1:5:negotiation"})
    code = job.wait()
    log = job.stderr()
    assert code == 0, log
    assert "rank 1: worker 1 on 127.0.0.1" in log, log
    assert "worker 1 on 127.0.0.1 exit code 137" in log, log  # SIGKILL, as ssh reports it
    assert (job.out / "pid.1").exists(), "the remote worker did not get ELASTIC_OUT"
    # Worker 0 may ask for a reset before the driver sees worker 1's exit (ssh reports it a
    # little later): then one more generation of 2 forms and fails before the one of 1.
    sizes = job.generations()
    assert sizes[0] == 2 and sizes[-1] == 1, log
    assert len(assert_trained(job, 16)) == 1


def test_elastic_sampler_resumes_with_the_unprocessed_samples(tmp_path):
    """3 workers; worker 2 dies in the middle of epoch 0 (after several commits, between two).
    The 2 survivors roll back to the last commit and split what is left of the epoch; epoch 1
    runs on 2 workers. In the committed history every sample is processed in every epoch, and
    nothing twice beyond the wrap-around padding that evens out each split (fewer than one
    sample per worker per split)."""
    job = Job(tmp_path, "localhost:3\n", ["-np", "3", "--min-np", "2", "--max-np", "3"],
              {"SAMPLER_KILL": "2:0:5"}, train_script="elastic_sampler_train.py")
    code = job.wait()
    log = job.stderr()
    assert code == 0, log
    assert "worker 2 on localhost signal SIGKILL" in log, log
    finals = job.finals()
    assert sorted(f["worker"] for f in finals) == ["0", "1"], log
    assert finals[0]["seen"] == finals[1]["seen"], "workers disagree on the committed history"
    samples = finals[0]["samples"]
    epoch0, epoch1 = finals[0]["seen"]
    # Epoch 0: 3 workers until the kill, then the rest split over 2 (two splits); epoch 1: 2.
    for epoch, seen, splits in ((0, epoch0, [3, 2]), (1, epoch1, [2])):
        assert set(seen) == set(range(samples)), f"epoch {epoch} skipped samples"
        padding = len(seen) - samples
        assert 0 <= padding <= sum(size - 1 for size in splits), (
            f"epoch {epoch} processed {padding} samples twice: {sorted(seen)}")
    job.assert_no_worker_left()
