"""``hora.spark.run_elastic`` on a local Spark session that retries failed tasks (conftest.py):
an elastic loop reaches the same committed state with and without a worker killed or a task
lost, and too few workers end the job with a clear error in seconds.

Every epoch adds ``hvd.allreduce(ones, op=Average)`` (1.0 at any size) to a committed total, so
a job that re-formed correctly ends with ``total == epochs`` on every finishing worker.
"""

from __future__ import annotations

import os
import signal
import sys
import time

import hora.spark
import hora.torch as hvd
import psutil
import pytest
import torch
from hora.errors import HoraTimeoutError
from pyspark import cloudpickle

cloudpickle.register_pickle_by_value(sys.modules[__name__])

EPOCHS = 6
JOB_SECONDS = 40.0
"""Any one job here ends well within this (a few seconds each on 2 cores)."""


def elastic_training(epochs: int, marker: str = "", kill: str = "", fail: bool = False) -> dict:
    """The elastic loop. At epoch 2, the worker of rank 1 (once: ``marker`` records it) SIGKILLs
    itself (``kill="self"``), SIGKILLs its Spark task's Python worker (``kill="task"``), or
    raises (``fail``)."""
    hvd.init()
    state = hvd.elastic.TorchState(epoch=0, total=0.0)

    @hvd.elastic.run
    def train(state: hvd.elastic.TorchState) -> None:
        while state.epoch < epochs:
            if state.epoch == 2 and hvd.rank() == 1 and marker and not os.path.exists(marker):
                with open(marker, "w", encoding="utf-8") as f:
                    f.write(str(os.getpid()))
                if fail:
                    raise ValueError("worker gave up on purpose")
                os.kill(os.getppid() if kill == "task" else os.getpid(), signal.SIGKILL)
                time.sleep(30)  # killed task: the worker process ends once it sees its parent go
            state.total += float(hvd.allreduce(torch.ones(2), op=hvd.Average, name="one")[0])
            state.epoch += 1
            time.sleep(0.05)
            state.commit()

    train(state)
    return {"total": state.total, "epoch": state.epoch, "rank": hvd.rank(), "size": hvd.size(),
            "pid": os.getpid()}


def assert_finished_with_the_committed_state(results: list[dict], size: int) -> None:
    assert len(results) == size, results
    assert [r["rank"] for r in results] == list(range(size))
    for result in results:
        assert result == {"total": float(EPOCHS), "epoch": EPOCHS, "rank": result["rank"],
                          "size": size, "pid": result["pid"]}


@pytest.mark.parametrize("num_proc", [2, 3])
def test_workers_train_to_the_committed_state_and_return_in_rank_order(spark_retrying, num_proc):
    start = time.monotonic()
    results = hora.spark.run_elastic(elastic_training, args=(EPOCHS,), num_proc=num_proc,
                                     verbose=0)
    assert time.monotonic() - start < JOB_SECONDS
    assert_finished_with_the_committed_state(results, num_proc)


@pytest.mark.parametrize("kill", ["self", "task"])
def test_a_killed_worker_or_task_makes_the_others_re_form_from_the_committed_state(
        spark_retrying, tmp_path, kill):
    marker = tmp_path / "killed"
    start = time.monotonic()
    results = hora.spark.run_elastic(elastic_training, args=(EPOCHS, str(marker), kill),
                                     num_proc=3, min_num_proc=2, elastic_timeout=20)
    assert time.monotonic() - start < JOB_SECONDS
    assert marker.exists(), "no worker was killed"
    # "self": the killed worker's slot is used up; "task": Spark runs the task again, as a new
    # agent that may join before the end.
    assert len(results) in ((2,) if kill == "self" else (2, 3))
    assert_finished_with_the_committed_state(results, len(results))
    assert not psutil.pid_exists(int(marker.read_text())), "the killed worker still runs"


def test_a_worker_that_raises_fails_its_task_and_its_retry_rejoins_the_job(spark_retrying,
                                                                           tmp_path):
    # As under Horovod: the failed worker's task fails, Spark starts it again (local[3,4]: up
    # to 4 attempts), and the job grows back to min_num_proc = num_proc = 2 on the new agent.
    marker = tmp_path / "failed"
    start = time.monotonic()
    results = hora.spark.run_elastic(elastic_training, args=(EPOCHS, str(marker)),
                                     kwargs={"fail": True}, num_proc=2, elastic_timeout=20)
    assert time.monotonic() - start < JOB_SECONDS
    assert marker.exists(), "no worker failed"
    assert_finished_with_the_committed_state(results, 2)


def test_too_few_tasks_for_min_num_proc_raise_after_start_timeout(spark_retrying):
    start = time.monotonic()
    with pytest.raises(HoraTimeoutError, match="fewer than min_num_proc=4") as info:
        hora.spark.run_elastic(elastic_training, args=(EPOCHS,), num_proc=4, start_timeout=2)
    assert time.monotonic() - start < 10
    assert "3 Spark task(s) started within start_timeout=2 s" in str(info.value)


def test_inconsistent_numbers_are_refused_with_the_parameter_names(spark_retrying):
    with pytest.raises(ValueError, match="max_num_proc 1 is less than min_num_proc 2"):
        hora.spark.run_elastic(elastic_training, num_proc=2, max_num_proc=1)
