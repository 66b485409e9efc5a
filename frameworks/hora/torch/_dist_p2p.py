"""Point-to-point messages of the ``hora`` backend: send, recv (from one rank or any), their
async and batched forms, and ``monitored_barrier``.

They go over Hora's point-to-point channel (``hora._core.PointToPoint``), not the collective
engine: only the two ranks involved take part. The channel joins the job when the first group
over every rank is created (a collective step: rank 0 makes a fresh secret for it and sends it
through the engine's authenticated connections, then the ranks exchange addresses) and closes
with Hora.

Each ``isend``/``irecv`` returns a work at once; the blocking transfer runs on a thread of its
own lane: one lane per (peer, tag) and direction, whose operations run in the order they were
issued. Messages between two ranks with one tag therefore match in issue order, as torch
requires, while different peers and tags proceed independently (a rank can send to and receive
from the same peer at once). A tag is scoped to its group: the wire tag adds the group's key.
"""

from __future__ import annotations

import collections
import datetime
import secrets
import threading
import time
import zlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

import hora
from hora import _core
from hora.common import basics, objects
from hora.errors import HoraTimeoutError, NotSupportedError
from hora.runner import rank_discovery
from hora.torch._dist_checks import writable_view, write_back
from hora.torch._dist_work import HoraWork, complete

if TYPE_CHECKING:
    from hora.torch._dist_group import HoraProcessGroup

_USER, _MONITORED = 0, 1  # kinds of message in a wire tag

_lock = threading.Lock()
_channel: Any = None  # the job's hora._core.PointToPoint while Hora runs


def open_channel() -> None:
    """Join the job's point-to-point channel (collective over every rank; once per init)."""
    global _channel
    if _channel is not None:
        return
    secret = objects.broadcast_object(secrets.token_hex(32) if hora.rank() == 0 else None,
                                      root_rank=0, name="torchdist.p2p.secret")
    channel = _core.PointToPoint(hora.rank(), hora.size(), secret, _listen_host())
    addresses = objects.allgather_object(channel.address(), name="torchdist.p2p.addresses")
    channel.set_peers(addresses)
    with _lock:
        _channel = channel


def _listen_host() -> str:
    """Where this rank's channel listens: the engine's listen address, or the loopback when
    every rank runs on this machine."""
    listen = basics.listen_host()
    if listen or hora.local_size() != hora.size():
        return listen
    return rank_discovery.listen_host("127.0.0.1")


def close_channel() -> None:
    """Close the channel: pending transfers fail with ShutdownError (Hora's shutdown hook)."""
    global _channel
    with _lock:
        channel, _channel = _channel, None
    if channel is not None:
        channel.close()


basics.add_shutdown_hook(close_channel)


def _the_channel() -> Any:
    channel = _channel
    if channel is None:
        raise NotSupportedError(
            "hora backend: point-to-point operations need the channel that the first group over "
            "every rank opens (init_process_group(backend='hora'), or new_group over every rank "
            "with backend='hora'); none is open"
        )
    return channel


class _Lanes:
    """Runs tasks in submission order per key, each busy key on a thread of its own.

    The threads are daemons; at interpreter exit ``stop`` waits a bounded time for them, so that
    none is torn down while it completes a torch future (which aborts the process)."""

    _EXIT_JOIN_SECONDS = 2.0

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queues: dict[Any, collections.deque[Callable[[], None]]] = {}
        self._threads: set[threading.Thread] = set()

    def run(self, key: Any, task: Callable[[], None]) -> None:
        """Run ``task`` after the tasks already given for ``key``."""
        with self._lock:
            queue = self._queues.get(key)
            if queue is not None:
                queue.append(task)
                return
            self._queues[key] = collections.deque([task])
            thread = threading.Thread(target=self._drain, args=(key,), name="hora-torch-p2p",
                                      daemon=True)
            self._threads.add(thread)
        thread.start()

    def _drain(self, key: Any) -> None:
        try:
            while True:
                with self._lock:
                    queue = self._queues[key]
                    if not queue:
                        del self._queues[key]
                        return
                    task = queue.popleft()
                task()
        finally:
            with self._lock:
                self._threads.discard(threading.current_thread())

    def stop(self) -> None:
        """Wait a bounded time for the lanes' threads to end."""
        with self._lock:
            threads = list(self._threads)
        deadline = time.monotonic() + self._EXIT_JOIN_SECONDS
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))


_lanes = _Lanes()


def _at_exit() -> None:
    """Interpreter exit: fail what still waits on the channel, then let the lanes finish."""
    close_channel()
    _lanes.stop()


# Runs when the interpreter starts to exit, before it tears down daemon threads.
threading._register_atexit(_at_exit)  # type: ignore[attr-defined]


def _group_key(group: HoraProcessGroup) -> int:
    """A key equal on every rank for one group: its name's checksum."""
    return zlib.crc32(group.names.prefix.encode()) & 0x3FFFFFFF


def _wire_tag(group: HoraProcessGroup, kind: int, tag: int) -> int:
    return (_group_key(group) << 33) | (kind << 32) | (int(tag) & 0xFFFFFFFF)


def _bytes(tensor: torch.Tensor) -> Any:
    """The memory of a contiguous tensor as a NumPy byte array (no copy)."""
    return tensor.reshape(-1).view(torch.uint8).numpy()


def _seconds(timeout: datetime.timedelta) -> float:
    return max(0.0, timeout.total_seconds())


def _peer(group: HoraProcessGroup, group_rank: int, what: str) -> int:
    if group_rank == group.rank():
        raise ValueError(f"hora backend: {what} with rank {group_rank}, this process's own rank "
                         "in the group")
    return group.global_rank(group_rank)


def send(group: HoraProcessGroup, tensor: torch.Tensor, dst: int, tag: int) -> HoraWork:
    """``isend``: ``tensor`` to group rank ``dst``; the work completes once it is sent."""
    channel = _the_channel()
    peer = _peer(group, dst, "send")
    data = tensor.detach().contiguous()
    wire = _wire_tag(group, _USER, tag)

    def transfer() -> list[torch.Tensor]:
        channel.send(_bytes(data), peer, wire, _seconds(group.timeout))
        return [tensor]

    work = HoraWork(group.names.next(f"send_to{dst}_tag{tag}", data), None, transfer,
                    group.timeout)
    _lanes.run(("send", peer, wire), lambda: complete(work))
    return work


def recv(group: HoraProcessGroup, tensor: torch.Tensor, src: int | None, tag: int) -> HoraWork:
    """``irecv``: one message from group rank ``src`` (None: any rank) into ``tensor``; the
    work's ``source_rank()`` tells the sender."""
    channel = _the_channel()
    peer = -1 if src is None else _peer(group, src, "recv")
    buf = writable_view(tensor)
    wire = _wire_tag(group, _USER, tag)

    def transfer() -> list[torch.Tensor]:
        sender = channel.recv(_bytes(buf), peer, wire, _seconds(group.timeout))
        if sender not in group.global_ranks:
            raise RuntimeError(f"hora backend: recv got a message from rank {sender}, which is "
                               "not in this group")
        work.source = group.global_ranks.index(sender)
        write_back([tensor], [buf])
        return [tensor]

    what = "recv_any" if src is None else f"recv_from{src}"
    work = HoraWork(group.names.next(f"{what}_tag{tag}", buf), None, transfer, group.timeout)
    _lanes.run(("recv", peer, wire), lambda: complete(work))
    return work


class _BarrierCount:
    """How many monitored barriers each group has run on this rank: part of their wire tag, so
    that a late arrival at one barrier is never taken for the next."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: collections.Counter[int] = collections.Counter()

    def next(self, key: int) -> int:
        with self._lock:
            self._counts[key] += 1
            return self._counts[key]


_barriers = _BarrierCount()


def monitored_barrier(group: HoraProcessGroup, timeout: datetime.timedelta | float,
                      wait_all_ranks: bool) -> None:
    """gloo's ``monitored_barrier``: every rank checks in with group rank 0, which waits for each
    in rank order within ``timeout`` and then lets them all go. Rank 0 raises naming the first
    rank that did not arrive (every such rank with ``wait_all_ranks``, each waited for the whole
    timeout); the others raise when rank 0 does not let them go in time."""
    channel = _the_channel()
    if not isinstance(timeout, datetime.timedelta):
        timeout = datetime.timedelta(seconds=float(timeout))
    ms = round(timeout.total_seconds() * 1000)
    wire = _wire_tag(group, _MONITORED, _barriers.next(_group_key(group)))
    token = torch.zeros(1, dtype=torch.uint8)
    if group.rank() != 0:
        root = group.global_rank(0)
        try:
            channel.send(_bytes(token), root, wire, _seconds(timeout))
            channel.recv(_bytes(token), root, wire, _seconds(timeout))
        except Exception as exc:
            raise RuntimeError(
                f"Rank {group.rank()} successfully reached monitoredBarrier, but received errors "
                f"while waiting for send/recv from rank 0. Please check rank 0 logs for faulty "
                f"rank. ({exc})") from exc
        return
    start = time.monotonic()
    failed = []
    for r in range(1, group.size()):
        remaining = timeout.total_seconds() - (time.monotonic() - start)
        if not wait_all_ranks and remaining <= 0:
            raise HoraTimeoutError(
                f"[Rank 0]: Rank 0 timed out in monitoredBarrier after {ms} ms; ranks "
                f"1-{r - 1} had arrived" if r > 1 else
                f"[Rank 0]: Rank 0 timed out in monitoredBarrier after {ms} ms")
        try:
            channel.recv(_bytes(token), group.global_rank(r), wire,
                         timeout.total_seconds() if wait_all_ranks else remaining)
        except HoraTimeoutError:
            if not wait_all_ranks:
                raise HoraTimeoutError(
                    f"[Rank 0]: Rank {r} failed to pass monitoredBarrier in {ms} ms") from None
            failed.append(r)
    if failed:
        raise HoraTimeoutError(f"[Rank 0]: Ranks {', '.join(map(str, failed))} failed to pass "
                               f"monitoredBarrier in {ms} ms")
    for r in range(1, group.size()):
        channel.send(_bytes(token), group.global_rank(r), wire, _seconds(timeout))
