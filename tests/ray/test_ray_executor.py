"""``hora.ray.RayExecutor`` on a local Ray instance: ranks, collectives against NumPy at 2 and
3 workers, executables, a failing worker, the job secret, placement errors, no process left."""

from __future__ import annotations

import os
import time

import numpy as np
import psutil
import pytest
import rank_tasks

ray = pytest.importorskip("ray")
from hora import _core
from hora.ray import RayExecutor


def _executor(workers: int, **kwargs: object) -> RayExecutor:
    settings = RayExecutor.create_settings(timeout_s=30, placement_group_timeout_s=20)
    executor = RayExecutor(settings, num_workers=workers, **kwargs)  # type: ignore[arg-type]
    executor.start(extra_env_vars={"HORA_FUSION_THRESHOLD": "1024"})
    return executor


def _gone(pids: list[int], seconds: float = 15.0) -> list[int]:
    """The processes of ``pids`` still running after waiting up to ``seconds``."""
    deadline = time.monotonic() + seconds
    while True:
        alive = [p for p in pids if psutil.pid_exists(p)
                 and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.1)


@pytest.mark.parametrize("workers", [2, 3])
def test_ranks_and_collectives_match_numpy(ray_cluster: None, workers: int) -> None:
    executor = _executor(workers)
    try:
        places = executor.run(rank_tasks.coordinates)
        # One node: every rank is local, ranks in worker order.
        assert places == [(r, workers, r, workers, 0, 1) for r in range(workers)]
        wrong = executor.run(rank_tasks.collectives, args=[workers])
        assert wrong == [[] for _ in range(workers)]
    finally:
        executor.shutdown()


def test_executable_and_execute_single(ray_cluster: None) -> None:
    executor = RayExecutor(RayExecutor.create_settings(timeout_s=30), num_hosts=1,
                           num_workers_per_host=3)
    executor.start(executable_cls=rank_tasks.RankEcho, executable_args=[5])
    try:
        assert executor.execute(lambda echo: echo.rank_times()) == [0, 5, 10]
        assert executor.execute_single(lambda echo: echo.rank_times()) == 0
        refs = executor.run_remote(lambda x: x * 2, args=[21])
        assert ray.get(refs) == [42, 42, 42]
    finally:
        executor.shutdown()


def test_a_failing_worker_ends_the_job_with_its_traceback(ray_cluster: None) -> None:
    executor = _executor(3)
    pids = executor.execute(lambda _: os.getpid())
    started = time.monotonic()
    with pytest.raises(ray.exceptions.RayTaskError) as failure:
        executor.run(rank_tasks.fail_on_rank, args=[1])
    took = time.monotonic() - started
    text = str(failure.value)
    assert "ValueError: boom on rank 1" in text and "fail_on_rank" in text  # the traceback
    assert "hora.ray: rank 1 failed; the job's workers were stopped" in failure.value.__notes__
    assert took < 20, f"the job took {took:.1f} s to end after rank 1 failed"
    assert _gone(pids) == [], "worker processes outlived the failed job"
    executor.shutdown()  # a second shutdown is harmless


def test_the_secret_travels_only_through_ray(ray_cluster: None) -> None:
    first, second = RayExecutor.create_settings(), RayExecutor.create_settings()
    assert first.key != second.key and len(first.key) == 64
    executor = RayExecutor(first, num_workers=2)
    executor.start()
    try:
        envs = executor.execute(lambda _: dict(os.environ))
        assert {env["HORA_SECRET"] for env in envs} == {first.key}
        assert "HORA_SECRET" not in os.environ
        host, port = envs[0]["HORA_RENDEZVOUS_ADDR"], int(envs[0]["HORA_RENDEZVOUS_PORT"])
        with pytest.raises(Exception, match="(?i)secret|authenticat|refused|closed"):
            _core.StoreClient(host, port, second.key, 3.0).set("stranger", b"1")
        assert executor.run(rank_tasks.coordinates)[1][:2] == (1, 2)
    finally:
        executor.shutdown()


def test_an_impossible_placement_times_out_saying_why(ray_cluster: None) -> None:
    settings = RayExecutor.create_settings(placement_group_timeout_s=2)
    executor = RayExecutor(settings, num_workers=9)
    started = time.monotonic()
    with pytest.raises(TimeoutError, match=r"could not place 9 x \{'CPU': 1\}.*within 2 s"):
        executor.start()
    assert time.monotonic() - started < 15
    executor.shutdown()


def _cpus_free(expected: float, seconds: float = 15.0) -> float:
    deadline = time.monotonic() + seconds
    while ray.available_resources().get("CPU", 0) < expected and time.monotonic() < deadline:
        time.sleep(0.1)
    return float(ray.available_resources().get("CPU", 0))


def test_a_failing_start_leaves_nothing_running(ray_cluster: None) -> None:
    executor = RayExecutor(RayExecutor.create_settings(timeout_s=30), num_workers=2)
    with pytest.raises(ray.exceptions.RayTaskError, match="cannot build its executable"):
        executor.start(executable_cls=rank_tasks.BrokenExecutable)
    # The workers and their placement group are gone: every CPU is free again.
    assert _cpus_free(4) == 4


def test_shutdown_leaves_no_worker_process(ray_cluster: None) -> None:
    executor = _executor(2)
    pids = executor.execute(lambda _: os.getpid())
    assert executor.run(rank_tasks.coordinates)[0][1] == 2
    executor.shutdown()
    assert _gone(pids) == []
    with pytest.raises(RuntimeError, match="not started"):
        executor.run(rank_tasks.coordinates)


def test_elastic_job_finishes_with_the_committed_state_after_a_kill(
        ray_cluster: None, tmp_path: object) -> None:
    events: list[dict] = []
    settings = RayExecutor.create_settings(timeout_s=30)
    executor = RayExecutor(settings, min_workers=2, max_workers=3, elastic_timeout=60,
                           cooldown_range=[1, 1])  # the one host is back 1 s after the kill
    executor.start()
    marker = os.path.join(str(tmp_path), "killed")
    results = executor.run(rank_tasks.elastic_training, args=[40, marker, 3],
                           callbacks=[events.append])
    executor.shutdown()
    assert os.path.exists(marker), "the worker was not killed: the test proves nothing"
    # Every epoch adds exactly 1 once committed: the kill's lost epoch was redone, not doubled.
    assert [r["total"] for r in results] == [40.0] * len(results)
    assert [r["epoch"] for r in results] == [40] * len(results)
    assert len(results) == 3 and all(r["size"] == 3 for r in results)  # grown back
    started = [e["started"] for e in events if "started" in e]
    assert len(started) >= 4, f"no replacement worker started: {events}"
    assert _gone(started) == []


def test_coordinator_orders_hosts_like_horovod() -> None:
    from hora.ray.runner import Coordinator, MiniSettings

    coordinator = Coordinator(MiniSettings())
    for rank, node in enumerate(["a", "a", "b", "a", "c"]):
        coordinator.register(f"host-{node}", node, rank)
    info = coordinator.finalize_registration()
    got = [(info[r]["HORA_LOCAL_RANK"], info[r]["HORA_LOCAL_SIZE"], info[r]["HORA_CROSS_RANK"],
            info[r]["HORA_CROSS_SIZE"]) for r in range(5)]
    assert got == [(0, 3, 0, 3), (1, 3, 0, 1), (0, 1, 1, 3), (2, 3, 0, 1), (0, 1, 2, 3)]
    assert coordinator.node_id_string == "a:3,b:1,c:1"
    assert np.all([info[r]["HOROVOD_RANK"] == r for r in range(5)])


def test_elastic_messages_use_the_executors_parameter_names(
        capsys: pytest.CaptureFixture[str]) -> None:
    from hora.ray.elastic_v2 import _say

    _say("job failed: fewer than --min-np 2 workers (1 ready) for 60 s (--elastic-timeout)")
    assert capsys.readouterr().err == ("hora.ray: job failed: fewer than min_workers 2 workers "
                                       "(1 ready) for 60 s (elastic_timeout)\n")
