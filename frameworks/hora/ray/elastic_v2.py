"""Elastic jobs on Ray: ``RayExecutor(settings, min_workers=..., max_workers=...)``.

The job runs under Hora's own elastic driver (``hora.runner.elastic.driver``, the one behind
``horarun --min-np``): it forms numbered generations of the workers that are ready, re-forms
when one fails or its host goes away, and grows when new slots appear. Here its hosts are Ray
nodes (:class:`RayHostDiscovery`, or ``settings.discovery`` with ``override_discovery=False``)
and its workers are Ray actors (:class:`RayWorkerPool`) placed on a host through the
``node:<host>`` resource Ray gives every node. Inside the function, ``hvd.elastic.run`` and the
elastic state API work as under horarun; ``hora.ray.ray_logger.log({...})`` reaches the
callbacks given to ``run``.
"""

from __future__ import annotations

import dataclasses
import os
import queue
import secrets
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from hora.errors import NotSupportedError
from hora.ray import ray_logger
from hora.ray.runner import nics_env
from hora.ray.worker import BaseHorovodWorker
from hora.runner import env as envs
from hora.runner.elastic.blacklist import Blacklist
from hora.runner.elastic.discovery import HostDiscovery
from hora.runner.elastic.driver import ElasticDriver, ElasticLimits, with_names
from hora.runner.elastic.workers import LaunchInfo, worker_env
from hora.runner.util.network import get_driver_ip

_FIXED_RANK_NAMES = [prefix + name for prefix in ("HORA_", "HOROVOD_") for name in ("RANK", "SIZE")]
_STOP_WAIT_SECONDS = 10.0
_KILLED = -9  # what the driver sees for a worker whose actor died: killed


_NAMES = {"--min-np": "min_workers", "--max-np": "max_workers",
          "--elastic-timeout": "elastic_timeout", "--reset-limit": "reset_limit"}


def _say(text: str) -> None:
    print(f"hora.ray: {with_names(text, _NAMES)}", file=sys.stderr, flush=True)


class RayHostDiscovery(HostDiscovery):
    """The alive Ray nodes and how many workers each can take (Horovod's
    ``horovod.ray.elastic_v2.RayHostDiscovery``): a node's CPUs divided by ``cpus_per_worker``
    (and, with ``use_gpu``, at most its GPUs divided by ``gpus_per_worker``)."""

    def __init__(self, use_gpu: bool = False, cpus_per_worker: float = 1,
                 gpus_per_worker: float = 1) -> None:
        self.use_gpu = use_gpu
        self.cpus_per_worker = cpus_per_worker
        self.gpus_per_worker = gpus_per_worker or 1

    def find_available_hosts_and_slots(self) -> dict[str, int]:
        import ray

        hosts: dict[str, int] = {}
        for node in ray.nodes():
            if not node.get("alive", node.get("Alive", False)):
                continue
            resources = node.get("Resources", {})
            slots = int(resources.get("CPU", 0) // self.cpus_per_worker)
            if self.use_gpu:
                slots = min(slots, int(resources.get("GPU", 0) // self.gpus_per_worker))
            host = node["NodeManagerAddress"]
            hosts[host] = hosts.get(host, 0) + slots
        return hosts


@dataclasses.dataclass(eq=False)
class RayWorker:
    """One started worker actor (the driver reads ``id``, ``host``, ``stopping``, ``reaped``)."""

    id: int
    host: str
    actor: Any
    ref: Any
    stopping: bool = False
    reaped: bool = False
    ended: bool = False  # its call returned or its actor died


def _elastic_task(env: dict[str, str], fn: Callable[[Any], Any], executable: tuple | None,
                  log_queue: Any) -> tuple[int, Any]:
    """What one worker actor runs: its environment, the executable, ``fn``; returns
    ``(rank at the end, result)``."""
    import hora

    for name in _FIXED_RANK_NAMES:
        os.environ.pop(name, None)  # the driver assigns ranks, generation by generation
    os.environ.update(env)
    ray_logger.configure(log_queue)
    made = None
    if executable is not None:
        cls, args, kwargs = executable
        made = cls(*args, **kwargs)
    try:
        result = fn(made)
        return (hora.rank() if hora.is_initialized() else -1), result
    finally:
        if hora.is_initialized():
            hora.shutdown()


class RayWorkerPool:
    """The elastic driver's workers as Ray actors; their ends arrive on ``exits`` as
    ``(worker id, code)``: 0 returned, 1 raised, -9 the actor died (killed, or its node lost)."""

    def __init__(self, task: Callable[[dict[str, str]], Any], cpus_per_worker: float,
                 gpus_per_worker: float) -> None:
        self._task = task
        self._cpus = cpus_per_worker
        self._gpus = gpus_per_worker
        self._next_id = 0
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self.workers: dict[int, RayWorker] = {}
        self.exits: queue.Queue[tuple[int, int]] = queue.Queue()
        self.results: dict[int, tuple[int, Any]] = {}
        self.errors: dict[int, BaseException] = {}
        self._watcher = threading.Thread(target=self._watch, name="hora-ray-workers",
                                         daemon=True)
        self._watcher.start()

    def alive(self) -> list[RayWorker]:
        """Workers neither being stopped nor handled by the driver, oldest first."""
        return [w for w in self.workers.values() if not w.stopping and not w.reaped]

    def count_on(self, host: str) -> int:
        """Workers holding a slot of ``host``."""
        return sum(1 for w in self.workers.values() if w.host == host and not w.reaped)

    def start(self, info: LaunchInfo, host: str, local_slots: int) -> RayWorker:
        """Start a worker actor on ``host`` (the node whose ``node:<host>`` resource it is)."""
        import ray

        worker_id = self._next_id
        self._next_id += 1
        env = worker_env(info, worker_id, host, local_slots)
        env.update(envs.private_env(info.secret))
        actor = ray.remote(BaseHorovodWorker).options(
            num_cpus=self._cpus, num_gpus=self._gpus, resources={f"node:{host}": 0.001},
            max_restarts=0).remote()
        worker = RayWorker(worker_id, host, actor, actor.execute.remote(self._task(env)))
        with self._lock:
            self.workers[worker_id] = worker
        return worker

    def _watch(self) -> None:
        import ray

        while not self._closed.is_set():
            with self._lock:
                running = {w.ref: w for w in self.workers.values() if not w.ended}
            if not running:
                time.sleep(0.05)
                continue
            done, _ = ray.wait(list(running), num_returns=1, timeout=0.1)
            for ref in done:
                self._ended(running[ref], ref)

    def _ended(self, worker: RayWorker, ref: Any) -> None:
        import ray

        try:
            self.results[worker.id] = ray.get(ref)
            code = 0
        except ray.exceptions.RayActorError:
            code = _KILLED
        except ray.exceptions.RayTaskError as error:
            self.errors[worker.id] = error
            code = 1
        worker.ended = True
        self.exits.put((worker.id, code))

    def stop(self, workers: list[RayWorker], grace: float = _STOP_WAIT_SECONDS) -> None:
        """Kill ``workers``' actors and wait (at most ``grace`` seconds) until their ends are
        seen."""
        import ray

        for worker in workers:
            worker.stopping = True
            ray.kill(worker.actor, no_restart=True)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and not all(w.ended for w in workers):
            time.sleep(0.05)

    def enforce(self) -> None:
        """Nothing to do: ``stop()`` waits for the ends it asked for (the driver calls this each
        turn for pools whose stops do not wait)."""

    def close(self) -> None:
        """Stop every worker and the watcher."""
        self.stop([w for w in self.workers.values() if not w.ended])
        for worker in self.workers.values():
            if worker.ended:
                import ray

                ray.kill(worker.actor, no_restart=True)  # a finished worker's actor too
        self._closed.set()
        self._watcher.join(timeout=2.0)


class ElasticAdapter:
    """Runs an elastic job: workers start with each ``run``/``execute`` and end with it."""

    def __init__(self, settings: Any, min_workers: int, max_workers: int | None = None,
                 reset_limit: int | None = None, cooldown_range: Sequence[float] | None = None,
                 elastic_timeout: float = 600, override_discovery: bool = True,
                 cpus_per_worker: float = 1, use_gpu: bool = False,
                 gpus_per_worker: float | None = None) -> None:
        if min_workers < 1:
            raise ValueError(f"min_workers must be >= 1, got {min_workers}")
        self.settings = settings
        self.limits = ElasticLimits(min_workers, max_workers, None, float(elastic_timeout),
                                    reset_limit)
        self.cooldown = ((float(cooldown_range[0]), float(cooldown_range[1]))
                         if cooldown_range else None)
        self.cpus_per_worker = cpus_per_worker
        self.use_gpu = use_gpu
        self.gpus_per_worker = gpus_per_worker or 1
        if override_discovery:
            self.discovery: HostDiscovery = RayHostDiscovery(use_gpu, cpus_per_worker,
                                                             self.gpus_per_worker)
        elif getattr(settings, "discovery", None) is None:
            raise ValueError("override_discovery=False needs settings.discovery (a "
                             "HostDiscovery)")
        else:
            self.discovery = settings.discovery
        self._executable: tuple | None = None
        self._extra_env: dict[str, str] = {}

    def start(self, executable_cls: type | None = None,
              executable_args: Sequence[Any] | None = None,
              executable_kwargs: Mapping[str, Any] | None = None,
              extra_env_vars: Mapping[str, Any] | None = None) -> None:
        """Remember what each worker makes and its extra variables (workers start with
        ``run``)."""
        if executable_cls is not None:
            self._executable = (executable_cls, list(executable_args or ()),
                                dict(executable_kwargs or {}))
        self._extra_env = {k: str(v) for k, v in (extra_env_vars or {}).items()}

    def execute(self, fn: Callable[[Any], Any],
                callbacks: Sequence[Callable] | None = None) -> list[Any]:
        """Run ``fn(executable)`` as an elastic job; the results of the workers that finished,
        in rank order."""
        return self._run_job(fn, callbacks)

    def run(self, fn: Callable[..., Any], args: Sequence[Any] | None = None,
            kwargs: Mapping[str, Any] | None = None,
            callbacks: Sequence[Callable] | None = None) -> list[Any]:
        """Run ``fn(*args, **kwargs)`` as an elastic job; the results of the workers that
        finished, in rank order."""
        call_args, call_kwargs = list(args or ()), dict(kwargs or {})
        return self._run_job(lambda _executable: fn(*call_args, **call_kwargs), callbacks)

    def run_remote(self, *args: Any, **kwargs: Any) -> list[Any]:
        raise NotSupportedError("an elastic job's workers change while it runs: use run() or "
                                "execute(), which wait for the job")

    def execute_single(self, *args: Any, **kwargs: Any) -> Any:
        raise NotSupportedError("an elastic job has no fixed rank 0 between runs: use "
                                "execute()")

    def shutdown(self) -> None:
        """Nothing outlives a run of an elastic job."""

    def _address(self) -> str:
        import ray

        nics = getattr(self.settings, "nics", None)
        if nics:
            return get_driver_ip(nics)
        here = ray.util.get_node_ip_address()
        nodes = {n["NodeManagerAddress"] for n in ray.nodes() if n.get("Alive", n.get("alive"))}
        return "127.0.0.1" if nodes <= {here} else here

    def _run_job(self, fn: Callable[[Any], Any],
                 callbacks: Sequence[Callable] | None) -> list[Any]:
        from ray.util.queue import Queue

        from hora import _core

        address = self._address()
        secret = secrets.token_hex(32)
        control_server = _core.StoreServer(address, 0, secret)
        log_queue = Queue(actor_options={"num_cpus": 0}) if callbacks else None
        executable = self._executable
        base = dict(self._extra_env)
        base.update(nics_env(getattr(self.settings, "nics", None)))
        base["HORA_START_TIMEOUT"] = str(getattr(self.settings, "timeout_s", 300))
        base["HORA_ELASTIC_TIMEOUT"] = str(self.limits.elastic_timeout)
        info = LaunchInfo(command=["a Ray actor"], base_env=base, secret=secret,
                          address=address, control_port=control_server.port,
                          interface=None, remote_hosts=frozenset(), cwd=os.getcwd())
        pool = RayWorkerPool(lambda env: _bind(_elastic_task, env, fn, executable, log_queue),
                             self.cpus_per_worker, self.gpus_per_worker * int(self.use_gpu))
        relay = _Relay(log_queue, callbacks or ())
        try:
            control = _core.StoreClient(address, control_server.port, secret, 10.0)
            driver = ElasticDriver(
                info, self.discovery.find, self.limits, Blacklist(self.cooldown),
                pool, address, control, speaker=_say)  # type: ignore[arg-type]  # a RayWorkerPool
            code = driver.run()
        finally:
            relay.stop()
            control_server.stop()
            if log_queue is not None:
                log_queue.shutdown()
        if code != 0:
            first = next(iter(pool.errors.values()), None)
            raise RuntimeError(f"hora.ray: the elastic job failed (exit code {code}); the "
                               "messages above (hora.ray: ...) say why"
                               + (f"; a worker raised:\n{first}" if first else "")) from first
        return [result for _, result in sorted(pool.results.values(), key=lambda r: r[0])]


def _bind(task: Callable[..., Any], *bound: Any) -> Callable[[Any], Any]:
    return lambda _executable: task(*bound)


class _Relay:
    """Calls the callbacks with what the workers log, from a thread, until stopped."""

    def __init__(self, log_queue: Any, callbacks: Sequence[Callable]) -> None:
        self._queue = log_queue
        self._callbacks = list(callbacks)
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        if log_queue is not None:
            self._thread = threading.Thread(target=self._loop, name="hora-ray-log", daemon=True)
            self._thread.start()

    def _loop(self) -> None:
        while not self._stopped.is_set():
            self._drain(timeout=0.1)

    def _drain(self, timeout: float) -> None:
        from ray.util.queue import Empty

        try:
            info = self._queue.get(timeout=timeout)
        except Empty:
            return
        for callback in self._callbacks:
            callback(info)

    def stop(self) -> None:
        self._stopped.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
            while not self._queue.empty():
                self._drain(timeout=0.1)
