"""This machine's network addresses: interface addresses, and the local address the kernel would
use to reach a given address. Nothing here sends a packet (a UDP socket is connected, never
written to, and its local address read back).
"""

from __future__ import annotations

import array
import fcntl
import socket
import struct

_SIOCGIFADDR = 0x8915


def interface_addresses() -> dict[str, str]:
    """IPv4 address of every interface that has one: ``{"lo": "127.0.0.1", "eth0": ...}``."""
    result: dict[str, str] = {}
    try:
        names = [name for _, name in socket.if_nameindex()]
    except OSError:
        return result
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for name in names:
            request = array.array("B", struct.pack("256s", name.encode()[:15]))
            try:
                fcntl.ioctl(s.fileno(), _SIOCGIFADDR, request, True)
            except OSError:
                continue  # no IPv4 address on this interface
            result[name] = socket.inet_ntoa(request.tobytes()[20:24])
    return result


def route_via_socket(address: str) -> str:
    """The source address the kernel picks for ``address`` (connect() on UDP sends nothing).

    Raises:
        OSError: no route to ``address``.
    """
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as s:
        s.connect((address, 9))
        return str(s.getsockname()[0])
