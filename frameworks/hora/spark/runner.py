"""The driver side of ``hora.spark.run``: wait for task slots, serve the rendezvous store, run
one barrier stage of ``num_proc`` tasks, and return their results in rank order."""

from __future__ import annotations

import functools
import logging
import os
import secrets
import time
import warnings
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from hora import _core
from hora.errors import HoraTimeoutError, NotSupportedError
from hora.spark.task import TaskSpec, first_failure, run_task

_log = logging.getLogger("hora")

DEFAULT_START_TIMEOUT = 600.0
"""Seconds ``run`` waits for task slots when neither ``start_timeout`` nor
``HORA_SPARK_START_TIMEOUT`` (``HOROVOD_SPARK_START_TIMEOUT``) says."""

SLOT_POLL_SECONDS = 0.5


def active_context() -> Any:
    """The active SparkContext.

    Raises:
        ValueError: there is none (or only a Spark Connect session, which has no RDDs).
    """
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    sc = SparkContext._active_spark_context
    if sc is not None:
        return sc
    session = SparkSession.getActiveSession()
    if session is not None:
        try:
            return session.sparkContext
        except Exception:  # noqa: BLE001 - Spark Connect: no SparkContext in this process
            raise ValueError("hora.spark.run needs a classic SparkSession; Spark Connect "
                             "sessions cannot run barrier stages") from None
    raise ValueError("hora.spark.run: could not find an active SparkContext; create a "
                     "SparkSession first (SparkSession.builder...getOrCreate())")


def start_timeout_from(value: float | None, environ: Mapping[str, str] | None = None) -> float:
    """``value``, else ``HORA_SPARK_START_TIMEOUT`` or ``HOROVOD_SPARK_START_TIMEOUT``, else
    :data:`DEFAULT_START_TIMEOUT`.

    Raises:
        ValueError: the variable is not a number of seconds.
    """
    if value is not None:
        return float(value)
    env = os.environ if environ is None else environ
    text = env.get("HORA_SPARK_START_TIMEOUT") or env.get("HOROVOD_SPARK_START_TIMEOUT")
    if not text:
        return DEFAULT_START_TIMEOUT
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"HORA_SPARK_START_TIMEOUT must be seconds, got {text!r}") from None


def task_slots(sc: Any) -> int:
    """How many tasks the cluster runs at once: the number Spark's own barrier check uses
    (``maxNumConcurrentTasks``, which counts registered executors and ``spark.task.cpus``), or
    ``defaultParallelism`` where that is out of reach. ``defaultParallelism`` alone would
    mislead: it follows ``spark.default.parallelism`` when set, and is at least 2 in cluster
    modes before any executor registered."""
    try:
        jsc = sc._jsc.sc()
        return int(jsc.maxNumConcurrentTasks(jsc.resourceProfileManager()
                                             .defaultResourceProfile()))
    except Exception:  # noqa: BLE001 - another Spark version or a restricted gateway
        return int(sc.defaultParallelism)


def wait_for_slots(sc: Any, num_proc: int, timeout: float,
                   slots: Callable[[Any], int] = task_slots) -> None:
    """Return once the cluster offers ``num_proc`` task slots. A barrier stage that does not
    fit is not refused at once: Spark retries it for minutes (40 checks, 15 s apart).

    Raises:
        HoraTimeoutError: fewer slots than ``num_proc`` after ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    while True:
        offered = slots(sc)
        if offered >= num_proc:
            return
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise HoraTimeoutError(
                f"hora.spark.run: num_proc={num_proc} needs {num_proc} Spark task slots, but the "
                f"cluster offers {offered} (waited {timeout:g} s). Every rank runs in one task of "
                "a barrier stage, which starts only when all of them fit at once: lower "
                "num_proc, add executors (or cores per executor), or, if executors are still "
                "starting, raise start_timeout (or HORA_SPARK_START_TIMEOUT)")
        time.sleep(min(SLOT_POLL_SECONDS, remaining))


def task_attempts(sc: Any) -> int:
    """How many times Spark runs a task before it fails the job: ``F`` of a ``local[N,F]``
    master, 1 for other local masters (where ``spark.task.maxFailures`` is not read), else
    ``spark.task.maxFailures`` (default 4)."""
    master = str(sc.master)
    if master == "local" or master.startswith("local["):
        inside = master[len("local["):-1] if master.endswith("]") else ""
        parts = inside.split(",")
        return int(parts[1]) if len(parts) == 2 and parts[1].strip().isdigit() else 1
    return int(sc.getConf().get("spark.task.maxFailures", "4"))


def store_addresses(sc: Any) -> tuple[str, str]:
    """``(bind, advertised)`` address of the driver's store: 127.0.0.1 for both in local mode;
    else Spark's own choice for the driver, ``spark.driver.bindAddress`` (default
    ``spark.driver.host``) to listen on and ``spark.driver.host`` for the executors."""
    if str(sc.master).startswith("local"):
        return "127.0.0.1", "127.0.0.1"
    conf = sc.getConf()
    host = conf.get("spark.driver.host")
    return conf.get("spark.driver.bindAddress") or host, host


def interface_env(nics: str | Collection[str] | None) -> dict[str, str]:
    """``HORA_IFACE`` from ``nics`` (Hora's ranks listen on one interface).

    Raises:
        ValueError: more than one interface.
    """
    names = sorted({nics} if isinstance(nics, str) else set(nics or ()))
    if len(names) > 1:
        raise ValueError(f"hora.spark.run: nics={names}: Hora's ranks listen on one interface; "
                         "give one name")
    return {"HORA_IFACE": names[0]} if names else {}


def _refuse_mpi(use_mpi: bool | None, extra_mpi_args: str | None) -> None:
    if use_mpi:
        raise NotSupportedError("hora.spark.run(use_mpi=True) is not supported: the ranks run in "
                                "Spark tasks and connect over Hora's TCP transport (use_gloo, "
                                "the default)")
    if extra_mpi_args:
        raise NotSupportedError("hora.spark.run: extra_mpi_args is not supported, as no mpirun "
                                "starts the ranks; pass Hora settings as HORA_* variables in env")


def _warn_unrouted(stdout: Any, stderr: Any, prefix_output_with_timestamp: bool,
                   executable: str | None) -> None:
    unrouted = [name for name, value in (("stdout", stdout), ("stderr", stderr)) if value]
    if prefix_output_with_timestamp:
        unrouted.append("prefix_output_with_timestamp")
    if unrouted:
        warnings.warn(f"hora.spark.run: {', '.join(unrouted)} ignored: the ranks' output goes "
                      "to the executors' logs (in local mode, this process's stderr)",
                      stacklevel=3)
    if executable:
        warnings.warn("hora.spark.run: executable ignored: the ranks run in Spark's Python "
                      "workers; choose their interpreter with spark.pyspark.python "
                      "(PYSPARK_PYTHON)", stacklevel=3)


def run(fn: Callable[..., Any], args: Sequence[Any] = (), kwargs: Mapping[str, Any] | None = None,
        num_proc: int | None = None, start_timeout: float | None = None,
        use_mpi: bool | None = None, use_gloo: bool | None = None,
        extra_mpi_args: str | None = None, env: Mapping[str, str] | None = None,
        stdout: Any = None, stderr: Any = None, verbose: int = 1,
        nics: str | Collection[str] | None = None, prefix_output_with_timestamp: bool = False,
        executable: str | None = None) -> list[Any]:
    """Run ``fn(*args, **kwargs)`` on ``num_proc`` Spark tasks, one Hora rank each, and return
    the results in rank order (Horovod's ``horovod.spark.run``, parameters in its order).

    ``hvd.init()`` inside ``fn`` needs no arguments. The ranks run in one barrier stage of the
    active SparkContext; each host's ranks are consecutive. ``fn``, ``args``, ``kwargs`` and
    the results travel pickled with ``pyspark.cloudpickle``: ``fn`` must be importable on the
    executors, or defined in ``__main__``, or in a module registered with
    ``pyspark.cloudpickle.register_pickle_by_value``.

    Args:
        fn: the function every rank runs.
        args: its positional arguments (the same on every rank).
        kwargs: its keyword arguments (the same on every rank).
        num_proc: number of ranks (default: ``sc.defaultParallelism``).
        start_timeout: seconds to wait for the cluster to offer ``num_proc`` task slots
            (default: ``HORA_SPARK_START_TIMEOUT``, ``HOROVOD_SPARK_START_TIMEOUT``, else 600).
        use_mpi: ``True`` is not supported (NotSupportedError).
        use_gloo: accepted; Hora's TCP transport is used anyway.
        extra_mpi_args: not supported (NotSupportedError).
        env: variables set in every rank while ``fn`` runs (Hora's own coordinates win).
        stdout: not routed (a warning when given): the ranks print to the executors' logs, in
            local mode to this process's stderr.
        stderr: as ``stdout``.
        verbose: 1 or more logs the number of ranks (logger ``hora``, level INFO).
        nics: the one network interface the ranks listen on (``HORA_IFACE``).
        prefix_output_with_timestamp: not supported, as ``stdout`` (a warning when True).
        executable: ignored (a warning when given): set ``spark.pyspark.python`` instead.

    Returns:
        ``[result of rank 0, result of rank 1, ...]``.

    Raises:
        ValueError: no active SparkContext; ``num_proc`` < 1; more than one of ``nics``.
        NotSupportedError: ``use_mpi=True`` or ``extra_mpi_args``.
        HoraTimeoutError: fewer than ``num_proc`` task slots after ``start_timeout``.
        RuntimeError: a rank failed: the message names the rank that failed first and holds its
            traceback (Spark's error is the cause). A rank is never retried: Spark stops the
            other ranks, and a retried task refuses to run ``fn`` again.
    """
    from pyspark import cloudpickle

    del use_gloo  # the only transport there is
    _refuse_mpi(use_mpi, extra_mpi_args)
    _warn_unrouted(stdout, stderr, prefix_output_with_timestamp, executable)
    sc = active_context()
    num_proc = int(sc.defaultParallelism if num_proc is None else num_proc)
    if num_proc < 1:
        raise ValueError(f"hora.spark.run: num_proc must be at least 1, got {num_proc}")
    rank_vars = {**(env or {}), **interface_env(nics)}
    payload = cloudpickle.dumps((fn, tuple(args), dict(kwargs or {})))
    if verbose >= 1:
        _log.info("hora.spark.run: running %d processes", num_proc)
    wait_for_slots(sc, num_proc, start_timeout_from(start_timeout))

    bind, address = store_addresses(sc)
    secret = secrets.token_hex(32)
    server = _core.StoreServer(bind, 0, secret)
    spec = TaskSpec(payload, address, server.port, secret, rank_vars)
    try:
        rows = (sc.parallelize(range(num_proc), num_proc).barrier()
                .mapPartitions(functools.partial(run_task, spec)).collect())
    except Exception as exc:
        failure = first_failure(address, server.port, secret)
        if failure is None:
            raise
        rank, host, text = failure
        raise RuntimeError(f"hora.spark.run: rank {rank} (on {host}) failed first:\n"
                           f"{text}") from exc
    finally:
        server.stop()
    return [cloudpickle.loads(result) for _, result in sorted(rows, key=lambda row: row[0])]
