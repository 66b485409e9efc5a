"""Host lists, which hosts are this machine, and which local address routes to a remote host.

Nothing here sends a packet: local detection compares names and addresses with this machine's
interfaces, and the route to a host comes from the kernel's routing table (``ip -j route get``,
else a UDP socket that is connected but never written to, whose local address the kernel picks
from the routing table).
"""

from __future__ import annotations

import ipaddress
import json
import re
import socket
import subprocess

from hora.common.netaddr import interface_addresses, route_via_socket
from hora.runner.slots import HostSlots, check_unique, parse_host_entry


def parse_hostfile_text(text: str, source: str = "<hostfile>") -> list[HostSlots]:
    """Parse a hostfile: one host a line as ``host slots=N``, ``host:N`` or ``host`` (one slot).

    ``#`` starts a comment; blank lines are ignored.

    Raises:
        ValueError: a malformed line (naming ``source`` and the line number), or a host twice.
    """
    hosts: list[HostSlots] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        fields = re.sub(r"\s*=\s*", "=", line).split()
        try:
            if len(fields) == 1:
                hosts.append(parse_host_entry(fields[0]))
                continue
            options = dict(_option(f) for f in fields[1:])
            unknown = sorted(set(options) - {"slots", "max_slots", "max-slots"})
            if unknown:
                raise ValueError(f"unknown option {unknown[0]!r}")
            slots = options.get("slots", "1")
            if not slots.isdigit() or int(slots) < 1:
                raise ValueError(f"slots={slots!r} is not a positive integer")
            hosts.append(HostSlots(fields[0], int(slots)))
        except ValueError as exc:
            raise ValueError(f"{source}:{number}: {exc} in {raw.strip()!r}; expected "
                             "'host slots=N'") from None
    if not hosts:
        raise ValueError(f"{source}: no hosts listed")
    try:
        return check_unique(hosts)
    except ValueError as exc:
        raise ValueError(f"{source}: {exc}") from None


def _option(field: str) -> tuple[str, str]:
    key, sep, value = field.partition("=")
    if not sep:
        raise ValueError(f"expected key=value, got {field!r}")
    return key.strip(), value.strip()


def parse_hostfile(path: str) -> list[HostSlots]:
    """Read and parse the hostfile at ``path`` (see :func:`parse_hostfile_text`).

    Raises:
        ValueError: unreadable or malformed file.
    """
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as exc:
        raise ValueError(f"cannot read hostfile {path!r}: {exc.strerror}") from None
    return parse_hostfile_text(text, path)


def address_part(hostname: str) -> str:
    """The host of an ssh destination: ``user@[::1]`` -> ``::1``."""
    host = hostname.rsplit("@", 1)[-1]
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host


def _is_ip_literal(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def resolve(hostname: str) -> list[str]:
    """IP addresses of ``hostname`` (a literal resolves to itself; [] when it does not resolve)."""
    host = address_part(hostname)
    if _is_ip_literal(host):
        return [host]
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError):
        return []
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def is_local_host(hostname: str) -> bool:
    """True when ``hostname`` is this machine: localhost, 127.x, ::1, this host's name or FQDN,
    any address of a local interface, or a name resolving to one of those."""
    host = address_part(hostname)
    if host in ("localhost", socket.gethostname(), socket.getfqdn()):
        return True
    local = set(interface_addresses().values())
    for address in resolve(host):
        ip = ipaddress.ip_address(address)
        if ip.is_loopback or address in local:
            return True
    return False


def route_via_ip_command(address: str) -> tuple[str, str | None] | None:
    """(source address, device) of the route to ``address`` per ``ip -j route get``, or None."""
    try:
        out = subprocess.run(["ip", "-j", "route", "get", address], capture_output=True,
                             text=True, timeout=5, check=True).stdout
        routes = json.loads(out)
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
    if not routes or not routes[0].get("prefsrc"):
        return None
    return str(routes[0]["prefsrc"]), routes[0].get("dev")


def interface_of(address: str) -> str | None:
    """The local interface holding ``address``, or None."""
    for name, value in interface_addresses().items():
        if value == address:
            return name
    return None


def route_to(hostname: str) -> tuple[str, str | None]:
    """(this machine's address, interface) that reach ``hostname``, from the routing table.

    Raises:
        ValueError: ``hostname`` does not resolve, or there is no route to it.
    """
    addresses = resolve(hostname)
    if not addresses:
        raise ValueError(f"cannot resolve host {hostname!r}")
    address = addresses[0]
    found = route_via_ip_command(address)
    if found is not None:
        return found
    try:
        source = route_via_socket(address)
    except OSError as exc:
        raise ValueError(f"no route to host {hostname!r} ({address}): {exc}") from None
    return source, interface_of(source)



def free_port(bind_host: str = "127.0.0.1") -> int:
    """A TCP port free on ``bind_host`` now (the kernel's pick; another process may still take
    it before the rank that is told of it binds it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((bind_host, 0))
        return int(s.getsockname()[1])
