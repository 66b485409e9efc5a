"""The driver's address as workers reach it (Horovod's ``horovod.runner.util.network``)."""

from __future__ import annotations

import socket
from collections.abc import Iterable

from hora.common import netaddr


def get_driver_ip(nics: Iterable[str] | None = None) -> str:
    """This host's address on the first of ``nics`` that has one; without ``nics``, the address
    this host's name resolves to (the loopback address when it does not resolve).

    Raises:
        ValueError: none of ``nics`` has an IPv4 address here.
    """
    addresses = netaddr.interface_addresses()
    names = sorted(nics or ())
    for name in names:
        if name in addresses:
            return addresses[name]
    if names:
        raise ValueError(f"none of the interfaces {names} has an IPv4 address here "
                         f"(interfaces: {', '.join(sorted(addresses)) or 'none'})")
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"
