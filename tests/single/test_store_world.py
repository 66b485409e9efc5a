"""A job's world agreed through a store that another program gave its ranks
(hora.common.store_world): ranks as threads over an in-memory store, no engine started."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from hora import _core
from hora.common import netaddr, store_world
from hora.errors import HoraTimeoutError


class MemoryStore:
    """The part of a c10d store the rendezvous uses, shared by threads."""

    def __init__(self) -> None:
        self._data: dict[str, Any] = {}
        self._lock = threading.Lock()

    def set(self, key: str, value: Any) -> None:
        with self._lock:
            self._data[key] = value if isinstance(value, bytes) else str(value).encode()

    def get(self, key: str) -> bytes:
        with self._lock:
            return self._data[key]

    def add(self, key: str, amount: int) -> int:
        with self._lock:
            value = int(self._data.get(key, b"0")) + amount
            self._data[key] = str(value).encode()
            return value

    def check(self, keys: list[str]) -> bool:
        with self._lock:
            return all(k in self._data for k in keys)


def run_ranks(size: int, body: Callable[[int], Any]) -> list[Any]:
    """``body(rank)`` on one thread per rank; each rank's result or exception."""
    results: list[Any] = [None] * size

    def run(rank: int) -> None:
        try:
            results[rank] = body(rank)
        except Exception as exc:  # noqa: BLE001 (the test inspects it)
            results[rank] = exc

    threads = [threading.Thread(target=run, args=(r,)) for r in range(size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return results


@pytest.fixture
def machines(monkeypatch: pytest.MonkeyPatch) -> Callable[[list[int]], None]:
    """``machines([0, 0, 1])``: the rank running on each thread reports that machine's identity."""
    def place(of_rank: list[int]) -> None:
        local = threading.local()
        real = store_world.rendezvous

        def rendezvous(store: Any, rank: int, size: int, **kw: Any) -> Any:
            local.rank = rank
            return real(store, rank, size, **kw)

        monkeypatch.setattr(store_world, "rendezvous", rendezvous)
        monkeypatch.setattr(_core, "host_identity",
                            lambda: f"machine-{of_rank[getattr(local, 'rank', 0)]}")

    return place


@pytest.fixture(autouse=True)
def no_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HORA_SECRET", "HORA_SECRET_FILE", "HORA_INSECURE", "HORA_IFACE",
                 "HORA_SECRET_THROUGH_STORE", "HOROVOD_SECRET"):
        monkeypatch.delenv(name, raising=False)


def stop_servers(worlds: list[Any]) -> None:
    for world in worlds:
        if getattr(world, "server", None) is not None:
            world.server.stop()


def test_coordinates_group_ranks_by_machine_in_rank_order() -> None:
    coords = store_world.coordinates(["a", "a", "b", "b", "a"])
    assert coords == [(0, 3, 0, 2), (1, 3, 0, 2), (0, 2, 1, 2), (1, 2, 1, 2), (2, 3, 0, 1)]


def test_ranks_on_one_machine_meet_on_the_loopback_without_a_secret() -> None:
    """Whatever address the trainer's store has (a Ray worker's is the node's address)."""
    store = MemoryStore()
    worlds = run_ranks(4, lambda r: store_world.rendezvous(store, r, 4, launcher="a test",
                                                           store_host="192.0.2.77"))
    try:
        assert not any(isinstance(w, Exception) for w in worlds), worlds
        infos = [w.info for w in worlds]
        assert [i.local_rank for i in infos] == [0, 1, 2, 3]
        assert {(i.local_size, i.cross_rank, i.cross_size) for i in infos} == {(4, 0, 1)}
        assert {(i.store_host, i.store_port, i.secret) for i in infos} == {
            ("127.0.0.1", worlds[0].server.port, "")}
        assert all(i.store_served_by_rank0 and i.source == "a test" for i in infos)
        assert [w.server is not None for w in worlds] == [True, False, False, False]
    finally:
        stop_servers(worlds)


def test_a_store_used_again_starts_a_fresh_round() -> None:
    store = MemoryStore()
    first = run_ranks(2, lambda r: store_world.rendezvous(store, r, 2))
    second = run_ranks(2, lambda r: store_world.rendezvous(store, r, 2))
    try:
        assert second[1].info.store_port == second[0].server.port != first[0].server.port
    finally:
        stop_servers(first + second)


def test_ranks_on_two_machines_without_a_secret_all_refuse_with_the_launcher_s_fix(
        machines: Callable[[list[int]], None]) -> None:
    machines([0, 1, 1])
    store = MemoryStore()
    errors = run_ranks(3, lambda r: store_world.rendezvous(store, r, 3, launcher="Ray Train",
                                                           store_host="192.0.2.77"))
    assert all(isinstance(e, ValueError) for e in errors), errors
    assert len({str(e) for e in errors}) == 1
    message = str(errors[0])
    assert message.startswith("Ray Train: rank 0 would listen on the non-loopback address")
    assert "'HORA_SECRET_THROUGH_STORE': '1'" in message


def non_loopback_address() -> str:
    addresses = [a for a in netaddr.interface_addresses().values() if not a.startswith("127.")]
    if not addresses:
        pytest.skip("this machine has no non-loopback IPv4 address")
    return addresses[0]


def test_a_secret_through_the_store_reaches_every_rank_when_asked_for(
        machines: Callable[[list[int]], None], monkeypatch: pytest.MonkeyPatch) -> None:
    address = non_loopback_address()
    monkeypatch.setenv("HORA_SECRET_THROUGH_STORE", "1")
    machines([0, 0, 1])
    store = MemoryStore()
    worlds = run_ranks(3, lambda r: store_world.rendezvous(store, r, 3, store_host=address))
    try:
        infos = [w.info for w in worlds]
        assert len({i.secret for i in infos}) == 1 and len(infos[0].secret) == 64
        assert {i.store_host for i in infos} == {address}
        assert [(i.local_rank, i.local_size, i.cross_rank) for i in infos] == [
            (0, 2, 0), (1, 2, 0), (0, 1, 1)]
    finally:
        stop_servers(worlds)


def test_a_secret_from_the_environment_is_used_across_machines(
        machines: Callable[[list[int]], None], monkeypatch: pytest.MonkeyPatch) -> None:
    address = non_loopback_address()
    monkeypatch.setenv("HORA_SECRET", "from-the-environment")
    machines([0, 1])
    store = MemoryStore()
    worlds = run_ranks(2, lambda r: store_world.rendezvous(store, r, 2, store_host=address))
    try:
        assert [w.info.secret for w in worlds] == ["from-the-environment"] * 2
        assert b"from-the-environment" not in b"".join(store._data.values())
    finally:
        stop_servers(worlds)


def test_a_rank_that_never_arrives_ends_the_wait_naming_it() -> None:
    store = MemoryStore()
    start = time.monotonic()
    with pytest.raises(HoraTimeoutError, match=r"did not complete within 0.5 s .*host/1"):
        store_world.rendezvous(store, 0, 2, timeout=0.5)
    assert time.monotonic() - start < 5


def test_a_job_of_one_needs_no_store() -> None:
    world = store_world.rendezvous(MemoryStore(), 0, 1)
    assert (world.info.size, world.info.store_host, world.server) == (1, "", None)
