"""What one Spark task of ``hora.spark.run_elastic`` runs: an *agent* that offers its slot to
the driver, runs one elastic worker when told to, and reports how the worker ended.

Spark cannot start a task on a host the driver chooses, so the tasks come to the driver. Each
task registers in the driver's control store as a host of one slot named
``task-<partition>-<attempt>`` and adds 1 to its heartbeat counter every second. When the driver
writes a start command (the worker's environment) for it, the agent runs the user's function in
a child Python process (:func:`child_main`) and records the child's exit code and
outcome (the pickled result, or the traceback). A stop command, or the end of the job, kills the
child. The child is a process, not a thread, so that the agent can always end it: a function
stuck in a collective, or in C code, ignores everything else. The child ends itself once the
agent's process is gone (an executor lost, or Spark killed the task), so no worker outlives its
task.

Store keys, under ``hora.spark/``: ``agents`` (counter: agents registered), ``agent/<n>`` (the
n-th agent's name), and per agent ``agent/<n>/beat``, ``/start`` (JSON environment), ``/stop``,
``/exit`` (the child's return code) and ``/outcome`` (set before ``/exit``); ``done`` ends every
agent.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Iterable, Iterator, Mapping

from hora import _core

AGENTS_KEY = "hora.spark/agents"
DONE_KEY = "hora.spark/done"
BEAT_SECONDS = 1.0
"""Seconds between two heartbeats of an agent."""
POLL_SECONDS = 0.1
STOP_GRACE_SECONDS = 3.0
"""Seconds a child has to end after SIGTERM before SIGKILL."""
CONNECT_SECONDS = 10.0
# Not ``-m hora.spark.agent``: the package imports this module first, which runpy warns about.
_AGENT_PID = "HORA_SPARK_AGENT_PID"
_CHILD = "import sys; from hora.spark.agent import child_main; sys.exit(child_main(sys.argv[1]))"


def agent_key(index: int, what: str = "") -> str:
    """The key of the ``index``-th agent's name, or of its ``what`` (beat, start, ...)."""
    return f"hora.spark/agent/{index}" + (f"/{what}" if what else "")


@dataclasses.dataclass(frozen=True)
class AgentSpec:
    """What the driver ships to every agent inside the closure Spark pickles: the control
    store, the job secret and ``(fn, args, kwargs)`` pickled with cloudpickle."""

    store_host: str
    store_port: int
    secret: str
    payload: bytes
    task_attempts: int = 1
    """Attempts Spark gives a task (``spark.task.maxFailures``): a worker that fails on its own
    fails its task while Spark would start it again, so that a new agent replaces it."""


def _client(spec: AgentSpec) -> _core.StoreClient:
    return _core.StoreClient(spec.store_host, spec.store_port, spec.secret, CONNECT_SECONDS)


def _beat(spec: AgentSpec, index: int, stopped: threading.Event) -> None:
    """Add 1 to the heartbeat every second until ``stopped`` or the store is gone."""
    try:
        client = _client(spec)
        while not stopped.is_set():
            client.add(agent_key(index, "beat"), 1)
            stopped.wait(BEAT_SECONDS)
    except Exception:  # noqa: BLE001 - the driver is gone: the job ended
        stopped.set()


def _child_env(spec: AgentSpec, worker_env: Mapping[str, str]) -> dict[str, str]:
    env = dict(os.environ)
    env.update(worker_env)
    env["HORA_SECRET"] = spec.secret  # never written to the store
    env[_AGENT_PID] = str(os.getpid())
    # The child imports what this worker imported (hora, the user's modules) from the same path,
    # which Spark may have extended at run time (--py-files).
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    return env


def _told_to_stop(client: _core.StoreClient, index: int) -> bool:
    return client.check([agent_key(index, "stop")]) or client.check([DONE_KEY])


def _end_child(child: subprocess.Popen[bytes]) -> None:
    if child.poll() is None:
        child.send_signal(signal.SIGTERM)
        try:
            child.wait(STOP_GRACE_SECONDS)
        except subprocess.TimeoutExpired:
            child.kill()
    child.wait()


def _supervise(spec: AgentSpec, client: _core.StoreClient, index: int,
               worker_env: Mapping[str, str], stopped: threading.Event) -> int | None:
    """Run the worker as a child process until it ends or is stopped; record its end. Returns
    the worker's exit code when it ended on its own, None when it was stopped."""
    with tempfile.TemporaryDirectory(prefix="hora-spark-") as tmp:
        outcome_path = os.path.join(tmp, "outcome")
        child = subprocess.Popen([sys.executable, "-c", _CHILD, outcome_path],
                                 stdin=subprocess.PIPE, env=_child_env(spec, worker_env))
        assert child.stdin is not None
        child.stdin.write(spec.payload)
        child.stdin.close()
        ended_alone = False
        try:
            while child.poll() is None:
                if stopped.is_set() or _told_to_stop(client, index):
                    break
                time.sleep(POLL_SECONDS)
            else:
                ended_alone = True
        finally:
            _end_child(child)
        outcome = b""
        if os.path.exists(outcome_path):
            with open(outcome_path, "rb") as f:
                outcome = f.read()
    client.set(agent_key(index, "outcome"), outcome)
    client.set(agent_key(index, "exit"), str(child.returncode).encode())
    return child.returncode if ended_alone else None


def run_agent(spec: AgentSpec, partition: Iterable[int]) -> Iterator[int]:
    """The body of one Spark task: register, wait for a command, run the worker it names.
    Yields nothing: results travel through the store, which outlives a cancelled Spark job."""
    from pyspark import TaskContext

    del partition
    ctx = TaskContext.get()
    name = f"task-{ctx.partitionId()}-{ctx.attemptNumber()}"
    client = _client(spec)
    index = client.add(AGENTS_KEY, 1)
    client.set(agent_key(index), name.encode())
    stopped = threading.Event()
    beat = threading.Thread(target=_beat, args=(spec, index, stopped), daemon=True,
                            name="hora-spark-beat")
    beat.start()
    try:
        while not stopped.is_set():
            start = client.try_get(agent_key(index, "start"))
            if start is not None:
                code = _supervise(spec, client, index, json.loads(start.decode()), stopped)
                if code and ctx.attemptNumber() + 1 < spec.task_attempts:
                    # As Horovod's tasks do: Spark starts the task again, and its new agent
                    # (another name, so not excluded) lets the job grow back.
                    raise RuntimeError(f"hora.spark.run_elastic: the worker of {name} failed "
                                       f"(exit code {code}); failing the task so that Spark "
                                       "starts it again")
                return
            if _told_to_stop(client, index):
                return
            time.sleep(POLL_SECONDS)
    finally:
        stopped.set()
        beat.join(BEAT_SECONDS + CONNECT_SECONDS)
    yield from ()


def _watch_parent() -> None:
    """End this child once the agent's process is gone (its parent changes); the agent's pid
    comes from the environment, in case the agent died before this thread started."""
    parent = int(os.environ.pop(_AGENT_PID, os.getppid()))
    while os.getppid() == parent:
        time.sleep(0.2)
    os._exit(137)


def child_main(outcome_path: str) -> int:
    """The worker process: run ``(fn, args, kwargs)`` read from stdin; write the pickled
    result (exit 0) or the traceback (exit 1) to ``outcome_path``."""
    threading.Thread(target=_watch_parent, daemon=True, name="hora-spark-parent").start()
    from pyspark import cloudpickle

    import hora

    try:
        fn, args, kwargs = cloudpickle.loads(sys.stdin.buffer.read())
        data, code = cloudpickle.dumps(fn(*args, **kwargs)), 0
    except BaseException:  # noqa: BLE001 - reported to the driver, which decides
        data, code = traceback.format_exc().encode(), 1
    finally:
        if hora.is_initialized():
            hora.shutdown()
    with open(outcome_path, "wb") as f:
        f.write(data)
    return code
