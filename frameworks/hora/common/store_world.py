"""The world of a job that another program started: rank and size as that program says, and the
rest agreed through the key-value store it gave every rank.

Trainers and cluster engines (Lightning, Ray Train, DeepSpeed, Accelerate, ``mp.spawn`` with a
``file://`` or ``tcp://`` rendezvous) start the processes themselves and hand each one a rank, a
world size and a store (torch.distributed's c10d store). Hora takes those as given, whatever its
own environment says, and agrees the rest through the store:

1. every rank counts itself in (``add``): the count tells which round of the store this is, so a
   store reused by a later init (after ``destroy_process_group``) never mixes the two;
2. every rank publishes its host identity (``_core.host_identity``: boot id, host name, network
   namespace) and host name;
3. rank 0 reads them all and decides: local and cross coordinates for every rank, where its
   rendezvous store listens (127.0.0.1 when every rank shares this machine's loopback, so no
   secret is needed), the secret (see below), and starts Hora's store server there;
4. rank 0 publishes one record with all of it, or the reason the job may not start; every rank
   reads it and starts the engine, or raises that reason.

The secret: ranks on one machine listen on the loopback and need none. Across machines every
rank takes ``HORA_SECRET`` / ``HORA_SECRET_FILE`` from its environment; or, with
``HORA_SECRET_THROUGH_STORE=1``, rank 0 makes a random one and hands it out through the store,
which is then exactly as safe as that store (which gloo trusts in the same way). With neither,
rank 0 refuses for every rank, naming the program that started the job and the line that fixes it.
"""

from __future__ import annotations

import dataclasses
import json
import secrets
import socket
import time
from typing import Any, Protocol

from hora import _core
from hora.runner import rank_discovery

PREFIX = "hora/"


class KeyValue(Protocol):
    """What the rendezvous needs of a store; torch's c10d stores have these methods."""

    def set(self, key: str, value: Any) -> None:
        """Store ``value`` (bytes or str) under ``key``."""

    def get(self, key: str) -> bytes:
        """The value under ``key`` (it is known to be there)."""

    def add(self, key: str, amount: int) -> int:
        """Add to the integer under ``key`` (0 when new) and return the sum."""

    def check(self, keys: list[str]) -> bool:
        """True when every key is there."""


@dataclasses.dataclass
class World:
    """What the rendezvous gives one rank: where it sits, and the server rank 0 keeps."""

    info: rank_discovery.RankInfo
    server: Any = None  # rank 0: the hora._core.StoreServer to keep while the engine runs


def _wait(store: KeyValue, keys: list[str], deadline: float, what: str) -> None:
    """Wait for ``keys``, polling ``check`` (it never blocks), up to ``deadline``.

    Raises:
        HoraTimeoutError: naming the keys still missing.
    """
    from hora.errors import HoraTimeoutError

    pause = 0.001
    while not store.check(keys):
        if time.monotonic() >= deadline:
            missing = [k for k in keys if not store.check([k])]
            raise HoraTimeoutError(f"{what}: still missing {', '.join(missing[:8])}"
                                   f"{' ...' if len(missing) > 8 else ''}")
        time.sleep(pause)
        pause = min(pause * 2, 0.05)


def coordinates(identities: list[str]) -> list[tuple[int, int, int, int]]:
    """(local_rank, local_size, cross_rank, cross_size) of every rank, ranks grouped into hosts
    by equal identity, hosts ordered by their lowest rank (as horarun numbers them)."""
    hosts: dict[str, list[int]] = {}
    for rank, identity in enumerate(identities):
        hosts.setdefault(identity, []).append(rank)
    order = list(hosts)
    result: list[tuple[int, int, int, int]] = []
    for identity in identities:
        members = hosts[identity]
        local_rank = members.index(len(result))
        with_slot = [h for h in order if len(hosts[h]) > local_rank]
        result.append((local_rank, len(members), with_slot.index(identity), len(with_slot)))
    return result


def _decide(identities: list[str], names: list[str], store_host: str,
            launcher: str) -> tuple[dict[str, Any], Any]:
    """Rank 0: the record every rank reads, and the store server it started (None on error)."""
    one_machine = len(set(identities)) == 1
    coords = coordinates(identities)
    host = "127.0.0.1" if one_machine else store_host
    listen = rank_discovery.listen_host(host)
    if not listen and not one_machine:
        listen = socket.gethostbyname(socket.gethostname())
    if not one_machine and (not listen or rank_discovery.is_loopback(listen)):
        return {"error": (
            f"{launcher}: the ranks run on {len(set(identities))} machines, but rank 0 finds no "
            f"address of its own that the others can reach (it resolves to {listen or 'nothing'}"
            "); set HORA_IFACE to the network interface (or address) the ranks share")}, None
    secret = ""
    if not rank_discovery.is_loopback(listen) and rank_discovery.env_flag("SECRET_THROUGH_STORE"):
        secret = secrets.token_hex(32)
    info = rank_discovery.RankInfo(0, len(identities), *coords[0], store_host=listen,
                              secret=secret or rank_discovery.env_secret(), source=launcher)
    try:
        rank_discovery.checked_secret(info, listen, fix=rank_discovery.secret_fix(launcher, store=True))
    except ValueError as exc:
        return {"error": str(exc)}, None
    server = _core.StoreServer(listen, 0, info.secret)
    record = {"host": listen, "port": server.port, "coords": coords, "names": names,
              "secret": secret}
    return record, server


def rendezvous(store: KeyValue, rank: int, size: int, *, store_host: str = "",
               launcher: str | None = None, timeout: float | None = None) -> World:
    """This rank's place in a job of ``size`` ranks whose ranks share ``store`` (collective).

    Args:
        store: the key-value store every rank of the job was given.
        rank, size: this rank and the job size, as the program that started the job says.
        store_host: the address ``store`` is served at, when known (ranks on several machines
            listen on the address that reaches it).
        launcher: who started the job, for messages (default: ``rank_discovery.started_by()``).
        timeout: seconds to wait for every rank (default: HORA_START_TIMEOUT).

    Raises:
        ValueError: the job may not start (no secret for a job across machines); the same
            message on every rank.
        HoraTimeoutError: not every rank arrived in time.
    """
    launcher = launcher or rank_discovery.started_by()
    if size == 1:
        return World(rank_discovery.RankInfo(hostname=socket.gethostname(), source=launcher))
    if timeout is None:
        timeout = float(_core.lookup_env("START_TIMEOUT") or 30)
    deadline = time.monotonic() + timeout
    arrival = int(store.add(PREFIX + "arrivals", 1))
    prefix = f"{PREFIX}{(arrival - 1) // size}/"
    name = socket.gethostname()
    store.set(f"{prefix}host/{rank}", json.dumps([_core.host_identity(), name]))
    server = None
    what = (f"{launcher}: Hora's rendezvous through the store of rank {rank} of {size} did not "
            f"complete within {timeout:g} s (HORA_START_TIMEOUT)")
    if rank == 0:
        keys = [f"{prefix}host/{r}" for r in range(size)]
        _wait(store, keys, deadline, what)
        hosts = [json.loads(store.get(k)) for k in keys]
        record, server = _decide([h[0] for h in hosts], [h[1] for h in hosts], store_host,
                                 launcher)
        store.set(prefix + "world", json.dumps(record))
    else:
        _wait(store, [prefix + "world"], deadline, what)
        record = json.loads(store.get(prefix + "world"))
    if "error" in record:
        raise ValueError(record["error"])
    local_rank, local_size, cross_rank, cross_size = record["coords"][rank]
    info = rank_discovery.RankInfo(
        rank, size, local_rank, local_size, cross_rank, cross_size,
        store_host=record["host"], store_port=int(record["port"]),
        secret=record["secret"] or rank_discovery.env_secret(), hostname=name, source=launcher,
        store_served_by_rank0=True,
    )
    return World(info, server)
