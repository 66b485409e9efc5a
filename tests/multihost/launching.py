"""Starting ``horarun`` in a bed's launcher namespace as a user would, and reading what it printed.

The launcher and every rank see the same files (namespaces share the file system), so the ranks
run the ``hora`` that the test process would import (``PYTHONPATH=frameworks`` for this checkout,
or an installed wheel), and horarun carries ``PYTHONPATH`` to the remote ranks as it does for any
job.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import textwrap
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from testbed import TestBed

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PARALLEL = os.path.join(ROOT, "tests", "parallel")


def _hora_parent() -> str:
    """The directory this process imports ``hora`` from (this checkout's ``frameworks/`` under
    PYTHONPATH=frameworks, site-packages where the wheel is installed, as in CI)."""
    spec = importlib.util.find_spec("hora")
    if spec is None or spec.origin is None:
        return os.path.join(ROOT, "frameworks")
    return os.path.dirname(os.path.dirname(os.path.abspath(spec.origin)))


HORA_PARENT = _hora_parent()
# horarun tags each line of a rank "[r]<stdout>:". Under horarun --mpi: Open MPI 4's mpirun tags
# each piece a rank writes "[job,r]<stdout>:", so one line can hold several pieces, each tagged;
# Open MPI 5's tags whole lines "[job,r]<stdout>: " (the space is not the rank's); MPICH's tags
# each piece "[r] ", on the stream the rank wrote it to.
_LAUNCHER_TAG = re.compile(r"\[(?:\d+,)?(?P<rank>\d+)\]<(?P<stream>stdout|stderr)>:")
_OPENMPI5_TAG = re.compile(r"\[\d+,(?P<rank>\d+)\]<(?P<stream>stdout|stderr)>: ")
_HYDRA_TAG = re.compile(r"\[(?P<rank>\d+)\] ")


def _tag_of(output: str) -> re.Pattern:
    """How the ranks' output of this job is tagged (see above)."""
    after_job_tags = re.findall(r"\[\d+,\d+\]<(?:stdout|stderr)>:(.?)", output)
    if after_job_tags:
        return _OPENMPI5_TAG if set(after_job_tags) == {" "} else _LAUNCHER_TAG
    if not _LAUNCHER_TAG.search(output) and re.search(r"^\[\d+\] ", output, re.MULTILINE):
        return _HYDRA_TAG
    return _LAUNCHER_TAG


@dataclass
class Job:
    """A finished horarun: exit code, output, and how long it ran."""

    returncode: int
    stdout: str
    stderr: str
    seconds: float

    @property
    def output(self) -> str:
        return self.stdout + self.stderr

    def rank_lines(self, rank: int, stream: str = "stdout") -> list[str]:
        """What rank ``rank`` printed on ``stream``, without the ``[r]<stream>:`` prefix."""
        text = self.stdout if stream == "stdout" else self.stderr
        tag_pattern = _tag_of(self.output)
        found, pending = [], ""
        for line in text.splitlines():
            tags = list(tag_pattern.finditer(line))
            if not tags or tags[0].start() != 0:
                continue
            mine = False  # whether the line's last piece is this rank's (its newline, then)
            for i, tag in enumerate(tags):
                end = tags[i + 1].start() if i + 1 < len(tags) else len(line)
                mine = (int(tag["rank"]) == rank and
                        tag.groupdict().get("stream", stream) == stream)
                if mine:
                    pending += line[tag.end():end]
            if mine:
                found.append(pending)
                pending = ""
        return found


def job_env(**extra: str) -> dict[str, str]:
    """The launcher's environment: the directory of the ``hora`` this process finds first on
    PYTHONPATH, no engine settings from the caller's shell, then ``extra``."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("HORA_", "HOROVOD_", "HORARUN_", "PYTEST_"))}
    env["PYTHONPATH"] = os.pathsep.join([HORA_PARENT,
                                         *[p for p in [env.get("PYTHONPATH")] if p]])
    env.update(extra)
    return env


def horarun_argv(bed: TestBed, hosts: str | None, flags: Sequence[str],
                 command: Sequence[str]) -> list[str]:
    """``python -m hora.runner -H HOSTS -p 22 -i KEY FLAGS... COMMAND...`` in the launcher's
    namespace (without ``-H`` when ``hosts`` is None: the flags say where, e.g. with
    ``--host-discovery-script``)."""
    where = ["-H", hosts] if hosts is not None else []
    return bed.in_launcher([sys.executable, "-m", "hora.runner", *where, *bed.ssh_args(),
                            *flags, *command])


def python_command(script: str) -> list[str]:
    """``python -c SCRIPT`` (dedented) for the ranks."""
    return [sys.executable, "-c", textwrap.dedent(script)]


def pytest_command(*files: str) -> list[str]:
    """The ranks run these files of tests/parallel with pytest, as tests/run_all.sh does."""
    return [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
            *[os.path.join(PARALLEL, f) for f in files]]


def horarun(bed: TestBed, hosts: str, command: Sequence[str], flags: Sequence[str] = (),
            env: Mapping[str, str] | None = None, timeout: float = 120) -> Job:
    """Runs horarun to its end in the bed's launcher namespace (from this checkout's root)."""
    start = time.monotonic()
    result = subprocess.run(horarun_argv(bed, hosts, flags, command), env=job_env(**(env or {})),
                            cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                            check=False)
    return Job(result.returncode, result.stdout, result.stderr, time.monotonic() - start)


def start_horarun(bed: TestBed, hosts: str | None, command: Sequence[str], flags: Sequence[str] = (),
                  env: Mapping[str, str] | None = None) -> subprocess.Popen:
    """horarun started in the background, its stdout and stderr as text pipes."""
    return subprocess.Popen(horarun_argv(bed, hosts, flags, command),
                            env=job_env(**(env or {})), cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def pytest_summary(job: Job) -> str:
    """Rank 0's pytest summary line ("207 passed in 3.1s"), or "" when there is none."""
    for line in reversed(job.rank_lines(0)):
        if re.search(r"\d+ (passed|failed)", line):
            return line.strip("= ")
    return ""
