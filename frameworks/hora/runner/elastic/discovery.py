"""Where elastic workers may run: a fixed host list, or what ``--host-discovery-script`` prints.

The script is run again at every poll; it prints one ``host[:slots]`` line per usable host (a host
without ``:slots`` gets ``--slots`` slots). A script that fails, hangs past its timeout or prints
a malformed line leaves the last good answer in place (with a message), so one bad poll does not
shrink the job.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable

from hora.runner.slots import HostSlots, parse_host_entry

SCRIPT_TIMEOUT_SECONDS = 10.0


def parse_discovery_output(text: str, default_slots: int | None) -> dict[str, int]:
    """``{host: slots}`` from the script's output, in the order printed.

    Raises:
        ValueError: a malformed line, or a host listed twice.
    """
    hosts: dict[str, int] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if ":" not in line and default_slots is not None:
            entry = HostSlots(line, default_slots)
        else:
            entry = parse_host_entry(line)
        if entry.hostname in hosts:
            raise ValueError(f"host {entry.hostname!r} is listed twice")
        hosts[entry.hostname] = entry.slots
    return hosts


class HostDiscovery:
    """Where workers may run, asked again at every poll (Horovod's
    ``horovod.runner.elastic.discovery.HostDiscovery``): subclasses implement
    ``find_available_hosts_and_slots``."""

    def find_available_hosts_and_slots(self) -> dict[str, int]:
        """``{host: slots}`` of the hosts usable now."""
        raise NotImplementedError

    def find(self) -> dict[str, int]:
        """The driver's name for :meth:`find_available_hosts_and_slots`."""
        return self.find_available_hosts_and_slots()


class FixedHosts(HostDiscovery):
    """The hosts of ``-H`` / ``--hostfile`` (or localhost): they never change."""

    def __init__(self, hosts: list[HostSlots]) -> None:
        self._hosts = {h.hostname: h.slots for h in hosts}

    def find_available_hosts_and_slots(self) -> dict[str, int]:
        return dict(self._hosts)


class ScriptHosts(HostDiscovery):
    """Runs the discovery script at each ``find()``."""

    def __init__(self, script: str, default_slots: int | None,
                 say: Callable[[str], None]) -> None:
        self._script = script
        self._slots = default_slots
        self._say = say
        self._last: dict[str, int] = {}
        self._complained = ""

    def find_available_hosts_and_slots(self) -> dict[str, int]:
        try:
            done = subprocess.run([self._script], capture_output=True, text=True,
                                  timeout=SCRIPT_TIMEOUT_SECONDS, check=False)
            if done.returncode != 0:
                raise ValueError(f"exited with {done.returncode}: {done.stderr.strip()[-200:]}")
            self._last = parse_discovery_output(done.stdout, self._slots)
            self._complained = ""
        except (OSError, ValueError, subprocess.TimeoutExpired) as exc:
            message = f"host discovery script {self._script!r} failed ({exc}); keeping the " \
                      "last list of hosts"
            if message != self._complained:
                self._say(message)
                self._complained = message
        return dict(self._last)
