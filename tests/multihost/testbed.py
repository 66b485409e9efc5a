"""A test bed of "hosts" on this machine: network namespaces joined by a bridge, each with its own
host name, address and sshd, so that ``horarun -H 10.213.0.2:2,10.213.0.3:2`` reaches them over
ssh exactly as it reaches real machines.

Layout of bed N of process PID (every name starts with ``hrmh<PID>-<N>-``, so parallel runs and
beds never collide and a later run can tell a dead run's leftovers by their PID)::

    hrmh<PID>-<N>-net     the bridge br0, and one veth end per host (v0, v1, ...; vl for the
                          launcher)
    hrmh<PID>-<N>-h0 ...  one namespace per host: lo, eth0 = 10.213.0.<2+i>/24, an sshd on that
                          address in a UTS namespace of its own (host name hostA, hostB, ...)
    hrmh<PID>-<N>-l       the launcher's namespace: eth0 = 10.213.0.1/24 (or another name, e.g.
                          ``hrbr0``: launch nodes and hosts rarely share interface names);
                          horarun runs here, under this machine's host name, which the bed
                          resolves to that address (as it does the name ``launcher``)

Nothing is created in the root namespace: every link is made inside the bed's namespaces, and the
addresses exist only there. Names resolve inside the bed (not on this machine) through
``/etc/netns/<namespace>/hosts``, which ``ip netns exec`` mounts over ``/etc/hosts`` for the
processes it starts (the sshds, hence every rank, and the launcher); ``/etc/netns/<launcher
namespace>/ssh/ssh_config`` likewise keeps the hosts' keys in the bed's own ``known_hosts``, so
the user's ``~/.ssh/known_hosts`` is left as it was.

Each host's link may be shaped with a token bucket (``tc qdisc ... tbf``) in both directions, so
a host sends and receives at most that rate (``rate="1gbit"``).

ssh uses the key of ``tests/ssh_setup.sh`` (``~/.ssh/hora_test_ed25519``, run the script first)
and the machine's host keys, as the sshd on 127.0.0.1 does.

Clean-up always happens: on leaving the context, at interpreter exit, and, for beds of runs that
were killed, at the start of the next bed (``sweep_stale``): every process in the namespaces is
killed, then the namespaces (and the links in them) and the ``/etc/netns`` entries are deleted.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

PREFIX = "hrmh"
SUBNET = "10.213.0"
LAUNCHER_ADDRESS = f"{SUBNET}.1"
SSH_PORT = 22
KEY = os.environ.get("HORA_TEST_SSH_KEY", os.path.expanduser("~/.ssh/hora_test_ed25519"))
SSHD = "/usr/sbin/sshd"
HOST_KEY = "/etc/ssh/ssh_host_ed25519_key"
NETNS_ETC = "/etc/netns"
_NAMED = re.compile(rf"{PREFIX}(\d+)-")
_serial = itertools.count()


@dataclass
class Host:
    """One host of the bed: its namespace, host name, address and the veth end on the bridge."""

    namespace: str
    hostname: str
    address: str
    bridge_port: str
    sshd: subprocess.Popen | None = None


@dataclass
class TestBed:
    """A bed of hosts; use :func:`testbed` to make one (it cleans up)."""

    __test__ = False  # not a pytest test class

    tag: str
    hosts: list[Host]
    launcher_namespace: str
    bridge_namespace: str
    workdir: str
    launcher_device: str = "eth0"
    _namespaces: list[str] = field(default_factory=list)

    def host_list(self, slots: int, count: int | None = None, names: bool = False) -> str:
        """``-H`` for horarun: ``10.213.0.2:2,10.213.0.3:2`` (host names with ``names``)."""
        chosen = self.hosts[:count] if count is not None else self.hosts
        return ",".join(f"{h.hostname if names else h.address}:{slots}" for h in chosen)

    def ssh_args(self) -> list[str]:
        """horarun's ssh flags for the bed: port and key."""
        return ["-p", str(SSH_PORT), "-i", KEY]

    def in_launcher(self, argv: Sequence[str]) -> list[str]:
        """``argv`` run in the launcher's namespace."""
        return ["ip", "netns", "exec", self.launcher_namespace, *argv]

    def in_host(self, index: int, argv: Sequence[str]) -> list[str]:
        """``argv`` run on host ``index`` (its network namespace; not its host name)."""
        return ["ip", "netns", "exec", self.hosts[index].namespace, *argv]

    def set_link(self, index: int, up: bool) -> None:
        """Cut (``up=False``) or restore host ``index``'s link at the bridge."""
        _ip("-n", self.bridge_namespace, "link", "set", self.hosts[index].bridge_port,
            "up" if up else "down")

    def shape(self, index: int, rate: str | None) -> None:
        """Limit host ``index``'s link to ``rate`` (tc syntax, e.g. ``1gbit``) both ways, or lift
        the limit (``None``)."""
        host = self.hosts[index]
        for ns, dev in ((host.namespace, "eth0"), (self.bridge_namespace, host.bridge_port)):
            _run(["tc", "-n", ns, "qdisc", "del", "dev", dev, "root"], check=False)
            if rate is not None:
                _run(["tc", "-n", ns, "qdisc", "add", "dev", dev, "root", "tbf", "rate", rate,
                      "burst", _burst(rate), "latency", "50ms"])

    def sent_bytes(self, index: int, device: str) -> int:
        """Bytes sent so far on ``device`` (``lo`` or ``eth0``) of host ``index``: on ``lo``
        travels whatever its processes send each other over TCP."""
        out = _run(["ip", "-n", self.hosts[index].namespace, "-j", "-s", "link", "show", "dev",
                    device]).stdout
        return int(json.loads(out)[0]["stats64"]["tx"]["bytes"])


def unavailable() -> str | None:
    """Why this machine cannot make a bed, or None when it can."""
    if os.geteuid() != 0:
        return "the multi-host test bed needs root (network namespaces, veth, sshd)"
    for tool in ("ip", "tc", "unshare", "ssh"):
        if shutil.which(tool) is None:
            return f"the multi-host test bed needs {tool!r}, which is not installed"
    if not os.path.exists(SSHD):
        return f"no {SSHD} (tests/ssh_setup.sh installs it)"
    if not os.path.exists(KEY) or not os.path.exists(HOST_KEY):
        return f"no ssh key {KEY} or host key {HOST_KEY} (run tests/ssh_setup.sh)"
    probe = f"{PREFIX}{os.getpid()}-probe"
    made = _run(["ip", "netns", "add", probe], check=False)
    if made.returncode != 0:
        return f"cannot make a network namespace here: {made.stderr.strip()}"
    _run(["ip", "netns", "del", probe], check=False)
    return None


@contextlib.contextmanager
def testbed(count: int = 2, rate: str | None = None,
            launcher_device: str = "eth0") -> Iterator[TestBed]:
    """A bed of ``count`` hosts (``hostA``, ``hostB``, ...), each link shaped to ``rate`` when
    given, the launcher's interface named ``launcher_device``; torn down on exit, whatever
    happens.

    Raises:
        RuntimeError: a host's sshd does not come up.
        subprocess.CalledProcessError: an ``ip`` or ``tc`` command fails.
    """
    sweep_stale()
    bed = _plan(count)
    bed.launcher_device = launcher_device

    def at_exit() -> None:
        teardown(bed)

    atexit.register(at_exit)
    try:
        _build(bed)
        for i in range(count):
            if rate is not None:
                bed.shape(i, rate)
        yield bed
    finally:
        teardown(bed)
        atexit.unregister(at_exit)


def _plan(count: int) -> TestBed:
    tag = f"{PREFIX}{os.getpid()}-{next(_serial)}"
    hosts = [Host(f"{tag}-h{i}", f"host{chr(ord('A') + i)}", f"{SUBNET}.{2 + i}", f"v{i}")
             for i in range(count)]
    workdir = tempfile.mkdtemp(prefix=f"{tag}-")
    return TestBed(tag, hosts, f"{tag}-l", f"{tag}-net", workdir)


def _build(bed: TestBed) -> None:
    _add_namespace(bed, bed.bridge_namespace)
    _ip("-n", bed.bridge_namespace, "link", "add", "br0", "type", "bridge")
    _ip("-n", bed.bridge_namespace, "link", "set", "br0", "up")
    _join(bed, bed.launcher_namespace, "vl", LAUNCHER_ADDRESS, bed.launcher_device)
    for host in bed.hosts:
        _join(bed, host.namespace, host.bridge_port, host.address)
    _write_hosts_files(bed)
    for host in bed.hosts:
        host.sshd = _start_sshd(bed, host)
    for host in bed.hosts:
        _await_ssh(bed, host)


def _add_namespace(bed: TestBed, name: str) -> None:
    _ip("netns", "add", name)
    bed._namespaces.append(name)
    _ip("-n", name, "link", "set", "lo", "up")


def _join(bed: TestBed, namespace: str, port: str, address: str, device: str = "eth0") -> None:
    """A namespace with ``device`` at ``address``, its veth peer ``port`` on the bridge."""
    _add_namespace(bed, namespace)
    _ip("-n", bed.bridge_namespace, "link", "add", port, "type", "veth", "peer", "name", device,
        "netns", namespace)
    _ip("-n", bed.bridge_namespace, "link", "set", port, "master", "br0")
    _ip("-n", bed.bridge_namespace, "link", "set", port, "up")
    _ip("-n", namespace, "addr", "add", f"{address}/24", "dev", device)
    _ip("-n", namespace, "link", "set", device, "up")


def _write_hosts_files(bed: TestBed) -> None:
    # The launcher's namespace keeps this machine's host name (it has no UTS namespace of its own);
    # like a launch node's name on a real network, it resolves to the launcher's address, which
    # is how MPICH's proxies on the hosts reach mpirun.
    launcher_names = ["launcher"]
    if socket.gethostname() not in ("localhost", "launcher", *[h.hostname for h in bed.hosts]):
        launcher_names.append(socket.gethostname())
    lines = ["127.0.0.1 localhost", f"{LAUNCHER_ADDRESS} {' '.join(launcher_names)}"]
    lines += [f"{h.address} {h.hostname}" for h in bed.hosts]
    for ns in [bed.launcher_namespace] + [h.namespace for h in bed.hosts]:
        os.makedirs(os.path.join(NETNS_ETC, ns), exist_ok=True)
        with open(os.path.join(NETNS_ETC, ns, "hosts"), "w") as f:
            f.write("\n".join(lines) + "\n")
    # The launcher's ssh keeps the hosts' keys in the bed's own known_hosts, not the user's.
    ssh_dir = os.path.join(NETNS_ETC, bed.launcher_namespace, "ssh")
    os.makedirs(ssh_dir, exist_ok=True)
    with open(os.path.join(ssh_dir, "ssh_config"), "w") as f:
        f.write(f"Host *\n    UserKnownHostsFile {bed.workdir}/known_hosts\n"
                "    GlobalKnownHostsFile /dev/null\n    LogLevel ERROR\n")


def _start_sshd(bed: TestBed, host: Host) -> subprocess.Popen:
    config = os.path.join(bed.workdir, f"sshd_{host.hostname}.conf")
    with open(config, "w") as f:
        f.write("\n".join([
            f"ListenAddress {host.address}", f"Port {SSH_PORT}", f"HostKey {HOST_KEY}",
            f"PidFile {bed.workdir}/sshd_{host.hostname}.pid", "PasswordAuthentication no",
            "KbdInteractiveAuthentication no", "PubkeyAuthentication yes",
            "PermitRootLogin prohibit-password", "UsePAM no", "MaxStartups 64:30:128",
            "MaxSessions 64", "LogLevel ERROR", "",
        ]))
    os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
    script = f"hostname {host.hostname} && exec {SSHD} -D -e -f {config}"
    with open(os.path.join(bed.workdir, f"sshd_{host.hostname}.log"), "w") as log:
        return subprocess.Popen(["ip", "netns", "exec", host.namespace, "unshare", "--uts",
                                 "sh", "-c", script], stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)


def _await_ssh(bed: TestBed, host: Host, within: float = 15.0) -> None:
    """Waits until ``ssh`` from the launcher's namespace into ``host`` works and reports the
    host's own name."""
    deadline = time.monotonic() + within
    last = ""
    while time.monotonic() < deadline:
        if host.sshd is not None and host.sshd.poll() is not None:
            break
        probe = _run(bed.in_launcher(["ssh", "-o", "BatchMode=yes", "-o",
                                      "StrictHostKeyChecking=accept-new", "-o",
                                      "ConnectTimeout=3", "-p", str(SSH_PORT), "-i", KEY,
                                      host.address, "hostname"]), check=False)
        if probe.returncode == 0 and probe.stdout.strip() == host.hostname:
            return
        last = probe.stderr.strip() or probe.stdout.strip()
        time.sleep(0.1)
    with open(os.path.join(bed.workdir, f"sshd_{host.hostname}.log")) as f:
        log = f.read()
    raise RuntimeError(f"sshd of {host.hostname} ({host.address}) does not answer: {last}; "
                       f"its log: {log.strip()}")


def teardown(bed: TestBed) -> None:
    """Kills every process in the bed's namespaces, deletes them (and their links), the
    ``/etc/netns`` entries and the work directory. Safe to call twice."""
    for host in bed.hosts:
        if host.sshd is not None and host.sshd.poll() is None:
            _kill_group(host.sshd.pid)
    _remove_namespaces(bed._namespaces)
    for host in bed.hosts:
        if host.sshd is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                host.sshd.wait(timeout=5)
    bed._namespaces.clear()
    shutil.rmtree(bed.workdir, ignore_errors=True)
    _remove_netns_etc_if_empty()


def sweep_stale() -> list[str]:
    """Removes the namespaces and ``/etc/netns`` entries of beds whose process is gone (a killed
    run); returns the names removed."""
    stale = [ns for ns in _bed_namespaces() if not _alive(_owner(ns))]
    _remove_namespaces(stale)
    if os.path.isdir(NETNS_ETC):
        for entry in os.listdir(NETNS_ETC):
            if _owner(entry) is not None and not _alive(_owner(entry)):
                shutil.rmtree(os.path.join(NETNS_ETC, entry), ignore_errors=True)
    _remove_netns_etc_if_empty()
    return stale


def _remove_netns_etc_if_empty() -> None:
    with contextlib.suppress(OSError):
        os.rmdir(NETNS_ETC)  # fails unless empty: other beds' or the machine's entries stay


def leftovers(tag: str) -> list[str]:
    """Namespaces and ``/etc/netns`` entries whose name starts with ``tag`` (should be none once
    a bed is torn down)."""
    found = [ns for ns in _bed_namespaces() if ns.startswith(tag)]
    if os.path.isdir(NETNS_ETC):
        found += [os.path.join(NETNS_ETC, e) for e in os.listdir(NETNS_ETC) if e.startswith(tag)]
    return found


def _remove_namespaces(namespaces: Sequence[str]) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        pids = [pid for ns in namespaces for pid in _netns_pids(ns)]
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        _await_gone(pids, 3.0)
    for ns in namespaces:
        _run(["ip", "netns", "del", ns], check=False)
        shutil.rmtree(os.path.join(NETNS_ETC, ns), ignore_errors=True)


def _await_gone(pids: Sequence[int], within: float) -> None:
    deadline = time.monotonic() + within
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def _bed_namespaces() -> list[str]:
    out = _run(["ip", "netns", "list"], check=False).stdout
    return [line.split()[0] for line in out.splitlines()
            if line.strip() and line.startswith(PREFIX)]


def _owner(name: str) -> int | None:
    match = _NAMED.match(name)
    return int(match.group(1)) if match else None


def _alive(pid: int | None) -> bool:
    if pid is None:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _netns_pids(namespace: str) -> list[int]:
    out = _run(["ip", "netns", "pids", namespace], check=False).stdout
    return [int(p) for p in out.split() if p.isdigit() and int(p) != os.getpid()]


def _burst(rate: str) -> str:
    """A token bucket of about 4 ms at ``rate`` (at least 64 KiB), enough for the timer's tick."""
    bits = rate_bits(rate)
    return f"{max(64 << 10, bits // 8 // 250)}b"


def rate_bits(rate: str) -> int:
    """Bits per second of a tc rate such as ``1gbit``."""
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([kmg]?)bit", rate.lower())
    if not match:
        raise ValueError(f"rate {rate!r}: expected e.g. 100mbit, 1gbit, 10gbit")
    scale = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9}[match.group(2)]
    return int(float(match.group(1)) * scale)


def _ip(*args: str) -> None:
    _run(["ip", *args])


def _run(argv: Sequence[str], check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(list(argv), capture_output=True, text=True, timeout=60, check=False)
    if check and result.returncode != 0:
        raise subprocess.CalledProcessError(result.returncode, list(argv), result.stdout,
                                            result.stderr)
    return result

