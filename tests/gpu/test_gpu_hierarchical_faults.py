"""A rank dies in the middle of a hierarchical GPU allreduce: the others fail, bounded, naming ranks.

Four ranks on two "hosts" (torchrun-style variables: GROUP_RANK is the host), started directly
with HORA_HIERARCHICAL_ALLREDUCE=1 and the CPU emulation as NCCL and CUDA. Rank 3 (host 1) stalls
in its second allreduce's reduce-scatter within the host (HORA_EMU_NCCL_FAULT in its environment
only) and is killed a second later, while rank 2 waits for the device, and ranks 0 and 1 wait in
the cross-host step.
"""
from __future__ import annotations

import time

from test_gpu_faults import collect, failed_line, job_env, start_ranks

TIMEOUT = 4  # HORA_TIMEOUT_SECONDS of the job
BOUND = 40.0  # seconds for the whole scenario: far above what the bounded waits take


def test_dead_rank_mid_hierarchical_allreduce_fails_every_rank_naming_ranks() -> None:
    env = job_env({"HORA_HIERARCHICAL_ALLREDUCE": "1", "HORA_TIMEOUT_SECONDS": str(TIMEOUT),
                   "GPU_FAULT_DIE": "3", "GPU_FAULT_DIE_DELAY": "1"})
    start = time.monotonic()
    # Rank 3 stalls in its host communicator's third group: the second allreduce's reduce-scatter.
    procs = start_ranks(4, env, "gpu-hier-fault-test", hosts=2, faults={3: "stall:1:3"})
    codes, outputs = collect(procs, start, BOUND)
    elapsed = time.monotonic() - start
    everything = "\n".join(outputs)
    assert codes[3] == -9, outputs[3]
    assert codes[:3] == [3, 3, 3], (codes, everything)
    for r in range(3):
        assert f"OK rank={r} step=0" in outputs[r], outputs[r]
    # Rank 2 waited for its host's reduce-scatter: its bound names the host's ranks.
    line2 = failed_line(outputs[2])
    assert "did not complete within HORA_TIMEOUT_SECONDS" in line2, line2
    assert "NCCL among this host's ranks 2, 3" in line2, line2
    assert "rank 2:" in line2 and "'allreduce.step1'" in line2 and "ranks 0, 1, 2, 3" in line2
    # Rank 1's cross-host partner was rank 3.
    assert "rank 3" in failed_line(outputs[1]), outputs[1]
    assert "rank" in failed_line(outputs[0]), outputs[0]
    assert elapsed < BOUND, elapsed
