"""Every collective and dtype against NumPy with ranks on two and three hosts of the bed: the op
checks of tests/parallel (test_core_*.py) run unchanged under ``horarun -H hostA:2,hostB:2`` from
the launcher's namespace, every rank started over ssh."""

from __future__ import annotations

import re

from launching import Job, horarun, pytest_command, pytest_summary
from testbed import TestBed

# The op families (every op, dtype and size of each; the conftest of tests/parallel holds the
# NumPy references).
EVERY_OP = ["test_core_allreduce.py", "test_core_allgather.py", "test_core_broadcast.py",
            "test_core_alltoall.py", "test_core_reducescatter.py", "test_core_half_sums.py",
            "test_core_adasum_tiny.py"]
# At three hosts: the reductions and gathers, the ones whose algorithms depend on the rank count.
AT_THREE_HOSTS = ["test_core_allreduce.py", "test_core_allgather.py",
                  "test_core_reducescatter.py"]
# Its inputs are whole numbers whose sums are exact in bfloat16 at up to four ranks (the docstring
# says so); at six ranks the partial sums pass 256 and round by the order of the additions.
BEYOND_FOUR_RANKS = ["--deselect",
                     "tests/parallel/test_core_allreduce.py::test_average_divides_by_size[bfloat16]"]
# A 64 KiB fusion threshold makes the "big" sizes larger than the threshold (as tests/run_all.sh
# does at 2 ranks).
ENGINE = {"HORA_FUSION_THRESHOLD": "65536"}


def passed_on_every_rank(job: Job, ranks: int) -> int:
    """The number of tests each rank passed; asserts that every rank reports the same number and
    no failure or error."""
    counts = set()
    for r in range(ranks):
        summary = [line for line in job.rank_lines(r) if re.search(r"\d+ passed", line)]
        assert summary, f"rank {r} printed no pytest summary:\n{job.output[-4000:]}"
        assert not re.search(r"\d+ (failed|error)", summary[-1]), summary[-1]
        counts.add(int(re.search(r"(\d+) passed", summary[-1]).group(1)))
    assert len(counts) == 1, f"ranks passed different numbers of tests: {counts}"
    return counts.pop()


def test_every_collective_and_dtype_matches_numpy_on_two_hosts_of_two_ranks(bed2: TestBed):
    job = horarun(bed2, bed2.host_list(2, names=True), pytest_command(*EVERY_OP), env=ENGINE,
                  timeout=150)
    assert job.returncode == 0, job.output[-6000:]
    assert passed_on_every_rank(job, 4) >= 700, pytest_summary(job)


def test_reductions_and_gathers_match_numpy_on_three_hosts_of_two_ranks(bed3: TestBed):
    command = pytest_command(*AT_THREE_HOSTS) + BEYOND_FOUR_RANKS
    job = horarun(bed3, bed3.host_list(2), command, env=ENGINE, timeout=150)
    assert job.returncode == 0, job.output[-6000:]
    assert passed_on_every_rank(job, 6) >= 450, pytest_summary(job)
