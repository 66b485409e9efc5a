"""Making an NCCL communicator is bounded, and a member that never joins is named.

Ranks are started directly (rank 0 serves the store), with the CPU emulation as NCCL and the CUDA
runtime. The emulation's "absent" fault ends one rank as it begins its first communicator (a
member that died before joining); "noid" ends rank 0 before it publishes the unique id. With
NCCL >= 2.14 (the emulation's default version) creation is non-blocking and bounded by
HORA_START_TIMEOUT; HORA_EMU_NCCL_VERSION=21300 makes the emulation claim an older NCCL, whose
blocking init has no bound, so that path is only checked to work.
"""
from __future__ import annotations

import time

import pytest
from test_gpu_faults import collect, failed_line, job_env, start_ranks

START_TIMEOUT = 4  # HORA_START_TIMEOUT of the fault jobs, seconds
BOUND = 40.0  # seconds for a whole scenario: far above the bounded waits


def run_job(np_: int, extra: dict[str, str]) -> tuple[list[int], list[str]]:
    env = job_env(dict(extra, HORA_TIMEOUT_SECONDS="30"))
    start = time.monotonic()
    return collect(start_ranks(np_, env, "gpu-comm-init-test"), start, BOUND)


@pytest.mark.parametrize("np_", [2, 3, 4])
def test_member_that_never_joins_fails_the_others_naming_the_set(np_: int) -> None:
    absent = np_ - 1
    codes, outputs = run_job(np_, {"HORA_EMU_NCCL_FAULT": f"absent:{absent}:1",
                                   "HORA_START_TIMEOUT": str(START_TIMEOUT),
                                   "HORA_LOG_LEVEL": "debug"})
    everything = "\n".join(outputs)
    assert codes[absent] == 4, outputs[absent]
    assert codes[:absent] == [3] * absent, (codes, everything)
    ranks = ", ".join(str(r) for r in range(np_))
    for r in range(absent):
        line = failed_line(outputs[r])
        assert line.startswith(f"FAILED rank={r} HoraTimeoutError: "), line
        assert (f"rank {r}: NCCL communicator for process set 0 on GPU {r} (ranks {ranks}) not "
                f"complete after {START_TIMEOUT} s: a member did not join (dead, hung, or on "
                "another path)") in line, line
        assert line.endswith(f"was aborted; never began to join: rank(s) {absent}"), line
        assert "killed: scenario bound" not in outputs[r]
        assert "non-blocking init" not in outputs[r]  # it never completed
        assert "OK rank=" not in outputs[r], outputs[r]


@pytest.mark.parametrize("np_", [2, 3])
def test_lost_store_during_id_exchange_names_owner_and_awaited_rank(np_: int) -> None:
    # Rank 0 (set rank 0, which serves the store) ends before publishing the unique id.
    codes, outputs = run_job(np_, {"HORA_EMU_NCCL_FAULT": "noid:0:1",
                                   "HORA_START_TIMEOUT": "20"})
    everything = "\n".join(outputs)
    assert codes[0] == 4, outputs[0]
    assert codes[1:] == [3] * (np_ - 1), (codes, everything)
    for r in range(1, np_):
        line = failed_line(outputs[r])
        assert (f"rank {r}: the rendezvous store, served by rank 0, failed while this rank was "
                "waiting for rank(s) 0 to publish the NCCL unique id of process set 0 on "
                f"GPU {r}") in line, line


@pytest.mark.parametrize("version,kind", [("21300", "blocking init"),
                                          ("21400", "non-blocking init")])
def test_init_path_follows_the_nccl_version(version: str, kind: str) -> None:
    codes, outputs = run_job(2, {"HORA_EMU_NCCL_VERSION": version, "HORA_LOG_LEVEL": "debug"})
    everything = "\n".join(outputs)
    assert codes == [0, 0], everything
    for r in range(2):
        for step in range(3):
            assert f"OK rank={r} step={step}" in outputs[r], outputs[r]
        assert (f"NCCL communicator for process set 0 on GPU {r} (rank {r} of 2, {kind})"
                in outputs[r]), outputs[r]


def test_host_communicator_of_hierarchical_allreduce_names_the_missing_host_rank() -> None:
    # Four ranks on two "hosts"; rank 3 (comm rank 1 of host 1) dies as its host's communicator
    # begins, so rank 2 waits for it there.
    env = job_env({"HORA_HIERARCHICAL_ALLREDUCE": "1", "HORA_TIMEOUT_SECONDS": "30",
                   "HORA_START_TIMEOUT": str(START_TIMEOUT)})
    start = time.monotonic()
    procs = start_ranks(4, env, "gpu-comm-init-host-test", hosts=2, faults={3: "absent:1:1"})
    codes, outputs = collect(procs, start, BOUND)
    everything = "\n".join(outputs)
    assert codes == [3, 3, 3, 4], (codes, everything)
    line = failed_line(outputs[2])
    assert ("rank 2: NCCL communicator for host 1 on GPU 0 (ranks 2, 3) not complete after "
            f"{START_TIMEOUT} s: a member did not join") in line, line
    assert line.endswith("never began to join: rank(s) 3"), line
