"""The hierarchical allreduce and allgather across the bed's hosts: against NumPy (the op checks of
tests/parallel with HORA_HIERARCHICAL_ALLREDUCE=1 and HORA_HIERARCHICAL_ALLGATHER=1), against the
flat algorithms (the same inputs through both, in two jobs), and by what crosses the hosts' links
(the hierarchical allreduce sends each host's data across once: fewer bytes than the flat ring)."""

from __future__ import annotations

import os

import numpy as np
from launching import horarun, pytest_command, python_command
from test_multihost_collectives import passed_on_every_rank
from testbed import TestBed

HIERARCHICAL = {"HORA_HIERARCHICAL_ALLREDUCE": "1", "HORA_HIERARCHICAL_ALLGATHER": "1",
                "HORA_FUSION_THRESHOLD": "65536"}
FLAT = {"HORA_HIERARCHICAL_ALLREDUCE": "0", "HORA_HIERARCHICAL_ALLGATHER": "0"}
COUNT = (1 << 20) + 3  # elements: 4 MiB of float32 and an odd tail
REDUCED = {"f32_sum": ("float32", "sum"), "f64_avg": ("float64", "average"),
           "i32_sum": ("int32", "sum"), "f16_sum": ("float16", "sum")}


def rank_input(rank: int, dtype: str) -> np.ndarray:
    """Rank ``rank``'s allreduce input (the ranks compute it in the same way)."""
    rng = np.random.default_rng(1000 + rank)
    if dtype == "int32":
        return rng.integers(-1000, 1000, COUNT, dtype=np.int32)
    return rng.standard_normal(COUNT).astype(dtype)


def rank_rows(rank: int) -> np.ndarray:
    """Rank ``rank``'s allgather block: ``3 * rank + 1`` rows of 5."""
    return np.arange((3 * rank + 1) * 5, dtype=np.float64).reshape(-1, 5) + 1000 * rank


# The ranks' script: every reduction of REDUCED and one allgather; rank 0 saves the results.
SCRIPT = f"""
    import sys
    import numpy as np
    import hora
    sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r})
    from test_multihost_hierarchical import REDUCED, rank_input, rank_rows
    hora.init()
    ops = {{"sum": hora.Sum, "average": hora.Average}}
    out = {{name: hora.allreduce(rank_input(hora.rank(), dtype), op=ops[op], name=name)
           for name, (dtype, op) in REDUCED.items()}}
    out["gathered"] = hora.allgather(rank_rows(hora.rank()), name="gathered")
    if hora.rank() == 0:
        np.savez(sys.argv[1], **out)
    hora.shutdown()
"""


def expected(size: int) -> dict[str, np.ndarray]:
    """NumPy's results for ``size`` ranks (sums in float64, then rounded to the type)."""
    refs = {}
    for name, (dtype, op) in REDUCED.items():
        total = sum(rank_input(r, dtype).astype(np.float64) for r in range(size))
        refs[name] = total / size if op == "average" else total
    refs["gathered"] = np.concatenate([rank_rows(r) for r in range(size)])
    return refs


def assert_matches(got: dict[str, np.ndarray], want: dict[str, np.ndarray], size: int) -> None:
    for name, (dtype, _op) in REDUCED.items():
        tolerance = {"float16": 2e-2 * size, "float32": 1e-5, "float64": 1e-12,
                     "int32": 0}[dtype]
        np.testing.assert_allclose(got[name].astype(np.float64), want[name], rtol=tolerance,
                                   atol=tolerance, err_msg=name)
    np.testing.assert_array_equal(got["gathered"], want["gathered"])


def run_saved(bed: TestBed, hosts: str, env: dict[str, str], tag: str) -> tuple[dict, int]:
    """The results of SCRIPT under ``env``, and the bytes host A sent on its link meanwhile."""
    path = os.path.join(bed.workdir, f"{tag}.npz")
    before = bed.sent_bytes(0, "eth0")
    job = horarun(bed, hosts, python_command(SCRIPT) + [path], env=env, timeout=90)
    sent = bed.sent_bytes(0, "eth0") - before
    assert job.returncode == 0, job.output[-4000:]
    with np.load(path) as saved:
        return dict(saved), sent


def test_hierarchical_allreduce_and_allgather_match_numpy_on_two_hosts_of_two_ranks(bed2):
    files = ["test_hierarchical.py", "test_core_allreduce.py", "test_core_half_sums.py",
             "test_core_allgather.py"]
    job = horarun(bed2, bed2.host_list(2), pytest_command(*files), env=HIERARCHICAL, timeout=150)
    assert job.returncode == 0, job.output[-6000:]
    assert passed_on_every_rank(job, 4) >= 600


def test_hierarchical_matches_numpy_on_three_hosts_of_two_ranks(bed3):
    job = horarun(bed3, bed3.host_list(2), pytest_command("test_hierarchical.py"),
                  env=HIERARCHICAL, timeout=150)
    assert job.returncode == 0, job.output[-6000:]
    assert passed_on_every_rank(job, 6) >= 250


def test_hierarchical_equals_flat_and_numpy_and_crosses_fewer_bytes(bed2):
    hosts = bed2.host_list(2)
    flat, flat_sent = run_saved(bed2, hosts, FLAT, "flat")
    hier, hier_sent = run_saved(bed2, hosts, HIERARCHICAL, "hierarchical")
    want = expected(4)
    assert_matches(flat, want, 4)
    assert_matches(hier, want, 4)
    for name, (dtype, _op) in REDUCED.items():  # the two algorithms agree with each other
        exact = dtype == "int32"
        np.testing.assert_allclose(hier[name], flat[name], rtol=0 if exact else 3e-2,
                                   atol=0 if exact else 3e-2, err_msg=name)
    np.testing.assert_array_equal(hier["gathered"], flat["gathered"])
    payload = sum(rank_input(0, dtype).nbytes for dtype, _op in REDUCED.values())
    # Host A's link carries at least its half of every tensor both ways (the lower bound);
    # the flat ring about 1.75 times that.
    print(f"host A sent {payload} bytes of payload: {hier_sent} hierarchical, {flat_sent} flat")
    assert payload * 0.95 < hier_sent < 0.75 * flat_sent, (payload, hier_sent, flat_sent)
