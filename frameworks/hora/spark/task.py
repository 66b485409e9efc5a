"""What runs inside one Spark task of ``hora.spark.run``: the rank's place in the job, its
environment, the call of the user's function, and its result or failure.

Every task of the barrier stage sees the same task addresses (``getTaskInfos``, in partition
order), so each computes the same rank order without asking the others: hosts in the order they
first appear, each host's partitions together, in partition order.

A failing rank records its traceback in the job's rendezvous store before Hora shuts down here
(which makes the other ranks' collectives fail too). The store numbers the records, so the driver
names the rank that failed first, whichever failure Spark happens to report.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import traceback
from collections.abc import Iterable, Iterator, Mapping, Sequence

import hora
from hora.runner.env import private_env, rendezvous_env, topology_env
from hora.runner.slots import SlotInfo, local_and_cross

_log = logging.getLogger("hora")

FAILURES_KEY = "hora.spark/failures"
"""Store counter: how many ranks have failed so far."""

FAILURE_KEY = "hora.spark/failure/"
"""Store key prefix of the n-th failure record (n from 1): rank, host and traceback."""

REPORT_TIMEOUT = 5.0
"""Seconds a failing rank spends at most reaching the store to record its failure."""


@dataclasses.dataclass(frozen=True)
class TaskSpec:
    """What the driver ships to every task, inside the closure Spark pickles.

    ``payload`` is ``(fn, args, kwargs)`` pickled with cloudpickle; ``env`` holds the user's
    variables (and ``HORA_IFACE``), which the rank's coordinates and the store override.
    """

    payload: bytes
    store_host: str
    store_port: int
    secret: str
    env: Mapping[str, str]


def host_of(address: str) -> str:
    """The host part of a task address: ``"10.0.0.5:40123"`` -> ``"10.0.0.5"``
    (``"[::1]:40123"`` -> ``"::1"``)."""
    host, sep, _ = address.rpartition(":")
    return host.strip("[]") if sep and host else address


def rank_order(hosts: Sequence[str]) -> list[int]:
    """Partition ids in rank order, given each partition's host: hosts in order of first
    appearance, each host's partitions consecutive and ascending."""
    by_host: dict[str, list[int]] = {}
    for partition, host in enumerate(hosts):
        by_host.setdefault(host, []).append(partition)
    return [partition for partitions in by_host.values() for partition in partitions]


def slot_of(partition: int, hosts: Sequence[str]) -> SlotInfo:
    """The coordinates of the task running ``partition``, given each partition's host."""
    order = rank_order(hosts)
    rank = order.index(partition)
    local_rank, local_size, cross_rank, cross_size = local_and_cross(
        [hosts[p] for p in order])[rank]
    return SlotInfo(hosts[partition], rank, len(hosts), local_rank, local_size, cross_rank,
                    cross_size)


def rank_env(spec: TaskSpec, slot: SlotInfo) -> dict[str, str]:
    """The variables one rank runs under: the user's, then its coordinates, the store and the
    secret (these win, so a copy of the driver's environment in ``env`` cannot misplace it)."""
    env = dict(spec.env)
    env.update(topology_env(slot))
    env.update(rendezvous_env(spec.store_host, spec.store_port))
    env.update(private_env(spec.secret))
    return env


def restore_environ(saved: Mapping[str, str]) -> None:
    """Put ``os.environ`` back as ``saved``: Spark reuses the Python worker for later tasks."""
    for name in [name for name in os.environ if name not in saved]:
        del os.environ[name]
    for name, value in saved.items():
        if os.environ.get(name) != value:
            os.environ[name] = value


def report_failure(spec: TaskSpec, slot: SlotInfo, text: str) -> None:
    """Record this rank's failure in the store (best effort: without it the driver still
    raises Spark's own error)."""
    from hora import _core

    try:
        client = _core.StoreClient(spec.store_host, spec.store_port, spec.secret,
                                   REPORT_TIMEOUT)
        order = client.add(FAILURES_KEY, 1)
        client.set(f"{FAILURE_KEY}{order}", f"{slot.rank}\n{slot.hostname}\n{text}".encode())
    except Exception as exc:  # noqa: BLE001 - the task fails anyway; Spark has the traceback
        _log.warning("hora.spark.run: rank %d could not record its failure in the store at "
                     "%s:%d (%s)", slot.rank, spec.store_host, spec.store_port, exc)


def first_failure(host: str, port: int, secret: str,
                  timeout: float = REPORT_TIMEOUT) -> tuple[int, str, str] | None:
    """``(rank, host, traceback)`` of the rank that failed first, read from the store at
    ``host:port``; None when no rank recorded a failure."""
    from hora import _core

    try:
        client = _core.StoreClient(host, port, secret, timeout)
        if client.add(FAILURES_KEY, 0) < 1:
            return None
        # The first rank counted may still be writing its record: wait for it briefly.
        record = client.get(f"{FAILURE_KEY}1", timeout).decode(errors="replace")
    except Exception:  # noqa: BLE001 - the caller falls back to Spark's error
        return None
    rank, rank_host, text = record.split("\n", 2)
    return int(rank), rank_host, text


def call(spec: TaskSpec, slot: SlotInfo) -> bytes:
    """Run the user's function as ``slot``'s rank and return its pickled result.

    The rank's variables are set for the call only, and Hora is shut down afterwards whether or
    not the function did it, so the next task of this Python worker starts clean.

    Raises:
        RuntimeError: the function (or unpickling it, or pickling its result) failed; the
            message names the rank and the original error is its cause.
    """
    from pyspark import cloudpickle

    saved = dict(os.environ)
    os.environ.update(rank_env(spec, slot))
    try:
        fn, args, kwargs = cloudpickle.loads(spec.payload)
        result = fn(*args, **kwargs)
        data: bytes = cloudpickle.dumps(result)
        return data
    except BaseException as exc:
        report_failure(spec, slot, traceback.format_exc())
        raise RuntimeError(f"hora.spark.run: rank {slot.rank} (on {slot.hostname}) "
                           f"failed: {exc!r}") from exc
    finally:
        hora.shutdown()
        restore_environ(saved)


def run_task(spec: TaskSpec, partition: Iterable[int]) -> Iterator[tuple[int, bytes]]:
    """The body of one barrier task: yields ``(rank, pickled result)``.

    Raises:
        RuntimeError: this is a retry of the task (the function would run a second time,
            against ranks that are gone), or the function failed. (Spark does not retry a
            failed barrier result stage: it aborts the job.)
    """
    from pyspark import BarrierTaskContext

    del partition  # the task's rank comes from its partition id, not from its data
    ctx = BarrierTaskContext.get()
    hosts = [host_of(info.address) for info in ctx.getTaskInfos()]
    slot = slot_of(ctx.partitionId(), hosts)
    if ctx.attemptNumber() > 0:
        raise RuntimeError(f"hora.spark.run: rank {slot.rank} was started again after a failure; "
                           "a rank is never retried (see the first failure)")
    yield slot.rank, call(spec, slot)
