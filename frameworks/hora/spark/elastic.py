"""The driver side of ``hora.spark.run_elastic``: Spark tasks as the elastic driver's hosts.

Spark cannot start a task on a host chosen on demand, so the job's tasks come to the driver:
one non-barrier Spark job of ``max_num_proc`` tasks runs an agent in each (``hora.spark.agent``).
Hora's elastic driver (the one behind ``horarun --min-np``) sees every live agent as a host of
one slot; starting a worker there writes a command the agent follows, and the worker's end
comes back through the control store (0 returned, 1 raised, the signal number negated when it
was killed, -9 when its agent's heartbeat stopped: its executor or task is gone). A task that
Spark starts again after a failure (``spark.task.maxFailures``) is a new agent, so a new host;
a task that is still pending when another ends starts then, and the job grows onto it.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import os
import queue
import secrets
import sys
import threading
import time
import warnings
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from hora import _core
from hora.common.elastic import protocol
from hora.errors import HoraTimeoutError
from hora.runner.elastic import limits_of
from hora.runner.elastic.blacklist import Blacklist
from hora.runner.elastic.driver import ElasticDriver, with_names
from hora.runner.elastic.workers import LaunchInfo, worker_env
from hora.runner.local_exec import describe_exit
from hora.spark.agent import AGENTS_KEY, DONE_KEY, AgentSpec, agent_key, run_agent
from hora.spark.runner import (
    _warn_unrouted,
    active_context,
    interface_env,
    start_timeout_from,
    store_addresses,
    task_attempts,
)

STALE_SECONDS = 5.0
"""An agent whose heartbeat did not move for this long is gone (its worker counts as killed)."""
WATCH_SECONDS = 0.2
STOP_WAIT_SECONDS = 10.0
SPARK_END_SECONDS = 10.0
"""Seconds the Spark job has to end by itself (its agents see ``done``) before it is cancelled."""
_KILLED = -9
_FLAGS = {"--min-np": "min_num_proc", "--max-np": "max_num_proc", "-np": "num_proc",
          "--elastic-timeout": "elastic_timeout", "--reset-limit": "reset_limit"}


def _python_names(text: str) -> str:
    """The driver's and ``limits_of``'s messages with ``run_elastic``'s parameter names."""
    return with_names(text, _FLAGS)


@dataclasses.dataclass
class _Agent:
    index: int
    name: str
    beat: int = 0
    seen: float = 0.0  # driver clock: when the heartbeat last moved
    worker: int | None = None


@dataclasses.dataclass(eq=False)
class SparkWorker:
    """One worker run by an agent (the driver reads ``id``, ``host``, ``stopping``,
    ``reaped``)."""

    id: int
    host: str
    agent: int
    stopping: bool = False
    reaped: bool = False
    ended: bool = False


class SparkWorkerPool:
    """The agents (as hosts) and the workers they run, for :class:`ElasticDriver`. A watcher
    thread reads the control store: new agents, heartbeats, exits; ends arrive on ``exits`` as
    ``(worker id, code)``."""

    def __init__(self, host: str, port: int, secret: str,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._commands = _core.StoreClient(host, port, secret, 10.0)  # the driver's thread
        self._reader = _core.StoreClient(host, port, secret, 10.0)  # the watcher's
        self._agents: dict[str, _Agent] = {}
        self._next_id = 0
        self.workers: dict[int, SparkWorker] = {}
        self.exits: queue.Queue[tuple[int, int]] = queue.Queue()
        self.results: dict[int, bytes] = {}
        self.failures: list[str] = []  # in the order seen, stopped workers left out
        self._watcher = threading.Thread(target=self._watch, name="hora-spark-agents",
                                         daemon=True)
        self._watcher.start()

    def discover(self) -> dict[str, int]:
        """``{agent name: 1}`` for the live agents that are free or run a live worker."""
        now = self._clock()
        with self._lock:
            return {a.name: 1 for a in self._agents.values()
                    if now - a.seen < STALE_SECONDS
                    and (a.worker is None or not self.workers[a.worker].ended)}

    def alive(self) -> list[SparkWorker]:
        """Workers neither being stopped nor handled by the driver, oldest first."""
        return [w for w in self.workers.values() if not w.stopping and not w.reaped]

    def count_on(self, host: str) -> int:
        """1 once ``host`` (an agent) ran a worker: an agent runs one worker in its life."""
        return sum(1 for w in self.workers.values() if w.host == host)

    def start(self, info: LaunchInfo, host: str, local_slots: int) -> SparkWorker:
        """Tell agent ``host`` to start the next worker."""
        with self._lock:
            agent = next(a for a in self._agents.values() if a.name == host)
            worker = SparkWorker(self._next_id, host, agent.index)
            self._next_id += 1
            agent.worker = worker.id
            self.workers[worker.id] = worker
        env = worker_env(info, worker.id, host, local_slots)
        self._commands.set(agent_key(agent.index, "start"), json.dumps(env).encode())
        return worker

    def stop(self, workers: list[SparkWorker], grace: float = STOP_WAIT_SECONDS) -> None:
        """Tell ``workers``' agents to end them; wait (at most ``grace`` s) for their ends."""
        for worker in workers:
            worker.stopping = True
            self._commands.set(agent_key(worker.agent, "stop"), b"1")
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and not all(w.ended for w in workers):
            time.sleep(0.05)

    def enforce(self) -> None:
        """Nothing to do: ``stop()`` waits for the ends it asked for (the driver calls this each
        turn for pools whose stops do not wait)."""

    def close(self) -> None:
        """Stop every worker and the watcher."""
        self.stop([w for w in self.workers.values() if not w.ended])
        self._closed.set()
        self._watcher.join(timeout=5.0)

    def _watch(self) -> None:
        while not self._closed.is_set():
            try:
                self._look()
            except Exception as exc:  # noqa: BLE001 - the store stopped: the job is over
                if not self._closed.is_set():
                    print(f"hora.spark: cannot read the control store: {exc}", file=sys.stderr)
                return
            self._closed.wait(WATCH_SECONDS)

    def _look(self) -> None:
        store = self._reader
        now = self._clock()
        for index in range(len(self._agents) + 1, store.add(AGENTS_KEY, 0) + 1):
            name = store.try_get(agent_key(index))
            if name is None:
                break  # registered but not named yet: next time
            with self._lock:
                self._agents[name.decode()] = _Agent(index, name.decode(), seen=now)
        for agent in list(self._agents.values()):
            beat = int(store.try_get(agent_key(agent.index, "beat")) or 0)
            if beat != agent.beat:
                agent.beat, agent.seen = beat, now
            if agent.worker is None or self.workers[agent.worker].ended:
                continue
            code = store.try_get(agent_key(agent.index, "exit"))
            if code is not None:
                outcome = store.get(agent_key(agent.index, "outcome"), 5.0)
                self._ended(self.workers[agent.worker], int(code), outcome)
            elif now - agent.seen >= STALE_SECONDS:
                self._ended(self.workers[agent.worker], _KILLED,
                            f"its Spark task ({agent.name}) stopped answering".encode())

    def _ended(self, worker: SparkWorker, code: int, outcome: bytes) -> None:
        if code == 0:
            self.results[worker.id] = outcome
        elif not worker.stopping:
            text = outcome.decode(errors="replace").strip()
            self.failures.append(f"worker {worker.id} on {worker.host} ended with "
                                 f"{describe_exit(code)}" + (f":\n{text}" if text else ""))
        worker.ended = True
        self.exits.put((worker.id, code))

    def live_agents(self) -> int:
        """Agents registered whose heartbeat is fresh."""
        return len(self.discover())


def rank_of(control: _core.StoreClient, worker_id: int) -> int:
    """The rank ``worker_id`` had in the last generation it formed."""
    generation = int(control.get(protocol.formed_key(str(worker_id)), 5.0))
    data = control.get(protocol.worker_key(generation, str(worker_id)), 5.0)
    return protocol.Assignment.decode(data).rank


def _wait_for_agents(pool: SparkWorkerPool, wanted: int, needed: int, timeout: float,
                     spark_errors: list[BaseException]) -> None:
    """Wait until ``wanted`` agents registered, or ``timeout`` passed with ``needed``.

    Raises:
        HoraTimeoutError: fewer than ``needed`` after ``timeout`` seconds.
        RuntimeError: the Spark job failed.
    """
    deadline = time.monotonic() + timeout
    while (live := pool.live_agents()) < wanted:
        if spark_errors:
            raise RuntimeError("hora.spark.run_elastic: the Spark job of the agents failed "
                               f"before the job started: {spark_errors[0]}") from spark_errors[0]
        if time.monotonic() >= deadline:
            if live >= needed:
                return
            raise HoraTimeoutError(
                f"hora.spark.run_elastic: {live} Spark task(s) started within start_timeout="
                f"{timeout:g} s, fewer than min_num_proc={needed}: each worker runs in one Spark "
                "task; lower min_num_proc, add executors (or cores per executor), or raise "
                "start_timeout (or HORA_SPARK_START_TIMEOUT)")
        time.sleep(WATCH_SECONDS)


def _spark_job(sc: Any, group: str, spec: AgentSpec, tasks: int,
               errors: list[BaseException]) -> None:
    # Job groups are per thread: set here, where the job is submitted.
    sc.setJobGroup(group, "hora.spark.run_elastic agents", interruptOnCancel=True)
    try:
        sc.parallelize(range(tasks), tasks).mapPartitions(
            functools.partial(run_agent, spec)).collect()
    except Exception as exc:  # noqa: BLE001 - cancelled at the end, or failed: both reported
        errors.append(exc)


def run_elastic(fn: Callable[..., Any], args: Sequence[Any] = (),
                kwargs: Mapping[str, Any] | None = None, num_proc: int | None = None,
                min_num_proc: int | None = None, max_num_proc: int | None = None,
                start_timeout: float | None = None, elastic_timeout: float | None = None,
                reset_limit: int | None = None, env: Mapping[str, str] | None = None,
                stdout: Any = None, stderr: Any = None, verbose: int = 1,
                nics: str | Collection[str] | None = None,
                prefix_output_with_timestamp: bool = False, min_np: int | None = None,
                max_np: int | None = None) -> list[Any]:
    """Run ``fn(*args, **kwargs)`` as an elastic Hora job on Spark tasks and return the results
    of the workers that finished, in rank order (Horovod's ``horovod.spark.run_elastic``,
    parameters in its order).

    Inside ``fn``, ``hvd.init()`` and ``hvd.elastic.run`` with a ``TorchState``/``ObjectState``
    work as under ``horarun --min-np``: when a worker fails or its task is lost, the others
    restore the last committed state and go on; new tasks join at the next commit. ``fn``
    runs in a child process of its Spark task's Python worker; it, ``args``, ``kwargs`` and its
    result travel pickled with ``pyspark.cloudpickle`` (see ``hora.spark.run``).

    Args:
        fn: the function every worker runs.
        args: its positional arguments.
        kwargs: its keyword arguments.
        num_proc: workers to start with (default: ``sc.defaultParallelism``).
        min_num_proc: fewer workers than this for ``elastic_timeout`` ends the job (default:
            ``num_proc``).
        max_num_proc: at most this many workers (default: ``num_proc``); as many Spark tasks
            are submitted.
        start_timeout: seconds for ``num_proc`` tasks to start (default:
            ``HORA_SPARK_START_TIMEOUT``, ``HOROVOD_SPARK_START_TIMEOUT``, else 600); with at
            least ``min_num_proc`` by then, the job starts with those.
        elastic_timeout: seconds the job may stay below ``min_num_proc`` (default:
            ``HORA_ELASTIC_TIMEOUT``, ``HOROVOD_ELASTIC_TIMEOUT``, else 600).
        reset_limit: at most this many re-formations.
        env: variables set in every worker.
        stdout: not routed (a warning when given): workers print to the executors' logs.
        stderr: as ``stdout``.
        verbose: 1 or more prints the driver's messages (``hora.spark: ...``) to stderr.
        nics: the one network interface the workers listen on (``HORA_IFACE``).
        prefix_output_with_timestamp: not supported, as ``stdout`` (a warning when True).
        min_np: deprecated name of ``min_num_proc``.
        max_np: deprecated name of ``max_num_proc``.

    Returns:
        The results of the workers that finished, in the rank order of their last generation.

    Raises:
        ValueError: no active SparkContext; inconsistent numbers; more than one of ``nics``.
        HoraTimeoutError: fewer than ``min_num_proc`` tasks started within ``start_timeout``.
        RuntimeError: the job failed: the message says why and names the first worker that
            failed, with its traceback.
    """
    from pyspark import cloudpickle

    min_num_proc, max_num_proc = _deprecated(min_num_proc, max_num_proc, min_np, max_np)
    _warn_unrouted(stdout, stderr, prefix_output_with_timestamp, None)
    sc = active_context()
    num_proc = int(sc.defaultParallelism if num_proc is None else num_proc)
    max_num_proc = num_proc if max_num_proc is None else max_num_proc
    try:
        limits = limits_of(argparse.Namespace(
            num_proc=num_proc, min_np=min_num_proc, max_np=max_num_proc,
            elastic_timeout=elastic_timeout, reset_limit=reset_limit), os.environ)
    except ValueError as exc:
        raise ValueError(f"hora.spark.run_elastic: {_python_names(str(exc))}") from None
    interface = interface_env(nics).get("HORA_IFACE")
    timeout = start_timeout_from(start_timeout)
    payload = cloudpickle.dumps((fn, tuple(args), dict(kwargs or {})))
    messages: list[str] = []

    def speaker(text: str) -> None:
        messages.append(_python_names(text))
        if verbose >= 1:
            print(f"hora.spark: {messages[-1]}", file=sys.stderr, flush=True)

    bind, address = store_addresses(sc)
    secret = secrets.token_hex(32)
    server = _core.StoreServer(bind, 0, secret)
    spec = AgentSpec(address, server.port, secret, payload, task_attempts(sc))
    base = {**(env or {}), "HORA_ELASTIC_TIMEOUT": str(limits.elastic_timeout),
            "HORA_START_TIMEOUT": str(timeout)}
    info = LaunchInfo(command=["a Spark task"], base_env=base, secret=secret, address=address,
                      control_port=server.port, interface=interface, remote_hosts=frozenset(),
                      cwd=os.getcwd())
    group = f"hora.spark.run_elastic.{secrets.token_hex(4)}"
    spark_errors: list[BaseException] = []
    spark = threading.Thread(target=_spark_job, name="hora-spark-job", daemon=True,
                             args=(sc, group, spec, max_num_proc, spark_errors))
    control = _core.StoreClient(address, server.port, secret, 10.0)
    pool = SparkWorkerPool(address, server.port, secret)
    try:
        spark.start()
        _wait_for_agents(pool, num_proc, limits.min_np, timeout, spark_errors)
        driver = ElasticDriver(info, pool.discover, limits, Blacklist(None),
                               pool, bind, control,  # type: ignore[arg-type]  # a SparkWorkerPool
                               speaker=speaker)
        code = driver.run()
        results = sorted((rank_of(control, i), data) for i, data in pool.results.items()
                         if not pool.workers[i].stopping) if code == 0 else []
    finally:
        pool.close()
        control.set(DONE_KEY, b"1")  # idle agents and pending tasks end by themselves
        spark.join(SPARK_END_SECONDS)
        sc.cancelJobGroup(group)
        spark.join(SPARK_END_SECONDS)
        server.stop()
    if code != 0:
        why = next((m for m in reversed(messages) if m.startswith("job failed")),
                   f"exit code {code}")
        first = pool.failures[0] if pool.failures else "no worker failed"
        raise RuntimeError(f"hora.spark.run_elastic: the elastic {why}; first failure: {first}")
    return [cloudpickle.loads(data) for _, data in results]


def _deprecated(min_num_proc: int | None, max_num_proc: int | None, min_np: int | None,
                max_np: int | None) -> tuple[int | None, int | None]:
    if min_np is not None:
        warnings.warn("min_np is deprecated, use min_num_proc instead", DeprecationWarning,
                      stacklevel=3)
        min_num_proc = min_np
    if max_np is not None:
        warnings.warn("max_np is deprecated, use max_num_proc instead", DeprecationWarning,
                      stacklevel=3)
        max_num_proc = max_np
    return min_num_proc, max_num_proc
