"""Hora as a Ray Train backend: ``HoraTrainer`` and ``DataParallelTrainer`` with
``HoraConfig``; ranks, an allreduce, ``train.report`` with a checkpoint, a failing worker."""

from __future__ import annotations

import os
import time

import pytest
import rank_tasks

ray = pytest.importorskip("ray")
pytest.importorskip("ray.train")
import torch
from hora.ray import HoraConfig, HoraTrainer
from ray.train import FailureConfig, RunConfig, ScalingConfig


def _run_config(tmp_path: object, name: str) -> RunConfig:
    return RunConfig(storage_path=str(tmp_path), name=name,
                     failure_config=FailureConfig(max_failures=0))


@pytest.mark.parametrize("workers", [2, 3])
def test_hora_trainer_runs_a_horovod_style_loop(ray_cluster: None, tmp_path: object,
                                                workers: int) -> None:
    result = HoraTrainer(rank_tasks.ray_train_loop, train_loop_config={},
                         scaling_config=ScalingConfig(num_workers=workers),
                         run_config=_run_config(tmp_path, f"hora{workers}")).fit()
    assert result.error is None
    expected = workers * (workers + 1) / 2
    assert result.metrics["total"] == expected
    assert result.metrics["size"] == workers
    assert result.metrics["rank"] == result.metrics["train_rank"] == 0
    with result.checkpoint.as_directory() as folder:
        saved = torch.load(os.path.join(folder, "state.pt"))
    assert saved["total"].item() == expected


def test_data_parallel_trainer_with_hora_config(ray_cluster: None, tmp_path: object) -> None:
    from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer

    result = DataParallelTrainer(rank_tasks.ray_train_loop, train_loop_config={},
                                 backend_config=HoraConfig(timeout_s=60),
                                 scaling_config=ScalingConfig(num_workers=2),
                                 run_config=_run_config(tmp_path, "dpt")).fit()
    assert result.metrics["total"] == 3.0 and result.metrics["local_rank"] == 0


def test_a_failing_worker_fails_the_run_quickly(ray_cluster: None, tmp_path: object) -> None:
    started = time.monotonic()
    with pytest.raises(Exception, match="boom in Ray Train on rank 1"):
        result = HoraTrainer(rank_tasks.ray_train_loop, train_loop_config={"fail_rank": 1},
                             scaling_config=ScalingConfig(num_workers=2),
                             run_config=_run_config(tmp_path, "fail")).fit()
        if result.error is not None:
            raise result.error
    assert time.monotonic() - started < 60


def test_workers_not_numbered_node_by_node_are_refused() -> None:
    from hora.ray.train import _HoraBackend

    class Group:  # Ray Train's worker group, as far as the backend uses it before connecting
        def execute(self, fn: object) -> list[tuple[str, str]]:
            return [("node-a", "10.0.0.1"), ("node-b", "10.0.0.2"), ("node-a", "10.0.0.1")]

    with pytest.raises(RuntimeError, match="not numbered node by node"):
        _HoraBackend().on_start(Group(), HoraConfig())
