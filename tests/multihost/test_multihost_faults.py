"""Faults between the bed's hosts: a host that disagrees on the job secret, a host whose link is
cut in the middle of a job (with a short no-progress timeout, and with the defaults, where the
TCP transport must notice the lost host within 10 s and name it, at 2 and 3 hosts), and a rank
that is only busy, which must not be taken for a lost host. A test that breaks its hosts gets a
bed of its own (``fresh_bed2``, ``fresh_bed3``), so whatever a broken job leaves on a host goes
with the bed."""

from __future__ import annotations

import subprocess
import threading
import time
from dataclasses import dataclass

import pytest
from launching import horarun, python_command, start_horarun
from testbed import TestBed

ALLREDUCE_ONCE = """
    import numpy as np
    import hora
    hora.init()
    print("sum", hora.allreduce(np.ones(3), op=hora.Sum).tolist())
    hora.shutdown()
"""

# Allreduces in a loop; "looping" once the job runs (every rank has passed 20 of them).
LOOP = """
    import time
    import numpy as np
    import hora
    hora.init()
    x = np.ones(1 << 18, np.float32)
    start = time.time()
    n = 0
    while time.time() - start < 120:
        hora.allreduce(x, op=hora.Sum, name="loop")
        n += 1
        if n == 20:
            print("looping", flush=True)
    print("the loop ended without an error")
"""


# Rank 3 computes in Python for 12 s, holding the GIL, between two allreduces.
BUSY = """
    import time
    import numpy as np
    import hora
    hora.init()
    hora.allreduce(np.ones(1 << 16), op=hora.Sum, name="before")
    if hora.rank() == 3:
        end = time.time() + 12
        while time.time() < end:
            sum(range(10000))
    total = hora.allreduce(np.ones(1 << 16) * 2, op=hora.Sum, name="after")
    print("sum", float(total[0]))
    hora.shutdown()
"""


def on_host_b_with_secret(secret: str, command: list[str]) -> list[str]:
    """``command``, run with HORA_SECRET=secret on hostB (its own host name says where it is)."""
    switch = f'if [ "$(hostname)" = hostB ]; then export HORA_SECRET={secret}; fi; exec "$@"'
    return ["sh", "-c", switch, "rank", *command]


def test_a_host_with_another_secret_is_refused_at_once(fresh_bed2: TestBed):
    command = on_host_b_with_secret("0123456789abcdef0123456789abcdef",
                                    python_command(ALLREDUCE_ONCE))
    job = horarun(fresh_bed2, fresh_bed2.host_list(2, names=True), command, timeout=90)
    assert job.returncode != 0, job.output
    assert job.seconds < 20, f"took {job.seconds:.1f} s"
    # The launcher's store drops the connection, and the rank says why it cannot go on.
    assert "authentication failed: the peer's proof of the job secret is wrong" in job.stderr
    assert "is the secret the same on every rank?" in job.stderr, job.stderr
    assert "the rendezvous store, served by the launcher, refused this rank" in job.stderr
    assert "it stopped the job" not in job.stderr, job.stderr  # the store is alive and well
    assert "on hostB exited with exit code 1" in job.stderr, job.stderr
    assert not any(line.startswith("sum") for r in range(4) for line in job.rank_lines(r))


@dataclass
class Cut:
    """What followed the cut of the last host's link: when each line of horarun's stderr came (seconds
    after the cut), when horarun ended (None: not within the wait) and its exit code."""

    lines: list[tuple[float, str]]
    ended: float | None
    returncode: int | None

    @property
    def stderr(self) -> str:
        return "\n".join(line for _t, line in self.lines)

    def when(self, text: str) -> float | None:
        """When a line containing ``text`` first came."""
        return next((t for t, line in self.lines if text in line), None)

    def first_error(self, rank: int) -> float | None:
        """When rank ``rank`` first printed an error (a log line at ERROR or a traceback)."""
        for t, line in self.lines:
            if line.startswith(f"[{rank}]<stderr>:") and ("ERROR" in line or "Error:" in line):
                return t
        return None


def cut_last_host_while_looping(bed: TestBed, flags: list[str], within: float) -> Cut:
    """Starts LOOP on every host of the bed (2 ranks each), cuts the last host's link once it
    runs, and waits up to ``within`` seconds for horarun to end."""
    proc = start_horarun(bed, bed.host_list(2, names=True), python_command(LOOP), flags=flags)
    lines: list[tuple[float, str]] = []
    cut_at = [float("inf")]
    reader = threading.Thread(target=_timestamp, args=(proc.stderr, lines, cut_at), daemon=True)
    reader.start()
    try:
        for line in proc.stdout:
            if "looping" in line:
                break
        else:
            pytest.fail(f"the job ended before it ran: {lines[-20:]}")
        bed.set_link(len(bed.hosts) - 1, up=False)
        cut_at[0] = time.monotonic()
        try:
            proc.wait(timeout=within)
            ended = time.monotonic() - cut_at[0]
        except subprocess.TimeoutExpired:
            ended = None
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        reader.join(timeout=5)
    return Cut(lines, ended, proc.returncode if ended is not None else None)


def _timestamp(stream, lines: list[tuple[float, str]], cut_at: list[float]) -> None:
    for line in stream:
        lines.append((time.monotonic() - cut_at[0], line.rstrip("\n")))


def test_a_cut_link_fails_the_job_within_the_no_progress_timeout(fresh_bed2: TestBed):
    """With a 5 s no-progress timeout (horarun --gloo-timeout-seconds), the job ends with an
    error within seconds of it, and horarun says it failed."""
    cut = cut_last_host_while_looping(fresh_bed2, ["--gloo-timeout-seconds", "5"], within=40)
    assert cut.ended is not None, "the job did not end within 40 s of the cut"
    print(f"the job ended {cut.ended:.1f} s after the cut")
    assert cut.returncode != 0
    assert 4 < cut.ended < 20, f"ended {cut.ended:.1f} s after the cut"
    assert all(cut.first_error(r) is not None for r in (0, 1)), cut.stderr[-4000:]
    assert "horarun: job failed" in cut.stderr, cut.stderr[-4000:]


@pytest.mark.parametrize("hosts", [2, 3])
def test_a_cut_link_fails_the_surviving_ranks_within_10_s_naming_the_host(
        hosts: int, request: pytest.FixtureRequest):
    """With the default settings (a 60 s no-progress timeout), the other hosts' ranks fail
    within 10 s of the cut of the last host's link: the TCP transport notices that the host no
    longer answers (keepalive, and data it does not acknowledge), a rank names the host's address
    and the ranks there, and horarun stops the job (a rank that has not failed by itself by then
    is stopped)."""
    bed: TestBed = request.getfixturevalue(f"fresh_bed{hosts}")
    cut = cut_last_host_while_looping(bed, [], within=25)
    survivors = range(2 * (hosts - 1))
    errors = [t for t in (cut.first_error(r) for r in survivors) if t is not None]
    stopping = cut.when("stopping the other ranks")
    print(f"after the cut: first error at {min(errors, default=None)}, horarun stopping at "
          f"{stopping}, the job ended at {cut.ended}")
    assert errors and min(errors) < 10, cut.stderr[-4000:]
    assert stopping is not None and stopping < 10, cut.stderr[-4000:]
    lost = bed.hosts[-1]
    ranks = f"ranks {2 * hosts - 2}, {2 * hosts - 1}"
    assert f"({lost.address}) is unreachable" in cut.stderr, cut.stderr[-4000:]
    assert f"{ranks} run there" in cut.stderr, cut.stderr[-4000:]
    # horarun's own word for it: the lost host's ssh sessions never answered the stop.
    assert (f"{ranks} on {lost.hostname} did not stop within 5 s of being asked (no answer over "
            f"ssh: is {lost.hostname} reachable?)") in cut.stderr, cut.stderr[-4000:]
    assert cut.ended is not None and cut.returncode != 0, "horarun outlived the cut by 25 s"


def test_a_rank_busy_in_python_is_not_taken_for_an_unreachable_host(bed2: TestBed):
    """Rank 3 holds the GIL for 12 s (longer than the unreachable-host bound) while the others
    wait for it in an allreduce: the job finishes, and nothing reports a host."""
    job = horarun(bed2, bed2.host_list(2), python_command(BUSY), timeout=90)
    assert job.returncode == 0, job.output[-4000:]
    assert "unreachable" not in job.stderr, job.stderr[-4000:]
    assert [line for r in range(4) for line in job.rank_lines(r) if line.startswith("sum")] == \
        ["sum 8.0"] * 4
