"""Which transport carries what, across the bed's hosts: each rank runs on the host horarun placed
it on (its own host name, over ssh), ranks of one host share memory and hosts talk TCP. Checked
twice: from the job's own reporting (``transport_name()`` and rank 0's log at HORA_LOG_LEVEL=info),
and from the wire (bytes sent on host A's loopback, which carries its ranks' TCP to each other,
and on its link to the bridge)."""

from __future__ import annotations

import json

from launching import Job, horarun, python_command
from testbed import TestBed

MIB = 1 << 20
# One allreduce of 32 MiB: large next to everything else a job sends (set-up, negotiation).
PAYLOAD_BYTES = 32 * MIB

REPORT = f"""
    import json, os, socket
    import numpy as np
    import hora
    hora.init()
    x = np.full({PAYLOAD_BYTES // 4}, hora.rank() + 1, np.float32)
    total = hora.allreduce(x, op=hora.Sum, name="payload")
    ok = bool(np.all(total == hora.size() * (hora.size() + 1) / 2))
    print("report", json.dumps({{"rank": hora.rank(), "host": socket.gethostname(),
        "ssh": "SSH_CONNECTION" in os.environ, "local_rank": hora.local_rank(),
        "cross_rank": hora.cross_rank(), "transport": hora._core.transport_name(), "ok": ok}}))
    hora.shutdown()
"""


def reports(job: Job, ranks: int) -> list[dict]:
    """Each rank's report line, in rank order."""
    found = []
    for r in range(ranks):
        lines = [line for line in job.rank_lines(r) if line.startswith("report ")]
        assert lines, f"rank {r} did not report:\n{job.output[-4000:]}"
        found.append(json.loads(lines[-1].split(" ", 1)[1]))
    return found


def run_measured(bed: TestBed, hosts: str, flags: list[str] = (), **env: str) -> tuple[Job, dict]:
    """The report job, and the bytes host A sent meanwhile on ``lo`` and ``eth0``."""
    before = {dev: bed.sent_bytes(0, dev) for dev in ("lo", "eth0")}
    job = horarun(bed, hosts, python_command(REPORT), flags=flags,
                  env={"HORA_LOG_LEVEL": "info", **env}, timeout=90)
    sent = {dev: bed.sent_bytes(0, dev) - before[dev] for dev in before}
    assert job.returncode == 0, job.output[-4000:]
    return job, sent


def test_each_rank_runs_on_its_host_over_ssh_with_tcp_between_hosts(bed2: TestBed):
    job, sent = run_measured(bed2, bed2.host_list(2, names=True), ["--no-hierarchical-allreduce"])
    got = reports(job, 4)
    assert [(g["host"], g["local_rank"], g["cross_rank"]) for g in got] == [
        ("hostA", 0, 0), ("hostA", 1, 0), ("hostB", 0, 1), ("hostB", 1, 1)]
    assert all(g["ssh"] and g["ok"] and g["transport"] == "tcp" for g in got), got
    assert ("collectives stay on tcp, not shared memory: ranks 0 and 2 run on different hosts"
            in job.stderr), job.stderr
    # The flat ring passes host A's share between its two ranks over TCP, hence over loopback.
    assert sent["lo"] > PAYLOAD_BYTES // 2, sent
    assert sent["eth0"] > PAYLOAD_BYTES // 2, sent


def test_by_default_hierarchical_steps_use_shared_memory_within_a_host_and_tcp_across(
        bed2: TestBed):
    job, sent = run_measured(bed2, bed2.host_list(2))
    got = reports(job, 4)
    assert all(g["ok"] and g["transport"] == "tcp" for g in got), got
    assert ("hierarchical allreduce: 2 hosts x 2 ranks; within rank 0's host over shm, across "
            "hosts over tcp (chosen by the engine; HORA_HIERARCHICAL_ALLREDUCE=0 keeps it flat)"
            ) in job.stderr, job.stderr
    # Host A's ranks reduce through shared memory: loopback carries no payload, the link does.
    assert sent["lo"] < 2 * MIB, sent
    assert sent["eth0"] > PAYLOAD_BYTES // 4, sent


def test_ranks_of_one_host_alone_run_over_shared_memory(bed2: TestBed):
    job, sent = run_measured(bed2, "hostA:2")
    got = reports(job, 2)
    assert [(g["host"], g["transport"]) for g in got] == [("hostA", "tcp+shm")] * 2, got
    assert all(g["ok"] for g in got), got
    assert sent["lo"] < 2 * MIB, sent
