"""``hora.spark.run`` on a local Spark session (conftest.py): ranks in rank order with the
coordinates Hora reports, collectives against NumPy, the demo's training against horarun's, a
failing rank, too few task slots, and options Hora does not support.

The functions the ranks run are defined here, so they travel by value (this module is not
importable on the executors).
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import time
from pathlib import Path

import hora
import hora.spark
import hora.torch as hvd
import numpy as np
import pyspark
import pytest
import torch
from conftest import REPO, SLOTS
from hora.errors import HoraTimeoutError, NotSupportedError
from hora.spark.runner import start_timeout_from
from hora.spark.task import rank_order, slot_of
from pyspark import cloudpickle

cloudpickle.register_pickle_by_value(sys.modules[__name__])

FAILURE_SECONDS = 15.0
"""A failing rank must end the job within this (it ends in well under a second here)."""


def coordinates(inits: int = 1) -> dict:
    """What a rank knows about its place, after ``inits`` init/shutdown rounds."""
    for _ in range(inits - 1):
        hvd.init()
        hvd.shutdown()
    hvd.init()
    return {"rank": hvd.rank(), "size": hvd.size(), "local_rank": hvd.local_rank(),
            "local_size": hvd.local_size(), "cross_rank": hvd.cross_rank(),
            "cross_size": hvd.cross_size(), "env_rank": os.environ["HORA_RANK"],
            "horovod_rank": os.environ["HOROVOD_RANK"], "pid": os.getpid()}


def test_a_job_forms_although_its_workers_ran_different_numbers_of_jobs(spark):
    # Spark reuses Python workers: two of these three ranks run in workers that initialised
    # Hora twice before, one in a new worker.
    first = hora.spark.run(coordinates, kwargs={"inits": 2}, num_proc=2)
    second = hora.spark.run(coordinates, num_proc=3)
    reused = {r["pid"] for r in first} & {r["pid"] for r in second}
    assert len(reused) == 2, "expected a fresh session: run this test first"
    assert [r["rank"] for r in second] == [0, 1, 2]


@pytest.mark.parametrize("num_proc", [2, 3])
def test_results_come_back_in_rank_order_with_the_coordinates_hora_reports(spark, num_proc):
    results = hora.spark.run(coordinates, num_proc=num_proc)
    assert len(results) == num_proc
    assert len({r["pid"] for r in results}) == num_proc, "two ranks shared a process"
    for rank, result in enumerate(results):
        # One host: local coordinates are the global ones, and there is one cross group each.
        assert result == {"rank": rank, "size": num_proc, "local_rank": rank,
                          "local_size": num_proc, "cross_rank": 0, "cross_size": 1,
                          "env_rank": str(rank), "horovod_rank": str(rank),
                          "pid": result["pid"]}


def test_num_proc_defaults_to_the_default_parallelism(spark):
    assert len(hora.spark.run(coordinates)) == spark.sparkContext.defaultParallelism == SLOTS


SHAPES = [(1,), (1001,), (3, 257)]
DTYPES = [np.float32, np.float64, np.int32]


def rank_data(rank: int) -> list[np.ndarray]:
    """Rank ``rank``'s inputs: one array per shape and dtype."""
    rng = np.random.default_rng(1000 + rank)
    return [(rng.standard_normal(shape) * 100).astype(dtype) for shape in SHAPES
            for dtype in DTYPES]


def allreduce_everything() -> dict[str, list[np.ndarray]]:
    hora.init()
    data = rank_data(hora.rank())
    out = {"sum": [hora.allreduce(x, op=hora.Sum, name=f"sum.{i}") for i, x in enumerate(data)],
           "max": [hora.allreduce(x, op=hora.Max, name=f"max.{i}") for i, x in enumerate(data)]}
    hora.shutdown()
    return out


@pytest.mark.parametrize("num_proc", [2, 3])
def test_allreduce_inside_the_function_matches_numpy(spark, num_proc):
    results = hora.spark.run(allreduce_everything, num_proc=num_proc)
    inputs = [rank_data(rank) for rank in range(num_proc)]
    for rank, result in enumerate(results):
        for i, got in enumerate(result["sum"]):
            want = np.sum([inputs[r][i] for r in range(num_proc)], axis=0, dtype=got.dtype)
            assert got.dtype == want.dtype and got.shape == want.shape
            np.testing.assert_allclose(got, want, rtol=1e-6, err_msg=f"rank {rank}, input {i}")
        for i, got in enumerate(result["max"]):
            want = np.max([inputs[r][i] for r in range(num_proc)], axis=0)
            np.testing.assert_array_equal(got, want, err_msg=f"rank {rank}, input {i}")


def environment_seen(a: int, b: int = 0) -> dict:
    hvd.init()
    return {"product": a * b, "var": os.environ.get("HORA_SPARK_TEST_VAR"),
            "rank": hvd.rank(), "env_rank": os.environ["HORA_RANK"],
            "iface": os.environ.get("HORA_IFACE"), "pid": os.getpid()}


def test_args_kwargs_env_and_nics_reach_every_rank_and_leave_with_the_task(spark):
    first = hora.spark.run(environment_seen, args=(6,), kwargs={"b": 7}, num_proc=SLOTS,
                           env={"HORA_SPARK_TEST_VAR": "here", "HORA_RANK": "99"},
                           nics=["lo"])
    for rank, result in enumerate(first):
        # HORA_RANK from env would misplace the rank: Hora's own coordinates win.
        assert result == {"product": 42, "var": "here", "rank": rank, "env_rank": str(rank),
                          "iface": "lo", "pid": result["pid"]}
    second = hora.spark.run(environment_seen, args=(1,), num_proc=SLOTS)
    assert {r["pid"] for r in first} & {r["pid"] for r in second}, "Spark reused no worker"
    assert [r["var"] for r in second] == [None] * SLOTS
    assert [r["iface"] for r in second] == [None] * SLOTS


TRAIN_ARGS = ["--epochs", "2"]


def test_the_demo_trains_as_under_horarun(tmp_path):
    """The README's Spark line (examples/spark/spark_mlp.py, a session of its own) ends with
    the parameters ``horarun -np 2`` gives, to the last bit."""
    # The hora being tested: this checkout's (PYTHONPATH) or the installed one (CI's wheel).
    hora_root = str(Path(hora.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        filter(None, [hora_root, os.environ.get("PYTHONPATH")]))}
    paths = {how: tmp_path / f"{how}.pt" for how in ("horarun", "spark")}
    subprocess.run([sys.executable, "-m", "hora.runner", "-np", "2", sys.executable,
                    str(REPO / "examples" / "pytorch" / "train_mlp.py"), *TRAIN_ARGS,
                    "--save-params", str(paths["horarun"])], env=env, check=True, timeout=120,
                   stdout=subprocess.DEVNULL)
    done = subprocess.run([sys.executable, str(REPO / "examples" / "spark" / "spark_mlp.py"),
                           "--num-proc", "2", *TRAIN_ARGS, "--save-params", str(paths["spark"])],
                          env=env, timeout=180, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    expected, got = torch.load(paths["horarun"]), torch.load(paths["spark"])
    assert got.keys() == expected.keys()
    for name, value in got.items():
        # The same shards, seeds and sums as under horarun: equal to the last bit.
        assert torch.equal(value, expected[name]), name


def fail_on_rank(failing: int, sleep_on: int = -1) -> None:
    hvd.init()
    if hvd.rank() == failing:
        time.sleep(0.2)  # the others are waiting in the allreduce by now
        raise ValueError(f"rank {failing} gave up on purpose")
    if hvd.rank() == sleep_on:
        time.sleep(120)  # outside Hora: only Spark can stop this rank
    hvd.allreduce(torch.ones(4), name="never_completes")


@pytest.mark.parametrize("sleep_on", [-1, 0], ids=["others_in_a_collective", "one_asleep"])
def test_a_failing_rank_ends_the_job_in_seconds_naming_that_rank(spark, sleep_on):
    start = time.monotonic()
    with pytest.raises(RuntimeError) as info:
        hora.spark.run(fail_on_rank, args=(1, sleep_on), num_proc=3)
    assert time.monotonic() - start < FAILURE_SECONDS
    message = str(info.value)
    # The others fail too (their collective is shut down): the rank named is the first.
    assert message.startswith("hora.spark.run: rank 1 (on "), message[:300]
    assert "ValueError: rank 1 gave up on purpose" in message
    assert "fail_on_rank" in message  # its traceback
    # The same session runs the next job (Spark kills the sleeping rank's worker).
    assert [r["rank"] for r in hora.spark.run(coordinates, num_proc=3)] == [0, 1, 2]


def write_marker(path: str) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.write("ran")


def test_too_few_slots_raise_after_start_timeout_without_running_anything(spark, tmp_path):
    marker = tmp_path / "ran"
    start = time.monotonic()
    with pytest.raises(HoraTimeoutError) as info:
        hora.spark.run(write_marker, args=(str(marker),), num_proc=SLOTS + 1, start_timeout=2)
    assert 2 <= time.monotonic() - start < 5
    message = str(info.value)
    for part in (f"num_proc={SLOTS + 1} needs {SLOTS + 1}", f"offers {SLOTS}", "lower num_proc",
                 "add executors", "start_timeout"):
        assert part in message, message
    assert not marker.exists()


def test_start_timeout_defaults_to_hora_then_horovod_variable_then_600():
    assert start_timeout_from(5, {"HORA_SPARK_START_TIMEOUT": "7"}) == 5
    assert start_timeout_from(None, {"HORA_SPARK_START_TIMEOUT": "7",
                                     "HOROVOD_SPARK_START_TIMEOUT": "8"}) == 7
    assert start_timeout_from(None, {"HOROVOD_SPARK_START_TIMEOUT": "8"}) == 8
    assert start_timeout_from(None, {}) == 600
    with pytest.raises(ValueError, match="HORA_SPARK_START_TIMEOUT"):
        start_timeout_from(None, {"HORA_SPARK_START_TIMEOUT": "soon"})


def test_each_hosts_tasks_get_consecutive_ranks_in_partition_order():
    hosts = ["b", "a", "b", "c", "a"]  # the host of partitions 0..4
    assert rank_order(hosts) == [0, 2, 1, 4, 3]
    slots = {p: slot_of(p, hosts) for p in range(len(hosts))}
    assert [(slots[p].rank, slots[p].hostname) for p in rank_order(hosts)] == [
        (0, "b"), (1, "b"), (2, "a"), (3, "a"), (4, "c")]
    assert [(s.local_rank, s.local_size, s.cross_rank, s.cross_size)
            for s in sorted(slots.values(), key=lambda s: s.rank)] == [
        (0, 2, 0, 3), (1, 2, 0, 2), (0, 2, 1, 3), (1, 2, 1, 2), (0, 1, 2, 3)]


def test_mpi_options_are_refused_naming_the_alternative(spark):
    with pytest.raises(NotSupportedError, match="use_gloo"):
        hora.spark.run(coordinates, use_mpi=True)
    with pytest.raises(NotSupportedError, match="HORA_"):
        hora.spark.run(coordinates, extra_mpi_args="-x FOO")
    with pytest.raises(ValueError, match="one interface"):
        hora.spark.run(coordinates, nics=["eth0", "lo"])


def test_stdout_is_not_routed_and_says_so(spark):
    with pytest.warns(UserWarning, match="stdout ignored"):
        results = hora.spark.run(coordinates, num_proc=2, stdout=io.StringIO(), use_gloo=True)
    assert [r["rank"] for r in results] == [0, 1]


def test_without_a_spark_session_run_says_to_create_one(monkeypatch):
    monkeypatch.setattr(pyspark.SparkContext, "_active_spark_context", None)
    with pytest.raises(ValueError, match="create a SparkSession first"):
        hora.spark.run(coordinates)
