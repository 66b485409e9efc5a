"""torch.distributed's ``env://`` rendezvous for jobs that ``horarun``, ``mpirun`` or ``srun``
started: ``init_process_group(...)`` with no other argument.

torch's ``env://`` handler needs RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT. When any of
them is missing (and not given in the URL), this handler takes rank and size from Hora (starting
Hora with dynamic process sets if it is not running yet): rank 0 serves a torch ``TCPStore`` on a
free port of its Hora listen address and sends the address to every rank with Hora's
``broadcast_object``. When all four are set (torchrun), torch's own handler runs unchanged.
"""

from __future__ import annotations

import datetime
import os
import socket
import sys
from collections.abc import Iterator
from typing import Any, Callable
from urllib.parse import parse_qs, urlparse

import torch.distributed as dist
import torch.distributed.rendezvous  # noqa: F401  (the module, not the function of that name)

import hora
from hora.common import objects
from hora.runner import rank_discovery

_TORCH_VARS = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def _needs_hora(url: str) -> bool:
    query = parse_qs(urlparse(url).query)
    missing = [v for v in _TORCH_VARS if not os.environ.get(v)]
    missing = [v for v in missing if v.lower() not in query]
    return bool(missing)


def _advertised_host() -> str:
    """The address rank 0's store is reached at: Hora's listen address, else this host's."""
    info = rank_discovery.discover()
    host = rank_discovery.listen_host(info.store_host)
    return host or socket.gethostbyname(socket.gethostname())


def hora_store(timeout: datetime.timedelta) -> tuple[dist.Store, int, int]:
    """A torch TCPStore served by Hora rank 0, with Hora's rank and size (collective)."""
    if not hora.is_initialized():
        hora.init(process_sets="dynamic")
    rank, size = hora.rank(), hora.size()
    server: dist.TCPStore | None = None
    address: tuple[str, int] | None = None
    if rank == 0:
        host = _advertised_host()
        server = dist.TCPStore(host, 0, size, True, timeout=timeout, wait_for_workers=False)
        address = (host, int(server.port))
    address = objects.broadcast_object(address, root_rank=0, name="torchdist.store_address")
    if server is not None:
        return server, rank, size
    host, port = address
    return dist.TCPStore(host, port, size, False, timeout=timeout), rank, size


def _wrap(original: Callable[..., Iterator[Any]]) -> Callable[..., Iterator[Any]]:
    def handler(url: str, timeout: datetime.timedelta = dist.default_pg_timeout,
                **kwargs: Any) -> Iterator[Any]:
        if not _needs_hora(url):
            yield from original(url, timeout=timeout, **kwargs)
            return
        yield hora_store(timeout)
        raise RuntimeError("Unable to perform re-rendezvous using env:// method")

    handler.__wrapped__ = original  # type: ignore[attr-defined]
    return handler


def install() -> None:
    """Put the Hora fallback in front of torch's ``env://`` handler (once).

    torch offers no public way to replace a registered handler, so the entry of its handler
    table is swapped; every URL that has what torch's handler needs still goes to it.
    """
    handlers = sys.modules["torch.distributed.rendezvous"]._rendezvous_handlers
    current = handlers.get("env")
    if current is None or hasattr(current, "__wrapped__"):
        return
    handlers["env"] = _wrap(current)
