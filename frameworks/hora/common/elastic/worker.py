"""The worker side of elastic mode: find this process's place in the newest generation.

``horarun`` in elastic mode starts each worker with ``HORA_ELASTIC=1``, ``HORA_ELASTIC_WORKER_ID``,
``HORA_RENDEZVOUS_ADDR``, ``HORA_ELASTIC_PORT`` and the job secret. ``init()`` then calls
:func:`join_next_generation` instead of reading fixed ranks from the environment. Every wait here
is bounded by ``HORA_ELASTIC_TIMEOUT`` seconds (default 600).
"""

from __future__ import annotations

import os
import threading
import time

from hora import _core
from hora.common.elastic import protocol
from hora.errors import HoraTimeoutError
from hora.runner import rank_discovery

_lock = threading.Lock()
_client: _core.StoreClient | None = None
_generation = -1  # the generation the engine was last initialised in
_CONNECT_SECONDS = 30.0


def _env(name: str, default: str = "") -> str:
    return os.environ.get("HORA_" + name, os.environ.get("HOROVOD_" + name, default))


def active() -> bool:
    """True in a process that ``horarun`` started as an elastic worker."""
    return _env("ELASTIC") == "1"


def worker_id() -> str:
    """The driver's name for this worker."""
    return _env("ELASTIC_WORKER_ID")


def current_generation() -> int:
    """The generation this worker last joined (-1 before the first)."""
    return _generation


def _timeout() -> float:
    try:
        return float(_env("ELASTIC_TIMEOUT", "600"))
    except ValueError:
        raise ValueError(f"HORA_ELASTIC_TIMEOUT must be a number of seconds, got "
                         f"{_env('ELASTIC_TIMEOUT')!r}") from None


def _store() -> _core.StoreClient:
    global _client
    if _client is None:
        host = _env("RENDEZVOUS_ADDR")
        port = _env("ELASTIC_PORT")
        if not host or not port.isdigit():
            raise ValueError("HORA_ELASTIC=1 needs HORA_RENDEZVOUS_ADDR and HORA_ELASTIC_PORT "
                             "(start elastic jobs with horarun --min-np/--host-discovery-script)")
        _client = _core.StoreClient(host, int(port), _env("SECRET"), _CONNECT_SECONDS)
    return _client


def published_generation() -> int:
    """The newest generation the driver published (this worker's own outside elastic mode)."""
    if not active():
        return _generation
    with _lock:
        value = _store().try_get(protocol.GENERATION_KEY)
    return -1 if value is None else int(value)


def report_formed() -> None:
    """Tell the driver that this worker's engine started in its generation."""
    if not active():
        return
    with _lock:
        _store().set(protocol.formed_key(worker_id()), str(_generation).encode())


def request_reset() -> None:
    """Tell the driver that this worker's generation failed (it then forms a new one)."""
    if not active() or _generation < 0:
        return
    with _lock:
        _store().add(protocol.reset_key(_generation), 1)


def join_next_generation() -> rank_discovery.RankInfo:
    """Wait for a generation newer than the last one joined that includes this worker; return
    this worker's coordinates in it (its store and secret included) and remember it.

    Raises:
        HoraTimeoutError: no such generation within ``HORA_ELASTIC_TIMEOUT`` seconds.
    """
    global _generation
    deadline = time.monotonic() + _timeout()
    after = _generation
    with _lock:
        store = _store()
        store.set(protocol.started_key(worker_id()), str(after).encode())
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise HoraTimeoutError(
                    f"elastic worker {worker_id()}: the driver formed no generation after "
                    f"{after} that includes this worker within HORA_ELASTIC_TIMEOUT="
                    f"{_timeout():g} s")
            newest = store.try_get(protocol.GENERATION_KEY)
            if newest is None or int(newest) <= after:
                try:
                    store.wait([protocol.ready_key(after + 1)], min(left, 5.0))
                except HoraTimeoutError:
                    pass  # look again: the driver may have skipped ahead
                continue
            generation = int(newest)
            store.wait([protocol.ready_key(generation)], left)
            data = store.try_get(protocol.worker_key(generation, worker_id()))
            if data is None:
                after = generation  # not part of it: the driver stops this worker or re-adds it
                continue
            break
    place = protocol.Assignment.decode(data)
    _generation = generation
    secret = protocol.generation_secret(_env("SECRET"), generation)
    return rank_discovery.RankInfo(
        place.rank, place.size, place.local_rank, place.local_size, place.cross_rank,
        place.cross_size, store_host=_env("RENDEZVOUS_ADDR"), store_port=place.store_port,
        serve_store=False, secret=secret, hostname=_env("HOSTNAME"), source="elastic")
